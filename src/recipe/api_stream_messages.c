/* api_stream_messages.c — the Anthropic Messages encoder (recipe.md §4.3; official
 * MessagesChunkGenerator): message_start, content blocks (thinking with a signature_delta
 * before it closes, text, tool_use with input_json_delta), message_delta with the stop reason
 * and output tokens, message_stop. */
#include "recipe/api_stream_internal.h"

#include "base/error.h"

#include <string.h>

/* Usage mapping recipe.md §4.3 [U]: cache_read = hit, input = prompt - hit, creation = 0. */
static json_t *usage(const DiApiStream *s, int64_t output_tokens) {
    const DiApiOutput *o = &s->out;
    return json_pack("{s:I, s:i, s:I, s:I, s:s}", "input_tokens", (json_int_t)(o->prompt_tokens - o->cache_hit_tokens),
                     "cache_creation_input_tokens", 0, "cache_read_input_tokens", (json_int_t)o->cache_hit_tokens,
                     "output_tokens", (json_int_t)output_tokens, "service_tier", "standard");
}

static const char *stop_reason(const DiApiOutput *o) {
    switch (o->finish) {
    case DI_API_FINISH_LENGTH: return "max_tokens";
    case DI_API_FINISH_TOOL_CALLS: return "tool_use";
    default: return o->stop_sequence ? "stop_sequence" : "end_turn";
    }
}

static int send_event(DiApiBuf *sse, const char *type, json_t *payload) {
    if (!payload) return di_errorf("messages event %s: out of memory", type);
    json_object_set_new(payload, "type", json_string(type));
    return di_api_sse_send(sse, type, payload);
}

static int close_block(DiApiStream *s, DiApiBuf *sse) {
    if (s->open == BLOCK_NONE) return 0;
    BlockKind kind = s->open;
    s->open = BLOCK_NONE;
    if (!sse) return 0;
    if (kind == BLOCK_REASONING &&
        send_event(sse, "content_block_delta",
                   json_pack("{s:i, s:{s:s, s:s}}", "index", s->block_index, "delta", "type", "signature_delta",
                             "signature", s->id)) != 0)
        return -1;
    return send_event(sse, "content_block_stop", json_pack("{s:i}", "index", s->block_index));
}

static int open_block(DiApiStream *s, BlockKind kind, DiApiBuf *sse) {
    if (close_block(s, sse) != 0) return -1;
    s->open = kind;
    s->block_index = s->n_blocks++;
    if (!sse) return 0;
    json_t *block;
    if (kind == BLOCK_REASONING) block = json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature", "");
    else if (kind == BLOCK_TEXT) block = json_pack("{s:s, s:s}", "type", "text", "text", "");
    else {
        const DiApiToolCall *c = &s->out.calls[s->out.n_calls - 1];
        block = json_pack("{s:s, s:s, s:s, s:{}}", "type", "tool_use", "id", c->id, "name", c->name, "input");
    }
    if (send_event(sse, "content_block_start", json_pack("{s:i, s:o}", "index", s->block_index, "content_block", block)) != 0)
        return -1;
    if (s->block_index == 0 && send_event(sse, "ping", json_object()) != 0) return -1;
    return 0;
}

static int delta(DiApiStream *s, DiApiBuf *sse, const char *type, const char *field, const DiApiEvent *ev) {
    return send_event(sse, "content_block_delta",
                      json_pack("{s:i, s:{s:s, s:o}}", "index", s->block_index, "delta", "type", type, field,
                                di_api_text(ev->text, ev->len)));
}

int di_api_messages_event(DiApiStream *s, const DiApiEvent *ev, DiApiBuf *sse) {
    switch (ev->kind) {
    case DI_API_EV_READY:
        if (!sse) return 0;
        return send_event(sse, "message_start",
                          json_pack("{s:{s:s, s:s, s:s, s:s, s:[], s:n, s:n, s:o}}", "message", "id", s->id, "type",
                                    "message", "role", "assistant", "model", s->req->model ? s->req->model : "",
                                    "content", "stop_reason", "stop_sequence", "usage", usage(s, 0)));
    case DI_API_EV_REASONING:
        if (!ev->len) return 0;
        if (s->open != BLOCK_REASONING && open_block(s, BLOCK_REASONING, sse) != 0) return -1;
        return sse ? delta(s, sse, "thinking_delta", "thinking", ev) : 0;
    case DI_API_EV_CONTENT:
        if (!ev->len) return 0;
        if (s->open != BLOCK_TEXT && open_block(s, BLOCK_TEXT, sse) != 0) return -1;
        return sse ? delta(s, sse, "text_delta", "text", ev) : 0;
    case DI_API_EV_TOOL_BEGIN: return open_block(s, BLOCK_TOOL, sse);
    case DI_API_EV_TOOL_ARGS:
        if (!ev->len || !sse) return 0;
        return delta(s, sse, "input_json_delta", "partial_json", ev);
    case DI_API_EV_FINISH:
        if (close_block(s, sse) != 0) return -1;
        if (!sse) return 0;
        if (s->out.finish == DI_API_FINISH_ERROR || s->out.finish == DI_API_FINISH_ABORT)
            return di_api_error_sse(DI_API_MESSAGES, s->out.error, sse);
        if (send_event(sse, "message_delta",
                       json_pack("{s:{s:s, s:o}, s:o}", "delta", "stop_reason", stop_reason(&s->out), "stop_sequence",
                                 s->out.stop_sequence ? json_string(s->out.stop_sequence) : json_null(), "usage",
                                 usage(s, s->out.completion_tokens))) != 0)
            return -1;
        return send_event(sse, "message_stop", json_object());
    }
    return di_errorf("messages: unknown event kind");
}

json_t *di_api_messages_response(const DiApiStream *s) {
    const DiApiOutput *o = &s->out;
    json_t *content = json_array();
    if (!content) return NULL;
    if (o->reasoning.len)
        json_array_append_new(content, json_pack("{s:s, s:o, s:s}", "type", "thinking", "thinking",
                                                 di_api_text(o->reasoning.data, o->reasoning.len), "signature", s->id));
    if (o->content.len)
        json_array_append_new(content, json_pack("{s:s, s:o}", "type", "text", "text",
                                                 di_api_text(o->content.data, o->content.len)));
    for (size_t i = 0; i < o->n_calls; i++) {
        /* Arguments are JSON text built by the parser; a malformed one (model output) becomes {}. */
        json_t *input = o->calls[i].args.len ? json_loadb(o->calls[i].args.data, o->calls[i].args.len, 0, NULL) : NULL;
        if (!json_is_object(input)) {
            json_decref(input);
            input = json_object();
        }
        json_array_append_new(content, json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id", o->calls[i].id,
                                                 "name", o->calls[i].name, "input", input));
    }
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:o, s:o}", "id", s->id, "type", "message", "role", "assistant",
                     "model", s->req->model ? s->req->model : "", "content", content, "stop_reason", stop_reason(o),
                     "stop_sequence", o->stop_sequence ? json_string(o->stop_sequence) : json_null(), "usage",
                     usage(s, o->completion_tokens));
}
