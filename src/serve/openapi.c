/* openapi.c — the OpenAPI 3.0 document of the server's API (GET /openapi.json).
 *
 * It describes what this server accepts and returns, with request schemas loose enough for
 * the official SDKs' full request shapes (additionalProperties allowed) and response schemas
 * strict enough for a conformance checker (schemathesis) to catch a wrong field type.  A
 * request the schema admits must not be one the parser refuses for its shape (an empty model,
 * a thinking object without its type).  A streaming answer is text/event-stream; OpenAPI 3.0
 * cannot type the events, so the media type carries x-event-schema, the schema of each event's
 * `data:` JSON (the tests validate streamed events against it). */
#include "serve/openapi.h"

#define ERR_REF "{\"$ref\":\"#/components/responses/Error\"}"
#define ERRS "\"400\":" ERR_REF ",\"401\":" ERR_REF ",\"404\":" ERR_REF ",\"413\":" ERR_REF ",\"429\":" ERR_REF \
             ",\"503\":" ERR_REF
#define SEC "\"security\":[{\"bearer\":[]},{\"apiKey\":[]}]"
#define POST(summary, id, req_schema, resp_schema, event_schema)                                                    \
    "{\"post\":{\"summary\":\"" summary "\",\"operationId\":\"" id "\"," SEC ","                                    \
    "\"requestBody\":{\"required\":true,\"content\":{\"application/json\":{\"schema\":{\"$ref\":\"#/components/" \
    "schemas/" req_schema "\"}}}},"                                                                                 \
    "\"responses\":{\"200\":{\"description\":\"The response (JSON), or an SSE stream when stream is true\","       \
    "\"content\":{\"application/json\":{\"schema\":{\"$ref\":\"#/components/schemas/" resp_schema "\"}},"          \
    "\"text/event-stream\":{\"schema\":{\"type\":\"string\",\"description\":\"Server-sent events: each "             \
    "'data: ' line holds one JSON event (x-event-schema); the OpenAI protocols end with 'data: [DONE]', "             \
    "Anthropic Messages and Responses name each event in an 'event: ' line\"},"                                     \
    "\"x-event-schema\":{\"$ref\":\"#/components/schemas/" event_schema "\"}}}}," ERRS "}}}"
/* What the parser requires of fields every request schema shares. */
#define MODEL_PROP "\"model\":{\"type\":\"string\",\"minLength\":1}"
#define THINKING_PROP                                                                                               \
    "\"thinking\":{\"type\":\"object\",\"nullable\":true,\"required\":[\"type\"],\"properties\":{\"type\":{\"type\":"     \
    "\"string\",\"enum\":[\"enabled\",\"adaptive\",\"disabled\"]},\"budget_tokens\":{\"type\":\"integer\",\"minimum\":0}}}"
/* Usage, also inline where it is nullable (OpenAPI 3.0 cannot make a $ref nullable). */
#define USAGE_FIELDS                                                                                                \
    "\"required\":[\"prompt_tokens\",\"completion_tokens\",\"total_tokens\"],\"properties\":{\"prompt_tokens\":{"     \
    "\"type\":\"integer\"},\"completion_tokens\":{\"type\":\"integer\"},\"total_tokens\":{\"type\":\"integer\"},"     \
    "\"prompt_cache_hit_tokens\":{\"type\":\"integer\"},\"prompt_cache_miss_tokens\":{\"type\":\"integer\"}}"
#define FINISH_REASON "{\"type\":\"string\",\"nullable\":true,\"enum\":[\"stop\",\"length\",\"tool_calls\",null]}"
#define JSON_BODY(schema) "\"requestBody\":{\"required\":true,\"content\":{\"application/json\":{\"schema\":" schema "}}}"
#define JSON_200(desc, schema)                                                                                      \
    "\"200\":{\"description\":\"" desc "\",\"content\":{\"application/json\":{\"schema\":" schema "}}}"

