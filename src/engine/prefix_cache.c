/* prefix_cache.c — finished requests' states kept for prompt caching (see prefix_cache.h).
 *
 * Entries are few (each holds at least one page of tens of KiB) and a lookup happens once per
 * admitted request, so they sit in a plain array searched linearly, with the token comparison
 * as the only real cost. */
#include "engine/prefix_cache.h"

#include "base/error.h"
#include "base/mem.h"

#include <stdlib.h>
#include <string.h>

void di_prefix_cache_init(DiPrefixCache *c, DiPagePool *pool, const DiRunner *runner, size_t max_pages) {
    memset(c, 0, sizeof *c);
    c->pool = pool;
    c->runner = runner;
    c->max_pages = max_pages;
}

/* Drop entry i (its pages back to the pool unless they were taken); the last entry moves into i. */
static void drop(DiPrefixCache *c, int i) {
    DiPrefixEntry *e = &c->entries[i];
    c->pages -= e->pages.n;
    di_page_table_release(c->pool, &e->pages);
    di_page_table_free(&e->pages);
    free(e->tokens);
    c->entries[i] = c->entries[--c->n_entries];
}

void di_prefix_cache_free(DiPrefixCache *c) {
    while (c->n_entries > 0) drop(c, c->n_entries - 1);
    free(c->entries);
    c->entries = NULL;
    c->cap_entries = 0;
}

static int least_recent(const DiPrefixCache *c, int keep) {
    int victim = -1;
    for (int i = 0; i < c->n_entries; i++)
        if (i != keep && (victim < 0 || c->entries[i].last_use < c->entries[victim].last_use)) victim = i;
    return victim;
}

/* Evict the least recent entry other than *keep, fixing *keep if it moved; false if none. */
static bool evict_one(DiPrefixCache *c, int *keep) {
    int victim = least_recent(c, keep ? *keep : -1);
    if (victim < 0) return false;
    int last = c->n_entries - 1;
    drop(c, victim);
    if (keep && *keep == last) *keep = victim;
    c->evicted++;
    return true;
}

bool di_prefix_cache_make_room(DiPrefixCache *c, size_t free_wanted, int *keep) {
    while (di_page_pool_free(c->pool) < free_wanted)
        if (!evict_one(c, keep)) return false;
    return true;
}

void di_prefix_cache_store(DiPrefixCache *c, const int32_t *tokens, int64_t n_tokens, DiPageTable *pages) {
    size_t need = n_tokens > 0 ? c->runner->ops->pages_for_tokens(c->runner, n_tokens) : 0;
    if (c->max_pages == 0 || n_tokens <= 0 || !tokens || need == 0 || need > pages->n || need > c->max_pages) {
        di_page_table_release(c->pool, pages);
        return;
    }
    for (int i = 0; i < c->n_entries; i++)
        if (c->entries[i].n_tokens == n_tokens && memcmp(c->entries[i].tokens, tokens, (size_t)n_tokens * sizeof *tokens) == 0) {
            drop(c, i); /* the same state: keep the fresh copy */
            break;
        }
    while (c->pages + need > c->max_pages) evict_one(c, NULL);
    int32_t *copy = malloc((size_t)n_tokens * sizeof *copy);
    size_t cap = (size_t)c->cap_entries;
    if (di_grow(&c->entries, &cap, (size_t)c->n_entries + 1, 16, sizeof *c->entries, "prefix cache entries") == 0)
        c->cap_entries = (int)cap;
    if (!copy || c->n_entries == c->cap_entries) { /* no memory for the entry: just free the state */
        free(copy);
        di_page_table_release(c->pool, pages);
        return;
    }
    memcpy(copy, tokens, (size_t)n_tokens * sizeof *copy);
    di_page_table_truncate(c->pool, pages, need);
    DiPrefixEntry *e = &c->entries[c->n_entries++];
    *e = (DiPrefixEntry){copy, n_tokens, *pages, ++c->clock};
    *pages = (DiPageTable){0};
    c->pages += need;
    c->stored++;
}

