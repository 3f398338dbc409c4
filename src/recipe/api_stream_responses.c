/* api_stream_responses.c — the OpenAI Responses encoder (recipe.md §4.2; official
 * ResponsesChunkGenerator): output items (reasoning, message, function_call) opened and closed
 * in order, every SSE payload carrying `type` and an increasing `sequence_number`, and the
 * terminal response.completed / response.incomplete carrying the whole response. */
#include "recipe/api_stream_internal.h"

#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int send_event(DiApiStream *s, DiApiBuf *sse, const char *type, json_t *payload) {
    if (!payload) return di_errorf("responses event %s: out of memory", type);
    json_object_set_new(payload, "type", json_string(type));
    json_object_set_new(payload, "sequence_number", json_integer(s->seq++));
    return di_api_sse_send(sse, type, payload);
}

static void item_id(const DiApiStream *s, const char *prefix, int index, char *out, size_t size) {
    snprintf(out, size, "%s_%s_%d", prefix, s->id, index);
}

/* A custom tool's input, decoded from the argument JSON text so far: the model's markup gives
 * {"input": "<JSON-escaped text>"}; as much of the text as is complete is appended to `out`
 * (an escape cut by the chunk boundary waits for the next chunk). */
static void custom_input(const char *args, size_t len, DiApiBuf *out) {
    static const char head[] = "{\"input\": \"";
    if (len < sizeof head - 1 || memcmp(args, head, sizeof head - 1) != 0) return;
    for (size_t i = sizeof head - 1; i < len;) {
        unsigned char c = (unsigned char)args[i];
        if (c == '"') return; /* the end of the string */
        if (c != '\\') {
            di_api_buf_append(out, args + i, 1);
            i++;
            continue;
        }
        if (i + 1 >= len) return;
        char e = args[i + 1], one = 0;
        switch (e) {
        case 'n': one = '\n'; break;
        case 't': one = '\t'; break;
        case 'r': one = '\r'; break;
        case 'b': one = '\b'; break;
        case 'f': one = '\f'; break;
        case '"': case '\\': case '/': one = e; break;
        case 'u': {
            if (i + 6 > len) return;
            char hex[5] = {args[i + 2], args[i + 3], args[i + 4], args[i + 5], 0};
            unsigned cp = (unsigned)strtoul(hex, NULL, 16), used = 6;
            if (cp >= 0xD800 && cp < 0xDC00) { /* a surrogate pair: wait for its second half */
                if (i + 12 > len) return;
                char lo[5] = {args[i + 8], args[i + 9], args[i + 10], args[i + 11], 0};
                cp = 0x10000 + ((cp - 0xD800) << 10) + ((unsigned)strtoul(lo, NULL, 16) - 0xDC00);
                used = 12;
            }
            char utf8[4];
            size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
            if (n == 1) utf8[0] = (char)cp;
            else if (n == 2) utf8[0] = (char)(0xC0 | cp >> 6), utf8[1] = (char)(0x80 | (cp & 0x3F));
            else if (n == 3)
                utf8[0] = (char)(0xE0 | cp >> 12), utf8[1] = (char)(0x80 | ((cp >> 6) & 0x3F)), utf8[2] = (char)(0x80 | (cp & 0x3F));
            else
                utf8[0] = (char)(0xF0 | cp >> 18), utf8[1] = (char)(0x80 | ((cp >> 12) & 0x3F)),
                utf8[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), utf8[3] = (char)(0x80 | (cp & 0x3F));
            di_api_buf_append(out, utf8, n);
            i += used;
            continue;
        }
        default: one = e; break;
        }
        di_api_buf_append(out, &one, 1);
        i += 2;
    }
}

static bool is_custom_tool(const DiApiStream *s, const char *name) {
    size_t i;
    json_t *n;
    json_array_foreach(s->req->custom_tools, i, n) {
        if (strcmp(json_string_value(n), name) == 0) return true;
    }
    return false;
}

/* The output item of the block being streamed, in its final (completed) form. */
/* The answer's token logprobs (output_text.logprobs): [] unless the request asked for them. */
static json_t *content_logprobs(const DiApiOutput *o) {
    return o->content_logprobs ? json_deep_copy(o->content_logprobs) : json_array();
}

