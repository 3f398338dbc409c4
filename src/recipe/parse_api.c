/* parse_api.c — the public output-parser API (include/deepinfer.h): options and results as JSON,
 * for the `deepinfer parse` CLI, the Python tests and the future server. */
#include "deepinfer.h"

#include "base/error.h"
#include "base/json.h"
#include "base/mem.h"
#include "recipe/parse.h"

#include <stdlib.h>
#include <string.h>

struct DiOutputParser {
    DiStreamParser *sm;
    bool finish_length; /* the backend stopped at max_tokens */
    DiOutputEventFn callback;
    void *callback_ctx;
};

/* The public event numbers are the parser's (parse.h). */
_Static_assert(DI_OUTPUT_REASONING == (int)DI_PARSE_EV_REASONING && DI_OUTPUT_CONTENT == (int)DI_PARSE_EV_CONTENT &&
                   DI_OUTPUT_TOOL_BEGIN == (int)DI_PARSE_EV_TOOL_BEGIN && DI_OUTPUT_TOOL_ARGS == (int)DI_PARSE_EV_TOOL_ARGS,
               "event numbering");

static int forward_event(void *ctx, DiParseEventKind kind, const char *text, size_t len) {
    DiOutputParser *p = ctx;
    return p->callback(p->callback_ctx, (int)kind, text, len);
}

int di_output_parser_set_callback(DiOutputParser *parser, DiOutputEventFn fn, void *ctx) {
    if (!parser) return di_errorf("output parser: NULL parser");
    parser->callback = fn;
    parser->callback_ctx = ctx;
    return di_stream_parser_set_sink(parser->sm, fn ? forward_event : NULL, parser);
}

static int read_start(const json_t *opts, DiParseOptions *o) {
    const char *s = NULL;
    int rc = di_json_string(opts, "options", "initial", false, &s);
    if (rc != 0) return rc < 0 ? -1 : 0;
    static const struct { const char *name; DiParseStart start; } names[] = {
        {"content", DI_PARSE_START_CONTENT}, {"none", DI_PARSE_START_CONTENT},
        {"start", DI_PARSE_START_REASONING}, {"reasoning", DI_PARSE_CONTINUE_REASONING},
        {"content_continuation", DI_PARSE_CONTINUE_CONTENT},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i].name) == 0) { o->start = names[i].start; return 0; }
    return di_errorf("options.initial: unknown value \"%s\" (expected content, start, reasoning or "
                     "content_continuation)", s);
}

/* Options JSON -> DiParseOptions; stop strings stay owned by `opts`. */
static int read_options(const json_t *opts, DiParseOptions *o, const char ***stops, bool *finish_length) {
    di_parse_options_default(o);
    *stops = NULL;
    *finish_length = false;
    if (!opts || json_is_null(opts)) return 0;
    if (!json_is_object(opts)) return di_errorf("options: expected an object, got %s", di_json_type_name(opts));
    if (di_json_bool(opts, "options", "tools", false, &o->parse_tool_calls) < 0) return -1;
    if (di_json_bool(opts, "options", "tool_stage", false, &o->starts_in_tool_calls) < 0) return -1;
    if (di_json_bool(opts, "options", "json_mode", false, &o->parse_json_output) < 0) return -1;
    if (read_start(opts, o) != 0) return -1;
    const char *finish = NULL;
    int rc = di_json_string(opts, "options", "finish", false, &finish);
    if (rc < 0) return -1;
    if (rc == 0) {
        if (strcmp(finish, "length") == 0) *finish_length = true;
        else if (strcmp(finish, "stop") != 0)
            return di_errorf("options.finish: unknown value \"%s\" (expected stop or length)", finish);
    }
    json_t *arr = json_object_get(opts, "stop");
    if (!arr || json_is_null(arr)) return 0;
    if (json_is_string(arr)) { /* OpenAI allows one string */
        *stops = di_calloc(1, sizeof **stops, "stop sequences");
        if (!*stops) return -1;
        (*stops)[0] = json_string_value(arr);
        o->n_stop_sequences = 1;
    } else if (json_is_array(arr)) {
        size_t n = json_array_size(arr);
        *stops = di_calloc(n ? n : 1, sizeof **stops, "stop sequences");
        if (!*stops) return -1;
        for (size_t i = 0; i < n; i++) {
            json_t *s = json_array_get(arr, i);
            if (!json_is_string(s))
                return di_errorf("options.stop[%zu]: expected a string, got %s", i, di_json_type_name(s));
            (*stops)[i] = json_string_value(s);
        }
        o->n_stop_sequences = n;
    } else
        return di_errorf("options.stop: expected a string or an array of strings, got %s", di_json_type_name(arr));
    o->stop_sequences = *stops;
    return 0;
}

static DiOutputParser *parser_from_options(const json_t *opts) {
    DiParseOptions o;
    const char **stops = NULL;
    bool finish_length = false;
    DiOutputParser *p = NULL;
    if (read_options(opts, &o, &stops, &finish_length) == 0 && (p = di_calloc(1, sizeof *p, "output parser"))) {
        p->finish_length = finish_length;
        p->sm = di_stream_parser_new(&o);
        if (!p->sm) {
            free(p);
            p = NULL;
        }
    }
    free(stops);
    return p;
}

