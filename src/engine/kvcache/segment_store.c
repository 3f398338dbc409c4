/* segment_store.c — append-only segment files with verified reads (see segment_store.h).
 *
 * In memory: a table of segments (index stable for the store's life; a dropped segment keeps
 * its slot with state SEG_GONE) and a table of records, found by key through a DiKvMap.  A key
 * stored twice keeps the record of the newer segment.  All integers on disk are little-endian. */
#include "engine/kvcache/segment_store.h"

#include "base/error.h"
#include "base/file.h"
#include "base/log.h"
#include "base/mem.h"
#include "engine/kvcache/key_map.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <isa-l/crc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define FILE_MAGIC "DIKVSEG1"
#define REC_MAGIC 0x524b4944u /* "DIKR" */
#define TRAILER_MAGIC 0x544b4944u /* "DIKT" */
#define FORMAT_VERSION 1
#define REC_HDR 64
#define FOOT_ENTRY 40
#define TRAILER 32

enum { SEG_SEALED, SEG_OPEN_OTHER, SEG_MINE, SEG_BAD, SEG_GONE };

typedef struct {
    char *name;     /* file name in the directory */
    uint64_t hour;  /* hour bucket from the name */
    uint64_t size;  /* bytes known */
    int fd;         /* read fd (the write fd for SEG_MINE), -1 when closed */
    int state;
    bool seen;      /* in the latest directory listing */
    bool orphan;    /* an .open whose writer is gone: its torn tail counts as damage */
    uint64_t scan_off, last_seq; /* how far an .open file has been scanned */
} Seg;

typedef struct {
    DiKvKey key;
    uint32_t seg;
    uint64_t off, len, seq;
    bool used;
} Rec;

struct DiKvSegStore {
    pthread_mutex_t mu;
    char *dir;
    DiKvSegOptions o;
    Seg *segs;
    uint32_t n_segs, cap_segs;
    Rec *recs;
    uint32_t n_recs, cap_recs, free_rec;
    DiKvMap map;
    DiKvMap names; /* hash of a file name -> its segment: a refresh is linear in the listing */
    /* this process's open segment; its I/O runs outside the lock, by one thread at a time */
    int mine;             /* index into segs, -1 when none */
    uint64_t mine_off, mine_seq, writer_id;
    uint32_t mine_n, seg_counter;
    double writes_refused_until;
    DiKvSegStats st;
};

uint32_t di_kv_crc32c(uint32_t crc, const void *data, size_t len) {
    const unsigned char *p = data;
    uint32_t s = ~crc;
    while (len > 0) { /* ISA-L takes an int length */
        int n = len > (1u << 30) ? (1 << 30) : (int)len;
        s = crc32_iscsi((unsigned char *)p, n, s);
        p += n, len -= (size_t)n;
    }
    return ~s;
}

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static uint64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static uint64_t align_up(uint64_t v) { return (v + DI_KV_SEG_ALIGN - 1) / DI_KV_SEG_ALIGN * DI_KV_SEG_ALIGN; }

static double now_s(const DiKvSegStore *s) {
    if (s->o.clock) return s->o.clock(s->o.clock_arg);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int pread_all(int fd, void *buf, size_t n, uint64_t off) {
    uint8_t *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r, n -= (size_t)r, off += (uint64_t)r;
    }
    return 0;
}

/* ---- record index ---- */

static void rec_drop(DiKvSegStore *s, uint32_t r) {
    uint32_t cur;
    if (di_kv_map_get(&s->map, s->recs[r].key, &cur) && cur == r) di_kv_map_remove(&s->map, s->recs[r].key);
    s->recs[r].used = false;
    s->recs[r].seg = s->free_rec;
    s->free_rec = r + 1; /* 0 = empty free list */
    s->st.records--;
}

/* Index a verified record; an older segment's record of the same key gives way. */
static int rec_add(DiKvSegStore *s, DiKvKey key, uint32_t seg, uint64_t off, uint64_t len, uint64_t seq) {
    uint32_t old;
    if (di_kv_map_get(&s->map, key, &old)) {
        if (s->segs[s->recs[old].seg].hour > s->segs[seg].hour) return 0;
        rec_drop(s, old);
    }
    uint32_t r;
    if (s->free_rec) {
        r = s->free_rec - 1;
        s->free_rec = s->recs[r].seg;
    } else {
        size_t cap = s->cap_recs;
        if (di_grow(&s->recs, &cap, (size_t)s->n_recs + 1, 1024, sizeof *s->recs, "kv segment records") != 0) return -1;
        s->cap_recs = (uint32_t)cap;
        r = s->n_recs++;
    }
    if (di_kv_map_put(&s->map, key, r) != 0) {
        s->recs[r].used = false;
        s->recs[r].seg = s->free_rec;
        s->free_rec = r + 1;
        return -1;
    }
    s->recs[r] = (Rec){key, seg, off, len, seq, true};
    s->st.records++;
    return 0;
}