static json_t *finished_item(const DiApiStream *s, BlockKind kind, int index, const char *status) {
    const DiApiOutput *o = &s->out;
    char id[160];
    switch (kind) {
    case BLOCK_REASONING: {
        item_id(s, "rs", index, id, sizeof id);
        char enc[160];
        snprintf(enc, sizeof enc, "%s-%d", s->id, index);
        return json_pack("{s:s, s:s, s:s, s:[{s:s, s:o}], s:[], s:s}", "type", "reasoning", "id", id, "status",
                         status, "content", "type", "reasoning_text", "text",
                         di_api_text(o->reasoning.data, o->reasoning.len), "summary", "encrypted_content", enc);
    }
    case BLOCK_TEXT:
        item_id(s, "msg", index, id, sizeof id);
        return json_pack("{s:s, s:s, s:s, s:s, s:s, s:[{s:s, s:[], s:o, s:o}]}", "type", "message", "id", id,
                         "status", status, "role", "assistant", "phase",
                         o->n_calls ? "commentary" : "final_answer", "content", "type", "output_text",
                         "annotations", "logprobs", content_logprobs(o), "text",
                         di_api_text(o->content.data, o->content.len));
    case BLOCK_TOOL: {
        item_id(s, "fc", index, id, sizeof id);
        const DiApiToolCall *c = &o->calls[o->n_calls - 1];
        return json_pack("{s:s, s:s, s:s, s:s, s:s, s:o}", "type", "function_call", "id", id, "status", status,
                         "call_id", c->id, "name", c->name, "arguments", di_api_text(c->args.data, c->args.len));
    }
    case BLOCK_CUSTOM_TOOL: {
        item_id(s, "ctc", index, id, sizeof id);
        const DiApiToolCall *c = &o->calls[o->n_calls - 1];
        DiApiBuf input = {0};
        custom_input(c->args.data, c->args.len, &input);
        json_t *item = json_pack("{s:s, s:s, s:s, s:s, s:s, s:o}", "type", "custom_tool_call", "id", id, "status", status,
                                 "call_id", c->id, "name", c->name, "input", di_api_text(input.data, input.len));
        di_api_buf_free(&input);
        return item;
    }
    case BLOCK_NONE: break;
    }
    return NULL;
}

/* Close the open item: the .done events, then remember the finished item for the response.
 * An item cut short by the output limit is "incomplete" (as the official generator reports). */
static int close_item(DiApiStream *s, DiApiBuf *sse) {
    if (s->open == BLOCK_NONE) return 0;
    int idx = s->block_index;
    const char *status = s->out.finished && s->out.finish == DI_API_FINISH_LENGTH ? "incomplete" : "completed";
    json_t *item = finished_item(s, s->open, idx, status);
    if (!item) return di_errorf("responses: out of memory");
    const char *iid = json_string_value(json_object_get(item, "id"));
    int rc = 0;
    if (sse && s->open == BLOCK_REASONING) {
        json_t *text = json_object_get(json_array_get(json_object_get(item, "content"), 0), "text");
        rc = send_event(s, sse, "response.reasoning_text.done",
                        json_pack("{s:i, s:s, s:i, s:O}", "content_index", 0, "item_id", iid, "output_index", idx,
                                  "text", text));
        if (rc == 0)
            rc = send_event(s, sse, "response.content_part.done",
                            json_pack("{s:i, s:s, s:i, s:{s:s, s:O}}", "content_index", 0, "item_id", iid,
                                      "output_index", idx, "part", "type", "reasoning_text", "text", text));
    } else if (sse && s->open == BLOCK_TEXT) {
        json_t *part = json_array_get(json_object_get(item, "content"), 0);
        rc = send_event(s, sse, "response.output_text.done",
                        json_pack("{s:i, s:s, s:O, s:i, s:O}", "content_index", 0, "item_id", iid, "logprobs",
                                  json_object_get(part, "logprobs"), "output_index", idx, "text",
                                  json_object_get(part, "text")));
        if (rc == 0)
            rc = send_event(s, sse, "response.content_part.done",
                            json_pack("{s:i, s:s, s:i, s:O}", "content_index", 0, "item_id", iid, "output_index",
                                      idx, "part", part));
    } else if (sse && s->open == BLOCK_CUSTOM_TOOL) {
        rc = send_event(s, sse, "response.custom_tool_call_input.done",
                        json_pack("{s:O, s:s, s:i}", "input", json_object_get(item, "input"), "item_id", iid,
                                  "output_index", idx));
    } else if (sse && s->open == BLOCK_TOOL) {
        rc = send_event(s, sse, "response.function_call_arguments.done",
                        json_pack("{s:O, s:s, s:i}", "arguments", json_object_get(item, "arguments"), "item_id",
                                  iid, "output_index", idx));
    }
    if (rc == 0 && sse)
        rc = send_event(s, sse, "response.output_item.done", json_pack("{s:O, s:i}", "item", item, "output_index", idx));
    json_array_append_new(s->items, item);
    s->open = BLOCK_NONE;
    return rc;
}

