/* grammar_matcher_internal.h — the matcher's state, shared by grammar_matcher.c (the PDA and the
 * public matcher API) and grammar_cache.c (the per-position mask cache, which simulates tokens
 * with a scratch matcher and checks context-dependent tokens against a live one). */
#ifndef DI_ENGINE_GRAMMAR_MATCHER_INTERNAL_H
#define DI_ENGINE_GRAMMAR_MATCHER_INTERNAL_H

#include "engine/grammar/grammar.h"

typedef struct {
    int32_t pos, node;
} GStack;

typedef struct {
    size_t off;   /* into the history arena: the state before the token */
    uint32_t n;
    bool accept, thinking, terminated;
    size_t node_mark;
} GHist;

struct DiGrammarMatcher {
    DiGrammarMaskCache *cache; /* NULL: every mask is a full trie walk */
    GStack *tmp[2];            /* token checks against the current state */
    size_t tmp_cap[2];
    const DiGrammar *g;
    const DiGrammarVocab *v;
    int32_t think_end;
    bool thinking, terminated;
    /* frames */
    int32_t *ret, *parent, *hnext, *buckets;
    size_t n_nodes, node_cap, bucket_mask;
    /* the current state */
    GStack *cur;
    size_t n_cur, cur_cap;
    bool accept;
    /* closure scratch: visited (pos, node) pairs, stamped by generation */
    uint64_t *vkey;
    uint32_t *vgen, gen;
    size_t vmask, v_used;
    GStack *work;
    size_t work_cap;
    /* advance output / mask levels */
    GStack *arena;
    size_t arena_cap;
    /* history */
    GHist *hist;
    size_t n_hist, hist_cap;
    GStack *hst;
    size_t n_hst, hst_cap;
};

/* Drop the frames created after `mark` (newest first). */
void di_gm_node_truncate(DiGrammarMatcher *m, size_t mark);
/* The state after byte b from in[0..n_in) (not inside *out) into (*out)[base..base + *n_out);
 * *accept: the empty stack was reached (the output may end / the simulated frame popped). */
int di_gm_advance(DiGrammarMatcher *m, const GStack *in, size_t n_in, uint8_t b, GStack **out, size_t *out_cap,
                  size_t base, size_t *n_out, bool *accept);
/* The mask through the cache (grammar_cache.c). */
int di_gm_fill_mask_cached(DiGrammarMatcher *m, uint32_t *mask);

#endif