int di_prefix_cache_find(DiPrefixCache *c, const int32_t *tokens, int64_t max_tokens) {
    if (c->max_pages == 0) return -1;
    int best = -1;
    for (int i = 0; i < c->n_entries; i++) {
        const DiPrefixEntry *e = &c->entries[i];
        if (e->n_tokens > max_tokens || (best >= 0 && e->n_tokens <= c->entries[best].n_tokens)) continue;
        if (memcmp(e->tokens, tokens, (size_t)e->n_tokens * sizeof *tokens) == 0) best = i;
    }
    if (best >= 0) c->entries[best].last_use = ++c->clock;
    return best;
}

int64_t di_prefix_cache_take(DiPrefixCache *c, int index, DiPageTable *pages) {
    DiPrefixEntry *e = &c->entries[index];
    int64_t n = e->n_tokens;
    di_page_table_free(pages); /* empty by contract: only its array */
    *pages = e->pages;
    c->pages -= e->pages.n;
    e->pages = (DiPageTable){0};
    c->hits++;
    c->hit_tokens += (uint64_t)n;
    drop(c, index);
    return n;
}

int64_t di_prefix_cache_copy(DiPrefixCache *c, int index, DiPageTable *pages) {
    DiPrefixEntry *e = &c->entries[index];
    size_t page_bytes = di_page_pool_page_bytes(c->pool);
    for (size_t p = 0; p < e->pages.n && p < pages->n; p++) memcpy(pages->pages[p], e->pages.pages[p], page_bytes);
    e->last_use = ++c->clock;
    c->hits++;
    c->hit_tokens += (uint64_t)e->n_tokens;
    return e->n_tokens;
}

/* ---- serialised states ---------------------------------------------------------------------- */

#define STATE_MAGIC 0x53504944u /* "DIPS" */
#define STATE_VERSION 1u

typedef struct {
    uint32_t magic, version;
    uint64_t page_bytes, n_tokens, n_pages;
} StateHeader;

static size_t tokens_bytes(uint64_t n_tokens) { return ((size_t)n_tokens * sizeof(int32_t) + 7) & ~(size_t)7; }

int di_prefix_state_size(const DiPrefixCache *c, int64_t n_tokens, size_t *total, size_t *pages_at) {
    if (!c || !total || !pages_at || n_tokens <= 0) return di_errorf("prefix state: NULL argument or an empty state");
    size_t need = c->runner->ops->pages_for_tokens(c->runner, n_tokens);
    *pages_at = sizeof(StateHeader) + tokens_bytes((uint64_t)n_tokens);
    *total = *pages_at + need * di_page_pool_page_bytes(c->pool);
    return 0;
}

int di_prefix_state_write(const DiPrefixCache *c, const int32_t *tokens, int64_t n_tokens, uint8_t *const *pages,
                          size_t n_pages, void **blob, size_t *len) {
    if (!c || !tokens || !pages || !blob || !len || n_tokens <= 0)
        return di_errorf("prefix state: NULL argument or an empty state");
    size_t need = c->runner->ops->pages_for_tokens(c->runner, n_tokens);
    if (need > n_pages) return di_errorf("prefix state: %lld positions need %zu pages, %zu given", (long long)n_tokens, need, n_pages);
    size_t page_bytes = di_page_pool_page_bytes(c->pool);
    size_t tb = tokens_bytes((uint64_t)n_tokens);
    size_t total = sizeof(StateHeader) + tb + need * page_bytes;
    uint8_t *out = di_calloc(1, total, "prefix state");
    if (!out) return -1;
    StateHeader h = {STATE_MAGIC, STATE_VERSION, page_bytes, (uint64_t)n_tokens, need};
    memcpy(out, &h, sizeof h);
    memcpy(out + sizeof h, tokens, (size_t)n_tokens * sizeof *tokens);
    for (size_t p = 0; p < need; p++) memcpy(out + sizeof h + tb + p * page_bytes, pages[p], page_bytes);
    *blob = out;
    *len = total;
    return 0;
}

