/* api_request_fields.c — which top-level request fields each protocol accepts, and the output
 * and sampling options shared by the protocols (logprobs, logit_bias, vLLM's extra sampling
 * fields, thinking.budget_tokens).
 *
 * Why a list of fields: a client that sets a parameter wants its effect, so every field is
 * either honoured or refused with a 400 naming it, never dropped (README "Request
 * parameters").  A field outside the protocol's list is refused with the wording of the API
 * that defines the protocol (OpenAI: "Unrecognized request argument supplied"; Anthropic:
 * "Extra inputs are not permitted").  A few fields are accepted only at the value that asks for
 * nothing (echo false, best_of 1, store false, ...): any other value is refused by name. */
#include "recipe/api_request_internal.h"

#include "base/error.h"
#include "base/json.h"
#include "base/mem.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* vLLM's extra sampling fields, accepted by every OpenAI endpoint (clients send them through
 * extra_body); logit_bias is OpenAI's own on Chat and Completions.  The last three are vLLM's
 * detokenizer switches, accepted at the values this server always has (special tokens are
 * never written into the text; a matched stop string is not returned). */
#define VLLM_EXTRAS                                                                                            \
    "top_k", "min_p", "repetition_penalty", "min_tokens", "ignore_eos", "logit_bias", "stop_token_ids",        \
        "skip_special_tokens", "spaces_between_special_tokens", "include_stop_str_in_output", "structured_outputs"
/* Read by parse_common for every protocol. */
#define COMMON "model", "stream", "n", "seed", "presence_penalty", "frequency_penalty", "cache_salt"
/* Labels with no effect on the output (end-user ids, cache routing hints, metadata; Anthropic's
 * cache_control: the prefix cache needs no breakpoints). */
#define LABELS "user", "metadata", "safety_identifier", "prompt_cache_key", "service_tier", "store"

static const char *const k_chat[] = {COMMON, VLLM_EXTRAS, LABELS, "messages", "stream_options", "max_tokens",
                                     "max_completion_tokens", "temperature", "top_p", "stop", "tools", "tool_choice",
                                     "response_format", "thinking", "reasoning_effort", "logprobs", "top_logprobs",
                                     "parallel_tool_calls", "thinking_token_budget", NULL};
static const char *const k_completions[] = {COMMON, VLLM_EXTRAS, "user", "prompt", "stream_options", "max_tokens",
                                            "temperature", "top_p", "stop", "logprobs", "echo", "best_of", "suffix",
                                            NULL};
static const char *const k_responses[] = {COMMON, VLLM_EXTRAS, LABELS, "input", "instructions", "max_output_tokens",
                                          "temperature", "top_p", "tools", "tool_choice", "reasoning", "text",
                                          "top_logprobs", "include", "parallel_tool_calls", "previous_response_id",
                                          "conversation", "truncation", "background", "max_tool_calls",
                                          "thinking_token_budget", NULL};
static const char *const k_messages[] = {COMMON, "messages", "max_tokens", "system", "stop_sequences", "temperature",
                                         "top_p", "top_k", "tools", "tool_choice", "thinking", "metadata",
                                         "service_tier", "output_config", "cache_control", NULL};

static bool listed(const char *const *list, const char *key) {
    for (; *list; list++)
        if (strcmp(*list, key) == 0) return true;
    return false;
}

static bool is_false(const json_t *v) { return json_is_null(v) || json_is_false(v); }

/* A listed field whose value asks for something this server does not do: its message, else NULL. */
static const char *unsupported_value(const char *key, const json_t *v) {
    if (json_is_null(v)) return NULL;
    if (strcmp(key, "echo") == 0 && !is_false(v)) return "echo is not supported (the prompt is not returned)";
    if (strcmp(key, "best_of") == 0 && !(json_is_integer(v) && json_integer_value(v) == 1))
        return "best_of is not supported (only best_of = 1)";
    if (strcmp(key, "suffix") == 0 && !(json_is_string(v) && !*json_string_value(v)))
        return "suffix is not supported (no fill-in-the-middle)";
    if (strcmp(key, "store") == 0 && !is_false(v)) return "store is not supported (responses are not stored)";
    if (strcmp(key, "background") == 0 && !is_false(v)) return "background is not supported";
    if (strcmp(key, "parallel_tool_calls") == 0 && !json_is_true(v))
        return "parallel_tool_calls = false is not supported (the model may call several tools)";
    if (strcmp(key, "max_tool_calls") == 0) return "max_tool_calls is not supported";
    if (strcmp(key, "skip_special_tokens") == 0 && !json_is_true(v))
        return "skip_special_tokens = false is not supported (special tokens are never written into the text)";
    if (strcmp(key, "spaces_between_special_tokens") == 0 && !json_is_true(v))
        return "spaces_between_special_tokens = false is not supported (special tokens are never written into "
               "the text)";
    if (strcmp(key, "include_stop_str_in_output") == 0 && !is_false(v))
        return "include_stop_str_in_output = true is not supported (a matched stop string is not returned)";
    if (strcmp(key, "truncation") == 0 && !(json_is_string(v) && strcmp(json_string_value(v), "disabled") == 0))
        return "truncation is not supported (only 'disabled': an over-long input is refused)";
    if (strcmp(key, "service_tier") == 0) {
        const char *t = json_string_value(v);
        if (!t || (strcmp(t, "auto") && strcmp(t, "default") && strcmp(t, "standard_only")))
            return "service_tier is not supported (one tier: auto)";
    }
    return NULL;
}

