/* cmd_sim.c — `deepinfer sim`: replay a request trace (or a synthetic Zipf/Poisson workload)
 * through the serving control plane on a simulated P/D cluster, and print one JSON summary:
 * the control plane (tiered prefill + balanced decode + EPLB) and its baselines (single FIFO +
 * request-count decode; round robin both sides) run on the same workload, with the ratios.
 * Deterministic for a given --seed. */
#include "commands.h"

#include "deepinfer.h"
#include "cluster/sim/sim.h"
#include "cluster/sim/sim_report.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void sim_usage(FILE *out) {
    fprintf(out,
            "usage: deepinfer sim (--trace FILE.jsonl | --synthetic) [options]\n\n"
            "Simulates a prefill/decode cluster (default: 8 prefill EP8 instances = 64 GPUs, one EP64 decode\n"
            "group) on a Mooncake trace or a synthetic workload, and prints a JSON summary: TTFT/TPOT\n"
            "percentiles per context tier, prefill and decode imbalance, moe_lb over time, cache hit rate,\n"
            "throughput; for the control plane and two baselines, with ratios.\n\n"
            "workload:\n"
            "  --trace FILE           Mooncake JSONL trace (timestamp, input_length, output_length, hash_ids)\n"
            "  --synthetic            Poisson arrivals, Zipf-shared prefixes, all four context tiers\n"
            "  --requests N           synthetic: number of requests (default 4000)\n"
            "  --rate R               synthetic: arrivals per second (default 4)\n"
            "  --zipf S               synthetic: prefix popularity exponent (default 1.0)\n"
            "  --prefixes K           synthetic: shared prefix documents (default 200)\n"
            "  --mean-output N        synthetic: mean output tokens, exponential (default 300)\n"
            "  --tier-mix A,B,C,D     synthetic: shares of <16K, 16-64K, 64-256K, >=256K contexts\n"
            "                         (default 0.7,0.2,0.08,0.02)\n"
            "  --speedup X            divide trace times by X, i.e. X times the load (default 1)\n"
            "cluster:\n"
            "  --prefill-instances N  (default 8)   --prefill-ranks N (default 8)   --decode-ranks N (default 64)\n"
            "  --cache-blocks N       prefix-cache capacity in 512-token blocks (default 1048576)\n"
            "  --moe-layers N         simulated MoE layers for moe_lb, 0 = off (default 4)\n"
            "  --moe-skew S           sigma of log expert popularity (default 0.6)\n"
            "  --moe-drift-s T        correlation time of the popularity drift, seconds (default 21600)\n"
            "  --tier-slo-ms A,B,C,D  prefill TTFT objectives per tier, weighing queue heads against each\n"
            "                         other (default 1000,2000,4000,8000)\n"
            "  --tier-overtake F      shorter work may overtake a longer prefill on its rank up to F x the\n"
            "                         longer one's predicted cost (default 0: never)\n"
            "  --decode-lb P          decode balancer of the control plane: balanced (default, serving.md\n"
            "                         7.2), step-time, kv, count, round-robin\n"
            "  --seed N               random seed (default 1)\n"
            "  --no-baselines         run only the control plane\n"
            "  --help                 this text\n");
}

static int parse_double(const char *flag, const char *v, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double d = v ? strtod(v, &end) : 0.0;
    if (!v || errno || *end || end == v || !(d >= lo && d <= hi)) {
        fprintf(stderr, "deepinfer sim: %s expects a number in [%g, %g], got '%s'\n", flag, lo, hi, v ? v : "");
        return -1;
    }
    *out = d;
    return 0;
}

static int parse_int(const char *flag, const char *v, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || errno || *end || end == v || x < lo || x > hi) {
        fprintf(stderr, "deepinfer sim: %s expects an integer in [%lld, %lld], got '%s'\n", flag, lo, hi, v ? v : "");
        return -1;
    }
    *out = x;
    return 0;
}

typedef struct {
    const char *trace;
    int synthetic, baselines;
    DiSimSynthConfig synth;
    DiSimConfig cfg;
} SimArgs;

