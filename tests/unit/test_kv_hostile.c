/* test_kv_hostile.c — the PD transfer listener (kv_transfer.h) against hostile peers, both ends
 * in one process over loopback.  An honest sender transfers a room while another peer, registered
 * or not, sends what no honest sender sends: a chunk for the honest room, an ABORT of it, a
 * header of the wrong size, a block of another size, a chunk off the grid, a state over the
 * limit, a DONE contradicting its first, one room too many, messages before registering, or
 * nothing at all.  Each time the hostile peer is dropped (its connection closed, counted in
 * peers_dropped, its own rooms aborted) and the honest room completes with its exact bytes.
 * The cluster key: a receiver with a key registers only senders with the same key, refuses one
 * with another key, none, or a key when it has none, and a replayed or stale registration. */
#include "test.h"

#include "base/error.h"
#include "base/log.h"
#include "serve/kv_msg.h"
#include "serve/kv_transfer.h"

#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

enum { BT = 256 };
#define BLOCK_BYTES ((size_t)300 * 1024 + 7) /* two chunks, the last one short */
#define HONEST_ROOM 1001u

static const uint8_t KEY[] = "correct horse battery staple";

static DiKvIdentity identity(const uint8_t *key, size_t key_len) {
    DiKvIdentity id = {.fingerprint = di_kv_fingerprint("hostile-test", 12), .block_tokens = BT,
                       .block_bytes = BLOCK_BYTES, .page_bytes = 4096, .cluster_key = key, .cluster_key_len = key_len};
    return id;
}

static double in(double s) { return di_kv_now() + s; }

typedef struct {
    DiKvCache *c;
    DiKvRecv *r;
    DiKvSend *honest;
    uint8_t *blk;
} Setup;

static int setup(Setup *t, const uint8_t *key, size_t key_len) {
    memset(t, 0, sizeof *t);
    DiKvCacheOptions co = {.ram_bytes = (size_t)64 << 20, .block_tokens = BT};
    t->c = di_kv_cache_open(&co);
    DiKvRecvOptions o = {.host = "127.0.0.1", .identity = identity(key, key_len), .cache = t->c, .lease_s = 30,
                         .grace_s = 5, .max_state_bytes = (uint64_t)1 << 20, .register_timeout_s = 0.5};
    t->r = t->c ? di_kv_recv_start(&o) : NULL;
    t->blk = malloc(BLOCK_BYTES);
    for (size_t i = 0; t->blk && i < BLOCK_BYTES; i++) t->blk[i] = (uint8_t)(i * 131 + 7);
    DiKvIdentity id = identity(key, key_len);
    if (t->r) t->honest = di_kv_send_connect(di_kv_recv_address(t->r), &id, in(10));
    CHECK_MSG(t->r && t->honest && t->blk, "%s", di_error_message());
    return t->r && t->honest && t->blk ? 0 : -1;
}

static void teardown(Setup *t) {
    di_kv_send_close(t->honest);
    di_kv_recv_stop(t->r);
    di_kv_cache_close(t->c);
    free(t->blk);
}

static DiKvRecvStats stats(DiKvRecv *r) {
    DiKvRecvStats st;
    di_kv_recv_stats(r, &st);
    return st;
}

/* The honest room, begun before the attack, completed after it, byte-exact. */
static void honest_begin(Setup *t) {
    CHECK_EQ_INT(di_kv_send_begin(t->honest, HONEST_ROOM, in(10)), 0);
    CHECK_EQ_INT(di_kv_send_block(t->honest, HONEST_ROOM, (DiKvKey){7, 7}, t->blk, BLOCK_BYTES, in(10)), 0);
}

