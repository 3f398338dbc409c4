/* bench_sim_tiers.c — the prefill balancer's quality target of issue 6: per context tier, the
 * TTFT p99 of the tiered control plane as a ratio to one FIFO queue over the same instances,
 * replaying the Mooncake conversation trace at several loads (speedups; x100 is past the
 * cluster's capacity, where queues grow for the whole run).  Both policies run in the same
 * process on the same trace; the figures are simulated times, so they do not depend on the
 * machine's load.  Also printed: the tiered run with unbounded overtaking across tiers
 * (--tier-overtake 1e9), the rule this balancer replaced, to show what the allowance buys. */
#include "deepinfer.h"
#include "cluster/sim/sim.h"

#include <stdio.h>
#include <stdlib.h>

static void run_or_die(const DiSimTrace *t, const DiSimConfig *c, DiSimResult *r) {
    if (di_sim_run(t, c, r) != 0) {
        fprintf(stderr, "bench_sim_tiers: %s\n", di_last_error());
        exit(1);
    }
}

static void print_ratios(const char *label, const DiSimResult *a, const DiSimResult *fifo) {
    static const char *names[DI_PREFILL_TIERS] = {"<16K", "16-64K", "64-256K", ">=256K"};
    printf("  %-26s", label);
    for (int t = 0; t < DI_PREFILL_TIERS; t++)
        if (a->ttft_s[t].n > 0 && fifo->ttft_s[t].p99 > 0)
            printf("  %s %6.0f/%6.0f ms = %.2f", names[t], 1e3 * a->ttft_s[t].p99, 1e3 * fifo->ttft_s[t].p99,
                   a->ttft_s[t].p99 / fifo->ttft_s[t].p99);
    printf("\n");
}

int main(void) {
    const char *dir = getenv("SHARED_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/data/mooncake-traces/conversation_trace.jsonl", dir && *dir ? dir : "../shared");
    DiSimTrace trace;
    if (di_sim_trace_load(path, &trace) != 0) {
        fprintf(stderr, "bench_sim_tiers: %s\n", di_last_error());
        return 1;
    }
    printf("prefill TTFT p99, tiered / one FIFO queue (conversation trace, 8 x EP8 prefill instances)\n");
    const double speedups[] = {10.0, 40.0, 60.0, 80.0, 100.0};
    for (size_t k = 0; k < sizeof speedups / sizeof *speedups; k++) {
        DiSimConfig c;
        di_sim_config_default(&c);
        c.moe_layers = 0; /* expert loads do not change prefill timing */
        c.speedup = speedups[k];
        DiSimResult tiered, unbounded, fifo;
        run_or_die(&trace, &c, &tiered);
        c.jump_slowdown = 1e9;
        run_or_die(&trace, &c, &unbounded);
        c.jump_slowdown = 0.0;
        c.prefill_policy = DI_SIM_PREFILL_FIFO;
        run_or_die(&trace, &c, &fifo);
        printf("x%g load:\n", speedups[k]);
        print_ratios("tiered (default)", &tiered, &fifo);
        print_ratios("tiered, unbounded overtake", &unbounded, &fifo);
    }
    di_sim_trace_free(&trace);
    return 0;
}
