/* bench_decode.c — CPU decode speed of the V4.1 forward pass on the medium synthetic checkpoint
 * (make-tiny --config medium: hidden 1024, 64 experts, ~520 MB), against the memory-bandwidth
 * bound measured in the same run (issue 2), and batched decode throughput at 1, 4, 16 and 64
 * sequences (issue 4).
 *
 * Bandwidth bound: decode at batch 1 must stream every weight byte a token reads (embedding row,
 * mHC mixing matrices, attention, compressor and indexer projections, router, the top-k routed
 * experts plus the shared expert, the DSpark context projections, final norm and head), so
 *     bound tokens/s = measured bandwidth / active weight bytes per token.
 * Bandwidth is the STREAM triad a[i] = b[i] + s*c[i] over arrays far larger than the caches,
 * 3 x 4 bytes per element (STREAM's convention), best of several passes, on 1 and on 2 threads.
 * KV-cache reads are not counted (a few KB at these context lengths).
 *
 * The checkpoint is generated once into $DEEPINFER_BENCH_DIR (default
 * $XDG_CACHE_HOME/deepinfer/bench-medium, else ~/.cache/deepinfer/bench-medium) and reused.
 * Runs are interleaved and medians quoted; CPU time is printed next to wall time because the
 * machine is shared.  Numerics: batch 1 in both ref (the default) and exact, interleaved; the
 * batched half in exact (float32 activations).
 * DEEPINFER_BENCH_ONLY=batch1 or =batched runs one half, DEEPINFER_BENCH_MODE=ref or =exact
 * runs batch 1 in that mode alone (both lines then show it), to profile them with perf. */
#include "base/error.h"
#include "base/mem.h"
#include "base/threadpool.h"
#include "bench_medium.h"
#include "kernels/matmul.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/state.h"
#include "model/tiny.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#else
#include <arm_neon.h>
#endif

enum { PROMPT = 16, WARMUP = 2, DECODE_STEPS = 24, REPS = 3, BATCH_PROMPT = 8, BATCH_STEPS = 4 };

static const int batch_sizes[] = {1, 4, 16, 64};

/* Batch 1 runs under both numerics: ref (the default: §4.3 activation quantisation, the FP4
 * experts in block order, matmul.h) and exact (float32 activations); the batched part runs exact. */
static const NumericsMode bench_modes[] = {MODE_REF, MODE_EXACT};
#define N_MODES ((int)(sizeof bench_modes / sizeof bench_modes[0]))
#define N_BATCH ((int)(sizeof batch_sizes / sizeof batch_sizes[0]))

static double wall_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#if defined(__x86_64__)
/* The CPU's brand string (cpuid leaves 0x80000002-4) with its family and model (leaf 1), so that
 * every figure names its machine (a virtual machine may shorten the brand to "AMD EPYC"). */
static void cpu_name(char *out, size_t size) {
    unsigned r[13] = {0}, eax = 0, ebx, ecx, edx;
    for (unsigned i = 0; i < 3; i++)
        if (!__get_cpuid(0x80000002u + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3])) break;
    __get_cpuid(1, &eax, &ebx, &ecx, &edx);
    unsigned family = ((eax >> 8) & 0xF) + ((eax >> 20) & 0xFF), model = ((eax >> 4) & 0xF) | ((eax >> 12) & 0xF0);
    snprintf(out, size, "%s (family %xh, model %u)", (const char *)r, family, model);
}
#else
/* aarch64: the core's implementer and part numbers (MIDR, as /proc/cpuinfo gives them). */
static void cpu_name(char *out, size_t size) {
    char line[256], impl[32] = "?", part[32] = "?";
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        if (sscanf(line, "CPU implementer : %31s", impl) == 1) continue;
        if (sscanf(line, "CPU part : %31s", part) == 1) break;
    }
    if (f) fclose(f);
    snprintf(out, size, "aarch64 (implementer %s, part %s)", impl, part);
}
#endif

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

static void die(const char *what) {
    fprintf(stderr, "bench_decode: %s: %s\n", what, di_error_message());
    exit(1);
}

/* ---------------------------------------------------------------- checkpoint cache */

/* Reused when complete and written by a build with the same config and tokenizer, else
 * (re)generated: ~1.5 min. */
static void ensure_checkpoint(const char *dir) {
    if (di_tiny_ensure_preset(dir, "medium", 1) != 0) die("make-tiny --config medium");
}

/* ---------------------------------------------------------------- STREAM triad */