static const char k_document[] =
    "{\"openapi\":\"3.0.3\","
    "\"info\":{\"title\":\"deepinfer HTTP API\",\"version\":\"0.1.0\",\"description\":\"OpenAI Chat Completions, "
    "Completions, Responses and Anthropic Messages for DeepSeek-V4.1-Flash.\"},"
    "\"servers\":[{\"url\":\"/\"}],"
    "\"paths\":{"
    "\"/v1/chat/completions\":" POST("Chat Completions (OpenAI)", "createChatCompletion", "ChatRequest", "ChatCompletion",
                                     "ChatCompletionChunk") ","
    "\"/v1/completions\":" POST("Completions on a raw prompt (OpenAI)", "createCompletion", "CompletionRequest", "Completion",
                                "CompletionChunk") ","
    "\"/v1/responses\":" POST("Responses (OpenAI)", "createResponse", "ResponsesRequest", "Response", "ResponseStreamEvent") ","
    "\"/v1/messages\":" POST("Messages (Anthropic)", "createMessage", "MessagesRequest", "Message", "MessageStreamEvent") ","
    "\"/v1/models/{model}\":{\"get\":{\"summary\":\"One model (404 unless it is the served one)\",\"operationId\":"
    "\"retrieveModel\"," SEC ",\"parameters\":[{\"name\":\"model\",\"in\":\"path\",\"required\":true,\"schema\":{"
    "\"type\":\"string\"}}],\"responses\":{" JSON_200("The model", "{\"$ref\":\"#/components/schemas/Model\"}") ","
    "\"401\":" ERR_REF ",\"404\":" ERR_REF "}}},"
    "\"/tokenize\":{\"post\":{\"summary\":\"Prompt ids of a raw prompt or of a chat (vLLM)\",\"operationId\":\"tokenize\","
    SEC "," JSON_BODY("{\"$ref\":\"#/components/schemas/TokenizeRequest\"}") ",\"responses\":{"
    JSON_200("The ids", "{\"$ref\":\"#/components/schemas/TokenizeResponse\"}") ",\"400\":" ERR_REF ",\"401\":" ERR_REF
    ",\"404\":" ERR_REF ",\"413\":" ERR_REF ",\"501\":" ERR_REF "}}},"
    "\"/detokenize\":{\"post\":{\"summary\":\"Text of token ids (vLLM)\",\"operationId\":\"detokenize\"," SEC ","
    JSON_BODY("{\"type\":\"object\",\"required\":[\"tokens\"],\"properties\":{" MODEL_PROP ",\"tokens\":{\"type\":"
              "\"array\",\"items\":{\"type\":\"integer\",\"minimum\":0}}}}") ",\"responses\":{"
    JSON_200("The text", "{\"type\":\"object\",\"required\":[\"prompt\"],\"properties\":{\"prompt\":{\"type\":\"string\"}}}")
    ",\"400\":" ERR_REF ",\"401\":" ERR_REF ",\"404\":" ERR_REF ",\"413\":" ERR_REF ",\"501\":" ERR_REF "}}},"
    "\"/version\":{\"get\":{\"summary\":\"Server version\",\"operationId\":\"version\",\"responses\":{"
    JSON_200("The version", "{\"type\":\"object\",\"required\":[\"version\"],\"properties\":{\"version\":{\"type\":"
             "\"string\"}}}") "}}},"
    "\"/v1/models\":{\"get\":{\"summary\":\"The served model\",\"operationId\":\"listModels\"," SEC ","
    "\"responses\":{\"200\":{\"description\":\"Model list\",\"content\":{\"application/json\":{\"schema\":{\"$ref\":"
    "\"#/components/schemas/ModelList\"}}}},\"401\":" ERR_REF "}}},"
    "\"/health\":{\"get\":{\"summary\":\"Liveness\",\"operationId\":\"health\",\"responses\":{"
    "\"200\":{\"description\":\"Serving\",\"content\":{\"application/json\":{\"schema\":{\"type\":\"object\","
    "\"required\":[\"status\"],\"properties\":{\"status\":{\"type\":\"string\"}}}}}},"
    "\"503\":{\"description\":\"Shutting down\"}}}},"
    "\"/metrics\":{\"get\":{\"summary\":\"Prometheus metrics\",\"operationId\":\"metrics\"," SEC ",\"responses\":{"
    "\"200\":{\"description\":\"Text exposition format 0.0.4\",\"content\":{\"text/plain\":{\"schema\":{\"type\":"
    "\"string\"}}}},\"401\":" ERR_REF "}}},"
    "\"/openapi.json\":{\"get\":{\"summary\":\"This document\",\"operationId\":\"openapi\",\"responses\":{\"200\":{"
    "\"description\":\"OpenAPI 3 document\",\"content\":{\"application/json\":{\"schema\":{\"type\":\"object\"}}}}}}}"
    "},"
    "\"components\":{"
    "\"securitySchemes\":{\"bearer\":{\"type\":\"http\",\"scheme\":\"bearer\"},"
    "\"apiKey\":{\"type\":\"apiKey\",\"in\":\"header\",\"name\":\"x-api-key\"}},"
    "\"responses\":{\"Error\":{\"description\":\"Error in the protocol's shape\",\"content\":{\"application/json\":"
    "{\"schema\":{\"$ref\":\"#/components/schemas/Error\"}}}}},"
    "\"schemas\":{"
    "\"Error\":{\"type\":\"object\",\"required\":[\"error\"],\"properties\":{\"error\":{\"type\":\"object\","
    "\"required\":[\"message\",\"type\"],\"properties\":{\"message\":{\"type\":\"string\"},\"type\":{\"type\":"
    "\"string\"}}},\"type\":{\"type\":\"string\"}}},"
    "\"Usage\":{\"type\":\"object\"," USAGE_FIELDS "},"
    "\"ChatMessage\":{\"type\":\"object\",\"required\":[\"role\"],\"properties\":{\"role\":{\"type\":\"string\","
    "\"enum\":[\"system\",\"user\",\"assistant\",\"tool\",\"latest_reminder\"]},\"content\":{\"nullable\":true,"
    "\"oneOf\":[{\"type\":\"string\"},{\"type\":\"array\",\"items\":{\"type\":\"object\"}}]},"
    "\"reasoning_content\":{\"type\":\"string\",\"nullable\":true},\"tool_call_id\":{\"type\":\"string\"},"
    "\"tool_calls\":{\"type\":\"array\",\"items\":{\"type\":\"object\"}},"
    "\"prefix\":{\"type\":\"boolean\",\"nullable\":true}}},"
    "\"ChatRequest\":{\"type\":\"object\",\"required\":[\"model\",\"messages\"],\"properties\":{"
    MODEL_PROP ",\"messages\":{\"type\":\"array\",\"minItems\":1,\"items\":{\"$ref\":"
    "\"#/components/schemas/ChatMessage\"}},\"stream\":{\"type\":\"boolean\"},\"max_tokens\":{\"type\":\"integer\","
    "\"minimum\":1,\"maximum\":393216},\"temperature\":{\"type\":\"number\",\"minimum\":0,\"maximum\":2},"
    "\"top_p\":{\"type\":\"number\",\"exclusiveMinimum\":true,\"minimum\":0,\"maximum\":1},"
    "\"stop\":{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"array\",\"maxItems\":16,\"items\":{\"type\":\"string\"}}]},"
    "\"tools\":{\"type\":\"array\",\"items\":{\"type\":\"object\"}},\"tool_choice\":{},"
    "\"reasoning_effort\":{\"type\":\"string\",\"enum\":[\"none\",\"minimal\",\"low\",\"medium\",\"high\",\"xhigh\","
    "\"ultra\",\"max\"]}," THINKING_PROP "}},"
    "\"ChatCompletion\":{\"type\":\"object\",\"required\":[\"id\",\"object\",\"created\",\"model\",\"choices\","
    "\"usage\"],\"properties\":{\"id\":{\"type\":\"string\"},\"object\":{\"type\":\"string\",\"enum\":"
    "[\"chat.completion\"]},\"created\":{\"type\":\"integer\"},\"model\":{\"type\":\"string\"},\"choices\":{\"type\":"
    "\"array\",\"items\":{\"type\":\"object\",\"required\":[\"index\",\"message\",\"finish_reason\"],\"properties\":{"
    "\"index\":{\"type\":\"integer\"},\"message\":{\"type\":\"object\",\"required\":[\"role\"],\"properties\":{"
    "\"role\":{\"type\":\"string\"},\"content\":{\"type\":\"string\",\"nullable\":true},\"reasoning_content\":{"
    "\"type\":\"string\",\"nullable\":true},\"tool_calls\":{\"type\":\"array\",\"items\":{\"type\":\"object\"}}}},"
    "\"finish_reason\":{\"type\":\"string\",\"enum\":[\"stop\",\"length\",\"tool_calls\"]}}}},"
    "\"usage\":{\"$ref\":\"#/components/schemas/Usage\"}}},"
    "\"CompletionRequest\":{\"type\":\"object\",\"required\":[\"model\",\"prompt\"],\"properties\":{" MODEL_PROP ","
    "\"prompt\":{\"type\":\"string\"},\"stream\":{\"type\":\"boolean\"},\"max_tokens\":{"
    "\"type\":\"integer\",\"minimum\":1,\"maximum\":393216}}},"
    "\"Completion\":{\"type\":\"object\",\"required\":[\"id\",\"object\",\"choices\",\"usage\"],\"properties\":{"
    "\"id\":{\"type\":\"string\"},\"object\":{\"type\":\"string\",\"enum\":[\"text_completion\"]},\"choices\":{"
    "\"type\":\"array\",\"items\":{\"type\":\"object\",\"required\":[\"text\",\"index\",\"finish_reason\"]}},"
    "\"usage\":{\"$ref\":\"#/components/schemas/Usage\"}}},"
    "\"ResponsesRequest\":{\"type\":\"object\",\"required\":[\"model\",\"input\"],\"properties\":{" MODEL_PROP ","
    "\"input\":{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"array\",\"minItems\":1,\"items\":"
    "{\"type\":\"object\"}}]},\"instructions\":{\"type\":\"string\",\"nullable\":true},\"stream\":{\"type\":"
    "\"boolean\"},\"max_output_tokens\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":393216},\"tools\":{\"type\":"
    "\"array\",\"items\":{\"type\":\"object\"}},\"reasoning\":{\"type\":\"object\"}}},"
    "\"Response\":{\"type\":\"object\",\"required\":[\"id\",\"object\",\"created_at\",\"status\",\"model\","
    "\"output\"],\"properties\":{\"id\":{\"type\":\"string\"},\"object\":{\"type\":\"string\",\"enum\":"
    "[\"response\"]},\"created_at\":{\"type\":\"integer\"},\"status\":{\"type\":\"string\",\"enum\":[\"completed\","
    "\"incomplete\",\"failed\",\"in_progress\"]},\"model\":{\"type\":\"string\"},\"output\":{\"type\":\"array\","
    "\"items\":{\"type\":\"object\",\"required\":[\"type\"]}},\"usage\":{\"type\":\"object\",\"nullable\":true}}},"
    "\"MessagesRequest\":{\"type\":\"object\",\"required\":[\"model\",\"max_tokens\",\"messages\"],\"properties\":{"
    MODEL_PROP ",\"max_tokens\":{\"type\":\"integer\",\"minimum\":1},\"messages\":{\"type\":"
    "\"array\",\"minItems\":1,\"items\":{\"type\":\"object\",\"required\":[\"role\",\"content\"],\"properties\":{"
    "\"role\":{\"type\":\"string\",\"enum\":[\"user\",\"assistant\"]},\"content\":{\"oneOf\":[{\"type\":\"string\"},"
    "{\"type\":\"array\",\"items\":{\"type\":\"object\"}}]}}}},\"system\":{\"oneOf\":[{\"type\":\"string\"},{\"type\":"
    "\"array\",\"items\":{\"type\":\"object\"}}]},\"stream\":{\"type\":\"boolean\"},\"stop_sequences\":{\"type\":"
    "\"array\",\"maxItems\":16,\"items\":{\"type\":\"string\",\"minLength\":1}},\"tools\":{\"type\":\"array\","
    "\"items\":{\"type\":\"object\"}}," THINKING_PROP "}},"
    "\"Message\":{\"type\":\"object\",\"required\":[\"id\",\"type\",\"role\",\"model\",\"content\",\"stop_reason\","
    "\"usage\"],\"properties\":{\"id\":{\"type\":\"string\"},\"type\":{\"type\":\"string\",\"enum\":[\"message\"]},"
    "\"role\":{\"type\":\"string\",\"enum\":[\"assistant\"]},\"model\":{\"type\":\"string\"},\"content\":{\"type\":"
    "\"array\",\"items\":{\"type\":\"object\",\"required\":[\"type\"]}},\"stop_reason\":{\"type\":\"string\","
    "\"enum\":[\"end_turn\",\"max_tokens\",\"stop_sequence\",\"tool_use\"]},\"stop_sequence\":{\"type\":\"string\","
    "\"nullable\":true},\"usage\":{\"type\":\"object\",\"required\":[\"input_tokens\",\"output_tokens\"]}}},"
    "\"ModelList\":{\"type\":\"object\",\"required\":[\"object\",\"data\"],\"properties\":{\"object\":{\"type\":"
    "\"string\"},\"data\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"required\":[\"id\",\"object\"],"
    "\"properties\":{\"id\":{\"type\":\"string\"},\"object\":{\"type\":\"string\"}}}}}},"
    "\"Model\":{\"type\":\"object\",\"required\":[\"id\",\"object\",\"owned_by\"],\"properties\":{\"id\":{\"type\":"
    "\"string\"},\"object\":{\"type\":\"string\",\"enum\":[\"model\"]},\"created\":{\"type\":\"integer\"},"
    "\"owned_by\":{\"type\":\"string\"},\"max_model_len\":{\"type\":\"integer\"}}},"
    "\"TokenizeRequest\":{\"oneOf\":[{\"type\":\"object\",\"required\":[\"prompt\"],\"additionalProperties\":false,"
    "\"properties\":{" MODEL_PROP ",\"prompt\":{\"type\":\"string\"},\"add_special_tokens\":{\"type\":\"boolean\"}}},"
    "{\"type\":\"object\",\"required\":[\"messages\"],\"additionalProperties\":false,\"properties\":{" MODEL_PROP ","
    "\"messages\":{\"type\":\"array\",\"minItems\":1,\"items\":{\"$ref\":\"#/components/schemas/ChatMessage\"}},"
    "\"add_special_tokens\":{\"type\":\"boolean\",\"enum\":[false]},\"tools\":{\"type\":\"array\",\"items\":{"
    "\"type\":\"object\"}},\"tool_choice\":{},\"reasoning_effort\":{\"type\":\"string\"}," THINKING_PROP "}}]},"
    "\"TokenizeResponse\":{\"type\":\"object\",\"required\":[\"count\",\"max_model_len\",\"tokens\"],\"properties\":{"
    "\"count\":{\"type\":\"integer\",\"minimum\":0},\"max_model_len\":{\"type\":\"integer\"},\"tokens\":{\"type\":"
    "\"array\",\"items\":{\"type\":\"integer\",\"minimum\":0}}}},"
    "\"ChatCompletionChunk\":{\"type\":\"object\",\"required\":[\"id\",\"object\",\"created\",\"model\",\"choices\"],"
    "\"properties\":{\"id\":{\"type\":\"string\"},\"object\":{\"type\":\"string\",\"enum\":[\"chat.completion.chunk\"]},"
    "\"created\":{\"type\":\"integer\"},\"model\":{\"type\":\"string\"},\"choices\":{\"type\":\"array\",\"items\":{"
    "\"type\":\"object\",\"required\":[\"index\",\"delta\",\"finish_reason\"],\"properties\":{\"index\":{\"type\":"
    "\"integer\"},\"delta\":{\"type\":\"object\",\"properties\":{\"role\":{\"type\":\"string\"},\"content\":{\"type\":"
    "\"string\",\"nullable\":true},\"reasoning_content\":{\"type\":\"string\",\"nullable\":true},\"tool_calls\":{"
    "\"type\":\"array\",\"items\":{\"type\":\"object\",\"required\":[\"index\"]}}}},\"finish_reason\":" FINISH_REASON
    "}}},\"usage\":{\"type\":\"object\",\"nullable\":true," USAGE_FIELDS "}}},"
    "\"CompletionChunk\":{\"type\":\"object\",\"required\":[\"id\",\"object\",\"created\",\"model\",\"choices\"],"
    "\"properties\":{\"id\":{\"type\":\"string\"},\"object\":{\"type\":\"string\",\"enum\":[\"text_completion\"]},"
    "\"created\":{\"type\":\"integer\"},\"model\":{\"type\":\"string\"},\"choices\":{\"type\":\"array\",\"items\":{"
    "\"type\":\"object\",\"required\":[\"text\",\"index\",\"finish_reason\"],\"properties\":{\"text\":{\"type\":"
    "\"string\"},\"index\":{\"type\":\"integer\"},\"finish_reason\":" FINISH_REASON "}}},\"usage\":{\"type\":\"object\","
    "\"nullable\":true," USAGE_FIELDS "}}},"
    "\"ResponseStreamEvent\":{\"type\":\"object\",\"required\":[\"type\",\"sequence_number\"],\"properties\":{"
    "\"type\":{\"type\":\"string\",\"pattern\":\"^(response|error)\"},\"sequence_number\":{\"type\":\"integer\","
    "\"minimum\":0},\"response\":{\"$ref\":\"#/components/schemas/Response\"},\"delta\":{\"type\":\"string\"},"
    "\"output_index\":{\"type\":\"integer\"},\"item\":{\"type\":\"object\",\"required\":[\"type\"]}}},"
    "\"MessageStreamEvent\":{\"type\":\"object\",\"required\":[\"type\"],\"properties\":{\"type\":{\"type\":\"string\","
    "\"enum\":[\"message_start\",\"content_block_start\",\"content_block_delta\",\"content_block_stop\","
    "\"message_delta\",\"message_stop\",\"ping\",\"error\"]},\"message\":{\"type\":\"object\",\"required\":[\"id\","
    "\"type\",\"role\",\"content\",\"model\"]},\"index\":{\"type\":\"integer\"},\"content_block\":{\"type\":\"object\","
    "\"required\":[\"type\"]},\"delta\":{\"type\":\"object\"},\"usage\":{\"type\":\"object\"}}}"
    "}}}";

const char *di_openapi_document(void) { return k_document; }
