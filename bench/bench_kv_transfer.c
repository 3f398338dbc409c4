/* bench_kv_transfer.c — KV transfer throughput on loopback (issue 24's performance item): a
 * prefill-side sender (kv_transfer.h) moves rooms to a decode-side receiver in the same process
 * (its own progress thread), through UCX, against a plain memcpy of the same bytes on this
 * machine.  Two kinds of room:
 *   state   what a prefill worker sends: one STATE per room (a request's exact state, assembled
 *           into one buffer and taken by the room's waiter, as a decode worker does before it
 *           imports it), of BLOCKS x 227,840 bytes: a 16,384-token prompt's compressed KV and
 *           index keys at V4.1-Flash's 890 bytes/token (README), which is what its state pages
 *           hold besides a small fixed part;
 *   blocks  the same bytes as BLOCKS blocks of 256 tokens, each stored and pinned in the
 *           receiver's KV block cache (two copies on the receiver: chunk assembly, cache store).
 * One run sends ROOMS rooms (a room's time ends when the receiver's waiter sees DONE; the room is
 * then released).  The state kind runs twice: with fresh receive buffers (the taker frees each
 * state; the receiver's state pool off) and with reused ones (the taker hands each state back,
 * di_kv_recv_recycle_state; the default pool), so the cost of faulting in a fresh buffer's pages
 * shows as the ratio of the two.  Runs alternate with a memcpy of the same bytes; the medians of
 * REPS runs are printed: the rates, their ratio to memcpy and the process CPU time (both ends, the
 * receiver's thread included) per GB. */
#include "base/error.h"
#include "serve/kv_transfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

enum { BLOCKS = 64, ROOMS = 24, REPS = 5, KINDS = 3 };
enum { STATE_FRESH, STATE_REUSED, BLOCK_ROOMS }; /* the kinds of run */
static const char *const kind_name[KINDS] = {"state, fresh buffers ", "state, reused buffers", "blocks               "};
#define POOL_BYTES ((uint64_t)256 << 20) /* the receiver's default state pool */
#define BLOCK_BYTES ((size_t)890 * 256)

static double cpu_seconds(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + (double)u.ru_stime.tv_sec + u.ru_stime.tv_usec * 1e-6;
}

static void print_cpu(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0) {
            printf("CPU: %s", strchr(line, ':') ? strchr(line, ':') + 2 : line);
            break;
        }
    if (f) fclose(f);
}

/* memcpy of the same bytes: every block of the run to its own place in a pre-touched buffer of the
 * run's size (no cache-resident shortcut); GB/s. */
static double memcpy_gbps(const uint8_t *src, uint8_t *dst) {
    double t0 = di_kv_now();
    for (int r = 0; r < ROOMS; r++)
        for (int b = 0; b < BLOCKS; b++)
            memcpy(dst + ((size_t)r * BLOCKS + (size_t)b) * BLOCK_BYTES, src + (size_t)b * BLOCK_BYTES, BLOCK_BYTES);
    return (double)ROOMS * BLOCKS * BLOCK_BYTES / (di_kv_now() - t0) / 1e9;
}

/* One room's messages: one STATE of every block's bytes, or the blocks one by one. */
static int send_room(DiKvSend *s, uint64_t id, const uint8_t *src, uint64_t *next_key, bool state, double deadline) {
    if (di_kv_send_begin(s, id, deadline) != 0) return -1;
    if (state) {
        size_t len = (size_t)BLOCKS * BLOCK_BYTES;
        return di_kv_send_state(s, id, src, len, deadline) != 0 || di_kv_send_done(s, id, 0, len, deadline) != 0 ? -1 : 0;
    }
    for (int b = 0; b < BLOCKS; b++) {
        DiKvKey key = {++*next_key * 0x9E3779B97F4A7C15ull, 77};
        if (di_kv_send_block(s, id, key, src + (size_t)b * BLOCK_BYTES, BLOCK_BYTES, deadline) != 0) return -1;
    }
    return di_kv_send_done(s, id, BLOCKS, 0, deadline);
}

