/* grammar_matcher.c — the per-request grammar matcher: a pushdown automaton over bytes.
 *
 * State: a set of stacks.  A stack is (pos, node): pos is the NFA position in the innermost
 * rule, node the rest of the stack (a frame = the position to return to + its parent), -1 the
 * empty stack.  Frames are hash-consed, so equal stacks are equal pairs and the set stays
 * small for ambiguous grammars.  Only "scanning" stacks (whose position has byte edges) are
 * kept; epsilon moves, rule entries (push) and rule ends (pop) are resolved eagerly by
 * closure(), which also records whether the empty stack was reached (the output may end).
 *
 * History: accept_token saves the state before it and the frame count, so rollback(k) restores
 * both exactly (frames are appended in order and removed newest-first).  fill_mask walks the
 * vocabulary's DFS token trie from the current state, one state per trie depth, and removes
 * the frames it created when done. */
#include "engine/grammar/grammar.h"
#include "engine/grammar/grammar_matcher_internal.h"

#include "base/error.h"
#include "base/mem.h"

#include <stdlib.h>
#include <string.h>

/* ---- frames (hash-consed) ---- */

static size_t node_hash(int32_t ret, int32_t parent) {
    uint64_t h = (uint64_t)(uint32_t)ret * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uint32_t)parent * 0xC2B2AE3D27D4EB4Full;
    return (size_t)(h ^ h >> 29);
}

static int rehash(DiGrammarMatcher *m, size_t nb) {
    int32_t *b = di_malloc(nb * sizeof *b, "grammar matcher frames");
    if (!b) return -1;
    for (size_t i = 0; i < nb; i++) b[i] = -1;
    /* ascending order keeps the newest frame first in every chain, as truncation needs */
    for (size_t i = 0; i < m->n_nodes; i++) {
        size_t h = node_hash(m->ret[i], m->parent[i]) & (nb - 1);
        m->hnext[i] = b[h];
        b[h] = (int32_t)i;
    }
    free(m->buckets);
    m->buckets = b;
    m->bucket_mask = nb - 1;
    return 0;
}

static int32_t node_intern(DiGrammarMatcher *m, int32_t ret, int32_t parent) {
    size_t h = node_hash(ret, parent) & m->bucket_mask;
    for (int32_t i = m->buckets[h]; i >= 0; i = m->hnext[i])
        if (m->ret[i] == ret && m->parent[i] == parent) return i;
    if (m->n_nodes >= INT32_MAX / 2) return di_errorf("grammar matcher: too many stack frames"), -1;
    if (m->n_nodes == m->node_cap) {
        size_t cap = m->node_cap * 2;
        int32_t *r = di_realloc_array(m->ret, cap, sizeof *r, "grammar matcher frames");
        if (r) m->ret = r;
        int32_t *p = r ? di_realloc_array(m->parent, cap, sizeof *p, "grammar matcher frames") : NULL;
        if (p) m->parent = p;
        int32_t *n = p ? di_realloc_array(m->hnext, cap, sizeof *n, "grammar matcher frames") : NULL;
        if (!n) return -1;
        m->hnext = n;
        m->node_cap = cap;
    }
    int32_t id = (int32_t)m->n_nodes++;
    m->ret[id] = ret;
    m->parent[id] = parent;
    m->hnext[id] = m->buckets[h];
    m->buckets[h] = id;
    if (m->n_nodes > m->bucket_mask + 1 && rehash(m, 2 * (m->bucket_mask + 1)) != 0) return -1;
    return id;
}

void di_gm_node_truncate(DiGrammarMatcher *m, size_t mark) {
    while (m->n_nodes > mark) {
        int32_t i = (int32_t)--m->n_nodes;
        size_t h = node_hash(m->ret[i], m->parent[i]) & m->bucket_mask;
        m->buckets[h] = m->hnext[i]; /* i is the newest frame, so the head of its chain */
    }
}

/* ---- closure and advance ---- */

#define VISIT_MAX (1u << 24) /* (position, frame) pairs one closure may visit */

