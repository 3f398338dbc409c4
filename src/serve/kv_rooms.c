/* kv_rooms.c — per-room transfer state on the decode side (see kv_rooms.h).
 *
 * Rooms live in a fixed array of max_rooms slots, searched linearly (a decode worker holds a few
 * hundred rooms at most; a search is a few microseconds next to a block's copy).  A finished and
 * released room keeps its slot (so a late duplicate message is recognised and ignored) until the
 * slot is needed or the room has been finished for two leases.
 *
 * State buffers are reused across rooms: a fresh multi-megabyte allocation is a fresh mapping
 * whose pages fault in as the chunks land, which made a STATE room about half as fast as the same
 * bytes as blocks.  A room's state buffer that is dropped (the room aborted, expired or was
 * released untaken), or handed back by its taker (di_kv_rooms_recycle_state), goes to a small pool:
 * at most STATE_POOL_MAX buffers and the set byte budget (default 256 MiB; 0 keeps none).  A new
 * state takes the smallest pooled buffer that holds it, shrunk to its size (realloc keeps the
 * touched pages), so the pool's byte count is exact.  The pool is freed with the rooms. */
#include "serve/kv_rooms.h"

#include "base/error.h"
#include "base/log.h"
#include "base/mem.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    DiKvKey key;
    uint64_t total, got;
    uint8_t *buf;
    uint8_t *seen; /* one bit per chunk received (a duplicate is ignored) */
} Partial;

typedef struct {
    bool used;
    uint64_t id;
    DiRoomState state;
    const void *conn;
    double lease;            /* past it, an unreleased room expires */
    double touched;          /* its last message (BEGIN, a chunk): a waiter's idle deadline runs from it */
    double finished_at;      /* when it reached a final state, or was released */
    bool released;           /* its pins are gone */
    int waiters;
    DiKvKey *pins;           /* keys of the blocks it holds pinned */
    int n_pins;
    size_t cap_pins;
    uint32_t settled;        /* blocks complete (stored, or refused by a full cache) */
    int64_t expect;          /* DONE's n_blocks, -1 before DONE */
    Partial *part;           /* blocks being assembled */
    int n_part;
    size_t cap_part;
    uint8_t *blob;           /* the request's exact state (STATE), being assembled or complete */
    uint64_t blob_total, blob_got;
    uint8_t *blob_seen;      /* one bit per chunk of the state received (a duplicate is ignored) */
    int64_t expect_state;    /* DONE's state_bytes, -1 before DONE */
} Room;

enum { STATE_POOL_MAX = 4 };
#define STATE_POOL_DEFAULT_BYTES ((uint64_t)256 << 20)

typedef struct {
    uint8_t *buf;
    uint64_t bytes;
} Pooled;

struct DiKvRooms {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    DiKvCache *cache;
    uint64_t block_bytes;
    double lease_s, grace_s;
    uint64_t max_state_bytes;
    Room *rooms;
    int n_rooms;
    DiKvRecvStats st;
    Pooled pool[STATE_POOL_MAX]; /* state buffers kept for reuse */
    int n_pool;
    uint64_t pool_bytes, max_pool_bytes;
};

const char *di_room_state_name(DiRoomState s) {
    switch (s) {
    case DI_ROOM_NEW: return "new";
    case DI_ROOM_TRANSFERRING: return "transferring";
    case DI_ROOM_DONE: return "done";
    case DI_ROOM_ABORTED: return "aborted";
    case DI_ROOM_EXPIRED: return "expired";
    case DI_ROOM_NONE: break;
    }
    return "none";
}

double di_kv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

DiKvRooms *di_kv_rooms_create(DiKvCache *cache, uint64_t block_bytes, double lease_s, double grace_s, int max_rooms) {
    if (!cache || block_bytes == 0 || !(lease_s > 0 && lease_s <= 86400) || !(grace_s >= 0 && grace_s <= 86400) ||
        max_rooms <= 0 || max_rooms > 1 << 20) {
        di_errorf("kv rooms: need a cache, a block size, a lease in (0, 86400] s, a grace in [0, 86400] s and "
                  "1..2^20 rooms (got %llu bytes, %g s, %g s, %d rooms)",
                  (unsigned long long)block_bytes, lease_s, grace_s, max_rooms);
        return NULL;
    }
    DiKvRooms *t = di_calloc(1, sizeof *t, "kv rooms");
    if (!t) return NULL;
    if (!(t->rooms = di_calloc((size_t)max_rooms, sizeof *t->rooms, "kv room table"))) {
        free(t);
        return NULL;
    }
    pthread_mutex_init(&t->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->cv, &ca);
    pthread_condattr_destroy(&ca);
    t->cache = cache;
    t->block_bytes = block_bytes;
    t->lease_s = lease_s;
    t->grace_s = grace_s;
    t->n_rooms = max_rooms;
    t->max_state_bytes = (uint64_t)1 << 32;
    t->max_pool_bytes = STATE_POOL_DEFAULT_BYTES;
    return t;
}

