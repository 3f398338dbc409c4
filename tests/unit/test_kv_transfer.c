/* test_kv_transfer.c — the PD KV transfer over UCX (kv_transfer.h) with both ends in one
 * process: the receiver's progress thread and a sender on the test's thread, over loopback.
 * Blocks arrive byte-exact in the receiver's KV cache (pinned), a sender of another identity is
 * refused at registration, ABORT ends a room and later messages for it change nothing, an
 * unreleased room expires at its lease and unpins its blocks, a sender's broken connection
 * aborts its room, and a sender to a port nobody listens on fails fast with a clear error.
 * A STATE (a request's exact state) arrives byte-exact, completes its room only with DONE's
 * state_bytes, and is handed to the waiter once; a sender with another state page size is
 * refused at registration.
 * Test-only faults (DEEPINFER_TEST_PD_FAULTS, di_kv_send_set_faults): duplicated BEGIN, STATE
 * chunks, DONE and ABORT are idempotent (one state, one DONE); a dropped DONE leaves the waiter
 * to its deadline; a STATE delayed within the deadline still completes the room; a dropped
 * ABORT leaves the room to its lease, which unpins it; a malformed fault list is refused.
 * A duplicated block chunk is ignored (the block is stored only once all its bytes are in), and
 * a block sent twice counts once towards DONE's n_blocks.  A connection that registers twice gets
 * its first answer again and is counted once.  A state handed back is reused by the next room. */
#include "test.h"

#include "base/error.h"
#include "serve/kv_rooms.h"
#include "serve/kv_transfer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { BT = 256 };
#define BLOCK_BYTES ((size_t)600 * 1024 + 123) /* three chunks, the last one short */

static DiKvIdentity identity(int block_tokens) {
    DiKvIdentity id = {.fingerprint = di_kv_fingerprint("test-model", 10), .block_tokens = block_tokens,
                       .block_bytes = BLOCK_BYTES, .page_bytes = 4096};
    return id;
}

static DiKvCache *open_cache(void) {
    DiKvCacheOptions o = {.ram_bytes = (size_t)64 << 20, .block_tokens = BT};
    return di_kv_cache_open(&o);
}

static DiKvRecv *start_recv(DiKvCache *c, double lease_s) {
    DiKvRecvOptions o = {.host = "127.0.0.1", .port = 0, .identity = identity(BT), .cache = c, .lease_s = lease_s,
                         .grace_s = lease_s};
    DiKvRecv *r = di_kv_recv_start(&o);
    if (!r) fprintf(stderr, "  receiver: %s\n", di_error_message());
    return r;
}

static void fill_block(uint8_t *b, size_t n, uint32_t seed) {
    test_rng_state = 0x9E3779B97F4A7C15ull ^ seed;
    for (size_t i = 0; i < n; i++) b[i] = (uint8_t)test_rand32();
}

static DiKvKey key_of(int i) { return (DiKvKey){0x1000u + (uint64_t)i, 0xabcdu}; }

static int stat_pinned(DiKvRecv *r) {
    DiKvRecvStats st;
    di_kv_recv_stats(r, &st);
    return st.pinned_blocks;
}

static double in(double s) { return di_kv_now() + s; }

/* A receiver with its cache, a registered sender, and one zeroed block to send. */
typedef struct {
    DiKvCache *c;
    DiKvRecv *r;
    DiKvSend *s;
    uint8_t *blk;
} Pair;

static int pair_open(Pair *p, double lease_s) {
    memset(p, 0, sizeof *p);
    p->c = open_cache();
    p->r = start_recv(p->c, lease_s);
    p->blk = calloc(1, BLOCK_BYTES);
    DiKvIdentity id = identity(BT);
    if (p->r) p->s = di_kv_send_connect(di_kv_recv_address(p->r), &id, in(10));
    CHECK_MSG(p->r && p->s, "%s", di_error_message());
    return p->r && p->s ? 0 : -1;
}

static void pair_close(Pair *p) {
    di_kv_send_close(p->s);
    di_kv_recv_stop(p->r);
    di_kv_cache_close(p->c);
    free(p->blk);
}