/* Returns 0, or 2 for bad usage (message printed), or 1 when --help was printed. */
static int parse_args(int argc, char **argv, SimArgs *a) {
    a->trace = NULL;
    a->synthetic = 0;
    a->baselines = 1;
    a->synth = (DiSimSynthConfig){4000, 4.0, 200, 1.0, 0.5, 300.0, {0, 0, 0, 0}, 1};
    di_sim_config_default(&a->cfg);
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long x;
        int used = 1, rc = 0;
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            sim_usage(stdout);
            return 1;
        } else if (!strcmp(f, "--synthetic")) {
            a->synthetic = 1;
            used = 0;
        } else if (!strcmp(f, "--no-baselines")) {
            a->baselines = 0;
            used = 0;
        } else if (!strcmp(f, "--trace")) {
            if (!v) rc = -1, fprintf(stderr, "deepinfer sim: --trace needs a file\n");
            a->trace = v;
        } else if (!strcmp(f, "--requests")) {
            if ((rc = parse_int(f, v, 1, 10000000, &x)) == 0) a->synth.requests = (size_t)x;
        } else if (!strcmp(f, "--rate")) {
            rc = parse_double(f, v, 1e-6, 1e7, &a->synth.rate_per_s);
        } else if (!strcmp(f, "--zipf")) {
            rc = parse_double(f, v, 0, 10, &a->synth.zipf_s);
        } else if (!strcmp(f, "--mean-output")) {
            rc = parse_double(f, v, 1, 1e6, &a->synth.mean_output);
        } else if (!strcmp(f, "--tier-mix")) {
            double *m = a->synth.tier_mix;
            char tail;
            if (!v || sscanf(v, "%lf,%lf,%lf,%lf%c", &m[0], &m[1], &m[2], &m[3], &tail) != 4 || m[0] < 0 || m[1] < 0 ||
                m[2] < 0 || m[3] < 0 || m[0] + m[1] + m[2] + m[3] <= 0) {
                fprintf(stderr, "deepinfer sim: --tier-mix expects four shares >= 0 like 0.7,0.2,0.08,0.02\n");
                rc = -1;
            }
        } else if (!strcmp(f, "--tier-slo-ms")) {
            double *m = a->cfg.tier_slo_ms;
            char tail;
            if (!v || sscanf(v, "%lf,%lf,%lf,%lf%c", &m[0], &m[1], &m[2], &m[3], &tail) != 4 || !(m[0] > 0) ||
                !(m[1] > 0) || !(m[2] > 0) || !(m[3] > 0) || !isfinite(m[0] + m[1] + m[2] + m[3])) {
                fprintf(stderr, "deepinfer sim: --tier-slo-ms expects four positive times like 1000,2000,4000,8000\n");
                rc = -1;
            }
        } else if (!strcmp(f, "--tier-overtake")) {
            rc = parse_double(f, v, 0, 1e6, &a->cfg.jump_slowdown);
        } else if (!strcmp(f, "--prefixes")) {
            if ((rc = parse_int(f, v, 1, 1 << 20, &x)) == 0) a->synth.prefixes = (int)x;
        } else if (!strcmp(f, "--speedup")) {
            rc = parse_double(f, v, 1e-6, 1e6, &a->cfg.speedup);
        } else if (!strcmp(f, "--prefill-instances")) {
            if ((rc = parse_int(f, v, 1, 4096, &x)) == 0) a->cfg.prefill_instances = (int)x;
        } else if (!strcmp(f, "--prefill-ranks")) {
            if ((rc = parse_int(f, v, 1, 256, &x)) == 0) a->cfg.prefill_ranks = (int)x;
        } else if (!strcmp(f, "--decode-ranks")) {
            if ((rc = parse_int(f, v, 1, 4096, &x)) == 0) a->cfg.decode_ranks = (int)x;
        } else if (!strcmp(f, "--cache-blocks")) {
            if ((rc = parse_int(f, v, 1, 1 << 30, &x)) == 0) a->cfg.cache_blocks = (size_t)x;
        } else if (!strcmp(f, "--moe-layers")) {
            if ((rc = parse_int(f, v, 0, 256, &x)) == 0) a->cfg.moe_layers = (int)x;
        } else if (!strcmp(f, "--moe-skew")) {
            rc = parse_double(f, v, 0, 5, &a->cfg.moe_skew);
        } else if (!strcmp(f, "--moe-drift-s")) {
            rc = parse_double(f, v, 1e-3, 1e9, &a->cfg.moe_drift_tau_s);
        } else if (!strcmp(f, "--decode-lb")) {
            if (di_decode_lb_policy_parse(v, &a->cfg.decode_policy) != 0) {
                fprintf(stderr, "deepinfer sim: --decode-lb: %s\n", di_last_error());
                rc = -1;
            }
        } else if (!strcmp(f, "--seed")) {
            if ((rc = parse_int(f, v, 0, 0x7fffffffffffffffLL, &x)) == 0) a->cfg.seed = a->synth.seed = (uint64_t)x;
        } else {
            fprintf(stderr, "deepinfer sim: unknown option '%s'\n", f);
            rc = -1;
            used = 0;
        }
        if (rc != 0) {
            fprintf(stderr, "\n");
            sim_usage(stderr);
            return 2;
        }
        i += used;
    }
    if (!a->trace == !a->synthetic) {
        fprintf(stderr, "deepinfer sim: give exactly one of --trace FILE and --synthetic\n\n");
        sim_usage(stderr);
        return 2;
    }
    return 0;
}