static DiKvKey name_key(const char *name) {
    XXH128_hash_t h = XXH3_128bits(name, strlen(name));
    return (DiKvKey){h.low64, h.high64};
}

/* Rename a segment in the table (NULL: forget its name, so the file is looked at afresh). */
static void set_name(DiKvSegStore *s, uint32_t si, char *name) {
    Seg *g = &s->segs[si];
    if (g->name) di_kv_map_remove(&s->names, name_key(g->name));
    free(g->name);
    g->name = name;
    if (name && di_kv_map_put(&s->names, name_key(name), si) != 0) DI_WARN("kv cache: %s", di_error_message());
}

/* ---- reading a segment ---- */

typedef enum { CHK_OK, CHK_NOT_RECORD, CHK_BAD, CHK_TORN } Check;

/* Verify the record at off (of a file of `size` bytes); on CHK_OK fill key/len/seq/kind and,
 * when payload is non-NULL, read the payload into it (it must hold len bytes). */
static Check check_record(int fd, uint64_t off, uint64_t size, DiKvKey *key, uint64_t *len, uint64_t *seq,
                          int *kind, void *payload, uint64_t payload_len) {
    uint8_t h[REC_HDR];
    if (off + REC_HDR > size) {
        size_t have = (size_t)(size - off);
        uint8_t m[4];
        put32(m, REC_MAGIC);
        if (have == 0 || pread_all(fd, h, have, off) != 0) return CHK_NOT_RECORD;
        return memcmp(h, m, have < 4 ? have : 4) == 0 ? CHK_TORN : CHK_NOT_RECORD;
    }
    if (pread_all(fd, h, REC_HDR, off) != 0) return CHK_TORN;
    if (get32(h) != REC_MAGIC) return CHK_NOT_RECORD;
    uint64_t n = get64(h + 24);
    if ((get32(h + 4) & 0xffff) != FORMAT_VERSION || n > DI_KV_SEG_MAX_RECORD) return CHK_BAD;
    if (off + DI_KV_SEG_ALIGN + n > size) return CHK_TORN;
    if (payload && n != payload_len) return CHK_BAD; /* the index and the header disagree */
    uint8_t *buf = payload;
    bool own = false;
    if (!buf) {
        buf = malloc(n ? n : 1);
        if (!buf) return CHK_TORN;
        own = true;
    }
    Check c = CHK_OK;
    if (pread_all(fd, buf, n, off + DI_KV_SEG_ALIGN) != 0) c = CHK_TORN;
    if (c == CHK_OK) {
        uint32_t want = get32(h + 40);
        put32(h + 40, 0);
        uint32_t crc = di_kv_crc32c(di_kv_crc32c(0, h, REC_HDR), buf, n);
        if (crc != want) c = CHK_BAD;
    }
    if (own) free(buf);
    if (c != CHK_OK) return c;
    *key = (DiKvKey){get64(h + 8), get64(h + 16)};
    *len = n;
    *seq = get64(h + 32);
    if (kind) *kind = (int)(get32(h + 4) >> 16);
    return CHK_OK;
}

/* Scan records from seg->scan_off.  For a live writer's file an incomplete tail just waits.
 * A lost record is counted once: by the gap in seq numbers when a good record follows, else by
 * the damaged headers seen (a page with no record magic is padding or payload, not damage). */
