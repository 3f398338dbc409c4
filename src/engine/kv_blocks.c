/* kv_blocks.c — block keys, restore at admission and capture after steps (see kv_blocks.h). */
#include "engine/kv_blocks.h"

#include "base/error.h"
#include "base/mem.h"
#include "engine/kvcache/segment_store.h"

#include <stdlib.h>
#include <string.h>

int di_kv_blocks_wanted(const DiEngineOptions *o) { return o->kv_cache_ram_bytes > 0 || o->kv_cache_dir != NULL; }

/* Options given without the cache they configure are refused, not ignored. */
static int check_options(const DiEngineOptions *o) {
    if (o->kv_block_tokens < 0 || o->kv_block_tokens % 128 != 0)
        return di_errorf("engine options: kv_block_tokens must be 0 (256) or a positive multiple of 128, got %d",
                         o->kv_block_tokens);
    if (!o->kv_cache_dir && (o->kv_cache_disk_bytes || o->kv_cache_ttl_s))
        return di_errorf("engine options: kv_cache_disk_bytes and kv_cache_ttl_s configure the disk tier, "
                         "which needs kv_cache_dir");
    if (!di_kv_blocks_wanted(o) && o->kv_block_tokens)
        return di_errorf("engine options: kv_block_tokens is set but the KV block cache is off "
                         "(set kv_cache_ram_bytes or kv_cache_dir)");
    if (o->kv_cache_replay != DI_KV_REPLAY_EXACT && o->kv_cache_replay != DI_KV_REPLAY_APPROX)
        return di_errorf("engine options: kv_cache_replay must be %d (exact) or %d (approx), got %d", DI_KV_REPLAY_EXACT,
                         DI_KV_REPLAY_APPROX, o->kv_cache_replay);
    if (!di_kv_blocks_wanted(o) && o->kv_cache_replay != DI_KV_REPLAY_EXACT)
        return di_errorf("engine options: kv_cache_replay is set but the KV block cache is off "
                         "(set kv_cache_ram_bytes or kv_cache_dir)");
    if (o->kv_cache_dir && !o->kv_cache_dir[0]) return di_errorf("engine options: kv_cache_dir is empty");
    if (o->kv_cache_ttl_s && o->kv_cache_ttl_s < DI_KV_SEG_BUCKET_S)
        return di_errorf("engine options: kv_cache_ttl_s %llu is finer than the disk tier's retention granularity of "
                         "%d s (one wall-clock hour of records per segment file, dropped whole: a block stays at least "
                         "the TTL and less than the TTL + 1 h); give at least %d",
                         (unsigned long long)o->kv_cache_ttl_s, DI_KV_SEG_BUCKET_S, DI_KV_SEG_BUCKET_S);
    return 0;
}

/* The cache's model fingerprint: the runner's identity bytes, name, vocabulary and block size. */
static DiKvKey fingerprint_of(const DiRunner *r, size_t block_bytes) {
    DiKvKey parts[2] = {di_kv_fingerprint(r->identity, r->identity_len), {0, 0}};
    uint64_t shape[2] = {(uint64_t)r->vocab_size, (uint64_t)block_bytes};
    parts[1] = di_kv_fingerprint(shape, sizeof shape);
    DiKvKey name = di_kv_fingerprint(r->name ? r->name : "", r->name ? strlen(r->name) : 0);
    DiKvKey all[3] = {parts[0], parts[1], name};
    return di_kv_fingerprint(all, sizeof all);
}

