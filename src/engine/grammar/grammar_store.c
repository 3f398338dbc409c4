/* grammar_store.c — compiled grammars cached by (kind, text), each with its mask cache.
 *
 * Why: requests of one API client send the same schema again and again; compiling it once and
 * sharing the per-position mask cache (grammar_cache.c) is what makes masks cheap from the
 * second request on.  Lookups happen at admission (off the step loop).  Entries are
 * reference-counted; when the store holds more than its limit, unreferenced entries are
 * dropped least-recently-used first.  Keys are compared in full (the xxhash is only the
 * bucket), so two texts never share a grammar by collision.  Thread-safe. */
#include "engine/grammar/grammar.h"

#include "base/error.h"
#include "base/mem.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

typedef struct StoreEntry {
    DiGrammarKind kind;
    char *text;
    size_t len;
    uint64_t hash, last_use;
    int refs;
    DiGrammarRef ref;
    struct StoreEntry *next;
} StoreEntry;

struct DiGrammarStore {
    const DiGrammarVocab *vocab;
    size_t max_entries, n;
    uint64_t clock;
    StoreEntry *head;
    pthread_mutex_t lock;
};

DiGrammarStore *di_grammar_store_new(const DiGrammarVocab *v, size_t max_entries) {
    if (!v || max_entries == 0) return di_errorf("grammar store: NULL vocabulary or max_entries = 0"), NULL;
    DiGrammarStore *s = di_calloc(1, sizeof *s, "grammar store");
    if (!s) return NULL;
    s->vocab = v;
    s->max_entries = max_entries;
    if (pthread_mutex_init(&s->lock, NULL) != 0) return free(s), di_errorf("grammar store: mutex init failed"), NULL;
    return s;
}

static void entry_free(StoreEntry *e) {
    di_grammar_mask_cache_free(e->ref.cache);
    di_grammar_free(e->ref.grammar);
    free(e->text);
    free(e);
}

void di_grammar_store_free(DiGrammarStore *s) {
    if (!s) return;
    for (StoreEntry *e = s->head, *nx; e; e = nx) {
        nx = e->next;
        entry_free(e);
    }
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* Drop unreferenced entries, oldest first, while over the limit (lock held). */
static void evict(DiGrammarStore *s) {
    while (s->n > s->max_entries) {
        StoreEntry **victim = NULL;
        for (StoreEntry **p = &s->head; *p; p = &(*p)->next)
            if ((*p)->refs == 0 && (!victim || (*p)->last_use < (*victim)->last_use)) victim = p;
        if (!victim) return; /* everything in use: over the limit until releases */
        StoreEntry *e = *victim;
        *victim = e->next;
        entry_free(e);
        s->n--;
    }
}

static DiGrammar *compile_kind(DiGrammarKind kind, const char *text, size_t len) {
    switch (kind) {
    case DI_GRAMMAR_EBNF: return di_grammar_compile_ebnf(text, len, NULL);
    case DI_GRAMMAR_REGEX: return di_grammar_compile_regex(text, len);
    case DI_GRAMMAR_JSON_SCHEMA: return di_grammar_compile_json_schema(text, len, NULL);
    case DI_GRAMMAR_DSML: return di_grammar_compile_dsml(text, len, NULL);
    }
    return di_errorf("grammar store: unknown grammar kind %d", (int)kind), NULL;
}

int di_grammar_store_get(DiGrammarStore *s, DiGrammarKind kind, const char *text, size_t len, DiGrammarRef *out) {
    if (!s || !text || !out) return di_errorf("grammar store: NULL argument");
    uint64_t h = XXH3_64bits_withSeed(text, len, (uint64_t)kind);
    pthread_mutex_lock(&s->lock);
    for (StoreEntry *e = s->head; e; e = e->next)
        if (e->hash == h && e->kind == kind && e->len == len && memcmp(e->text, text, len) == 0) {
            e->refs++;
            e->last_use = ++s->clock;
            *out = e->ref;
            pthread_mutex_unlock(&s->lock);
            return 0;
        }
    pthread_mutex_unlock(&s->lock);
    /* compile outside the lock: a big schema must not stall other admissions */
    StoreEntry *e = di_calloc(1, sizeof *e, "grammar store");
    if (!e) return -1;
    e->kind = kind;
    e->len = len;
    e->hash = h;
    e->refs = 1;
    e->text = di_malloc(len + 1, "grammar store");
    e->ref.grammar = e->text ? compile_kind(kind, text, len) : NULL;
    e->ref.cache = e->ref.grammar ? di_grammar_mask_cache_new(e->ref.grammar, s->vocab) : NULL;
    if (!e->ref.cache) {
        entry_free(e);
        return -1;
    }
    memcpy(e->text, text, len);
    e->ref.grammar->hash = h;
    pthread_mutex_lock(&s->lock);
    for (StoreEntry *o = s->head; o; o = o->next) /* another thread compiled it meanwhile */
        if (o->hash == h && o->kind == kind && o->len == len && memcmp(o->text, text, len) == 0) {
            o->refs++;
            o->last_use = ++s->clock;
            *out = o->ref;
            pthread_mutex_unlock(&s->lock);
            entry_free(e);
            return 0;
        }
    e->last_use = ++s->clock;
    e->next = s->head;
    s->head = e;
    s->n++;
    *out = e->ref;
    evict(s);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

int di_grammar_store_release(DiGrammarStore *s, const DiGrammar *g) {
    if (!s || !g) return di_errorf("grammar store: NULL argument");
    pthread_mutex_lock(&s->lock);
    for (StoreEntry *e = s->head; e; e = e->next)
        if (e->ref.grammar == g && e->refs > 0) {
            e->refs--;
            evict(s);
            pthread_mutex_unlock(&s->lock);
            return 0;
        }
    pthread_mutex_unlock(&s->lock);
    return di_errorf("grammar store: release of a grammar that is not held");
}

size_t di_grammar_store_size(DiGrammarStore *s) {
    if (!s) return 0;
    pthread_mutex_lock(&s->lock);
    size_t n = s->n;
    pthread_mutex_unlock(&s->lock);
    return n;
}