TEST(blocks_arrive_byte_exact_and_pinned) {
    Pair p;
    uint8_t *got = malloc(BLOCK_BYTES);
    const uint64_t room = 77;
    if (pair_open(&p, 0) == 0) {
        for (int i = 0; i < 3; i++) {
            fill_block(p.blk, BLOCK_BYTES, (uint32_t)i);
            CHECK_EQ_INT(di_kv_send_block(p.s, room, key_of(i), p.blk, BLOCK_BYTES, in(10)), 0);
        }
        CHECK_EQ_INT(di_kv_send_done(p.s, room, 3, 0, in(10)), 0);
        CHECK_EQ_INT(di_kv_recv_wait(p.r, room, 10, NULL, NULL), DI_ROOM_DONE);
        for (int i = 0; i < 3; i++) {
            size_t len = 0;
            fill_block(p.blk, BLOCK_BYTES, (uint32_t)i);
            CHECK_EQ_INT(di_kv_cache_read(p.c, key_of(i), got, BLOCK_BYTES, &len), 1);
            CHECK_EQ_INT(len, BLOCK_BYTES);
            CHECK(memcmp(p.blk, got, BLOCK_BYTES) == 0);
        }
        DiKvRecvStats st;
        di_kv_recv_stats(p.r, &st);
        CHECK_EQ_INT(st.pinned_blocks, 3);
        CHECK_EQ_INT(st.blocks_received, 3);
        CHECK_EQ_INT(st.bytes_received, 3 * BLOCK_BYTES);
        CHECK_EQ_INT(st.rooms[DI_ROOM_DONE], 1);
        /* idempotent: a duplicate DONE and an ABORT after DONE change nothing */
        CHECK_EQ_INT(di_kv_send_done(p.s, room, 3, 0, in(10)), 0);
        CHECK_EQ_INT(di_kv_send_abort(p.s, room, in(10)), 0);
        usleep(100 * 1000);
        CHECK_EQ_INT(di_kv_recv_state(p.r, room), DI_ROOM_DONE);
        di_kv_recv_release(p.r, room);
        di_kv_recv_release(p.r, room);
        CHECK_EQ_INT(stat_pinned(p.r), 0);
        size_t len = 0; /* a complete room's blocks stay cached, unpinned */
        CHECK_EQ_INT(di_kv_cache_read(p.c, key_of(2), got, BLOCK_BYTES, &len), 1);
    }
    pair_close(&p);
    free(got);
}

TEST(a_state_arrives_byte_exact_once_and_completes_its_room) {
    Pair p;
    const size_t len = 2 * BLOCK_BYTES + 5; /* six chunks, the last one short */
    uint8_t *state = malloc(len);
    const uint64_t room = 91;
    if (state && pair_open(&p, 0) == 0) {
        fill_block(state, len, 42);
        CHECK_EQ_INT(di_kv_send_state(p.s, room, state, len, in(10)), 0);
        usleep(100 * 1000);
        CHECK_EQ_INT(di_kv_recv_state(p.r, room), DI_ROOM_TRANSFERRING); /* no DONE yet */
        CHECK_EQ_INT(di_kv_send_done(p.s, room, 0, len, in(10)), 0);
        CHECK_EQ_INT(di_kv_recv_wait(p.r, room, 10, NULL, NULL), DI_ROOM_DONE);
        void *got = NULL;
        size_t got_len = 0;
        CHECK_EQ_INT(di_kv_recv_take_state(p.r, room, &got, &got_len), 0);
        CHECK(got && got_len == len && memcmp(got, state, len) == 0);
        free(got);
        CHECK_EQ_INT(di_kv_recv_take_state(p.r, room, &got, &got_len), 0);
        CHECK(got == NULL); /* taken once */
        DiKvRecvStats st;
        di_kv_recv_stats(p.r, &st);
        CHECK_EQ_INT(st.states_received, 1);
        CHECK_EQ_INT(st.state_bytes_received, len);
        /* DONE announcing more state than was sent leaves the room unfinished */
        CHECK_EQ_INT(di_kv_send_state(p.s, room + 1, state, 100, in(10)), 0);
        CHECK_EQ_INT(di_kv_send_done(p.s, room + 1, 0, 101, in(10)), 0);
        CHECK_EQ_INT(di_kv_recv_wait(p.r, room + 1, 0.3, NULL, NULL), DI_ROOM_TRANSFERRING);
        di_kv_recv_release(p.r, room);
        di_kv_recv_release(p.r, room + 1);
        /* another state page size is refused at registration */
        DiKvIdentity other = identity(BT);
        other.page_bytes = 8192;
        DiKvSend *s = di_kv_send_connect(di_kv_recv_address(p.r), &other, in(10));
        CHECK(s == NULL);
        CHECK_MSG(strstr(di_error_message(), "8192 bytes/state page") && strstr(di_error_message(), "4096 bytes/state page"),
                  "%s", di_error_message());
        di_kv_send_close(s);
    }
    pair_close(&p);
    free(state);
}

/* A prefill streaming its state: parts out of order on the chunk grid, BEGIN again as it
 * progresses, DONE after 0.8 s, longer than the waiter's 0.3 s idle deadline. */
