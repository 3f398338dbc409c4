/* api_stream.c — accumulating parsed output into the message of one request, the common
 * parts of the SSE encoders, protocol error bodies, and the OpenAI Chat Completions /
 * Completions encoders (recipe.md §4.1; official ChatCompletionChunkGenerator). */
#include "recipe/api_stream_internal.h"

#include "base/error.h"
#include "base/mem.h"

#include <stdatomic.h>
#include <utf8proc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- helpers -------------------------------------------------------------------------- */

/* Model text is UTF-8 by contract, but a JSON string must be: invalid bytes (a backend bug or
 * a split character) become U+FFFD here instead of making the whole event unencodable. */
json_t *di_api_text(const char *text, size_t len) {
    if (!text) return json_string("");
    json_t *s = json_stringn(text, len); /* NULL when not valid UTF-8 (or on a NUL byte) */
    if (s) return s;
    DiApiBuf clean = {0};
    size_t i = 0;
    while (i < len) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t n = utf8proc_iterate((const utf8proc_uint8_t *)text + i, (utf8proc_ssize_t)(len - i), &cp);
        bool ok = n > 0 && cp != 0;
        if (di_api_buf_append(&clean, ok ? text + i : "\xEF\xBF\xBD", ok ? (size_t)n : 3) != 0) break;
        i += ok ? (size_t)n : 1;
    }
    s = json_stringn(clean.data ? clean.data : "", clean.len);
    di_api_buf_free(&clean);
    return s;
}

char *di_api_new_call_id(size_t index) {
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    static _Atomic uint64_t counter;
    uint64_t x = atomic_fetch_add(&counter, 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)time(NULL) ^
                 ((uint64_t)(uintptr_t)&x << 7);
    char id[64];
    int n = snprintf(id, sizeof id, "call_%02zu_", index % 100);
    for (int i = 0; i < 24; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64: ids only need to be unique-ish */
        id[n + i] = alphabet[x % (sizeof alphabet - 1)];
    }
    id[n + 24] = '\0';
    return di_strdup(id);
}

int di_api_sse_send(DiApiBuf *sse, const char *event_name, json_t *payload) {
    if (!payload) return di_errorf("SSE event: out of memory building the payload");
    int rc = 0;
    if (event_name) rc = di_api_buf_printf(sse, "event: %s\n", event_name);
    if (rc == 0) rc = di_api_buf_puts(sse, "data: ");
    if (rc == 0) rc = di_api_buf_json(sse, payload);
    if (rc == 0) rc = di_api_buf_puts(sse, "\n\n");
    json_decref(payload);
    return rc;
}

const char *di_api_finish_name(DiApiFinish finish) {
    switch (finish) {
    case DI_API_FINISH_STOP: return "stop";
    case DI_API_FINISH_LENGTH: return "length";
    case DI_API_FINISH_TOOL_CALLS: return "tool_calls";
    case DI_API_FINISH_ABORT: return "abort";
    case DI_API_FINISH_ERROR: return "error";
    }
    return "stop";
}

/* ---- accumulation (protocol independent) ---------------------------------------------- */

