/* api_request.c — the common request rules (recipe.md §4 "Common validations"), the OpenAI
 * Chat Completions request (§4.1) and the raw-prompt Completions request. */
#include "recipe/api_request_internal.h"

#include "base/error.h"
#include "base/json.h"
#include "base/mem.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *di_api_protocol_name(DiApiProtocol protocol) {
    switch (protocol) {
    case DI_API_CHAT: return "chat.completions";
    case DI_API_COMPLETIONS: return "completions";
    case DI_API_RESPONSES: return "responses";
    case DI_API_MESSAGES: return "messages";
    }
    return "unknown";
}

/* ---- common helpers ------------------------------------------------------------------- */

const char *di_api_type_name(const json_t *value) {
    return value ? di_json_type_name(value) : "nothing (the field is missing)";
}

int di_api_number_in(const json_t *body, const char *key, double lo, bool lo_open, double hi, double *out,
                     bool *present) {
    json_t *v = json_object_get(body, key);
    *present = false;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return di_errorf("Invalid %s: expected a number, got %s", key, di_api_type_name(v));
    double x = json_number_value(v);
    if (!isfinite(x) || (lo_open ? x <= lo : x < lo) || x > hi)
        return di_errorf("Invalid %s value, the valid range of %s is %s%g, %g]", key, key, lo_open ? "(" : "[", lo, hi);
    *out = x;
    *present = true;
    return 0;
}

int di_api_max_tokens(const json_t *body, const char *key, bool clamp, int64_t *out) {
    json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return di_errorf("Invalid %s: expected an integer, got %s", key, di_api_type_name(v));
    json_int_t n = json_integer_value(v);
    if (clamp && n > DI_API_MAX_TOKENS_UPPER_BOUND) n = DI_API_MAX_TOKENS_UPPER_BOUND;
    if (n < 1 || n > DI_API_MAX_TOKENS_UPPER_BOUND)
        return di_errorf("Invalid %s value, the valid range of %s is [1, %d]", key, key, DI_API_MAX_TOKENS_UPPER_BOUND);
    *out = n;
    return 0;
}

static int add_stop(DiApiRequest *req, const char *s, bool non_empty, const char *key, size_t index) {
    if (!*s) {
        if (non_empty)
            return di_errorf("Invalid '%s[%zu]': empty string. Expected a string with minimum length 1, but got an "
                             "empty string instead.", key, index);
        return 0;
    }
    if (req->n_stop >= DI_API_MAX_STOP) return di_errorf("Stop string array too long");
    char *stop = di_strdup(s);
    if (!stop) return -1;
    size_t n = di_text_unmark(stop, strlen(stop)); /* request text is marked (base/json.h) */
    stop[n] = '\0';
    if (memchr(stop, '\0', n)) { /* the output matcher works on C strings */
        free(stop);
        return di_errorf("Invalid '%s[%zu]': a stop sequence containing \\u0000 is not supported", key, index);
    }
    req->stop[req->n_stop++] = stop;
    return 0;
}

int di_api_stop(const json_t *value, const char *key, bool non_empty, DiApiRequest *req) {
    if (!value || json_is_null(value)) return 0;
    if (json_is_string(value)) return add_stop(req, json_string_value(value), non_empty, key, 0);
    if (!json_is_array(value))
        return di_errorf("Invalid %s: expected a string or an array of strings, got %s", key, di_api_type_name(value));
    if (json_array_size(value) > DI_API_MAX_STOP)
        return di_errorf("Stop string array too long: %zu", json_array_size(value));
    size_t i;
    json_t *s;
    json_array_foreach(value, i, s) {
        if (!json_is_string(s)) return di_errorf("Invalid %s[%zu]: expected a string, got %s", key, i, di_api_type_name(s));
        if (add_stop(req, json_string_value(s), non_empty, key, i) != 0) return -1;
    }
    return 0;
}

int di_api_effort(const char *name, const char *field, char out[8]) {
    /* recipe.md §4.2: minimal/low -> low; medium/high -> high; xhigh; max (ultra -> max). */
    static const char *const map[][2] = {{"minimal", "low"}, {"low", "low"},   {"medium", "high"}, {"high", "high"},
                                         {"xhigh", "xhigh"}, {"max", "max"},   {"ultra", "max"}};
    if (strcmp(name, "none") == 0) return 1;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(name, map[i][0]) == 0) {
            snprintf(out, 8, "%s", map[i][1]);
            return 0;
        }
    return di_errorf("Invalid %s: unknown value '%s', expected one of none, minimal, low, medium, high, xhigh, "
                     "ultra, max", field, name);
}

