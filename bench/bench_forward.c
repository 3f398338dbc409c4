/* bench_forward.c — throughput of the V4.1 forward pass on the golden tiny-a checkpoint
 * (ref numerics, every quantisation point on): a 64-token prefill and 16 decode steps.
 * Baseline, measured in the same run: the same forward on the scalar reference kernel
 * (di_matmul_ref); the figure is the speed-up of the optimised backend (di_matmul) over it.
 * Runs are interleaved and medians quoted (the machine is shared). */
#include "base/error.h"
#include "model/forward.h"
#include "golden/golden.h"
#include "model/model.h"
#include "model/state.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { PREFILL = 64, DECODE = 16, REPS = 5 };

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* seconds for prefill + decode */
static double run_once(Model *m, const int32_t *ids, float *logits) {
    RunState *st = state_create(&m->d);
    double t0 = now_s();
    if (!st || model_forward(m, st, ids, PREFILL, 0, logits, false, NULL) != 0) goto fail;
    for (int i = 0; i < DECODE; i++)
        if (model_forward(m, st, ids + PREFILL + i, 1, PREFILL + i, logits, false, NULL) != 0) goto fail;
    double dt = now_s() - t0;
    state_free(st);
    return dt;
fail:
    fprintf(stderr, "bench_forward: %s\n", di_error_message());
    exit(1);
}

int main(void) {
    const char *shared = getenv("SHARED_DIR");
    char dir[600], ck[700];
    snprintf(dir, sizeof dir, "%s/golden-v41/tiny-a", shared && *shared ? shared : "../shared");
    snprintf(ck, sizeof ck, "%s/checkpoint", dir);
    GoldenSet g;
    Model *m = NULL;
    GoldenArray ids;
    if (golden_open(dir, &g) != 0 || !(m = model_load(ck, MODE_REF)) || golden_prepare_model(&g, m) != 0 ||
        golden_array(&g, "input_ids", "i32", 1, NULL, &ids) != 0 || ids.numel < PREFILL + DECODE) {
        fprintf(stderr, "bench_forward: %s\n", di_error_message());
        return 1;
    }
    float *logits = malloc((size_t)m->d.vocab * sizeof *logits);
    double ref[REPS], opt[REPS];
    const DiKernelBackend *loaded = m->be;
    for (int r = 0; r < REPS; r++) { /* interleaved */
        if (model_set_backend(m, di_backend_cpu_ref()) != 0) return 1;
        ref[r] = run_once(m, ids.data, logits);
        if (model_set_backend(m, loaded) != 0) return 1;
        opt[r] = run_once(m, ids.data, logits);
    }
    qsort(ref, REPS, sizeof *ref, cmp_double);
    qsort(opt, REPS, sizeof *opt, cmp_double);
    double tokens = PREFILL + DECODE;
    printf("forward tiny-a ref mode, %d-token prefill + %d decode steps, median of %d:\n", PREFILL, DECODE, REPS);
    printf("  reference kernel   %.3f s  (%.1f tokens/s)\n", ref[REPS / 2], tokens / ref[REPS / 2]);
    printf("  di_matmul backend  %.3f s  (%.1f tokens/s)\n", opt[REPS / 2], tokens / opt[REPS / 2]);
    printf("  speed-up backend / reference: %.2fx\n", ref[REPS / 2] / opt[REPS / 2]);
    free(logits);
    model_free(m);
    golden_close(&g);
    return 0;
}
