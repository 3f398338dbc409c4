/* grammar_cache.c — the adaptive mask cache (spec §5.2 item 5, after xgrammar): per NFA
 * position, which tokens the position decides on its own.
 *
 * A matcher stack is (pos, rest-of-stack).  Simulating a token from (pos, ⊥) — ⊥ standing
 * for the unknown rest — gives three outcomes per token: some path consumes all its bytes
 * without popping ⊥ (accepted whatever the rest is), every path dies before popping ⊥
 * (rejected whatever the rest is), or no path survives inside but one pops ⊥ (uncertain: the
 * rest decides).  A live mask is then the OR of the accepted bitmaps of the current stacks'
 * positions plus the uncertain tokens that pass a real run from the current state.  That is
 * exact: a token allowed from the state is allowed along some stack's path, which either stays
 * inside the frame (accepted) or pops it (uncertain, then checked).
 *
 * The simulation walks the token trie once per position, like fill_mask, carrying "a path has
 * popped ⊥" down each branch; a branch with no live stack and no pop is skipped, one with only
 * pops makes its whole subtree uncertain.  Entries are built on first use under a lock (a
 * scratch matcher does the work) and never change afterwards. */
#include "engine/grammar/grammar.h"
#include "engine/grammar/grammar_matcher_internal.h"

#include "base/error.h"
#include "base/mem.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint32_t *accepted; /* bitmap over the vocabulary */
    int32_t *uncertain;
    size_t n_uncertain;
} PosEntry;

struct DiGrammarMaskCache {
    const DiGrammar *g;
    const DiGrammarVocab *v;
    pthread_mutex_t lock;
    DiGrammarMatcher *scratch;
    PosEntry **entry; /* per position, NULL until built */
    size_t n_built, bytes;
};

DiGrammarMaskCache *di_grammar_mask_cache_new(const DiGrammar *g, const DiGrammarVocab *v) {
    if (!g || !v) return di_errorf("grammar mask cache: NULL grammar or vocabulary"), NULL;
    DiGrammarMaskCache *c = di_calloc(1, sizeof *c, "grammar mask cache");
    if (!c) return NULL;
    c->g = g;
    c->v = v;
    c->entry = di_calloc(g->n_pos, sizeof *c->entry, "grammar mask cache");
    c->scratch = c->entry ? di_grammar_matcher_new(g, v, -1) : NULL;
    if (!c->scratch || pthread_mutex_init(&c->lock, NULL) != 0) {
        di_grammar_matcher_free(c->scratch);
        free(c->entry);
        free(c);
        return NULL;
    }
    return c;
}

