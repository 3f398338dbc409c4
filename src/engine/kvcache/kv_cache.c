/* kv_cache.c — the L2 + L3 cache behind one lock (see kv_cache.h). */
#include "engine/kvcache/kv_cache.h"

#include "base/error.h"
#include "base/log.h"
#include "base/mem.h"
#include "engine/kvcache/kv_writer.h"
#include "engine/kvcache/ram_pool.h"
#include "engine/kvcache/segment_store.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct DiKvCache {
    pthread_mutex_t mu; /* guards ram and the lookup counters */
    DiKvRamPool ram;
    DiKvSegStore *disk; /* NULL: RAM only */
    DiKvWriter *io;
    int block_tokens;
    DiKvCacheStats st;
};

/* Promote an L3 record into L2 (the I/O thread's prefetch, or a read). */
static void promote(DiKvCache *c, DiKvKey key, const void *data, size_t len) {
    pthread_mutex_lock(&c->mu);
    if (di_kv_ram_put(&c->ram, key, data, len) == 0) c->st.ram_rejected++;
    pthread_mutex_unlock(&c->mu);
}

static void load_one(void *arg, DiKvKey key) {
    DiKvCache *c = arg;
    pthread_mutex_lock(&c->mu);
    int have = di_kv_ram_contains(&c->ram, key);
    pthread_mutex_unlock(&c->mu);
    void *data;
    size_t len;
    if (have || di_kv_seg_get(c->disk, key, &data, &len, NULL) != 1) return;
    promote(c, key, data, len);
    free(data);
}

