/* constraint.c — structured outputs inside the engine: the grammar vocabulary built from the
 * engine's text hooks, the compiled-grammar store, and the per-row mask / accept calls the
 * sampling path makes (constraint.h says who calls what, on which thread). */
#include "engine/constraint.h"

#include "base/error.h"
#include "base/mem.h"
#include "engine/sampler.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Distinct schemas kept compiled (with their mask caches) beyond those in use. */
#define STORE_ENTRIES 64

struct DiConstraints {
    const DiRunner *runner;
    pthread_mutex_t lock;  /* the one-time build of vocab and store (admission or a server thread) */
    DiGrammarVocab *vocab; /* built at the first constrained request, then read-only */
    DiGrammarStore *store; /* thread-safe */
};

DiConstraints *di_constraints_create(const DiRunner *runner) {
    if (!runner) return di_errorf("constraints: NULL runner"), NULL;
    DiConstraints *c = di_calloc(1, sizeof *c, "constraints");
    if (!c) return NULL;
    c->runner = runner;
    if (pthread_mutex_init(&c->lock, NULL) != 0) return free(c), di_errorf("constraints: mutex init failed"), NULL;
    return c;
}

void di_constraints_destroy(DiConstraints *c) {
    if (!c) return;
    di_grammar_store_free(c->store);
    di_grammar_vocab_free(c->vocab);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* Token i's grammar bytes: what the detokeniser outputs; specials (and ids without bytes) are
 * never grammar text.  Two passes over the hooks: sizes, then bytes. */
static int build_vocab(DiConstraints *c, const DiTextHooks *text) {
    if (!text->token_bytes)
        return di_errorf("structured outputs need the model's token bytes (its tokenizer), which this engine was "
                         "not given (di_engine_set_text_hooks)");
    size_t n = (size_t)c->runner->vocab_size, total = 0;
    uint32_t *off = di_calloc(n + 1, sizeof *off, "grammar vocabulary offsets");
    uint8_t *special = di_calloc(n, 1, "grammar vocabulary specials");
    uint8_t *bytes = NULL;
    int rc = -1;
    if (!off || !special) goto done;
    for (int pass = 0; pass < 2; pass++) {
        size_t at = 0;
        for (size_t i = 0; i < n; i++) {
            size_t len = 0;
            const char *b = text->token_bytes(text->ctx, (int32_t)i, &len);
            bool sp = !b || len == 0 || (text->is_special && text->is_special(text->ctx, (int32_t)i));
            special[i] = sp;
            off[i] = (uint32_t)at;
            if (sp) continue;
            if (pass) memcpy(bytes + at, b, len);
            at += len;
        }
        off[n] = (uint32_t)at;
        total = at;
        for (int e = 0; e < c->runner->n_eos_ids; e++) /* EOS ends the output; it is never text */
            if (c->runner->eos_ids[e] >= 0 && (size_t)c->runner->eos_ids[e] < n) special[c->runner->eos_ids[e]] = 1;
        if (!pass && !(bytes = di_calloc(total + 1, 1, "grammar vocabulary bytes"))) goto done;
    }
    c->vocab = di_grammar_vocab_new(n, off, bytes, special, c->runner->eos_ids, (size_t)c->runner->n_eos_ids);
    if (c->vocab && !(c->store = di_grammar_store_new(c->vocab, STORE_ENTRIES))) {
        di_grammar_vocab_free(c->vocab);
        c->vocab = NULL;
    }
    rc = c->vocab ? 0 : -1;
done:
    free(off);
    free(special);
    free(bytes);
    return rc;
}

static const char *type_name(int type) {
    switch (type) {
    case DI_CONSTRAINT_REGEX: return "regex";
    case DI_CONSTRAINT_JSON_SCHEMA: return "json_schema";
    case DI_CONSTRAINT_EBNF: return "ebnf";
    case DI_CONSTRAINT_JSON_OBJECT: return "json_object";
    case DI_CONSTRAINT_DSML_TOOLS: return "dsml_tools";
    default: return "?";
    }
}

/* The vocabulary and store, built once whichever thread comes first. */
static int ensure_vocab(DiConstraints *c, const DiTextHooks *text) {
    pthread_mutex_lock(&c->lock);
    int rc = c->vocab ? 0 : build_vocab(c, text);
    pthread_mutex_unlock(&c->lock);
    return rc == 0 ? 0 : di_error_wrap("structured output");
}

/* The store's kind and source text of a constraint (json_object is the schema of any object). */
static DiGrammarKind source_of(int type, const char *text, const char **src) {
    *src = type == DI_CONSTRAINT_JSON_OBJECT ? "{\"type\": \"object\"}" : text;
    return type == DI_CONSTRAINT_REGEX ? DI_GRAMMAR_REGEX : type == DI_CONSTRAINT_EBNF ? DI_GRAMMAR_EBNF
           : type == DI_CONSTRAINT_DSML_TOOLS ? DI_GRAMMAR_DSML : DI_GRAMMAR_JSON_SCHEMA;
}

int di_constraints_prepare(DiConstraints *c, const DiTextHooks *text, int type, const char *constraint) {
    if (!c || !text) return di_errorf("constraints: NULL argument");
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.constraint_type = type;
    p.constraint = constraint;
    if (di_sampling_params_check(&p, c->runner->vocab_size) != 0) return -1;
    if (type == DI_CONSTRAINT_NONE) return 0;
    if (ensure_vocab(c, text) != 0) return -1;
    const char *src;
    DiGrammarKind kind = source_of(type, constraint, &src);
    DiGrammarRef ref;
    if (di_grammar_store_get(c->store, kind, src, strlen(src), &ref) != 0)
        return di_error_wrap("structured output (%s)", type_name(type));
    return di_grammar_store_release(c->store, ref.grammar); /* stays cached for the admission */
}

int di_constraints_attach(DiConstraints *c, const DiTextHooks *text, DiRequest *req) {
    if (!c || !text || !req) return di_errorf("constraints: NULL argument");
    const DiSamplingParams *p = &req->params;
    if (p->constraint_type == DI_CONSTRAINT_NONE) return 0;
    if (ensure_vocab(c, text) != 0) return -1;
    const char *src;
    DiGrammarKind kind = source_of(p->constraint_type, p->constraint, &src);
    DiGrammarRef ref;
    if (di_grammar_store_get(c->store, kind, src, strlen(src), &ref) != 0)
        return di_error_wrap("structured output (%s)", type_name(p->constraint_type));
    int32_t think_end = p->constraint_after_think ? p->think_end_id : -1;
    req->matcher = di_grammar_matcher_new(ref.grammar, c->vocab, think_end);
    if (!req->matcher || di_grammar_matcher_set_cache(req->matcher, ref.cache) != 0) {
        di_grammar_matcher_free(req->matcher);
        req->matcher = NULL;
        di_grammar_store_release(c->store, ref.grammar);
        return di_error_wrap("structured output (%s)", type_name(p->constraint_type));
    }
    req->grammar = ref.grammar;
    return 0;
}

void di_constraints_detach(DiConstraints *c, DiRequest *req) {
    if (!c || !req || !req->grammar) return;
    di_grammar_matcher_free(req->matcher);
    di_grammar_store_release(c->store, req->grammar);
    req->matcher = NULL;
    req->grammar = NULL;
}

int di_constraint_mask_row(DiGrammarMatcher *m, float *logits, int32_t vocab, uint32_t *scratch) {
    if (!m || !logits || !scratch || vocab <= 0) return di_errorf("constraint mask: NULL argument");
    if (di_grammar_matcher_fill_mask(m, scratch) != 0) return di_error_wrap("constraint mask");
    size_t words = di_constraint_mask_words(vocab);
    for (size_t w = 0; w < words; w++) {
        uint32_t bits = scratch[w];
        if (bits == UINT32_MAX) continue; /* most words of a permissive state: nothing to clear */
        size_t base = w * 32, end = base + 32 < (size_t)vocab ? base + 32 : (size_t)vocab;
        for (size_t t = base; t < end; t++)
            if (!(bits >> (t - base) & 1)) logits[t] = -INFINITY;
    }
    return 0;
}

int di_constraint_accept(DiGrammarMatcher *m, int32_t token) {
    if (!m) return di_errorf("constraint accept: NULL matcher");
    if (di_grammar_matcher_accept_token(m, token) != 0) return di_error_wrap("structured output");
    return 0;
}

int di_constraint_rollback(DiGrammarMatcher *m, size_t k) {
    if (!m) return di_errorf("constraint rollback: NULL matcher");
    return di_grammar_matcher_rollback(m, k);
}