int di_api_check_fields(const json_t *body, DiApiProtocol protocol) {
    const char *const *list = protocol == DI_API_CHAT          ? k_chat
                              : protocol == DI_API_COMPLETIONS ? k_completions
                              : protocol == DI_API_RESPONSES   ? k_responses
                                                               : k_messages;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)body, key, v) {
        if (!listed(list, key))
            return protocol == DI_API_MESSAGES ? di_errorf("%s: Extra inputs are not permitted", key)
                                               : di_errorf("Unrecognized request argument supplied: %s", key);
        const char *why = unsupported_value(key, v);
        if (why) return di_errorf("Invalid %s: %s", key, why);
    }
    return di_api_check_nested(body, protocol);
}

/* ---- shared options ------------------------------------------------------------------- */

/* An optional integer field in [lo, hi]; *out untouched when absent or null. */
static int int_in(const json_t *body, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return di_errorf("Invalid %s value, the valid range of %s is [%lld, %lld]", key, key, (long long)lo,
                         (long long)hi);
    *out = json_integer_value(v);
    return 0;
}

/* OpenAI logit_bias: {"<token id>": bias in [-100, 100]}. */
static int logit_bias(const json_t *v, DiApiRequest *req) {
    if (!v || json_is_null(v)) return 0;
    if (!json_is_object(v)) return di_errorf("Invalid logit_bias: expected an object, got %s", di_api_type_name(v));
    size_t n = json_object_size(v);
    if (!n) return 0;
    if (!(req->logit_bias = di_calloc(n, sizeof *req->logit_bias, "logit_bias"))) return -1;
    const char *key;
    json_t *b;
    json_object_foreach((json_t *)v, key, b) {
        char *end = NULL;
        errno = 0;
        long id = strtol(key, &end, 10);
        if (!*key || *end || errno || id < 0 || id > INT32_MAX)
            return di_errorf("Invalid logit_bias: key '%s' is not a token id (a non-negative integer)", key);
        if (!json_is_number(b) || !isfinite(json_number_value(b)) ||
            fabs(json_number_value(b)) > DI_API_LOGIT_BIAS_MAX)
            return di_errorf("Invalid logit_bias['%s']: the bias must be a number in [-100, 100]", key);
        req->logit_bias[req->n_logit_bias++] = (DiApiLogitBias){(int32_t)id, (float)json_number_value(b)};
    }
    return 0;
}

/* vLLM stop_token_ids: [token id, ...]; the backend checks the ids against the vocabulary. */
static int stop_token_ids(const json_t *v, DiApiRequest *req) {
    if (!v || json_is_null(v)) return 0;
    if (!json_is_array(v))
        return di_errorf("Invalid stop_token_ids: expected an array of token ids, got %s", di_api_type_name(v));
    size_t n = json_array_size(v), i;
    if (!n) return 0;
    if (!(req->stop_token_ids = di_calloc(n, sizeof *req->stop_token_ids, "stop_token_ids"))) return -1;
    json_t *id;
    json_array_foreach(v, i, id) {
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) > INT32_MAX)
            return di_errorf("Invalid stop_token_ids[%zu]: expected a token id (a non-negative integer)", i);
        req->stop_token_ids[req->n_stop_token_ids++] = (int32_t)json_integer_value(id);
    }
    return 0;
}