static void honest_finish(Setup *t, const char *attack) {
    CHECK_MSG(di_kv_send_done(t->honest, HONEST_ROOM, 1, 0, in(10)) == 0, "%s: the honest sender: %s", attack, di_error_message());
    CHECK_MSG(di_kv_recv_wait(t->r, HONEST_ROOM, 10, NULL, NULL) == DI_ROOM_DONE, "%s: the honest room did not finish", attack);
    uint8_t *got = malloc(BLOCK_BYTES);
    size_t len = 0;
    CHECK(got && di_kv_cache_read(t->c, (DiKvKey){7, 7}, got, BLOCK_BYTES, &len) == 1 && len == BLOCK_BYTES &&
          memcmp(got, t->blk, BLOCK_BYTES) == 0);
    free(got);
}

/* The hostile peer's connection is closed by the receiver (within 3 s). */
static void dropped(DiKvSend *x, DiKvRecv *r, uint64_t before, const char *attack) {
    int alive = 1;
    for (int i = 0; i < 30 && alive; i++) alive = di_kv_send_alive(x, 0.1);
    CHECK_MSG(!alive, "%s: the hostile peer's connection is still open", attack);
    CHECK_MSG(stats(r).peers_dropped == before + 1, "%s: %llu peers dropped, %llu expected", attack,
              (unsigned long long)stats(r).peers_dropped, (unsigned long long)before + 1);
}

static DiKvChunkHdr chunk_hdr(uint64_t room, DiKvKey key, uint64_t total, uint64_t offset) {
    return (DiKvChunkHdr){room, key.lo, key.hi, total, offset};
}

typedef enum {
    HIJACK_CHUNK, ABORT_OTHERS, SHORT_HEADER, WRONG_BLOCK_SIZE, OFF_GRID, STATE_TOO_BIG, DONE_CONTRADICTS,
    TOO_MANY_ROOMS, PAYLOAD_ON_DONE, UNKNOWN_ID, N_ATTACKS
} Attack;

static const char *const attack_names[N_ATTACKS] = {
    "a chunk for another connection's room", "an ABORT of another connection's room", "a BLOCK header of 10 bytes",
    "a block of another size", "a chunk off the grid", "a state over the limit", "a DONE contradicting its first",
    "one room too many", "a DONE with a payload", "an unknown message id"};

/* Run one attack from registered peer x (its own rooms from 2000 up); x's room 2000, begun
 * before the attack, must end ABORTED with x dropped. */
static void attack(DiKvSend *x, Attack a, const uint8_t *blk) {
    DiKvChunkHdr h;
    DiKvDoneMsg done = {.room = 2000, .n_blocks = 3};
    uint64_t room = HONEST_ROOM;
    switch (a) {
    case HIJACK_CHUNK:
        h = chunk_hdr(HONEST_ROOM, (DiKvKey){8, 8}, BLOCK_BYTES, 0);
        di_kv_send_raw(x, DI_KV_AM_BLOCK, &h, sizeof h, blk, DI_KV_CHUNK_BYTES, in(5));
        break;
    case ABORT_OTHERS: di_kv_send_raw(x, DI_KV_AM_ABORT, &room, sizeof room, NULL, 0, in(5)); break;
    case SHORT_HEADER:
        h = chunk_hdr(2000, (DiKvKey){9, 9}, BLOCK_BYTES, 0);
        di_kv_send_raw(x, DI_KV_AM_BLOCK, &h, 10, blk, 100, in(5));
        break;
    case WRONG_BLOCK_SIZE:
        h = chunk_hdr(2000, (DiKvKey){9, 9}, 4096, 0);
        di_kv_send_raw(x, DI_KV_AM_BLOCK, &h, sizeof h, blk, 4096, in(5));
        break;
    case OFF_GRID:
        h = chunk_hdr(2000, (DiKvKey){9, 9}, BLOCK_BYTES, 1);
        di_kv_send_raw(x, DI_KV_AM_BLOCK, &h, sizeof h, blk, 100, in(5));
        break;
    case STATE_TOO_BIG:
        h = chunk_hdr(2000, (DiKvKey){0, 0}, (uint64_t)5 << 30, 0);
        di_kv_send_raw(x, DI_KV_AM_STATE, &h, sizeof h, blk, DI_KV_CHUNK_BYTES, in(5));
        break;
    case DONE_CONTRADICTS:
        di_kv_send_raw(x, DI_KV_AM_DONE, &done, sizeof done, NULL, 0, in(5));
        done.n_blocks = 4;
        di_kv_send_raw(x, DI_KV_AM_DONE, &done, sizeof done, NULL, 0, in(5));
        break;
    case TOO_MANY_ROOMS:
        for (uint64_t k = 1; k <= 64; k++) di_kv_send_begin(x, 2000 + k, in(5));
        break;
    case PAYLOAD_ON_DONE: di_kv_send_raw(x, DI_KV_AM_DONE, &done, sizeof done, blk, 64, in(5)); break;
    case UNKNOWN_ID: di_kv_send_raw(x, 17, &room, sizeof room, NULL, 0, in(5)); break;
    default: break;
    }
}

