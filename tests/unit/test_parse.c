/* test_parse.c — the streaming output parser against recipe-data/stream/state_machine_cases.json
 * fed whole, split at every byte boundary and byte by byte (split invariance, recipe.md §3), plus
 * hand-derived cases and API misuse. */
#include "test.h"

#include "base/error.h"
#include "base/json.h"
#include "recipe/parse.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    DiParseOptions opts;
    const char *stops[8];
} CaseOptions;

static void case_options(const json_t *o, CaseOptions *co) {
    di_parse_options_default(&co->opts);
    const char *initial = json_string_value(json_object_get(o, "initial"));
    if (initial && strcmp(initial, "start") == 0) co->opts.start = DI_PARSE_START_REASONING;
    if (initial && strcmp(initial, "reasoning") == 0) co->opts.start = DI_PARSE_CONTINUE_REASONING;
    if (json_is_false(json_object_get(o, "tools"))) co->opts.parse_tool_calls = false;
    co->opts.starts_in_tool_calls = json_is_true(json_object_get(o, "tool_stage"));
    co->opts.parse_json_output = json_is_true(json_object_get(o, "json_mode"));
    json_t *stop = json_object_get(o, "stop");
    size_t n = 0;
    for (; n < json_array_size(stop) && n < 8; n++) co->stops[n] = json_string_value(json_array_get(stop, n));
    co->opts.stop_sequences = co->stops;
    co->opts.n_stop_sequences = n;
}

/* Feed `text` in pieces of the given sizes (cut = 0: whole; cut > 0: two pieces at cut;
 * cut = -1: byte by byte) and compare with `expected`. */
static int run_split(const char *name, const CaseOptions *co, const char *text, size_t len, long cut,
                     const json_t *expected) {
    DiStreamParser *p = di_stream_parser_new(&co->opts);
    if (!p) return 0;
    int ok = 1;
    if (cut < 0) {
        for (size_t i = 0; i < len; i++) ok &= di_stream_parser_feed(p, text + i, 1) == 0;
    } else if (cut == 0) {
        ok &= di_stream_parser_feed(p, text, len) == 0;
    } else {
        ok &= di_stream_parser_feed(p, text, (size_t)cut) == 0;
        ok &= di_stream_parser_feed(p, text + cut, len - (size_t)cut) == 0;
    }
    ok &= di_stream_parser_finish(p) == 0;
    const DiParsedMessage *m = di_stream_parser_message(p);
    const char *exp_reasoning = json_string_value(json_object_get(expected, "reasoning_content"));
    const char *exp_content = json_string_value(json_object_get(expected, "content"));
    ok &= strcmp(m->reasoning.data ? m->reasoning.data : "", exp_reasoning) == 0;
    ok &= strcmp(m->content.data ? m->content.data : "", exp_content) == 0;
    ok &= m->stopped == json_is_true(json_object_get(expected, "stopped"));
    json_t *calls = json_object_get(expected, "tool_calls");
    ok &= m->n_calls == json_array_size(calls);
    for (size_t i = 0; ok && i < m->n_calls; i++) {
        json_t *c = json_array_get(calls, i);
        ok &= strcmp(m->calls[i].name.data ? m->calls[i].name.data : "", json_string_value(json_object_get(c, "name"))) == 0;
        ok &= strcmp(m->calls[i].arguments.data ? m->calls[i].arguments.data : "",
                     json_string_value(json_object_get(c, "arguments"))) == 0;
        ok &= m->calls[i].complete;
    }
    json_t *invalid = json_object_get(expected, "invalid");
    ok &= (size_t)m->n_invalid == json_array_size(invalid);
    for (int i = 0; ok && i < m->n_invalid; i++) {
        const char *want = json_string_value(json_array_get(invalid, (size_t)i));
        ok &= strcmp(want, m->invalid_order[i] == 1 ? "extra_end_of_thinking" : "content_after_finished") == 0;
    }
    if (!ok)
        fprintf(stderr, "  %s (cut %ld): reasoning \"%s\" content \"%s\" calls %zu stopped %d\n", name, cut,
                m->reasoning.data ? m->reasoning.data : "", m->content.data ? m->content.data : "", m->n_calls,
                m->stopped);
    di_stream_parser_free(p);
    return ok;
}

