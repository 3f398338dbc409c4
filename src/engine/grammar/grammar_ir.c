/* grammar_ir.c — the grammar AST and its compilation into byte-level NFAs (one per rule).
 *
 * Why byte-level: the matcher must judge tokens by their exact bytes, and tokens cut UTF-8
 * sequences in the middle, so a character class becomes the UTF-8 byte-range sequences that
 * encode it.  Epsilon moves are folded into a per-position closure at compile time so the
 * matcher only ever follows byte and rule edges.  Compilation refuses what the matcher could
 * not run in bounded time: references to undefined rules, left recursion (a rule reaching
 * itself without consuming a byte would push frames forever) and expansions beyond
 * DI_GRAMMAR_MAX_POSITIONS. */
#include "engine/grammar/grammar.h"

#include "base/error.h"
#include "base/mem.h"

#include <stdlib.h>
#include <string.h>

/* ---- AST ---- */

DiGNode *di_gnode_new(DiGNodeKind kind) {
    DiGNode *n = di_calloc(1, sizeof *n, "grammar node");
    if (n) n->kind = kind;
    return n;
}

DiGNode *di_gnode_bytes(const void *bytes, size_t len) {
    DiGNode *n = di_gnode_new(DI_GN_BYTES);
    if (!n) return NULL;
    n->bytes = di_malloc(len ? len : 1, "grammar literal");
    if (!n->bytes) return free(n), NULL;
    if (len) memcpy(n->bytes, bytes, len);
    n->n_bytes = len;
    return n;
}

DiGNode *di_gnode_rule(const char *name, size_t len) {
    DiGNode *n = di_gnode_new(DI_GN_RULE);
    if (!n) return NULL;
    n->name = di_malloc(len + 1, "grammar rule name");
    if (!n->name) return free(n), NULL;
    memcpy(n->name, name, len);
    n->name[len] = 0;
    return n;
}

DiGNode *di_gnode_repeat(DiGNode *kid, int32_t min, int32_t max) {
    DiGNode *n = di_gnode_new(DI_GN_REPEAT);
    if (!n || di_gnode_add(n, kid) != 0) {
        di_gnode_free(n);
        return NULL;
    }
    n->min = min;
    n->max = max;
    return n;
}

int di_gnode_add(DiGNode *parent, DiGNode *kid) {
    if (!kid) return -1;
    DiGNode **k = di_realloc_array(parent->kids, parent->n_kids + 1, sizeof *k, "grammar node children");
    if (!k) {
        di_gnode_free(kid);
        return -1;
    }
    parent->kids = k;
    parent->kids[parent->n_kids++] = kid;
    return 0;
}

int di_gnode_class_add(DiGNode *cls, uint32_t lo, uint32_t hi) {
    uint32_t *r = di_realloc_array(cls->ranges, 2 * (cls->n_ranges + 1), sizeof *r, "character class");
    if (!r) return -1;
    cls->ranges = r;
    r[2 * cls->n_ranges] = lo;
    r[2 * cls->n_ranges + 1] = hi;
    cls->n_ranges++;
    return 0;
}