typedef struct {
    DiKvSend *s;
    uint64_t room;
    const uint8_t *state;
    size_t len;
    int rc;
} Streamer;

static void *stream_state(void *arg) {
    Streamer *st = arg;
    const size_t C = DI_KV_CHUNK_BYTES;
    for (int step = 0; step < 8 && st->rc == 0; step++) {
        usleep(100 * 1000);
        st->rc |= di_kv_send_begin(st->s, st->room, in(5));
        if (step == 2) st->rc |= di_kv_send_state_part(st->s, st->room, st->len, C, st->state + C, C, in(5));
        if (step == 4) st->rc |= di_kv_send_state_part(st->s, st->room, st->len, 2 * C, st->state + 2 * C, st->len - 2 * C, in(5));
        if (step == 6) st->rc |= di_kv_send_state_part(st->s, st->room, st->len, 0, st->state, C, in(5));
    }
    if (st->rc == 0) st->rc = di_kv_send_done(st->s, st->room, 0, st->len, in(5));
    return NULL;
}

TEST(a_streamed_state_keeps_its_waiter_past_the_idle_deadline) {
    Pair p;
    const size_t len = 2 * DI_KV_CHUNK_BYTES + 100;
    uint8_t *state = malloc(len);
    if (state && pair_open(&p, 0) == 0) {
        fill_block(state, len, 7);
        Streamer st = {p.s, 93, state, len, 0};
        CHECK_EQ_INT(di_kv_send_begin(p.s, 93, in(5)), 0);
        pthread_t th;
        CHECK_EQ_INT(pthread_create(&th, NULL, stream_state, &st), 0);
        double t0 = di_kv_now();
        CHECK_EQ_INT(di_kv_recv_wait(p.r, 93, 0.3, NULL, NULL), DI_ROOM_DONE);
        CHECK(di_kv_now() - t0 > 0.6); /* it waited through the progress */
        pthread_join(th, NULL);
        CHECK_MSG(st.rc == 0, "%s", di_error_message());
        void *got = NULL;
        size_t got_len = 0;
        CHECK_EQ_INT(di_kv_recv_take_state(p.r, 93, &got, &got_len), 0);
        CHECK(got && got_len == len && memcmp(got, state, len) == 0);
        free(got);
        di_kv_recv_release(p.r, 93);
        /* a silent prefill: the idle deadline ends the wait */
        CHECK_EQ_INT(di_kv_send_begin(p.s, 94, in(5)), 0);
        t0 = di_kv_now();
        CHECK_EQ_INT(di_kv_recv_wait(p.r, 94, 0.3, NULL, NULL), DI_ROOM_TRANSFERRING);
        CHECK(di_kv_now() - t0 < 1.0);
        di_kv_recv_release(p.r, 94);
        /* parts off the grid are refused before anything is sent */
        CHECK(di_kv_send_state_part(p.s, 95, len, 100, state, DI_KV_CHUNK_BYTES, in(5)) != 0);
        CHECK(di_kv_send_state_part(p.s, 95, len, 0, state, 100, in(5)) != 0);
    }
    pair_close(&p);
    free(state);
}

TEST(identity_mismatch_is_refused_at_registration) {
    Pair p;
    if (pair_open(&p, 0) == 0) {
        DiKvIdentity other = identity(2 * BT);
        DiKvSend *s = di_kv_send_connect(di_kv_recv_address(p.r), &other, in(10));
        CHECK(s == NULL);
        CHECK_MSG(strstr(di_error_message(), "identity mismatch") && strstr(di_error_message(), "512 tokens/block") &&
                      strstr(di_error_message(), "256 tokens/block"),
                  "%s", di_error_message());
        DiKvRecvStats st;
        di_kv_recv_stats(p.r, &st);
        CHECK_EQ_INT(st.refused, 1);
        di_kv_send_close(s);
        /* the receiver still serves a matching sender afterwards (no sticky failure) */
        CHECK_EQ_INT(di_kv_send_done(p.s, 3, 0, 0, in(10)), 0);
        CHECK_EQ_INT(di_kv_recv_wait(p.r, 3, 10, NULL, NULL), DI_ROOM_DONE);
    }
    pair_close(&p);
}