int di_api_sampling_extras(const json_t *body, DiApiRequest *req, bool top_k_only) {
    int64_t top_k = 0;
    /* vLLM: top_k -1 or 0 is off; Anthropic: a positive integer. */
    if (int_in(body, "top_k", top_k_only ? 0 : -1, INT32_MAX, &top_k) != 0) return -1;
    req->top_k = top_k > 0 ? (int)top_k : 0;
    if (top_k_only) return 0;
    bool present;
    if (di_api_number_in(body, "min_p", 0, false, 1, &req->min_p, &present) != 0) return -1;
    double rp = 1;
    if (di_api_number_in(body, "repetition_penalty", 0, true, 2, &rp, &present) != 0) return -1;
    req->repetition_penalty = rp;
    if (int_in(body, "min_tokens", 0, DI_API_MAX_TOKENS_UPPER_BOUND, &req->min_tokens) != 0) return -1;
    if (req->max_tokens > 0 && req->min_tokens > req->max_tokens)
        return di_errorf("Invalid min_tokens: %lld is more than max_tokens %lld", (long long)req->min_tokens,
                         (long long)req->max_tokens);
    if (di_json_bool(body, "request", "ignore_eos", false, &req->ignore_eos) < 0) return -1;
    if (stop_token_ids(json_object_get(body, "stop_token_ids"), req) != 0) return -1;
    /* vLLM's thinking_token_budget (Chat, Responses: a raw prompt has no reasoning stage, so
     * Completions does not list it); with thinking.budget_tokens too, the lower wins. */
    int64_t budget = -1;
    if (int_in(body, "thinking_token_budget", 0, DI_API_MAX_TOKENS_UPPER_BOUND, &budget) != 0) return -1;
    if (budget >= 0 && (req->thinking_budget_tokens < 0 || budget < req->thinking_budget_tokens))
        req->thinking_budget_tokens = budget;
    return logit_bias(json_object_get(body, "logit_bias"), req);
}

int di_api_logprobs(const json_t *body, DiApiRequest *req) {
    int64_t top = -1;
    if (int_in(body, "top_logprobs", 0, DI_API_MAX_TOP_LOGPROBS, &top) != 0) return -1;
    json_t *lp = json_object_get(body, "logprobs");
    switch (req->protocol) {
    case DI_API_CHAT: { /* logprobs: bool; top_logprobs needs it (official conversion) */
        bool on = false;
        if (lp && !json_is_null(lp) && !json_is_boolean(lp))
            return di_errorf("Invalid logprobs: expected a boolean, got %s", di_api_type_name(lp));
        on = json_is_true(lp);
        if (top >= 0 && !on)
            return di_errorf("Invalid top_logprobs and logprobs value, logprobs must be set to true if top_logprobs "
                             "is used.");
        req->logprobs = on ? (int)(top >= 0 ? top : 0) : -1;
        return 0;
    }
    case DI_API_COMPLETIONS: /* logprobs: the number of alternatives */
        top = -1;
        if (int_in(body, "logprobs", 0, DI_API_MAX_TOP_LOGPROBS, &top) != 0) return -1;
        req->logprobs = (int)top;
        return 0;
    case DI_API_RESPONSES: { /* top_logprobs, or include "message.output_text.logprobs" */
        json_t *inc = json_object_get(body, "include"), *item;
        size_t i;
        if (inc && !json_is_null(inc) && !json_is_array(inc))
            return di_errorf("Invalid include: expected an array, got %s", di_api_type_name(inc));
        json_array_foreach(inc, i, item) { /* reasoning items always carry encrypted_content */
            const char *s = json_string_value(item);
            bool lp = s && strcmp(s, "message.output_text.logprobs") == 0;
            if (!lp && !(s && strcmp(s, "reasoning.encrypted_content") == 0))
                return di_errorf("Invalid include[%zu]: only 'message.output_text.logprobs' and "
                                 "'reasoning.encrypted_content' are supported", i);
            if (lp && top < 0) top = 0;
        }
        req->logprobs = (int)top;
        return 0;
    }
    case DI_API_MESSAGES: break;
    }
    req->logprobs = -1;
    return 0;
}

int di_api_thinking_budget(const json_t *thinking, DiApiRequest *req) {
    json_t *b = json_object_get(thinking, "budget_tokens");
    if (!b || json_is_null(b)) return 0;
    if (!json_is_integer(b) || json_integer_value(b) < 0 || json_integer_value(b) > DI_API_MAX_TOKENS_UPPER_BOUND)
        return di_errorf("Invalid thinking.budget_tokens: expected an integer in [0, %d]", DI_API_MAX_TOKENS_UPPER_BOUND);
    req->thinking_budget_tokens = json_integer_value(b);
    return 0;
}