static int cmp_range(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Sort and merge overlapping / adjacent ranges. */
static void class_normalize(DiGNode *cls) {
    if (cls->n_ranges == 0) return;
    qsort(cls->ranges, cls->n_ranges, 2 * sizeof(uint32_t), cmp_range);
    size_t w = 0;
    for (size_t i = 1; i < cls->n_ranges; i++) {
        uint32_t lo = cls->ranges[2 * i], hi = cls->ranges[2 * i + 1];
        if (lo <= cls->ranges[2 * w + 1] + 1) {
            if (hi > cls->ranges[2 * w + 1]) cls->ranges[2 * w + 1] = hi;
        } else {
            w++;
            cls->ranges[2 * w] = lo;
            cls->ranges[2 * w + 1] = hi;
        }
    }
    cls->n_ranges = w + 1;
}

int di_gnode_class_negate(DiGNode *cls) {
    class_normalize(cls);
    uint32_t *old = cls->ranges;
    size_t n_old = cls->n_ranges;
    cls->ranges = NULL;
    cls->n_ranges = 0;
    uint32_t next = 0;
    int rc = 0;
    for (size_t i = 0; i < n_old && rc == 0; i++) {
        if (old[2 * i] > next) rc = di_gnode_class_add(cls, next, old[2 * i] - 1);
        next = old[2 * i + 1] + 1;
    }
    if (rc == 0 && next <= 0x10FFFF) rc = di_gnode_class_add(cls, next, 0x10FFFF);
    free(old);
    return rc;
}

void di_gnode_free(DiGNode *n) {
    if (!n) return;
    for (size_t i = 0; i < n->n_kids; i++) di_gnode_free(n->kids[i]);
    free(n->kids);
    free(n->name);
    free(n->bytes);
    free(n->ranges);
    free(n);
}

int di_grammar_utf8_decode(const uint8_t *u, size_t left, uint32_t *cp) {
    static const uint32_t min_of_len[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (!left) return 0;
    int len = u[0] < 0x80 ? 1 : (u[0] & 0xE0) == 0xC0 ? 2 : (u[0] & 0xF0) == 0xE0 ? 3 : (u[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (!len || (size_t)len > left) return 0;
    uint32_t v = len == 1 ? u[0] : u[0] & (0x7Fu >> len);
    for (int k = 1; k < len; k++) {
        if ((u[k] & 0xC0) != 0x80) return 0;
        v = v << 6 | (u[k] & 0x3F);
    }
    if (v < min_of_len[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

int di_grules_find(const DiGRules *rules, const char *name) {
    for (size_t i = 0; i < rules->n; i++)
        if (strcmp(rules->names[i], name) == 0) return (int)i;
    return -1;
}

int di_grules_add(DiGRules *rules, const char *name, size_t len, DiGNode *body) {
    if (!body) return -1;
    char *nm = di_malloc(len + 1, "grammar rule name");
    if (!nm) return di_gnode_free(body), -1;
    memcpy(nm, name, len);
    nm[len] = 0;
    if (di_grules_find(rules, nm) >= 0) {
        di_errorf("rule '%s' is defined twice", nm);
        free(nm);
        di_gnode_free(body);
        return -1;
    }
    if (rules->n == rules->cap) {
        size_t cap = rules->cap ? 2 * rules->cap : 16;
        char **n2 = di_realloc_array(rules->names, cap, sizeof *n2, "grammar rules");
        if (n2) rules->names = n2;
        DiGNode **b2 = n2 ? di_realloc_array(rules->bodies, cap, sizeof *b2, "grammar rules") : NULL;
        if (!b2) return free(nm), di_gnode_free(body), -1;
        rules->bodies = b2;
        rules->cap = cap;
    }
    rules->names[rules->n] = nm;
    rules->bodies[rules->n++] = body;
    return 0;
}

void di_grules_free(DiGRules *rules) {
    for (size_t i = 0; i < rules->n; i++) {
        free(rules->names[i]);
        di_gnode_free(rules->bodies[i]);
    }
    free(rules->names);
    free(rules->bodies);
    memset(rules, 0, sizeof *rules);
}

/* ---- NFA construction ---- */

typedef struct {
    DiGEdge e;
    int32_t from;
} BEdge;

typedef struct {
    size_t n_pos;
    int32_t *final_rule;
    size_t pos_cap;
    BEdge *edges;
    size_t n_edges, edge_cap;
    const DiGRules *rules;
} Builder;

static int32_t new_pos(Builder *b) {
    if (b->n_pos >= DI_GRAMMAR_MAX_POSITIONS) {
        di_errorf("grammar too large: more than %u automaton positions (reduce repetition counts)",
                  DI_GRAMMAR_MAX_POSITIONS);
        return -1;
    }
    if (b->n_pos == b->pos_cap) {
        size_t cap = b->pos_cap ? 2 * b->pos_cap : 256;
        int32_t *f = di_realloc_array(b->final_rule, cap, sizeof *f, "grammar positions");
        if (!f) return -1;
        b->final_rule = f;
        b->pos_cap = cap;
    }
    b->final_rule[b->n_pos] = -1;
    return (int32_t)b->n_pos++;
}

static int add_edge(Builder *b, int32_t from, uint8_t kind, uint8_t lo, uint8_t hi, int32_t rule, int32_t to) {
    if (b->n_edges == b->edge_cap) {
        size_t cap = b->edge_cap ? 2 * b->edge_cap : 256;
        BEdge *e = di_realloc_array(b->edges, cap, sizeof *e, "grammar edges");
        if (!e) return -1;
        b->edges = e;
        b->edge_cap = cap;
    }
    b->edges[b->n_edges++] = (BEdge){{kind, lo, hi, rule, to}, from};
    return 0;
}

#define EPS(b, f, t) add_edge(b, f, DI_GE_EPS, 0, 0, -1, t)

/* A chain of byte ranges from s to e (one UTF-8 sequence shape). */
static int add_seq(Builder *b, int32_t s, int32_t e, const uint8_t *lo, const uint8_t *hi, int n) {
    int32_t cur = s;
    for (int i = 0; i < n; i++) {
        int32_t nxt = i == n - 1 ? e : new_pos(b);
        if (nxt < 0 || add_edge(b, cur, DI_GE_BYTES, lo[i], hi[i], -1, nxt) != 0) return -1;
        cur = nxt;
    }
    return 0;
}

/* Code points [lo, hi] as UTF-8 byte-range sequences: split until both ends share their
 * length and every continuation byte spans its full range, then emit one chain. */
static int add_utf8_range(Builder *b, int32_t s, int32_t e, uint32_t lo, uint32_t hi) {
    static const uint32_t max_of_len[4] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
    if (lo > hi) return 0;
    if (lo <= 0xDFFF && hi >= 0xD800) { /* surrogates are not scalar values */
        if (lo < 0xD800 && add_utf8_range(b, s, e, lo, 0xD7FF) != 0) return -1;
        return hi > 0xDFFF ? add_utf8_range(b, s, e, 0xE000, hi) : 0;
    }
    for (int len = 0; len < 3; len++)
        if (lo <= max_of_len[len] && hi > max_of_len[len]) {
            if (add_utf8_range(b, s, e, lo, max_of_len[len]) != 0) return -1;
            return add_utf8_range(b, s, e, max_of_len[len] + 1, hi);
        }
    if (hi <= 0x7F) return add_seq(b, s, e, (uint8_t[]){(uint8_t)lo}, (uint8_t[]){(uint8_t)hi}, 1);
    int n = hi <= 0x7FF ? 2 : hi <= 0xFFFF ? 3 : 4;
    for (int i = 1; i < n; i++) { /* split where a lower continuation byte is partial */
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                if (add_utf8_range(b, s, e, lo, lo | m) != 0) return -1;
                return add_utf8_range(b, s, e, (lo | m) + 1, hi);
            }
            if ((hi & m) != m) {
                if (add_utf8_range(b, s, e, lo, (hi & ~m) - 1) != 0) return -1;
                return add_utf8_range(b, s, e, hi & ~m, hi);
            }
        }
    }
    uint8_t bl[4], bh[4];
    static const uint8_t lead[4] = {0, 0xC0, 0xE0, 0xF0};
    for (int i = 0; i < n; i++) {
        int shift = 6 * (n - 1 - i);
        uint32_t mask = i == 0 ? 0x3Fu >> (n - 1) : 0x3F;
        bl[i] = (uint8_t)((i == 0 ? lead[n - 1] : 0x80) | ((lo >> shift) & mask));
        bh[i] = (uint8_t)((i == 0 ? lead[n - 1] : 0x80) | ((hi >> shift) & mask));
    }
    return add_seq(b, s, e, bl, bh, n);
}

static int compile_node(Builder *b, const DiGNode *n, int32_t *s_out, int32_t *e_out, int depth);

static int compile_repeat(Builder *b, const DiGNode *n, int32_t s, int32_t e, int depth) {
    int32_t cur = s, ks, ke;
    for (int32_t i = 0; i < n->min; i++) {
        if (compile_node(b, n->kids[0], &ks, &ke, depth + 1) != 0 || EPS(b, cur, ks) != 0) return -1;
        cur = ke;
    }
    if (n->max < 0) { /* loop: cur -> kid -> cur, cur -> e */
        if (compile_node(b, n->kids[0], &ks, &ke, depth + 1) != 0) return -1;
        if (EPS(b, cur, ks) != 0 || EPS(b, ke, cur) != 0) return -1;
        return EPS(b, cur, e);
    }
    for (int32_t i = n->min; i < n->max; i++) { /* optional copies, each may stop at e */
        if (EPS(b, cur, e) != 0) return -1;
        if (compile_node(b, n->kids[0], &ks, &ke, depth + 1) != 0 || EPS(b, cur, ks) != 0) return -1;
        cur = ke;
    }
    return EPS(b, cur, e);
}

static int compile_node(Builder *b, const DiGNode *n, int32_t *s_out, int32_t *e_out, int depth) {
    if (depth > 4 * DI_GRAMMAR_MAX_DEPTH) return di_errorf("grammar nested too deeply");
    int32_t s = new_pos(b), e = s < 0 ? -1 : new_pos(b);
    if (e < 0) return -1;
    *s_out = s;
    *e_out = e;
    switch (n->kind) {
    case DI_GN_EMPTY: return EPS(b, s, e);
    case DI_GN_BYTES: {
        if (n->n_bytes == 0) return EPS(b, s, e);
        int32_t cur = s;
        for (size_t i = 0; i < n->n_bytes; i++) {
            int32_t nxt = i + 1 == n->n_bytes ? e : new_pos(b);
            if (nxt < 0 || add_edge(b, cur, DI_GE_BYTES, n->bytes[i], n->bytes[i], -1, nxt) != 0) return -1;
            cur = nxt;
        }
        return 0;
    }
    case DI_GN_CLASS:
        for (size_t i = 0; i < n->n_ranges; i++)
            if (add_utf8_range(b, s, e, n->ranges[2 * i], n->ranges[2 * i + 1]) != 0) return -1;
        return 0;
    case DI_GN_RULE: {
        int r = di_grules_find(b->rules, n->name);
        if (r < 0) return di_errorf("rule '%s' is referenced but not defined", n->name);
        return add_edge(b, s, DI_GE_RULE, 0, 0, r, e);
    }
    case DI_GN_SEQ: {
        int32_t cur = s, ks, ke;
        for (size_t i = 0; i < n->n_kids; i++) {
            if (compile_node(b, n->kids[i], &ks, &ke, depth + 1) != 0 || EPS(b, cur, ks) != 0) return -1;
            cur = ke;
        }
        return EPS(b, cur, e);
    }
    case DI_GN_ALT: {
        int32_t ks, ke;
        for (size_t i = 0; i < n->n_kids; i++)
            if (compile_node(b, n->kids[i], &ks, &ke, depth + 1) != 0 || EPS(b, s, ks) != 0 || EPS(b, ke, e) != 0)
                return -1;
        return 0;
    }
    case DI_GN_REPEAT:
        if (n->min < 0 || n->min > DI_GRAMMAR_MAX_REPEAT || n->max > DI_GRAMMAR_MAX_REPEAT ||
            (n->max >= 0 && n->max < n->min))
            return di_errorf("repetition {%d,%d} out of range (0 <= m <= n <= %d)", n->min, n->max,
                             DI_GRAMMAR_MAX_REPEAT);
        return compile_repeat(b, n, s, e, depth);
    }
    return di_errorf("grammar node of unknown kind %d", (int)n->kind);
}

/* ---- finishing: CSR edges, epsilon closures, left-recursion check ---- */

static int cmp_bedge(const void *a, const void *b) {
    const BEdge *x = a, *y = b;
    if (x->from != y->from) return x->from < y->from ? -1 : 1;
    return (x->e.kind > y->e.kind) - (x->e.kind < y->e.kind);
}

/* Epsilon edges of position p live in eps[eps_off[p] .. eps_off[p+1]). */
static int build_closures(DiGrammar *g, const int32_t *eps_off, const int32_t *eps) {
    size_t cap = g->n_pos * 2 + 16;
    g->eclose = di_malloc(cap * sizeof *g->eclose, "grammar closures");
    uint32_t *mark = di_calloc(g->n_pos, sizeof *mark, "grammar closure marks");
    uint32_t *stack = di_malloc(g->n_pos * sizeof *stack, "grammar closure stack");
    uint8_t *is_target = di_calloc(g->n_pos, 1, "grammar closure marks");
    if (!g->eclose || !mark || !stack || !is_target) return free(mark), free(stack), free(is_target), -1;
    for (size_t i = 0; i < g->n_edges; i++) is_target[g->edges[i].target] = 1;
    for (size_t r = 0; r < g->n_rules; r++) is_target[g->rule_start[r]] = 1;
    for (size_t p = 0; p < g->n_pos; p++) {
        g->pos[p].eclose_off = (uint32_t)g->n_eclose;
        size_t sp = 0;
        stack[sp++] = (uint32_t)p;
        mark[p] = (uint32_t)p + 1;
        while (sp) {
            uint32_t q = stack[--sp];
            if (g->n_eclose == cap) {
                if (cap > (size_t)8 * DI_GRAMMAR_MAX_POSITIONS) {
                    free(mark), free(stack), free(is_target);
                    return di_errorf("grammar too large: epsilon closures exceed %zu entries", cap);
                }
                uint32_t *c = di_realloc_array(g->eclose, cap * 2, sizeof *c, "grammar closures");
                if (!c) return free(mark), free(stack), free(is_target), -1;
                g->eclose = c;
                cap *= 2;
            }
            /* keep p itself (first: the matcher relies on it), the positions that do something
             * (edges or a rule end) and those the matcher starts closures from (edge targets,
             * so it sees they were covered); other epsilon junctions would only be re-visited */
            if (q == p || g->pos[q].n_edges || g->pos[q].final_rule >= 0 || is_target[q]) g->eclose[g->n_eclose++] = q;
            for (int32_t i = eps_off[q]; i < eps_off[q + 1]; i++)
                if (mark[eps[i]] != (uint32_t)p + 1) {
                    mark[eps[i]] = (uint32_t)p + 1;
                    stack[sp++] = (uint32_t)eps[i];
                }
        }
        g->pos[p].n_eclose = (uint32_t)(g->n_eclose - g->pos[p].eclose_off);
    }
    free(is_target);
    free(mark);
    free(stack);
    return 0;
}

/* Positions of rule r reachable from its start without consuming a byte: via epsilon moves and
 * through references to nullable rules.  Calls visit(rule referenced) for each reference met;
 * returns whether the rule's end is reachable (the rule is nullable). */
static bool null_walk(const DiGrammar *g, int32_t r, const bool *nullable, uint32_t *seen, int32_t *stack,
                      int32_t *refs, size_t *n_refs, uint32_t *stamp) {
    /* seen[p] >= *stamp: p was pushed; == *stamp + 1: its edges were scanned too.  Stamps
     * instead of clearing keep the analysis linear in the grammar, not rules x positions. */
    bool reaches_end = false;
    size_t sp = 0;
    uint32_t pushed = *stamp, scanned = *stamp + 1;
    *stamp += 2;
    stack[sp++] = g->rule_start[r];
    seen[g->rule_start[r]] = pushed;
    while (sp) {
        const DiGPos *p = &g->pos[stack[--sp]];
        for (uint32_t c = 0; c < p->n_eclose; c++) {
            uint32_t qi = g->eclose[p->eclose_off + c];
            if (seen[qi] == scanned) continue; /* each position's edges once: refs stays <= n_edges */
            seen[qi] = scanned; /* (a later push of qi is redundant: its closure is inside this one) */
            const DiGPos *q = &g->pos[qi];
            if (q->final_rule == r) reaches_end = true;
            for (uint32_t k = 0; k < q->n_edges; k++) {
                const DiGEdge *e = &g->edges[q->edge_off + k];
                if (e->kind != DI_GE_RULE) continue;
                if (refs) refs[(*n_refs)++] = e->rule;
                if (nullable[e->rule] && seen[e->target] < pushed) {
                    seen[e->target] = pushed;
                    stack[sp++] = e->target;
                }
            }
        }
    }
    return reaches_end;
}

static int check_left_recursion(const DiGrammar *g) {
    bool *nullable = di_calloc(g->n_rules, sizeof *nullable, "grammar analysis");
    uint32_t *seen = di_calloc(g->n_pos, sizeof *seen, "grammar analysis"), stamp = 1;
    int32_t *stack = di_malloc(g->n_pos * sizeof *stack, "grammar analysis");
    int32_t *refs = di_malloc((g->n_edges + 1) * sizeof *refs, "grammar analysis");
    uint8_t *color = di_calloc(g->n_rules, 1, "grammar analysis");
    int32_t *adj_off = di_calloc(g->n_rules + 1, sizeof *adj_off, "grammar analysis");
    int32_t *iter = di_malloc((g->n_rules + 1) * sizeof *iter, "grammar analysis");
    int32_t *adj = NULL;
    int rc = -1;
    if (!nullable || !seen || !stack || !refs || !color || !adj_off || !iter) goto out;
    for (bool changed = true; changed;) { /* nullable rules: least fixed point */
        changed = false;
        for (size_t r = 0; r < g->n_rules; r++)
            if (!nullable[r] && null_walk(g, (int32_t)r, nullable, seen, stack, NULL, NULL, &stamp))
                nullable[r] = changed = true;
    }
    /* left-reference graph: r -> s when r can reach a reference to s before any byte */
    size_t n_adj = 0, cap = 0;
    for (size_t r = 0; r < g->n_rules; r++) {
        size_t nr = 0;
        null_walk(g, (int32_t)r, nullable, seen, stack, refs, &nr, &stamp);
        if (n_adj + nr > cap) {
            cap = (n_adj + nr) * 2 + 16;
            int32_t *a = di_realloc_array(adj, cap, sizeof *a, "grammar analysis");
            if (!a) goto out;
            adj = a;
        }
        if (nr) memcpy(adj + n_adj, refs, nr * sizeof *refs);
        n_adj += nr;
        adj_off[r + 1] = (int32_t)n_adj;
    }
    /* iterative DFS for a cycle (color 1 = on the path, 2 = done) */
    for (size_t r0 = 0; r0 < g->n_rules; r0++) {
        if (color[r0]) continue;
        size_t sp = 0;
        stack[sp++] = (int32_t)r0;
        color[r0] = 1;
        iter[0] = adj_off[r0];
        while (sp) {
            int32_t r = stack[sp - 1];
            if (iter[sp - 1] < adj_off[r + 1]) {
                int32_t s = adj[iter[sp - 1]++];
                if (color[s] == 1) {
                    di_errorf("rule '%s' is left-recursive (it reaches itself without consuming input)",
                              g->rule_names[s]);
                    goto out;
                }
                if (color[s] == 0) {
                    color[s] = 1;
                    stack[sp] = s;
                    iter[sp++] = adj_off[s];
                }
            } else {
                color[r] = 2;
                sp--;
            }
        }
    }
    rc = 0;
out:
    free(nullable), free(seen), free(stack), free(refs), free(color), free(adj_off), free(adj), free(iter);
    return rc;
}

static int finish(DiGrammar *g, Builder *b) {
    qsort(b->edges, b->n_edges, sizeof *b->edges, cmp_bedge);
    g->n_pos = b->n_pos;
    g->pos = di_calloc(g->n_pos, sizeof *g->pos, "grammar positions");
    g->edges = di_malloc((b->n_edges + 1) * sizeof *g->edges, "grammar edges");
    int32_t *eps_off = di_calloc(g->n_pos + 1, sizeof *eps_off, "grammar edges");
    int32_t *eps = di_malloc((b->n_edges + 1) * sizeof *eps, "grammar edges");
    int rc = -1;
    if (!g->pos || !g->edges || !eps_off || !eps) goto out;
    size_t n_eps = 0;
    for (size_t i = 0; i < b->n_edges; i++) {
        const BEdge *be = &b->edges[i];
        if (be->e.kind == DI_GE_EPS) {
            eps[n_eps++] = be->e.target;
            eps_off[be->from + 1]++;
        } else {
            DiGPos *p = &g->pos[be->from];
            if (p->n_edges == 0) p->edge_off = (uint32_t)g->n_edges;
            p->n_edges++;
            g->edges[g->n_edges++] = be->e;
        }
    }
    for (size_t p = 0; p < g->n_pos; p++) {
        eps_off[p + 1] += eps_off[p];
        g->pos[p].final_rule = b->final_rule[p];
    }
    rc = build_closures(g, eps_off, eps);
    if (rc == 0) rc = check_left_recursion(g);
out:
    free(eps_off);
    free(eps);
    return rc;
}

DiGrammar *di_grammar_build(DiGRules *rules, const char *root) {
    Builder b = {.rules = rules};
    DiGrammar *g = di_calloc(1, sizeof *g, "grammar");
    if (!g) goto fail;
    int r = di_grules_find(rules, root ? root : "root");
    if (r < 0) {
        di_errorf("the grammar has no rule named '%s' (the start rule)", root ? root : "root");
        goto fail;
    }
    g->root = r;
    if (di_grules_inline(rules) != 0) goto fail;
    g->n_rules = rules->n;
    g->rule_start = di_calloc(rules->n, sizeof *g->rule_start, "grammar rules");
    if (!g->rule_start) goto fail;
    for (size_t i = 0; i < rules->n; i++) {
        int32_t s, e;
        if (compile_node(&b, rules->bodies[i], &s, &e, 0) != 0) {
            di_error_wrap("rule '%s'", rules->names[i]);
            goto fail;
        }
        g->rule_start[i] = s;
        b.final_rule[e] = (int32_t)i;
    }
    g->rule_names = rules->names; /* take the names */
    rules->names = NULL;
    for (size_t i = 0; i < rules->n; i++) di_gnode_free(rules->bodies[i]);
    free(rules->bodies);
    memset(rules, 0, sizeof *rules);
    if (finish(g, &b) != 0) goto fail;
    free(b.final_rule);
    free(b.edges);
    return g;
fail:
    free(b.final_rule);
    free(b.edges);
    di_grules_free(rules);
    di_grammar_free(g);
    return NULL;
}

void di_grammar_free(DiGrammar *g) {
    if (!g) return;
    if (g->rule_names)
        for (size_t i = 0; i < g->n_rules; i++) free(g->rule_names[i]);
    free(g->rule_names);
    free(g->rule_start);
    free(g->pos);
    free(g->edges);
    free(g->eclose);
    free(g);
}