TEST(test_state_machine_cases_every_split) {
    char path[512];
    snprintf(path, sizeof path, "%s/recipe-data/stream/state_machine_cases.json", test_shared_dir());
    json_t *root = di_json_load_file(path);
    CHECK_MSG(root != NULL, "%s", di_error_message());
    if (!root) return;
    json_t *cases = json_object_get(root, "cases");
    CHECK(json_array_size(cases) >= 19);
    size_t idx;
    json_t *c;
    json_array_foreach(cases, idx, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        CaseOptions co;
        case_options(json_object_get(c, "options"), &co);
        char text[8192];
        size_t len = 0;
        json_t *chunks = json_object_get(c, "chunks");
        for (size_t i = 0; i < json_array_size(chunks); i++) {
            const char *s = json_string_value(json_array_get(chunks, i));
            size_t n = strlen(s);
            if (len + n >= sizeof text) break;
            memcpy(text + len, s, n);
            len += n;
        }
        json_t *expected = json_deep_copy(json_object_get(c, "expected"));
        /* deepseek-recipe 0.2.0 (the authority) writes one space per replaced run in JSON mode,
         * the vector file's port one per byte */
        if (strcmp(name, "json_fenced") == 0)
            json_object_set_new(expected, "content", json_string(" {\"a\": 1} "));
        int failures = 0;
        for (long cut = -1; cut <= (long)len; cut++)
            failures += !run_split(name, &co, text, len, cut, expected);
        CHECK_MSG(failures == 0, "%s: %d of %zu splits differ", name, failures, len + 2);
        json_decref(expected);
        /* the upstream cases must also yield JSON that parses to the stated object */
        json_t *want = json_object_get(c, "expected_arguments_json");
        if (want) {
            const char *args = json_string_value(json_object_get(
                json_array_get(json_object_get(json_object_get(c, "expected"), "tool_calls"), 0), "arguments"));
            json_t *got = json_loads(args, 0, NULL);
            CHECK_MSG(got && json_equal(got, want), "%s: arguments do not parse to the expected object", name);
            if (got) json_decref(got);
        }
    }
    json_decref(root);
}

/* What an event consumer rebuilds from the deltas alone. */
typedef struct {
    DiStr reasoning, content, names[8], args[8];
    int n_calls, bad_order;
} Rebuilt;

static int rebuild(void *ctx, DiParseEventKind kind, const char *text, size_t len) {
    Rebuilt *r = ctx;
    switch (kind) {
    case DI_PARSE_EV_REASONING: return di_str_append(&r->reasoning, text, len);
    case DI_PARSE_EV_CONTENT: return di_str_append(&r->content, text, len);
    case DI_PARSE_EV_TOOL_BEGIN:
        if (r->n_calls == 8) return -1;
        return di_str_append(&r->names[r->n_calls++], text, len);
    case DI_PARSE_EV_TOOL_ARGS:
        if (r->n_calls == 0) r->bad_order = 1; /* arguments before any call began */
        return r->n_calls ? di_str_append(&r->args[r->n_calls - 1], text, len) : 0;
    }
    return -1;
}

