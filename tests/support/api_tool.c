/* api_tool.c — a test driver of the protocol conversion, for the oracle tests
 * (tests/python/test_api_oracle.py compares it with the official deepseek-recipe package).
 *   api_tool convert  stdin: one {"protocol","body"} per line -> one line each:
 *                     {"ok":true,"conversation":{...},"options":{...}} or {"ok":false,"status","message"}
 *   api_tool stream   stdin: {"protocol","body","id","created","events":[{"kind",...}]}
 *                     -> {"sse":"<the SSE bytes>","response":{...non-streaming body...}}
 *   api_tool text     stdin: {"protocol","body","id","created","prompt_tokens","cache_hit_tokens",
 *                     "chunks":["raw model text", ...],"finish":"stop"|"length"}: the raw text through
 *                     the output parser (serve/backend_parse.h), one token per chunk -> as `stream` */
#include "base/error.h"
#include "recipe/api_request.h"
#include "recipe/api_stream.h"
#include "serve/backend_parse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *k_protocols[] = {"chat", "completions", "responses", "messages"};

static int protocol_of(const json_t *line, DiApiProtocol *out) {
    const char *name = json_string_value(json_object_get(line, "protocol"));
    for (int i = 0; name && i < 4; i++)
        if (strcmp(name, k_protocols[i]) == 0) {
            *out = (DiApiProtocol)i;
            return 0;
        }
    return di_errorf("protocol: expected chat, completions, responses or messages");
}

static json_t *options(const DiApiRequest *r) {
    static const char *const choices[] = {"auto", "none", "required"};
    json_t *stop = json_array();
    for (size_t i = 0; i < r->n_stop; i++) json_array_append_new(stop, json_string(r->stop[i]));
    json_t *constraint = r->constraint_kind[0] ? json_pack("{s:s, s:s}", "kind", r->constraint_kind, "schema",
                                                           r->constraint ? r->constraint : "")
                                               : json_null();
    json_t *so = r->so_type ? json_pack("{s:i, s:s}", "type", r->so_type, "text", r->so_text) : json_null();
    return json_pack("{s:b, s:s, s:I, s:f, s:f, s:o, s:s, s:b, s:b, s:I, s:b, s:o, s:o}", "thinking", r->thinking,
                     "reasoning_effort", r->reasoning_effort, "max_tokens", (json_int_t)r->max_tokens, "temperature",
                     r->temperature, "top_p", r->top_p, "stop", stop, "tool_choice", choices[r->tool_choice],
                     "json_mode", r->json_mode, "stream", r->stream, "thinking_budget_tokens",
                     (json_int_t)r->thinking_budget_tokens, "include_usage", r->include_usage, "output_constraint",
                     constraint, "structured_outputs", so);
}

static char *body_text(const json_t *line) {
    json_t *body = json_object_get(line, "body");
    if (json_is_string(body)) return strdup(json_string_value(body)); /* raw text: malformed JSON cases */
    return json_dumps(body, JSON_COMPACT);
}

static int convert(void) {
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, stdin) > 0) {
        json_t *in = json_loads(line, 0, NULL), *out;
        DiApiProtocol p;
        DiApiRequest r;
        int status = 0;
        char *body = in ? body_text(in) : NULL;
        if (!in || !body || protocol_of(in, &p) != 0) {
            fprintf(stderr, "api_tool: bad input line\n");
            return 2;
        }
        if (di_api_request_parse(p, body, strlen(body), &r, &status) == 0) {
            out = json_pack("{s:b, s:O, s:o}", "ok", 1, "conversation", r.conversation ? r.conversation : json_null(),
                            "options", options(&r));
            di_api_request_free(&r);
        } else {
            out = json_pack("{s:b, s:i, s:s}", "ok", 0, "status", status, "message", di_error_message());
        }
        char *text = json_dumps(out, JSON_COMPACT);
        puts(text);
        free(text);
        free(body);
        json_decref(out);
        json_decref(in);
    }
    free(line);
    return 0;
}

static int parse_event(const json_t *e, DiApiEvent *ev) {
    static const char *const kinds[] = {"ready", "reasoning", "content", "tool_begin", "tool_args", "finish"};
    static const char *const finishes[] = {"stop", "length", "tool_calls", "abort", "error"};
    const char *kind = json_string_value(json_object_get(e, "kind"));
    memset(ev, 0, sizeof *ev);
    int k = -1;
    for (int i = 0; kind && i < 6; i++)
        if (strcmp(kind, kinds[i]) == 0) k = i;
    if (k < 0) return di_errorf("event kind '%s' unknown", kind ? kind : "(none)");
    ev->kind = (DiApiEventKind)k;
    ev->text = json_string_value(json_object_get(e, "text"));
    ev->len = ev->text ? strlen(ev->text) : 0;
    ev->tokens = json_integer_value(json_object_get(e, "tokens"));
    ev->prompt_tokens = json_integer_value(json_object_get(e, "prompt_tokens"));
    ev->cache_hit_tokens = json_integer_value(json_object_get(e, "cache_hit_tokens"));
    ev->stop_sequence = json_string_value(json_object_get(e, "stop_sequence"));
    const char *fin = json_string_value(json_object_get(e, "finish"));
    for (int i = 0; fin && i < 5; i++)
        if (strcmp(fin, finishes[i]) == 0) ev->finish = (DiApiFinish)i;
    return 0;
}