int di_api_check_tool_name(const char *name, const char *field) {
    size_t n = strlen(name);
    bool ok = n >= 1 && n <= 64;
    for (size_t i = 0; ok && i < n; i++) ok = isalnum((unsigned char)name[i]) || name[i] == '_' || name[i] == '-';
    if (!ok)
        return di_errorf("Invalid '%s': string does not match pattern. Expected a string that matches the pattern "
                         "'^[a-zA-Z0-9_-]+$' (at most 64 characters).", field);
    return 0;
}

int di_api_add_tool(json_t *tools, const char *name, const json_t *description, const json_t *parameters,
                    const char *field) {
    if (di_api_check_tool_name(name, field) != 0) return -1;
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *other = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        if (other && strcmp(other, name) == 0) return di_errorf("Duplicate tool name '%s' in %s", name, field);
    }
    if (description && !json_is_null(description) && !json_is_string(description))
        return di_errorf("Invalid %s description: expected a string, got %s", field, di_api_type_name(description));
    if (!json_is_object(parameters)) return di_errorf("Invalid %s parameters: expected an object", field);
    json_t *fn = json_pack("{s:s}", "name", name);
    if (!fn) return di_errorf("tools: out of memory");
    if (description && json_is_string(description)) json_object_set(fn, "description", (json_t *)description);
    json_object_set_new(fn, "parameters", json_deep_copy(parameters));
    return json_array_append_new(tools, json_pack("{s:s, s:o}", "type", "function", "function", fn)) == 0
               ? 0
               : di_errorf("tools: out of memory");
}

int di_api_apply_tool_choice(DiApiRequest *req, json_t *tools, const char *named, const char *field) {
    if (req->tool_choice == DI_TOOL_CHOICE_NONE) {
        json_array_clear(tools);
        return 0;
    }
    if (named) {
        size_t i;
        json_t *t;
        json_t *keep = NULL;
        json_array_foreach(tools, i, t) {
            const char *name = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
            if (name && strcmp(name, named) == 0) keep = json_incref(t);
        }
        if (!keep) return di_errorf("Invalid %s: tool '%s' is not among the declared tools", field, named);
        json_array_clear(tools);
        json_array_append_new(tools, keep);
        req->tool_choice = DI_TOOL_CHOICE_REQUIRED;
    }
    if (!json_array_size(tools)) req->tool_choice = DI_TOOL_CHOICE_AUTO; /* nothing to require */
    if (req->tool_choice == DI_TOOL_CHOICE_REQUIRED && req->thinking)
        return di_errorf("Invalid %s: a required tool choice is not supported in thinking mode", field);
    return 0;
}

void di_api_resolve_sampling(DiApiRequest *req, bool has_temperature, double temperature, bool has_top_p,
                             double top_p) {
    /* recipe.md §4 thinking notes; the official conversion: thinking fixes temperature at 1.0
     * and keeps top_p within [0.95, 1.0] (Flash); outside thinking top_p is 1.0. */
    req->temperature = req->thinking || !has_temperature ? 1.0 : temperature;
    if (req->thinking) req->top_p = has_top_p ? fmax(0.95, top_p) : 1.0;
    else req->top_p = 1.0;
    if (req->thinking) req->presence_penalty = req->frequency_penalty = 0.0;
}

json_t *di_api_message(const char *role, const char *text) {
    return json_pack("{s:s, s:s}", "role", role, "content", text ? text : "");
}

int di_api_set_conversation(DiApiRequest *req, json_t *messages, json_t *tools) {
    req->n_tools = json_array_size(tools);
    /* official ReasoningContentBehavior::FillEmpty: in thinking mode history without reasoning
     * gets ""; outside it reasoning is dropped (the chat template writes none) */
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role || strcmp(role, "assistant") != 0) continue;
        if (!req->thinking) json_object_del(m, "reasoning_content");
        else if (!json_object_get(m, "reasoning_content")) json_object_set_new(m, "reasoning_content", json_string(""));
    }
    req->conversation = json_pack("{s:s, s:o, s:o, s:s, s:o, s:b}", "encoding", "v41", "messages", messages, "tools",
                                  tools, "thinking_mode", req->thinking ? "thinking" : "chat", "reasoning_effort",
                                  req->thinking && req->reasoning_effort[0] ? json_string(req->reasoning_effort)
                                                                           : json_null(),
                                  "drop_thinking", true);
    /* What the template writes for these (as the official conversion hands them to the
     * renderer): a required call opens the tool-call block after the generation header (the
     * output parser then starts inside it, backend_parse.c), JSON mode the response-format block. */
    if (req->conversation && req->tool_choice == DI_TOOL_CHOICE_REQUIRED &&
        json_object_set_new(req->conversation, "tool_choice", json_string("required")) != 0)
        return di_errorf("conversation: out of memory");
    if (req->conversation && req->json_mode &&
        json_object_set_new(req->conversation, "response_format", json_pack("{s:s}", "type", "json_object")) != 0)
        return di_errorf("conversation: out of memory");
    return req->conversation ? 0 : di_errorf("conversation: out of memory");
}