static int accumulate(DiApiOutput *out, const DiApiEvent *ev) {
    if (out->finished) return di_errorf("output event after the finish event");
    switch (ev->kind) {
    case DI_API_EV_READY:
        if (ev->prompt_tokens < 0 || ev->cache_hit_tokens < 0 || ev->cache_hit_tokens > ev->prompt_tokens)
            return di_errorf("ready event: bad token counts (prompt %lld, cache hit %lld)",
                             (long long)ev->prompt_tokens, (long long)ev->cache_hit_tokens);
        out->prompt_tokens = ev->prompt_tokens;
        out->cache_hit_tokens = ev->cache_hit_tokens;
        return 0;
    case DI_API_EV_REASONING:
        out->reasoning_tokens += ev->tokens;
        out->completion_tokens += ev->tokens;
        return di_api_buf_append(&out->reasoning, ev->text, ev->len);
    case DI_API_EV_CONTENT:
        out->completion_tokens += ev->tokens;
        return di_api_buf_append(&out->content, ev->text, ev->len);
    case DI_API_EV_TOOL_BEGIN: {
        /* The name is the model's: an empty one (invoke name="") is passed on, not invented. */
        if (!ev->text && ev->len) return di_errorf("tool call event: NULL name of length %zu", ev->len);
        DiApiToolCall *calls = di_realloc_array(out->calls, out->n_calls + 1, sizeof *calls, "tool calls");
        if (!calls) return -1;
        out->calls = calls;
        DiApiToolCall *call = &calls[out->n_calls];
        memset(call, 0, sizeof *call);
        json_t *name = di_api_text(ev->text, ev->len); /* model bytes: made valid UTF-8 once, here */
        call->name = name ? di_strdup(json_string_value(name)) : NULL;
        json_decref(name);
        call->id = di_api_new_call_id(out->n_calls);
        out->n_calls++;
        if (!call->name || !call->id) return di_errorf("tool call: out of memory");
        out->completion_tokens += ev->tokens;
        return 0;
    }
    case DI_API_EV_TOOL_ARGS:
        if (!out->n_calls) return di_errorf("tool arguments event before any tool call began");
        out->completion_tokens += ev->tokens;
        return di_api_buf_append(&out->calls[out->n_calls - 1].args, ev->text, ev->len);
    case DI_API_EV_FINISH:
        if (ev->cache_hit_tokens < 0 || ev->cache_hit_tokens > out->prompt_tokens)
            return di_errorf("finish event: %lld prompt cache hit tokens of %lld prompt tokens",
                             (long long)ev->cache_hit_tokens, (long long)out->prompt_tokens);
        if (ev->cache_hit_tokens > 0) out->cache_hit_tokens = ev->cache_hit_tokens;
        out->finished = true;
        out->finish = ev->finish;
        out->completion_tokens += ev->tokens;
        if (ev->stop_sequence && !(out->stop_sequence = di_strdup(ev->stop_sequence))) return -1;
        if (ev->finish == DI_API_FINISH_ERROR && !(out->error = strndup(ev->text ? ev->text : "backend error",
                                                                    ev->text ? ev->len : 13)))
            return di_errorf("finish event: out of memory");
        /* An aborted request that still has a reader (server shutdown) is told so as an error. */
        if (ev->finish == DI_API_FINISH_ABORT && !(out->error = di_strdup("the request was aborted (server shutting down)")))
            return -1;
        /* recipe.md §3: tool_calls if at least one call completed. */
        if (out->n_calls && (ev->finish == DI_API_FINISH_STOP)) out->finish = DI_API_FINISH_TOOL_CALLS;
        return 0;
    }
    return di_errorf("unknown output event kind %d", (int)ev->kind);
}

/* ---- stream object -------------------------------------------------------------------- */

DiApiStream *di_api_stream_create(const DiApiRequest *req, const char *id, int64_t created) {
    if (!req || !id || !*id) {
        di_errorf("api stream: a request and a response id are required");
        return NULL;
    }
    DiApiStream *s = di_calloc(1, sizeof *s, "api stream");
    if (!s) return NULL;
    s->req = req;
    s->created = created;
    s->id = di_strdup(id);
    s->items = json_array();
    if (!s->id || !s->items) {
        di_api_stream_free(s);
        di_errorf("api stream: out of memory");
        return NULL;
    }
    return s;
}

void di_api_stream_free(DiApiStream *s) {
    if (!s) return;
    DiApiOutput *o = &s->out;
    di_api_buf_free(&o->reasoning);
    di_api_buf_free(&o->content);
    for (size_t i = 0; i < o->n_calls; i++) {
        free(o->calls[i].id);
        free(o->calls[i].name);
        di_api_buf_free(&o->calls[i].args);
    }
    free(o->calls);
    free(o->stop_sequence);
    free(o->error);
    json_decref(o->logprobs);
    json_decref(o->content_logprobs);
    json_decref(s->ev_logprobs);
    json_decref(s->items);
    free(s->id);
    free(s);
}

