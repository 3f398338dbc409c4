/* bench_engine.c — engine throughput and engine overhead, as ratios measured in the same run.
 *
 * 1. Throughput (generated tokens/s, prefill included) at batch 1, 4, 16, 64 on the medium
 *    synthetic model (bench_engine_synth.h): each batch size runs B requests of 8 prompt tokens and
 *    24 generated tokens; rounds interleave the batch sizes and the median of 3 rounds is quoted,
 *    as a ratio to batch 1 (target: batch 16 >= 6x).
 * 2. Overhead at batch 64 on the tiny synthetic model: scheduler + sampler + detokeniser time per
 *    step as a fraction of the step (target <= 5 %), in sync mode (where they add to the step) and
 *    in async mode (where planning and output overlap the forward: the fraction is then what the
 *    main thread spends outside waiting, relative to the step).
 * 3. The same two figures on the real V4.1 forward (golden tiny-a checkpoint of SHARED_DIR, its
 *    Engram maps from the golden set), batched through model_forward_batch like the engine runs
 *    it (bench_decode measures the same forward on the medium checkpoint, against its ceilings).
 * 4. The overhead at batch 64 on the built-in tiny model (the one `deepinfer` runs when no
 *    checkpoint is given: make-tiny, hidden 64, vocabulary 297), through the public
 *    di_engine_create: its own tokenizer detokenises, as for a user.  This is the figure.
 * Parts 1 and 2 use the synthetic model of bench_engine_synth.h. */
#include "bench_engine_synth.h"

#include "deepinfer.h"
#include "engine/engine.h"
#include "engine/runner_v41.h"
#include "golden/golden.h"
#include "model/tiny.h"

#include <stdio.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct {
    double seconds, tokens;
    DiEngineMetrics m;
} RunResult;

static Model *v41_model;        /* part 3: when set, run_batch uses the real model instead of cfg */
static const char *builtin_dir; /* part 4: when set, run_batch creates the engine from this directory */

static RunResult run_batch(const SynthConfig *cfg, int batch, int prompt_len, int gen, int async, float temperature) {
    DiEngineOptions o;
    di_engine_options_init(&o);
    o.max_num_seqs = batch;
    o.max_batch_tokens = batch * prompt_len > 512 ? batch * prompt_len : 512;
    o.async_scheduling = async;
    o.state_memory_bytes = (size_t)64 << 20;
    RunResult r = {0};
    DiEngine *e;
    int vocab = 256; /* the built-in model's byte tokens: plain text, no special tokens */
    if (builtin_dir) {
        e = di_engine_create(builtin_dir, &o);
    } else {
        DiRunner *runner = v41_model ? di_v41_runner_create(v41_model, 0, 0) : synth_runner_create(cfg, o.max_batch_tokens);
        vocab = runner->vocab_size;
        e = di_engine_create_with_runner(runner, &o);
        DiTextHooks text = {NULL, synth_token_bytes, NULL, NULL, NULL, -1};
        if (e && di_engine_set_text_hooks(e, &text) != 0) {
            di_engine_destroy(e);
            e = NULL;
        }
    }
    if (!e) {
        fprintf(stderr, "bench_engine: %s\n", di_last_error());
        exit(1);
    }
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.temperature = temperature;
    p.top_p = 0.95f;
    p.max_tokens = gen;
    p.has_seed = 1;
    int32_t prompt[64];
    for (int i = 0; i < batch; i++) {
        for (int k = 0; k < prompt_len; k++) prompt[k] = (i * 31 + k * 7) % vocab;
        p.seed = (uint64_t)i;
        DiRequestInput in = {.prompt_ids = prompt, .n_prompt_ids = prompt_len};
        if (di_engine_add_request(e, &in, &p, NULL, NULL, NULL) != 0) {
            fprintf(stderr, "bench_engine: %s\n", di_last_error());
            exit(1);
        }
    }
    double t0 = now_s();
    if (di_engine_run(e) != 0) {
        fprintf(stderr, "bench_engine: %s\n", di_last_error());
        exit(1);
    }
    r.seconds = now_s() - t0;
    r.tokens = (double)batch * gen;
    di_engine_get_metrics(e, &r.m);
    di_engine_destroy(e);
    return r;
}

static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define ROUNDS 3

static void throughput(void) {
    const int batches[4] = {1, 4, 16, 64};
    double tps[4][ROUNDS];
    printf("throughput, medium synthetic model (hidden %d, ffn %d, %d layers, vocab %d), 8 prompt + 24 generated "
           "tokens per request, async scheduling:\n",
           SYNTH_MEDIUM.hidden, SYNTH_MEDIUM.ffn, SYNTH_MEDIUM.layers, SYNTH_MEDIUM.vocab);
    for (int round = 0; round < ROUNDS; round++)
        for (int b = 0; b < 4; b++) {
            RunResult r = run_batch(&SYNTH_MEDIUM, batches[b], 8, 24, 1, 0.8f);
            tps[b][round] = r.tokens / r.seconds;
        }
    double median[4];
    for (int b = 0; b < 4; b++) {
        qsort(tps[b], ROUNDS, sizeof(double), compare_double);
        median[b] = tps[b][ROUNDS / 2];
    }
    for (int b = 0; b < 4; b++)
        printf("  batch %2d: %8.1f tokens/s (median of %d)  ratio to batch 1: %5.2fx\n", batches[b], median[b], ROUNDS,
               median[b] / median[0]);
    printf("  batch 16 / batch 1 = %.2fx (target >= 6x): %s\n", median[2] / median[0],
           median[2] / median[0] >= 6.0 ? "ok" : "BELOW TARGET");
}