DiParseStart di_api_parse_start(const DiApiRequest *req) {
    if (!req) return DI_PARSE_START_CONTENT;
    json_t *msgs = json_object_get(req->conversation, "messages");
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    if (req->thinking && json_is_true(json_object_get(last, "prefix"))) {
        const char *content = json_string_value(json_object_get(last, "content"));
        const char *reasoning = json_string_value(json_object_get(last, "reasoning_content"));
        if (content && *content) return DI_PARSE_CONTINUE_CONTENT;
        if (reasoning && *reasoning) return DI_PARSE_CONTINUE_REASONING;
    }
    return req->thinking ? DI_PARSE_START_REASONING : DI_PARSE_START_CONTENT;
}

int di_api_response_schema(const json_t *holder, const char *field, json_t **schema) {
    *schema = json_object_get(holder, "schema");
    if (!*schema) return di_errorf("Invalid %s: missing field `schema`", field);
    if (!json_is_object(*schema) && !json_is_boolean(*schema))
        return di_errorf("Invalid json schema: %s.schema is not of types \"boolean\", \"object\"", field);
    return 0;
}

int di_api_set_response_schema(DiApiRequest *req, const json_t *schema) {
    if (!schema) return 0;
    json_t *rf = json_pack("{s:s, s:{s:O}}", "type", "json_schema", "json_schema", "schema", schema);
    if (!rf || json_object_set_new(req->conversation, "response_format", rf) != 0) return di_errorf("conversation: out of memory");
    return 0;
}

static bool contains_json_word(const char *s) {
    for (; s && *s; s++)
        if (strncasecmp(s, "json", 4) == 0) return true;
    return false;
}

bool di_api_mentions_json(const json_t *messages, const char *extra) {
    if (contains_json_word(extra)) return true;
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        if (contains_json_word(json_string_value(json_object_get(m, "content")))) return true;
    }
    return false;
}

int di_api_join_text(const json_t *content, const char *const *text_types, const char *sep, const char *field,
                     char **out) {
    *out = NULL;
    if (!content || json_is_null(content)) return (*out = di_strdup("")) ? 0 : -1;
    if (json_is_string(content)) return (*out = di_strdup(json_string_value(content))) ? 0 : -1;
    if (!json_is_array(content))
        return di_errorf("Invalid %s: content should be a string or a list, got %s", field, di_api_type_name(content));
    size_t total = 1, i;
    json_t *part;
    json_array_foreach(content, i, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        const char *text = json_string_value(json_object_get(part, "text"));
        if (!json_is_object(part)) return di_errorf("Invalid %s[%zu]: expected an object", field, i);
        if (!type) return di_errorf("Invalid %s[%zu]: missing 'type'", field, i);
        bool known = false;
        for (const char *const *t = text_types; *t; t++) known = known || strcmp(type, *t) == 0;
        if (!known) return di_errorf("Invalid %s[%zu]: content part type '%s' is not supported", field, i, type);
        if (!text) return di_errorf("Invalid %s[%zu]: 'text' must be a string", field, i);
        total += strlen(text) + strlen(sep);
    }
    char *joined = di_malloc(total, "message text");
    if (!joined) return -1;
    joined[0] = '\0';
    json_array_foreach(content, i, part) {
        if (i) strcat(joined, sep);
        strcat(joined, json_string_value(json_object_get(part, "text")));
    }
    *out = joined;
    return 0;
}

/* ---- entry point ---------------------------------------------------------------------- */

/* vLLM's cache_salt: requests share KV cache blocks only under the same salt (serving.md §4).
 * A non-empty string of at most API_CACHE_SALT_MAX bytes (the block key's limit); the backend
 * refuses it when the server runs without a KV block cache. */
#define API_CACHE_SALT_MAX 256
static int parse_cache_salt(json_t *body, DiApiRequest *req) {
    json_t *salt = json_object_get(body, "cache_salt");
    if (!salt || json_is_null(salt)) return 0;
    if (!json_is_string(salt)) return di_errorf("Invalid cache_salt: expected a string, got %s", di_api_type_name(salt));
    if (json_string_length(salt) == 0) return di_errorf("Invalid cache_salt: must be a non-empty string");
    if (json_string_length(salt) > API_CACHE_SALT_MAX)
        return di_errorf("Invalid cache_salt: at most %d bytes, got %zu", API_CACHE_SALT_MAX, json_string_length(salt));
    req->cache_salt = di_strdup(json_string_value(salt));
    return req->cache_salt ? 0 : -1;
}

