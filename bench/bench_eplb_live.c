/* bench_eplb_live.c — moe_lb (serving.md §8.3: slowest expert rank's routed tokens / the ranks'
 * mean, summed over layers and the steps of the last window) under a skewed (Zipf) expert load,
 * with live EPLB and without (the identity placement: expert e on rank e / (E / P), one replica),
 * on the same loads in the same run, through the live driver (cluster/eplb_live.h).
 *
 *   1. The real engine's counts: the built-in tiny model (8 layers x 8 routed experts, top-2),
 *      its router biases skewed so that selection follows a Zipf-like law over a per-layer random
 *      ranking of the experts (bias = -ALPHA ln(1 + rank); the bias only selects, §5.7), 8 greedy
 *      requests decoding together; 4 virtual ranks, 1 redundant expert each, window 50 / period
 *      100 steps (the first plan after the first window).
 *   2. V4.1-Flash's shape through the driver with synthetic counts: 40 MoE layers x 384 experts,
 *      top-6, Zipf(s) popularity over a per-layer random ranking, each step's count of expert e
 *      ~ Poisson(tokens x 6 x p_e) (normal approximation), under the decode preset (EP64, 1
 *      redundant per rank, window 1,000, every 10,000, first plan after 100) and the prefill
 *      preset (EP8, 4 per rank, 100 / 1,000).
 * Printed: moe_lb with EPLB, without, and their ratio (lower is better).  bench_eplb_policy.c
 * measures the policy alone on drifting log-normal popularity against the routing-noise floor;
 * this one adds the engine's own counts and the Zipf loads of issue 25, through the live driver
 * that `serve --eplb-ranks` runs. */
#include "base/error.h"
#include "cluster/eplb_live.h"
#include "cluster/rng.h"
#include "engine/engine.h"
#include "engine/runner_v41.h"
#include "model/model.h"
#include "model/tiny.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ALPHA 0.6f
enum { REQS = 8, GEN = 200, PROMPT = 8 };

