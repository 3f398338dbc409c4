/* bench_prefill.c — long-prompt prefill on the medium synthetic checkpoint (issue 20, item 2):
 * tokens/s at 4k and 16k tokens (and 64k with BENCH_PREFILL_LONG=1), where the time goes by op,
 * and each attention op's arithmetic rate as a share of this core's FMA peak, measured in the
 * same run.
 *
 * The indexer scores every visible compressed entry for every row, so its cost per token grows
 * with the context; the attention over window + selected rows and the dense work do not.  The
 * ops are timed by running the forward with a copy of the model's backend table whose attention
 * entries are wrapped (model.h be): each kernel call adds its thread's CPU time and its FLOPs to a
 * counter, and "dense + rest" is the rest of the process's CPU time (CPU, not wall, time: the
 * machine may be shared).  FLOPs: index scores 2·HI·DI per (row, entry), heads 4·Dh per (head,
 * key) (the dot product and the weighted sum); the top-k has none.  An op's rate is its FLOPs
 * over its CPU time, against one core's peak: CHAINS chains of multiply-adds on one thread,
 * AVX2 and, where cpuid has it, AVX-512, the larger, best of five (NEON on aarch64).
 *
 * Baseline in the same run: the same 4k prefill with the table's attention entries swapped for
 * the scalar reference kernels (the same bits; the matmuls stay the loaded backend's).  The
 * 64k point takes minutes on two shared cores (bench/prefill.md), so it is opt-in; with it the
 * 64k/4k tokens/s ratio is printed.  The checkpoint is cached as bench_decode's is
 * ($DEEPINFER_BENCH_DIR, else the user's cache directory). */
#include "base/error.h"
#include "base/threadpool.h"
#include "kernels/backend.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/state.h"
#include "model/tiny.h"

