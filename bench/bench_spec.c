/* bench_spec.c — DSpark speculative decoding in the engine, as ratios measured in the same run
 * (engine-features.md §1, issue 21 "Performance"):
 * 1. Batch-1 greedy decode on the planted medium checkpoint (make-tiny --config medium --planted:
 *    its drafter agrees with its target): mean accepted drafts per verify step L, the cost C of a
 *    draft + verify step relative to a plain decode step, the ideal speed-up (L + 1) / C and the
 *    measured one (decode tokens/s against the same engine with draft_max 0), for the fixed and
 *    the confidence schedule.
 * 2. Batch 16 on the same checkpoint: throughput with the confidence schedule against none.
 * 3. The built-in random tiny model (drafts almost never accepted), batch 1: throughput with the
 *    confidence schedule (DEEPINFER_ENABLE_MTP_VARLEN=1, the default) against none.
 * Each configuration has its own engine, warmed up by one run (the confidence schedule learns its
 * cost curve and calibration as an engine serves); each figure is the median of ROUNDS runs, the
 * configurations interleaved within a round.  The
 * planted checkpoint is written once ($DEEPINFER_BENCH_DIR-planted, else
 * $XDG_CACHE_HOME/deepinfer/bench-medium-planted, else ~/.cache/...): about 1.5 min. */
#include "deepinfer.h"

#include "base/file.h"
#include "base/log.h"
#include "engine/step.h"
#include "model/tiny.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROUNDS 5
#define PROMPT 16
#define GEN 64

static void die(const char *what) {
    fprintf(stderr, "bench_spec: %s: %s\n", what, di_last_error());
    exit(1);
}

/* The median of n values (n small: an insertion sort in place). */
static double median(double *v, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return v[n / 2];
}

/* The planted medium checkpoint, written when its completion marker is missing. */
static void planted_dir(char *buf, size_t n) {
    const char *env = getenv("DEEPINFER_BENCH_DIR");
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (env && *env) snprintf(buf, n, "%s-planted", env);
    else if (xdg && *xdg) snprintf(buf, n, "%s/deepinfer/bench-medium-planted", xdg);
    else snprintf(buf, n, "%s/.cache/deepinfer/bench-medium-planted", home && *home ? home : "/tmp");
    char marker[4200];
    snprintf(marker, sizeof marker, "%s/.planted-complete", buf);
    if (di_file_exists(marker)) return;
    fprintf(stderr, "bench_spec: writing the planted medium checkpoint to %s\n", buf);
    if (di_tiny_write_planted(buf, "medium", DI_TINY_DEFAULT_SEED, 1) < 0) die("make-tiny --config medium --planted");
    FILE *f = fopen(marker, "w");
    if (f) fclose(f);
}

typedef struct {
    double decode_s, tokens_per_s; /* decode phase: first token -> last, all requests together */
    uint64_t decode_steps, drafts, draft_tokens, accepted;
    double draft_s, forward_s;     /* the drafter's and the forwards' share of decode_s */
} Run;

static DiEngine *engine(const char *dir, int batch, int draft_max, int schedule) {
    DiEngineOptions o;
    di_engine_options_init(&o);
    o.max_num_seqs = batch;
    o.draft_max = draft_max;
    o.draft_schedule = schedule;
    DiEngine *e = di_engine_create(dir, &o);
    if (!e) die(dir ? dir : "the built-in model");
    return e;
}

/* batch requests of PROMPT tokens (distinct per round >= -1), GEN greedy tokens each, on engine e. */
static Run run(DiEngine *e, int batch, int round) {
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.temperature = 0;
    p.max_tokens = GEN;
    p.ignore_eos = 1;
    int32_t prompt[PROMPT];
    int32_t vocab = di_engine_vocab_size(e), span = vocab < 256 ? vocab : 256;
    uint64_t ids[64];
    for (int i = 0; i < batch; i++) {
        for (int k = 0; k < PROMPT; k++) prompt[k] = (int32_t)((i * 31 + k * 7 + (round + 1) * 101 + 3) % span);
        DiRequestInput in = {.prompt_ids = prompt, .n_prompt_ids = PROMPT};
        if (di_engine_add_request(e, &in, &p, NULL, NULL, &ids[i]) != 0) die("add request");
    }
    /* the first step prefills every prompt (16 x 16 tokens fit the default budget of 512) */
    int active = 1;
    if (di_engine_step(e, &active) != 0) die("prefill");
    DiEngineMetrics m0, m1;
    di_engine_get_metrics(e, &m0);
    double t0 = di_now_seconds();
    while (active > 0)
        if (di_engine_step(e, &active) != 0) die("decode");
    Run r = {.decode_s = di_now_seconds() - t0};
    di_engine_get_metrics(e, &m1);
    r.tokens_per_s = (double)batch * (GEN - 1) / r.decode_s;
    r.decode_steps = m1.steps - m0.steps;
    r.drafts = m1.spec_num_drafts - m0.spec_num_drafts;
    r.draft_tokens = m1.spec_num_draft_tokens - m0.spec_num_draft_tokens;
    r.accepted = m1.spec_num_accepted_tokens - m0.spec_num_accepted_tokens;
    r.draft_s = m1.time_draft_s - m0.time_draft_s;
    r.forward_s = m1.time_forward_s - m0.time_forward_s;
    for (int i = 0; i < batch; i++) di_engine_release(e, ids[i]);
    return r;
}