/* Sync and async runs of 64 requests (16 prompt + 64 generated tokens) on cfg (or the model
 * selected by v41_model / builtin_dir): scheduler + sampler + detokeniser time over the run's
 * wall time, median of ROUNDS. */
static void overhead_at_batch_64(const SynthConfig *cfg) {
    for (int async = 0; async < 2; async++) {
        double frac[ROUNDS];
        RunResult last = {0};
        for (int round = 0; round < ROUNDS; round++) {
            last = run_batch(cfg, 64, 16, 64, async, 0.8f);
            const DiEngineMetrics *m = &last.m;
            frac[round] = (m->time_schedule_s + m->time_sample_s + m->time_output_s) / last.seconds;
        }
        qsort(frac, ROUNDS, sizeof(double), compare_double);
        const DiEngineMetrics *m = &last.m;
        printf("  %s: schedule %.3f ms, sample %.3f ms, output %.3f ms, forward %.3f ms per step (%llu steps); "
               "overhead / step = %.2f %% (median of %d; target <= 5 %%): %s\n",
               async ? "async" : "sync ", 1e3 * m->time_schedule_s / m->steps, 1e3 * m->time_sample_s / m->steps,
               1e3 * m->time_output_s / m->steps, 1e3 * m->time_forward_s / m->steps, (unsigned long long)m->steps,
               100 * frac[ROUNDS / 2], ROUNDS, frac[ROUNDS / 2] <= 0.05 ? "ok" : "ABOVE TARGET");
    }
}

static void overhead(void) {
    printf("overhead at batch 64, tiny synthetic model (hidden %d, %d layers, vocab %d), 16 prompt + 64 generated, "
           "T=0.8 top_p=0.95:\n",
           SYNTH_TINY.hidden, SYNTH_TINY.layers, SYNTH_TINY.vocab);
    overhead_at_batch_64(&SYNTH_TINY);
}

static int load_golden_model(void) {
    const char *shared = getenv("SHARED_DIR");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/golden-v41/tiny-a", shared && *shared ? shared : "../shared");
    GoldenSet g;
    if (golden_open(dir, &g) != 0) return -1;
    snprintf(dir, sizeof dir, "%s/golden-v41/tiny-a/checkpoint", shared && *shared ? shared : "../shared");
    v41_model = model_load(dir, MODE_REF);
    int rc = v41_model ? golden_prepare_model(&g, v41_model) : -1;
    golden_close(&g);
    return rc;
}

/* Part 3: batch ratios and overhead on the real forward (small runs: it is slow per token).  The
 * overhead at batch 64 is the figure on a real V4.1 tiny model (same formula as part 2:
 * schedule + sample + output time over the run's wall time). */
static void real_model(void) {
    if (load_golden_model() != 0) {
        printf("real V4.1 forward: skipped (%s)\n", di_last_error());
        return;
    }
    printf("real V4.1 forward, golden tiny-a (hidden %d, %d layers, vocab %d), 4 prompt + 16 generated, async, "
           "T=0.8 top_p=0.95:\n",
           v41_model->d.dim, v41_model->d.n_layers, v41_model->d.vocab);
    enum { N = 3 };
    const int batches[N] = {1, 8, 64};
    double tps[N];
    RunResult last = {0};
    for (int b = 0; b < N; b++) {
        RunResult r = run_batch(NULL, batches[b], 4, 16, 1, 0.8f);
        tps[b] = r.tokens / r.seconds;
        last = r;
    }
    for (int b = 0; b < N; b++)
        printf("  batch %2d: %8.1f tokens/s  ratio to batch 1: %5.2fx\n", batches[b], tps[b], tps[b] / tps[0]);
    const DiEngineMetrics *m = &last.m;
    double frac = (m->time_schedule_s + m->time_sample_s + m->time_output_s) / last.seconds;
    printf("  batch 64: schedule %.3f ms, sample %.3f ms, output %.3f ms, forward %.3f ms per step; overhead / step = "
           "%.2f %% (target <= 5 %%): %s\n",
           1e3 * m->time_schedule_s / m->steps, 1e3 * m->time_sample_s / m->steps, 1e3 * m->time_output_s / m->steps,
           1e3 * m->time_forward_s / m->steps, 100 * frac, frac <= 0.05 ? "ok" : "ABOVE TARGET");
    model_free(v41_model);
    v41_model = NULL;
}

/* Part 4: the overhead at batch 64 on the built-in tiny model. */
static void builtin_model(void) {
    char dir[4096];
    if (di_builtin_model_dir(dir, sizeof dir) != 0 || di_tiny_ensure(dir) != 0) {
        printf("built-in tiny model: skipped (%s)\n", di_last_error());
        return;
    }
    printf("overhead at batch 64, built-in tiny model %s, 16 prompt + 64 generated, T=0.8 top_p=0.95:\n", dir);
    builtin_dir = dir;
    overhead_at_batch_64(NULL);
    builtin_dir = NULL;
}

/* No argument: every part; "throughput", "overhead", "real" or "builtin": that part only. */
int main(int argc, char **argv) {
    openblas_set_num_threads(1); /* one core for the model: the machine's cores are shared */
    const char *only = argc > 1 ? argv[1] : "";
    if (!*only || strcmp(only, "throughput") == 0) throughput();
    if (!*only || strcmp(only, "overhead") == 0) overhead();
    if (!*only || strcmp(only, "real") == 0) real_model();
    if (!*only || strcmp(only, "builtin") == 0) builtin_model();
    return 0;
}