#if defined(__x86_64__)
#include <immintrin.h>
#else
#include <arm_neon.h>
#endif
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double clock_s(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Wall time; the calling thread's CPU time (the machine may be shared, and a descheduled
 * thread's wall time would be charged to the op it was running); the process's CPU time. */
static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }
static double thread_s(void) { return clock_s(CLOCK_THREAD_CPUTIME_ID); }
static double process_s(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

static void die(const char *what) {
    fprintf(stderr, "bench_prefill: %s: %s\n", what, di_error_message());
    exit(1);
}

/* ---------------------------------------------------------------- per-core FMA peak */

#define CHAINS 10

#if defined(__x86_64__)
#define PEAK_TARGET(isa) __attribute__((target(isa)))
#else
#define PEAK_TARGET(isa) /* aarch64: Advanced SIMD is the base ISA */
#endif

/* FLOP/s of CHAINS independent chains of `lanes`-wide multiply-adds on one thread. */
#define DEFINE_PEAK(name, isa, vec, set1, fmadd, lanes)                                      \
    PEAK_TARGET(isa) static double name(int64_t iters) {                                     \
        vec acc[CHAINS], a = set1(0.9999f), b = set1(1e-6f);                                    \
        for (int i = 0; i < CHAINS; i++) acc[i] = set1((float)i);                               \
        double t0 = thread_s();                                                                 \
        for (int64_t k = 0; k < iters; k++)                                                     \
            for (int i = 0; i < CHAINS; i++) acc[i] = fmadd(acc[i], a, b);                      \
        double dt = thread_s() - t0;                                                            \
        vec sum = acc[0]; /* every chain feeds the result, so none is optimised away */        \
        for (int i = 1; i < CHAINS; i++) sum += acc[i];                                          \
        volatile float keep = sum[lanes - 1];                                                   \
        (void)keep;                                                                             \
        return 2.0 * lanes * CHAINS * (double)iters / dt;                                       \
    }
#if defined(__x86_64__)
DEFINE_PEAK(peak_avx2, "avx2,fma", __m256, _mm256_set1_ps, _mm256_fmadd_ps, 8)
DEFINE_PEAK(peak_avx512, "avx512f", __m512, _mm512_set1_ps, _mm512_fmadd_ps, 16)

/* FLOP/s of one core, best of five of each instruction set this CPU has. */
static double core_peak(void) {
    double best = 0;
    __builtin_cpu_init();
    for (int r = 0; r < 5; r++) {
        double p = peak_avx2(20 * 1000 * 1000);
        if (__builtin_cpu_supports("avx512f")) {
            double q = peak_avx512(10 * 1000 * 1000);
            if (q > p) p = q;
        }
        if (p > best) best = p;
    }
    return best;
}
#else
static inline float32x4_t neon_fmadd(float32x4_t acc, float32x4_t a, float32x4_t b) { return vfmaq_f32(b, acc, a); }
DEFINE_PEAK(peak_neon, "", float32x4_t, vdupq_n_f32, neon_fmadd, 4)

/* FLOP/s of one core, best of five. */
static double core_peak(void) {
    double best = 0;
    for (int r = 0; r < 5; r++) {
        double p = peak_neon(20 * 1000 * 1000);
        if (p > best) best = p;
    }
    return best;
}
#endif

/* ---------------------------------------------------------------- timed backend table */

enum { OP_SCORES, OP_TOPK, OP_HEADS, N_OPS };
static const char *const op_names[N_OPS] = {"indexer scores", "top-k", "attention heads"};
static const DiKernelBackend *inner; /* the table the wrappers time */
static _Atomic long long op_ns[N_OPS];
static _Atomic long long op_flops[N_OPS];

/* A timed call's own cost: two clock reads, measured once (subtracted from each call). */
static double clock_pair_s;

static void calibrate_clock(void) {
    double best = 1;
    for (int i = 0; i < 2000; i++) {
        double t0 = thread_s(), dt = thread_s() - t0;
        if (dt < best) best = dt;
    }
    clock_pair_s = best;
}

static long long ns_since(double t0) {
    double dt = thread_s() - t0 - clock_pair_s;
    return dt > 0 ? (long long)(dt * 1e9) : 0;
}

static void timed_scores(const float *q, const float *wh, int64_t nq, int64_t HI, int64_t DI, const float *keys,
                         int64_t stride, int64_t n, float *score, int64_t sstride) {
    double t0 = thread_s();
    inner->index_scores(q, wh, nq, HI, DI, keys, stride, n, score, sstride);
    op_ns[OP_SCORES] += ns_since(t0);
    op_flops[OP_SCORES] += 2 * nq * HI * DI * n;
}

static int64_t timed_topk(const float *score, const int32_t *ids, int64_t n, int64_t k, DiScored *buf, int32_t *out) {
    double t0 = thread_s();
    int64_t r = inner->topk(score, ids, n, k, buf, out);
    op_ns[OP_TOPK] += ns_since(t0);
    return r;
}

static void timed_heads(const float *q, int64_t nh, int64_t Dh, const float *const *keys, int64_t nk, const float *sink,
                        float scale, float *o, float *z) {
    double t0 = thread_s();
    inner->attn_heads(q, nh, Dh, keys, nk, sink, scale, o, z);
    op_ns[OP_HEADS] += ns_since(t0);
    op_flops[OP_HEADS] += 4 * nh * nk * Dh;
}


/* ---------------------------------------------------------------- one prefill */

typedef struct {
    double wall, cpu, op_s[N_OPS], op_flops[N_OPS];
} Prefill;

/* A prefill of n tokens on backend be, its attention ops timed by wrapping be's entries. */
static Prefill prefill(Model *m, const DiKernelBackend *be, int64_t n) {
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    RunState *st = state_create(&m->d);
    float *logits = malloc((size_t)m->d.vocab * sizeof *logits);
    if (!ids || !st || !logits) die("allocation");
    for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)(3 + (i * 104729) % (m->d.vocab - 3));
    const DiKernelBackend *loaded = m->be;
    DiKernelBackend timed = *be;
    timed.index_scores = timed_scores, timed.topk = timed_topk, timed.attn_heads = timed_heads;
    inner = be;
    m->be = &timed;
    for (int k = 0; k < N_OPS; k++) op_ns[k] = op_flops[k] = 0;
    double t0 = now_s(), c0 = process_s();
    if (model_forward(m, st, ids, n, 0, logits, false, NULL) != 0) die("prefill");
    Prefill r = {.wall = now_s() - t0, .cpu = process_s() - c0};
    for (int k = 0; k < N_OPS; k++) r.op_s[k] = (double)op_ns[k] * 1e-9, r.op_flops[k] = (double)op_flops[k];
    m->be = loaded;
    state_free(st);
    free(logits);
    free(ids);
    return r;
}