int di_api_stream_event(DiApiStream *s, const DiApiEvent *ev, DiApiBuf *sse) {
    if (!s || !ev) return di_errorf("api stream event: NULL argument");
    if ((ev->kind == DI_API_EV_REASONING || ev->kind == DI_API_EV_CONTENT || ev->kind == DI_API_EV_TOOL_ARGS) &&
        ev->len && !ev->text)
        return di_errorf("api stream event: text of length %zu is NULL", ev->len);
    if (accumulate(&s->out, ev) != 0 || di_api_logprobs_accumulate(s, ev) != 0) return -1;
    switch (s->req->protocol) {
    case DI_API_CHAT:
    case DI_API_COMPLETIONS: return di_api_chat_event(s, ev, sse);
    case DI_API_RESPONSES: return di_api_responses_event(s, ev, sse);
    case DI_API_MESSAGES: return di_api_messages_event(s, ev, sse);
    }
    return di_errorf("api stream: unknown protocol");
}

const DiApiOutput *di_api_stream_output(const DiApiStream *s) { return s ? &s->out : NULL; }

json_t *di_api_stream_response(const DiApiStream *s) {
    if (!s) return NULL;
    switch (s->req->protocol) {
    case DI_API_CHAT:
    case DI_API_COMPLETIONS: return di_api_chat_response(s);
    case DI_API_RESPONSES:
        return di_api_responses_response(s, s->out.finish == DI_API_FINISH_LENGTH ? "incomplete" : "completed");
    case DI_API_MESSAGES: return di_api_messages_response(s);
    }
    return NULL;
}

/* ---- errors --------------------------------------------------------------------------- */

static const char *openai_error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    }
    return status >= 500 ? "internal_error" : "invalid_request_error";
}

static const char *anthropic_error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: case 529: return "overloaded_error";
    }
    return status >= 500 ? "api_error" : "invalid_request_error";
}

json_t *di_api_error_body(DiApiProtocol protocol, int status, const char *message) {
    if (!message) message = "unknown error";
    if (protocol == DI_API_MESSAGES)
        return json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", anthropic_error_type(status),
                         "message", message);
    /* recipe.md §4: {"error":{"message","type","param":null,"code":…}}. */
    return json_pack("{s:{s:s, s:s, s:n, s:s}}", "error", "message", message, "type", openai_error_type(status),
                     "param", "code", openai_error_type(status));
}

int di_api_error_sse(DiApiProtocol protocol, const char *message, DiApiBuf *sse) {
    if (!sse) return di_errorf("api error SSE: NULL buffer");
    json_t *body = di_api_error_body(protocol, 500, message);
    if (protocol == DI_API_MESSAGES) return di_api_sse_send(sse, "error", body);
    if (protocol == DI_API_RESPONSES) {
        json_decref(body);
        body = json_pack("{s:s, s:s, s:s, s:n}", "type", "error", "code", "server_error", "message",
                         message ? message : "error", "param");
        return di_api_sse_send(sse, "error", body);
    }
    return di_api_sse_send(sse, NULL, body);
}

/* ---- OpenAI Chat Completions and Completions ------------------------------------------- */

static json_t *chat_usage(const DiApiStream *s) {
    const DiApiOutput *o = &s->out;
    json_t *u = json_pack("{s:I, s:I, s:I, s:{s:I}, s:I, s:I}", "prompt_tokens", (json_int_t)o->prompt_tokens,
                          "completion_tokens", (json_int_t)o->completion_tokens, "total_tokens",
                          (json_int_t)(o->prompt_tokens + o->completion_tokens), "prompt_tokens_details",
                          "cached_tokens", (json_int_t)o->cache_hit_tokens, "prompt_cache_hit_tokens",
                          (json_int_t)o->cache_hit_tokens, "prompt_cache_miss_tokens",
                          (json_int_t)(o->prompt_tokens - o->cache_hit_tokens));
    if (u && s->req->thinking && o->reasoning_tokens > 0)
        json_object_set_new(u, "completion_tokens_details",
                            json_pack("{s:I}", "reasoning_tokens", (json_int_t)o->reasoning_tokens));
    return u;
}