void di_kv_rooms_set_max_state(DiKvRooms *t, uint64_t bytes) {
    if (t && bytes) t->max_state_bytes = bytes;
}

/* A state buffer of `bytes` into the pool when it fits its count and budget, else freed.  Under
 * t->mu (or before the rooms are shared). */
static void pool_put(DiKvRooms *t, void *buf, uint64_t bytes) {
    if (!buf) return;
    if (t->n_pool < STATE_POOL_MAX && bytes <= t->max_pool_bytes - t->pool_bytes) {
        t->pool[t->n_pool++] = (Pooled){buf, bytes};
        t->pool_bytes += bytes;
        return;
    }
    free(buf);
}

/* A buffer of exactly `bytes`: the smallest pooled one that holds it (shrunk), else a fresh one. */
static uint8_t *pool_take(DiKvRooms *t, uint64_t bytes) {
    int best = -1;
    for (int i = 0; i < t->n_pool; i++)
        if (t->pool[i].bytes >= bytes && (best < 0 || t->pool[i].bytes < t->pool[best].bytes)) best = i;
    if (best < 0) return di_malloc((size_t)bytes, "received state");
    Pooled p = t->pool[best];
    t->pool[best] = t->pool[--t->n_pool];
    t->pool_bytes -= p.bytes;
    if (p.bytes == bytes) return p.buf;
    uint8_t *q = realloc(p.buf, (size_t)bytes);
    if (q) return q;
    free(p.buf);
    return di_malloc((size_t)bytes, "received state");
}

static void pool_trim(DiKvRooms *t) {
    while (t->n_pool > 0 && t->pool_bytes > t->max_pool_bytes) {
        Pooled p = t->pool[--t->n_pool];
        t->pool_bytes -= p.bytes;
        free(p.buf);
    }
}

void di_kv_rooms_set_state_pool(DiKvRooms *t, uint64_t bytes) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    t->max_pool_bytes = bytes;
    pool_trim(t);
    pthread_mutex_unlock(&t->mu);
}

void di_kv_rooms_recycle_state(DiKvRooms *t, void *blob, size_t len) {
    if (!t || !blob || len == 0) {
        free(blob);
        return;
    }
    pthread_mutex_lock(&t->mu);
    pool_put(t, blob, len);
    pthread_mutex_unlock(&t->mu);
}

static void drop_state(DiKvRooms *t, Room *r) {
    pool_put(t, r->blob, r->blob_total);
    free(r->blob_seen);
    r->blob = NULL;
    r->blob_seen = NULL;
    r->blob_total = r->blob_got = 0;
}

static void drop_parts(Room *r) {
    for (int i = 0; i < r->n_part; i++) free(r->part[i].buf), free(r->part[i].seen);
    r->n_part = 0;
}

/* Unpin the room's blocks; those of a room that did not complete are dropped from RAM too (unless
 * another room or request holds them), so a local prefill after a failed transfer is a cold one,
 * the same bits as on a worker that never saw the transfer. */
static void unpin_all(DiKvRooms *t, Room *r) {
    for (int i = 0; i < r->n_pins; i++) {
        di_kv_cache_unpin(t->cache, r->pins[i]);
        if (r->state != DI_ROOM_DONE) di_kv_cache_drop(t->cache, r->pins[i]);
    }
    t->st.pinned_blocks -= r->n_pins;
    r->n_pins = 0;
    drop_parts(r);
    drop_state(t, r);
    r->released = true;
}

static void forget(DiKvRooms *t, Room *r) {
    drop_state(t, r);
    free(r->pins);
    free(r->part);
    memset(r, 0, sizeof *r);
}