TEST(a_registered_hostile_peer_is_dropped_and_the_honest_room_completes) {
    di_log_set_level(DI_LOG_ERROR);
    for (int a = 0; a < N_ATTACKS; a++) {
        Setup t;
        if (setup(&t, NULL, 0) != 0) {
            teardown(&t);
            break;
        }
        honest_begin(&t);
        DiKvIdentity id = identity(NULL, 0);
        DiKvSend *x = di_kv_send_connect(di_kv_recv_address(t.r), &id, in(10));
        CHECK(x != NULL);
        if (x) {
            CHECK_EQ_INT(di_kv_send_begin(x, 2000, in(5)), 0);
            uint64_t before = stats(t.r).peers_dropped;
            attack(x, (Attack)a, t.blk);
            dropped(x, t.r, before, attack_names[a]);
            CHECK_MSG(di_kv_recv_state(t.r, 2000) == DI_ROOM_ABORTED, "%s: the hostile peer's own room is %s", attack_names[a],
                      di_room_state_name(di_kv_recv_state(t.r, 2000)));
            CHECK_MSG(di_kv_recv_state(t.r, HONEST_ROOM) == DI_ROOM_TRANSFERRING, "%s: the honest room is %s", attack_names[a],
                      di_room_state_name(di_kv_recv_state(t.r, HONEST_ROOM)));
        }
        honest_finish(&t, attack_names[a]);
        di_kv_send_close(x);
        teardown(&t);
    }
    di_log_set_level(DI_LOG_INFO);
}

TEST(an_unregistered_peer_is_dropped_when_it_sends_or_stays_silent) {
    di_log_set_level(DI_LOG_ERROR);
    Setup t;
    if (setup(&t, NULL, 0) == 0) {
        honest_begin(&t);
        /* a BEGIN before any registration */
        DiKvSend *x = di_kv_send_connect_unregistered(di_kv_recv_address(t.r), in(5));
        CHECK(x != NULL);
        uint64_t before = stats(t.r).peers_dropped, room = HONEST_ROOM;
        di_kv_send_raw(x, DI_KV_AM_ABORT, &room, sizeof room, NULL, 0, in(5));
        dropped(x, t.r, before, "an ABORT before registering");
        di_kv_send_close(x);
        /* a connection that never registers: dropped at the registration timeout (0.5 s here) */
        x = di_kv_send_connect_unregistered(di_kv_recv_address(t.r), in(5));
        CHECK(x != NULL);
        before = stats(t.r).peers_dropped;
        dropped(x, t.r, before, "a silent connection");
        di_kv_send_close(x);
        honest_finish(&t, "unregistered peers");
        CHECK_EQ_INT(stats(t.r).connections, 1);
    }
    teardown(&t);
    di_log_set_level(DI_LOG_INFO);
}