typedef struct {
    float *a;
    const float *b, *c;
    int64_t n;
    int parts;
} Triad;

static void triad_part(void *ctx, int task, int thread) {
    (void)thread;
    Triad *t = ctx;
    int64_t lo = t->n * task / t->parts, hi = t->n * (task + 1) / t->parts;
    for (int64_t i = lo; i < hi; i++) t->a[i] = t->b[i] + 3.0f * t->c[i];
}

/* bytes per second, best of `passes` */
static double triad_bandwidth(DiThreadPool *pool, float *a, const float *b, const float *c, int64_t n, int passes) {
    Triad t = {a, b, c, n, di_pool_threads(pool)};
    double best = 1e30;
    for (int p = 0; p < passes; p++) {
        double t0 = wall_s();
        di_pool_run(pool, t.parts, triad_part, &t);
        double dt = wall_s() - t0;
        if (dt < best) best = dt;
    }
    return 3.0 * 4.0 * (double)n / best;
}

/* ---------------------------------------------------------------- FP32 FMA peak */

/* The arithmetic ceiling of the kernels' instruction set (AVX2 + FMA, float32: matmul_avx2.c):
 * 12 independent chains of 8-lane multiply-adds, enough to cover the FMA latency on both FMA
 * ports; 2 x 8 FLOP per FMA.  The matmul kernels can at best reach this, so a batched step whose
 * arithmetic runs near it cannot gain more from batching on this machine. */
#define PEAK_CHAINS 12
typedef struct {
    int64_t iters;
    float sink[64];
} FmaPeak;

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static void fma_part(void *ctx, int task, int thread) {
    (void)thread;
    FmaPeak *p = ctx;
    __m256 acc[PEAK_CHAINS], mul = _mm256_set1_ps(0.999999f), add = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = _mm256_set1_ps(1.0f + (float)(i + task) * 1e-3f); /* distinct: no CSE */
    for (int64_t k = 0; k < p->iters; k++)
        for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = _mm256_fmadd_ps(acc[i], mul, add);
    __m256 sum = acc[0];
    for (int i = 1; i < PEAK_CHAINS; i++) sum = _mm256_add_ps(sum, acc[i]);
    float out[8];
    _mm256_storeu_ps(out, sum);
    p->sink[task % 64] = out[0];
}
#else
/* aarch64 (the NEON kernels): each 8-lane chain is two float32x4 chains, the same FLOPs. */
static void fma_part(void *ctx, int task, int thread) {
    (void)thread;
    FmaPeak *p = ctx;
    float32x4_t acc[2 * PEAK_CHAINS], mul = vdupq_n_f32(0.999999f), add = vdupq_n_f32(1e-7f);
    for (int i = 0; i < 2 * PEAK_CHAINS; i++) acc[i] = vdupq_n_f32(1.0f + (float)(i + task) * 1e-3f);
    for (int64_t k = 0; k < p->iters; k++)
        for (int i = 0; i < 2 * PEAK_CHAINS; i++) acc[i] = vfmaq_f32(add, acc[i], mul);
    float32x4_t sum = acc[0];
    for (int i = 1; i < 2 * PEAK_CHAINS; i++) sum = vaddq_f32(sum, acc[i]);
    p->sink[task % 64] = vgetq_lane_f32(sum, 0);
}
#endif

/* FLOP/s of the pool's threads together, best of `passes` */
static double fma_peak(DiThreadPool *pool, int passes) {
    FmaPeak p = {.iters = 20 * 1000 * 1000};
    double best = 1e30;
    int threads = di_pool_threads(pool);
    for (int r = 0; r < passes; r++) {
        double t0 = wall_s();
        di_pool_run(pool, threads, fma_part, &p);
        double dt = wall_s() - t0;
        if (dt < best) best = dt;
    }
    return 2.0 * 8.0 * PEAK_CHAINS * (double)p.iters * threads / best;
}

/* ---------------------------------------------------------------- active bytes per token */

/* What one weight matrix costs a token: its bytes (bandwidth) or its multiply-adds (arithmetic). */
typedef double (*MatMeasure)(const DiMatrix *w);

static double mat_bytes(const DiMatrix *w) {
    if (!w->data || w->rows <= 0) return 0;
    return (double)(di_matrix_data_bytes(w) + di_matrix_scale_bytes(w));
}

static double mat_madds(const DiMatrix *w) {
    if (!w->data || w->rows <= 0) return 0;
    return (double)w->rows * (double)w->cols;
}

