/* ram_pool.h — L2 of the KV cache: block payloads in host RAM, capped in bytes
 * (serving.md §4.3(c),(d)).
 *
 * A block in use by a request is referenced (acquire/release) and is never evicted; a pinned
 * block (a system prompt) is never evicted either.  The others sit on an LRU list, and a put that
 * needs room evicts from its cold end.  As in vLLM, a request gives its blocks back deepest first
 * (di_kv_ram_release_chain), so the tail of a conversation is evicted before the prefix it shares
 * with others.  Not thread-safe: kv_cache.c locks. */
#ifndef DI_ENGINE_KVCACHE_RAM_POOL_H
#define DI_ENGINE_KVCACHE_RAM_POOL_H

#include "engine/kvcache/block_key.h"
#include "engine/kvcache/key_map.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    DiKvKey key;
    void *data;
    size_t len;
    uint32_t refs, pins;
    uint32_t prev, next; /* LRU links (0 = list head), valid when refs == 0 && pins == 0 */
} DiKvRamEntry;

typedef struct {
    size_t cap_bytes, bytes;
    DiKvRamEntry *e; /* [cap_entries], e[0] is the LRU head: next = coldest, prev = hottest */
    uint32_t n_entries, cap_entries, free_head;
    DiKvMap map;
    uint64_t evictions, evicted_bytes;
} DiKvRamPool;

int di_kv_ram_init(DiKvRamPool *p, size_t cap_bytes);
void di_kv_ram_free(DiKvRamPool *p);

/* Store a copy of data under key (an existing block is only touched).  1 stored (or present),
 * 0 not stored because referenced/pinned blocks leave no room, -1 on error (len 0 included). */
int di_kv_ram_put(DiKvRamPool *p, DiKvKey key, const void *data, size_t len);
/* Reference a block (it leaves the LRU list): 1 with its bytes, 0 when absent. */
int di_kv_ram_acquire(DiKvRamPool *p, DiKvKey key, const void **data, size_t *len);
/* Drop one reference; at zero the block becomes the hottest LRU entry.  -1 when not referenced. */
int di_kv_ram_release(DiKvRamPool *p, DiKvKey key);
/* Release keys[n-1] down to keys[0], so deeper blocks are evicted first. */
int di_kv_ram_release_chain(DiKvRamPool *p, const DiKvKey *keys, int n);
/* Pins are counted; a pinned block is never evicted. */
int di_kv_ram_pin(DiKvRamPool *p, DiKvKey key);
int di_kv_ram_unpin(DiKvRamPool *p, DiKvKey key);
/* Remove a block nobody references or pins: 1 removed, 0 absent or in use. */
int di_kv_ram_drop(DiKvRamPool *p, DiKvKey key);
/* Present?  Touches nothing. */
int di_kv_ram_contains(const DiKvRamPool *p, DiKvKey key);
/* Move an unreferenced block to the hot end (a lookup hit). */
void di_kv_ram_touch(DiKvRamPool *p, DiKvKey key);
/* Up to max keys of the blocks held: those in use or pinned first, then the LRU list from its
 * hot end.  The count written, -1 on bad arguments. */
int di_kv_ram_keys(const DiKvRamPool *p, DiKvKey *out, int max);

#endif
