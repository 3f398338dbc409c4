/* test_api.c — protocol conversion (recipe/api_request.h) and output encoding
 * (recipe/api_stream.h) on hand-derived cases from recipe.md §4 (the official conversion's
 * rules and shapes; tests/python/test_api_oracle.py checks the same against deepseek-recipe). */
#include "test.h"

#include "base/error.h"
#include "recipe/api_request.h"
#include "recipe/api_stream.h"

#include <stdio.h>

static int parse(DiApiProtocol p, const char *body, DiApiRequest *req, int *status) {
    return di_api_request_parse(p, body, strlen(body), req, status);
}

static const char *msg_field(const DiApiRequest *r, size_t i, const char *key) {
    return json_string_value(json_object_get(json_array_get(json_object_get(r->conversation, "messages"), i), key));
}

TEST(chat_defaults_thinking_high) {
    DiApiRequest r;
    int st = 0;
    CHECK_EQ_INT(parse(DI_API_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"\"},"
                                    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}],"
                                    "\"temperature\":0.3,\"top_p\":0.5}", &r, &st), 0);
    CHECK(r.thinking);
    CHECK_STR(r.reasoning_effort, "high");
    CHECK_NEAR(r.temperature, 1.0, 0);   /* thinking fixes temperature */
    CHECK_NEAR(r.top_p, 0.95, 1e-12);    /* and clamps top_p to [0.95, 1] */
    CHECK_EQ_INT(json_array_size(json_object_get(r.conversation, "messages")), 1); /* empty system dropped */
    CHECK_STR(msg_field(&r, 0, "content"), "a\n\nb");
    CHECK_STR(json_string_value(json_object_get(r.conversation, "thinking_mode")), "thinking");
    CHECK_EQ_INT(di_api_resolve_max_tokens(&r, 100, 1000000), DI_API_DEFAULT_MAX_TOKENS_THINKING);
    di_api_request_free(&r);
}

TEST(chat_effort_and_switch) {
    DiApiRequest r;
    CHECK_EQ_INT(parse(DI_API_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                                    "\"reasoning_effort\":\"none\",\"temperature\":0.3}", &r, NULL), 0);
    CHECK(!r.thinking);
    CHECK_NEAR(r.temperature, 0.3, 1e-12);
    CHECK_EQ_INT(di_api_resolve_max_tokens(&r, 100, 1000000), DI_API_DEFAULT_MAX_TOKENS_CHAT);
    CHECK_EQ_INT(di_api_resolve_max_tokens(&r, 100, 150), 50); /* lowered to the context left */
    di_api_request_free(&r);
    CHECK_EQ_INT(parse(DI_API_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                                    "\"reasoning_effort\":\"minimal\"}", &r, NULL), 0);
    CHECK(r.thinking);
    CHECK_STR(r.reasoning_effort, "low");
    di_api_request_free(&r);
    CHECK_EQ_INT(parse(DI_API_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                                    "\"thinking\":{\"type\":\"enabled\"},\"reasoning_effort\":\"none\"}", &r, NULL), 0);
    CHECK(r.thinking); /* the explicit switch wins */
    di_api_request_free(&r);
}

/* The render input carries what changes the template: a required (or named) tool choice and
 * JSON mode; auto and text add nothing (recipe.md §2.2, §4.1). */
TEST(chat_render_input_has_tool_choice_and_json_mode) {
    static const char tools[] = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},"
                                "{\"type\":\"function\",\"function\":{\"name\":\"g\"}}]";
    char body[512];
    DiApiRequest r;
    snprintf(body, sizeof body, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s,"
             "\"tool_choice\":\"required\",\"reasoning_effort\":\"none\"}", tools);
    CHECK_EQ_INT(parse(DI_API_CHAT, body, &r, NULL), 0);
    CHECK_STR(json_string_value(json_object_get(r.conversation, "tool_choice")), "required");
    CHECK(!json_object_get(r.conversation, "response_format"));
    di_api_request_free(&r);
    snprintf(body, sizeof body, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s,"
             "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}},\"reasoning_effort\":\"none\"}", tools);
    CHECK_EQ_INT(parse(DI_API_CHAT, body, &r, NULL), 0);
    CHECK_STR(json_string_value(json_object_get(r.conversation, "tool_choice")), "required");
    CHECK_EQ_INT(json_array_size(json_object_get(r.conversation, "tools")), 1);
    di_api_request_free(&r);
    snprintf(body, sizeof body, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"json x\"}],%s,"
             "\"tool_choice\":\"auto\",\"response_format\":{\"type\":\"json_object\"}}", tools);
    CHECK_EQ_INT(parse(DI_API_CHAT, body, &r, NULL), 0);
    CHECK(!json_object_get(r.conversation, "tool_choice"));
    CHECK_STR(json_string_value(json_object_get(json_object_get(r.conversation, "response_format"), "type")), "json_object");
    di_api_request_free(&r);
}

