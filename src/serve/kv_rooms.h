/* kv_rooms.h — the decode side's per-room state of KV transfers (kv_transfer.h), without UCX:
 * chunk assembly, the request's exact state (STATE) held until its waiter takes it, storing and pinning received blocks in the KV block cache, the state machine
 * NEW -> TRANSFERRING -> DONE | ABORTED | EXPIRED (monotonic; a message for a finished room is
 * ignored), leases, waiters.  Thread-safe (one mutex; a condition variable wakes waiters).
 * `conn` identifies the connection a room's messages came from (opaque): the first connection to
 * send for a room owns it, a broken connection aborts exactly its unfinished rooms, and a
 * message from another connection for an owned, unfinished room is refused (-1): the receiver
 * drops that peer, and the room goes on. */
#ifndef DI_SERVE_KV_ROOMS_H
#define DI_SERVE_KV_ROOMS_H

#include "serve/kv_transfer.h"

typedef struct DiKvRooms DiKvRooms;

#define DI_KV_ROOMS_PER_CONN 64 /* unfinished rooms one connection may hold */

DiKvRooms *di_kv_rooms_create(DiKvCache *cache, uint64_t block_bytes, double lease_s, double grace_s, int max_rooms);
/* Unpins every room's blocks. */
void di_kv_rooms_free(DiKvRooms *t);

/* A chunk [offset, offset + len) of a block of `total` bytes; the block is stored and pinned
 * once all its chunks are in (a duplicated chunk, or a block already held, counts once).  -1
 * (with the cause) on a malformed chunk (wrong total, out of range, off the sender's chunk grid)
 * or a room conn may not claim (another connection's, or one too many); a message for a finished
 * room is ignored (0). */
int di_kv_rooms_chunk(DiKvRooms *t, const void *conn, uint64_t room, DiKvKey key, uint64_t total, uint64_t offset,
                      const void *data, size_t len);
/* BEGIN: the room's messages come from `conn` (its loss aborts the room).  -1 as for a chunk. */
int di_kv_rooms_begin(DiKvRooms *t, const void *conn, uint64_t room);
/* DONE: the room is complete once n_blocks blocks and a state of state_bytes (0: none) are in.
 * A repeated DONE with the same counts changes nothing; -1 for one with other counts, or as for
 * a chunk. */
int di_kv_rooms_done(DiKvRooms *t, const void *conn, uint64_t room, uint32_t n_blocks, uint64_t state_bytes);
/* A chunk [offset, offset + len) of the room's state of `total` bytes (at most the set maximum,
 * default 4 GiB).  -1 with the cause on a malformed chunk. */
int di_kv_rooms_state_chunk(DiKvRooms *t, const void *conn, uint64_t room, uint64_t total, uint64_t offset,
                            const void *data, size_t len);
void di_kv_rooms_set_max_state(DiKvRooms *t, uint64_t bytes);
/* The byte budget of the pool of reused state buffers (at most 4 buffers; default 256 MiB; 0
 * keeps none).  Lowering it frees what no longer fits. */
void di_kv_rooms_set_state_pool(DiKvRooms *t, uint64_t bytes);
/* A taken state (blob of len bytes, from di_kv_rooms_take_state) handed back for reuse: pooled
 * when it fits the budget, else freed.  NULL blob: a no-op. */
void di_kv_rooms_recycle_state(DiKvRooms *t, void *blob, size_t len);
/* A DONE room's state, moved to the caller (*blob NULL when it has none or it was taken). */
int di_kv_rooms_take_state(DiKvRooms *t, uint64_t room, void **blob, size_t *len);
/* ABORT from conn: the room ends (known or not: a waiter arriving later sees ABORTED).  -1 when
 * another connection owns it (the room goes on). */
int di_kv_rooms_abort(DiKvRooms *t, const void *conn, uint64_t room);
/* The connection broke: its rooms not yet DONE are aborted. */
void di_kv_rooms_conn_lost(DiKvRooms *t, const void *conn);

/* The longest a room is waited for, however the prefill progresses (an hour, as the largest
 * X-DI-Room-Deadline-Ms). */
#define DI_KV_ROOM_WAIT_MAX_S 3600.0
DiRoomState di_kv_rooms_wait(DiKvRooms *t, uint64_t room, double idle_s, bool (*cancel)(void *), void *arg);
void di_kv_rooms_release(DiKvRooms *t, uint64_t room);
void di_kv_rooms_reap(DiKvRooms *t, double now);
DiRoomState di_kv_rooms_state(DiKvRooms *t, uint64_t room);
/* Fills the room fields of a DiKvRecvStats (the rest is the caller's). */
void di_kv_rooms_stats(DiKvRooms *t, DiKvRecvStats *out);

#endif