static int open_item(DiApiStream *s, BlockKind kind, DiApiBuf *sse) {
    if (close_item(s, sse) != 0) return -1;
    s->open = kind;
    s->block_index = s->n_blocks++;
    s->custom_sent = 0;
    if (!sse) return 0;
    int idx = s->block_index;
    char id[160];
    json_t *item = NULL, *part = NULL;
    if (kind == BLOCK_REASONING) {
        item_id(s, "rs", idx, id, sizeof id);
        char enc[160];
        snprintf(enc, sizeof enc, "%s-%d", s->id, idx);
        item = json_pack("{s:s, s:s, s:s, s:[], s:[], s:s}", "type", "reasoning", "id", id, "status", "in_progress",
                         "content", "summary", "encrypted_content", enc);
        part = json_pack("{s:s, s:s}", "type", "reasoning_text", "text", "");
    } else if (kind == BLOCK_TEXT) {
        item_id(s, "msg", idx, id, sizeof id);
        item = json_pack("{s:s, s:s, s:s, s:s, s:s, s:[]}", "type", "message", "id", id, "status", "in_progress",
                         "role", "assistant", "phase", "final_answer", "content");
        part = json_pack("{s:s, s:[], s:[], s:s}", "type", "output_text", "annotations", "logprobs", "text", "");
    } else if (kind == BLOCK_CUSTOM_TOOL) {
        item_id(s, "ctc", idx, id, sizeof id);
        const DiApiToolCall *c = &s->out.calls[s->out.n_calls - 1];
        item = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "type", "custom_tool_call", "id", id, "status", "in_progress",
                         "call_id", c->id, "name", c->name, "input", "");
    } else {
        item_id(s, "fc", idx, id, sizeof id);
        const DiApiToolCall *c = &s->out.calls[s->out.n_calls - 1];
        item = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "type", "function_call", "id", id, "status", "in_progress",
                         "call_id", c->id, "name", c->name, "arguments", "");
    }
    int rc = send_event(s, sse, "response.output_item.added", json_pack("{s:o, s:i}", "item", item, "output_index", idx));
    if (rc == 0 && part)
        rc = send_event(s, sse, "response.content_part.added",
                        json_pack("{s:i, s:s, s:i, s:o}", "content_index", 0, "item_id", id, "output_index", idx, "part",
                                  part));
    return rc;
}

static json_t *usage(const DiApiStream *s) {
    const DiApiOutput *o = &s->out;
    return json_pack("{s:I, s:{s:I}, s:I, s:{s:I}, s:I}", "input_tokens", (json_int_t)o->prompt_tokens,
                     "input_tokens_details", "cached_tokens", (json_int_t)o->cache_hit_tokens, "output_tokens",
                     (json_int_t)o->completion_tokens, "output_tokens_details", "reasoning_tokens",
                     (json_int_t)o->reasoning_tokens, "total_tokens",
                     (json_int_t)(o->prompt_tokens + o->completion_tokens));
}

json_t *di_api_responses_response(const DiApiStream *s, const char *status) {
    json_t *r = json_pack("{s:s, s:s, s:I, s:s, s:s, s:O}", "id", s->id, "object", "response", "created_at",
                          (json_int_t)s->created, "status", status, "model", s->req->model ? s->req->model : "",
                          "output", s->items);
    if (!r) return NULL;
    /* Request settings the response reports (ResponsesEcho): instructions, limits, tools... */
    if (s->req->echo) json_object_update_missing(r, s->req->echo);
    bool done = strcmp(status, "in_progress") != 0;
    json_object_set_new(r, "completed_at", strcmp(status, "completed") == 0 ? json_integer(s->created) : json_null());
    json_object_set_new(r, "error", json_null());
    json_object_set_new(r, "incomplete_details", strcmp(status, "incomplete") == 0
                                                     ? json_pack("{s:s}", "reason", "max_output_tokens")
                                                     : json_null());
    json_object_set_new(r, "usage", done ? usage(s) : json_null());
    return r;
}