/* Double the visited set, keeping the current generation's entries. */
static int visit_grow(DiGrammarMatcher *m) {
    size_t n = 2 * (m->vmask + 1);
    if (n > 2 * (size_t)VISIT_MAX)
        return di_errorf("grammar too complex: one step reaches more than %u parse positions", VISIT_MAX);
    uint64_t *k = di_malloc(n * sizeof *k, "grammar matcher scratch");
    uint32_t *g = di_calloc(n, sizeof *g, "grammar matcher scratch");
    if (!k || !g) return free(k), free(g), -1;
    for (size_t i = 0; i <= m->vmask; i++) {
        if (m->vgen[i] != m->gen) continue;
        size_t h = (size_t)((m->vkey[i] * 0x9E3779B97F4A7C15ull) >> 20) & (n - 1);
        while (g[h] == m->gen) h = (h + 1) & (n - 1);
        g[h] = m->gen;
        k[h] = m->vkey[i];
    }
    free(m->vkey), free(m->vgen);
    m->vkey = k, m->vgen = g, m->vmask = n - 1;
    return 0;
}

/* Insert (pos, node) into the visited set: 1 when new, 0 when already there, -1 on error.
 * The set grows while a closure fills it (a full table would make the probe loop endless:
 * fuzz_grammar_regex found "(ab(|a){,97} ...)" doing that). */
static int visit(DiGrammarMatcher *m, uint32_t pos, int32_t node) {
    if (m->v_used * 2 > m->vmask && visit_grow(m) != 0) return -1;
    uint64_t key = (uint64_t)pos << 32 | (uint32_t)node;
    size_t h = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & m->vmask;
    while (m->vgen[h] == m->gen) {
        if (m->vkey[h] == key) return 0;
        h = (h + 1) & m->vmask;
    }
    m->vgen[h] = m->gen;
    m->vkey[h] = key;
    m->v_used++;
    return 1;
}

static int new_generation(DiGrammarMatcher *m) {
    if (++m->gen == 0 || m->v_used * 2 > m->vmask) { /* wrap-around or crowded: resize and clear */
        size_t n = m->vmask + 1;
        if (m->v_used * 2 > m->vmask) n *= 2;
        uint64_t *k = di_realloc_array(m->vkey, n, sizeof *k, "grammar matcher scratch");
        if (k) m->vkey = k;
        uint32_t *g = k ? di_realloc_array(m->vgen, n, sizeof *g, "grammar matcher scratch") : NULL;
        if (!g) return -1;
        m->vgen = g;
        memset(g, 0, n * sizeof *g);
        m->vmask = n - 1;
        m->gen = 1;
    }
    m->v_used = 0;
    return 0;
}

/* Add to out[*n] every scanning stack reachable from (pos, node) without a byte. */
static int closure(DiGrammarMatcher *m, int32_t pos, int32_t node, GStack **out, size_t *out_cap, size_t base,
                   size_t *n, bool *accept) {
    const DiGrammar *g = m->g;
    size_t sp = 0;
    if (di_grow(&m->work, &m->work_cap, 1, 64, sizeof *m->work, "grammar matcher scratch") != 0) return -1;
    m->work[sp++] = (GStack){pos, node};
    while (sp) {
        GStack s = m->work[--sp];
        const DiGPos *p = &g->pos[s.pos];
        for (uint32_t c = 0; c < p->n_eclose; c++) {
            uint32_t qi = g->eclose[p->eclose_off + c];
            int fresh = visit(m, qi, s.node);
            if (fresh < 0) return -1;
            /* eclose(p) starts with p; p seen means all of eclose(p) was seen (closures are
             * transitive), so the whole item is done: this keeps nullable repetitions such as
             * (|a){0,97} linear instead of quadratic per byte */
            if (!fresh && c == 0) break;
            if (!fresh) continue;
            const DiGPos *q = &g->pos[qi];
            bool scans = false;
            for (uint32_t k = 0; k < q->n_edges; k++) {
                const DiGEdge *e = &g->edges[q->edge_off + k];
                if (e->kind == DI_GE_BYTES) {
                    scans = true;
                    continue;
                }
                int32_t fr = node_intern(m, e->target, s.node); /* push: return to e->target */
                if (fr < 0 || di_grow(&m->work, &m->work_cap, sp + 1, 64, sizeof *m->work, "grammar matcher scratch"))
                    return -1;
                m->work[sp++] = (GStack){g->rule_start[e->rule], fr};
            }
            if (q->final_rule >= 0) { /* pop */
                if (s.node < 0) *accept = true;
                else {
                    if (di_grow(&m->work, &m->work_cap, sp + 1, 64, sizeof *m->work, "grammar matcher scratch"))
                        return -1;
                    m->work[sp++] = (GStack){m->ret[s.node], m->parent[s.node]};
                }
            }
            if (scans) {
                if (*n >= DI_GRAMMAR_MAX_STACKS)
                    return di_errorf("grammar too ambiguous: more than %d parse stacks at once", DI_GRAMMAR_MAX_STACKS);
                if (di_grow(out, out_cap, base + *n + 1, 64, sizeof **out, "grammar matcher state") != 0) return -1;
                (*out)[base + (*n)++] = (GStack){(int32_t)qi, s.node};
            }
        }
    }
    return 0;
}