static void human_line(const char *name, const DiSimResult *r) {
    fprintf(stderr, "%-28s TTFT p99 ms [<16K %.0f, 16-64K %.0f, 64-256K %.0f, >=256K %.0f]  TPOT p50 %.1f ms  "
                    "prefill imb %.3f  decode imb %.3f  out tok/s %.0f\n",
            name, r->ttft_s[0].p99 * 1e3, r->ttft_s[1].p99 * 1e3, r->ttft_s[2].p99 * 1e3, r->ttft_s[3].p99 * 1e3,
            r->tpot_s.p50 * 1e3, r->prefill_imbalance, r->decode_imbalance, r->output_tokens_per_s);
}

static int run_all(const DiSimTrace *trace, SimArgs *a) {
    DiSimResult ours, fifo, rr;
    if (di_sim_run(trace, &a->cfg, &ours) != 0) return -1;
    json_t *root = json_object();
    json_object_set_new(root, "workload", a->trace ? json_string(a->trace) : json_string("synthetic"));
    json_object_set_new(root, "requests", json_integer((json_int_t)trace->n));
    json_object_set_new(root, "config", di_sim_config_json(&a->cfg));
    json_object_set_new(root, "control_plane", di_sim_result_json(&ours));
    char name[64];
    snprintf(name, sizeof name, "tiered + %s + EPLB", di_decode_lb_policy_name(a->cfg.decode_policy));
    human_line(name, &ours);
    if (a->baselines) {
        DiSimConfig b = a->cfg;
        b.moe_layers = 0; /* EPLB baselines are inside the control-plane run's moe_lb */
        b.prefill_policy = DI_SIM_PREFILL_FIFO;
        b.decode_policy = DI_DECODE_LB_COUNT;
        if (di_sim_run(trace, &b, &fifo) != 0) goto fail;
        b.prefill_policy = DI_SIM_PREFILL_ROUND_ROBIN;
        b.decode_policy = DI_DECODE_LB_ROUND_ROBIN;
        if (di_sim_run(trace, &b, &rr) != 0) goto fail;
        json_object_set_new(root, "baseline_fifo_count", di_sim_result_json(&fifo));
        json_object_set_new(root, "baseline_round_robin", di_sim_result_json(&rr));
        json_object_set_new(root, "ratios", di_sim_ratios_json(&ours, &fifo, &rr));
        human_line("FIFO + request count", &fifo);
        human_line("round robin", &rr);
    }
    if (ours.has_moe)
        fprintf(stderr, "moe_lb decode: EPLB %.4f vs no EPLB %.4f; prefill: EPLB %.4f vs no EPLB %.4f\n",
                ours.moe_decode.eplb, ours.moe_decode.fixed, ours.moe_prefill.eplb, ours.moe_prefill.fixed);
    char *text = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(6));
    json_decref(root);
    if (!text) {
        fprintf(stderr, "deepinfer sim: could not format the summary\n");
        return 1;
    }
    puts(text);
    free(text);
    return 0;
fail:
    json_decref(root);
    return -1;
}

int cmd_sim(int argc, char **argv) {
    SimArgs a;
    int rc = parse_args(argc, argv, &a);
    if (rc == 1) return 0;
    if (rc == 2) return 2;
    DiSimTrace trace;
    if ((a.trace ? di_sim_trace_load(a.trace, &trace) : di_sim_trace_synthetic(&a.synth, &trace)) != 0) {
        fprintf(stderr, "deepinfer sim: %s\n", di_last_error());
        return 1;
    }
    rc = run_all(&trace, &a);
    di_sim_trace_free(&trace);
    if (rc < 0) {
        fprintf(stderr, "deepinfer sim: %s\n", di_last_error());
        return 1;
    }
    return rc;
}
