/* kv_cache.h — the tiered KV block cache the engine talks to (serving.md §4.3(c)):
 * L2 a host-RAM pool (ram_pool.h), L3 a segment directory (segment_store.h) written and
 * prefetched by an I/O thread (kv_writer.h).  L1, the engine's own state pages, is not here.
 *
 * Lookup walks a request's block keys from block 0 and stops at the first block no tier holds:
 * the hit is that many leading blocks (a key names its whole prefix, block_key.h).  A block
 * found in L3 is promoted to L2 when read or prefetched.  Storing puts a block in L2 at once and
 * queues it for L3; nothing here waits for a disk.  When the directory cannot be opened or
 * written (disk full, read-only), caching carries on in RAM with one warning.
 * Thread-safe: one mutex guards L2; the segment store and writer lock themselves. */
#ifndef DI_ENGINE_KVCACHE_KV_CACHE_H
#define DI_ENGINE_KVCACHE_KV_CACHE_H

#include "engine/kvcache/block_key.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    size_t ram_bytes;        /* L2 capacity, > 0 */
    int block_tokens;        /* B, for the hit-token counters: > 0, a multiple of 128 */
    const char *dir;         /* L3 directory; NULL: RAM only */
    uint64_t disk_cap_bytes; /* L3 size cap; 0: none */
    uint64_t ttl_s;          /* L3 retention; 0: none */
    uint64_t segment_bytes;  /* 0: the store's default */
    int queue_jobs;          /* I/O queue bound; 0: 1024 */
    size_t queue_bytes;      /* 0: 256 MiB */
    double refresh_s;        /* how often the idle I/O thread looks for other processes' segments;
                                0: 2 s, < 0: never (call di_kv_cache_refresh) */
    double (*clock)(void *arg); /* tests: wall clock for the L3 hour buckets and TTL */
    void *clock_arg;
} DiKvCacheOptions;

/* Counters for /metrics; hit_* count blocks / tokens served from each tier by lookups. */
typedef struct {
    uint64_t lookups, lookup_blocks;
    uint64_t hit_blocks[2], hit_tokens[2]; /* [0] L2 (RAM), [1] L3 (disk) */
    uint64_t ram_blocks, ram_bytes, ram_evictions, ram_rejected;
    uint64_t disk_records, disk_bytes, disk_segments_expired, disk_segments_evicted;
    uint64_t bytes_read, bytes_written; /* L3 */
    uint64_t records_corrupt, files_skipped;
    uint64_t writes_queued, writes_dropped, write_errors, prefetches;
    int disk_enabled; /* 0 when L3 could not be opened */
} DiKvCacheStats;

typedef struct DiKvCache DiKvCache;

DiKvCache *di_kv_cache_open(const DiKvCacheOptions *o);
/* Drain the write queue, seal the segment, free everything. */
void di_kv_cache_close(DiKvCache *c);

/* Number of leading blocks of keys[0, n) that some tier holds; tiers[i] (when not NULL) gets 2
 * for L2 or 3 for L3.  -1 on bad arguments. */
int di_kv_cache_lookup(DiKvCache *c, const DiKvKey *keys, int n, uint8_t *tiers);
/* Queue loads of the L3 blocks among keys[0, n) into L2 (call at admission, so the loads
 * overlap queueing).  Returns how many were queued. */
int di_kv_cache_prefetch(DiKvCache *c, const DiKvKey *keys, int n);
/* Copy a block's payload into buf (cap bytes): 1 with *len, 0 when no tier holds a good copy,
 * -1 on bad arguments or when cap is too small (the error names both sizes). */
int di_kv_cache_read(DiKvCache *c, DiKvKey key, void *buf, size_t cap, size_t *len);
/* Keep a block: into L2 now, queued for L3.  0, or -1 on bad arguments (an empty block). */
int di_kv_cache_store(DiKvCache *c, DiKvKey key, const void *data, size_t len);
/* A pinned block stays in L2 (system prompts).  -1 when the block is not in L2. */
int di_kv_cache_pin(DiKvCache *c, DiKvKey key);
int di_kv_cache_unpin(DiKvCache *c, DiKvKey key);
/* Forget a block of L2 that nobody references or pins (a PD transfer that was aborted: its
 * blocks must not turn the fallback prefill into a partial hit); L3 keeps its copy.  1 dropped,
 * 0 absent or in use. */
int di_kv_cache_drop(DiKvCache *c, DiKvKey key);
/* See what other processes wrote to (or removed from) the directory; apply TTL and cap. */
int di_kv_cache_refresh(DiKvCache *c);
/* Wait for queued writes and loads (tests, shutdown). */
void di_kv_cache_flush(DiKvCache *c);

void di_kv_cache_stats(DiKvCache *c, DiKvCacheStats *out);
/* Up to max keys of the blocks L2 holds, in use and hottest first (what a worker reports to a
 * gateway for cache-aware routing).  The count written, -1 on bad arguments. */
int di_kv_cache_ram_keys(DiKvCache *c, DiKvKey *out, int max);

#endif