static double expert_cost(const ExpertWeights *e, MatMeasure f) { return f(&e->w1) + f(&e->w2) + f(&e->w3); }
static double expert_bytes(const ExpertWeights *e) { return expert_cost(e, mat_bytes); }

static double active_cost(const Model *m, MatMeasure cost, bool vector_bytes);

/* Weight bytes one decode token reads; idx_wk runs once per emitted entry (every ratio tokens). */
static double active_bytes(const Model *m) { return active_cost(m, mat_bytes, true); }

/* The matrix multiply-adds of one decode token (the same matrices as active_bytes; the vector
 * terms there are bytes only, and attention over an 8..40-token context adds < 1 %). */
static double active_madds(const Model *m) { return active_cost(m, mat_madds, false); }

/* `cost` summed over the matrices one token uses, plus (vector_bytes) the bytes of the vectors
 * it reads. */
static double active_cost(const Model *m, MatMeasure cost, bool vector_bytes) {
    const ModelDims *d = &m->d;
    const double vec = vector_bytes ? 1.0 : 0.0;
    double D4 = vec * 4.0 * d->dim, b = vec * (double)d->dim * 2; /* embedding row, BF16 */
    for (int L = 0; L < d->n_layers; L++) {
        const LayerWeights *lw = &m->w.layers[L];
        b += cost(&lw->hc_attn_fn) + cost(&lw->hc_ffn_fn) + 2 * D4;
        b += cost(&lw->wq_a) + cost(&lw->wq_b) + cost(&lw->wkv) + cost(&lw->wo_a) + cost(&lw->wo_b);
        b += vec * 4.0 * (d->q_rank + d->head_dim + d->n_heads);
        if (d->layer[L].role == DI_ROLE_FULL) {
            b += cost(&lw->comp_wkv) + cost(&lw->comp_wgate);
            b += cost(&lw->idx_wk) / (d->layer[L].compress_ratio > 0 ? d->layer[L].compress_ratio : 1);
        }
        if (d->layer[L].role == DI_ROLE_FULL || d->layer[L].role == DI_ROLE_REINDEX) b += cost(&lw->idx_wq_b) + cost(&lw->idx_weights_proj);
        b += cost(&lw->gate) + vec * 4.0 * lw->n_experts;
        b += d->top_k * expert_cost(&lw->experts[0], cost);
        if (lw->has_shared) b += expert_cost(&lw->shared, cost);
        if (lw->has_engram) /* one E4M3 row + scales per hash column */
            b += cost(&lw->engram_wkv) + vec * (4.0 * d->hc_mult * d->dim +
                 (double)(d->engram_max_ngram - 1) * d->engram_heads * (d->engram_head_dim + d->engram_head_dim / 32.0));
    }
    if (m->w.has_dspark && d->n_taps > 0) {
        b += cost(&m->w.main_proj) + D4;
        for (int s = 0; s < d->n_mtp; s++) b += cost(&m->w.layers[d->n_layers + s].wkv) + vec * 4.0 * d->head_dim;
    }
    return b + D4 + cost(&m->w.head);
}

/* The routed-expert part of active_bytes: top_k experts of every backbone layer. */
static double routed_bytes_per_token(const Model *m) {
    double b = 0;
    for (int L = 0; L < m->d.n_layers; L++) b += m->d.top_k * expert_bytes(&m->w.layers[L].experts[0]);
    return b;
}

/* Weight bytes one batched step must read: everything but the routed experts once, plus every
 * distinct routed expert the step's rows chose (experts = the trace, [n_layers][rows][top_k]).
 * This, not rows x active_bytes, is what batching can reuse: at batch B each of E experts is
 * chosen by some row with probability 1 - (1 - top_k/E)^B under uniform routing. */
static double step_bytes(const Model *m, const int32_t *experts, int64_t rows, double active, int *distinct_total) {
    double b = active - routed_bytes_per_token(m);
    *distinct_total = 0;
    for (int L = 0; L < m->d.n_layers; L++) {
        const LayerWeights *lw = &m->w.layers[L];
        bool *seen = calloc((size_t)lw->n_experts, sizeof *seen);
        if (!seen) die("allocation");
        int distinct = 0;
        for (int64_t i = 0; i < rows * m->d.top_k; i++) {
            int32_t e = experts[(int64_t)L * rows * m->d.top_k + i];
            if (e >= 0 && e < lw->n_experts && !seen[e]) seen[e] = true, distinct++;
        }
        free(seen);
        *distinct_total += distinct;
        b += distinct * expert_bytes(&lw->experts[0]);
    }
    return b;
}