static const char *chat_finish(const DiApiOutput *o) {
    return o->finish == DI_API_FINISH_ABORT || o->finish == DI_API_FINISH_ERROR ? "stop" : di_api_finish_name(o->finish);
}

/* A chunk's logprobs: these entries in the protocol's form. */
static json_t *choice_logprobs(DiApiStream *s, json_t *entries) {
    return s->req->protocol == DI_API_COMPLETIONS ? di_api_completions_logprobs(entries, &s->lp_offset)
                                                  : json_pack("{s:O, s:n}", "content", entries, "refusal");
}

/* One chunk around `delta` (Chat) or `text` (Completions), with the event's logprobs; steals `delta`. */
static json_t *chat_chunk(DiApiStream *s, json_t *delta, const char *finish, bool final) {
    bool completions = s->req->protocol == DI_API_COMPLETIONS;
    json_t *choice;
    json_t *lp = s->ev_logprobs ? choice_logprobs(s, s->ev_logprobs) : json_null();
    if (completions) {
        json_t *text = json_object_get(delta, "content");
        text = json_is_string(text) ? json_incref(text) : json_string("");
        choice = json_pack("{s:o, s:i, s:o, s:o}", "text", text, "index", 0,
                           "logprobs", lp, "finish_reason", finish ? json_string(finish) : json_null());
        json_decref(delta);
    } else {
        choice = json_pack("{s:i, s:o, s:o, s:o}", "index", 0, "delta", delta, "logprobs", lp, "finish_reason",
                           finish ? json_string(finish) : json_null());
    }
    json_t *chunk = json_pack("{s:s, s:s, s:I, s:s, s:n, s:[o]}", "id", s->id, "object",
                              completions ? "text_completion" : "chat.completion.chunk", "created",
                              (json_int_t)s->created, "model", s->req->model ? s->req->model : "",
                              "system_fingerprint", "choices", choice);
    if (!chunk) return NULL;
    if (final) json_object_set_new(chunk, "usage", chat_usage(s));
    else if (s->req->include_usage) json_object_set_new(chunk, "usage", json_null());
    return chunk;
}

static json_t *content_delta(const DiApiStream *s, const char *text, size_t len) {
    json_t *d = json_object();
    json_object_set_new(d, "content", di_api_text(text, len));
    if (s->req->thinking) json_object_set_new(d, "reasoning_content", json_null());
    return d;
}