/* The state after byte b from in[0..n_in) (which must not live in *out), written to
 * (*out)[base..base + *n_out). */
int di_gm_advance(DiGrammarMatcher *m, const GStack *in, size_t n_in, uint8_t b, GStack **out, size_t *out_cap,
                   size_t base, size_t *n_out, bool *accept) {
    *n_out = 0;
    *accept = false;
    if (new_generation(m) != 0) return -1;
    const DiGrammar *g = m->g;
    for (size_t i = 0; i < n_in; i++) {
        const DiGPos *p = &g->pos[in[i].pos];
        for (uint32_t k = 0; k < p->n_edges; k++) {
            const DiGEdge *e = &g->edges[p->edge_off + k];
            if (e->kind != DI_GE_BYTES) break; /* byte edges sort first */
            if (b < e->lo || b > e->hi) continue;
            if (closure(m, e->target, in[i].node, out, out_cap, base, n_out, accept) != 0) return -1;
        }
    }
    return 0;
}

/* ---- public API ---- */

DiGrammarMatcher *di_grammar_matcher_new(const DiGrammar *g, const DiGrammarVocab *v, int32_t think_end) {
    if (!g || !v) return di_errorf("grammar matcher: NULL grammar or vocabulary"), NULL;
    if (think_end >= (int32_t)v->n || think_end < -1)
        return di_errorf("grammar matcher: think_end id %d outside the vocabulary", think_end), NULL;
    DiGrammarMatcher *m = di_calloc(1, sizeof *m, "grammar matcher");
    if (!m) return NULL;
    m->g = g;
    m->v = v;
    m->think_end = think_end;
    m->thinking = think_end >= 0;
    m->node_cap = 256;
    m->ret = di_malloc(m->node_cap * sizeof *m->ret, "grammar matcher frames");
    m->parent = di_malloc(m->node_cap * sizeof *m->parent, "grammar matcher frames");
    m->hnext = di_malloc(m->node_cap * sizeof *m->hnext, "grammar matcher frames");
    m->vmask = 1023;
    m->vkey = di_malloc((m->vmask + 1) * sizeof *m->vkey, "grammar matcher scratch");
    m->vgen = di_calloc(m->vmask + 1, sizeof *m->vgen, "grammar matcher scratch");
    if (!m->ret || !m->parent || !m->hnext || !m->vkey || !m->vgen || rehash(m, 256) != 0 || new_generation(m) != 0 ||
        closure(m, g->rule_start[g->root], -1, &m->cur, &m->cur_cap, 0, &m->n_cur, &m->accept) != 0) {
        di_grammar_matcher_free(m);
        return NULL;
    }
    return m;
}

void di_grammar_matcher_free(DiGrammarMatcher *m) {
    if (!m) return;
    free(m->ret), free(m->parent), free(m->hnext), free(m->buckets);
    free(m->cur), free(m->vkey), free(m->vgen), free(m->work), free(m->arena);
    free(m->hist), free(m->hst), free(m->tmp[0]), free(m->tmp[1]);
    free(m);
}