/* A registration message built here (the hostile peer's own), with the key's proof or not. */
static DiKvRegMsg registration(const uint8_t *key, size_t key_len, int64_t clock_offset_s) {
    DiKvIdentity id = identity(key, key_len);
    DiKvRegMsg m = {.magic = DI_KV_MSG_MAGIC, .version = DI_KV_PROTO_VERSION, .fp_lo = id.fingerprint.lo,
                    .fp_hi = id.fingerprint.hi, .block_tokens = BT, .block_bytes = BLOCK_BYTES, .page_bytes = 4096,
                    .time_s = (uint64_t)((int64_t)time(NULL) + clock_offset_s)};
    CHECK(getrandom(m.nonce, sizeof m.nonce, 0) == (ssize_t)sizeof m.nonce);
    CHECK_EQ_INT(di_kv_msg_prove(&m, key, key_len, m.proof), 0);
    return m;
}

/* Send REGISTER m on a fresh connection; 1 registered, 0 refused (by the receiver's counters). */
static int registers(DiKvRecv *r, const DiKvRegMsg *m) {
    DiKvRecvStats st0 = stats(r);
    DiKvSend *x = di_kv_send_connect_unregistered(di_kv_recv_address(r), in(5));
    CHECK(x != NULL);
    di_kv_send_raw(x, DI_KV_AM_REGISTER, m, sizeof *m, NULL, 0, in(5));
    int got = -1;
    for (int i = 0; i < 100 && got < 0; i++) {
        di_kv_send_alive(x, 0.02);
        DiKvRecvStats st = stats(r);
        if (st.connections > st0.connections) got = 1;
        else if (st.refused > st0.refused) got = 0;
    }
    di_kv_send_close(x);
    for (int i = 0; i < 100 && stats(r).connections > st0.connections; i++) usleep(10000);
    return got;
}

TEST(the_cluster_key_admits_only_senders_that_share_it) {
    di_log_set_level(DI_LOG_ERROR);
    Setup t;
    static const uint8_t OTHER[] = "another key";
    if (setup(&t, KEY, sizeof KEY - 1) == 0) { /* the honest sender registered with the key */
        honest_begin(&t);
        DiKvIdentity none = identity(NULL, 0), other = identity(OTHER, sizeof OTHER - 1);
        CHECK(di_kv_send_connect(di_kv_recv_address(t.r), &none, in(5)) == NULL);
        CHECK(strstr(di_error_message(), "cluster key mismatch: the sender has none") != NULL);
        CHECK(di_kv_send_connect(di_kv_recv_address(t.r), &other, in(5)) == NULL);
        CHECK(strstr(di_error_message(), "cluster key mismatch: the sender has another key") != NULL);
        DiKvRegMsg good = registration(KEY, sizeof KEY - 1, 0);
        CHECK_EQ_INT(registers(t.r, &good), 1);
        CHECK_EQ_INT(registers(t.r, &good), 0); /* the same message again: a replay */
        DiKvRegMsg stale = registration(KEY, sizeof KEY - 1, -1000);
        CHECK_EQ_INT(registers(t.r, &stale), 0);
        DiKvRegMsg forged = registration(KEY, sizeof KEY - 1, 0);
        forged.nonce[0] ^= 1; /* the proof covers identity, time and nonce: a changed byte breaks it */
        CHECK_EQ_INT(registers(t.r, &forged), 0);
        CHECK(stats(t.r).refused >= 5);
        honest_finish(&t, "cluster key");
    }
    teardown(&t);
    /* a receiver without a key refuses a sender with one (a misconfigured cluster) */
    if (setup(&t, NULL, 0) == 0) {
        DiKvIdentity keyed = identity(KEY, sizeof KEY - 1);
        CHECK(di_kv_send_connect(di_kv_recv_address(t.r), &keyed, in(5)) == NULL);
        CHECK(strstr(di_error_message(), "the sender has a cluster key and this decode worker none") != NULL);
    }
    teardown(&t);
    di_log_set_level(DI_LOG_INFO);
}

