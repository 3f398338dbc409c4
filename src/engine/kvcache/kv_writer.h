/* kv_writer.h — the KV cache's I/O thread: writes blocks to the segment store and loads
 * prefetched blocks, so the engine's step loop never waits on a disk (serving.md §4.3(c)).
 *
 * The queue is bounded in jobs and in payload bytes.  Submitting never blocks: when the queue is
 * full the job is dropped and counted (a cache may always forget), which keeps a slow or hung
 * file system from stalling the step loop or growing memory without bound. */
#ifndef DI_ENGINE_KVCACHE_KV_WRITER_H
#define DI_ENGINE_KVCACHE_KV_WRITER_H

#include "engine/kvcache/block_key.h"
#include "engine/kvcache/segment_store.h"

#include <stddef.h>
#include <stdint.h>

typedef struct DiKvWriter DiKvWriter;

/* load(arg, key) runs on the I/O thread for each prefetch job (may be NULL: no prefetch). */
typedef void (*DiKvLoadFn)(void *arg, DiKvKey key);

/* max_jobs > 0 and max_bytes > 0 bound the queue.  refresh_s > 0: when idle, the thread calls
 * di_kv_seg_refresh that often, so blocks other processes write show up (0: never).  NULL with
 * the cause on bad arguments. */
DiKvWriter *di_kv_writer_start(DiKvSegStore *store, int max_jobs, size_t max_bytes, double refresh_s, DiKvLoadFn load,
                               void *load_arg);
/* Write what is queued, seal the segment, join the thread. */
void di_kv_writer_stop(DiKvWriter *w);

/* Queue a copy of a record: 1 queued, 0 dropped (queue full), -1 on bad arguments. */
int di_kv_writer_submit(DiKvWriter *w, DiKvKey key, int kind, const void *data, size_t len);
/* Queue a load of key: 1 queued, 0 dropped, -1 on bad arguments or when no loader is set. */
int di_kv_writer_prefetch(DiKvWriter *w, DiKvKey key);
/* Wait until every job queued so far is done (tests, shutdown). */
void di_kv_writer_flush(DiKvWriter *w);

typedef struct {
    uint64_t queued, dropped, written, failed, loads, refreshes;
} DiKvWriterStats;
void di_kv_writer_stats(DiKvWriter *w, DiKvWriterStats *out);

#endif
