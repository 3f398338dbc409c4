/* fuzz_kv_msg.c — libFuzzer target for the PD transfer listener's message handling
 * (src/serve/kv_msg.h, kv_rooms.h): the input is a sequence of messages from up to four peers,
 * each decoded as the receiver decodes a UCX active message and, when it decodes, applied to the
 * rooms as the receiver applies it.  Any byte string must give checked messages or clean errors:
 * a decoded chunk lies inside its total and is at most one chunk long, a block has the registered
 * size, a state is within the limit, and the rooms take any sequence of them from any peers
 * without a crash or a leak (ASan/UBSan watch).
 *
 * Record format: conn (1 byte, mod 4), message id (1), header length (1), header bytes, payload
 * length (2, little-endian), payload bytes (cut at the input's end). */
#include "engine/kvcache/kv_cache.h"
#include "serve/kv_msg.h"
#include "serve/kv_rooms.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK_BYTES 5000u
#define MAX_STATE 70000u

static DiKvCache *cache(void) {
    static DiKvCache *c;
    if (!c) {
        DiKvCacheOptions o = {.ram_bytes = (size_t)4 << 20, .block_tokens = 128};
        c = di_kv_cache_open(&o);
        if (!c) abort();
    }
    return c;
}

static void apply(DiKvRooms *t, const void *conn, const DiKvMsg *m, const uint8_t *data) {
    switch (m->kind) {
    case DI_KV_AM_BLOCK: di_kv_rooms_chunk(t, conn, m->room, m->key, m->total, m->offset, data, m->len); break;
    case DI_KV_AM_STATE: di_kv_rooms_state_chunk(t, conn, m->room, m->total, m->offset, data, m->len); break;
    case DI_KV_AM_DONE: di_kv_rooms_done(t, conn, m->room, m->n_blocks, m->state_bytes); break;
    case DI_KV_AM_BEGIN: di_kv_rooms_begin(t, conn, m->room); break;
    case DI_KV_AM_ABORT: di_kv_rooms_abort(t, conn, m->room); break;
    default: break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t size) {
    static const int conns[4];
    DiKvRooms *t = di_kv_rooms_create(cache(), BLOCK_BYTES, 30, 5, 16);
    if (!t) abort();
    di_kv_rooms_set_max_state(t, MAX_STATE);
    DiKvMsgLimits lim = {BLOCK_BYTES, MAX_STATE};
    size_t i = 0;
    while (i + 3 <= size) {
        int conn = in[i] % 4;
        unsigned am = in[i + 1];
        size_t hl = in[i + 2];
        i += 3;
        if (hl > size - i) hl = size - i;
        const uint8_t *hdr = in + i;
        i += hl;
        size_t dl = 0;
        if (i + 2 <= size) dl = (size_t)in[i] | (size_t)in[i + 1] << 8, i += 2;
        if (dl > size - i) dl = size - i;
        const uint8_t *data = in + i;
        i += dl;
        DiKvMsg m;
        if (di_kv_msg_decode(am, hdr, hl, dl, &lim, &m) != 0) continue;
        if (m.kind == DI_KV_AM_BLOCK || m.kind == DI_KV_AM_STATE) {
            if (m.len == 0 || m.len > DI_KV_CHUNK_BYTES || m.offset >= m.total || m.len > m.total - m.offset || m.len != dl)
                abort();
            if (m.kind == DI_KV_AM_BLOCK && m.total != BLOCK_BYTES) abort();
            if (m.kind == DI_KV_AM_STATE && m.total > MAX_STATE) abort();
        }
        apply(t, &conns[conn], &m, data);
        if (m.room < 4) { /* a waiter takes what a room completed */
            void *blob = NULL;
            size_t len = 0;
            if (di_kv_rooms_take_state(t, m.room, &blob, &len) == 0) di_kv_rooms_recycle_state(t, blob, len);
        }
    }
    for (int c = 0; c < 4; c++) di_kv_rooms_conn_lost(t, &conns[c]);
    di_kv_rooms_free(t);
    return 0;
}