static void cpu_model(void) {
    char line[256] = "unknown";
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0) break;
    if (f) fclose(f);
    char *colon = strchr(line, ':');
    printf("CPU: %s", colon ? colon + 2 : line);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void shuffle(int *a, int n, DiRng *r) {
    for (int i = 0; i < n; i++) a[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(di_rng_next(r) % (uint64_t)(i + 1)), t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

static void report(const char *what, DiEplbLive *lv, double seconds) {
    DiEplbLiveStats st;
    di_eplb_live_stats(lv, &st, NULL);
    printf("%-34s moe_lb EPLB %.4f | no EPLB (identity) %.4f | ratio %.3f | %lld steps, %lld replans, "
           "%lld moved slots, %.2f s\n",
           what, st.moe_lb, st.moe_lb_identity, st.moe_lb / st.moe_lb_identity, (long long)st.steps,
           (long long)st.replans, (long long)st.moved_slots, seconds);
}

typedef struct {
    DiEplbLive *live;
    int64_t hot, total; /* layer 0's hottest expert and all its pairs */
    int64_t *sum;
    int errors;
} Feed;

static void feed(void *user, const DiExpertLoad *load) {
    Feed *f = user;
    f->errors += di_eplb_live_record(f->live, load->tokens, load->layers, load->experts) != 0;
    for (int e = 0; e < load->experts; e++) f->sum[e] += load->tokens[e];
}

/* 1: the engine's own counts on the tiny model with skewed router biases. */
static int engine_counts(void) {
    char dir[4096];
    if (di_tiny_default_dir(dir, sizeof dir) != 0 || di_tiny_ensure(dir) != 0) return -1;
    Model *m = model_load(dir, MODE_REF);
    if (!m) return -1;
    int32_t *map = malloc((size_t)m->d.vocab * sizeof *map);
    for (int t = 0; map && t < m->d.vocab; t++) map[t] = t % m->d.engram_compressed_vocab; /* as the built-in model */
    if (!map || model_set_engram_token_map(m, map, m->d.vocab) != 0) return -1;
    free(map);
    DiRng rng = di_rng_seed(11);
    int L = m->d.n_layers, E = m->d.n_experts, rank[64];
    for (int l = 0; l < L && E <= 64; l++) {
        shuffle(rank, E, &rng);
        for (int e = 0; e < E; e++) m->w.layers[l].gate_bias[e] -= ALPHA * logf(1.0f + (float)rank[e]);
    }
    DiEngineOptions o;
    di_engine_options_init(&o);
    o.draft_max = 0;
    DiEngine *eng = di_engine_create_with_runner(di_v41_runner_create(m, 1, 0), &o);
    if (!eng) return -1;
    DiEplbLiveConfig cfg = {{L, E, 1, 1, 4, 1, 50, 100, 0}, NULL, NULL};
    int64_t sum[64] = {0};
    Feed f = {di_eplb_live_create(&cfg), 0, 0, sum, 0};
    if (!f.live || di_engine_set_expert_load_observer(eng, feed, &f) != 0) return -1;
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.temperature = 0;
    p.max_tokens = GEN;
    p.ignore_eos = 1;
    for (int r = 0; r < REQS; r++) {
        int32_t ids[PROMPT];
        for (int k = 0; k < PROMPT; k++) ids[k] = (int32_t)(di_rng_next(&rng) % 256);
        DiRequestInput in = {.prompt_ids = ids, .n_prompt_ids = PROMPT};
        uint64_t id;
        if (di_engine_add_request(eng, &in, &p, NULL, NULL, &id) != 0) return -1;
    }
    double t0 = now_s();
    if (di_engine_run(eng) != 0) return -1;
    double secs = now_s() - t0;
    for (int e = 0; e < E; e++) {
        f.total += sum[e];
        if (sum[e] > f.hot) f.hot = sum[e];
    }
    printf("engine (tiny, %d x %d experts, EP4 virtual): layer 0's hottest expert got %.1f%% of its pairs (uniform %.1f%%)\n",
           L, E, 100.0 * (double)f.hot / (double)f.total, 100.0 / E);
    report("  engine counts, window 50/100", f.live, secs);
    di_engine_destroy(eng);
    di_eplb_live_destroy(f.live);
    return f.errors ? di_errorf("%d steps refused", f.errors) : 0;
}

/* 2: V4.1-Flash's shape with synthetic Zipf counts through the driver. */
static int synthetic(DiEplbPhase phase, int gpus, int tokens, double s, int steps) {
    enum { SL = 40, SE = 384, K = 6 };
    DiEplbLiveConfig cfg = {di_eplb_policy_preset(phase, SL, SE, 8, gpus == 64 ? 8 : 1, gpus), NULL, NULL};
    DiEplbLive *lv = di_eplb_live_create(&cfg);
    double *lambda = malloc(sizeof(double) * SL * SE);
    int64_t *t = malloc(sizeof(int64_t) * SL * SE);
    if (!lv || !lambda || !t) return -1;
    DiRng rng = di_rng_seed(5);
    int rank[SE];
    for (int l = 0; l < SL; l++) {
        shuffle(rank, SE, &rng);
        double z = 0;
        for (int e = 0; e < SE; e++) z += pow(1.0 + rank[e], -s);
        for (int e = 0; e < SE; e++) lambda[l * SE + e] = (double)tokens * K * pow(1.0 + rank[e], -s) / z;
    }
    double t0 = now_s();
    for (int step = 0; step < steps; step++) {
        for (int i = 0; i < SL * SE; i++) {
            double c = lambda[i] + sqrt(lambda[i]) * di_rng_normal(&rng);
            t[i] = c > 0 ? (int64_t)(c + 0.5) : 0;
        }
        if (di_eplb_live_record(lv, t, SL, SE) != 0) return -1;
    }
    char what[96];
    snprintf(what, sizeof what, "  %s EP%d, Zipf s=%.1f, %d tok/step", phase == DI_EPLB_DECODE ? "decode" : "prefill", gpus, s,
             tokens);
    report(what, lv, now_s() - t0);
    di_eplb_live_destroy(lv);
    free(lambda);
    free(t);
    return 0;
}

int main(void) {
    cpu_model();
    int rc = engine_counts();
    printf("synthetic counts, V4.1-Flash shape (40 layers x 384 experts, top-6):\n");
    for (int i = 0; rc == 0 && i < 2; i++) rc = synthetic(DI_EPLB_DECODE, 64, 8192, i ? 1.0 : 0.5, 2000);
    for (int i = 0; rc == 0 && i < 2; i++) rc = synthetic(DI_EPLB_PREFILL, 8, 65536, i ? 1.0 : 0.5, 1200);
    if (rc != 0) fprintf(stderr, "bench_eplb_live: %s\n", di_last_error());
    return rc ? 1 : 0;
}
