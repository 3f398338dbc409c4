/* fuzz_grammar_regex.c — libFuzzer target for the grammar engine's regexes front-end: any byte
 * string must compile or give a clean error, never a crash, hang or sanitizer report; what
 * compiles is walked with cached and uncached masks compared (fuzz_grammar.h). */
#include "fuzz_grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    DiGrammar *g = di_grammar_compile_regex((const char *)data, size);
    if (g) fuzz_grammar_walk(g, data, size);
    di_grammar_free(g);
    return 0;
}
