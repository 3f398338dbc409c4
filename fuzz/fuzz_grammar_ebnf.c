/* fuzz_grammar_ebnf.c — libFuzzer target for the grammar engine's EBNF grammars front-end: any byte
 * string must compile or give a clean error, never a crash, hang or sanitizer report; what
 * compiles is walked with cached and uncached masks compared (fuzz_grammar.h). */
#include "fuzz_grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    DiGrammar *g = di_grammar_compile_ebnf((const char *)data, size, NULL);
    if (g) fuzz_grammar_walk(g, data, size);
    di_grammar_free(g);
    return 0;
}
