/* fuzz_grammar.h — what the three grammar fuzz targets (fuzz_grammar_ebnf.c, _regex.c, _json.c)
 * do with a grammar that compiled: walk it over a small vocabulary with multi-byte tokens,
 * checking that the cached mask equals the full trie walk at every step (abort otherwise, so
 * libFuzzer reports it), that every masked token is accepted, and that rollback works.  The
 * front-ends bound compile time and memory (grammar.h limits), so any input must finish. */
#ifndef DI_FUZZ_GRAMMAR_H
#define DI_FUZZ_GRAMMAR_H

#include "engine/grammar/grammar.h"

#include <stdlib.h>
#include <string.h>

static void fuzz_grammar_walk(DiGrammar *g, const uint8_t *data, size_t size) {
    static const char *const toks[] = {"a", "{", "\"", "1", ",", "}", "\xc3\xa9", "ab", "\":", "[", "]", "-", "<eos>"};
    enum { N = sizeof toks / sizeof *toks };
    uint32_t off[N + 1];
    uint8_t bytes[64], special[N] = {0};
    size_t at = 0;
    for (size_t i = 0; i < N; i++) {
        off[i] = (uint32_t)at;
        memcpy(bytes + at, toks[i], strlen(toks[i]));
        at += strlen(toks[i]);
    }
    off[N] = (uint32_t)at;
    int32_t eos = N - 1;
    special[eos] = 1;
    DiGrammarVocab *v = di_grammar_vocab_new(N, off, bytes, special, &eos, 1);
    DiGrammarMaskCache *c = v ? di_grammar_mask_cache_new(g, v) : NULL;
    DiGrammarMatcher *m = c ? di_grammar_matcher_new(g, v, -1) : NULL;
    for (size_t step = 0; m && step < 24 && !di_grammar_matcher_is_terminated(m); step++) {
        uint32_t plain, cached;
        di_grammar_matcher_set_cache(m, NULL);
        if (di_grammar_matcher_fill_mask(m, &plain) != 0) break;
        di_grammar_matcher_set_cache(m, c);
        if (di_grammar_matcher_fill_mask(m, &cached) != 0) break;
        if (plain != cached) abort();
        if (!plain) break;
        uint8_t choice = size ? data[step % size] : 0;
        int32_t t = -1;
        for (int k = 0; k < N && t < 0; k++)
            if (plain >> ((choice + k) % N) & 1) t = (int32_t)((choice + k) % N);
        if (di_grammar_matcher_accept_token(m, t) != 0) abort(); /* the mask allowed it */
        if (choice & 0x80 && di_grammar_matcher_rollback(m, 1) != 0) abort();
    }
    di_grammar_matcher_free(m);
    di_grammar_mask_cache_free(c);
    di_grammar_vocab_free(v);
}

#endif
