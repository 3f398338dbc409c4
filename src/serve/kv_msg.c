/* kv_msg.c — the PD transfer's message decoder and registration proof (see kv_msg.h).
 *
 * The decoder only looks at sizes and numbers: where a chunk's bytes go, and whether a room may
 * take them, is kv_rooms.c's (ownership, duplicates, totals that change); the proof is OpenSSL's
 * HMAC-SHA256 (libcrypto), compared with CRYPTO_memcmp. */
#include "serve/kv_msg.h"

#include "base/env.h"
#include "base/error.h"
#include "base/file.h"
#include "base/mem.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *am_name(unsigned am) {
    switch (am) {
    case DI_KV_AM_REGISTER: return "REGISTER";
    case DI_KV_AM_REG_REPLY: return "REG_REPLY";
    case DI_KV_AM_BLOCK: return "BLOCK";
    case DI_KV_AM_DONE: return "DONE";
    case DI_KV_AM_ABORT: return "ABORT";
    case DI_KV_AM_BEGIN: return "BEGIN";
    case DI_KV_AM_STATE: return "STATE";
    default: return "an unknown message";
    }
}

/* The header size each message id has; 0 for an id a sender never sends. */
static size_t header_size(unsigned am) {
    switch (am) {
    case DI_KV_AM_REGISTER: return sizeof(DiKvRegMsg);
    case DI_KV_AM_BLOCK:
    case DI_KV_AM_STATE: return sizeof(DiKvChunkHdr);
    case DI_KV_AM_DONE: return sizeof(DiKvDoneMsg);
    case DI_KV_AM_ABORT:
    case DI_KV_AM_BEGIN: return sizeof(uint64_t);
    default: return 0;
    }
}

/* A chunk [offset, offset + len) of `total` bytes as the sender cuts them: on the chunk grid,
 * each chunk whole (the last one the remainder). */
static int check_chunk(const char *what, uint64_t room, uint64_t total, uint64_t offset, size_t len) {
    if (len == 0 || offset >= total || offset % DI_KV_CHUNK_BYTES != 0)
        return di_errorf("kv transfer: room %llu: a %s chunk [%llu, +%zu) of %llu bytes is empty, past its end or off the "
                         "%zu-byte chunk grid",
                         (unsigned long long)room, what, (unsigned long long)offset, len, (unsigned long long)total,
                         DI_KV_CHUNK_BYTES);
    uint64_t want = total - offset < DI_KV_CHUNK_BYTES ? total - offset : DI_KV_CHUNK_BYTES;
    if (len != want)
        return di_errorf("kv transfer: room %llu: a %s chunk at %llu has %zu bytes, the sender's grid gives %llu",
                         (unsigned long long)room, what, (unsigned long long)offset, len, (unsigned long long)want);
    return 0;
}

static int decode_chunk(unsigned am, const DiKvChunkHdr *h, size_t len, const DiKvMsgLimits *lim, DiKvMsg *out) {
    bool state = am == DI_KV_AM_STATE;
    if (state && (h->key_lo || h->key_hi))
        return di_errorf("kv transfer: room %llu: a STATE chunk names a block key", (unsigned long long)h->room);
    if (!state && h->total != lim->block_bytes)
        return di_errorf("kv transfer: room %llu: a block of %llu bytes, the registered blocks have %llu",
                         (unsigned long long)h->room, (unsigned long long)h->total, (unsigned long long)lim->block_bytes);
    if (state && (h->total == 0 || h->total > lim->max_state_bytes))
        return di_errorf("kv transfer: room %llu: a state of %llu bytes (at most %llu accepted)", (unsigned long long)h->room,
                         (unsigned long long)h->total, (unsigned long long)lim->max_state_bytes);
    if (check_chunk(state ? "state" : "block", h->room, h->total, h->offset, len) != 0) return -1;
    out->room = h->room;
    out->key = (DiKvKey){h->key_lo, h->key_hi};
    out->total = h->total;
    out->offset = h->offset;
    out->len = len;
    return 0;
}

