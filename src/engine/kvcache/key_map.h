/* key_map.h — the block index: a hash map from a 128-bit block key to a 32-bit slot number
 * (an entry of the RAM pool, a record of the segment store).  Keys are already uniform hashes,
 * so the low 64 bits pick the bucket directly.  Open addressing with linear probing and
 * backward-shift deletion (no tombstones, so a long-lived cache never degrades); the table
 * doubles at a load of 1/2.  Not thread-safe: its owner locks. */
#ifndef DI_ENGINE_KVCACHE_KEY_MAP_H
#define DI_ENGINE_KVCACHE_KEY_MAP_H

#include "engine/kvcache/block_key.h"

#include <stdint.h>

typedef struct {
    DiKvKey key;
    uint32_t value;
    uint32_t used;
} DiKvMapSlot;

typedef struct {
    DiKvMapSlot *slots;
    size_t mask, size;
} DiKvMap;

int di_kv_map_init(DiKvMap *m, size_t expected);
void di_kv_map_free(DiKvMap *m);
/* 1 and *value when present, 0 when absent. */
int di_kv_map_get(const DiKvMap *m, DiKvKey key, uint32_t *value);
/* Insert or overwrite; -1 only when growing runs out of memory. */
int di_kv_map_put(DiKvMap *m, DiKvKey key, uint32_t value);
/* 1 when removed, 0 when absent. */
int di_kv_map_remove(DiKvMap *m, DiKvKey key);

#endif