TEST(abort_mid_room_then_late_messages_are_ignored) {
    Pair p;
    const uint64_t room = 5;
    if (pair_open(&p, 0) == 0) {
        CHECK_EQ_INT(di_kv_send_block(p.s, room, key_of(10), p.blk, BLOCK_BYTES, in(10)), 0);
        CHECK_EQ_INT(di_kv_send_abort(p.s, room, in(10)), 0);
        CHECK_EQ_INT(di_kv_recv_wait(p.r, room, 10, NULL, NULL), DI_ROOM_ABORTED);
        CHECK_EQ_INT(di_kv_send_block(p.s, room, key_of(11), p.blk, BLOCK_BYTES, in(10)), 0);
        CHECK_EQ_INT(di_kv_send_done(p.s, room, 2, 0, in(10)), 0);
        usleep(100 * 1000);
        CHECK_EQ_INT(di_kv_recv_state(p.r, room), DI_ROOM_ABORTED);
        CHECK_EQ_INT(stat_pinned(p.r), 1); /* block 10 only, until the waiter lets go */
        di_kv_recv_release(p.r, room);
        CHECK_EQ_INT(stat_pinned(p.r), 0);
        size_t len = 0; /* an aborted room's blocks are dropped: a fallback prefill starts cold */
        CHECK_EQ_INT(di_kv_cache_read(p.c, key_of(10), p.blk, BLOCK_BYTES, &len), 0);
        DiKvRecvStats st;
        di_kv_recv_stats(p.r, &st);
        CHECK_EQ_INT(st.rooms[DI_ROOM_ABORTED], 1);
        CHECK_EQ_INT(st.rooms[DI_ROOM_DONE], 0);
    }
    pair_close(&p);
}

TEST(lease_expiry_unpins_and_wait_is_bounded) {
    Pair p;
    if (pair_open(&p, 0.3) == 0) {
        CHECK_EQ_INT(di_kv_send_block(p.s, 9, key_of(20), p.blk, BLOCK_BYTES, in(10)), 0);
        /* no DONE: a waiter gives up at its deadline with the room still transferring */
        double t0 = di_kv_now();
        CHECK_EQ_INT(di_kv_recv_wait(p.r, 9, 0.2, NULL, NULL), DI_ROOM_TRANSFERRING);
        CHECK(di_kv_now() - t0 < 1.0);
        CHECK_EQ_INT(stat_pinned(p.r), 1);
        /* nobody releases it: at the waiter's deadline + 0.3 s the reaper expires it */
        double until = in(5);
        while (di_kv_recv_state(p.r, 9) != DI_ROOM_EXPIRED && di_kv_now() < until) usleep(20 * 1000);
        CHECK_EQ_INT(di_kv_recv_state(p.r, 9), DI_ROOM_EXPIRED);
        CHECK_EQ_INT(stat_pinned(p.r), 0);
        CHECK_EQ_INT(di_kv_recv_wait(p.r, 9, 1, NULL, NULL), DI_ROOM_EXPIRED);
    }
    pair_close(&p);
}

TEST(a_sender_that_goes_away_aborts_its_rooms) {
    Pair p;
    if (pair_open(&p, 0) == 0) {
        CHECK_EQ_INT(di_kv_send_begin(p.s, 30, in(10)), 0); /* claimed, nothing sent yet */
        CHECK_EQ_INT(di_kv_send_block(p.s, 31, key_of(30), p.blk, BLOCK_BYTES, in(10)), 0);
        double t0 = di_kv_now();
        while (di_kv_recv_state(p.r, 30) != DI_ROOM_TRANSFERRING && di_kv_now() < t0 + 5) usleep(10 * 1000);
        CHECK_EQ_INT(di_kv_recv_state(p.r, 30), DI_ROOM_TRANSFERRING);
        di_kv_send_close(p.s); /* no DONE, no ABORT */
        p.s = NULL;
        CHECK_EQ_INT(di_kv_recv_wait(p.r, 31, 10, NULL, NULL), DI_ROOM_ABORTED);
        CHECK_EQ_INT(di_kv_recv_wait(p.r, 30, 10, NULL, NULL), DI_ROOM_ABORTED);
        CHECK(di_kv_now() - t0 < 5);
        di_kv_recv_release(p.r, 31);
        CHECK_EQ_INT(stat_pinned(p.r), 0);
        DiKvRecvStats st;
        di_kv_recv_stats(p.r, &st);
        CHECK_EQ_INT(st.connections, 0);
    }
    pair_close(&p);
}

static int connections(DiKvRecv *r) {
    DiKvRecvStats st;
    di_kv_recv_stats(r, &st);
    return st.connections;
}

