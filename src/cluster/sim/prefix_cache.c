/* prefix_cache.c — LRU block set over chained block ids (see prefix_cache.h).
 *
 * Nodes live in one array (capacity + 1; node 0 is the list sentinel) on a doubly linked
 * recency list; the hash table maps an id to its node index (>= 1, so 0 marks an empty slot). */
#include "cluster/sim/prefix_cache.h"

#include "base/error.h"
#include "base/mem.h"

#include <stdlib.h>

typedef struct {
    uint64_t id;
    uint32_t prev, next;
} Node;

struct DiPrefixCache {
    size_t capacity, size, mask;
    Node *nodes;     /* [capacity + 1], node 0 = sentinel: next = most recent, prev = least */
    uint32_t *slots; /* [mask + 1] */
    uint32_t free_top;
    uint64_t evictions;
};

static size_t slot_of(const DiPrefixCache *c, uint64_t id) {
    uint64_t z = id + 0x9e3779b97f4a7c15ULL; /* SplitMix64 finaliser as the hash (rng.h) */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return (size_t)(z ^ (z >> 31)) & c->mask;
}

DiPrefixCache *di_prefix_cache_create(size_t capacity) {
    if (capacity == 0 || capacity > (1u << 30)) {
        di_errorf("prefix cache: capacity must be in 1..2^30 blocks, got %zu", capacity);
        return NULL;
    }
    DiPrefixCache *c = di_calloc(1, sizeof *c, "prefix cache");
    if (!c) return NULL;
    size_t table = 16;
    while (table < 2 * capacity) table *= 2; /* load factor <= 1/2 */
    c->capacity = capacity;
    c->mask = table - 1;
    c->nodes = di_calloc(capacity + 1, sizeof *c->nodes, "prefix cache nodes");
    c->slots = di_calloc(table, sizeof *c->slots, "prefix cache table");
    if (!c->nodes || !c->slots) {
        di_prefix_cache_destroy(c);
        return NULL;
    }
    c->free_top = 1;
    return c;
}

void di_prefix_cache_destroy(DiPrefixCache *c) {
    if (!c) return;
    free(c->nodes);
    free(c->slots);
    free(c);
}

static uint32_t find(const DiPrefixCache *c, uint64_t id) {
    for (size_t s = slot_of(c, id);; s = (s + 1) & c->mask) {
        uint32_t v = c->slots[s];
        if (v == 0) return 0;
        if (c->nodes[v].id == id) return v;
    }
}

static void unlink_node(DiPrefixCache *c, uint32_t n) {
    c->nodes[c->nodes[n].prev].next = c->nodes[n].next;
    c->nodes[c->nodes[n].next].prev = c->nodes[n].prev;
}

static void push_front(DiPrefixCache *c, uint32_t n) {
    c->nodes[n].prev = 0;
    c->nodes[n].next = c->nodes[0].next;
    c->nodes[c->nodes[0].next].prev = n;
    c->nodes[0].next = n;
}

/* Remove id's slot, shifting later entries of its probe run back (no tombstones). */
static void table_remove(DiPrefixCache *c, uint64_t id) {
    size_t s = slot_of(c, id);
    while (c->nodes[c->slots[s]].id != id) s = (s + 1) & c->mask;
    size_t hole = s;
    for (size_t j = (hole + 1) & c->mask; c->slots[j] != 0; j = (j + 1) & c->mask) {
        size_t home = slot_of(c, c->nodes[c->slots[j]].id);
        /* move j into the hole unless its home lies cyclically in (hole, j] */
        int stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!stays) {
            c->slots[hole] = c->slots[j];
            hole = j;
        }
    }
    c->slots[hole] = 0;
}

static void table_put(DiPrefixCache *c, uint64_t id, uint32_t node) {
    size_t s = slot_of(c, id);
    while (c->slots[s] != 0) s = (s + 1) & c->mask;
    c->slots[s] = node; /* node >= 1, so 0 stays "empty" */
}

int di_prefix_cache_match(DiPrefixCache *c, const uint64_t *ids, int n) {
    if (!c || (n > 0 && !ids) || n < 0) return di_errorf("prefix cache: bad arguments");
    int k = 0;
    for (; k < n; k++) {
        uint32_t v = find(c, ids[k]);
        if (!v) break;
        unlink_node(c, v);
        push_front(c, v);
    }
    return k;
}

int di_prefix_cache_insert(DiPrefixCache *c, const uint64_t *ids, int n) {
    if (!c || (n > 0 && !ids) || n < 0) return di_errorf("prefix cache: bad arguments");
    for (int k = 0; k < n; k++) {
        uint32_t v = find(c, ids[k]);
        if (v) {
            unlink_node(c, v);
            push_front(c, v);
            continue;
        }
        if (c->size == c->capacity) { /* evict the least recently used */
            v = c->nodes[0].prev;
            unlink_node(c, v);
            table_remove(c, c->nodes[v].id);
            c->evictions++;
        } else {
            v = c->free_top++;
            c->size++;
        }
        c->nodes[v].id = ids[k];
        table_put(c, ids[k], v);
        push_front(c, v);
    }
    return 0;
}

size_t di_prefix_cache_size(const DiPrefixCache *c) { return c ? c->size : 0; }
uint64_t di_prefix_cache_evictions(const DiPrefixCache *c) { return c ? c->evictions : 0; }
