/* kv_transfer.h — moving a request's exact state (and KV blocks) from a prefill worker to a
 * decode worker over UCX (serving.md §5.3, the PD contract of issue 24).
 *
 * The decode worker runs a receiver (DiKvRecv): a UCX listener on host:port and one progress
 * thread that owns the UCX worker.  A prefill worker opens a sender (DiKvSend) to it for each
 * request: the connection first registers the KV identity (model fingerprint, block_tokens,
 * block byte size, state page byte size); a receiver whose identity differs refuses the registration and the sender's
 * connect fails with both identities named, before any block moves.  Then, all tagged with the
 * request's 64-bit room id:
 *   BEGIN(room)              the room is this connection's (sent before the prefill runs, so a
 *                            sender that dies while prefilling aborts the room at once);
 *   STATE(room, bytes)       the request's exact state (engine.h di_engine_export_state: the
 *                            prompt less its last token, tokens and state pages), chunked;
 *                            held for the room's waiter (di_kv_recv_take_state), who imports it
 *                            into its engine, so the decode continues exactly as a cold run;
 *   BLOCK(room, key, bytes)  one cache block, cut into chunks of at most DI_KV_CHUNK_BYTES
 *                            (the prefill worker sends the state instead; blocks stay for tools);
 *   DONE(room, n_blocks, state_bytes)  the room is complete once n_blocks blocks and a state of
 *                            state_bytes (0: none) have arrived;
 *   ABORT(room)              the prefill failed or its client left.
 * Each received block goes into the decode worker's KV block cache (kv_cache.h) and is pinned
 * there, so the engine's prefix lookup finds it and eviction cannot take it while the request
 * waits.  Per room (monotonic, idempotent): NEW -> TRANSFERRING -> DONE | ABORTED | EXPIRED; a
 * message for a room already DONE, ABORTED or EXPIRED changes nothing.  A room holds its pins
 * until di_kv_recv_release (the request was submitted or gave up) or until its lease runs out
 * (expiry unpins; a room never released is not leaked); the blocks of a room that did not reach
 * DONE are then dropped from the cache's RAM tier.  A sender that dies mid-room (its
 * connection breaks) aborts its unfinished rooms, so the waiter falls back at once.
 *
 * Every wait is bounded: connect + registration, each send, the close, and di_kv_recv_wait (a
 * deadline that is not finite and within a day is refused).
 *
 * The receiver trusts no peer (kv_msg.h decodes every message): a connection must register
 * in time (5 s by default), with the cluster key's proof when the receiver has a key (a proof older or newer
 * than 5 minutes, or one seen before, is refused); a connection that sends anything before
 * registering, a malformed, oversized or out-of-order message (a chunk off the grid or past its
 * block, a block of another size, a state over the limit, a room another connection owns, a
 * DONE that contradicts its first, more than 64 live rooms) is dropped: its rooms are aborted,
 * every other connection's rooms go on. */
#ifndef DI_SERVE_KV_TRANSFER_H
#define DI_SERVE_KV_TRANSFER_H

#include "base/env.h"
#include "engine/kvcache/block_key.h"
#include "engine/kvcache/kv_cache.h"
#include "serve/kv_msg.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>


/* What both ends must agree on (checked at registration). */
typedef struct {
    DiKvKey fingerprint; /* the engine's model fingerprint (block keys are derived from it) */
    int block_tokens;    /* B */
    uint64_t block_bytes; /* one block's payload */
    uint64_t page_bytes;  /* one state page (the layout of a STATE's pages) */
    /* The cluster key the gateway and the workers share (serve --cluster-key); NULL / 0: none.
     * Never sent: a registration carries HMAC-SHA256(key, identity, time, nonce) instead, and a
     * receiver with a key refuses a sender without the same key (and the reverse). */
    const uint8_t *cluster_key;
    size_t cluster_key_len;
} DiKvIdentity;

