/* grammar_inline.c — AST rewrites before compilation: inline references to small
 * non-recursive rules, and take the empty word out of repeated nullable items (below).
 *
 * Why: the mask cache (grammar_cache.c) decides a token once per position only while the
 * token stays inside the position's rule frame; a token that runs past the end of the rule
 * must be checked against the live stack every step.  Front-ends write many tiny helper rules
 * (json_char matches one character, the members of an object are a chain of rules), and with
 * them as separate frames almost every multi-character token leaves its frame.  Substituting
 * their bodies keeps tokens inside one frame and the cache effective.  The language does not
 * change; recursive rules stay references (they cannot be expanded), and a node budget bounds
 * the growth a DAG of small rules could otherwise cause. */
#include "engine/grammar/grammar.h"

#include "base/error.h"
#include "base/mem.h"

#include <stdlib.h>
#include <string.h>

#define INLINE_MAX_BODY 512     /* AST nodes of a rule worth inlining */
#define INLINE_BUDGET 200000    /* AST nodes added over the whole grammar */
#define INLINE_MAX_RULES 512    /* the reachability below is quadratic in memory: larger grammars stay as written */

static size_t node_count(const DiGNode *n) {
    size_t c = 1;
    for (size_t i = 0; i < n->n_kids; i++) c += node_count(n->kids[i]);
    return c;
}

static DiGNode *node_copy(const DiGNode *n) {
    DiGNode *c = di_gnode_new(n->kind);
    if (!c) return NULL;
    c->min = n->min;
    c->max = n->max;
    if (n->name && !(c->name = di_strdup(n->name))) goto fail;
    if (n->kind == DI_GN_BYTES) {
        c->bytes = di_malloc(n->n_bytes ? n->n_bytes : 1, "grammar literal");
        if (!c->bytes) goto fail;
        if (n->n_bytes) memcpy(c->bytes, n->bytes, n->n_bytes);
        c->n_bytes = n->n_bytes;
    }
    for (size_t i = 0; i < n->n_ranges; i++)
        if (di_gnode_class_add(c, n->ranges[2 * i], n->ranges[2 * i + 1]) != 0) goto fail;
    for (size_t i = 0; i < n->n_kids; i++)
        if (di_gnode_add(c, node_copy(n->kids[i])) != 0) goto fail;
    return c;
fail:
    di_gnode_free(c);
    return NULL;
}

/* Rules referenced from n, as indices, into refs (a bitmap over rules). */
static void collect_refs(const DiGRules *rules, const DiGNode *n, uint8_t *refs) {
    if (n->kind == DI_GN_RULE) {
        int r = di_grules_find(rules, n->name);
        if (r >= 0) refs[r] = 1;
    }
    for (size_t i = 0; i < n->n_kids; i++) collect_refs(rules, n->kids[i], refs);
}

typedef struct {
    const DiGRules *rules;
    const uint8_t *inlinable;
    size_t budget;
} Ctx;

static int expand(Ctx *c, DiGNode *n, int depth) {
    if (n->kind == DI_GN_RULE) {
        int r = di_grules_find(c->rules, n->name);
        if (r < 0 || !c->inlinable[r] || depth > DI_GRAMMAR_MAX_DEPTH) return 0;
        size_t size = node_count(c->rules->bodies[r]);
        if (size > c->budget) return 0;
        c->budget -= size;
        DiGNode *copy = node_copy(c->rules->bodies[r]);
        if (!copy || expand(c, copy, depth + 1) != 0) return di_gnode_free(copy), -1;
        free(n->name); /* a RULE node owns nothing else */
        *n = *copy;
        free(copy);
        return 0;
    }
    for (size_t i = 0; i < n->n_kids; i++)
        if (expand(c, n->kids[i], depth + 1) != 0) return -1;
    return 0;
}

/* ---- nullable repetitions ----
 * B{m,n} with a nullable B unrolls into n copies that are all reachable without a byte, so every
 * step carries O(n) stacks and closures cost O(n^2) (fuzz_grammar_ebnf timed out on ("a" | ){430}).
 * With B' = B without the empty word, B{m,n} = B'{0,n}, whose copies are entered only by
 * consuming.  B' is built for the usual shapes (empty branches, ?, *, {0,n}); anything else
 * (a nullable sequence, a rule) keeps the plain unrolling. */