int di_kv_blocks_open(DiKvBlocks *kb, const DiEngineOptions *o, const DiRunner *runner) {
    memset(kb, 0, sizeof *kb);
    if (!o || !runner) return di_errorf("kv blocks: NULL options or runner");
    if (check_options(o) != 0) return -1;
    if (!di_kv_blocks_wanted(o)) return 0;
    const DiRunnerOps *ops = runner->ops;
    int b = o->kv_block_tokens ? o->kv_block_tokens : DI_KV_DEFAULT_BLOCK_TOKENS;
    if (!ops->block_bytes || !ops->export_block || !ops->import_block || runner->replay_window <= 0 ||
        !runner->identity || runner->identity_len == 0)
        return di_errorf("engine options: the KV block cache (kv_cache_ram_bytes / kv_cache_dir) needs a runner "
                         "that exports cache blocks and replays its window; %s does not",
                         runner->name ? runner->name : "this runner");
    if (o->kv_cache_replay == DI_KV_REPLAY_EXACT && runner->replay_exact_rows < runner->replay_window)
        return di_errorf("engine options: %s has no exact replay for the KV block cache (kv_cache_replay exact); "
                         "set kv_cache_replay to approx (%d) to accept the official approximate one",
                         runner->name ? runner->name : "this runner", DI_KV_REPLAY_APPROX);
    size_t bytes = ops->block_bytes(runner, b);
    if (bytes == 0) return di_errorf("engine options: %s cannot cache blocks of %d tokens", runner->name, b);
    DiKvCacheOptions co = {
        .ram_bytes = o->kv_cache_ram_bytes ? o->kv_cache_ram_bytes : DI_KV_DEFAULT_RAM_BYTES,
        .block_tokens = b,
        .dir = o->kv_cache_dir,
        .disk_cap_bytes = o->kv_cache_disk_bytes,
        .ttl_s = o->kv_cache_ttl_s,
    };
    kb->buf = di_aligned_calloc(1, bytes, "kv block buffer");
    if (!kb->buf) return -1;
    kb->cache = di_kv_cache_open(&co);
    if (!kb->cache) {
        di_aligned_free(kb->buf);
        kb->buf = NULL;
        return di_error_wrap("opening the KV block cache");
    }
    kb->runner = runner;
    kb->block_tokens = b;
    kb->replay_window = o->kv_cache_replay == DI_KV_REPLAY_APPROX ? runner->replay_window : runner->replay_exact_rows;
    kb->block_bytes = bytes;
    kb->fingerprint = fingerprint_of(runner, bytes);
    return 0;
}

void di_kv_blocks_close(DiKvBlocks *kb) {
    if (!kb) return;
    di_kv_cache_close(kb->cache);
    di_aligned_free(kb->buf);
    memset(kb, 0, sizeof *kb);
}

int di_kv_blocks_set_salt(DiRequest *req, const char *salt) {
    size_t len = salt ? strlen(salt) : 0;
    if (len > DI_KV_SALT_MAX) return di_errorf("request input: cache_salt has %zu bytes, at most %d", len, DI_KV_SALT_MAX);
    if (len == 0) return 0;
    req->cache_salt = di_strdup(salt);
    if (!req->cache_salt) return -1;
    req->cache_salt_len = len;
    return 0;
}

/* Extend the request's key chain to its first n blocks (n <= known tokens / B). */
static int ensure_keys(const DiKvBlocks *kb, DiRequest *req, int n) {
    if (n <= req->n_kv_keys) return 0;
    if (di_grow(&req->kv_keys, &req->cap_kv_keys, (size_t)n, 16, sizeof *req->kv_keys, "kv block keys") != 0) return -1;
    DiKvKeyCtx ctx;
    if (di_kv_key_ctx_init(&ctx, kb->fingerprint, kb->block_tokens, req->cache_salt, req->cache_salt_len) != 0) return -1;
    for (int i = req->n_kv_keys; i < n; i++) {
        const DiKvKey *parent = i > 0 ? &req->kv_keys[i - 1] : NULL;
        if (di_kv_key_block(&ctx, parent, req->tokens + (int64_t)i * kb->block_tokens, kb->block_tokens, NULL, 0,
                            &req->kv_keys[i]) != 0)
            return -1;
        req->n_kv_keys = i + 1;
    }
    return 0;
}

void di_kv_blocks_prefetch(DiKvBlocks *kb, DiRequest *req) {
    if (!kb->cache) return;
    int n = (int)((req->n_prompt - 1) / kb->block_tokens);
    if (n > 0 && ensure_keys(kb, req, n) == 0) di_kv_cache_prefetch(kb->cache, req->kv_keys, n);
}

