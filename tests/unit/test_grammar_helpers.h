/* test_grammar_helpers.h — what the grammar tests share: whole-string acceptance of a compiled
 * grammar, through a fresh matcher on a one-token dummy vocabulary. */
#ifndef DI_TEST_GRAMMAR_HELPERS_H
#define DI_TEST_GRAMMAR_HELPERS_H

#include "engine/grammar/grammar.h"

#include <string.h>

/* Does the grammar accept the whole string (bytes, then the end)? */
static inline int grammar_accepts(const DiGrammar *g, const char *s) {
    uint32_t off[2] = {0, 1};
    DiGrammarVocab *v = di_grammar_vocab_new(1, off, (const uint8_t *)"x", NULL, NULL, 0);
    DiGrammarMatcher *m = di_grammar_matcher_new(g, v, -1);
    int ok = m && di_grammar_matcher_accept_bytes(m, (const uint8_t *)s, strlen(s)) == 0 && di_grammar_matcher_can_end(m);
    di_grammar_matcher_free(m);
    di_grammar_vocab_free(v);
    return ok;
}

#endif