typedef enum {
    DI_ROOM_NONE = -1, /* unknown room */
    DI_ROOM_NEW = 0,
    DI_ROOM_TRANSFERRING,
    DI_ROOM_DONE,
    DI_ROOM_ABORTED,
    DI_ROOM_EXPIRED,
} DiRoomState;

#define DI_ROOM_STATES 5
const char *di_room_state_name(DiRoomState s);

/* ---- the receiver (decode worker) ---- */

typedef struct {
    const char *host;      /* address to listen on (IPv4); NULL: 127.0.0.1 */
    int port;              /* 0: an ephemeral port (di_kv_recv_port) */
    DiKvIdentity identity;
    DiKvCache *cache;      /* where received blocks go (pinned); not owned */
    double lease_s;        /* a room nobody waits for expires this long after its first message;
                              0: 40 s (the default deadline 30 s + 10 s) */
    double grace_s;        /* a waited-for room's lease ends this long after its waiter's deadline;
                              0: 10 s */
    int max_rooms;         /* rooms tracked at once (older finished ones are forgotten); 0: 4096 */
    uint64_t max_state_bytes; /* the largest STATE accepted (a larger one drops its sender); 0: 4 GiB */
    double register_timeout_s; /* a connection not registered by then is dropped; 0: 5 s */
} DiKvRecvOptions;

typedef struct {
    uint64_t rooms[DI_ROOM_STATES]; /* rooms that reached each state (NEW: rooms created) */
    uint64_t bytes_received;        /* block payload bytes stored */
    uint64_t blocks_received;
    uint64_t states_received, state_bytes_received; /* complete STATEs and their bytes */
    uint64_t refused;               /* registrations refused (identity or cluster key mismatch, bad message) */
    uint64_t peers_dropped;         /* connections closed for a message no honest sender sends */
    int connections;                /* registered senders connected now */
    int rooms_waiting;              /* requests inside di_kv_recv_wait */
    int pinned_blocks;              /* block pins held by rooms now */
} DiKvRecvStats;

typedef struct DiKvRecv DiKvRecv;

DiKvRecv *di_kv_recv_start(const DiKvRecvOptions *o);
int di_kv_recv_port(const DiKvRecv *r);
/* "HOST:PORT" of the listener (static storage of the receiver). */
const char *di_kv_recv_address(const DiKvRecv *r);
/* Stop the thread, close the connections, unpin every room's blocks, free. */
void di_kv_recv_stop(DiKvRecv *r);

/* Wait until the room is DONE, ABORTED or EXPIRED, or until idle_s seconds pass with no message
 * for it (the deadline follows the prefill's progress: each BEGIN, block or state chunk restarts
 * it; at most DI_KV_ROOM_WAIT_MAX_S in all), or until cancel(arg) returns true (polled every
 * 50 ms; may be NULL).  The room's lease stays past the wait's end by grace_s.  Returns the
 * room's state at return (NEW or TRANSFERRING when idleness or cancel ended the wait), or
 * DI_ROOM_NONE on bad arguments. */
DiRoomState di_kv_recv_wait(DiKvRecv *r, uint64_t room, double idle_s, bool (*cancel)(void *arg), void *arg);
/* The waiter is done with the room (the request is submitted, or gave up): unpin its blocks.
 * The room is remembered as finished, so late messages for it are ignored.  Idempotent. */
void di_kv_recv_release(DiKvRecv *r, uint64_t room);
/* Expire rooms whose lease has run out (the progress thread calls this every 100 ms too). */
void di_kv_recv_reap(DiKvRecv *r);
DiRoomState di_kv_recv_state(DiKvRecv *r, uint64_t room);
/* A DONE room's state, moved to the caller (a heap buffer; *blob NULL when the room sent none or
 * it was taken).  -1 on bad arguments. */
int di_kv_recv_take_state(DiKvRecv *r, uint64_t room, void **blob, size_t *len);
/* A taken state handed back (instead of free) so a later room reuses its pages: pooled while the
 * pool holds fewer than 4 buffers within its byte budget, else freed.  NULL blob: a no-op. */
