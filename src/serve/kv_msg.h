/* kv_msg.h — the wire format of the PD KV transfer (kv_transfer.h) and its decoder, apart from
 * UCX so that a fuzzer and the tests drive it directly.
 *
 * Every message is a UCX active message: an id (DiKvAm), a fixed header (the structs below, host
 * byte order: both ends run this code on little-endian hosts) and, for BLOCK and STATE, the
 * chunk's bytes.  The receiver trusts no sender: di_kv_msg_decode accepts exactly the messages an
 * honest sender of this protocol version produces (right id, right header size, a chunk on the
 * sender's DI_KV_CHUNK_BYTES grid of a block of the registered size or of a state within the
 * receiver's limit) and names what is wrong with any other; kv_transfer.c then drops the peer
 * that sent it, aborting its rooms and nobody else's. */
#ifndef DI_SERVE_KV_MSG_H
#define DI_SERVE_KV_MSG_H

#include "engine/kvcache/block_key.h"

#include <stddef.h>
#include <stdint.h>

#define DI_KV_MSG_MAGIC 0x44494b56u /* "DIKV" */
#define DI_KV_PROTO_VERSION 3u      /* 3: the cluster key's digest in the registration */
#define DI_KV_CHUNK_BYTES ((size_t)256 << 10) /* the largest message body (Mooncake slices at 64 KB) */
#define DI_KV_KEY_DIGEST 32          /* bytes of the cluster key proof in REGISTER */
#define DI_KV_PROOF_SKEW_S 300       /* how far a registration's clock may be from the receiver's */

typedef enum { DI_KV_AM_REGISTER = 1, DI_KV_AM_REG_REPLY, DI_KV_AM_BLOCK, DI_KV_AM_DONE, DI_KV_AM_ABORT, DI_KV_AM_BEGIN, DI_KV_AM_STATE } DiKvAm;

typedef struct {
    uint32_t magic, version;
    uint64_t fp_lo, fp_hi;
    int32_t block_tokens;
    uint32_t pad;
    uint64_t block_bytes;
    uint64_t page_bytes;
    uint64_t time_s;                   /* the sender's wall clock (a proof is good for DI_KV_PROOF_SKEW_S) */
    uint8_t nonce[16];                 /* the sender's, fresh per connection (a replayed one is refused) */
    uint8_t proof[DI_KV_KEY_DIGEST];   /* HMAC-SHA256(cluster key, the fields above); zero without a key */
} DiKvRegMsg;

typedef struct {
    int32_t ok;
    char message[400];
} DiKvRegReply;

/* A chunk of a BLOCK (key = the block's) or of a STATE (key zero). */
typedef struct {
    uint64_t room, key_lo, key_hi, total, offset;
} DiKvChunkHdr;

typedef struct {
    uint64_t room;
    uint32_t n_blocks, pad;
    uint64_t state_bytes;
} DiKvDoneMsg;

/* What the receiver accepts. */
typedef struct {
    uint64_t block_bytes;     /* a BLOCK's total, exactly */
    uint64_t max_state_bytes; /* a STATE's total, at most (> 0) */
} DiKvMsgLimits;

/* One decoded message (the fields its kind has; the rest zero). */
typedef struct {
    DiKvAm kind;
    uint64_t room;
    DiKvKey key;             /* BLOCK */
    uint64_t total, offset;  /* BLOCK, STATE */
    size_t len;              /* BLOCK, STATE: the chunk's bytes */
    uint32_t n_blocks;       /* DONE */
    uint64_t state_bytes;    /* DONE */
    DiKvRegMsg reg;          /* REGISTER */
} DiKvMsg;

/* Decode message `am` with header bytes hdr[0, hdr_len) and a payload of data_len bytes (sent by
 * a peer, so anything) into *out.  0 when an honest sender could have sent it; -1 naming the fault
 * otherwise: an unknown id, a header of the wrong size, a payload on a message without one, a
 * REGISTER of another protocol, a chunk that is empty, off the chunk grid, past its total or
 * larger than DI_KV_CHUNK_BYTES, a block whose total is not the registered block size, a state
 * of 0 bytes or over max_state_bytes, a DONE announcing a state over it. */
int di_kv_msg_decode(unsigned am, const void *hdr, size_t hdr_len, size_t data_len, const DiKvMsgLimits *lim, DiKvMsg *out);

/* The proof a registration carries: HMAC-SHA256 keyed by the cluster key over the message's
 * bytes before `proof` (identity, time and nonce); all zero for an empty key.  -1 on failure. */
int di_kv_msg_prove(const DiKvRegMsg *m, const uint8_t *key, size_t key_len, uint8_t out[DI_KV_KEY_DIGEST]);
/* Whether m's proof is right for the key (constant time in the proof bytes). */
int di_kv_msg_proof_ok(const DiKvRegMsg *m, const uint8_t *key, size_t key_len);

/* ---- the cluster key (serve and gateway --cluster-key) ---- */

#define DI_KV_CLUSTER_KEY_MIN 16   /* bytes: a shorter key is refused as no secret */
#define DI_KV_CLUSTER_KEY_MAX 4096

/* The cluster key from `file` (its bytes, trailing whitespace dropped), else from
 * DEEPINFER_CLUSTER_KEY, else none (*key NULL, *len 0).  -1 naming the file or the variable when
 * it cannot be read, or the key is shorter than DI_KV_CLUSTER_KEY_MIN or longer than the max.
 * *key is malloc'd. */
int di_kv_cluster_key_load(const char *file, uint8_t **key, size_t *len);
/* The token the gateway sends worker-internal HTTP requests in X-DI-Cluster-Key: 64 hex digits
 * of HMAC-SHA256(key, a fixed label), so the key itself never crosses the wire. */
int di_kv_cluster_token(const uint8_t *key, size_t len, char out[65]);
/* Whether `token` (NULL: absent) is the key's (constant time). */
int di_kv_cluster_token_ok(const uint8_t *key, size_t len, const char *token);

#endif