/* A connection that registers twice is counted once, so its loss brings the count back to 0. */
TEST(a_second_register_counts_the_connection_once) {
    Pair p;
    if (pair_open(&p, 0) == 0) {
        DiKvIdentity id = identity(BT);
        CHECK_EQ_INT(di_kv_send_register_again(p.s, &id, in(10)), 0);
        DiKvIdentity other = identity(BT * 2); /* the first answer stands */
        CHECK_EQ_INT(di_kv_send_register_again(p.s, &other, in(10)), 0);
        CHECK_EQ_INT(connections(p.r), 1);
        CHECK_EQ_INT(di_kv_send_begin(p.s, 40, in(10)), 0);
        CHECK_EQ_INT(di_kv_send_done(p.s, 40, 0, 0, in(10)), 0);
        CHECK_EQ_INT(di_kv_recv_wait(p.r, 40, 10, NULL, NULL), DI_ROOM_DONE); /* still registered */
        di_kv_recv_release(p.r, 40);
        di_kv_send_close(p.s);
        p.s = NULL;
        double until = in(5);
        while (connections(p.r) != 0 && di_kv_now() < until) usleep(10 * 1000);
        CHECK_EQ_INT(connections(p.r), 0);
    }
    pair_close(&p);
}

/* A state handed back is reused by the next room (its pages already touched), byte-exact for a
 * state of the same size or smaller; with no pool budget nothing is kept. */
TEST(recycled_state_buffers_are_reused_byte_exact) {
    Pair p;
    const size_t len = 2 * BLOCK_BYTES + 5;
    uint8_t *state = malloc(len);
    if (state && pair_open(&p, 0) == 0) {
        void *got[3] = {0};
        size_t got_len[3] = {0}, want[3] = {len, len, len - 7};
        for (int i = 0; i < 3; i++) {
            fill_block(state, want[i], 70u + (uint32_t)i);
            CHECK_EQ_INT(di_kv_send_begin(p.s, 70 + (uint64_t)i, in(10)), 0);
            CHECK_EQ_INT(di_kv_send_state(p.s, 70 + (uint64_t)i, state, want[i], in(10)), 0);
            CHECK_EQ_INT(di_kv_send_done(p.s, 70 + (uint64_t)i, 0, want[i], in(10)), 0);
            CHECK_EQ_INT(di_kv_recv_wait(p.r, 70 + (uint64_t)i, 10, NULL, NULL), DI_ROOM_DONE);
            CHECK_EQ_INT(di_kv_recv_take_state(p.r, 70 + (uint64_t)i, &got[i], &got_len[i]), 0);
            CHECK(got[i] && got_len[i] == want[i] && memcmp(got[i], state, want[i]) == 0);
            if (i == 1) CHECK(got[1] == got[0]); /* the recycled buffer, not a fresh one */
            di_kv_recv_recycle_state(p.r, got[i], got_len[i]);
            di_kv_recv_release(p.r, 70 + (uint64_t)i);
        }
        di_kv_recv_set_state_pool(p.r, 0); /* frees the pooled buffer */
        di_kv_recv_recycle_state(p.r, NULL, 0);
    }
    free(state);
    pair_close(&p);
}

static int dead_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || getsockname(fd, (struct sockaddr *)&sa, &len) != 0)
        abort();
    close(fd);
    return ntohs(sa.sin_port);
}

TEST(sender_to_a_dead_port_fails_fast) {
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", dead_port());
    DiKvIdentity id = identity(BT);
    double t0 = di_kv_now();
    DiKvSend *s = di_kv_send_connect(addr, &id, t0 + 20);
    CHECK(s == NULL);
    CHECK_MSG(di_kv_now() - t0 < 5, "took %.1f s", di_kv_now() - t0);
    CHECK_MSG(strstr(di_error_message(), addr) != NULL, "%s", di_error_message());
    s = di_kv_send_connect("localhost", &id, t0 + 20);
    CHECK(s == NULL && strstr(di_error_message(), "HOST:PORT"));
}

TEST(bad_arguments_are_refused) {
    DiKvRecvOptions o = {.port = 70000};
    CHECK(di_kv_recv_start(&o) == NULL);
    CHECK(di_kv_recv_start(NULL) == NULL);
    DiKvCache *c = open_cache();
    DiKvRecv *r = start_recv(c, 0);
    CHECK(r != NULL);
    if (r) {
        CHECK_EQ_INT(di_kv_recv_wait(r, 1, 1.0 / 0.0, NULL, NULL), DI_ROOM_NONE); /* unbounded: refused */
        di_kv_recv_stop(r);
    }
    di_kv_cache_close(c);
}

static DiEnvPdFaults faults_of(const char *spec) {
    DiEnvPdFaults f;
    int rc = di_env_parse_pd_faults(spec, &f);
    CHECK_MSG(rc == 0, "%s: %s", spec, di_error_message());
    return f;
}