static void scan_segment(DiKvSegStore *s, uint32_t si) {
    Seg *g = &s->segs[si];
    bool live = g->state == SEG_OPEN_OTHER && !g->orphan;
    uint64_t off = g->scan_off < DI_KV_SEG_ALIGN ? DI_KV_SEG_ALIGN : g->scan_off, damaged = 0;
    uint64_t corrupt_before = s->st.records_corrupt;
    while (off < g->size) {
        DiKvKey key;
        uint64_t len, seq;
        Check c = check_record(g->fd, off, g->size, &key, &len, &seq, NULL, NULL, 0);
        if (c == CHK_OK && seq > g->last_seq) {
            uint64_t gap = seq - g->last_seq - 1;
            s->st.records_corrupt += gap > damaged ? gap : damaged;
            damaged = 0;
            g->last_seq = seq;
            if (rec_add(s, key, si, off, len, seq) != 0) break;
            off = align_up(off + DI_KV_SEG_ALIGN + len);
            continue;
        }
        if (c == CHK_TORN && live) break; /* the writer is still writing it */
        if (c != CHK_NOT_RECORD) damaged++;
        /* resynchronise at the next page: a "torn" record may be a damaged length in the
         * middle of the file, with good records after it */
        off += DI_KV_SEG_ALIGN;
    }
    s->st.records_corrupt += damaged;
    g->scan_off = off;
    /* each stretch of damage is scanned (so logged) once: scan_off moves past it */
    if (s->st.records_corrupt > corrupt_before)
        DI_WARN("kv cache: %s/%s: skipped %llu torn or damaged records", s->dir, g->name,
                (unsigned long long)(s->st.records_corrupt - corrupt_before));
}

/* Index a sealed file from its footer; false when the footer does not check. */
static bool load_footer(DiKvSegStore *s, uint32_t si) {
    Seg *g = &s->segs[si];
    uint8_t t[TRAILER];
    if (g->size < DI_KV_SEG_ALIGN + TRAILER || pread_all(g->fd, t, TRAILER, g->size - TRAILER) != 0) return false;
    uint64_t count = get64(t + 8), foot = get64(t + 16);
    if (get32(t) != TRAILER_MAGIC || (get32(t + 4) & 0xffff) != FORMAT_VERSION || foot % DI_KV_SEG_ALIGN ||
        foot < DI_KV_SEG_ALIGN || count > (g->size - foot) / FOOT_ENTRY || foot + count * FOOT_ENTRY + TRAILER != g->size)
        return false;
    size_t bytes = (size_t)(count * FOOT_ENTRY);
    uint8_t *e = malloc(bytes ? bytes : 1);
    if (!e) return false;
    bool ok = pread_all(g->fd, e, bytes, foot) == 0 &&
              di_kv_crc32c(di_kv_crc32c(0, e, bytes), t, 24) == get32(t + 24);
    for (uint64_t i = 0; ok && i < count; i++) {
        const uint8_t *p = e + i * FOOT_ENTRY;
        uint64_t off = get64(p + 16), len = get64(p + 24);
        ok = off % DI_KV_SEG_ALIGN == 0 && off >= DI_KV_SEG_ALIGN && len <= DI_KV_SEG_MAX_RECORD &&
             off + DI_KV_SEG_ALIGN + len <= foot;
    }
    for (uint64_t i = 0; ok && i < count; i++) {
        const uint8_t *p = e + i * FOOT_ENTRY;
        if (rec_add(s, (DiKvKey){get64(p), get64(p + 8)}, si, get64(p + 16), get64(p + 24), get64(p + 32)) != 0)
            break;
    }
    free(e);
    return ok;
}

/* Parse "kv-<hour>-<writer>-<n>.open|.kvs"; 1 sealed, 0 open, -1 not a segment name. */
static int parse_name(const char *name, uint64_t *hour, uint64_t *writer) {
    unsigned long long h, w;
    unsigned n;
    int end = 0;
    if (sscanf(name, "kv-%10llu-%16llx-%6u%n", &h, &w, &n, &end) != 3 || end != 37) return -1;
    *hour = h, *writer = w;
    if (strcmp(name + end, ".kvs") == 0) return 1;
    if (strcmp(name + end, ".open") == 0) return 0;
    return -1;
}

static void skip_file(DiKvSegStore *s, uint32_t si, const char *why) {
    Seg *g = &s->segs[si];
    s->st.files_skipped++;
    DI_WARN("kv cache: skipping %s/%s: %s", s->dir, g->name, why);
    if (g->fd >= 0) close(g->fd);
    g->fd = -1;
    g->state = SEG_BAD; /* remembered by name, so it is logged once */
}

static int add_seg(DiKvSegStore *s, const char *name) {
    size_t cap = s->cap_segs;
    if (di_grow(&s->segs, &cap, (size_t)s->n_segs + 1, 64, sizeof *s->segs, "kv segment table") != 0) return -1;
    s->cap_segs = (uint32_t)cap;
    Seg *g = &s->segs[s->n_segs];
    memset(g, 0, sizeof *g);
    g->fd = -1;
    char *copy = di_strdup(name);
    if (!copy) return -1;
    set_name(s, s->n_segs, copy);
    g->seen = true;
    return (int)s->n_segs++;
}