TEST(chat_rejections_name_the_problem) {
    static const char *const cases[][2] = {
        {"{\"model\":\"m\",\"messages\":[]}", "Empty input messages"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":3}", "temperature"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_p\":0}", "top_p"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":2}", "n = 1"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":0}", "max_tokens"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream_options\":{}}", "stream_options"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"developer\",\"content\":\"x\"}]}", "developer"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_object\"}}", "json"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]}", "pattern"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":\"required\"}", "thinking"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"content\":null}]}", "content or tool_calls"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"c2\",\"content\":\"r\"}]}", "c2"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}", "too long"},
        {"{\"messages\":[]}", "model"},
        {"{\"model\":\"m\"}", "messages: expected an array, got nothing"}, /* found by fuzz_api_request */
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"a\":1,\"a\":2}", "duplicate"},
        {"[]", "JSON object"},
        {"{\"model\":", "Invalid JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        DiApiRequest r;
        int st = 0;
        di_error_clear();
        CHECK_MSG(parse(DI_API_CHAT, cases[i][0], &r, &st) == -1, "case %zu accepted", i);
        CHECK_EQ_INT(st, 400);
        CHECK_MSG(strstr(di_error_message(), cases[i][1]) != NULL, "case %zu: '%s' lacks '%s'", i, di_error_message(), cases[i][1]);
    }
}

/* Integers past 64 bits are doubles (as serde_json reads them); 2^63..2^64-1 are refused;
 * numbers inside strings are left alone. */
TEST(chat_integers_past_64_bits) {
    DiApiRequest r;
    const char *body =
        "{\"model\":\"m\",\"metadata\":{\"a\":[18446744073709551616,-9223372036854775809]},\"messages\":[{\"role\":\"user\","
        "\"content\":\"99999999999999999999 \\\" 1\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
        "\"parameters\":{\"type\":\"object\",\"maximum\":100000000000000000000000,\"minimum\":-100000000000000000000}}}]}";
    CHECK_EQ_INT(parse(DI_API_CHAT, body, &r, NULL), 0);
    CHECK_STR(msg_field(&r, 0, "content"), "99999999999999999999 \" 1");
    json_t *params = json_object_get(json_object_get(json_array_get(json_object_get(r.conversation, "tools"), 0), "function"), "parameters");
    CHECK(json_is_real(json_object_get(params, "maximum")) && json_real_value(json_object_get(params, "maximum")) == 1e23);
    CHECK(json_is_real(json_object_get(params, "minimum")) && json_real_value(json_object_get(params, "minimum")) == -1e20);
    di_api_request_free(&r);
    CHECK_EQ_INT(parse(DI_API_CHAT, "{\"model\":\"m\",\"x\":9223372036854775808,\"messages\":[]}", &r, NULL), -1);
    CHECK(strstr(di_error_message(), "2^63 to 2^64-1") != NULL);
}