static bool ast_nullable(const DiGNode *n) {
    switch (n->kind) {
    case DI_GN_EMPTY: return true;
    case DI_GN_BYTES: return n->n_bytes == 0;
    case DI_GN_CLASS: case DI_GN_RULE: return false;
    case DI_GN_SEQ:
        for (size_t i = 0; i < n->n_kids; i++)
            if (!ast_nullable(n->kids[i])) return false;
        return true;
    case DI_GN_ALT:
        for (size_t i = 0; i < n->n_kids; i++)
            if (ast_nullable(n->kids[i])) return true;
        return false;
    case DI_GN_REPEAT: return n->min == 0 || ast_nullable(n->kids[0]);
    }
    return false;
}

/* B' for a nullable n: *out = the new node, or NULL when B' is empty (B matches only "");
 * returns -1 when the shape is not handled (or on allocation failure: *out stays NULL then
 * too, and the caller keeps the original). */
static int strip_empty(const DiGNode *n, DiGNode **out) {
    *out = NULL;
    if (!ast_nullable(n)) return (*out = node_copy(n)) ? 0 : -1;
    switch (n->kind) {
    case DI_GN_EMPTY: case DI_GN_BYTES: return 0;
    case DI_GN_SEQ: /* all kids nullable: handled when at most one of them can be non-empty */
        if (n->n_kids == 0) return 0;
        if (n->n_kids == 1) return strip_empty(n->kids[0], out);
        return -1;
    case DI_GN_ALT: {
        DiGNode *alt = di_gnode_new(DI_GN_ALT);
        for (size_t i = 0; alt && i < n->n_kids; i++) {
            DiGNode *k;
            if (strip_empty(n->kids[i], &k) != 0) return di_gnode_free(alt), -1;
            if (k && di_gnode_add(alt, k) != 0) return di_gnode_free(alt), -1;
        }
        if (alt && alt->n_kids == 0) di_gnode_free(alt), alt = NULL;
        *out = alt;
        return 0;
    }
    case DI_GN_REPEAT: {
        if (n->max == 0) return 0;
        DiGNode *k;
        if (strip_empty(n->kids[0], &k) != 0) return -1;
        if (!k) return 0;
        *out = di_gnode_repeat(k, 1, n->max); /* K{m,n} nullable: K'{1,n} is its non-empty part */
        return *out ? 0 : -1;
    }
    default: return -1;
    }
}

static int rewrite_repeats(DiGNode *n) {
    for (size_t i = 0; i < n->n_kids; i++)
        if (rewrite_repeats(n->kids[i]) != 0) return -1;
    if (n->kind != DI_GN_REPEAT || !ast_nullable(n->kids[0])) return 0;
    DiGNode *k;
    if (strip_empty(n->kids[0], &k) != 0) return 0; /* unhandled shape: keep it */
    if (!k) k = di_gnode_new(DI_GN_EMPTY); /* B matches only "": so does B{m,n} */
    if (!k) return -1;
    di_gnode_free(n->kids[0]);
    n->kids[0] = k;
    n->min = 0;
    return 0;
}

int di_grules_inline(DiGRules *rules) {
    size_t n = rules->n;
    if (n > INLINE_MAX_RULES) { /* too many to analyse: only the local rewrite */
        for (size_t r = 0; r < n; r++)
            if (rewrite_repeats(rules->bodies[r]) != 0) return -1;
        return 0;
    }
    uint8_t *reach = di_calloc(n * n, 1, "grammar inlining"), *inlinable = di_calloc(n, 1, "grammar inlining");
    size_t *queue = di_malloc((n + 1) * sizeof *queue, "grammar inlining");
    int rc = -1;
    if (!reach || !inlinable || !queue) goto out;
    for (size_t r = 0; r < n; r++) collect_refs(rules, rules->bodies[r], reach + r * n);
    for (size_t r = 0; r < n; r++) { /* breadth-first closure of r's references */
        uint8_t *row = reach + r * n;
        size_t qh = 0, qt = 0;
        for (size_t s = 0; s < n; s++)
            if (row[s]) queue[qt++] = s;
        while (qh < qt) {
            size_t s = queue[qh++];
            for (size_t u = 0; u < n; u++)
                if (reach[s * n + u] && !row[u]) row[u] = 1, queue[qt++] = u;
        }
        inlinable[r] = !row[r] && node_count(rules->bodies[r]) <= INLINE_MAX_BODY;
    }
    Ctx c = {rules, inlinable, INLINE_BUDGET};
    rc = 0;
    for (size_t r = 0; r < n && rc == 0; r++) rc = expand(&c, rules->bodies[r], 0);
    for (size_t r = 0; r < n && rc == 0; r++) rc = rewrite_repeats(rules->bodies[r]);
out:
    free(reach), free(inlinable), free(queue);
    return rc;
}