DiOutputParser *di_output_parser_new(const char *options_json) {
    if (!options_json) return parser_from_options(NULL);
    json_t *opts = di_json_load_buffer(options_json, strlen(options_json), "parser options");
    if (!opts) return NULL;
    DiOutputParser *p = parser_from_options(opts);
    json_decref(opts);
    return p;
}

int di_output_parser_feed(DiOutputParser *parser, const char *text, size_t len) {
    if (!parser) return di_errorf("output parser: NULL parser");
    return di_stream_parser_feed(parser->sm, text, len);
}

static const char *finish_reason(const DiOutputParser *p, const DiParsedMessage *m) {
    /* recipe 0.2.0: the length limit wins, even over calls (a call it cut is incomplete);
     * otherwise a reported call (name complete), even one cut before its end, is tool_calls */
    if (p->finish_length && !m->stopped) return "length";
    for (size_t i = 0; i < m->n_calls; i++)
        if (m->calls[i].name_done) return "tool_calls";
    return "stop";
}

static json_t *message_json(const DiOutputParser *p, const DiParsedMessage *m) {
    json_t *calls = json_array(), *invalid = json_array();
    for (size_t i = 0; calls && i < m->n_calls; i++) {
        const DiParsedToolCall *c = &m->calls[i];
        if (!c->name_done) continue; /* a call cut inside its name is not reported (as recipe) */
        json_array_append_new(calls, json_pack("{s:s%,s:s%,s:b}", "name", c->name.data ? c->name.data : "",
                                               c->name.len, "arguments", c->arguments.data ? c->arguments.data : "",
                                               c->arguments.len, "complete", c->complete));
    }
    for (int i = 0; invalid && i < m->n_invalid; i++)
        json_array_append_new(invalid, json_string(m->invalid_order[i] == 1 ? "extra_end_of_thinking"
                                                                             : "content_after_finished"));
    return json_pack("{s:s%,s:s%,s:o,s:o,s:b,s:s}", "reasoning_content", m->reasoning.data ? m->reasoning.data : "",
                     m->reasoning.len, "content", m->content.data ? m->content.data : "", m->content.len,
                     "tool_calls", calls, "invalid", invalid, "stopped", m->stopped, "finish_reason",
                     finish_reason(p, m));
}

int di_output_parser_finish(DiOutputParser *parser, char **result_json) {
    if (!parser || !result_json) return di_errorf("output parser: invalid argument");
    *result_json = NULL;
    if (di_stream_parser_finish(parser->sm) != 0) return -1;
    json_t *out = message_json(parser, di_stream_parser_message(parser->sm));
    if (!out) return di_errorf("output parser: cannot build the result (invalid UTF-8 in the output?)");
    *result_json = json_dumps(out, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
    json_decref(out);
    return *result_json ? 0 : di_errorf("output parser: out of memory");
}

void di_output_parser_free(DiOutputParser *parser) {
    if (!parser) return;
    di_stream_parser_free(parser->sm);
    free(parser);
}

int di_parse_json(const char *json, size_t len, char **result_json) {
    if (!json || !result_json) return di_errorf("parse: invalid argument");
    *result_json = NULL;
    json_t *root = di_json_load_buffer(json, len, "parse input");
    if (!root) return -1;
    int rc = -1;
    DiOutputParser *p = NULL;
    json_t *chunks = NULL;
    const char *encoding = NULL;
    if (!json_is_object(root)) {
        di_errorf("parse input: expected an object, got %s", di_json_type_name(root));
        goto done;
    }
    /* Both DSML dialects parse with the same machine (§3); the encoding is only validated. */
    int erc = di_json_string(root, "", "encoding", false, &encoding);
    if (erc < 0) goto done;
    if (erc == 0 && strcmp(encoding, "v4") != 0 && strcmp(encoding, "v4-0731") != 0 &&
        strcmp(encoding, "v4_0731") != 0 && strcmp(encoding, "v41") != 0) {
        di_errorf("encoding: unknown value \"%s\" (expected v4, v4-0731 or v41)", encoding);
        goto done;
    }
    if (di_json_array(root, "", "chunks", true, &chunks) != 0) goto done;
    if (!(p = parser_from_options(json_object_get(root, "options")))) goto done;
    for (size_t i = 0; i < json_array_size(chunks); i++) {
        json_t *c = json_array_get(chunks, i);
        if (!json_is_string(c)) {
            di_errorf("chunks[%zu]: expected a string, got %s", i, di_json_type_name(c));
            goto done;
        }
        if (di_output_parser_feed(p, json_string_value(c), json_string_length(c)) != 0) goto done;
    }
    rc = di_output_parser_finish(p, result_json);
done:
    di_output_parser_free(p);
    json_decref(root);
    return rc;
}
