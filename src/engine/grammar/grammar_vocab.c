/* grammar_vocab.c — the vocabulary a grammar is matched against: each token's exact bytes
 * (what the detokeniser outputs), which tokens are special (never grammar text) and which end
 * the output, plus the token trie in DFS order that fill_mask walks.
 *
 * Why a DFS-ordered array instead of a pointer trie: the mask walk visits nodes in index order
 * and skips a rejected prefix's whole subtree with one addition (i += subtree[i]), so it is one
 * linear pass with no pointer chasing. */
#include "engine/grammar/grammar.h"

#include "base/error.h"
#include "base/mem.h"

#include <stdlib.h>
#include <string.h>

static int cmp_tok(const void *a, const void *b, void *ctx) {
    const DiGrammarVocab *v = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = v->off[x + 1] - v->off[x], ly = v->off[y + 1] - v->off[y];
    int c = memcmp(v->bytes + v->off[x], v->bytes + v->off[y], lx < ly ? lx : ly);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return (x > y) - (x < y);
}

static int build_trie(DiGrammarVocab *v) {
    int32_t *ids = di_malloc((v->n + 1) * sizeof *ids, "token trie");
    size_t n_ids = 0, total = 0;
    if (!ids) return -1;
    for (size_t t = 0; t < v->n; t++)
        if (!v->special[t] && v->off[t + 1] > v->off[t]) {
            ids[n_ids++] = (int32_t)t;
            total += v->off[t + 1] - v->off[t];
        }
    qsort_r(ids, n_ids, sizeof *ids, cmp_tok, v);
    /* at most one node per byte of every token; shrunk by shared prefixes */
    v->tbyte = di_malloc(total + 1, "token trie");
    v->depth = di_malloc((total + 1) * sizeof *v->depth, "token trie");
    v->subtree = di_malloc((total + 1) * sizeof *v->subtree, "token trie");
    v->tok_first = di_malloc((total + 1) * sizeof *v->tok_first, "token trie");
    v->tok_next = di_malloc((v->n + 1) * sizeof *v->tok_next, "token trie");
    size_t max_len = 0;
    for (size_t k = 0; k < n_ids; k++) {
        size_t l = v->off[ids[k] + 1] - v->off[ids[k]];
        if (l > max_len) max_len = l;
    }
    uint32_t *open = di_malloc((max_len + 2) * sizeof *open, "token trie"); /* node index per depth */
    if (!v->tbyte || !v->depth || !v->subtree || !v->tok_first || !v->tok_next || !open) {
        free(ids), free(open);
        return -1;
    }
    for (size_t t = 0; t < v->n; t++) v->tok_next[t] = -1;
    size_t n_open = 0, nn = 0, prev_len = 0;
    const uint8_t *prev = NULL;
    int32_t last_tok_at_node = -1;
    for (size_t k = 0; k < n_ids; k++) {
        int32_t t = ids[k];
        const uint8_t *b = v->bytes + v->off[t];
        size_t len = v->off[t + 1] - v->off[t], lcp = 0;
        while (prev && lcp < len && lcp < prev_len && b[lcp] == prev[lcp]) lcp++;
        while (n_open > lcp) { /* close nodes deeper than the shared prefix */
            uint32_t nd = open[--n_open];
            v->subtree[nd] = (uint32_t)(nn - nd);
        }
        for (size_t d = lcp; d < len; d++) {
            v->tbyte[nn] = b[d];
            v->depth[nn] = (uint32_t)(d + 1);
            v->tok_first[nn] = -1;
            open[n_open++] = (uint32_t)nn++;
        }
        uint32_t end = open[n_open - 1];
        if (v->tok_first[end] < 0) v->tok_first[end] = t;
        else v->tok_next[last_tok_at_node] = t; /* same bytes as the previous id (sorted by id) */
        last_tok_at_node = t;
        prev = b;
        prev_len = len;
    }
    while (n_open) {
        uint32_t nd = open[--n_open];
        v->subtree[nd] = (uint32_t)(nn - nd);
    }
    v->n_nodes = nn;
    v->max_depth = max_len;
    free(ids);
    free(open);
    return 0;
}

DiGrammarVocab *di_grammar_vocab_new(size_t n, const uint32_t *off, const uint8_t *bytes, const uint8_t *special,
                                     const int32_t *eos, size_t n_eos) {
    if (n == 0 || n > INT32_MAX / 2 || !off || (!bytes && off[n] > 0) || (!eos && n_eos))
        return di_errorf("grammar vocabulary: bad arguments (n=%zu)", n), NULL;
    for (size_t i = 0; i < n; i++)
        if (off[i + 1] < off[i]) return di_errorf("grammar vocabulary: offsets decrease at token %zu", i), NULL;
    for (size_t i = 0; i < n_eos; i++)
        if (eos[i] < 0 || (size_t)eos[i] >= n)
            return di_errorf("grammar vocabulary: EOS id %d outside [0, %zu)", eos[i], n), NULL;
    DiGrammarVocab *v = di_calloc(1, sizeof *v, "grammar vocabulary");
    if (!v) return NULL;
    v->n = n;
    v->off = di_malloc((n + 1) * sizeof *off, "grammar vocabulary");
    v->bytes = di_malloc(off[n] + 1, "grammar vocabulary");
    v->special = di_calloc(n, 1, "grammar vocabulary");
    v->eos = di_malloc((n_eos + 1) * sizeof *eos, "grammar vocabulary");
    if (!v->off || !v->bytes || !v->special || !v->eos) goto fail;
    memcpy(v->off, off, (n + 1) * sizeof *off);
    if (off[n]) memcpy(v->bytes, bytes, off[n]);
    for (size_t i = 0; i < n; i++) v->special[i] = special && special[i] ? 1 : 0;
    for (size_t i = 0; i < n_eos; i++) v->special[eos[i]] = 1; /* EOS is control, never text */
    if (n_eos) memcpy(v->eos, eos, n_eos * sizeof *eos);
    v->n_eos = n_eos;
    if (build_trie(v) != 0) goto fail;
    return v;
fail:
    di_grammar_vocab_free(v);
    return NULL;
}

size_t di_grammar_vocab_size(const DiGrammarVocab *v) { return v ? v->n : 0; }

void di_grammar_vocab_free(DiGrammarVocab *v) {
    if (!v) return;
    free(v->off), free(v->bytes), free(v->special), free(v->eos);
    free(v->tbyte), free(v->depth), free(v->subtree), free(v->tok_first), free(v->tok_next);
    free(v);
}