int di_api_responses_event(DiApiStream *s, const DiApiEvent *ev, DiApiBuf *sse) {
    char id[160];
    switch (ev->kind) {
    case DI_API_EV_READY:
        if (!sse) return 0;
        if (send_event(s, sse, "response.created",
                       json_pack("{s:o}", "response", di_api_responses_response(s, "in_progress"))) != 0)
            return -1;
        return send_event(s, sse, "response.in_progress",
                          json_pack("{s:o}", "response", di_api_responses_response(s, "in_progress")));
    case DI_API_EV_REASONING:
        if (!ev->len) return 0;
        if (s->open != BLOCK_REASONING && open_item(s, BLOCK_REASONING, sse) != 0) return -1;
        if (!sse) return 0;
        item_id(s, "rs", s->block_index, id, sizeof id);
        return send_event(s, sse, "response.reasoning_text.delta",
                          json_pack("{s:i, s:o, s:s, s:i}", "content_index", 0, "delta", di_api_text(ev->text, ev->len),
                                    "item_id", id, "output_index", s->block_index));
    case DI_API_EV_CONTENT:
        if (!ev->len) return 0;
        if (s->open != BLOCK_TEXT && open_item(s, BLOCK_TEXT, sse) != 0) return -1;
        if (!sse) return 0;
        item_id(s, "msg", s->block_index, id, sizeof id);
        return send_event(s, sse, "response.output_text.delta",
                          json_pack("{s:i, s:o, s:s, s:o, s:i}", "content_index", 0, "delta",
                                    di_api_text(ev->text, ev->len), "item_id", id, "logprobs",
                                    s->ev_logprobs ? json_incref(s->ev_logprobs) : json_array(), "output_index",
                                    s->block_index));
    case DI_API_EV_TOOL_BEGIN:
        return open_item(s, is_custom_tool(s, s->out.calls[s->out.n_calls - 1].name) ? BLOCK_CUSTOM_TOOL : BLOCK_TOOL, sse);
    case DI_API_EV_TOOL_ARGS:
        if (!ev->len || !sse) return 0;
        if (s->open == BLOCK_CUSTOM_TOOL) { /* stream the decoded input text, not the JSON around it */
            const DiApiToolCall *c = &s->out.calls[s->out.n_calls - 1];
            DiApiBuf input = {0};
            custom_input(c->args.data, c->args.len, &input);
            int rc = 0;
            if (input.len > s->custom_sent) {
                item_id(s, "ctc", s->block_index, id, sizeof id);
                rc = send_event(s, sse, "response.custom_tool_call_input.delta",
                                json_pack("{s:o, s:s, s:i}", "delta",
                                          di_api_text(input.data + s->custom_sent, input.len - s->custom_sent),
                                          "item_id", id, "output_index", s->block_index));
                s->custom_sent = input.len;
            }
            di_api_buf_free(&input);
            return rc;
        }
        item_id(s, "fc", s->block_index, id, sizeof id);
        return send_event(s, sse, "response.function_call_arguments.delta",
                          json_pack("{s:o, s:s, s:i}", "delta", di_api_text(ev->text, ev->len), "item_id", id,
                                    "output_index", s->block_index));
    case DI_API_EV_FINISH: {
        if (close_item(s, sse) != 0) return -1;
        if (!sse) return 0;
        if (s->out.finish == DI_API_FINISH_ERROR || s->out.finish == DI_API_FINISH_ABORT) {
            json_t *r = di_api_responses_response(s, "failed");
            if (r) json_object_set_new(r, "error", json_pack("{s:s, s:s}", "code", "server_error", "message",
                                                             s->out.error ? s->out.error : "error"));
            return send_event(s, sse, "response.failed", json_pack("{s:o}", "response", r));
        }
        bool incomplete = s->out.finish == DI_API_FINISH_LENGTH;
        return send_event(s, sse, incomplete ? "response.incomplete" : "response.completed",
                          json_pack("{s:o}", "response",
                                    di_api_responses_response(s, incomplete ? "incomplete" : "completed")));
    }
    }
    return di_errorf("responses: unknown event kind");
}