static int stream(void) {
    json_error_t err;
    json_t *in = json_loadf(stdin, 0, &err);
    DiApiProtocol p;
    DiApiRequest r;
    int status;
    char *body = in ? body_text(in) : NULL;
    if (!body || protocol_of(in, &p) != 0 || di_api_request_parse(p, body, strlen(body), &r, &status) != 0) {
        fprintf(stderr, "api_tool stream: %s\n", in ? di_error_message() : err.text);
        return 1;
    }
    const char *id = json_string_value(json_object_get(in, "id"));
    DiApiStream *s = di_api_stream_create(&r, id ? id : "id", json_integer_value(json_object_get(in, "created")));
    DiApiBuf sse = {0};
    size_t i;
    json_t *e;
    int rc = 0;
    json_array_foreach(json_object_get(in, "events"), i, e) {
        DiApiEvent ev;
        if (parse_event(e, &ev) != 0 || di_api_stream_event(s, &ev, &sse) != 0) {
            fprintf(stderr, "api_tool stream: event %zu: %s\n", i, di_error_message());
            rc = 1;
            break;
        }
    }
    if (rc == 0) {
        json_t *out = json_pack("{s:s, s:o}", "sse", sse.data ? sse.data : "", "response", di_api_stream_response(s));
        char *text = json_dumps(out, JSON_COMPACT);
        puts(text);
        free(text);
        json_decref(out);
    }
    di_api_buf_free(&sse);
    di_api_stream_free(s);
    di_api_request_free(&r);
    free(body);
    json_decref(in);
    return rc;
}

typedef struct {
    DiApiStream *stream;
    DiApiBuf *sse;
    int failed;
} TextSink;

static void sink_event(void *user, const DiApiEvent *ev) {
    TextSink *t = user;
    if (di_api_stream_event(t->stream, ev, t->sse) != 0) {
        fprintf(stderr, "api_tool text: %s\n", di_error_message());
        t->failed = 1;
    }
}

static int text(void) {
    json_error_t err;
    json_t *in = json_loadf(stdin, 0, &err);
    DiApiProtocol p;
    DiApiRequest r;
    int status;
    char *body = in ? body_text(in) : NULL;
    if (!body || protocol_of(in, &p) != 0 || di_api_request_parse(p, body, strlen(body), &r, &status) != 0) {
        fprintf(stderr, "api_tool text: %s\n", in ? di_error_message() : err.text);
        return 1;
    }
    const char *id = json_string_value(json_object_get(in, "id"));
    DiApiBuf sse = {0};
    TextSink sink = {di_api_stream_create(&r, id ? id : "id", json_integer_value(json_object_get(in, "created"))), &sse, 0};
    DiOutputEvents *o = di_output_events_new(&r, sink_event, &sink);
    if (!sink.stream || !o) {
        fprintf(stderr, "api_tool text: %s\n", di_error_message());
        return 1;
    }
    di_output_events_ready(o, json_integer_value(json_object_get(in, "prompt_tokens")),
                           json_integer_value(json_object_get(in, "cache_hit_tokens")));
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(in, "chunks"), i, c) {
        if (di_output_events_text(o, json_string_value(c), json_string_length(c), 1) != 0) break;
    }
    const char *fin = json_string_value(json_object_get(in, "finish"));
    di_output_events_finish(o, fin && strcmp(fin, "length") == 0 ? DI_API_FINISH_LENGTH : DI_API_FINISH_STOP, NULL,
                            NULL, 0);
    int rc = sink.failed;
    if (rc == 0) {
        json_t *out = json_pack("{s:s, s:o}", "sse", sse.data ? sse.data : "", "response",
                                di_api_stream_response(sink.stream));
        char *t = json_dumps(out, JSON_COMPACT);
        puts(t);
        free(t);
        json_decref(out);
    }
    di_output_events_free(o);
    di_api_buf_free(&sse);
    di_api_stream_free(sink.stream);
    di_api_request_free(&r);
    free(body);
    json_decref(in);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "convert") == 0) return convert();
    if (argc == 2 && strcmp(argv[1], "stream") == 0) return stream();
    if (argc == 2 && strcmp(argv[1], "text") == 0) return text();
    fprintf(stderr, "usage: api_tool convert|stream|text  (JSON on stdin)\n");
    return 2;
}