/* A file seen for the first time: check its header, then index it. */
static void load_seg(DiKvSegStore *s, uint32_t si) {
    Seg *g = &s->segs[si];
    uint64_t writer;
    int kind = parse_name(g->name, &g->hour, &writer);
    if (kind < 0) return skip_file(s, si, "not a kv segment file");
    char *path = di_path_join(s->dir, g->name);
    g->fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    free(path);
    if (g->fd < 0) {
        g->state = SEG_GONE; /* removed meanwhile */
        return;
    }
    struct stat st;
    uint8_t h[64];
    const char *bad = NULL;
    if (fstat(g->fd, &st) != 0 || pread_all(g->fd, h, sizeof h, 0) != 0)
        bad = "unreadable or too short";
    else if (memcmp(h, FILE_MAGIC, 8) != 0 || get32(h + 8) != FORMAT_VERSION || get64(h + 16) != g->hour ||
             di_kv_crc32c(0, h, 60) != get32(h + 60))
        bad = "bad segment header";
    if (bad && kind == 0 && flock(g->fd, LOCK_SH | LOCK_NB) != 0) {
        /* a live writer's file still being set up (by a writer other than this module's, which
         * only publishes it whole): look again at the next refresh instead of condemning it */
        close(g->fd);
        g->fd = -1;
        set_name(s, si, NULL);
        g->state = SEG_GONE;
        return;
    }
    if (bad) return skip_file(s, si, bad);
    g->size = (uint64_t)st.st_size;
    if (kind == 1) {
        g->state = SEG_SEALED;
        if (!load_footer(s, si)) {
            DI_WARN("kv cache: %s/%s has no valid footer; rebuilding its index by scanning", s->dir, g->name);
            g->orphan = true;
            scan_segment(s, si);
        }
        return;
    }
    g->state = SEG_OPEN_OTHER;
}

/* An .open of another process: orphaned when its writer no longer holds the lock. */
static void follow_open(DiKvSegStore *s, uint32_t si) {
    Seg *g = &s->segs[si];
    if (!g->orphan && flock(g->fd, LOCK_SH | LOCK_NB) == 0) {
        flock(g->fd, LOCK_UN);
        g->orphan = true;
    }
    struct stat st;
    if (fstat(g->fd, &st) == 0) g->size = (uint64_t)st.st_size;
    if (g->scan_off < g->size) scan_segment(s, si);
}

static void drop_seg(DiKvSegStore *s, uint32_t si, bool unlink_file) {
    Seg *g = &s->segs[si];
    for (uint32_t r = 0; r < s->n_recs; r++)
        if (s->recs[r].used && s->recs[r].seg == si) rec_drop(s, r);
    if (unlink_file) {
        char *path = di_path_join(s->dir, g->name);
        if (path && unlink(path) != 0 && errno != ENOENT)
            DI_WARN("kv cache: cannot remove %s: %s", path, strerror(errno));
        free(path);
    }
    if (g->fd >= 0) close(g->fd);
    g->fd = -1;
    g->state = SEG_GONE;
    if (s->mine == (int)si) s->mine = -1;
}

static bool evictable(const DiKvSegStore *s, uint32_t si) {
    const Seg *g = &s->segs[si];
    return g->state == SEG_SEALED || (g->state == SEG_OPEN_OTHER && g->orphan);
}

static uint64_t disk_bytes(const DiKvSegStore *s) {
    uint64_t b = 0;
    for (uint32_t i = 0; i < s->n_segs; i++)
        if (s->segs[i].state != SEG_GONE && s->segs[i].state != SEG_BAD)
            b += (int)i == s->mine ? s->mine_off : s->segs[i].size;
    return b;
}

/* TTL, then the size cap, oldest (hour, name) first. */
static void enforce_retention(DiKvSegStore *s) {
    double now = now_s(s);
    for (uint32_t i = 0; s->o.ttl_s && i < s->n_segs; i++)
        if (evictable(s, i) && (double)((s->segs[i].hour + 1) * DI_KV_SEG_BUCKET_S + s->o.ttl_s) <= now) {
            s->st.segments_expired++;
            drop_seg(s, i, true);
        }
    while (s->o.cap_bytes) {
        uint64_t total = disk_bytes(s);
        if (total <= s->o.cap_bytes) break;
        int best = -1;
        for (uint32_t i = 0; i < s->n_segs; i++)
            if (evictable(s, i) && (best < 0 || s->segs[i].hour < s->segs[best].hour ||
                                    (s->segs[i].hour == s->segs[best].hour && strcmp(s->segs[i].name, s->segs[best].name) < 0)))
                best = (int)i;
        if (best < 0) break; /* only live segments are left */
        s->st.segments_evicted++;
        s->st.bytes_evicted += s->segs[best].size;
        drop_seg(s, (uint32_t)best, true);
    }
    s->st.disk_bytes = disk_bytes(s);
}