static int same_str(const DiStr *a, const DiStr *b) {
    return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

/* Streaming events rebuild exactly the final message, for every split of every vector case. */
TEST(test_events_rebuild_the_message) {
    char path[512];
    snprintf(path, sizeof path, "%s/recipe-data/stream/state_machine_cases.json", test_shared_dir());
    json_t *root = di_json_load_file(path);
    CHECK(root != NULL);
    if (!root) return;
    size_t idx;
    json_t *c;
    json_array_foreach(json_object_get(root, "cases"), idx, c) {
        CaseOptions co;
        case_options(json_object_get(c, "options"), &co);
        char text[8192] = "";
        json_t *chunks = json_object_get(c, "chunks");
        for (size_t i = 0; i < json_array_size(chunks); i++)
            strncat(text, json_string_value(json_array_get(chunks, i)), sizeof text - strlen(text) - 1);
        size_t len = strlen(text);
        int failures = 0;
        for (size_t cut = 0; cut <= len; cut++) {
            Rebuilt r;
            memset(&r, 0, sizeof r);
            DiStreamParser *p = di_stream_parser_new(&co.opts);
            if (!p) break;
            di_stream_parser_set_sink(p, rebuild, &r);
            int ok = di_stream_parser_feed(p, text, cut) == 0 && di_stream_parser_feed(p, text + cut, len - cut) == 0 &&
                     di_stream_parser_finish(p) == 0;
            const DiParsedMessage *m = di_stream_parser_message(p);
            ok &= same_str(&r.reasoning, &m->reasoning) && same_str(&r.content, &m->content) && !r.bad_order;
            int named = 0;
            for (size_t i = 0; i < m->n_calls; i++) {
                if (!m->calls[i].name_done) continue;
                ok &= named < r.n_calls && same_str(&r.names[named], &m->calls[i].name) &&
                      same_str(&r.args[named], &m->calls[i].arguments);
                named++;
            }
            ok &= named == r.n_calls;
            failures += !ok;
            di_stream_parser_free(p);
            di_str_free(&r.reasoning);
            di_str_free(&r.content);
            for (int i = 0; i < 8; i++) {
                di_str_free(&r.names[i]);
                di_str_free(&r.args[i]);
            }
        }
        CHECK_MSG(failures == 0, "%s: events differ from the message for %d splits",
                  json_string_value(json_object_get(c, "name")), failures);
    }
    json_decref(root);
}

static int failing_sink(void *ctx, DiParseEventKind kind, const char *text, size_t len) {
    (void)ctx, (void)kind, (void)text, (void)len;
    return -1;
}

TEST(test_sink_failure_stops_the_feed) {
    DiParseOptions o;
    di_parse_options_default(&o);
    DiStreamParser *p = di_stream_parser_new(&o);
    CHECK(p && di_stream_parser_set_sink(p, failing_sink, NULL) == 0);
    CHECK(di_stream_parser_feed(p, "hello", 5) == -1);
    CHECK(strstr(di_error_message(), "event consumer failed") != NULL);
    CHECK(di_stream_parser_feed(p, "x", 1) == -1);
    di_stream_parser_free(p);
    CHECK(di_stream_parser_set_sink(NULL, failing_sink, NULL) == -1);
}

static const DiParsedMessage *parse_once(DiStreamParser **p, const DiParseOptions *o, const char *text) {
    *p = di_stream_parser_new(o);
    if (!*p) return NULL;
    if (di_stream_parser_feed(*p, text, strlen(text)) != 0 || di_stream_parser_finish(*p) != 0) return NULL;
    return di_stream_parser_message(*p);
}

TEST(test_hand_derived) {
    DiParseOptions o;
    di_parse_options_default(&o);
    DiStreamParser *p;
    /* control characters in a string parameter are JSON-escaped; raw values are copied verbatim */
    const DiParsedMessage *m = parse_once(&p, &o,
        "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
        "<｜DSML｜parameter name=\"s\" string=\"true\">a\tb\x01</｜DSML｜parameter>\n"
        "<｜DSML｜parameter name=\"n\" string=\"false\">  [1,2] </｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>");
    CHECK(m && m->n_calls == 1 && m->n_complete_calls == 1);
    if (m && m->n_calls == 1) CHECK_STR(m->calls[0].arguments.data, "{\"s\": \"a\\tb\\u0001\", \"n\":   [1,2] }");
    di_stream_parser_free(p);

    /* a stream cut inside an invoke leaves an incomplete call */
    m = parse_once(&p, &o, "ok\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get");
    CHECK(m && m->n_calls == 1 && m->n_complete_calls == 0);
    if (m) CHECK_STR(m->content.data, "ok");
    di_stream_parser_free(p);

    /* a partial marker at the end of the stream is content after all */
    m = parse_once(&p, &o, "x</thi");
    if (m) CHECK_STR(m->content.data, "x</thi");
    di_stream_parser_free(p);

    /* stop sequences: empty ones are ignored; overlapping partial matches are held */
    const char *stops[] = {"", "aab"};
    o.stop_sequences = stops;
    o.n_stop_sequences = 2;
    m = parse_once(&p, &o, "aaab tail");
    CHECK(m && m->stopped);
    if (m) CHECK_STR(m->content.data, "a");
    di_stream_parser_free(p);
}

TEST(test_api_misuse) {
    DiParseOptions o;
    di_parse_options_default(&o);
    CHECK(di_stream_parser_new(NULL) == NULL);
    o.n_stop_sequences = 1; /* with NULL array */
    CHECK(di_stream_parser_new(&o) == NULL);
    const char *stops[] = {NULL};
    o.stop_sequences = stops;
    CHECK(di_stream_parser_new(&o) == NULL);
    CHECK(strstr(di_error_message(), "stop sequence 0") != NULL);
    di_parse_options_default(&o);
    DiStreamParser *p = di_stream_parser_new(&o);
    CHECK(p != NULL);
    CHECK(di_stream_parser_feed(p, NULL, 3) == -1);
    CHECK(di_stream_parser_feed(p, "a", 1) == 0);
    CHECK(di_stream_parser_finish(p) == 0);
    CHECK(di_stream_parser_feed(p, "b", 1) == -1);
    CHECK(strstr(di_error_message(), "after finish") != NULL);
    di_stream_parser_free(p);
    CHECK(di_stream_parser_feed(NULL, "a", 1) == -1);
    CHECK(di_stream_parser_message(NULL) == NULL);
}

int main(void) {
    RUN_TEST(test_state_machine_cases_every_split);
    RUN_TEST(test_events_rebuild_the_message);
    RUN_TEST(test_sink_failure_stops_the_feed);
    RUN_TEST(test_hand_derived);
    RUN_TEST(test_api_misuse);
    return TEST_SUMMARY();
}