void di_kv_rooms_free(DiKvRooms *t) {
    if (!t) return;
    for (int i = 0; i < t->n_rooms; i++) {
        if (t->rooms[i].used) unpin_all(t, &t->rooms[i]);
        forget(t, &t->rooms[i]);
    }
    t->max_pool_bytes = 0;
    pool_trim(t);
    free(t->rooms);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

static bool final_state(DiRoomState s) { return s == DI_ROOM_DONE || s == DI_ROOM_ABORTED || s == DI_ROOM_EXPIRED; }

/* Monotonic transitions only; waiters wake on a final state. */
static void set_state(DiKvRooms *t, Room *r, DiRoomState s, double now) {
    if (final_state(r->state) || s <= r->state) return;
    r->state = s;
    t->st.rooms[s]++;
    if (final_state(s)) {
        r->finished_at = now;
        drop_parts(r);
        if (s != DI_ROOM_DONE) drop_state(t, r);
        pthread_cond_broadcast(&t->cv);
    }
}

static Room *find(DiKvRooms *t, uint64_t id) {
    for (int i = 0; i < t->n_rooms; i++)
        if (t->rooms[i].used && t->rooms[i].id == id) return &t->rooms[i];
    return NULL;
}

/* The room, created (NEW) when unknown: a free slot, else the oldest released one.  NULL when
 * every slot holds a live room. */
static Room *get(DiKvRooms *t, uint64_t id, double now) {
    Room *r = find(t, id), *victim = NULL;
    if (r) return r;
    for (int i = 0; i < t->n_rooms && !victim; i++)
        if (!t->rooms[i].used) victim = &t->rooms[i];
    for (int i = 0; i < t->n_rooms && !victim; i++) {
        Room *c = &t->rooms[i];
        if (c->released && c->waiters == 0 && (!victim || c->finished_at < victim->finished_at)) victim = c;
    }
    if (!victim) {
        DI_WARN("kv transfer: all %d room slots are live; room %llu is refused", t->n_rooms, (unsigned long long)id);
        return NULL;
    }
    forget(t, victim);
    victim->used = true;
    victim->id = id;
    victim->state = DI_ROOM_NEW;
    victim->expect = -1;
    victim->expect_state = -1;
    victim->lease = now + t->lease_s;
    victim->touched = now;
    t->st.rooms[DI_ROOM_NEW]++;
    return victim;
}

static void check_done(DiKvRooms *t, Room *r, double now) {
    if (r->expect >= 0 && r->settled >= r->expect && r->expect_state >= 0 && r->blob_got == (uint64_t)r->expect_state &&
        r->blob_total == r->blob_got)
        set_state(t, r, DI_ROOM_DONE, now);
}

/* Chunks of a block or a state sit on the sender's DI_KV_CHUNK_BYTES grid (send_chunks), so a
 * duplicated one (a resent message) is recognised by its index: one bit per chunk. */
static int check_grid(uint64_t room, const char *what, uint64_t total, uint64_t offset, size_t len) {
    uint64_t want = total - offset < DI_KV_CHUNK_BYTES ? total - offset : DI_KV_CHUNK_BYTES;
    if (offset % DI_KV_CHUNK_BYTES != 0 || len != want)
        return di_errorf("kv transfer: room %llu: a %s chunk [%llu, +%zu) off the %zu-byte chunk grid", (unsigned long long)room,
                         what, (unsigned long long)offset, len, DI_KV_CHUNK_BYTES);
    return 0;
}

static uint8_t *grid_bits(uint64_t total, const char *what) {
    return di_calloc((size_t)(total / DI_KV_CHUNK_BYTES / 8 + 1), 1, what);
}

/* Marks the chunk at offset (on the grid, within the bits' total) received; false when it was. */
static bool grid_mark(uint8_t *bits, uint64_t offset) {
    uint64_t i = offset / DI_KV_CHUNK_BYTES;
    uint8_t m = (uint8_t)(1u << (i % 8));
    if (bits[i / 8] & m) return false;
    bits[i / 8] |= m;
    return true;
}

static bool has_pin(const Room *r, DiKvKey key) {
    for (int i = 0; i < r->n_pins; i++)
        if (di_kv_key_eq(r->pins[i], key)) return true;
    return false;
}

/* A complete block: into the cache, pinned for the room. */
static void settle(DiKvRooms *t, Room *r, DiKvKey key, const void *data, uint64_t len) {
    if (has_pin(r, key)) return; /* a duplicate: counted once towards DONE's n_blocks */
    r->settled++;
    if (di_grow(&r->pins, &r->cap_pins, (size_t)r->n_pins + 1, 16, sizeof *r->pins, "room pins") != 0 ||
        di_kv_cache_store(t->cache, key, data, len) != 0 || di_kv_cache_pin(t->cache, key) != 0) {
        /* The cache is full of pinned or referenced blocks: the engine recomputes this block. */
        DI_WARN("kv transfer: room %llu: a received block could not be kept: %s", (unsigned long long)r->id,
                di_error_message());
        return;
    }
    r->pins[r->n_pins++] = key;
    t->st.pinned_blocks++;
    t->st.blocks_received++;
    t->st.bytes_received += len;
}

static Partial *partial_of(Room *r, DiKvKey key, uint64_t total) {
    for (int i = 0; i < r->n_part; i++)
        if (di_kv_key_eq(r->part[i].key, key)) return &r->part[i];
    if (di_grow(&r->part, &r->cap_part, (size_t)r->n_part + 1, 4, sizeof *r->part, "room blocks") != 0) return NULL;
    Partial *p = &r->part[r->n_part];
    memset(p, 0, sizeof *p);
    p->buf = di_malloc(total, "received block");
    p->seen = grid_bits(total, "received block chunks");
    if (!p->buf || !p->seen) return free(p->buf), free(p->seen), NULL;
    p->key = key;
    p->total = total;
    r->n_part++;
    return p;
}

static int live_rooms_of(const DiKvRooms *t, const void *conn) {
    int n = 0;
    for (int i = 0; i < t->n_rooms; i++) {
        const Room *r = &t->rooms[i];
        n += r->used && r->conn == conn && !final_state(r->state) && !r->released;
    }
    return n;
}

/* A message from `conn` for unfinished room r: r becomes conn's when nobody owns it yet.  -1 (the
 * cause) when another connection owns it, or conn already holds DI_KV_ROOMS_PER_CONN live rooms:
 * a peer that does either is not an honest sender (kv_transfer.c drops it). */
static int claim(DiKvRooms *t, Room *r, const void *conn) {
    if (r->conn == conn) return 0;
    if (r->conn)
        return di_errorf("kv transfer: room %llu belongs to another connection", (unsigned long long)r->id);
    if (live_rooms_of(t, conn) >= DI_KV_ROOMS_PER_CONN)
        return di_errorf("kv transfer: room %llu: the connection already holds %d unfinished rooms", (unsigned long long)r->id,
                         DI_KV_ROOMS_PER_CONN);
    r->conn = conn;
    return 0;
}

/* The room a message from `conn` may add to (created when unknown, now TRANSFERRING), or NULL
 * when it is finished or released or no slot is free (*rc 0: the message is ignored) or when
 * conn may not claim it (*rc -1, the cause set).  Under t->mu. */
static Room *transferring(DiKvRooms *t, const void *conn, uint64_t room, double now, int *rc) {
    *rc = 0;
    Room *r = get(t, room, now);
    if (!r || final_state(r->state) || r->released) return NULL;
    if (claim(t, r, conn) != 0) {
        *rc = -1;
        return NULL;
    }
    set_state(t, r, DI_ROOM_TRANSFERRING, now);
    r->touched = now;
    return r;
}

int di_kv_rooms_chunk(DiKvRooms *t, const void *conn, uint64_t room, DiKvKey key, uint64_t total, uint64_t offset,
                      const void *data, size_t len) {
    if (!t || (len && !data)) return di_errorf("kv rooms: bad arguments");
    if (total != t->block_bytes || offset > total || len > total - offset || len == 0)
        return di_errorf("kv transfer: room %llu: a chunk [%llu, +%zu) of a %llu-byte block, expected blocks of %llu bytes",
                         (unsigned long long)room, (unsigned long long)offset, len, (unsigned long long)total,
                         (unsigned long long)t->block_bytes);
    if (check_grid(room, "block", total, offset, len) != 0) return -1;
    double now = di_kv_now();
    int rc = 0;
    pthread_mutex_lock(&t->mu);
    Room *r = transferring(t, conn, room, now, &rc);
    if (r) {
        Partial *p = partial_of(r, key, total);
        if (!p) {
            rc = -1;
        } else if (grid_mark(p->seen, offset)) { /* else a duplicate, ignored */
            memcpy(p->buf + offset, data, len);
            p->got += len;
            if (p->got >= p->total) {
                settle(t, r, key, p->buf, p->total);
                free(p->buf);
                free(p->seen);
                *p = r->part[--r->n_part];
                check_done(t, r, now);
            }
        }
    }
    pthread_mutex_unlock(&t->mu);
    return rc;
}

int di_kv_rooms_begin(DiKvRooms *t, const void *conn, uint64_t room) {
    if (!t) return di_errorf("kv rooms: bad arguments");
    double now = di_kv_now();
    int rc;
    pthread_mutex_lock(&t->mu);
    transferring(t, conn, room, now, &rc);
    pthread_mutex_unlock(&t->mu);
    return rc;
}

/* A STATE chunk into room r (under t->mu); a duplicated one (a resent message) is ignored. */
static int add_state(DiKvRooms *t, Room *r, uint64_t total, uint64_t offset, const void *data, size_t len, double now) {
    if (check_grid(r->id, "state", total, offset, len) != 0) return -1;
    if (!r->blob) {
        r->blob_total = total;
        r->blob = pool_take(t, total);
        r->blob_seen = grid_bits(total, "received state chunks");
        if (!r->blob || !r->blob_seen) return drop_state(t, r), -1;
    }
    if (r->blob_total == total && !grid_mark(r->blob_seen, offset)) return 0;
    if (r->blob_total != total || len > total - r->blob_got)
        return di_errorf("kv transfer: room %llu: state chunks disagree on the size (%llu, %llu) or overrun it",
                         (unsigned long long)r->id, (unsigned long long)r->blob_total, (unsigned long long)total);
    memcpy(r->blob + offset, data, len);
    r->blob_got += len;
    if (r->blob_got == total) {
        t->st.states_received++;
        t->st.state_bytes_received += total;
    }
    check_done(t, r, now);
    return 0;
}

int di_kv_rooms_state_chunk(DiKvRooms *t, const void *conn, uint64_t room, uint64_t total, uint64_t offset,
                            const void *data, size_t len) {
    if (!t || !data || len == 0) return di_errorf("kv rooms: bad arguments");
    if (total == 0 || total > t->max_state_bytes || offset > total || len > total - offset)
        return di_errorf("kv transfer: room %llu: a state chunk [%llu, +%zu) of %llu bytes (at most %llu accepted)",
                         (unsigned long long)room, (unsigned long long)offset, len, (unsigned long long)total,
                         (unsigned long long)t->max_state_bytes);
    pthread_mutex_lock(&t->mu);
    double now = di_kv_now();
    int rc;
    Room *r = transferring(t, conn, room, now, &rc);
    if (r) rc = add_state(t, r, total, offset, data, len, now);
    pthread_mutex_unlock(&t->mu);
    return rc;
}

int di_kv_rooms_take_state(DiKvRooms *t, uint64_t room, void **blob, size_t *len) {
    if (!t || !blob || !len) return di_errorf("kv rooms: bad arguments");
    *blob = NULL;
    *len = 0;
    pthread_mutex_lock(&t->mu);
    Room *r = find(t, room);
    if (r && r->state == DI_ROOM_DONE && r->blob && r->blob_got == r->blob_total) {
        *blob = r->blob;
        *len = (size_t)r->blob_total;
        r->blob = NULL;
    }
    pthread_mutex_unlock(&t->mu);
    return 0;
}

int di_kv_rooms_done(DiKvRooms *t, const void *conn, uint64_t room, uint32_t n_blocks, uint64_t state_bytes) {
    if (!t) return di_errorf("kv rooms: bad arguments");
    double now = di_kv_now();
    int rc = 0;
    pthread_mutex_lock(&t->mu);
    Room *r = get(t, room, now);
    if (r && !final_state(r->state) && !r->released) {
        if (claim(t, r, conn) != 0) {
            rc = -1;
        } else if (r->expect >= 0 && (r->expect != (int64_t)n_blocks || r->expect_state != (int64_t)state_bytes)) {
            rc = di_errorf("kv transfer: room %llu: DONE(%u blocks, %llu state bytes) contradicts its first DONE(%lld, %lld)",
                           (unsigned long long)room, n_blocks, (unsigned long long)state_bytes, (long long)r->expect,
                           (long long)r->expect_state);
        } else {
            r->expect = n_blocks;
            r->expect_state = (int64_t)state_bytes;
            check_done(t, r, now);
        }
    }
    pthread_mutex_unlock(&t->mu);
    return rc;
}

int di_kv_rooms_abort(DiKvRooms *t, const void *conn, uint64_t room) {
    if (!t) return di_errorf("kv rooms: bad arguments");
    double now = di_kv_now();
    int rc = 0;
    pthread_mutex_lock(&t->mu);
    Room *r = get(t, room, now);
    if (r && !final_state(r->state)) {
        if (claim(t, r, conn) != 0) rc = -1;
        else set_state(t, r, DI_ROOM_ABORTED, now);
    }
    pthread_mutex_unlock(&t->mu);
    return rc;
}

void di_kv_rooms_conn_lost(DiKvRooms *t, const void *conn) {
    if (!t || !conn) return;
    double now = di_kv_now();
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->n_rooms; i++) {
        Room *r = &t->rooms[i];
        if (r->used && r->conn == conn && !final_state(r->state)) set_state(t, r, DI_ROOM_ABORTED, now);
    }
    pthread_mutex_unlock(&t->mu);
}