static int parse_common(json_t *body, DiApiRequest *req) {
    const char *model = NULL;
    if (di_json_string(body, "request", "model", true, &model) != 0) return -1;
    if (!*model) return di_errorf("Invalid model: must be a non-empty string");
    if (!(req->model = di_strdup(model))) return -1;
    if (di_json_bool(body, "request", "stream", false, &req->stream) < 0) return -1;
    json_t *n = json_object_get(body, "n");
    if (n && !json_is_null(n) && (!json_is_integer(n) || json_integer_value(n) != 1))
        return di_errorf("Invalid n value (currently only n = 1 is supported)");
    bool present;
    if (di_api_number_in(body, "presence_penalty", -2, false, 2, &req->presence_penalty, &present) != 0) return -1;
    if (di_api_number_in(body, "frequency_penalty", -2, false, 2, &req->frequency_penalty, &present) != 0) return -1;
    json_t *seed = json_object_get(body, "seed");
    if (seed && !json_is_null(seed)) {
        if (!json_is_integer(seed) || json_integer_value(seed) < 0)
            return di_errorf("Invalid seed: expected an integer in [0, 2^63)");
        req->has_seed = true;
        req->seed = (uint64_t)json_integer_value(seed);
    }
    return parse_cache_salt(body, req);
}

int di_api_request_parse(DiApiProtocol protocol, const char *body, size_t len, DiApiRequest *out, int *http_status) {
    int dummy;
    if (!http_status) http_status = &dummy;
    *http_status = 400;
    if (!out) return di_errorf("api request: NULL output");
    memset(out, 0, sizeof *out);
    out->protocol = protocol;
    out->temperature = out->top_p = 1.0;
    out->repetition_penalty = 1.0;
    out->logprobs = -1;
    out->thinking_budget_tokens = -1;
    if (!body) return di_errorf("request body is empty");
    json_error_t jerr;
    char *widened = NULL; /* integers past 64 bits read as doubles, as the official parser does */
    size_t widened_len = 0;
    if (di_json_widen_integers(body, len, &widened, &widened_len) < 0) return -1;
    size_t flags = JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL; /* "\u0000" is text (marked below) */
    json_t *root = widened ? json_loadb(widened, widened_len, flags, &jerr) : json_loadb(body, len, flags, &jerr);
    free(widened);
    if (root && di_json_mark_nul(root) != 0) {
        json_decref(root);
        return -1;
    }
    if (!root && strstr(jerr.text, "too big integer"))
        return di_errorf("Invalid JSON body at line %d, column %d: integers from 2^63 to 2^64-1 are not supported",
                         jerr.line, jerr.column);
    if (!root)
        return di_errorf("Invalid JSON body at line %d, column %d: %s", jerr.line, jerr.column, jerr.text);
    int rc = -1;
    if (!json_is_object(root)) {
        di_errorf("Invalid request body: expected a JSON object, got %s", di_api_type_name(root));
    } else if (di_api_check_fields(root, protocol) == 0 && parse_common(root, out) == 0 &&
               di_api_logprobs(root, out) == 0) {
        switch (protocol) {
        case DI_API_CHAT: rc = di_api_parse_chat(root, out); break;
        case DI_API_COMPLETIONS: rc = di_api_parse_completions(root, out); break;
        case DI_API_RESPONSES: rc = di_api_parse_responses(root, out); break;
        case DI_API_MESSAGES: rc = di_api_parse_messages(root, out); break;
        default: rc = di_errorf("unknown protocol %d", (int)protocol);
        }
    }
    /* what the request hands on holds the client's text again (base/json.h) */
    if (rc == 0 && (di_json_unmark(out->conversation) != 0 || di_json_unmark(out->echo) != 0)) rc = -1;
    json_t *plain = rc == 0 ? json_deep_copy(root) : NULL; /* so does the constraint */
    if (rc == 0) rc = plain && di_json_unmark(plain) == 0 ? di_api_derive_constraint(plain, out) : di_errorf("out of memory");
    json_decref(plain);
    json_decref(root);
    if (rc != 0) di_api_request_free(out);
    return rc;
}

void di_api_request_free(DiApiRequest *req) {
    if (!req) return;
    free(req->model);
    free(req->prompt);
    free(req->cache_salt);
    free(req->logit_bias);
    free(req->stop_token_ids);
    json_decref(req->conversation);
    json_decref(req->echo);
    json_decref(req->custom_tools);
    free(req->constraint);
    free(req->so_text);
    for (size_t i = 0; i < req->n_stop; i++) free(req->stop[i]);
    DiApiProtocol p = req->protocol;
    memset(req, 0, sizeof *req);
    req->protocol = p;
}