void di_kv_recv_recycle_state(DiKvRecv *r, void *blob, size_t len);
/* The pool's byte budget (default 256 MiB; 0 keeps no buffer).  Lowering it frees the excess. */
void di_kv_recv_set_state_pool(DiKvRecv *r, uint64_t bytes);
void di_kv_recv_stats(DiKvRecv *r, DiKvRecvStats *out);

/* ---- the sender (prefill worker) ---- */

typedef struct DiKvSend DiKvSend;

/* Connect to "HOST:PORT" and register; fails (NULL, the error naming the address and the cause:
 * unreachable, refused identity with both identities, no answer by the deadline). */
DiKvSend *di_kv_send_connect(const char *address, const DiKvIdentity *id, double deadline);
/* Claim the room for this connection (the room becomes TRANSFERRING).  Sent again while the
 * prefill runs, it says the prefill is progressing (the decode side's idle deadline restarts). */
int di_kv_send_begin(DiKvSend *s, uint64_t room, double deadline);
/* One block (chunked); 0, or -1 with the cause (connection lost, deadline). */
int di_kv_send_block(DiKvSend *s, uint64_t room, DiKvKey key, const void *data, size_t len, double deadline);
/* The request's exact state (chunked); 0, or -1 with the cause. */
int di_kv_send_state(DiKvSend *s, uint64_t room, const void *data, size_t len, double deadline);
/* Bytes [offset, offset + len) of a state of `total` bytes, sent before the rest (PD streaming):
 * offset on the DI_KV_CHUNK_BYTES grid and len whole chunks, or up to the end.  The receiver
 * assembles chunks in any order; each chunk of the state must be sent once (a resent one is
 * ignored). */
int di_kv_send_state_part(DiKvSend *s, uint64_t room, uint64_t total, uint64_t offset, const void *data, size_t len,
                          double deadline);
int di_kv_send_done(DiKvSend *s, uint64_t room, uint32_t n_blocks, uint64_t state_bytes, double deadline);
int di_kv_send_abort(DiKvSend *s, uint64_t room, double deadline);
/* TEST-ONLY fault injection (DEEPINFER_TEST_PD_FAULTS, env.h): from now on this sender drops,
 * duplicates or delays its BEGIN, STATE, DONE and ABORT messages as `f` says (a delay counts
 * against the message's deadline).  NULL f: no faults.  -1 on a NULL sender. */
int di_kv_send_set_faults(DiKvSend *s, const DiEnvPdFaults *f);
/* TEST-ONLY: send REGISTER again on the open connection and wait for the answer (the receiver
 * repeats its first answer and counts the connection once).  0, or -1 with the cause. */
int di_kv_send_register_again(DiKvSend *s, const DiKvIdentity *id, double deadline);
/* TEST-ONLY (a hostile peer): a connection that does not register. */
DiKvSend *di_kv_send_connect_unregistered(const char *address, double deadline);
/* TEST-ONLY (a hostile peer): send message `am` with exactly these header and payload bytes.
 * 0 once sent, or -1 with the cause. */
int di_kv_send_raw(DiKvSend *s, unsigned am, const void *hdr, size_t hdr_len, const void *data, size_t len, double deadline);
/* TEST-ONLY: progress the sender's connection for for_s seconds; 1 while it lives, 0 once the
 * receiver closed it (or it broke). */
int di_kv_send_alive(DiKvSend *s, double for_s);
/* Flush and close (bounded by 2 s), free.  NULL is a no-op. */
void di_kv_send_close(DiKvSend *s);

/* 0 when `address` is an IPv4 "HOST:PORT", else -1 with the cause. */
int di_kv_check_address(const char *address);

/* CLOCK_MONOTONIC seconds (the clock of every deadline here). */
double di_kv_now(void);
/* "hex fingerprint" form of an identity's fingerprint: 32 hex digits + NUL. */
void di_kv_identity_hex(const DiKvIdentity *id, char out[33]);

#endif