/* ---------------------------------------------------------------- decode */

/* Heap allocations (di_alloc_count: every allocation the library makes) inside the timed decode
 * forwards, and the tokens they decoded: the model's allocations per decoded token (issue 20:
 * 0 at steady state, ~570 on the tiny model before the workspace). */
static long long timed_allocs, timed_tokens;

static int32_t token_at(int64_t seq, int64_t i, int vocab) { return (int32_t)(3 + (seq * 7919 + i * 104729) % (vocab - 3)); }

/* Median wall and CPU seconds per decode step of one sequence on `pool`. */
static void decode_batch1(Model *m, DiThreadPool *pool, double *wall, double *cpu) {
    m->pool = pool;
    RunState *st = state_create(&m->d);
    float *logits = malloc((size_t)m->d.vocab * sizeof *logits);
    int32_t prompt[PROMPT];
    for (int i = 0; i < PROMPT; i++) prompt[i] = token_at(0, i, m->d.vocab);
    if (!st || !logits || model_forward(m, st, prompt, PROMPT, 0, logits, false, NULL) != 0) die("prefill");
    double w[DECODE_STEPS], c[DECODE_STEPS];
    for (int s = 0; s < WARMUP + DECODE_STEPS; s++) {
        int32_t tok = token_at(0, PROMPT + s, m->d.vocab);
        long long a0 = di_alloc_count();
        double w0 = wall_s(), c0 = cpu_s();
        if (model_forward(m, st, &tok, 1, PROMPT + s, logits, false, NULL) != 0) die("decode");
        if (s >= WARMUP) {
            w[s - WARMUP] = wall_s() - w0, c[s - WARMUP] = cpu_s() - c0;
            timed_allocs += di_alloc_count() - a0, timed_tokens++;
        }
    }
    *wall = median(w, DECODE_STEPS);
    *cpu = median(c, DECODE_STEPS);
    state_free(st);
    free(logits);
}

/* Median wall and CPU seconds per batched decode step of B sequences (one token each), and
 * the mean weight bytes per step and distinct routed experts per layer (step_bytes). */
typedef struct {
    double wall, cpu, bytes, experts_per_layer;
} BatchedStep;

static BatchedStep decode_batched(Model *m, int B, double active) {
    RunState **st = calloc((size_t)B, sizeof *st);
    ForwardSeq *q = calloc((size_t)B, sizeof *q);
    int32_t *toks = malloc((size_t)B * BATCH_PROMPT * sizeof *toks);
    float *logits = malloc((size_t)B * m->d.vocab * sizeof *logits);
    int32_t *experts = malloc((size_t)m->d.n_layers * B * m->d.top_k * sizeof *experts);
    ForwardTrace trace = {.experts = experts};
    if (!st || !q || !toks || !logits || !experts) die("allocation");
    for (int b = 0; b < B; b++) {
        if (!(st[b] = state_create(&m->d))) die("state");
        for (int i = 0; i < BATCH_PROMPT; i++) toks[b * BATCH_PROMPT + i] = token_at(b, i, m->d.vocab);
        q[b] = (ForwardSeq){st[b], toks + b * BATCH_PROMPT, BATCH_PROMPT, 0, logits + (int64_t)b * m->d.vocab, false, 0};
    }
    if (model_forward_batch(m, q, B, NULL) != 0) die("batched prefill");
    double w[BATCH_STEPS], c[BATCH_STEPS];
    BatchedStep r = {0};
    for (int s = 0; s < 1 + BATCH_STEPS; s++) {
        for (int b = 0; b < B; b++) {
            toks[b] = token_at(b, BATCH_PROMPT + s, m->d.vocab);
            q[b].tokens = toks + b;
            q[b].n = 1;
            q[b].start_pos = BATCH_PROMPT + s;
        }
        long long a0 = di_alloc_count();
        double w0 = wall_s(), c0 = cpu_s();
        if (model_forward_batch(m, q, B, &trace) != 0) die("batched decode");
        if (s >= 1) {
            w[s - 1] = wall_s() - w0, c[s - 1] = cpu_s() - c0;
            timed_allocs += di_alloc_count() - a0, timed_tokens += B;
            int distinct;
            r.bytes += step_bytes(m, experts, B, active, &distinct) / BATCH_STEPS;
            r.experts_per_layer += (double)distinct / m->d.n_layers / BATCH_STEPS;
        }
    }
    r.wall = median(w, BATCH_STEPS);
    r.cpu = median(c, BATCH_STEPS);
    free(experts);
    for (int b = 0; b < B; b++) state_free(st[b]);
    free(st);
    free(q);
    free(toks);
    free(logits);
    return r;
}

