/* bench_sim.c — how fast `deepinfer sim` replays the full Mooncake conversation trace (12,031
 * requests, about an hour of traffic; the issue asks for seconds).  Figures: wall time of the
 * control-plane run (tiered prefill, balanced decode, EPLB on 4 MoE layers), the same run without
 * the expert-load model as the baseline measured in the same process (ratio = cost of the MoE /
 * EPLB model), and simulated seconds per wall second.  Medians of interleaved runs. */
#include "deepinfer.h"
#include "cluster/sim/sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { REPS = 3 };

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double timed_run(const DiSimTrace *t, const DiSimConfig *c, DiSimResult *r) {
    double t0 = now_s();
    if (di_sim_run(t, c, r) != 0) {
        fprintf(stderr, "bench_sim: %s\n", di_last_error());
        exit(1);
    }
    return now_s() - t0;
}

int main(void) {
    const char *dir = getenv("SHARED_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/data/mooncake-traces/conversation_trace.jsonl", dir && *dir ? dir : "../shared");
    DiSimTrace trace;
    if (di_sim_trace_load(path, &trace) != 0) {
        fprintf(stderr, "bench_sim: %s\n", di_last_error());
        return 1;
    }
    const double speedups[2] = {1.0, 40.0};
    for (int k = 0; k < 2; k++) {
        DiSimConfig with_moe, without;
        di_sim_config_default(&with_moe);
        with_moe.speedup = speedups[k];
        without = with_moe;
        without.moe_layers = 0;
        double a[REPS], b[REPS];
        DiSimResult r;
        for (int i = 0; i < REPS; i++) {
            a[i] = timed_run(&trace, &with_moe, &r);
            b[i] = timed_run(&trace, &without, &r);
        }
        qsort(a, REPS, sizeof *a, cmp_double);
        qsort(b, REPS, sizeof *b, cmp_double);
        printf("conversation trace x%-4g  %lld decode + %lld prefill steps: control plane %.3f s, without MoE/EPLB model "
               "%.3f s (ratio %.2f), %.0f simulated s per wall s\n",
               speedups[k], (long long)r.decode_steps, (long long)r.prefill_steps, a[REPS / 2], b[REPS / 2],
               a[REPS / 2] / b[REPS / 2], r.makespan_s / a[REPS / 2]);
    }
    di_sim_trace_free(&trace);
    return 0;
}
