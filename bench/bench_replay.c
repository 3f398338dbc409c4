/* bench_replay.c — prefill throughput with decoder SWA bounded replay (issue 21, engine-features.md
 * §2): a 4,096-token prompt on the medium synthetic checkpoint (bench_medium.h; 8 layers, the
 * decoder = layers 4-7, window 64), ref numerics, the machine's threads.  Compact mode
 * (K = REPLAY_DEFAULT_KEEP = 140) against off (every layer on every row), measured in the same
 * run, interleaved, median of 3 each (the machine is shared):
 *   one chunk:   the prompt in one forward of 4,096 rows (the figure for issue 21's >= 1.7x target);
 *   512-chunks:  the engine's default step budget (max_batch_tokens 512): every chunk trims to its
 *                own last K rows, so the decoder still runs 140 of every 512 rows.
 * After each compact prefill, one decode step checks that the state it left decodes. */
#include "base/error.h"
#include "bench_medium.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/replay.h"
#include "model/state.h"
#include "model/tiny.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { PROMPT = 4096, REPS = 3 };

static double clock_s(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* One prefill's rates: tokens per wall second and per CPU second of the process (all threads;
 * the second hardly moves when other processes take the cores, the first does). */
typedef struct {
    double wall, cpu;
} Rate;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void die(const char *what) {
    fprintf(stderr, "bench_replay: %s: %s\n", what, di_error_message());
    exit(1);
}

/* Prefill rates of the prompt in chunks of `chunk`, in `mode`; then one decode step. */
static Rate prefill_rate(Model *m, ReplayMode mode, const int32_t *ids, int64_t chunk, float *logits) {
    if (model_set_prefill_replay(m, mode, REPLAY_DEFAULT_KEEP) != 0) die("replay mode");
    RunState *st = state_create(&m->d);
    if (!st) die("state");
    double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    for (int64_t s = 0; s < PROMPT; s += chunk) {
        int64_t n = PROMPT - s < chunk ? PROMPT - s : chunk;
        if (model_forward(m, st, ids + s, n, s, s + n == PROMPT ? logits : NULL, false, NULL) != 0) die("prefill");
    }
    Rate r = {PROMPT / (clock_s(CLOCK_MONOTONIC) - t0), PROMPT / (clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0)};
    int32_t next = 0;
    for (int64_t v = 1; v < m->d.vocab; v++)
        if (logits[v] > logits[next]) next = (int32_t)v;
    if (model_forward(m, st, &next, 1, PROMPT, logits, false, NULL) != 0) die("decode after the prefill");
    state_free(st);
    return r;
}

int main(void) {
    char dir[1000];
    bench_medium_dir(dir, sizeof dir);
    if (di_tiny_ensure_preset(dir, "medium", 1) != 0) die("make-tiny --config medium");
    Model *m = model_load(dir, MODE_REF);
    const int32_t *map;
    int64_t map_len;
    if (!m || di_tiny_engram_token_map(&map, &map_len) != 0 || model_set_engram_token_map(m, map, map_len) != 0) die("loading");
    if (model_reserve_rows(m, PROMPT) != 0) die("workspace");
    int32_t *ids = malloc(PROMPT * sizeof *ids);
    float *logits = malloc((size_t)m->d.vocab * sizeof *logits);
    if (!ids || !logits) die("buffers");
    for (int i = 0; i < PROMPT; i++) ids[i] = 3 + (int32_t)(((uint32_t)i * 2654435761u) >> 8) % (uint32_t)(m->d.vocab - 3);
    printf("prefill of a %d-token prompt, medium synthetic checkpoint %s (ref numerics), decoder layers %d-%d, "
           "window %d, compact K = %d:\n",
           PROMPT, dir, m->d.n_layers / 2, m->d.n_layers - 1, m->d.window, REPLAY_DEFAULT_KEEP);
    const int64_t chunks[2] = {PROMPT, 512};
    for (int c = 0; c < 2; c++) {
        double rates[4][REPS]; /* off wall, compact wall, off cpu, compact cpu */
        for (int r = 0; r < REPS; r++) {
            Rate off = prefill_rate(m, REPLAY_OFF, ids, chunks[c], logits), cmp = prefill_rate(m, REPLAY_COMPACT, ids, chunks[c], logits);
            rates[0][r] = off.wall, rates[1][r] = cmp.wall, rates[2][r] = off.cpu, rates[3][r] = cmp.cpu;
        }
        for (int k = 0; k < 4; k++) qsort(rates[k], REPS, sizeof rates[k][0], cmp_double);
        double ow = rates[0][REPS / 2], cw = rates[1][REPS / 2], oc = rates[2][REPS / 2], cc = rates[3][REPS / 2];
        printf("  chunks of %4lld rows: off %6.1f tokens/s, compact %6.1f tokens/s: compact / off = %.2fx%s; per CPU second: "
               "off %6.1f, compact %6.1f: %.2fx\n",
               (long long)chunks[c], ow, cw, cw / ow, c == 0 ? " (target >= 1.7x)" : "", oc, cc, cc / oc);
    }
    free(ids);
    free(logits);
    model_free(m);
    return 0;
}