int64_t di_api_resolve_max_tokens(const DiApiRequest *req, int64_t prompt_tokens, int64_t context_limit) {
    if (!req || prompt_tokens < 0 || context_limit <= 0)
        return di_errorf("resolve max_tokens: bad arguments (prompt %lld, context %lld)", (long long)prompt_tokens,
                         (long long)context_limit);
    if (req->max_tokens > 0 && prompt_tokens + req->max_tokens > context_limit)
        return di_errorf("This model's maximum context length is %lld tokens. However, you requested %lld tokens "
                         "(%lld in the messages, %lld in the completion). Please reduce the length of the messages "
                         "or completion.", (long long)context_limit, (long long)(prompt_tokens + req->max_tokens),
                         (long long)prompt_tokens, (long long)req->max_tokens);
    if (prompt_tokens >= context_limit)
        return di_errorf("This model's maximum context length is %lld tokens. However, your messages resulted in "
                         "%lld tokens. Please reduce the length of the messages.", (long long)context_limit,
                         (long long)prompt_tokens);
    int64_t n = req->max_tokens;
    if (n <= 0)
        n = !req->thinking ? DI_API_DEFAULT_MAX_TOKENS_CHAT
            : strcmp(req->reasoning_effort, "max") == 0 ? DI_API_DEFAULT_MAX_TOKENS_THINKING_MAX
                                                        : DI_API_DEFAULT_MAX_TOKENS_THINKING;
    if (n > context_limit - prompt_tokens) n = context_limit - prompt_tokens;
    return n < 1 ? 1 : n;
}

const char *di_api_last_user_text(const DiApiRequest *req) {
    if (!req) return "";
    if (req->prompt) return req->prompt;
    json_t *msgs = json_object_get(req->conversation, "messages");
    for (size_t i = json_array_size(msgs); i-- > 0;) {
        json_t *m = json_array_get(msgs, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (role && (strcmp(role, "user") == 0 || strcmp(role, "tool") == 0)) {
            const char *c = json_string_value(json_object_get(m, "content"));
            return c ? c : "";
        }
    }
    return "";
}

/* ---- Chat Completions ----------------------------------------------------------------- */

static const char *const k_text_parts[] = {"text", NULL};

/* tool_calls of an assistant message -> normalized list; ids recorded in `pending`. */
static int chat_tool_calls(const json_t *calls, size_t mi, json_t *out_calls, json_t *pending) {
    if (!json_is_array(calls)) return di_errorf("Invalid messages[%zu].tool_calls: expected an array", mi);
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        json_t *fn = json_object_get(c, "function");
        const char *id = json_string_value(json_object_get(c, "id"));
        const char *name = json_string_value(json_object_get(fn, "name"));
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        /* an empty id is an id (the official conversion takes it; a tool message answers it with "") */
        if (!id) return di_errorf("Invalid messages[%zu].tool_calls[%zu].id: a string is required", mi, i);
        if (!name) return di_errorf("Invalid messages[%zu].tool_calls[%zu].function.name: a string is required", mi, i);
        if (!args) return di_errorf("Invalid messages[%zu].tool_calls[%zu].function.arguments: a string is required", mi, i);
        if (json_object_get(pending, id)) return di_errorf("Duplicate tool call id '%s' in messages[%zu]", id, mi);
        json_object_set_new(pending, id, json_true());
        json_array_append_new(out_calls, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function", "function",
                                                   "name", name, "arguments", args));
    }
    return 0;
}

/* "prefix": true on the last assistant message: the model continues that message instead of
 * answering afresh (the renderer leaves the turn open, the output parser starts inside it).
 * Anywhere else it is refused with the official conversion's message (that conversion drops
 * it silently on a user or system message, though its message names the rule). */
static int chat_prefix(const json_t *m, size_t mi, size_t n_msgs, json_t *msg) {
    json_t *v = json_object_get(m, "prefix");
    if (!v || json_is_null(v) || json_is_false(v)) return 0;
    if (!json_is_true(v)) return di_errorf("Invalid messages[%zu].prefix: expected a boolean, got %s", mi, di_api_type_name(v));
    const char *role = json_string_value(json_object_get(m, "role"));
    if (!msg || mi + 1 != n_msgs || strcmp(role, "assistant") != 0)
        return di_errorf("Invalid completion message: prefix set true with message which is not final message or "
                         "message role is not assistant (messages[%zu])", mi);
    return json_object_set_new(msg, "prefix", json_true()) == 0 ? 0 : di_errorf("messages: out of memory");
}