/* The decoder alone: what an honest sender sends passes, the rest is refused with its cause. */
TEST(the_decoder_accepts_exactly_the_honest_messages) {
    DiKvMsgLimits lim = {.block_bytes = BLOCK_BYTES, .max_state_bytes = 1 << 20};
    DiKvMsg m;
    DiKvChunkHdr h = chunk_hdr(5, (DiKvKey){1, 2}, BLOCK_BYTES, DI_KV_CHUNK_BYTES);
    CHECK_EQ_INT(di_kv_msg_decode(DI_KV_AM_BLOCK, &h, sizeof h, BLOCK_BYTES - DI_KV_CHUNK_BYTES, &lim, &m), 0);
    CHECK(m.room == 5 && m.key.lo == 1 && m.offset == DI_KV_CHUNK_BYTES && m.len == BLOCK_BYTES - DI_KV_CHUNK_BYTES);
    CHECK(di_kv_msg_decode(DI_KV_AM_BLOCK, &h, sizeof h, 100, &lim, &m) != 0); /* not the grid's length */
    CHECK(strstr(di_error_message(), "grid gives") != NULL);
    h.offset = BLOCK_BYTES; /* past the end */
    CHECK(di_kv_msg_decode(DI_KV_AM_BLOCK, &h, sizeof h, 1, &lim, &m) != 0);
    h = chunk_hdr(5, (DiKvKey){0, 0}, (1 << 20) + 1, 0);
    CHECK(di_kv_msg_decode(DI_KV_AM_STATE, &h, sizeof h, DI_KV_CHUNK_BYTES, &lim, &m) != 0);
    CHECK(strstr(di_error_message(), "at most 1048576 accepted") != NULL);
    h = chunk_hdr(5, (DiKvKey){3, 0}, 100, 0); /* a state chunk naming a block key */
    CHECK(di_kv_msg_decode(DI_KV_AM_STATE, &h, sizeof h, 100, &lim, &m) != 0);
    h.key_lo = 0;
    CHECK_EQ_INT(di_kv_msg_decode(DI_KV_AM_STATE, &h, sizeof h, 100, &lim, &m), 0);
    DiKvDoneMsg d = {.room = 9, .n_blocks = 2, .state_bytes = 1 << 21};
    CHECK(di_kv_msg_decode(DI_KV_AM_DONE, &d, sizeof d, 0, &lim, &m) != 0);
    d.state_bytes = 10;
    CHECK_EQ_INT(di_kv_msg_decode(DI_KV_AM_DONE, &d, sizeof d, 0, &lim, &m), 0);
    CHECK(m.room == 9 && m.n_blocks == 2 && m.state_bytes == 10);
    uint64_t room = 4;
    CHECK_EQ_INT(di_kv_msg_decode(DI_KV_AM_BEGIN, &room, sizeof room, 0, &lim, &m), 0);
    CHECK(di_kv_msg_decode(DI_KV_AM_BEGIN, &room, 4, 0, &lim, &m) != 0);
    CHECK(di_kv_msg_decode(DI_KV_AM_REG_REPLY, &room, sizeof room, 0, &lim, &m) != 0); /* a sender never sends it */
    CHECK(di_kv_msg_decode(0, NULL, 0, 0, &lim, &m) != 0);
    DiKvRegMsg reg = registration(KEY, sizeof KEY - 1, 0);
    CHECK_EQ_INT(di_kv_msg_decode(DI_KV_AM_REGISTER, &reg, sizeof reg, 0, &lim, &m), 0);
    CHECK(di_kv_msg_proof_ok(&m.reg, KEY, sizeof KEY - 1));
    CHECK(!di_kv_msg_proof_ok(&m.reg, KEY, sizeof KEY - 2));
    reg.version = 2;
    CHECK(di_kv_msg_decode(DI_KV_AM_REGISTER, &reg, sizeof reg, 0, &lim, &m) != 0);
}

int main(void) {
    RUN_TEST(the_decoder_accepts_exactly_the_honest_messages);
    RUN_TEST(a_registered_hostile_peer_is_dropped_and_the_honest_room_completes);
    RUN_TEST(an_unregistered_peer_is_dropped_when_it_sends_or_stays_silent);
    RUN_TEST(the_cluster_key_admits_only_senders_that_share_it);
    return TEST_SUMMARY();
}