static void print_prefill(const char *label, int64_t n, const Prefill *r, double peak) {
    double rest = r->cpu;
    printf("  %-9s %6lld tokens: %8.1f tokens/s (%.2f s wall), %.1f tokens per CPU-second\n", label, (long long)n,
           (double)n / r->wall, r->wall, (double)n / r->cpu);
    for (int k = 0; k < N_OPS; k++) {
        rest -= r->op_s[k];
        printf("    %-16s %6.1f %% of CPU time", op_names[k], 100.0 * r->op_s[k] / r->cpu);
        if (r->op_flops[k] > 0 && r->op_s[k] > 0)
            printf(", %6.1f GFLOP/s a core = %5.1f %% of the FMA peak", r->op_flops[k] / r->op_s[k] * 1e-9,
                   100.0 * r->op_flops[k] / r->op_s[k] / peak);
        printf("\n");
    }
    printf("    %-16s %6.1f %% of CPU time\n", "dense + rest", 100.0 * rest / r->cpu);
}

static void bench_dir(char *buf, size_t n) {
    const char *dir = getenv("DEEPINFER_BENCH_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (dir && *dir) snprintf(buf, n, "%s", dir);
    else snprintf(buf, n, "%s/%s/bench-medium", xdg && *xdg ? xdg : home && *home ? home : "/tmp", xdg && *xdg ? "deepinfer" : ".cache/deepinfer");
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* each point as it is measured */
    char dir[4096];
    bench_dir(dir, sizeof dir);
    if (di_tiny_ensure_preset(dir, "medium", 1) != 0) die("make-tiny --config medium");
    const char *lng = getenv("BENCH_PREFILL_LONG");
    bool long_run = lng && strcmp(lng, "1") == 0;
    Model *m = model_load(dir, MODE_REF);
    DiThreadPool *pool = di_pool_create(0);
    const int32_t *map;
    int64_t map_len;
    if (!m || !pool || di_tiny_engram_token_map(&map, &map_len) != 0 || model_set_engram_token_map(m, map, map_len) != 0)
        die("loading the model");
    m->pool = pool;
    int threads = di_pool_threads(pool);
    const DiKernelBackend *simd = m->be; /* the reference run swaps only the attention kernels */
    DiKernelBackend ref_attn = *simd;
    const DiKernelBackend *ref = di_backend_cpu_ref();
    ref_attn.index_scores = ref->index_scores, ref_attn.topk = ref->topk, ref_attn.attn_heads = ref->attn_heads;
    double peak = core_peak();
    calibrate_clock();
    printf("prefill, medium synthetic checkpoint (%d layers, H %lld, Dh %lld, indexer %lld x %lld, top-k %lld), ref numerics, "
           "%d threads\n", m->d.n_layers, (long long)m->d.n_heads, (long long)m->d.head_dim, (long long)m->d.idx_heads,
           (long long)m->d.idx_head_dim, (long long)m->d.idx_topk, threads);
    printf("  FMA peak of one core: %.1f GFLOP/s; attention kernels: %s\n", peak * 1e-9, simd->name);
    static const int64_t lengths[] = {4096, 16384, 65536};
    double rate[3] = {0}, cpu_rate[3] = {0};
    for (int i = 0; i < (long_run ? 3 : 2); i++) {
        Prefill r = prefill(m, simd, lengths[i]);
        rate[i] = (double)lengths[i] / r.wall, cpu_rate[i] = (double)lengths[i] / r.cpu;
        print_prefill(simd->name, lengths[i], &r, peak);
        if (i == 0) { /* the scalar reference in the same run */
            Prefill b = prefill(m, &ref_attn, lengths[0]);
            print_prefill("reference", lengths[0], &b, peak);
            printf("  speed-up over the reference kernels at 4k: %.2fx wall, %.2fx CPU time\n", b.wall / r.wall, b.cpu / r.cpu);
        }
    }
    printf("  16k/4k tokens/s: %.3f (per CPU-second %.3f)", rate[1] / rate[0], cpu_rate[1] / cpu_rate[0]);
    if (long_run) printf(", 64k/4k tokens/s: %.3f (per CPU-second %.3f)", rate[2] / rate[0], cpu_rate[2] / cpu_rate[0]);
    printf("%s\n", long_run ? "" : " (BENCH_PREFILL_LONG=1 adds 64k)");
    model_free(m);
    di_pool_destroy(pool);
    return 0;
}