static int chat_messages(const json_t *msgs, json_t *out) {
    if (!json_is_array(msgs)) return di_errorf("Invalid messages: expected an array, got %s", di_api_type_name(msgs));
    if (!json_array_size(msgs)) return di_errorf("Empty input messages");
    json_t *pending = json_object(); /* tool call ids awaiting their tool message */
    bool in_tool_results = false;
    int rc = 0;
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        char field[64], *text = NULL;
        snprintf(field, sizeof field, "messages[%zu].content", i);
        if (!json_is_object(m) || !role) { rc = di_errorf("Invalid messages[%zu]: an object with a string 'role' is required", i); break; }
        if (strcmp(role, "tool") != 0 && json_object_size(pending)) {
            rc = di_errorf("An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                           "'tool_call_id'. (insufficient tool messages following tool_calls message)");
            break;
        }
        if (strcmp(role, "tool") != 0) in_tool_results = false;
        if (strcmp(role, "assistant") != 0 && chat_prefix(m, i, json_array_size(msgs), NULL) != 0) { rc = -1; break; }
        if (strcmp(role, "system") == 0 || strcmp(role, "user") == 0 || strcmp(role, "latest_reminder") == 0) {
            if (di_api_join_text(json_object_get(m, "content"), k_text_parts, "\n\n", field, &text) != 0) { rc = -1; break; }
            if (!(strcmp(role, "system") == 0 && !*text)) json_array_append_new(out, di_api_message(role, text));
        } else if (strcmp(role, "assistant") == 0) {
            json_t *content = json_object_get(m, "content"), *calls = json_object_get(m, "tool_calls");
            bool has_calls = calls && !json_is_null(calls) && json_array_size(calls) > 0;
            if ((!content || json_is_null(content)) && !has_calls) { rc = di_errorf("Invalid assistant message: content or tool_calls must be set"); break; }
            if (di_api_join_text(content, k_text_parts, "\n\n", field, &text) != 0) { rc = -1; break; }
            json_t *msg = di_api_message("assistant", text);
            json_t *reasoning = json_object_get(m, "reasoning_content");
            if (reasoning && !json_is_null(reasoning)) {
                if (!json_is_string(reasoning)) { json_decref(msg); free(text); rc = di_errorf("Invalid messages[%zu].reasoning_content: expected a string", i); break; }
                json_object_set(msg, "reasoning_content", reasoning);
            }
            if (has_calls) {
                json_t *out_calls = json_array();
                json_object_set_new(msg, "tool_calls", out_calls);
                if (chat_tool_calls(calls, i, out_calls, pending) != 0) { json_decref(msg); free(text); rc = -1; break; }
                in_tool_results = true;
            }
            if (chat_prefix(m, i, json_array_size(msgs), msg) != 0) { json_decref(msg); free(text); rc = -1; break; }
            json_array_append_new(out, msg);
        } else if (strcmp(role, "tool") == 0) {
            const char *id = json_string_value(json_object_get(m, "tool_call_id"));
            if (!in_tool_results) { rc = di_errorf("Messages with role 'tool' must be a response to a preceding message with 'tool_calls' (messages[%zu])", i); break; }
            if (!id || !json_object_get(pending, id)) {
                rc = di_errorf("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id', The following tool_call_ids did not have response messages: %s", id ? id : "(missing tool_call_id)");
                break;
            }
            json_object_del(pending, id);
            if (di_api_join_text(json_object_get(m, "content"), k_text_parts, "\n\n", field, &text) != 0) { rc = -1; break; }
            json_array_append_new(out, json_pack("{s:s, s:s, s:s}", "role", "tool", "tool_call_id", id, "content", text));
        } else {
            rc = di_errorf("Invalid messages[%zu].role: unknown role '%s', expected one of system, user, assistant, "
                           "tool, latest_reminder", i, role);
        }
        free(text);
        if (rc) break;
    }
    if (rc == 0 && json_object_size(pending))
        rc = di_errorf("An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                       "'tool_call_id'. (insufficient tool messages following tool_calls message)");
    json_decref(pending);
    return rc;
}

static int chat_tools(const json_t *body, json_t *tools) {
    json_t *list = json_object_get(body, "tools");
    if (!list || json_is_null(list)) return 0;
    if (!json_is_array(list)) return di_errorf("Invalid tools: expected an array, got %s", di_api_type_name(list));
    size_t i, n_strict = 0;
    json_t *t;
    json_array_foreach(list, i, t) {
        char field[96];
        snprintf(field, sizeof field, "tools[%zu].function.name", i);
        json_t *fn = json_object_get(t, "function");
        const char *type = json_string_value(json_object_get(t, "type"));
        if (!type || strcmp(type, "function") != 0) return di_errorf("Invalid tools[%zu].type: only 'function' is supported", i);
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!json_is_object(fn) || !name) return di_errorf("Invalid tools[%zu].function: an object with a string 'name' is required", i);
        bool strict = false;
        json_t *params = NULL;
        if (di_api_tool_strict(fn, "tools[].function", &strict) != 0 ||
            di_api_tool_schema(name, json_object_get(fn, "parameters"), strict, &params) != 0)
            return -1;
        int rc = di_api_add_tool(tools, name, json_object_get(fn, "description"), params, field);
        json_decref(params);
        if (rc != 0) return -1;
        n_strict += strict;
    }
    return di_api_tools_strict_agree(n_strict, json_array_size(tools));
}