static int find_seg(const DiKvSegStore *s, const char *name) {
    uint32_t i;
    if (!di_kv_map_get(&s->names, name_key(name), &i)) return -1;
    return s->segs[i].name && strcmp(s->segs[i].name, name) == 0 ? (int)i : -1;
}

/* A hidden ".kv-...open.new" left by a writer that died between creating its next segment and
 * publishing it (start_segment): removed once unlocked and older than ten minutes, so a writer
 * that has just created one is never raced. */
static void remove_stale_temp(DiKvSegStore *s, const char *name) {
    size_t n = strlen(name);
    if (strncmp(name, ".kv-", 4) != 0 || n < 9 || strcmp(name + n - 9, ".open.new") != 0) return;
    char *path = di_path_join(s->dir, name);
    int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && (double)st.st_mtime + 600 <= now_s(s) && flock(fd, LOCK_EX | LOCK_NB) == 0)
        unlink(path);
    if (fd >= 0) close(fd);
    free(path);
}

static int refresh_locked(DiKvSegStore *s) {
    DIR *d = opendir(s->dir);
    if (!d) return di_errorf("kv cache: cannot list %s: %s", s->dir, strerror(errno));
    for (uint32_t i = 0; i < s->n_segs; i++) s->segs[i].seen = (int)i == s->mine;
    char **fresh = NULL;
    size_t n_fresh = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') { /* ".", "..", NFS silly-renames, hidden temporaries */
            remove_stale_temp(s, e->d_name);
            continue;
        }
        int si = find_seg(s, e->d_name);
        if (si >= 0) {
            s->segs[si].seen = true;
            continue;
        }
        char **nf = realloc(fresh, (n_fresh + 1) * sizeof *nf);
        if (!nf || !(nf[n_fresh] = di_strdup(e->d_name))) {
            fresh = nf ? nf : fresh;
            break;
        }
        fresh = nf, n_fresh++;
    }
    closedir(d);
    /* first forget what vanished (an .open renamed to .kvs reappears below under its new name) */
    for (uint32_t i = 0; i < s->n_segs; i++)
        if (!s->segs[i].seen && s->segs[i].state != SEG_GONE) {
            if (s->segs[i].state == SEG_BAD) {
                set_name(s, i, NULL);
                s->segs[i].state = SEG_GONE;
            } else {
                drop_seg(s, i, false);
            }
        }
    for (size_t k = 0; k < n_fresh; k++) {
        int si = add_seg(s, fresh[k]);
        if (si >= 0) load_seg(s, (uint32_t)si);
        free(fresh[k]);
    }
    free(fresh);
    for (uint32_t i = 0; i < s->n_segs; i++)
        if (s->segs[i].state == SEG_OPEN_OTHER) follow_open(s, i);
    enforce_retention(s);
    return 0;
}

