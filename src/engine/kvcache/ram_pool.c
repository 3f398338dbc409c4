/* ram_pool.c — byte-capped LRU of block payloads (see ram_pool.h).
 *
 * Entries live in one array (index 0 is the list head, so 0 also means "no entry"); freed
 * entries chain through `next` from free_head.  The map gives key -> entry index. */
#include "engine/kvcache/ram_pool.h"

#include "base/error.h"
#include "base/mem.h"

#include <stdlib.h>
#include <string.h>

int di_kv_ram_init(DiKvRamPool *p, size_t cap_bytes) {
    if (!p) return di_errorf("kv ram pool: no pool");
    if (cap_bytes == 0) return di_errorf("kv ram pool: capacity must be > 0 bytes");
    memset(p, 0, sizeof *p);
    p->cap_bytes = cap_bytes;
    p->cap_entries = 64;
    p->e = di_calloc(p->cap_entries, sizeof *p->e, "kv ram pool entries");
    if (!p->e || di_kv_map_init(&p->map, 64) != 0) {
        free(p->e);
        return -1;
    }
    p->n_entries = 1; /* e[0] is the head */
    return 0;
}

void di_kv_ram_free(DiKvRamPool *p) {
    if (!p || !p->e) return;
    for (uint32_t i = 1; i < p->n_entries; i++) free(p->e[i].data);
    free(p->e);
    di_kv_map_free(&p->map);
    memset(p, 0, sizeof *p);
}

static int on_lru(const DiKvRamEntry *e) { return e->refs == 0 && e->pins == 0; }

static void lru_unlink(DiKvRamPool *p, uint32_t i) {
    p->e[p->e[i].prev].next = p->e[i].next;
    p->e[p->e[i].next].prev = p->e[i].prev;
}

static void lru_push_hot(DiKvRamPool *p, uint32_t i) {
    uint32_t hot = p->e[0].prev;
    p->e[i].prev = hot;
    p->e[i].next = 0;
    p->e[hot].next = i;
    p->e[0].prev = i;
}

static void drop_entry(DiKvRamPool *p, uint32_t i) {
    lru_unlink(p, i);
    di_kv_map_remove(&p->map, p->e[i].key);
    p->bytes -= p->e[i].len;
    free(p->e[i].data);
    memset(&p->e[i], 0, sizeof p->e[i]);
    p->e[i].next = p->free_head;
    p->free_head = i;
}

static uint32_t find(const DiKvRamPool *p, DiKvKey key) {
    uint32_t i = 0;
    return di_kv_map_get(&p->map, key, &i) ? i : 0;
}

static uint32_t new_entry(DiKvRamPool *p) {
    if (p->free_head) {
        uint32_t i = p->free_head;
        p->free_head = p->e[i].next;
        return i;
    }
    size_t cap = p->cap_entries;
    if (di_grow(&p->e, &cap, (size_t)p->n_entries + 1, 64, sizeof *p->e, "kv ram pool entries") != 0) return 0;
    p->cap_entries = (uint32_t)cap;
    return p->n_entries++;
}

int di_kv_ram_put(DiKvRamPool *p, DiKvKey key, const void *data, size_t len) {
    if (!p || !p->e || !data) return di_errorf("kv ram pool: bad arguments to put");
    /* the cap counts payload bytes, so empty blocks would fill memory without limit */
    if (len == 0) return di_errorf("kv ram pool: an empty block cannot be cached");
    uint32_t i = find(p, key);
    if (i) {
        di_kv_ram_touch(p, key);
        return 1;
    }
    if (len > p->cap_bytes) return 0;
    while (p->bytes + len > p->cap_bytes && p->e[0].next != 0) { /* evict from the cold end */
        p->evictions++;
        p->evicted_bytes += p->e[p->e[0].next].len;
        drop_entry(p, p->e[0].next);
    }
    if (p->bytes + len > p->cap_bytes) return 0; /* everything left is referenced or pinned */
    void *copy = di_malloc(len, "kv ram pool block");
    if (!copy) return -1;
    memcpy(copy, data, len);
    if (!(i = new_entry(p))) {
        free(copy);
        return -1;
    }
    if (di_kv_map_put(&p->map, key, i) != 0) {
        p->e[i].next = p->free_head;
        p->free_head = i;
        free(copy);
        return -1;
    }
    p->e[i] = (DiKvRamEntry){.key = key, .data = copy, .len = len};
    p->bytes += len;
    lru_push_hot(p, i);
    return 1;
}