/* When the wait for r ends without progress: idle_s after its last message (or after the wait
 * began), never past cap. */
static double wait_end(const Room *r, double start, double idle_s, double cap) {
    return fmin(cap, fmax(start, r->touched) + idle_s);
}

DiRoomState di_kv_rooms_wait(DiKvRooms *t, uint64_t room, double idle_s, bool (*cancel)(void *), void *arg) {
    double now = di_kv_now(), start = now, cap = now + DI_KV_ROOM_WAIT_MAX_S;
    if (!t || !(idle_s >= 0 && idle_s <= DI_KV_ROOM_WAIT_MAX_S)) { /* NaN and +inf fail: every wait is bounded */
        di_errorf("kv transfer: waiting for room %llu needs an idle deadline within %g s", (unsigned long long)room,
                  DI_KV_ROOM_WAIT_MAX_S);
        return DI_ROOM_NONE;
    }
    pthread_mutex_lock(&t->mu);
    Room *r = get(t, room, now);
    if (!r) {
        pthread_mutex_unlock(&t->mu);
        di_errorf("kv transfer: no room slot is free for room %llu", (unsigned long long)room);
        return DI_ROOM_NONE;
    }
    r->waiters++;
    t->st.rooms_waiting++;
    double end;
    while (!final_state(r->state) && (now = di_kv_now()) < (end = wait_end(r, start, idle_s, cap)) && !(cancel && cancel(arg))) {
        if (end + t->grace_s > r->lease) r->lease = end + t->grace_s;
        double until = fmin(end, now + 0.05);
        struct timespec ts = {.tv_sec = (time_t)until, .tv_nsec = (long)((until - (double)(time_t)until) * 1e9)};
        pthread_cond_timedwait(&t->cv, &t->mu, &ts);
    }
    DiRoomState s = r->state;
    r->waiters--;
    t->st.rooms_waiting--;
    pthread_mutex_unlock(&t->mu);
    return s;
}