int di_kv_seg_refresh(DiKvSegStore *s) {
    if (!s) return di_errorf("kv cache: no segment store");
    pthread_mutex_lock(&s->mu);
    int rc = refresh_locked(s);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

DiKvSegStore *di_kv_seg_open(const DiKvSegOptions *o) {
    if (!o || !o->dir || !o->dir[0]) {
        di_errorf("kv cache: no segment directory given");
        return NULL;
    }
    DiKvSegOptions opt = *o;
    if (opt.segment_bytes == 0) { /* eviction granularity: an eighth of the cap, within [64 KiB, 256 MiB] */
        opt.segment_bytes = opt.cap_bytes ? opt.cap_bytes / 8 : (uint64_t)64 << 20;
        if (opt.segment_bytes < (64u << 10)) opt.segment_bytes = 64u << 10;
        if (opt.segment_bytes > ((uint64_t)256 << 20)) opt.segment_bytes = (uint64_t)256 << 20;
    }
    if (opt.ttl_s && opt.ttl_s < DI_KV_SEG_BUCKET_S) {
        di_errorf("kv cache: a TTL of %llu s is finer than the directory's retention granularity of %d s (segment files "
                  "hold one wall-clock hour of records each and are dropped whole, so a record stays at least the TTL "
                  "and less than the TTL + 1 h); give 1h or more",
                  (unsigned long long)opt.ttl_s, DI_KV_SEG_BUCKET_S);
        return NULL;
    }
    if (opt.cap_bytes && opt.segment_bytes > opt.cap_bytes / 2) {
        di_errorf("kv cache: segment_bytes %llu must be at most half of cap_bytes %llu",
                  (unsigned long long)opt.segment_bytes, (unsigned long long)opt.cap_bytes);
        return NULL;
    }
    if (di_make_dirs(o->dir) != 0) {
        di_error_wrap("kv cache directory");
        return NULL;
    }
    DiKvSegStore *s = di_calloc(1, sizeof *s, "kv segment store");
    if (!s) return NULL;
    pthread_mutex_init(&s->mu, NULL);
    s->o = opt;
    s->mine = -1;
    s->dir = di_strdup(o->dir);
    uint64_t id = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0 && read(fd, &id, sizeof id) != (ssize_t)sizeof id) id = 0;
    if (fd >= 0) close(fd);
    s->writer_id = id ^ ((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL);
    if (!s->dir || di_kv_map_init(&s->map, 1024) != 0 || di_kv_map_init(&s->names, 64) != 0 || di_kv_seg_refresh(s) != 0) {
        di_kv_seg_close(s);
        return NULL;
    }
    return s;
}

/* ---- writing ---- */

static int write_all_at(int fd, struct iovec *iov, int n, uint64_t off) {
    size_t want = 0;
    for (int i = 0; i < n; i++) want += iov[i].iov_len;
    ssize_t w = pwritev(fd, iov, n, (off_t)off);
    if (w < 0) return -1;
    if ((size_t)w != want) {
        errno = ENOSPC; /* a short write to a regular file: the device filled up */
        return -1;
    }
    return 0;
}

/* Footer, trailer, rename .open -> .kvs.  Called with the lock held. */
static int seal_locked(DiKvSegStore *s) {
    if (s->mine < 0) return 0;
    Seg *g = &s->segs[s->mine];
    char *from = di_path_join(s->dir, g->name);
    if (!from) return -1;
    if (s->mine_n == 0) { /* nothing written: leave no file behind */
        unlink(from);
        free(from);
        drop_seg(s, (uint32_t)s->mine, false);
        return 0;
    }
    size_t bytes = (size_t)s->mine_n * FOOT_ENTRY;
    uint8_t *e = malloc(bytes + TRAILER);
    if (!e) {
        free(from);
        return di_errorf("kv cache: out of memory sealing %s", g->name);
    }
    uint32_t k = 0;
    for (uint32_t r = 0; r < s->n_recs && k < s->mine_n; r++) {
        const Rec *x = &s->recs[r];
        if (!x->used || x->seg != (uint32_t)s->mine) continue;
        uint8_t *p = e + (size_t)k++ * FOOT_ENTRY;
        put64(p, x->key.lo), put64(p + 8, x->key.hi), put64(p + 16, x->off), put64(p + 24, x->len), put64(p + 32, x->seq);
    }
    bytes = (size_t)k * FOOT_ENTRY; /* records superseded in place are left out */
    uint8_t *t = e + bytes;
    memset(t, 0, TRAILER);
    put32(t, TRAILER_MAGIC), put32(t + 4, FORMAT_VERSION), put64(t + 8, k), put64(t + 16, s->mine_off);
    put32(t + 24, di_kv_crc32c(di_kv_crc32c(0, e, bytes), t, 24));
    struct iovec iov = {e, bytes + TRAILER};
    int rc = write_all_at(g->fd, &iov, 1, s->mine_off);
    if (rc == 0) rc = fdatasync(g->fd);
    char *name = NULL, *to = NULL;
    if (rc == 0) {
        name = di_strdup(g->name);
        if (name) strcpy(name + strlen(name) - 5, ".kvs");
        to = name ? di_path_join(s->dir, name) : NULL;
        rc = to && rename(from, to) == 0 ? 0 : -1;
    }
    if (rc != 0) {
        di_errorf("kv cache: sealing %s: %s", from, strerror(errno));
        free(name);
    } else {
        set_name(s, (uint32_t)s->mine, name);
        g->size = s->mine_off + bytes + TRAILER;
        g->state = SEG_SEALED;
        flock(g->fd, LOCK_UN);
        s->st.bytes_written += bytes + TRAILER;
        s->mine = -1;
    }
    free(e);
    free(from);
    free(to);
    return rc;
}

int di_kv_seg_seal(DiKvSegStore *s) {
    if (!s) return di_errorf("kv cache: no segment store");
    pthread_mutex_lock(&s->mu);
    int rc = seal_locked(s);
    if (rc == 0) enforce_retention(s);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* Create this process's next segment for hour `hour`.  Lock held.  The file is made under a
 * hidden name, locked and given its header, and only then renamed to .open, so another process
 * never sees a segment without its header or its writer's lock. */
static int start_segment(DiKvSegStore *s, uint64_t hour) {
    char name[64], tmp[72];
    snprintf(name, sizeof name, "kv-%010llu-%016llx-%06u.open", (unsigned long long)hour,
             (unsigned long long)s->writer_id, ++s->seg_counter % 1000000);
    snprintf(tmp, sizeof tmp, ".%s.new", name);
    char *path = di_path_join(s->dir, name), *tmp_path = di_path_join(s->dir, tmp);
    int fd = path && tmp_path ? open(tmp_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644) : -1;
    if (fd < 0) {
        di_errorf("kv cache: cannot create %s: %s", tmp_path ? tmp_path : tmp, strerror(errno));
        free(path), free(tmp_path);
        return -1;
    }
    flock(fd, LOCK_EX | LOCK_NB); /* readers in other processes see the segment is live */
    uint8_t h[DI_KV_SEG_ALIGN] = {0};
    memcpy(h, FILE_MAGIC, 8);
    put32(h + 8, FORMAT_VERSION);
    put64(h + 16, hour);
    put64(h + 24, s->writer_id);
    put32(h + 60, di_kv_crc32c(0, h, 60));
    struct iovec iov = {h, sizeof h};
    int si = -1;
    if (write_all_at(fd, &iov, 1, 0) != 0 || rename(tmp_path, path) != 0)
        di_errorf("kv cache: cannot write %s: %s", tmp_path, strerror(errno));
    else if ((si = add_seg(s, name)) < 0)
        unlink(path);
    if (si < 0) {
        close(fd);
        unlink(tmp_path);
        free(path), free(tmp_path);
        return -1;
    }
    free(path), free(tmp_path);
    s->segs[si].fd = fd, s->segs[si].hour = hour, s->segs[si].state = SEG_MINE;
    s->mine = si, s->mine_off = DI_KV_SEG_ALIGN, s->mine_seq = 0, s->mine_n = 0;
    s->st.bytes_written += DI_KV_SEG_ALIGN;
    return 0;
}

/* Log the first failure of a run of them, and refuse appends for a minute. */
static int write_failed(DiKvSegStore *s, double now) {
    s->st.write_errors++;
    if (s->writes_refused_until == 0)
        DI_WARN("kv cache: disk tier unavailable, caching in RAM only: %s", di_error_message());
    s->writes_refused_until = now + 60;
    if (s->mine >= 0) { /* abandon the segment: its tail may be torn */
        flock(s->segs[s->mine].fd, LOCK_UN);
        s->segs[s->mine].state = SEG_OPEN_OTHER;
        s->segs[s->mine].orphan = true;
        s->segs[s->mine].size = s->mine_off;
        s->segs[s->mine].scan_off = s->mine_off;
        s->mine = -1;
    }
    return -1;
}

int di_kv_seg_append(DiKvSegStore *s, DiKvKey key, int kind, const void *data, size_t len) {
    if (!s || (len > 0 && !data)) return di_errorf("kv cache: bad arguments to append");
    if (kind != DI_KV_KIND_BLOCK && kind != DI_KV_KIND_UNIT_TAIL) return di_errorf("kv cache: unknown record kind %d", kind);
    if (len > DI_KV_SEG_MAX_RECORD) return di_errorf("kv cache: a record of %zu bytes exceeds the 1 GiB limit", len);
    pthread_mutex_lock(&s->mu);
    double now = now_s(s);
    if (now < s->writes_refused_until) {
        pthread_mutex_unlock(&s->mu);
        return di_errorf("kv cache: disk tier unavailable after a write error");
    }
    uint64_t hour = (uint64_t)(now / DI_KV_SEG_BUCKET_S);
    uint64_t rec_bytes = DI_KV_SEG_ALIGN + align_up(len);
    bool roll = s->mine >= 0 && (s->segs[s->mine].hour != hour || s->mine_off + rec_bytes > s->o.segment_bytes);
    if ((roll && seal_locked(s) != 0) || (s->mine < 0 && start_segment(s, hour) != 0)) {
        write_failed(s, now);
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    if (roll) enforce_retention(s);
    int fd = s->segs[s->mine].fd;
    uint64_t off = s->mine_off, seq = s->mine_seq + 1;
    pthread_mutex_unlock(&s->mu);

    uint8_t h[DI_KV_SEG_ALIGN] = {0};
    put32(h, REC_MAGIC);
    put32(h + 4, FORMAT_VERSION | (uint32_t)kind << 16);
    put64(h + 8, key.lo), put64(h + 16, key.hi), put64(h + 24, len), put64(h + 32, seq);
    put32(h + 40, di_kv_crc32c(di_kv_crc32c(0, h, REC_HDR), data, len));
    static const uint8_t zeros[DI_KV_SEG_ALIGN];
    struct iovec iov[3] = {{h, sizeof h}, {(void *)data, len}, {(void *)zeros, align_up(len) - len}};
    int rc = write_all_at(fd, iov, 3, off);
    int err = errno;

    pthread_mutex_lock(&s->mu);
    if (rc != 0) {
        di_errorf("kv cache: writing %s/%s: %s", s->dir, s->segs[s->mine].name, strerror(err));
        write_failed(s, now);
    } else {
        s->writes_refused_until = 0;
        s->mine_off = off + rec_bytes, s->mine_seq = seq, s->mine_n++;
        s->st.records_written++;
        s->st.bytes_written += rec_bytes;
        rc = rec_add(s, key, (uint32_t)s->mine, off, len, seq);
        if (s->o.cap_bytes && disk_bytes(s) > s->o.cap_bytes) enforce_retention(s);
        s->st.disk_bytes = disk_bytes(s);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* ---- reading ---- */

int di_kv_seg_contains(DiKvSegStore *s, DiKvKey key) {
    if (!s) return 0;
    pthread_mutex_lock(&s->mu);
    int r = di_kv_map_get(&s->map, key, NULL);
    pthread_mutex_unlock(&s->mu);
    return r;
}

/* The record's location is taken under the lock and read through a dup of its fd without it,
 * so a slow file system never holds up lookups or the writer; a segment dropped meanwhile stays
 * readable through the dup (POSIX unlink semantics). */
int di_kv_seg_get(DiKvSegStore *s, DiKvKey key, void **data, size_t *len, int *kind) {
    if (!s || !data || !len) return di_errorf("kv cache: bad arguments to get");
    *data = NULL, *len = 0;
    pthread_mutex_lock(&s->mu);
    uint32_t r;
    if (!di_kv_map_get(&s->map, key, &r)) {
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    Rec x = s->recs[r];
    const Seg *g = &s->segs[x.seg];
    uint64_t size = (int)x.seg == s->mine ? s->mine_off : g->size;
    char name[64];
    snprintf(name, sizeof name, "%s", g->name);
    int fd = g->fd >= 0 ? dup(g->fd) : -1;
    s->st.reads++;
    pthread_mutex_unlock(&s->mu);

    void *buf = fd >= 0 ? malloc(x.len ? x.len : 1) : NULL;
    DiKvKey k;
    uint64_t n = 0, seq = 0;
    Check c = buf ? check_record(fd, x.off, size, &k, &n, &seq, kind, buf, x.len) : CHK_TORN;
    if (fd >= 0) close(fd);
    bool ok = c == CHK_OK && di_kv_key_eq(k, key) && n == x.len && seq == x.seq;

    pthread_mutex_lock(&s->mu);
    if (ok) {
        *data = buf, *len = (size_t)n;
        s->st.bytes_read += DI_KV_SEG_ALIGN + n;
    } else {
        free(buf);
        /* counted and logged by the reader that drops it: a concurrent read of the same record
         * (the prefetch at arrival and the lookup at admission) fails too, and says nothing */
        uint32_t cur; /* unless the index moved on meanwhile */
        if (di_kv_map_get(&s->map, key, &cur) && cur == r && s->recs[r].seq == x.seq && s->recs[r].seg == x.seg) {
            rec_drop(s, r);
            s->st.records_corrupt++;
            char hex[33];
            di_kv_key_hex(key, hex);
            DI_WARN("kv cache: record %s in %s/%s failed verification; dropped", hex, s->dir, name);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return ok;
}

void di_kv_seg_stats(DiKvSegStore *s, DiKvSegStats *out) {
    if (!s || !out) return;
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    pthread_mutex_unlock(&s->mu);
}

void di_kv_seg_close(DiKvSegStore *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    if (seal_locked(s) != 0) DI_WARN("%s", di_error_message());
    pthread_mutex_unlock(&s->mu);
    for (uint32_t i = 0; i < s->n_segs; i++) {
        if (s->segs[i].fd >= 0) close(s->segs[i].fd);
        free(s->segs[i].name);
    }
    free(s->segs);
    free(s->recs);
    di_kv_map_free(&s->map);
    di_kv_map_free(&s->names);
    free(s->dir);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
