/* kv_blocks.h — the engine's side of the KV block cache (serving.md §4.3): block keys per
 * request, the longest-prefix restore at admission and the capture of completed blocks.
 *
 * The tiers themselves (host-RAM pool, segment directory, I/O thread) are kvcache/kv_cache.h; the
 * rows of a block are the runner's (runner.h, export_block/import_block).  A request's key chain
 * (block_key.h: model fingerprint, its tenant salt in block 0, its tokens) is computed once, as
 * far as needed, and kept with the request.
 *
 * Restore at admission: the longest run of leading blocks some tier holds, leaving at least one
 * position to compute, is imported into the request's pages; a hit of H positions is adopted only
 * when H > R, the positions replayed, and the request then prefills from H - R with the replay
 * range [H - R, H) (engine-features.md §2.4).  R is the runner's replay_exact_rows by default,
 * which makes the request's outputs a cold prefill's bit for bit, or its window W with
 * kv_cache_replay approx (the official design: the replay's state is an approximation).  Capture after each processed step: every
 * block all of whose positions that step (or an earlier one) computed, and that is not already
 * known to be cached, is exported and stored; the store copies it into RAM and queues the disk
 * write, so the step loop never waits for a disk. */
#ifndef DI_ENGINE_KV_BLOCKS_H
#define DI_ENGINE_KV_BLOCKS_H

#include "deepinfer.h"
#include "engine/kvcache/kv_cache.h"
#include "engine/pages.h"
#include "engine/request.h"
#include "engine/runner.h"

#define DI_KV_DEFAULT_BLOCK_TOKENS 256
#define DI_KV_DEFAULT_RAM_BYTES ((size_t)1 << 30)

typedef struct {
    DiKvCache *cache;   /* NULL: the block cache is off */
    const DiRunner *runner;
    DiKvKey fingerprint;
    int block_tokens;   /* B */
    int replay_window;  /* positions replayed before a hit: the runner's exact rows, or W (approx) */
    size_t block_bytes; /* one block's rows */
    uint8_t *buf;       /* one block (main thread only) */
    uint64_t stored;    /* blocks captured */
} DiKvBlocks;

/* Whether the options ask for the block cache. */
int di_kv_blocks_wanted(const DiEngineOptions *o);
/* Check the options and, when they ask for it, open the cache (else kb->cache stays NULL).
 * Errors name the option and, for a runner without block export, the runner. */
int di_kv_blocks_open(DiKvBlocks *kb, const DiEngineOptions *o, const DiRunner *runner);
/* Drain queued writes and close. */
void di_kv_blocks_close(DiKvBlocks *kb);

/* Keep the request's tenant salt (NULL or "": none); errors name an oversized salt. */
int di_kv_blocks_set_salt(DiRequest *req, const char *salt);
/* At arrival: queue loads of the request's disk-tier blocks into RAM, to overlap its queueing. */
void di_kv_blocks_prefetch(DiKvBlocks *kb, DiRequest *req);
/* At admission (pages empty): restore the longest cached prefix of tokens[0, limit) into the
 * request's pages and set its replay range.  Returns the positions restored (0: no hit adopted;
 * the pages may then hold garbage that the prefill overwrites), or -1 on allocation failure.
 * *wait: a hit was found but the pool lacks the free pages to restore it (the request waits,
 * as it would for the pages of a recompute). */
int64_t di_kv_blocks_restore(DiKvBlocks *kb, DiPagePool *pool, DiRequest *req, int64_t limit, bool *wait);
/* After a processed step computed the request's positions [.., end): store its completed blocks. */
void di_kv_blocks_capture(DiKvBlocks *kb, DiRequest *req, int64_t end);

/* The counters of DiEngineMetrics' kv_* fields. */
void di_kv_blocks_metrics(const DiKvBlocks *kb, DiEngineMetrics *m);

#endif