int di_kv_ram_acquire(DiKvRamPool *p, DiKvKey key, const void **data, size_t *len) {
    if (!p || !p->e) return di_errorf("kv ram pool: bad arguments to acquire");
    uint32_t i = find(p, key);
    if (!i) return 0;
    if (on_lru(&p->e[i])) lru_unlink(p, i);
    p->e[i].refs++;
    if (data) *data = p->e[i].data;
    if (len) *len = p->e[i].len;
    return 1;
}

int di_kv_ram_release(DiKvRamPool *p, DiKvKey key) {
    uint32_t i = p && p->e ? find(p, key) : 0;
    if (!i || p->e[i].refs == 0) return di_errorf("kv ram pool: release of a block that is not referenced");
    if (--p->e[i].refs == 0 && p->e[i].pins == 0) lru_push_hot(p, i);
    return 0;
}

int di_kv_ram_release_chain(DiKvRamPool *p, const DiKvKey *keys, int n) {
    if (n < 0 || (n > 0 && !keys)) return di_errorf("kv ram pool: bad chain");
    int rc = 0;
    for (int k = n - 1; k >= 0; k--)
        if (di_kv_ram_release(p, keys[k]) != 0) rc = -1;
    return rc;
}

int di_kv_ram_pin(DiKvRamPool *p, DiKvKey key) {
    uint32_t i = p && p->e ? find(p, key) : 0;
    if (!i) return di_errorf("kv ram pool: pin of an absent block");
    if (on_lru(&p->e[i])) lru_unlink(p, i);
    p->e[i].pins++;
    return 0;
}

int di_kv_ram_unpin(DiKvRamPool *p, DiKvKey key) {
    uint32_t i = p && p->e ? find(p, key) : 0;
    if (!i || p->e[i].pins == 0) return di_errorf("kv ram pool: unpin of a block that is not pinned");
    if (--p->e[i].pins == 0 && p->e[i].refs == 0) lru_push_hot(p, i);
    return 0;
}

int di_kv_ram_drop(DiKvRamPool *p, DiKvKey key) {
    uint32_t i = p && p->e ? find(p, key) : 0;
    if (!i || !on_lru(&p->e[i])) return 0;
    drop_entry(p, i);
    return 1;
}

int di_kv_ram_contains(const DiKvRamPool *p, DiKvKey key) { return p && p->e && find(p, key) != 0; }

void di_kv_ram_touch(DiKvRamPool *p, DiKvKey key) {
    uint32_t i = p && p->e ? find(p, key) : 0;
    if (!i || !on_lru(&p->e[i])) return;
    lru_unlink(p, i);
    lru_push_hot(p, i);
}

int di_kv_ram_keys(const DiKvRamPool *p, DiKvKey *out, int max) {
    if (!p || !p->e || (!out && max > 0) || max < 0) return di_errorf("kv ram pool: bad arguments to keys");
    int n = 0;
    for (uint32_t i = 1; i < p->n_entries && n < max; i++)
        if (p->e[i].data && !on_lru(&p->e[i])) out[n++] = p->e[i].key;
    /* the LRU list: e[0].prev is the hottest; a bounded walk (at most every entry once) */
    for (uint32_t i = p->e[0].prev, k = 0; i != 0 && n < max && k < p->n_entries; i = p->e[i].prev, k++) out[n++] = p->e[i].key;
    return n;
}