void di_grammar_mask_cache_free(DiGrammarMaskCache *c) {
    if (!c) return;
    for (size_t p = 0; p < c->g->n_pos; p++)
        if (c->entry[p]) {
            free(c->entry[p]->accepted);
            free(c->entry[p]->uncertain);
            free(c->entry[p]);
        }
    free(c->entry);
    di_grammar_matcher_free(c->scratch);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

size_t di_grammar_mask_cache_positions(const DiGrammarMaskCache *c, size_t *bytes) {
    if (bytes) *bytes = c ? c->bytes : 0;
    return c ? c->n_built : 0;
}

int di_grammar_matcher_set_cache(DiGrammarMatcher *m, DiGrammarMaskCache *c) {
    if (!m) return di_errorf("grammar matcher: NULL matcher");
    if (c && (c->g != m->g || c->v != m->v))
        return di_errorf("grammar matcher: the mask cache is for another grammar or vocabulary");
    m->cache = c;
    return 0;
}

static int add_uncertain(PosEntry *e, size_t *cap, int32_t t) {
    if (di_grow(&e->uncertain, cap, e->n_uncertain + 1, 64, sizeof *e->uncertain, "grammar mask cache") != 0)
        return -1;
    e->uncertain[e->n_uncertain++] = t;
    return 0;
}

/* Simulate every token from (pos, ⊥) with the scratch matcher (see the header). */
static PosEntry *build_entry(DiGrammarMaskCache *c, int32_t pos) {
    DiGrammarMatcher *m = c->scratch;
    const DiGrammarVocab *v = c->v;
    size_t words = (v->n + 31) / 32, ucap = 0;
    PosEntry *e = di_calloc(1, sizeof *e, "grammar mask cache");
    size_t *lvl_off = di_malloc((v->max_depth + 2) * sizeof *lvl_off, "grammar mask cache");
    size_t *lvl_n = di_malloc((v->max_depth + 2) * sizeof *lvl_n, "grammar mask cache");
    bool *lvl_pop = di_malloc(v->max_depth + 2, "grammar mask cache");
    if (e) e->accepted = di_calloc(words, sizeof *e->accepted, "grammar mask cache");
    int rc = e && e->accepted && lvl_off && lvl_n && lvl_pop ? 0 : -1;
    size_t mark = m->n_nodes;
    if (rc == 0) rc = di_grow(&m->arena, &m->arena_cap, 1, 64, sizeof *m->arena, "grammar mask cache");
    if (rc == 0) {
        m->arena[0] = (GStack){pos, -1};
        lvl_off[0] = 0, lvl_n[0] = 1, lvl_pop[0] = false;
    }
    for (size_t i = 0; rc == 0 && i < v->n_nodes;) {
        uint32_t d = v->depth[i];
        size_t base = lvl_off[d - 1] + lvl_n[d - 1], n;
        bool popped;
        rc = di_grow(&m->arena, &m->arena_cap, base + DI_GRAMMAR_MAX_STACKS + 1, 64, sizeof *m->arena,
                        "grammar mask cache");
        if (rc == 0)
            rc = di_gm_advance(m, m->arena + lvl_off[d - 1], lvl_n[d - 1], v->tbyte[i], &m->arena, &m->arena_cap, base,
                               &n, &popped);
        if (rc != 0) break;
        popped = popped || lvl_pop[d - 1];
        if (n == 0) { /* nothing lives inside the frame: the subtree is rejected or uncertain */
            for (size_t k = i; popped && rc == 0 && k < i + v->subtree[i]; k++)
                for (int32_t t = v->tok_first[k]; t >= 0 && rc == 0; t = v->tok_next[t]) rc = add_uncertain(e, &ucap, t);
            i += v->subtree[i];
            continue;
        }
        lvl_off[d] = base, lvl_n[d] = n, lvl_pop[d] = popped;
        for (int32_t t = v->tok_first[i]; t >= 0; t = v->tok_next[t]) e->accepted[t >> 5] |= 1u << (t & 31);
        i++;
    }
    di_gm_node_truncate(m, mark);
    free(lvl_off), free(lvl_n), free(lvl_pop);
    if (rc != 0 && e) {
        free(e->accepted), free(e->uncertain), free(e);
        return NULL;
    }
    c->n_built++;
    c->bytes += words * sizeof *e->accepted + e->n_uncertain * sizeof *e->uncertain + sizeof *e;
    return e;
}

static const PosEntry *get_entry(DiGrammarMaskCache *c, int32_t pos) {
    pthread_mutex_lock(&c->lock);
    if (!c->entry[pos]) c->entry[pos] = build_entry(c, pos);
    const PosEntry *e = c->entry[pos];
    pthread_mutex_unlock(&c->lock);
    return e;
}

/* Does token t's byte string survive from the matcher's current state? */
static int token_allowed(DiGrammarMatcher *m, int32_t t, bool *ok) {
    const DiGrammarVocab *v = m->v;
    const GStack *in = m->cur;
    size_t n_in = m->n_cur;
    bool acc = m->accept;
    for (uint32_t b = v->off[t], k = 0; b < v->off[t + 1]; b++, k ^= 1) {
        size_t n;
        if (n_in == 0) return *ok = false, 0;
        if (di_gm_advance(m, in, n_in, v->bytes[b], &m->tmp[k], &m->tmp_cap[k], 0, &n, &acc) != 0) return -1;
        in = m->tmp[k];
        n_in = n;
    }
    *ok = n_in > 0 || acc;
    return 0;
}

int di_gm_fill_mask_cached(DiGrammarMatcher *m, uint32_t *mask) {
    const DiGrammarVocab *v = m->v;
    size_t words = (v->n + 31) / 32, mark = m->n_nodes;
    memset(mask, 0, words * sizeof *mask);
    if (m->accept)
        for (size_t i = 0; i < v->n_eos; i++) mask[v->eos[i] >> 5] |= 1u << (v->eos[i] & 31);
    const PosEntry *stack_entry[64], **ents = stack_entry;
    if (m->n_cur > 64 && !(ents = di_malloc(m->n_cur * sizeof *ents, "grammar mask"))) return -1;
    int rc = 0;
    for (size_t s = 0; s < m->n_cur && rc == 0; s++) {
        ents[s] = get_entry(m->cache, m->cur[s].pos);
        if (!ents[s]) rc = -1;
        else
            for (size_t w = 0; w < words; w++) mask[w] |= ents[s]->accepted[w];
    }
    for (size_t s = 0; s < m->n_cur && rc == 0; s++)
        for (size_t k = 0; k < ents[s]->n_uncertain && rc == 0; k++) {
            int32_t t = ents[s]->uncertain[k];
            bool ok;
            if (mask[t >> 5] >> (t & 31) & 1) continue;
            rc = token_allowed(m, t, &ok);
            if (rc == 0 && ok) mask[t >> 5] |= 1u << (t & 31);
        }
    di_gm_node_truncate(m, mark);
    if (ents != stack_entry) free(ents);
    return rc;
}