int di_kv_msg_decode(unsigned am, const void *hdr, size_t hdr_len, size_t data_len, const DiKvMsgLimits *lim, DiKvMsg *out) {
    if (!out || !lim || (hdr_len && !hdr)) return di_errorf("kv transfer: decode: bad arguments");
    memset(out, 0, sizeof *out);
    size_t want = header_size(am);
    if (want == 0) return di_errorf("kv transfer: message id %u is not one a sender sends", am);
    if (hdr_len != want)
        return di_errorf("kv transfer: a %s header of %zu bytes, %zu expected", am_name(am), hdr_len, want);
    bool chunk = am == DI_KV_AM_BLOCK || am == DI_KV_AM_STATE;
    if (!chunk && data_len)
        return di_errorf("kv transfer: a %s message carries %zu payload bytes, it has none", am_name(am), data_len);
    out->kind = (DiKvAm)am;
    if (chunk) {
        DiKvChunkHdr h; /* UCX's header bytes need not be aligned */
        memcpy(&h, hdr, sizeof h);
        return decode_chunk(am, &h, data_len, lim, out);
    }
    if (am == DI_KV_AM_REGISTER) {
        memcpy(&out->reg, hdr, sizeof out->reg);
        if (out->reg.magic != DI_KV_MSG_MAGIC || out->reg.version != DI_KV_PROTO_VERSION)
            return di_errorf("kv transfer: not a deepinfer KV transfer registration (protocol version %u expected)",
                             DI_KV_PROTO_VERSION);
        return 0;
    }
    if (am == DI_KV_AM_DONE) {
        DiKvDoneMsg m;
        memcpy(&m, hdr, sizeof m);
        if (m.state_bytes > lim->max_state_bytes)
            return di_errorf("kv transfer: room %llu: DONE announces a state of %llu bytes (at most %llu accepted)",
                             (unsigned long long)m.room, (unsigned long long)m.state_bytes,
                             (unsigned long long)lim->max_state_bytes);
        out->room = m.room;
        out->n_blocks = m.n_blocks;
        out->state_bytes = m.state_bytes;
        return 0;
    }
    memcpy(&out->room, hdr, sizeof out->room); /* BEGIN, ABORT */
    return 0;
}

int di_kv_msg_prove(const DiKvRegMsg *m, const uint8_t *key, size_t key_len, uint8_t out[DI_KV_KEY_DIGEST]) {
    if (!m || !out || (key_len && !key)) return di_errorf("kv transfer: proof: bad arguments");
    memset(out, 0, DI_KV_KEY_DIGEST);
    if (key_len == 0) return 0;
    unsigned n = 0;
    if (key_len > INT32_MAX || !HMAC(EVP_sha256(), key, (int)key_len, (const unsigned char *)m, offsetof(DiKvRegMsg, proof), out, &n) ||
        n != DI_KV_KEY_DIGEST)
        return di_errorf("kv transfer: computing the cluster key proof (HMAC-SHA256) failed");
    return 0;
}

int di_kv_cluster_key_load(const char *file, uint8_t **key, size_t *len) {
    if (!key || !len) return di_errorf("cluster key: bad arguments");
    *key = NULL;
    *len = 0;
    const char *env = file ? NULL : di_env_cluster_key();
    char *data = NULL;
    size_t n = 0;
    if (file) {
        if (di_read_file(file, &data, &n) != 0) return di_error_wrap("--cluster-key %s", file);
    } else if (env) {
        n = strlen(env);
        if (!(data = di_malloc(n + 1, "cluster key"))) return -1;
        memcpy(data, env, n + 1);
    } else {
        return 0;
    }
    while (n > 0 && (data[n - 1] == '\n' || data[n - 1] == '\r' || data[n - 1] == ' ' || data[n - 1] == '\t')) n--;
    const char *from = file ? file : "DEEPINFER_CLUSTER_KEY";
    if (n < DI_KV_CLUSTER_KEY_MIN || n > DI_KV_CLUSTER_KEY_MAX) {
        free(data);
        return di_errorf("cluster key (%s%s): %zu bytes, expected %d to %d (a shared secret, e.g. `openssl rand -hex 32`)",
                         file ? "--cluster-key " : "", from, n, DI_KV_CLUSTER_KEY_MIN, DI_KV_CLUSTER_KEY_MAX);
    }
    *key = (uint8_t *)data;
    *len = n;
    return 0;
}

int di_kv_cluster_token(const uint8_t *key, size_t len, char out[65]) {
    static const char label[] = "deepinfer cluster: worker-internal HTTP, v1";
    uint8_t mac[DI_KV_KEY_DIGEST];
    unsigned n = 0;
    if (!key || !len || len > INT32_MAX || !out) return di_errorf("cluster token: bad arguments");
    if (!HMAC(EVP_sha256(), key, (int)len, (const unsigned char *)label, sizeof label - 1, mac, &n) || n != sizeof mac)
        return di_errorf("cluster token: HMAC-SHA256 failed");
    for (size_t i = 0; i < sizeof mac; i++) snprintf(out + 2 * i, 3, "%02x", mac[i]);
    return 0;
}

int di_kv_cluster_token_ok(const uint8_t *key, size_t len, const char *token) {
    char want[65];
    if (!token || strlen(token) != 64 || di_kv_cluster_token(key, len, want) != 0) return 0;
    return CRYPTO_memcmp(want, token, 64) == 0;
}

int di_kv_msg_proof_ok(const DiKvRegMsg *m, const uint8_t *key, size_t key_len) {
    uint8_t want[DI_KV_KEY_DIGEST];
    if (di_kv_msg_prove(m, key, key_len, want) != 0) return 0;
    return CRYPTO_memcmp(want, m->proof, sizeof want) == 0;
}