TEST(responses_groups_calls_by_call_id) {
    DiApiRequest r;
    const char *body =
        "{\"model\":\"m\",\"instructions\":\"sys\",\"input\":[{\"role\":\"user\",\"content\":\"q\"},"
        "{\"type\":\"reasoning\",\"content\":[{\"type\":\"reasoning_text\",\"text\":\"hmm\"}]},"
        "{\"type\":\"function_call\",\"call_id\":\"b\",\"name\":\"f\",\"arguments\":\"{}\"},"
        "{\"type\":\"function_call\",\"call_id\":\"a\",\"name\":\"g\",\"arguments\":\"{}\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"b\",\"output\":\"rb\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"a\",\"output\":\"ra\"}],\"reasoning\":{\"effort\":\"medium\"}}";
    CHECK_EQ_INT(parse(DI_API_RESPONSES, body, &r, NULL), 0);
    CHECK_STR(msg_field(&r, 0, "role"), "system");
    CHECK_STR(msg_field(&r, 2, "reasoning_content"), "hmm");
    json_t *calls = json_object_get(json_array_get(json_object_get(r.conversation, "messages"), 2), "tool_calls");
    CHECK_STR(json_string_value(json_object_get(json_array_get(calls, 0), "id")), "a");
    CHECK_STR(msg_field(&r, 3, "tool_call_id"), "a");
    CHECK_STR(msg_field(&r, 3, "content"), "ra");
    CHECK_STR(msg_field(&r, 4, "tool_call_id"), "b");
    CHECK_STR(r.reasoning_effort, "high");
    di_api_request_free(&r);
    CHECK_EQ_INT(parse(DI_API_RESPONSES, "{\"model\":\"m\",\"input\":\"x\",\"previous_response_id\":\"r1\"}", &r, NULL), -1);
    CHECK(strstr(di_error_message(), "previous_response_id") != NULL);
}