/* Run bytes from the current state; on success the new state is in m->cur. */
static int run_bytes(DiGrammarMatcher *m, const uint8_t *bytes, size_t len) {
    for (size_t i = 0; i < len; i++) {
        size_t n;
        bool acc;
        if (di_gm_advance(m, m->cur, m->n_cur, bytes[i], &m->arena, &m->arena_cap, 0, &n, &acc) != 0) return -1;
        if (n == 0 && !acc) return di_errorf("the grammar rejects byte 0x%02x at offset %zu", bytes[i], i);
        if (di_grow(&m->cur, &m->cur_cap, n, 64, sizeof *m->cur, "grammar matcher state") != 0) return -1;
        if (n) memcpy(m->cur, m->arena, n * sizeof *m->cur);
        m->n_cur = n;
        m->accept = acc;
    }
    return 0;
}

static int save_state(DiGrammarMatcher *m) {
    if (di_grow(&m->hist, &m->hist_cap, m->n_hist + 1, 64, sizeof *m->hist, "grammar matcher history") != 0 ||
        di_grow(&m->hst, &m->hst_cap, m->n_hst + m->n_cur, 64, sizeof *m->hst, "grammar matcher history") != 0)
        return -1;
    m->hist[m->n_hist++] = (GHist){m->n_hst, (uint32_t)m->n_cur, m->accept, m->thinking, m->terminated, m->n_nodes};
    if (m->n_cur) memcpy(m->hst + m->n_hst, m->cur, m->n_cur * sizeof *m->cur);
    m->n_hst += m->n_cur;
    return 0;
}

int di_grammar_matcher_rollback(DiGrammarMatcher *m, size_t k) {
    if (!m) return di_errorf("grammar matcher: NULL matcher");
    if (k > m->n_hist) return di_errorf("grammar matcher: cannot roll back %zu tokens, only %zu accepted", k, m->n_hist);
    if (k == 0) return 0;
    const GHist *h = &m->hist[m->n_hist - k];
    if (di_grow(&m->cur, &m->cur_cap, h->n, 64, sizeof *m->cur, "grammar matcher state") != 0) return -1;
    if (h->n) memcpy(m->cur, m->hst + h->off, h->n * sizeof *m->cur);
    m->n_cur = h->n;
    m->accept = h->accept;
    m->thinking = h->thinking;
    m->terminated = h->terminated;
    di_gm_node_truncate(m, h->node_mark);
    m->n_hst = h->off;
    m->n_hist -= k;
    return 0;
}

static bool is_eos(const DiGrammarVocab *v, int32_t t) {
    for (size_t i = 0; i < v->n_eos; i++)
        if (v->eos[i] == t) return true;
    return false;
}

int di_grammar_matcher_accept_token(DiGrammarMatcher *m, int32_t t) {
    if (!m) return di_errorf("grammar matcher: NULL matcher");
    const DiGrammarVocab *v = m->v;
    if (t < 0 || (size_t)t >= v->n) return di_errorf("grammar matcher: token %d outside the vocabulary", t);
    if (m->terminated) return di_errorf("grammar matcher: token %d after the end of the output", t);
    if (save_state(m) != 0) return -1;
    if (m->thinking) { /* the grammar starts after </think> */
        if (t == m->think_end) m->thinking = false;
        return 0;
    }
    if (v->special[t]) {
        if (is_eos(v, t) && m->accept) {
            m->terminated = true;
            return 0;
        }
        di_grammar_matcher_rollback(m, 1);
        return di_errorf(is_eos(v, t) ? "grammar matcher: end of output (token %d) before the grammar is complete"
                                      : "grammar matcher: special token %d is not grammar text", t);
    }
    uint32_t len = v->off[t + 1] - v->off[t];
    if (len == 0 || run_bytes(m, v->bytes + v->off[t], len) != 0) {
        if (len == 0) di_errorf("token has no bytes");
        di_error_wrap("grammar matcher: token %d", t);
        di_grammar_matcher_rollback(m, 1); /* cannot fail for k = 1, keeps the message */
        return -1;
    }
    return 0;
}

