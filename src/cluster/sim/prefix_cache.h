/* prefix_cache.h — the simulator's model of the shared KV-cache pool (serving.md §4.3, §4.4):
 * an LRU set of prefix blocks named by the trace's chained block ids.  A request hits the
 * longest run of its leading blocks that are all cached (a block id depends on every block
 * before it, so a present block implies its prefix was present when it was stored).  Capacity
 * is in blocks; hits refresh recency; inserting past capacity evicts the least recently used.
 * Open addressing with linear probing and backward-shift deletion keeps it compact and fast. */
#ifndef DI_CLUSTER_SIM_PREFIX_CACHE_H
#define DI_CLUSTER_SIM_PREFIX_CACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct DiPrefixCache DiPrefixCache;

DiPrefixCache *di_prefix_cache_create(size_t capacity_blocks);
void di_prefix_cache_destroy(DiPrefixCache *c);

/* Number of leading blocks of ids[0..n) present (and touch them). */
int di_prefix_cache_match(DiPrefixCache *c, const uint64_t *ids, int n);
/* Insert (or touch) every block of ids[0..n), evicting LRU blocks past capacity. */
int di_prefix_cache_insert(DiPrefixCache *c, const uint64_t *ids, int n);
size_t di_prefix_cache_size(const DiPrefixCache *c);
uint64_t di_prefix_cache_evictions(const DiPrefixCache *c);

#endif