/* Batch-1 figures of one numerics mode: wall and CPU seconds per token, REPS each. */
typedef struct {
    NumericsMode mode;
    double w1[REPS], c1[REPS], w2[REPS], c2[REPS];
} Batch1Times;

static void print_allocs(void) {
    printf("  heap allocations per decoded token (model): %.2f  (%lld in %lld timed tokens)\n",
           timed_tokens ? (double)timed_allocs / (double)timed_tokens : 0.0, timed_allocs, timed_tokens);
    timed_allocs = timed_tokens = 0;
}

static void print_batch1(const char *dir, const char *kernels, double active, double *bw1, double *bw2, Batch1Times *t) {
    double B1 = median(bw1, REPS), B2 = median(bw2, REPS), bw = B1 > B2 ? B1 : B2;
    printf("decode, medium synthetic checkpoint %s (%d-token prompt, median of %d x %d steps):\n", dir, PROMPT, REPS,
           DECODE_STEPS);
    char cpu[128];
    cpu_name(cpu, sizeof cpu);
    printf("  CPU                             %s, kernels %s\n", cpu, kernels);
    printf("  active weight bytes per token   %.2f MB\n", active / 1e6);
    printf("  STREAM triad bandwidth          %.2f GB/s (1 thread)  %.2f GB/s (2 threads)\n", B1 / 1e9, B2 / 1e9);
    printf("  bandwidth bound                 %.1f tokens/s (best bandwidth %.2f GB/s)\n", bw / active, bw / 1e9);
    for (int mi = 0; mi < N_MODES; mi++) {
        double W1 = median(t[mi].w1, REPS), W2 = median(t[mi].w2, REPS);
        double C1 = median(t[mi].c1, REPS), C2 = median(t[mi].c2, REPS);
        printf("  %-5s batch 1, 1 thread         %.1f tokens/s  (%.1f ms wall, %.1f ms CPU per token)  %.1f %% of bound\n",
               numerics_mode_name(t[mi].mode), 1 / W1, W1 * 1e3, C1 * 1e3, 100 * (1 / W1) / (bw / active));
        printf("  %-5s batch 1, 2 threads        %.1f tokens/s  (%.1f ms wall, %.1f ms CPU per token)  %.1f %% of bound\n",
               numerics_mode_name(t[mi].mode), 1 / W2, W2 * 1e3, C2 * 1e3, 100 * (1 / W2) / (bw / active));
    }
    print_allocs();
}

/* The ratio column "bound" is what the throughput ratio to batch 1 would be if every step were
 * bound by weight bytes as batch 1 would be: B x active_bytes / step bytes (the routing decides
 * how many distinct experts a step reads; this synthetic checkpoint's router concentrates the
 * bench's tokens on ~10 of the 64 experts per layer at batch 16).  Measured far below it means
 * the batched step is bound by arithmetic, not by weight bytes. */