int di_grammar_matcher_accept_bytes(DiGrammarMatcher *m, const uint8_t *bytes, size_t n) {
    if (!m || (!bytes && n)) return di_errorf("grammar matcher: NULL argument");
    if (m->terminated || m->thinking) return di_errorf("grammar matcher: not matching grammar text now");
    if (save_state(m) != 0) return -1;
    int rc = run_bytes(m, bytes, n);
    if (rc != 0) {
        di_grammar_matcher_rollback(m, 1);
        return -1;
    }
    m->n_hist--; /* not a token: keep the frames, drop the history entry */
    m->n_hst = m->hist[m->n_hist].off;
    return 0;
}

bool di_grammar_matcher_is_terminated(const DiGrammarMatcher *m) { return m && m->terminated; }
bool di_grammar_matcher_can_end(const DiGrammarMatcher *m) { return m && !m->thinking && !m->terminated && m->accept; }
size_t di_grammar_matcher_num_tokens(const DiGrammarMatcher *m) { return m ? m->n_hist : 0; }

int di_grammar_matcher_fill_mask(DiGrammarMatcher *m, uint32_t *mask) {
    if (!m || !mask) return di_errorf("grammar matcher: NULL argument");
    const DiGrammarVocab *v = m->v;
    size_t words = (v->n + 31) / 32;
    if (m->cache && !m->thinking && !m->terminated) return di_gm_fill_mask_cached(m, mask);
    if (m->thinking) { /* anything goes until </think> */
        memset(mask, 0xFF, words * sizeof *mask);
        if (v->n % 32) mask[words - 1] = (1u << (v->n % 32)) - 1;
        return 0;
    }
    memset(mask, 0, words * sizeof *mask);
    if (m->terminated) return 0;
    if (m->accept)
        for (size_t i = 0; i < v->n_eos; i++) mask[v->eos[i] >> 5] |= 1u << (v->eos[i] & 31);
    size_t *lvl_off = di_malloc((v->max_depth + 2) * sizeof *lvl_off, "grammar mask walk");
    size_t *lvl_n = di_malloc((v->max_depth + 2) * sizeof *lvl_n, "grammar mask walk");
    if (!lvl_off || !lvl_n) return free(lvl_off), free(lvl_n), -1;
    size_t mark = m->n_nodes;
    int rc = di_grow(&m->arena, &m->arena_cap, m->n_cur, 64, sizeof *m->arena, "grammar mask walk");
    if (rc == 0 && m->n_cur) memcpy(m->arena, m->cur, m->n_cur * sizeof *m->cur); /* cur is NULL when empty */
    lvl_off[0] = 0;
    lvl_n[0] = m->n_cur;
    for (size_t i = 0; rc == 0 && i < v->n_nodes;) {
        uint32_t d = v->depth[i];
        size_t base = lvl_off[d - 1] + lvl_n[d - 1], n;
        bool acc;
        /* advance reads level d-1 from the arena while appending level d after it: room for
         * the most stacks a state may have, so the arena never moves during the call */
        rc = di_grow(&m->arena, &m->arena_cap, base + DI_GRAMMAR_MAX_STACKS + 1, 64, sizeof *m->arena,
                  "grammar mask walk");
        if (rc == 0)
            rc = di_gm_advance(m, m->arena + lvl_off[d - 1], lvl_n[d - 1], v->tbyte[i], &m->arena, &m->arena_cap, base, &n,
                         &acc);
        if (rc != 0) break;
        if (n == 0 && !acc) {
            i += v->subtree[i];
            continue;
        }
        lvl_off[d] = base;
        lvl_n[d] = n;
        for (int32_t t = v->tok_first[i]; t >= 0; t = v->tok_next[t]) mask[t >> 5] |= 1u << (t & 31);
        i++;
    }
    di_gm_node_truncate(m, mark);
    free(lvl_off);
    free(lvl_n);
    return rc;
}