/* The header and tokens of a serialised state, checked against this cache's runner and pool. */
static int read_state(const DiPrefixCache *c, const uint8_t *in, size_t len, StateHeader *h) {
    if (len < sizeof *h) return di_errorf("prefix state: %zu bytes is shorter than its header", len);
    memcpy(h, in, sizeof *h);
    if (h->magic != STATE_MAGIC || h->version != STATE_VERSION)
        return di_errorf("prefix state: not a deepinfer state (version %u expected)", STATE_VERSION);
    size_t page_bytes = di_page_pool_page_bytes(c->pool);
    if (h->page_bytes != page_bytes)
        return di_errorf("prefix state: pages of %llu bytes, this engine's are %zu", (unsigned long long)h->page_bytes, page_bytes);
    if (h->n_tokens == 0 || h->n_tokens > (uint64_t)INT32_MAX)
        return di_errorf("prefix state: %llu positions", (unsigned long long)h->n_tokens);
    size_t need = c->runner->ops->pages_for_tokens(c->runner, (int64_t)h->n_tokens);
    if (h->n_pages != need)
        return di_errorf("prefix state: %llu pages for %llu positions, this engine's layout needs %zu",
                         (unsigned long long)h->n_pages, (unsigned long long)h->n_tokens, need);
    if (len != sizeof *h + tokens_bytes(h->n_tokens) + need * page_bytes)
        return di_errorf("prefix state: %zu bytes, its header says %zu", len, sizeof *h + tokens_bytes(h->n_tokens) + need * page_bytes);
    return 0;
}

int di_prefix_cache_import(DiPrefixCache *c, const void *blob, size_t len, int64_t *n_tokens) {
    StateHeader h;
    if (!c || !blob || !n_tokens) return di_errorf("prefix state import: NULL argument");
    if (read_state(c, blob, len, &h) != 0) return -1;
    if (c->max_pages == 0) return di_errorf("prefix state import: this engine's prefix cache is off");
    if (h.n_pages > c->max_pages)
        return di_errorf("prefix state import: %llu pages exceed the prefix cache's %zu", (unsigned long long)h.n_pages, c->max_pages);
    const int32_t *tokens = (const int32_t *)((const uint8_t *)blob + sizeof h);
    int32_t *ids = di_malloc((size_t)h.n_tokens * sizeof *ids, "prefix state tokens"); /* aligned for the store */
    if (!ids) return -1;
    memcpy(ids, tokens, (size_t)h.n_tokens * sizeof *ids);
    for (uint64_t i = 0; i < h.n_tokens; i++)
        if (ids[i] < 0 || ids[i] >= c->runner->vocab_size) {
            di_errorf("prefix state import: token %d at %llu is outside the vocabulary", ids[i], (unsigned long long)i);
            free(ids);
            return -1;
        }
    DiPageTable pages = {0};
    if (!di_prefix_cache_make_room(c, h.n_pages, NULL) || di_page_table_reserve(c->pool, &pages, h.n_pages) != 0) {
        di_page_table_release(c->pool, &pages);
        di_page_table_free(&pages);
        free(ids);
        return di_errorf("prefix state import: no room for %llu state pages (%zu of %zu free, the rest held by "
                         "running requests)", (unsigned long long)h.n_pages, di_page_pool_free(c->pool),
                         di_page_pool_total(c->pool));
    }
    const uint8_t *src = (const uint8_t *)blob + sizeof h + tokens_bytes(h.n_tokens);
    for (size_t p = 0; p < pages.n; p++) memcpy(pages.pages[p], src + p * h.page_bytes, h.page_bytes);
    uint64_t stored = c->stored;
    di_prefix_cache_store(c, ids, (int64_t)h.n_tokens, &pages);
    di_page_table_free(&pages);
    free(ids);
    if (c->stored == stored) return di_errorf("prefix state import: out of memory for the entry");
    *n_tokens = (int64_t)h.n_tokens;
    return 0;
}