TEST(messages_tool_use_and_reminder) {
    DiApiRequest r;
    const char *body =
        "{\"model\":\"m\",\"max_tokens\":500000,\"system\":[{\"type\":\"text\",\"text\":\"s1\"},{\"type\":\"text\",\"text\":\"s2\"}],"
        "\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":["
        "{\"type\":\"thinking\",\"thinking\":\"t\"},{\"type\":\"tool_use\",\"id\":\"u1\",\"name\":\"f\",\"input\":{\"city\":\"Paris\",\"n\":1}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"u1\",\"content\":\"ok\"}]},"
        "{\"role\":\"system\",\"content\":\"late\"}],\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}],"
        "\"thinking\":{\"type\":\"disabled\"},\"stop_sequences\":[\"END\"]}";
    CHECK_EQ_INT(parse(DI_API_MESSAGES, body, &r, NULL), 0);
    CHECK_EQ_INT(r.max_tokens, DI_API_MAX_TOKENS_UPPER_BOUND); /* Messages lowers, not rejects */
    CHECK(!r.thinking);
    CHECK_STR(msg_field(&r, 0, "content"), "s1\n\ns2");
    json_t *call = json_array_get(json_object_get(json_array_get(json_object_get(r.conversation, "messages"), 2), "tool_calls"), 0);
    CHECK_STR(json_string_value(json_object_get(json_object_get(call, "function"), "arguments")), "{\"city\": \"Paris\", \"n\": 1}");
    /* thinking is off: reasoning is dropped, as the official conversion does (ReasoningContent) */
    CHECK(msg_field(&r, 2, "reasoning_content") == NULL);
    CHECK_STR(msg_field(&r, 3, "role"), "tool");
    CHECK_STR(msg_field(&r, 4, "role"), "system"); /* as the official conversion (spec: a reminder part) */
    CHECK_STR(msg_field(&r, 4, "content"), "late");
    CHECK_EQ_INT(r.n_stop, 1);
    di_api_request_free(&r);
    CHECK_EQ_INT(parse(DI_API_MESSAGES, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &r, NULL), -1);
    CHECK(strstr(di_error_message(), "max_tokens") != NULL);
}

static void feed(DiApiStream *s, DiApiEventKind kind, const char *text, DiApiBuf *sse) {
    DiApiEvent ev = {.kind = kind, .text = text, .len = text ? strlen(text) : 0, .tokens = 1};
    CHECK_EQ_INT(di_api_stream_event(s, &ev, sse), 0);
}

TEST(chat_stream_shape) {
    DiApiRequest r;
    CHECK_EQ_INT(parse(DI_API_CHAT, "{\"model\":\"m\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &r, NULL), 0);
    DiApiStream *s = di_api_stream_create(&r, "id1", 5);
    DiApiBuf sse = {0};
    DiApiEvent ready = {.kind = DI_API_EV_READY, .prompt_tokens = 10, .cache_hit_tokens = 4};
    CHECK_EQ_INT(di_api_stream_event(s, &ready, &sse), 0);
    feed(s, DI_API_EV_REASONING, "r", &sse);
    feed(s, DI_API_EV_CONTENT, "c", &sse);
    feed(s, DI_API_EV_TOOL_BEGIN, "f", &sse);
    feed(s, DI_API_EV_TOOL_ARGS, "{}", &sse);
    DiApiEvent fin = {.kind = DI_API_EV_FINISH, .finish = DI_API_FINISH_STOP};
    CHECK_EQ_INT(di_api_stream_event(s, &fin, &sse), 0);
    CHECK(strstr(sse.data, "\"delta\":{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"\"}") != NULL);
    CHECK(strstr(sse.data, "\"delta\":{\"content\":null,\"reasoning_content\":\"r\"}") != NULL);
    CHECK(strstr(sse.data, "\"delta\":{\"content\":\"c\",\"reasoning_content\":null}") != NULL);
    CHECK(strstr(sse.data, "\"function\":{\"name\":\"f\",\"arguments\":\"\"}") != NULL);
    CHECK(strstr(sse.data, "\"finish_reason\":\"tool_calls\"") != NULL);
    CHECK(strstr(sse.data, "\"prompt_cache_miss_tokens\":6") != NULL);
    CHECK(sse.len > 16 && strcmp(sse.data + sse.len - 14, "data: [DONE]\n\n") == 0);
    json_t *full = di_api_stream_response(s);
    CHECK_STR(json_string_value(json_object_get(json_array_get(json_object_get(full, "choices"), 0), "finish_reason")), "tool_calls");
    json_decref(full);
    /* Events after the finish are refused. */
    DiApiEvent late = {.kind = DI_API_EV_CONTENT, .text = "x", .len = 1};
    CHECK_EQ_INT(di_api_stream_event(s, &late, &sse), -1);
    di_api_buf_free(&sse);
    di_api_stream_free(s);
    di_api_request_free(&r);
}

TEST(messages_stream_shape_and_errors) {
    DiApiRequest r;
    CHECK_EQ_INT(parse(DI_API_MESSAGES, "{\"model\":\"m\",\"max_tokens\":9,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &r, NULL), 0);
    DiApiStream *s = di_api_stream_create(&r, "msg1", 5);
    DiApiBuf sse = {0};
    DiApiEvent ready = {.kind = DI_API_EV_READY, .prompt_tokens = 10, .cache_hit_tokens = 4};
    CHECK_EQ_INT(di_api_stream_event(s, &ready, &sse), 0);
    feed(s, DI_API_EV_REASONING, "r", &sse);
    feed(s, DI_API_EV_CONTENT, "c", &sse);
    DiApiEvent fin = {.kind = DI_API_EV_FINISH, .finish = DI_API_FINISH_STOP, .stop_sequence = "END"};
    CHECK_EQ_INT(di_api_stream_event(s, &fin, &sse), 0);
    const char *order[] = {"event: message_start", "\"input_tokens\":6", "\"cache_read_input_tokens\":4",
                           "event: content_block_start", "thinking_delta", "signature_delta", "event: content_block_stop",
                           "text_delta", "\"stop_reason\":\"stop_sequence\"", "event: message_stop"};
    const char *at = sse.data;
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        const char *next = at ? strstr(at, order[i]) : NULL;
        CHECK_MSG(next != NULL, "'%s' missing or out of order", order[i]);
        at = next;
    }
    di_api_buf_free(&sse);
    di_api_stream_free(s);
    di_api_request_free(&r);
    json_t *e = di_api_error_body(DI_API_MESSAGES, 429, "busy");
    CHECK_STR(json_string_value(json_object_get(json_object_get(e, "error"), "type")), "rate_limit_error");
    json_decref(e);
    e = di_api_error_body(DI_API_CHAT, 400, "bad");
    CHECK_STR(json_string_value(json_object_get(json_object_get(e, "error"), "type")), "invalid_request_error");
    json_decref(e);
}

TEST(invalid_utf8_output_is_replaced_not_dropped) {
    DiApiRequest r;
    CHECK_EQ_INT(parse(DI_API_MESSAGES, "{\"model\":\"m\",\"stream\":true,\"max_tokens\":9,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &r, NULL), 0);
    DiApiStream *s = di_api_stream_create(&r, "m1", 5);
    DiApiBuf sse = {0};
    DiApiEvent ready = {.kind = DI_API_EV_READY, .prompt_tokens = 3};
    CHECK_EQ_INT(di_api_stream_event(s, &ready, &sse), 0);
    DiApiEvent bad = {.kind = DI_API_EV_CONTENT, .text = "a\x92" "b\0c", .len = 5, .tokens = 1}; /* found by fuzz_api_output */
    CHECK_EQ_INT(di_api_stream_event(s, &bad, &sse), 0);
    CHECK(strstr(sse.data, "\"text\":\"a\xEF\xBF\xBD" "b\xEF\xBF\xBD" "c\"") != NULL);
    DiApiEvent name = {.kind = DI_API_EV_TOOL_BEGIN, .text = "f\xad", .len = 2}; /* a model-made name, bad UTF-8 */
    CHECK_EQ_INT(di_api_stream_event(s, &name, &sse), 0);
    CHECK(strstr(sse.data, "\"name\":\"f\xEF\xBF\xBD\"") != NULL);
    DiApiEvent empty = {.kind = DI_API_EV_TOOL_BEGIN, .text = "", .len = 0}; /* invoke name="" */
    CHECK_EQ_INT(di_api_stream_event(s, &empty, &sse), 0);
    di_api_buf_free(&sse);
    di_api_stream_free(s);
    di_api_request_free(&r);
}

/* Every top-level field is honoured or refused with a 400 naming it (README "Request parameters"). */
#define USER_MSG "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"
static void refused(DiApiProtocol p, const char *body, const char *needle) {
    DiApiRequest r;
    int st = 0;
    CHECK_EQ_INT(parse(p, body, &r, &st), -1);
    CHECK_EQ_INT(st, 400);
    CHECK_MSG(strstr(di_error_message(), needle) != NULL, "%s: got '%s'", needle, di_error_message());
}

TEST(request_parameters_are_honoured_or_refused) {
    DiApiRequest r;
    CHECK_EQ_INT(parse(DI_API_CHAT, "{\"model\":\"m\"," USER_MSG ",\"logprobs\":true,\"top_logprobs\":3,"
                                    "\"max_tokens\":10,\"max_completion_tokens\":7,\"top_k\":5,\"min_p\":0.1,"
                                    "\"repetition_penalty\":1.2,\"min_tokens\":2,\"ignore_eos\":true,"
                                    "\"logit_bias\":{\"5\":100,\"7\":-3.5},\"user\":\"u\",\"thinking\":"
                                    "{\"type\":\"enabled\",\"budget_tokens\":12}}", &r, NULL), 0);
    CHECK_EQ_INT(r.logprobs, 3);
    CHECK_EQ_INT(r.max_tokens, 7); /* the lower of max_tokens and max_completion_tokens */
    CHECK_EQ_INT(r.top_k, 5);
    CHECK_NEAR(r.min_p, 0.1, 1e-12);
    CHECK_NEAR(r.repetition_penalty, 1.2, 1e-12);
    CHECK_EQ_INT(r.min_tokens, 2);
    CHECK(r.ignore_eos);
    CHECK_EQ_INT(r.n_logit_bias, 2);
    CHECK_EQ_INT(r.logit_bias[0].token, 5);
    CHECK_NEAR(r.logit_bias[1].bias, -3.5, 0);
    CHECK_EQ_INT(r.thinking_budget_tokens, 12);
    di_api_request_free(&r);
    CHECK_EQ_INT(parse(DI_API_CHAT, "{\"model\":\"m\"," USER_MSG ",\"max_completion_tokens\":9}", &r, NULL), 0);
    CHECK_EQ_INT(r.max_tokens, 9);
    CHECK_EQ_INT(r.logprobs, -1);
    CHECK_EQ_INT(r.thinking_budget_tokens, -1);
    di_api_request_free(&r);
    refused(DI_API_CHAT, "{\"model\":\"m\"," USER_MSG ",\"top_logprobs\":2}", "logprobs must be set to true");
    refused(DI_API_CHAT, "{\"model\":\"m\"," USER_MSG ",\"logprobs\":true,\"top_logprobs\":21}", "top_logprobs is [0, 20]");
    refused(DI_API_CHAT, "{\"model\":\"m\"," USER_MSG ",\"logit_bias\":{\"5\":101}}", "logit_bias['5']");
    refused(DI_API_CHAT, "{\"model\":\"m\"," USER_MSG ",\"logit_bias\":{\"a\":1}}", "logit_bias: key 'a'");
    refused(DI_API_CHAT, "{\"model\":\"m\"," USER_MSG ",\"max_tokens\":3,\"min_tokens\":4}", "min_tokens");
    refused(DI_API_CHAT, "{\"model\":\"m\"," USER_MSG ",\"bogus\":1}", "Unrecognized request argument supplied: bogus");
    refused(DI_API_CHAT, "{\"model\":\"m\"," USER_MSG ",\"parallel_tool_calls\":false}", "parallel_tool_calls");
    refused(DI_API_CHAT, "{\"model\":\"m\"," USER_MSG ",\"store\":true}", "store");
    refused(DI_API_CHAT, "{\"model\":\"m\"," USER_MSG ",\"n\":2}", "n = 1");
    refused(DI_API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":\"p\",\"echo\":true}", "echo");
    refused(DI_API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":\"p\",\"best_of\":2}", "best_of");
    refused(DI_API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":\"p\",\"suffix\":\"s\"}", "suffix");
    refused(DI_API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":\"p\",\"logprobs\":21}", "logprobs is [0, 20]");
    CHECK_EQ_INT(parse(DI_API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":\"p\",\"echo\":false,\"best_of\":1,"
                                           "\"suffix\":null,\"logprobs\":2}", &r, NULL), 0);
    CHECK_EQ_INT(r.logprobs, 2);
    di_api_request_free(&r);
    CHECK_EQ_INT(parse(DI_API_RESPONSES, "{\"model\":\"m\",\"input\":\"x\",\"top_logprobs\":4}", &r, NULL), 0);
    CHECK_EQ_INT(r.logprobs, 4); /* top_logprobs alone asks for logprobs (official conversion) */
    di_api_request_free(&r);
    CHECK_EQ_INT(parse(DI_API_RESPONSES, "{\"model\":\"m\",\"input\":\"x\",\"include\":[\"message.output_text.logprobs\"]}",
                       &r, NULL), 0);
    CHECK_EQ_INT(r.logprobs, 0);
    di_api_request_free(&r);
    refused(DI_API_RESPONSES, "{\"model\":\"m\",\"input\":\"x\",\"include\":[\"file_search_call.results\"]}", "include[0]");
    CHECK_EQ_INT(parse(DI_API_RESPONSES, "{\"model\":\"m\",\"input\":\"x\",\"include\":[\"reasoning.encrypted_content\"]}",
                       &r, NULL), 0);
    CHECK_EQ_INT(r.logprobs, -1);
    di_api_request_free(&r);
    refused(DI_API_RESPONSES, "{\"model\":\"m\",\"input\":\"x\",\"logprobs\":true}", "argument supplied: logprobs");
    refused(DI_API_MESSAGES, "{\"model\":\"m\",\"max_tokens\":5," USER_MSG ",\"bogus\":1}",
            "bogus: Extra inputs are not permitted");
    refused(DI_API_MESSAGES, "{\"model\":\"m\",\"max_tokens\":5," USER_MSG ",\"min_p\":0.5}", "min_p");
#define MTOOL "\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}]"
    CHECK_EQ_INT(parse(DI_API_MESSAGES, "{\"model\":\"m\",\"max_tokens\":5," USER_MSG ",\"top_k\":3," MTOOL ","
                                        "\"thinking\":{\"type\":\"disabled\"},\"tool_choice\":{\"type\":\"any\"}}",
                       &r, NULL), 0);
    CHECK_EQ_INT(r.top_k, 3);
    CHECK_EQ_INT(r.tool_choice, DI_TOOL_CHOICE_REQUIRED); /* any = some tool must be called */
    di_api_request_free(&r);
    refused(DI_API_MESSAGES, "{\"model\":\"m\",\"max_tokens\":5," USER_MSG "," MTOOL ",\"tool_choice\":{\"type\":\"any\"}}",
            "required tool choice is not supported in thinking mode");
    refused(DI_API_MESSAGES, "{\"model\":\"m\",\"max_tokens\":5," USER_MSG "," MTOOL ",\"tool_choice\":"
                             "{\"type\":\"auto\",\"disable_parallel_tool_use\":true}}", "disable_parallel_tool_use");
}

/* Token logprobs in each protocol's form: Chat choices[].logprobs.content[] (token, logprob,
 * bytes, top_logprobs), Completions tokens / token_logprobs / top_logprobs / text_offset (in
 * characters), Responses output_text.logprobs (answer tokens only). */
static void feed_lp(DiApiStream *s, DiApiEventKind kind, const char *text, const DiApiLogprob *lp, size_t n, DiApiBuf *sse) {
    DiApiEvent ev = {.kind = kind, .text = text, .len = text ? strlen(text) : 0, .tokens = (int64_t)n, .logprobs = lp,
                     .n_logprobs = n};
    CHECK_EQ_INT(di_api_stream_event(s, &ev, sse), 0);
}

static json_t *run_logprobs(DiApiProtocol p, const char *body, DiApiBuf *sse) {
    DiApiRequest r;
    CHECK_EQ_INT(parse(p, body, &r, NULL), 0);
    DiApiStream *s = di_api_stream_create(&r, "id", 1);
    DiApiLogprob think = {.token = {"t", 1, -0.5f}}, lp[2] = {
        {.token = {"\xc3\xa9", 2, -0.25f}, .n_top = 2, .top = {{"\xc3\xa9", 2, -0.25f}, {"a", 1, -2}}},
        {.token = {"b", 1, -1.5f}, .n_top = 1, .top = {{"b", 1, -1.5f}}}};
    DiApiEvent ready = {.kind = DI_API_EV_READY, .prompt_tokens = 3};
    CHECK_EQ_INT(di_api_stream_event(s, &ready, sse), 0);
    if (r.thinking) feed_lp(s, DI_API_EV_REASONING, "t", &think, 1, sse);
    feed_lp(s, DI_API_EV_CONTENT, "\xc3\xa9", &lp[0], 1, sse);
    feed_lp(s, DI_API_EV_CONTENT, "b", &lp[1], 1, sse);
    DiApiEvent fin = {.kind = DI_API_EV_FINISH, .finish = DI_API_FINISH_STOP};
    CHECK_EQ_INT(di_api_stream_event(s, &fin, sse), 0);
    json_t *full = di_api_stream_response(s);
    di_api_stream_free(s);
    di_api_request_free(&r);
    return full;
}

/* vLLM's cache_salt: accepted by all four protocols and copied; anything but a non-empty
 * string of at most 256 bytes (the block key's salt limit) is a 400 naming it. */
TEST(cache_salt_on_every_protocol) {
    static const struct { DiApiProtocol p; const char *body; } ok[] = {
        {DI_API_CHAT, "{\"model\":\"m\"," USER_MSG ",\"cache_salt\":\"tenant-a\"}"},
        {DI_API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":\"p\",\"cache_salt\":\"tenant-a\"}"},
        {DI_API_RESPONSES, "{\"model\":\"m\",\"input\":\"x\",\"cache_salt\":\"tenant-a\"}"},
        {DI_API_MESSAGES, "{\"model\":\"m\",\"max_tokens\":4," USER_MSG ",\"cache_salt\":\"tenant-a\"}"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        DiApiRequest r;
        CHECK_EQ_INT(parse(ok[i].p, ok[i].body, &r, NULL), 0);
        CHECK(r.cache_salt && strcmp(r.cache_salt, "tenant-a") == 0);
        di_api_request_free(&r);
    }
    DiApiRequest r;
    CHECK_EQ_INT(parse(DI_API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":\"p\",\"cache_salt\":null}", &r, NULL), 0);
    CHECK(r.cache_salt == NULL);
    di_api_request_free(&r);
    char body[600];
    snprintf(body, sizeof body, "{\"model\":\"m\",\"prompt\":\"p\",\"cache_salt\":\"%0256d\"}", 0);
    CHECK_EQ_INT(parse(DI_API_COMPLETIONS, body, &r, NULL), 0); /* exactly 256 bytes */
    CHECK_EQ_INT(strlen(r.cache_salt), 256);
    di_api_request_free(&r);
    snprintf(body, sizeof body, "{\"model\":\"m\",\"prompt\":\"p\",\"cache_salt\":\"%0257d\"}", 0);
    refused(DI_API_COMPLETIONS, body, "Invalid cache_salt: at most 256 bytes");
    refused(DI_API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":\"p\",\"cache_salt\":\"\"}", "Invalid cache_salt: must be a non-empty");
    refused(DI_API_CHAT, "{\"model\":\"m\"," USER_MSG ",\"cache_salt\":7}", "Invalid cache_salt: expected a string, got");
}

TEST(logprobs_in_each_protocol_form) {
    DiApiBuf sse = {0};
    json_t *full = run_logprobs(DI_API_CHAT, "{\"model\":\"m\",\"stream\":true," USER_MSG ",\"logprobs\":true,"
                                             "\"top_logprobs\":2}", &sse);
    json_t *content = json_object_get(json_object_get(json_array_get(json_object_get(full, "choices"), 0), "logprobs"), "content");
    CHECK_EQ_INT(json_array_size(content), 3); /* every generated token, reasoning included */
    json_t *e = json_array_get(content, 1);
    CHECK_STR(json_string_value(json_object_get(e, "token")), "\xc3\xa9");
    CHECK_NEAR(json_real_value(json_object_get(e, "logprob")), -0.25, 1e-7);
    CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(e, "bytes"), 0)), 0xc3);
    CHECK_EQ_INT(json_array_size(json_object_get(e, "top_logprobs")), 2);
    CHECK(strstr(sse.data, "\"logprobs\":{\"content\":[{\"token\":\"b\"") != NULL);
    json_decref(full);
    di_api_buf_free(&sse);

    full = run_logprobs(DI_API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":\"p\",\"logprobs\":1}", &sse);
    json_t *lp = json_object_get(json_array_get(json_object_get(full, "choices"), 0), "logprobs");
    CHECK_EQ_INT(json_array_size(json_object_get(lp, "tokens")), 2);
    CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(lp, "text_offset"), 1)), 1); /* é is 1 character */
    CHECK_NEAR(json_real_value(json_object_get(json_array_get(json_object_get(lp, "top_logprobs"), 0), "a")), -2, 0);
    json_decref(full);
    di_api_buf_free(&sse);

    full = run_logprobs(DI_API_RESPONSES, "{\"model\":\"m\",\"stream\":true,\"input\":\"x\",\"top_logprobs\":2}", &sse);
    json_t *out = json_object_get(full, "output"), *item;
    size_t i, n_text = 0;
    json_array_foreach(out, i, item) {
        json_t *part = json_array_get(json_object_get(item, "content"), 0);
        if (strcmp(json_string_value(json_object_get(part, "type")), "output_text") != 0) continue;
        n_text++;
        CHECK_EQ_INT(json_array_size(json_object_get(part, "logprobs")), 2); /* the answer's tokens */
    }
    CHECK_EQ_INT(n_text, 1);
    CHECK(strstr(sse.data, "\"delta\":\"b\",\"item_id\"") != NULL);
    CHECK(strstr(sse.data, "\"logprobs\":[{\"token\":\"b\"") != NULL);
    json_decref(full);
    di_api_buf_free(&sse);
}

int main(void) {
    RUN_TEST(request_parameters_are_honoured_or_refused);
    RUN_TEST(logprobs_in_each_protocol_form);
    RUN_TEST(cache_salt_on_every_protocol);
    RUN_TEST(chat_defaults_thinking_high);
    RUN_TEST(chat_effort_and_switch);
    RUN_TEST(chat_render_input_has_tool_choice_and_json_mode);
    RUN_TEST(chat_rejections_name_the_problem);
    RUN_TEST(chat_integers_past_64_bits);
    RUN_TEST(responses_groups_calls_by_call_id);
    RUN_TEST(messages_tool_use_and_reminder);
    RUN_TEST(chat_stream_shape);
    RUN_TEST(messages_stream_shape_and_errors);
    RUN_TEST(invalid_utf8_output_is_replaced_not_dropped);
    return TEST_SUMMARY();
}