static void run_batched(Model *m, DiThreadPool *pool2, double active) {
    m->pool = pool2;
    double bw_[N_BATCH][REPS], bc_[N_BATCH][REPS], bytes[N_BATCH] = {0}, experts[N_BATCH] = {0}, peak[REPS];
    for (int r = 0; r < REPS; r++)
        for (int i = 0; i < N_BATCH; i++) {
            if (i == 0) peak[r] = fma_peak(pool2, 3);
            BatchedStep st = decode_batched(m, batch_sizes[i], active);
            bw_[i][r] = st.wall, bc_[i][r] = st.cpu;
            bytes[i] += st.bytes / REPS, experts[i] += st.experts_per_layer / REPS;
        }
    printf("batched decode through model_forward_batch, 2 threads, %d-token prompts, median of %d x %d steps:\n", BATCH_PROMPT, REPS,
           BATCH_STEPS);
    printf("  (weights/step: distinct routed experts read per step; bound: B x %.2f MB / weights per step)\n", active / 1e6);
    double tps[N_BATCH];
    for (int i = 0; i < N_BATCH; i++) {
        double W = median(bw_[i], REPS), C = median(bc_[i], REPS);
        tps[i] = batch_sizes[i] / W;
        printf("  batch %2d  %8.1f tokens/s  (%.1f ms wall, %.1f ms CPU per step)  weights/step %.1f MB (%.1f experts/layer)  "
               "ratio %.2fx of bound %.2fx\n",
               batch_sizes[i], tps[i], W * 1e3, C * 1e3, bytes[i] / 1e6, experts[i], tps[i] / tps[0],
               batch_sizes[i] * active / bytes[i]);
    }
    printf("  ratio batch16 / batch1: %.2fx (bandwidth-bound ratio %.2fx)   batch64 / batch1: %.2fx (%.2fx)\n", tps[2] / tps[0],
           batch_sizes[2] * active / bytes[2], tps[3] / tps[0], batch_sizes[3] * active / bytes[3]);
    /* Arithmetic view: every token does its own 2 x active_madds FLOP whatever the batch, so a
     * step can go no faster than B x that / the FMA peak, and batch B / batch 1 can reach at most
     * peak / (batch 1's FLOP/s). */
    double P = median(peak, REPS), flop = 2.0 * active_madds(m);
    printf("  arithmetic: %.1f MFLOP per token (matrices); AVX2 FP32 FMA peak %.1f GFLOP/s (2 threads, same run)\n",
           flop / 1e6, P / 1e9);
    for (int i = 0; i < N_BATCH; i++)
        printf("  batch %2d  %6.1f GFLOP/s = %4.1f %% of the FMA peak\n", batch_sizes[i], tps[i] * flop / 1e9,
               100 * tps[i] * flop / P);
    printf("  compute-bound ratio batch B / batch 1 (FMA peak / batch 1's FLOP/s): %.2fx\n", P / (tps[0] * flop));
    print_allocs();
}

int main(void) {
    char dir[1000];
    bench_medium_dir(dir, sizeof dir);
    ensure_checkpoint(dir);
    Model *m = model_load(dir, MODE_EXACT);
    const int32_t *map;
    int64_t map_len;
    if (!m || di_tiny_engram_token_map(&map, &map_len) != 0 || model_set_engram_token_map(m, map, map_len) != 0) die("loading");
    DiThreadPool *pool1 = di_pool_create(1), *pool2 = di_pool_create(2);
    if (!pool1 || !pool2) die("thread pools");

    /* bandwidth: 3 arrays of 128 MB, far beyond the 32 MB L3 */
    int64_t n = (int64_t)1 << 25;
    float *a = malloc((size_t)n * 4), *bb = malloc((size_t)n * 4), *c = malloc((size_t)n * 4);
    if (!a || !bb || !c) die("triad arrays");
    for (int64_t i = 0; i < n; i++) a[i] = 0, bb[i] = (float)(i & 1023), c[i] = 1.0f;
    double bw1[REPS], bw2[REPS];

    const char *only = getenv("DEEPINFER_BENCH_ONLY");
    bool run1 = !only || !*only || strcmp(only, "batch1") == 0, runb = !only || !*only || strcmp(only, "batched") == 0;
    if (!run1 && !runb) {
        fprintf(stderr, "bench_decode: DEEPINFER_BENCH_ONLY=%s: expected batch1 or batched\n", only);
        return 2;
    }
    double active = active_bytes(m);
    const char *mode_env = getenv("DEEPINFER_BENCH_MODE"); /* one numerics mode only (to profile it) */
    NumericsMode only_mode = MODE_REF;
    if (mode_env && *mode_env && numerics_mode_parse(mode_env, &only_mode) != 0) {
        fprintf(stderr, "bench_decode: DEEPINFER_BENCH_MODE=%s: expected ref, kvq or exact\n", mode_env);
        return 2;
    }
    Batch1Times times[N_MODES];
    for (int r = 0; r < REPS && run1; r++) { /* interleaved: bandwidth, then each mode on 1 and 2 threads */
        bw1[r] = triad_bandwidth(pool1, a, bb, c, n, 3);
        bw2[r] = triad_bandwidth(pool2, a, bb, c, n, 3);
        for (int mi = 0; mi < N_MODES; mi++) {
            m->mode = times[mi].mode = mode_env && *mode_env ? only_mode : bench_modes[mi];
            decode_batch1(m, pool1, &times[mi].w1[r], &times[mi].c1[r]);
            decode_batch1(m, pool2, &times[mi].w2[r], &times[mi].c2[r]);
        }
    }
    m->mode = MODE_EXACT;
    free(a);
    free(bb);
    free(c);
    if (run1) print_batch1(dir, m->be->name, active, bw1, bw2, times);
    if (runb) run_batched(m, pool2, active);
    m->pool = NULL;
    di_pool_destroy(pool1);
    di_pool_destroy(pool2);
    model_free(m);
    return 0;
}