/* One run: ROOMS rooms of one kind; GB/s, *cpu the process CPU seconds per GB. */
static double transfer_gbps(DiKvSend *s, DiKvRecv *r, const uint8_t *src, uint64_t *next_key, int kind, double *cpu) {
    bool state = kind != BLOCK_ROOMS;
    di_kv_recv_set_state_pool(r, kind == STATE_REUSED ? POOL_BYTES : 0);
    double t0 = di_kv_now(), c0 = cpu_seconds();
    for (int room = 0; room < ROOMS; room++) {
        uint64_t id = ++*next_key;
        void *got = NULL;
        size_t len = 0;
        if (send_room(s, id, src, next_key, state, t0 + 60) != 0 || di_kv_recv_wait(r, id, 60, NULL, NULL) != DI_ROOM_DONE ||
            di_kv_recv_take_state(r, id, &got, &len) != 0 || (state && len != (size_t)BLOCKS * BLOCK_BYTES))
            return -1;
        if (kind == STATE_REUSED) di_kv_recv_recycle_state(r, got, len);
        else free(got);
        di_kv_recv_release(r, id);
    }
    double t = di_kv_now() - t0;
    double gb = (double)ROOMS * BLOCKS * BLOCK_BYTES / 1e9;
    *cpu = (cpu_seconds() - c0) / gb;
    return gb / t;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(void) {
    print_cpu();
    size_t run_bytes = (size_t)ROOMS * BLOCKS * BLOCK_BYTES;
    uint8_t *src = malloc((size_t)BLOCKS * BLOCK_BYTES), *dst = malloc(run_bytes);
    if (!src || !dst) return 1;
    for (size_t i = 0; i < (size_t)BLOCKS * BLOCK_BYTES; i++) src[i] = (uint8_t)(i * 131 + 7);
    memset(dst, 0, run_bytes);
    DiKvCacheOptions co = {.ram_bytes = (size_t)4 * BLOCKS * BLOCK_BYTES, .block_tokens = 256};
    DiKvCache *cache = di_kv_cache_open(&co);
    DiKvIdentity id = {.fingerprint = {1, 2}, .block_tokens = 256, .block_bytes = BLOCK_BYTES, .page_bytes = 4096};
    DiKvRecvOptions ro = {.identity = id, .cache = cache};
    DiKvRecv *r = cache ? di_kv_recv_start(&ro) : NULL;
    DiKvSend *s = r ? di_kv_send_connect(di_kv_recv_address(r), &id, di_kv_now() + 10) : NULL;
    if (!s) {
        fprintf(stderr, "bench_kv_transfer: %s\n", di_error_message());
        return 1;
    }
    /* memcpy and transfer alternate, so a busy machine weighs on both alike; medians of REPS */
    double mem[REPS], xfer[KINDS][REPS], ratio[KINDS][REPS], cpu[KINDS][REPS];
    uint64_t next_key = 1;
    for (int rep = 0; rep < REPS; rep++) {
        mem[rep] = memcpy_gbps(src, dst);
        for (int k = 0; k < KINDS; k++) {
            xfer[k][rep] = transfer_gbps(s, r, src, &next_key, k, &cpu[k][rep]);
            if (xfer[k][rep] < 0) {
                fprintf(stderr, "bench_kv_transfer: %s\n", di_error_message());
                return 1;
            }
            ratio[k][rep] = xfer[k][rep] / mem[rep];
        }
    }
    qsort(mem, REPS, sizeof *mem, cmp_double);
    printf("kv transfer, loopback UCX: %d rooms of %.1f MB (%d x %zu bytes) per run, medians of %d\n", ROOMS,
           (double)run_bytes / ROOMS / 1e6, BLOCKS, BLOCK_BYTES, REPS);
    printf("  memcpy          %7.2f GB/s\n", mem[REPS / 2]);
    for (int k = 0; k < KINDS; k++) {
        qsort(xfer[k], REPS, sizeof *xfer[k], cmp_double);
        qsort(ratio[k], REPS, sizeof *ratio[k], cmp_double);
        qsort(cpu[k], REPS, sizeof *cpu[k], cmp_double);
        printf("  %s %7.2f GB/s  = %.3fx memcpy  (process CPU %.2f s per GB, both ends)\n", kind_name[k],
               xfer[k][REPS / 2], ratio[k][REPS / 2], cpu[k][REPS / 2]);
    }
    printf("  reused / fresh state buffers: %.2fx\n", xfer[STATE_REUSED][REPS / 2] / xfer[STATE_FRESH][REPS / 2]);
    di_kv_send_close(s);
    di_kv_recv_stop(r);
    di_kv_cache_close(cache);
    free(src);
    free(dst);
    return 0;
}