DiKvCache *di_kv_cache_open(const DiKvCacheOptions *o) {
    if (!o) {
        di_errorf("kv cache: no options");
        return NULL;
    }
    if (o->block_tokens <= 0 || o->block_tokens % 128 != 0) {
        di_errorf("kv cache: block_tokens must be a positive multiple of 128, got %d", o->block_tokens);
        return NULL;
    }
    if (!(o->refresh_s <= 86400)) { /* NaN fails too */
        di_errorf("kv cache: refresh_s must be at most 86400 s, got %g", o->refresh_s);
        return NULL;
    }
    if (o->queue_jobs < 0) {
        di_errorf("kv cache: queue_jobs must be >= 0, got %d", o->queue_jobs);
        return NULL;
    }
    DiKvCache *c = di_calloc(1, sizeof *c, "kv cache");
    if (!c) return NULL;
    if (di_kv_ram_init(&c->ram, o->ram_bytes) != 0) {
        di_error_wrap("kv cache ram_bytes");
        free(c);
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    c->block_tokens = o->block_tokens;
    if (o->dir) {
        DiKvSegOptions so = {.dir = o->dir, .cap_bytes = o->disk_cap_bytes, .ttl_s = o->ttl_s,
                             .segment_bytes = o->segment_bytes, .clock = o->clock, .clock_arg = o->clock_arg};
        c->disk = di_kv_seg_open(&so);
        if (c->disk) {
            c->io = di_kv_writer_start(c->disk, o->queue_jobs ? o->queue_jobs : 1024,
                                       o->queue_bytes ? o->queue_bytes : (size_t)256 << 20,
                                       o->refresh_s == 0 ? 2.0 : o->refresh_s < 0 ? 0.0 : o->refresh_s, load_one, c);
            if (!c->io) {
                di_kv_seg_close(c->disk);
                c->disk = NULL;
            }
        }
        if (!c->disk) DI_WARN("kv cache: disk tier off, caching in RAM only: %s", di_error_message());
    }
    c->st.disk_enabled = c->disk != NULL;
    return c;
}

void di_kv_cache_close(DiKvCache *c) {
    if (!c) return;
    di_kv_writer_stop(c->io);
    di_kv_seg_close(c->disk);
    di_kv_ram_free(&c->ram);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

int di_kv_cache_lookup(DiKvCache *c, const DiKvKey *keys, int n, uint8_t *tiers) {
    if (!c || n < 0 || (n > 0 && !keys)) return di_errorf("kv cache: bad arguments to lookup");
    int k = 0, l3 = 0;
    pthread_mutex_lock(&c->mu);
    for (; k < n; k++) {
        int tier = 2;
        if (di_kv_ram_contains(&c->ram, keys[k]))
            di_kv_ram_touch(&c->ram, keys[k]);
        else if (c->disk && di_kv_seg_contains(c->disk, keys[k]))
            tier = 3, l3++;
        else
            break;
        if (tiers) tiers[k] = (uint8_t)tier;
    }
    c->st.lookups++;
    c->st.lookup_blocks += (uint64_t)n;
    c->st.hit_blocks[0] += (uint64_t)(k - l3);
    c->st.hit_blocks[1] += (uint64_t)l3;
    c->st.hit_tokens[0] += (uint64_t)(k - l3) * (uint64_t)c->block_tokens;
    c->st.hit_tokens[1] += (uint64_t)l3 * (uint64_t)c->block_tokens;
    pthread_mutex_unlock(&c->mu);
    return k;
}

int di_kv_cache_prefetch(DiKvCache *c, const DiKvKey *keys, int n) {
    if (!c || n < 0 || (n > 0 && !keys)) return di_errorf("kv cache: bad arguments to prefetch");
    if (!c->disk) return 0;
    int queued = 0;
    for (int k = 0; k < n; k++) {
        pthread_mutex_lock(&c->mu);
        int in_ram = di_kv_ram_contains(&c->ram, keys[k]);
        pthread_mutex_unlock(&c->mu);
        if (!in_ram && di_kv_seg_contains(c->disk, keys[k])) queued += di_kv_writer_prefetch(c->io, keys[k]) == 1;
    }
    pthread_mutex_lock(&c->mu);
    c->st.prefetches += (uint64_t)queued;
    pthread_mutex_unlock(&c->mu);
    return queued;
}

int di_kv_cache_read(DiKvCache *c, DiKvKey key, void *buf, size_t cap, size_t *len) {
    if (!c || !len || (cap > 0 && !buf)) return di_errorf("kv cache: bad arguments to read");
    const void *p;
    size_t n;
    pthread_mutex_lock(&c->mu);
    int r = di_kv_ram_acquire(&c->ram, key, &p, &n);
    if (r == 1) {
        if (n <= cap) memcpy(buf, p, n);
        di_kv_ram_release(&c->ram, key);
    }
    pthread_mutex_unlock(&c->mu);
    if (r == 0 && c->disk) {
        void *d;
        if (di_kv_seg_get(c->disk, key, &d, &n, NULL) == 1) {
            r = 1;
            if (n <= cap) memcpy(buf, d, n);
            promote(c, key, d, n);
            free(d);
        }
    }
    if (r != 1) return 0;
    *len = n;
    if (n > cap) return di_errorf("kv cache: a block of %zu bytes does not fit the %zu-byte buffer", n, cap);
    return 1;
}

int di_kv_cache_store(DiKvCache *c, DiKvKey key, const void *data, size_t len) {
    if (!c || !data || len == 0) return di_errorf("kv cache: store needs a non-empty block (got %zu bytes)", len);
    pthread_mutex_lock(&c->mu);
    int r = di_kv_ram_put(&c->ram, key, data, len);
    if (r == 0) c->st.ram_rejected++;
    pthread_mutex_unlock(&c->mu);
    if (r < 0) return -1;
    if (c->disk && !di_kv_seg_contains(c->disk, key)) di_kv_writer_submit(c->io, key, DI_KV_KIND_BLOCK, data, len);
    return 0;
}

/* One RAM-pool operation on a key, under the lock. */
static int on_ram(DiKvCache *c, DiKvKey key, int (*op)(DiKvRamPool *p, DiKvKey key)) {
    if (!c) return di_errorf("kv cache: no cache");
    pthread_mutex_lock(&c->mu);
    int rc = op(&c->ram, key);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int di_kv_cache_pin(DiKvCache *c, DiKvKey key) { return on_ram(c, key, di_kv_ram_pin); }
int di_kv_cache_unpin(DiKvCache *c, DiKvKey key) { return on_ram(c, key, di_kv_ram_unpin); }
int di_kv_cache_drop(DiKvCache *c, DiKvKey key) { return on_ram(c, key, di_kv_ram_drop); }

int di_kv_cache_refresh(DiKvCache *c) {
    if (!c) return di_errorf("kv cache: no cache");
    return c->disk ? di_kv_seg_refresh(c->disk) : 0;
}

void di_kv_cache_flush(DiKvCache *c) {
    if (c) di_kv_writer_flush(c->io);
}

void di_kv_cache_stats(DiKvCache *c, DiKvCacheStats *out) {
    if (!c || !out) return;
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    out->ram_blocks = c->ram.map.size;
    out->ram_bytes = c->ram.bytes;
    out->ram_evictions = c->ram.evictions;
    pthread_mutex_unlock(&c->mu);
    if (c->disk) {
        DiKvSegStats s;
        di_kv_seg_stats(c->disk, &s);
        out->disk_records = s.records, out->disk_bytes = s.disk_bytes;
        out->disk_segments_expired = s.segments_expired, out->disk_segments_evicted = s.segments_evicted;
        out->bytes_read = s.bytes_read, out->bytes_written = s.bytes_written;
        out->records_corrupt = s.records_corrupt, out->files_skipped = s.files_skipped;
        out->write_errors = s.write_errors;
        DiKvWriterStats w;
        di_kv_writer_stats(c->io, &w);
        out->writes_queued = w.queued, out->writes_dropped = w.dropped;
    }
}

int di_kv_cache_ram_keys(DiKvCache *c, DiKvKey *out, int max) {
    if (!c) return di_errorf("kv cache: no cache");
    pthread_mutex_lock(&c->mu);
    int n = di_kv_ram_keys(&c->ram, out, max);
    pthread_mutex_unlock(&c->mu);
    return n;
}