int di_api_chat_event(DiApiStream *s, const DiApiEvent *ev, DiApiBuf *sse) {
    if (!sse) return 0;
    json_t *delta = NULL;
    switch (ev->kind) {
    case DI_API_EV_READY:
        if (s->req->protocol == DI_API_COMPLETIONS) return 0;
        /* the opening delta names the field the output starts in (a prefix may continue the answer) */
        delta = s->req->thinking && di_api_parse_start(s->req) != DI_PARSE_CONTINUE_CONTENT
                    ? json_pack("{s:s, s:n, s:s}", "role", "assistant", "content", "reasoning_content", "")
                    : s->req->thinking ? json_pack("{s:s, s:s, s:n}", "role", "assistant", "content", "", "reasoning_content")
                    : json_pack("{s:s, s:s}", "role", "assistant", "content", "");
        break;
    case DI_API_EV_REASONING:
        if (!ev->len) return 0;
        delta = json_pack("{s:n, s:o}", "content", "reasoning_content", di_api_text(ev->text, ev->len));
        break;
    case DI_API_EV_CONTENT:
        if (!ev->len) return 0;
        delta = content_delta(s, ev->text, ev->len);
        break;
    case DI_API_EV_TOOL_BEGIN: {
        const DiApiToolCall *c = &s->out.calls[s->out.n_calls - 1];
        delta = json_pack("{s:[{s:I, s:s, s:s, s:{s:s, s:s}}]}", "tool_calls", "index", (json_int_t)(s->out.n_calls - 1),
                          "id", c->id, "type", "function", "function", "name", c->name, "arguments", "");
        break;
    }
    case DI_API_EV_TOOL_ARGS:
        if (!ev->len) return 0;
        delta = json_pack("{s:[{s:I, s:{s:o}}]}", "tool_calls", "index", (json_int_t)(s->out.n_calls - 1), "function",
                          "arguments", di_api_text(ev->text, ev->len));
        break;
    case DI_API_EV_FINISH: {
        if (s->out.finish == DI_API_FINISH_ERROR || s->out.finish == DI_API_FINISH_ABORT) {
            if (di_api_error_sse(s->req->protocol, s->out.error, sse) != 0) return -1;
            return di_api_buf_puts(sse, "data: [DONE]\n\n");
        }
        json_t *chunk = chat_chunk(s, content_delta(s, "", 0), chat_finish(&s->out), true);
        if (di_api_sse_send(sse, NULL, chunk) != 0) return -1;
        return di_api_buf_puts(sse, "data: [DONE]\n\n");
    }
    }
    if (!delta) return di_errorf("chat chunk: out of memory");
    return di_api_sse_send(sse, NULL, chat_chunk(s, delta, NULL, false));
}

json_t *di_api_chat_response(const DiApiStream *s) {
    const DiApiOutput *o = &s->out;
    const char *model = s->req->model ? s->req->model : "";
    size_t offset = 0;
    json_t *lp = s->req->logprobs < 0                      ? json_null()
                 : s->req->protocol == DI_API_COMPLETIONS ? di_api_completions_logprobs(o->logprobs, &offset)
                                                          : json_pack("{s:o, s:n}", "content",
                                                                      o->logprobs ? json_incref(o->logprobs) : json_array(),
                                                                      "refusal");
    if (s->req->protocol == DI_API_COMPLETIONS)
        return json_pack("{s:s, s:s, s:I, s:s, s:n, s:[{s:o, s:i, s:o, s:s}], s:o}", "id", s->id, "object",
                         "text_completion", "created", (json_int_t)s->created, "model", model, "system_fingerprint",
                         "choices", "text", di_api_text(o->content.data, o->content.len), "index", 0, "logprobs",
                         lp, "finish_reason", chat_finish(o), "usage", chat_usage(s));
    json_t *msg = json_pack("{s:s, s:o}", "role", "assistant", "content", di_api_text(o->content.data, o->content.len));
    if (!msg) {
        json_decref(lp);
        return NULL;
    }
    if (s->req->thinking && di_api_parse_start(s->req) != DI_PARSE_CONTINUE_CONTENT) /* as the opening delta */
        json_object_set_new(msg, "reasoning_content", di_api_text(o->reasoning.data, o->reasoning.len));
    if (o->n_calls) {
        json_t *calls = json_array();
        for (size_t i = 0; i < o->n_calls; i++)
            json_array_append_new(calls, json_pack("{s:I, s:s, s:s, s:{s:s, s:o}}", "index", (json_int_t)i, "id",
                                                   o->calls[i].id, "type", "function", "function", "name",
                                                   o->calls[i].name, "arguments",
                                                   di_api_text(o->calls[i].args.data, o->calls[i].args.len)));
        json_object_set_new(msg, "tool_calls", calls);
    }
    return json_pack("{s:s, s:s, s:I, s:s, s:[{s:i, s:o, s:o, s:s}], s:o, s:n}", "id", s->id, "object",
                     "chat.completion", "created", (json_int_t)s->created, "model", model, "choices", "index", 0,
                     "message", msg, "logprobs", lp, "finish_reason", chat_finish(o), "usage", chat_usage(s),
                     "system_fingerprint");
}