/* Read and import blocks [0, n) into the request's pages; the count imported (a block evicted
 * since the lookup, or a bad copy, ends the run). */
static int import_blocks(DiKvBlocks *kb, DiRequest *req, int n) {
    const DiRunnerOps *ops = kb->runner->ops;
    for (int i = 0; i < n; i++) {
        size_t len = 0;
        if (di_kv_cache_read(kb->cache, req->kv_keys[i], kb->buf, kb->block_bytes, &len) != 1 || len != kb->block_bytes ||
            ops->import_block(kb->runner, req->pages.pages, req->pages.n, (int64_t)i * kb->block_tokens,
                              kb->block_tokens, kb->buf) != 0)
            return i;
    }
    return n;
}

int64_t di_kv_blocks_restore(DiKvBlocks *kb, DiPagePool *pool, DiRequest *req, int64_t limit, bool *wait) {
    req->replay_start = req->replay_end = 0;
    *wait = false;
    if (!kb->cache || limit < kb->block_tokens) return 0;
    int n = (int)(limit / kb->block_tokens);
    if (ensure_keys(kb, req, n) != 0) return -1;
    int hit = di_kv_cache_lookup(kb->cache, req->kv_keys, n, NULL);
    if ((int64_t)hit * kb->block_tokens <= kb->replay_window) return 0; /* too short to replay from */
    size_t need = kb->runner->ops->pages_for_tokens(kb->runner, (int64_t)hit * kb->block_tokens);
    if (need > di_page_pool_free(pool)) { /* wait for them rather than recompute the hit */
        *wait = true;
        return 0;
    }
    if (di_page_table_reserve(pool, &req->pages, need) != 0) return -1;
    int got = import_blocks(kb, req, hit);
    int64_t h = (int64_t)got * kb->block_tokens;
    if (got > req->kv_blocks_cached) req->kv_blocks_cached = got;
    if (h <= kb->replay_window) return 0;
    req->replay_start = h - kb->replay_window;
    req->replay_end = h;
    return h;
}

void di_kv_blocks_capture(DiKvBlocks *kb, DiRequest *req, int64_t end) {
    if (!kb->cache || req->state_unreliable) return;
    int n = (int)(end / kb->block_tokens);
    if (n <= req->kv_blocks_cached || ensure_keys(kb, req, n) != 0) return;
    const DiRunnerOps *ops = kb->runner->ops;
    for (int i = req->kv_blocks_cached; i < n; i++) {
        if (ops->export_block(kb->runner, req->pages.pages, req->pages.n, (int64_t)i * kb->block_tokens,
                              kb->block_tokens, kb->buf) != 0 ||
            di_kv_cache_store(kb->cache, req->kv_keys[i], kb->buf, kb->block_bytes) != 0)
            return; /* caching is best effort: the request goes on without it */
        req->kv_blocks_cached = i + 1;
        kb->stored++;
    }
}

void di_kv_blocks_metrics(const DiKvBlocks *kb, DiEngineMetrics *m) {
    m->kv_cache_enabled = kb->cache != NULL;
    if (!kb->cache) return;
    DiKvCacheStats st;
    di_kv_cache_stats(kb->cache, &st);
    m->kv_lookups = st.lookups;
    m->kv_hit_tokens_ram = st.hit_tokens[0];
    m->kv_hit_tokens_disk = st.hit_tokens[1];
    m->kv_blocks_stored = kb->stored;
    m->kv_evictions = st.ram_evictions + st.disk_segments_evicted;
    m->kv_bytes_read = st.bytes_read;
    m->kv_bytes_written = st.bytes_written;
    m->kv_records_corrupt = st.records_corrupt;
    m->kv_files_skipped = st.files_skipped;
    m->kv_writes_dropped = st.writes_dropped;
    m->kv_write_errors = st.write_errors;
}