/* A prefix continues plain text: declared tools are refused (as the official conversion does,
 * whatever tool_choice says), since a call cannot be resumed from the prefix. */
static int chat_prefix_without_tools(const json_t *messages, const json_t *tools) {
    json_t *last = json_array_get(messages, json_array_size(messages) - 1);
    if (json_array_size(tools) && json_is_true(json_object_get(last, "prefix")))
        return di_errorf("Function call should not be used with prefix");
    return 0;
}

static int chat_tool_choice(const json_t *body, DiApiRequest *req, json_t *tools) {
    json_t *tc = json_object_get(body, "tool_choice");
    const char *named = NULL;
    if (tc && json_is_string(tc)) {
        const char *v = json_string_value(tc);
        if (strcmp(v, "none") == 0) req->tool_choice = DI_TOOL_CHOICE_NONE;
        else if (strcmp(v, "auto") == 0) req->tool_choice = DI_TOOL_CHOICE_AUTO;
        else if (strcmp(v, "required") == 0) req->tool_choice = DI_TOOL_CHOICE_REQUIRED;
        else return di_errorf("Invalid tool_choice: unknown value '%s', expected none, auto or required", v);
    } else if (tc && json_is_object(tc)) {
        named = json_string_value(json_object_get(json_object_get(tc, "function"), "name"));
        if (!named) return di_errorf("Invalid tool_choice: expected {\"type\":\"function\",\"function\":{\"name\":...}}");
    } else if (tc && !json_is_null(tc)) {
        return di_errorf("Invalid tool_choice: expected a string or an object, got %s", di_api_type_name(tc));
    }
    return di_api_apply_tool_choice(req, tools, named, "tool_choice");
}

static int chat_thinking(const json_t *body, DiApiRequest *req) {
    json_t *thinking = json_object_get(body, "thinking");
    const char *effort = NULL;
    if (di_json_string(body, "request", "reasoning_effort", false, &effort) < 0) return -1;
    req->thinking = true; /* recipe.md §4: thinking is on by default (effort high) */
    snprintf(req->reasoning_effort, sizeof req->reasoning_effort, "high");
    bool explicit_switch = false;
    if (thinking && !json_is_null(thinking)) {
        const char *type = json_string_value(json_object_get(thinking, "type"));
        if (!json_is_object(thinking) || !type) return di_errorf("Invalid thinking: expected {\"type\": \"enabled\"|\"disabled\"}");
        if (strcmp(type, "enabled") == 0 || strcmp(type, "adaptive") == 0) req->thinking = true;
        else if (strcmp(type, "disabled") == 0) req->thinking = false;
        else return di_errorf("Invalid thinking.type: unknown value '%s', expected enabled, adaptive or disabled", type);
        explicit_switch = true;
        if (di_api_thinking_budget(thinking, req) != 0) return -1;
    }
    if (effort) {
        int off = di_api_effort(effort, "reasoning_effort", req->reasoning_effort);
        if (off < 0) return -1;
        if (off == 1 && !explicit_switch) req->thinking = false;
        if (off == 1) snprintf(req->reasoning_effort, sizeof req->reasoning_effort, "high");
    }
    return 0;
}