void di_kv_rooms_release(DiKvRooms *t, uint64_t room) {
    if (!t) return;
    double now = di_kv_now();
    pthread_mutex_lock(&t->mu);
    Room *r = find(t, room);
    if (r && !r->released) {
        /* The waiter gave up on an unfinished room: later messages for it are ignored. */
        set_state(t, r, DI_ROOM_ABORTED, now);
        unpin_all(t, r);
        r->finished_at = now;
    }
    pthread_mutex_unlock(&t->mu);
}

void di_kv_rooms_reap(DiKvRooms *t, double now) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->n_rooms; i++) {
        Room *r = &t->rooms[i];
        if (!r->used) continue;
        if (!r->released && now > r->lease) {
            set_state(t, r, DI_ROOM_EXPIRED, now);
            unpin_all(t, r);
            r->finished_at = now;
        } else if (r->released && r->waiters == 0 && now > r->finished_at + 2 * t->lease_s) {
            forget(t, r);
        }
    }
    pthread_mutex_unlock(&t->mu);
}

DiRoomState di_kv_rooms_state(DiKvRooms *t, uint64_t room) {
    if (!t) return DI_ROOM_NONE;
    pthread_mutex_lock(&t->mu);
    Room *r = find(t, room);
    DiRoomState s = r ? r->state : DI_ROOM_NONE;
    pthread_mutex_unlock(&t->mu);
    return s;
}

void di_kv_rooms_stats(DiKvRooms *t, DiKvRecvStats *out) {
    if (!t || !out) return;
    pthread_mutex_lock(&t->mu);
    memcpy(out->rooms, t->st.rooms, sizeof out->rooms);
    out->bytes_received = t->st.bytes_received;
    out->blocks_received = t->st.blocks_received;
    out->rooms_waiting = t->st.rooms_waiting;
    out->pinned_blocks = t->st.pinned_blocks;
    out->states_received = t->st.states_received;
    out->state_bytes_received = t->st.state_bytes_received;
    pthread_mutex_unlock(&t->mu);
}
