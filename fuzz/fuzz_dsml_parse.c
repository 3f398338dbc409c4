/* fuzz_dsml_parse.c — libFuzzer target for the streaming output parser (src/recipe/parse.h): the
 * first byte picks options, the rest is model output fed in two pieces at a data-chosen split;
 * the result must equal feeding it whole (split invariance), the streamed events must add up
 * to the final content and reasoning, and nothing may crash or leak. */
#include "recipe/parse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    size_t content, reasoning;
} Counted;

static int count(void *ctx, DiParseEventKind kind, const char *text, size_t len) {
    Counted *c = ctx;
    (void)text;
    if (kind == DI_PARSE_EV_CONTENT) c->content += len;
    if (kind == DI_PARSE_EV_REASONING) c->reasoning += len;
    return 0;
}

static Counted counted;

static DiStreamParser *run(const DiParseOptions *o, const char *text, size_t len, size_t cut) {
    DiStreamParser *p = di_stream_parser_new(o);
    if (!p) return NULL;
    memset(&counted, 0, sizeof counted);
    di_stream_parser_set_sink(p, count, &counted);
    di_stream_parser_feed(p, text, cut);
    di_stream_parser_feed(p, text + cut, len - cut);
    di_stream_parser_finish(p);
    return p;
}

static int same(const DiStr *a, const DiStr *b) {
    return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    DiParseOptions o;
    di_parse_options_default(&o);
    uint8_t f = data[0];
    o.parse_tool_calls = f & 1;
    o.starts_in_tool_calls = (f >> 1) & 1;
    o.parse_json_output = (f >> 2) & 1;
    o.start = (DiParseStart)((f >> 3) & 3);
    const char *stops[] = {"STOP", "\n\n"};
    o.stop_sequences = stops;
    o.n_stop_sequences = (f >> 5) & 1 ? 2 : 0;
    const char *text = (const char *)data + 2;
    size_t len = size - 2, cut = len ? data[1] % (len + 1) : 0;
    DiStreamParser *a = run(&o, text, len, 0), *b = run(&o, text, len, cut);
    if (b) {
        const DiParsedMessage *mb = di_stream_parser_message(b);
        if (counted.content != mb->content.len || counted.reasoning != mb->reasoning.len) abort();
    }
    if (a && b) {
        const DiParsedMessage *ma = di_stream_parser_message(a), *mb = di_stream_parser_message(b);
        if (!same(&ma->content, &mb->content) || !same(&ma->reasoning, &mb->reasoning) || ma->n_calls != mb->n_calls)
            abort();
        for (size_t i = 0; i < ma->n_calls; i++)
            if (!same(&ma->calls[i].arguments, &mb->calls[i].arguments)) abort();
    }
    di_stream_parser_free(a);
    di_stream_parser_free(b);
    return 0;
}