/* Part 1: batch 1, plain against the two schedules, each on its own engine after a warm-up run
 * (the confidence schedule learns its cost curve and calibration as an engine serves). */
static void batch1(const char *dir) {
    double plain_tps[ROUNDS], plain_step[ROUNDS], plain_fwd[ROUNDS], tps[2][ROUNDS], step[2][ROUNDS], L[2][ROUNDS];
    double draft[2][ROUNDS], verify[2][ROUNDS]; /* per decode step */
    DiEngine *plain = engine(dir, 1, 0, 0), *spec[2] = {engine(dir, 1, 5, 0), engine(dir, 1, 5, 1)};
    run(plain, 1, -1);
    for (int s = 0; s < 2; s++) run(spec[s], 1, -1);
    for (int round = 0; round < ROUNDS; round++) {
        Run p = run(plain, 1, round);
        plain_tps[round] = p.tokens_per_s;
        plain_step[round] = p.decode_s / (double)p.decode_steps;
        plain_fwd[round] = p.forward_s / (double)p.decode_steps;
        for (int s = 0; s < 2; s++) {
            Run r = run(spec[s], 1, round);
            tps[s][round] = r.tokens_per_s;
            step[s][round] = r.decode_s / (double)r.decode_steps;
            L[s][round] = r.drafts ? (double)r.accepted / (double)r.drafts : 0;
            draft[s][round] = r.draft_s / (double)r.decode_steps;
            verify[s][round] = r.forward_s / (double)r.decode_steps;
        }
    }
    di_engine_destroy(plain);
    for (int s = 0; s < 2; s++) di_engine_destroy(spec[s]);
    double base_tps = median(plain_tps, ROUNDS), base_step = median(plain_step, ROUNDS);
    double base_fwd = median(plain_fwd, ROUNDS);
    printf("batch 1, planted medium, %d prompt + %d greedy tokens, median of %d: plain %.1f tokens/s, %.2f ms/step\n",
           PROMPT, GEN, ROUNDS, base_tps, base_step * 1e3);
    for (int s = 0; s < 2; s++) {
        double l = median(L[s], ROUNDS), c = median(step[s], ROUNDS) / base_step, t = median(tps[s], ROUNDS);
        printf("  draft_max 5, %-10s: L %.2f accepted/step, C %.2f (%.2f ms/step), ideal (L+1)/C %.2fx, measured "
               "%.2fx (%.1f tokens/s), measured/ideal %.2f\n",
               s ? "confidence" : "fixed", l, c, median(step[s], ROUNDS) * 1e3, (l + 1) / c, t / base_tps, t,
               t / base_tps / ((l + 1) / c));
        printf("    per step: drafter %.2f ms, verify forward %.2f ms (%.2fx the plain forward's %.2f ms)\n",
               median(draft[s], ROUNDS) * 1e3, median(verify[s], ROUNDS) * 1e3, median(verify[s], ROUNDS) / base_fwd,
               base_fwd * 1e3);
    }
}

/* Parts 2 and 3: throughput with the confidence schedule against none (warm engines). */
static void ratio(const char *what, const char *dir, int batch) {
    double plain[ROUNDS], spec[ROUNDS];
    uint64_t verified = 0, accepted = 0;
    DiEngine *e0 = engine(dir, batch, 0, 1), *e1 = engine(dir, batch, 5, 1);
    run(e0, batch, -1);
    run(e1, batch, -1);
    for (int round = 0; round < ROUNDS; round++) {
        plain[round] = run(e0, batch, round).tokens_per_s;
        Run r = run(e1, batch, round);
        spec[round] = r.tokens_per_s;
        verified += r.draft_tokens;
        accepted += r.accepted;
    }
    di_engine_destroy(e0);
    di_engine_destroy(e1);
    double a = median(plain, ROUNDS), b = median(spec, ROUNDS);
    printf("%s, batch %d: plain %.1f tokens/s, confidence schedule %.1f tokens/s: %.2fx (drafts verified %llu, "
           "accepted %llu over %d runs)\n",
           what, batch, a, b, b / a, (unsigned long long)verified, (unsigned long long)accepted, ROUNDS);
}

int main(void) {
    di_log_set_level(DI_LOG_WARN);
    char dir[4096];
    planted_dir(dir, sizeof dir);
    batch1(dir);
    ratio("planted medium", dir, 16);
    ratio("built-in random tiny", NULL, 1); /* NULL: the built-in model, generated on first use */
    return 0;
}