TEST(fault_lists_parse_and_malformed_ones_are_refused) {
    DiEnvPdFaults f = faults_of("drop:DONE,delay:STATE:500ms,dup:BEGIN");
    CHECK(f.any && f.drop[DI_PD_MSG_DONE] && f.dup[DI_PD_MSG_BEGIN] && !f.drop[DI_PD_MSG_ABORT]);
    CHECK_EQ_INT(f.delay_ms[DI_PD_MSG_STATE], 500);
    f = faults_of(NULL);
    CHECK(!f.any);
    static const struct {
        const char *spec, *says;
    } bad[] = {
        {"drop", "expected drop:MSG"},          {"drop:BLOCK", "unknown message 'BLOCK'"},
        {"lose:DONE", "unknown fault 'lose'"},  {"delay:STATE", "only delay takes a duration"},
        {"delay:STATE:5s", "like 500ms"},       {"delay:STATE:70000ms", "0 .. 60000"},
        {"drop:DONE:1ms", "only delay takes"},  {"drop:DONE,,dup:BEGIN", "an empty item"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(di_env_parse_pd_faults(bad[i].spec, &f), -1);
        CHECK_MSG(strstr(di_error_message(), bad[i].says) && strstr(di_error_message(), "DEEPINFER_TEST_PD_FAULTS"), "%s: %s",
                  bad[i].spec, di_error_message());
    }
}

/* BEGIN, a STATE of several chunks and DONE for `room` on p's sender. */
static void send_room(Pair *p, uint64_t room, const uint8_t *state, size_t len) {
    CHECK_EQ_INT(di_kv_send_begin(p->s, room, in(10)), 0);
    CHECK_EQ_INT(di_kv_send_state(p->s, room, state, len, in(10)), 0);
    CHECK_EQ_INT(di_kv_send_done(p->s, room, 0, len, in(10)), 0);
}

static void check_state_once(Pair *p, uint64_t room, const uint8_t *state, size_t len) {
    void *got = NULL;
    size_t got_len = 0;
    CHECK_EQ_INT(di_kv_recv_take_state(p->r, room, &got, &got_len), 0);
    CHECK(got && got_len == len && memcmp(got, state, len) == 0);
    free(got);
    DiKvRecvStats st;
    di_kv_recv_stats(p->r, &st);
    CHECK_EQ_INT(st.states_received, 1);
    CHECK_EQ_INT(st.state_bytes_received, len);
}

TEST(duplicated_messages_are_idempotent) {
    Pair p;
    const size_t len = 2 * BLOCK_BYTES + 5; /* six chunks */
    uint8_t *state = malloc(len);
    if (state && pair_open(&p, 0) == 0) {
        fill_block(state, len, 7);
        DiEnvPdFaults f = faults_of("dup:BEGIN,dup:STATE,dup:DONE,dup:ABORT");
        CHECK_EQ_INT(di_kv_send_set_faults(p.s, &f), 0);
        send_room(&p, 40, state, len);
        CHECK_EQ_INT(di_kv_recv_wait(p.r, 40, 10, NULL, NULL), DI_ROOM_DONE);
        check_state_once(&p, 40, state, len);
        CHECK_EQ_INT(di_kv_send_abort(p.s, 41, in(10)), 0);
        CHECK_EQ_INT(di_kv_recv_wait(p.r, 41, 10, NULL, NULL), DI_ROOM_ABORTED);
        usleep(100 * 1000);
        DiKvRecvStats st;
        di_kv_recv_stats(p.r, &st);
        CHECK_EQ_INT(st.rooms[DI_ROOM_DONE], 1);
        CHECK_EQ_INT(st.rooms[DI_ROOM_ABORTED], 1);
        CHECK_EQ_INT(di_kv_recv_state(p.r, 40), DI_ROOM_DONE); /* the duplicated DONE changed nothing */
        di_kv_recv_release(p.r, 40);
        di_kv_recv_release(p.r, 41);
    }
    pair_close(&p);
    free(state);
}

TEST(a_dropped_done_leaves_the_waiter_to_its_deadline) {
    Pair p;
    const size_t len = BLOCK_BYTES;
    uint8_t *state = calloc(1, len);
    if (state && pair_open(&p, 0) == 0) {
        DiEnvPdFaults f = faults_of("drop:DONE");
        CHECK_EQ_INT(di_kv_send_set_faults(p.s, &f), 0);
        send_room(&p, 50, state, len); /* the sender believes DONE went out */
        double t0 = di_kv_now();
        CHECK_EQ_INT(di_kv_recv_wait(p.r, 50, 0.3, NULL, NULL), DI_ROOM_TRANSFERRING);
        double waited = di_kv_now() - t0;
        CHECK_MSG(waited >= 0.29 && waited < 1.5, "waited %.2f s", waited);
        di_kv_recv_release(p.r, 50); /* the decode worker prefills locally */
        void *got = NULL;
        size_t got_len = 0;
        CHECK_EQ_INT(di_kv_recv_take_state(p.r, 50, &got, &got_len), 0);
        CHECK(got == NULL); /* nothing to import from an unfinished room */
        CHECK_EQ_INT(di_kv_recv_state(p.r, 50), DI_ROOM_ABORTED);
    }
    pair_close(&p);
    free(state);
}

TEST(a_state_delayed_within_the_deadline_is_imported) {
    Pair p;
    const size_t len = BLOCK_BYTES + 17;
    uint8_t *state = malloc(len);
    if (state && pair_open(&p, 0) == 0) {
        fill_block(state, len, 9);
        DiEnvPdFaults f = faults_of("delay:STATE:300ms");
        CHECK_EQ_INT(di_kv_send_set_faults(p.s, &f), 0);
        double t0 = di_kv_now();
        send_room(&p, 60, state, len);
        CHECK_MSG(di_kv_now() - t0 >= 0.3, "the STATE was not held: %.3f s", di_kv_now() - t0);
        CHECK_EQ_INT(di_kv_recv_wait(p.r, 60, 10, NULL, NULL), DI_ROOM_DONE);
        check_state_once(&p, 60, state, len);
        di_kv_recv_release(p.r, 60);
        /* a delay past the sender's deadline fails the send, naming the fault */
        CHECK_EQ_INT(di_kv_send_state(p.s, 61, state, len, in(0.1)), -1);
        CHECK_MSG(strstr(di_error_message(), "deadline passed") && strstr(di_error_message(), "test fault"), "%s",
                  di_error_message());
    }
    pair_close(&p);
    free(state);
}

/* Every send's deadline bounds a wait on the peer: an infinite or NaN one is refused, as the
 * connect's and the wait's are, and the connection stays usable. */
TEST(sends_refuse_an_unbounded_deadline) {
    Pair p;
    if (pair_open(&p, 0) == 0) {
        const double bad[] = {1.0 / 0.0, 0.0 / 0.0};
        for (int i = 0; i < 2; i++) {
            CHECK(di_kv_send_begin(p.s, 5, bad[i]) != 0);
            CHECK_MSG(strstr(di_error_message(), "deadline") != NULL, "%s", di_error_message());
            CHECK(di_kv_send_block(p.s, 5, key_of(0), p.blk, BLOCK_BYTES, bad[i]) != 0);
            CHECK(di_kv_send_state(p.s, 5, p.blk, 16, bad[i]) != 0);
            CHECK(di_kv_send_done(p.s, 5, 1, 0, bad[i]) != 0);
            CHECK(di_kv_send_abort(p.s, 5, bad[i]) != 0);
        }
        CHECK_EQ_INT(di_kv_recv_state(p.r, 5), DI_ROOM_NONE); /* nothing was sent */
        CHECK_EQ_INT(di_kv_send_abort(p.s, 5, in(10)), 0);
        CHECK_EQ_INT(di_kv_recv_wait(p.r, 5, 10, NULL, NULL), DI_ROOM_ABORTED);
    }
    pair_close(&p);
}

TEST(a_dropped_abort_leaves_the_room_to_its_lease) {
    Pair p;
    if (pair_open(&p, 0.3) == 0) {
        DiEnvPdFaults f = faults_of("drop:ABORT");
        CHECK_EQ_INT(di_kv_send_set_faults(p.s, &f), 0);
        CHECK_EQ_INT(di_kv_send_block(p.s, 70, key_of(70), p.blk, BLOCK_BYTES, in(10)), 0);
        CHECK_EQ_INT(di_kv_send_abort(p.s, 70, in(10)), 0);
        usleep(100 * 1000);
        CHECK_EQ_INT(di_kv_recv_state(p.r, 70), DI_ROOM_TRANSFERRING); /* the ABORT never came */
        CHECK_EQ_INT(stat_pinned(p.r), 1);
        double until = in(5);
        while (di_kv_recv_state(p.r, 70) != DI_ROOM_EXPIRED && di_kv_now() < until) usleep(20 * 1000);
        CHECK_EQ_INT(di_kv_recv_state(p.r, 70), DI_ROOM_EXPIRED);
        CHECK_EQ_INT(stat_pinned(p.r), 0); /* back to idle */
        size_t len = 0;
        CHECK_EQ_INT(di_kv_cache_read(p.c, key_of(70), p.blk, BLOCK_BYTES, &len), 0);
        DiKvRecvStats st;
        di_kv_recv_stats(p.r, &st);
        CHECK_EQ_INT(st.rooms_waiting, 0);
    }
    pair_close(&p);
}

/* The rooms without UCX: a resent chunk of a block must not count as its missing bytes (the block
 * would be stored and pinned with uninitialised bytes), and a block sent twice is one block. */
TEST(duplicated_block_chunks_and_blocks_count_once) {
    DiKvCache *c = open_cache();
    DiKvRooms *t = c ? di_kv_rooms_create(c, BLOCK_BYTES, 10, 10, 16) : NULL;
    uint8_t *blk = malloc(BLOCK_BYTES), *got = malloc(BLOCK_BYTES);
    const size_t CH = DI_KV_CHUNK_BYTES;
    int conn = 0;
    CHECK(t && blk && got);
    if (t && blk && got) {
        fill_block(blk, BLOCK_BYTES, 5);
        for (int k = 0; k < 2; k++) /* chunk 0 twice, then chunk 1: chunk 2 is still missing */
            CHECK_EQ_INT(di_kv_rooms_chunk(t, &conn, 1, key_of(0), BLOCK_BYTES, 0, blk, CH), 0);
        CHECK_EQ_INT(di_kv_rooms_chunk(t, &conn, 1, key_of(0), BLOCK_BYTES, CH, blk + CH, CH), 0);
        di_kv_rooms_done(t, &conn, 1, 1, 0);
        size_t len = 0;
        CHECK_EQ_INT(di_kv_rooms_state(t, 1), DI_ROOM_TRANSFERRING);
        CHECK_EQ_INT(di_kv_cache_read(c, key_of(0), got, BLOCK_BYTES, &len), 0);
        CHECK_EQ_INT(di_kv_rooms_chunk(t, &conn, 1, key_of(0), BLOCK_BYTES, 2 * CH, blk + 2 * CH, BLOCK_BYTES - 2 * CH), 0);
        CHECK_EQ_INT(di_kv_rooms_state(t, 1), DI_ROOM_DONE);
        CHECK_EQ_INT(di_kv_cache_read(c, key_of(0), got, BLOCK_BYTES, &len), 1);
        CHECK(len == BLOCK_BYTES && memcmp(blk, got, BLOCK_BYTES) == 0);
        /* room 2: block 1 sent whole twice, DONE says two blocks: block 2 is still missing */
        for (int k = 0; k < 2; k++)
            for (size_t off = 0; off < BLOCK_BYTES; off += CH)
                CHECK_EQ_INT(di_kv_rooms_chunk(t, &conn, 2, key_of(1), BLOCK_BYTES, off, blk + off,
                                               BLOCK_BYTES - off < CH ? BLOCK_BYTES - off : CH), 0);
        di_kv_rooms_done(t, &conn, 2, 2, 0);
        CHECK_EQ_INT(di_kv_rooms_state(t, 2), DI_ROOM_TRANSFERRING);
        /* off the sender's chunk grid: refused */
        CHECK(di_kv_rooms_chunk(t, &conn, 3, key_of(2), BLOCK_BYTES, 1, blk, 16) != 0);
    }
    di_kv_rooms_free(t);
    di_kv_cache_close(c);
    free(blk);
    free(got);
}

int main(void) {
    RUN_TEST(blocks_arrive_byte_exact_and_pinned);
    RUN_TEST(a_state_arrives_byte_exact_once_and_completes_its_room);
    RUN_TEST(a_streamed_state_keeps_its_waiter_past_the_idle_deadline);
    RUN_TEST(identity_mismatch_is_refused_at_registration);
    RUN_TEST(abort_mid_room_then_late_messages_are_ignored);
    RUN_TEST(lease_expiry_unpins_and_wait_is_bounded);
    RUN_TEST(a_sender_that_goes_away_aborts_its_rooms);
    RUN_TEST(sender_to_a_dead_port_fails_fast);
    RUN_TEST(bad_arguments_are_refused);
    RUN_TEST(fault_lists_parse_and_malformed_ones_are_refused);
    RUN_TEST(duplicated_messages_are_idempotent);
    RUN_TEST(a_dropped_done_leaves_the_waiter_to_its_deadline);
    RUN_TEST(a_state_delayed_within_the_deadline_is_imported);
    RUN_TEST(a_dropped_abort_leaves_the_room_to_its_lease);
    RUN_TEST(duplicated_block_chunks_and_blocks_count_once);
    RUN_TEST(sends_refuse_an_unbounded_deadline);
    RUN_TEST(a_second_register_counts_the_connection_once);
    RUN_TEST(recycled_state_buffers_are_reused_byte_exact);
    return TEST_SUMMARY();
}