int di_api_parse_chat(json_t *body, DiApiRequest *req) {
    json_t *stream_options = json_object_get(body, "stream_options");
    if (stream_options && !json_is_null(stream_options)) {
        if (!req->stream) return di_errorf("stream_options should be set along with stream = true");
        if (di_json_bool(stream_options, "stream_options", "include_usage", false, &req->include_usage) < 0) return -1;
    }
    if (chat_thinking(body, req) != 0) return -1;
    if (di_api_max_tokens(body, "max_tokens", false, &req->max_tokens) != 0) return -1;
    /* max_completion_tokens (OpenAI's newer name) limits the output as vLLM does; the official
     * conversion (recipe 0.2) ignores it, but a client's limit is never to be dropped.  With both
     * set, the lower wins. */
    int64_t mct = 0;
    if (di_api_max_tokens(body, "max_completion_tokens", false, &mct) != 0) return -1;
    if (mct > 0 && (req->max_tokens <= 0 || mct < req->max_tokens)) req->max_tokens = mct;
    if (di_api_sampling_extras(body, req, false) != 0) return -1;
    double temperature = 1, top_p = 1;
    bool has_t, has_p;
    if (di_api_number_in(body, "temperature", 0, false, 2, &temperature, &has_t) != 0) return -1;
    if (di_api_number_in(body, "top_p", 0, true, 1, &top_p, &has_p) != 0) return -1;
    di_api_resolve_sampling(req, has_t, temperature, has_p, top_p);
    if (di_api_stop(json_object_get(body, "stop"), "stop", true, req) != 0) return -1;

    json_t *messages = json_array(), *tools = json_array();
    if (!messages || !tools || chat_messages(json_object_get(body, "messages"), messages) != 0 ||
        chat_tools(body, tools) != 0 || chat_prefix_without_tools(messages, tools) != 0 ||
        chat_tool_choice(body, req, tools) != 0) {
        json_decref(messages);
        json_decref(tools);
        return -1;
    }
    json_t *rf = json_object_get(body, "response_format"), *schema = NULL;
    if (rf && !json_is_null(rf)) {
        const char *type = json_string_value(json_object_get(rf, "type"));
        if (!type) { json_decref(messages); json_decref(tools); return di_errorf("Invalid response_format: expected {\"type\": ...}"); }
        if (strcmp(type, "json_object") == 0) req->json_mode = true;
        else if (strcmp(type, "regex") == 0) {} /* no prompt text: the constraint alone (api_constraint.c) */
        else if (strcmp(type, "json_schema") == 0) {
            json_t *js = json_object_get(rf, "json_schema");
            if (!json_is_object(js)) { json_decref(messages); json_decref(tools); return di_errorf("Invalid response_format: missing field `json_schema`"); }
            if (di_api_response_schema(js, "response_format.json_schema", &schema) != 0) { json_decref(messages); json_decref(tools); return -1; }
        } else if (strcmp(type, "text") != 0) {
            json_decref(messages); json_decref(tools);
            return di_errorf("Invalid response_format.type: unknown value '%s'", type);
        }
    }
    if (req->json_mode && !di_api_mentions_json(messages, NULL)) {
        json_decref(messages); json_decref(tools);
        return di_errorf("Prompt must contain the word 'json' in some form to use 'response_format' of type 'json_object'.");
    }
    if (di_api_set_conversation(req, messages, tools) != 0) return -1;
    return di_api_set_response_schema(req, schema);
}

/* ---- Completions (raw prompt) ---------------------------------------------------------- */

int di_api_parse_completions(json_t *body, DiApiRequest *req) {
    const char *prompt = NULL;
    json_t *p = json_object_get(body, "prompt");
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0))) p = json_array_get(p, 0);
    if (!json_is_string(p)) return di_errorf("Invalid prompt: expected a string (or one string in an array)");
    prompt = json_string_value(p);
    if (!(req->prompt = di_strdup(prompt))) return -1;
    size_t n = di_text_unmark(req->prompt, strlen(req->prompt)); /* request text is marked (base/json.h) */
    req->prompt[n] = '\0';
    if (strlen(req->prompt) != n) return di_errorf("Invalid prompt: a prompt containing \\u0000 is not supported");
    req->thinking = false; /* a raw prompt: no chat template, no reasoning stage */
    json_t *so = json_object_get(body, "stream_options");
    if (so && !json_is_null(so)) {
        if (!req->stream) return di_errorf("stream_options should be set along with stream = true");
        if (di_json_bool(so, "stream_options", "include_usage", false, &req->include_usage) < 0) return -1;
    }
    if (di_api_max_tokens(body, "max_tokens", false, &req->max_tokens) != 0) return -1;
    if (di_api_sampling_extras(body, req, false) != 0) return -1;
    double temperature = 1, top_p = 1;
    bool has_t, has_p;
    if (di_api_number_in(body, "temperature", 0, false, 2, &temperature, &has_t) != 0) return -1;
    if (di_api_number_in(body, "top_p", 0, true, 1, &top_p, &has_p) != 0) return -1;
    req->temperature = has_t ? temperature : 1.0;
    req->top_p = has_p ? top_p : 1.0;
    return di_api_stop(json_object_get(body, "stop"), "stop", false, req);
}
