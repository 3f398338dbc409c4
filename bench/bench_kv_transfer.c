/* bench_kv_transfer.c — KV transfer throughput on loopback (issue 24's performance item): a
 * prefill-side sender (kv_transfer.h) moves rooms of blocks to a decode-side receiver in the same
 * process (its own progress thread), through UCX, into the receiver's KV block cache (stored and
 * pinned, as a decode worker does), against a plain memcpy of the same bytes on this machine.
 *
 * Blocks are 256 tokens of V4.1-Flash's compressed KV and index keys (890 bytes/token, README):
 * 227,840 bytes.  One run sends ROOMS rooms of BLOCKS blocks each (a room's time ends when the
 * receiver's waiter sees DONE; the room is then released).  Runs alternate with a memcpy of the
 * same bytes; the medians of REPS runs are printed: both rates, their ratio and the process CPU
 * time (both ends, the receiver's thread included) per GB.
 * The receiver copies each block twice (chunk assembly, cache store) besides UCX's own copies, so
 * the ratio is bounded well below 1 on one machine. */
#include "base/error.h"
#include "serve/kv_transfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

enum { BLOCKS = 64, ROOMS = 24, REPS = 5 };
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

/* One run: ROOMS rooms of BLOCKS blocks; GB/s, *cpu the process CPU seconds per GB. */
static double transfer_gbps(DiKvSend *s, DiKvRecv *r, const uint8_t *src, uint64_t *next_key, double *cpu) {
    double t0 = di_kv_now(), c0 = cpu_seconds();
    for (int room = 0; room < ROOMS; room++) {
        uint64_t id = *next_key;
        if (di_kv_send_begin(s, id, t0 + 60) != 0) return -1;
        for (int b = 0; b < BLOCKS; b++) {
            DiKvKey key = {++*next_key * 0x9E3779B97F4A7C15ull, 77};
            if (di_kv_send_block(s, id, key, src + (size_t)b * BLOCK_BYTES, BLOCK_BYTES, t0 + 60) != 0) return -1;
        }
        if (di_kv_send_done(s, id, BLOCKS, 0, t0 + 60) != 0 || di_kv_recv_wait(r, id, t0 + 60, NULL, NULL) != DI_ROOM_DONE)
            return -1;
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
    DiKvIdentity id = {.fingerprint = {1, 2}, .block_tokens = 256, .block_bytes = BLOCK_BYTES};
    DiKvRecvOptions ro = {.identity = id, .cache = cache};
    DiKvRecv *r = cache ? di_kv_recv_start(&ro) : NULL;
    DiKvSend *s = r ? di_kv_send_connect(di_kv_recv_address(r), &id, di_kv_now() + 10) : NULL;
    if (!s) {
        fprintf(stderr, "bench_kv_transfer: %s\n", di_error_message());
        return 1;
    }
    /* memcpy and transfer alternate, so a busy machine weighs on both alike; medians of REPS */
    double mem[REPS], xfer[REPS], ratio[REPS], cpu[REPS];
    uint64_t next_key = 1;
    for (int rep = 0; rep < REPS; rep++) {
        mem[rep] = memcpy_gbps(src, dst);
        xfer[rep] = transfer_gbps(s, r, src, &next_key, &cpu[rep]);
        if (xfer[rep] < 0) {
            fprintf(stderr, "bench_kv_transfer: %s\n", di_error_message());
            return 1;
        }
        ratio[rep] = xfer[rep] / mem[rep];
    }
    qsort(mem, REPS, sizeof *mem, cmp_double);
    qsort(xfer, REPS, sizeof *xfer, cmp_double);
    qsort(ratio, REPS, sizeof *ratio, cmp_double);
    qsort(cpu, REPS, sizeof *cpu, cmp_double);
    printf("kv transfer, loopback UCX: %d rooms x %d blocks of %zu bytes (%.0f MB) per run, medians of %d\n", ROOMS,
           BLOCKS, BLOCK_BYTES, (double)run_bytes / 1e6, REPS);
    printf("  memcpy   %7.2f GB/s\n", mem[REPS / 2]);
    printf("  transfer %7.2f GB/s  = %.3fx memcpy  (process CPU %.2f s per GB, both ends)\n", xfer[REPS / 2],
           ratio[REPS / 2], cpu[REPS / 2]);
    di_kv_send_close(s);
    di_kv_recv_stop(r);
    di_kv_cache_close(cache);
    free(src);
    free(dst);
    return 0;
}
