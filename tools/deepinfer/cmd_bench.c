/* cmd_bench.c — `deepinfer bench`: the matrix-kernel figures of this machine, through the same
 * di_matmul the model calls (random weights in the checkpoint formats of model-v41.md §3.4-3.5).
 *
 * It prints GFLOP/s and the weight bytes streamed per second for the decode GEMV (n = 1) and a
 * prefill GEMM (n tokens) of each weight format, medians of several runs.  The ceilings these are
 * judged against (STREAM triad, OpenBLAS sgemm) and the kernel/baseline ratios come from
 * `make bench` (bench/bench_kernels.c), which links OpenBLAS; the CLI does not. */
#include "commands.h"

#include "base/env.h"
#include "base/error.h"
#include "base/mem.h"
#include "base/threadpool.h"
#include "kernels/backend.h"
#include "kernels/matmul.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RUNS 9

static void bench_usage(FILE *out) {
    fprintf(out,
            "usage: deepinfer bench [--rows R] [--cols C] [--tokens N] [--threads T]\n\n"
            "Times the CPU matrix kernels (di_matmul) on random weights in each checkpoint format:\n"
            "GEMV (1 token) and GEMM (N tokens), median of %d runs, GFLOP/s and GB/s of weights.\n"
            "For the measured ceilings (STREAM triad, OpenBLAS sgemm) and the ratios: make bench.\n\n"
            "  --rows R     output rows (default 4096)\n"
            "  --cols C     input columns (default 4096; a multiple of 32 for FP4)\n"
            "  --tokens N   tokens of the GEMM (default 512)\n"
            "  --threads T  worker threads (default: DEEPINFER_NUM_THREADS, else all CPUs)\n"
            "  --help       this text\n\n"
            "DEEPINFER_KERNELS=ref|simd|avx2|avx512|auto selects the kernels (default auto: AVX2+FMA when present,\n"
            "with AVX-512 tiles where the CPU has AVX-512; the same bits as AVX2).\n",
            RUNS);
}

static int parse_count(const char *flag, const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || errno || *end || v < lo || v > hi) {
        fprintf(stderr, "deepinfer bench: %s needs an integer in [%lld, %lld], got '%s'\n", flag, lo, hi, s ? s : "");
        return -1;
    }
    *out = v;
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median seconds of di_matmul over RUNS calls after one warm-up; -1 on error. */
static double time_matmul(const DiKernelBackend *be, DiThreadPool *pool, const DiMatrix *w, const float *x, int64_t n,
                          float *y) {
    double t[RUNS];
    if (di_matmul(be, pool, w, x, n, y) != 0) return -1;
    for (int i = 0; i < RUNS; i++) {
        double t0 = now_s();
        if (di_matmul(be, pool, w, x, n, y) != 0) return -1;
        t[i] = now_s() - t0;
    }
    qsort(t, RUNS, sizeof t[0], cmp_double);
    return t[RUNS / 2];
}

/* Random codes (no NaN codes) and scales near those of the release (2^-12 .. 2^-5). */
static void fill_random(uint8_t *p, int64_t n, uint64_t *state, int fp8) {
    for (int64_t i = 0; i < n; i++) {
        *state = *state * 6364136223846793005ull + 1442695040888963407ull;
        uint8_t v = (uint8_t)(*state >> 56);
        p[i] = (fp8 && (v & 0x7F) == 0x7F) ? 0x7E : v;
    }
}

static int bench_format(const DiKernelBackend *be, DiThreadPool *pool, DiMatFormat f, const char *name, int64_t rows,
                        int64_t cols, int64_t n, const float *x, float *y) {
    DiMatrix w = {.format = f, .rows = rows, .cols = cols};
    if (f == DI_MAT_FP4_ROW32 && cols % 32) { /* §3.5: one scale per 32 columns */
        printf("%-6s skipped: FP4 needs a column count divisible by 32\n", name);
        return 0;
    }
    int64_t db = di_matrix_data_bytes(&w), sb = di_matrix_scale_bytes(&w);
    uint8_t *data = di_aligned_calloc(1, (size_t)db, "bench weights");
    uint8_t *scale = di_aligned_calloc(1, (size_t)(sb ? sb : 1), "bench scales");
    int rc = -1;
    if (!data || !scale) goto done;
    uint64_t state = 0x853C49E6748FEA9Bull;
    if (f == DI_MAT_F32 || f == DI_MAT_BF16) {
        for (int64_t i = 0; i < db / (f == DI_MAT_F32 ? 4 : 2); i++) {
            float v = (float)((int)(i * 2654435761u % 2001u) - 1000) * 1e-3f;
            if (f == DI_MAT_F32) ((float *)data)[i] = v;
            else { uint32_t b; memcpy(&b, &v, 4); ((uint16_t *)data)[i] = (uint16_t)(b >> 16); }
        }
    } else {
        fill_random(data, db, &state, f == DI_MAT_FP8_BLOCK);
        for (int64_t i = 0; i < sb; i++) scale[i] = (uint8_t)(115 + i % 8);
    }
    w.data = data;
    w.scale = scale;
    double t1 = time_matmul(be, pool, &w, x, 1, y), tn = time_matmul(be, pool, &w, x, n, y);
    if (t1 < 0 || tn < 0) goto done;
    double flop = 2.0 * (double)rows * (double)cols;
    printf("%-6s %10.1f %12.1f %12.1f\n", name, flop / t1 * 1e-9, (double)(db + sb) / t1 * 1e-9, flop * n / tn * 1e-9);
    rc = 0;
done:
    di_aligned_free(data);
    di_aligned_free(scale);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    long long rows = 4096, cols = 4096, tokens = 512, threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            bench_usage(stdout);
            return 0;
        } else if (strcmp(a, "--rows") == 0) bad = parse_count(a, v, 1, 1 << 20, &rows), i++;
        else if (strcmp(a, "--cols") == 0) bad = parse_count(a, v, 1, 1 << 20, &cols), i++;
        else if (strcmp(a, "--tokens") == 0) bad = parse_count(a, v, 1, 1 << 16, &tokens), i++;
        else if (strcmp(a, "--threads") == 0) bad = parse_count(a, v, 1, 1024, &threads), i++;
        else {
            fprintf(stderr, "deepinfer bench: unknown option '%s'\n\n", a);
            bench_usage(stderr);
            return 2;
        }
        if (bad) return 2;
    }
    if ((double)rows * (double)cols * 4.0 > 4e9 || (double)tokens * (double)(rows > cols ? rows : cols) * 4.0 > 4e9) {
        fprintf(stderr, "deepinfer bench: shape too large for a benchmark (over 4 GB of buffers)\n");
        return 2;
    }
    const DiKernelBackend *be = NULL; /* the kernel table, chosen once as a model load chooses it */
    if (di_backend_cpu_from_env(&be) != 0) be = NULL;
    const char *backend = be ? be->name : NULL;
    double subnormal_slowdown = 0;
    const char *fp8_route = backend ? di_backend_cpu_fp8_gemv_route(be, &subnormal_slowdown) : NULL;
    if (!backend || !fp8_route) {
        fprintf(stderr, "deepinfer bench: %s\n", di_error_message());
        return 1;
    }
    DiThreadPool *pool = di_pool_create((int)threads);
    float *x = di_aligned_calloc((size_t)tokens, (size_t)cols * sizeof(float), "bench activations");
    float *y = di_aligned_calloc((size_t)tokens, (size_t)rows * sizeof(float), "bench outputs");
    int rc = 0;
    if (!pool || !x || !y) {
        fprintf(stderr, "deepinfer bench: %s\n", di_error_message());
        rc = 1;
        goto done;
    }
    for (long long i = 0; i < tokens * cols; i++) x[i] = (float)((int)(i * 40503u % 2001u) - 1000) * 1e-3f;
    printf("deepinfer bench: kernels %s, %d threads, W [%lld x %lld], GEMM n = %lld, median of %d runs\n", backend,
           di_pool_threads(pool), rows, cols, tokens, RUNS);
    if (strcmp(fp8_route, "reference") != 0)
        printf("deepinfer bench: FP8 GEMV widens through %s (float32 subnormal operands %.1fx slower than normal ones)\n",
               fp8_route, subnormal_slowdown);
    printf("%-6s %10s %12s %12s\n", "format", "GEMV GF/s", "GEMV GB/s", "GEMM GF/s");
    static const struct { DiMatFormat f; const char *name; } formats[] = {
        {DI_MAT_FP8_BLOCK, "fp8"}, {DI_MAT_FP4_ROW32, "fp4"}, {DI_MAT_BF16, "bf16"}, {DI_MAT_F32, "f32"}};
    for (size_t i = 0; i < sizeof formats / sizeof formats[0] && rc == 0; i++)
        if (bench_format(be, pool, formats[i].f, formats[i].name, rows, cols, tokens, x, y) != 0) {
            fprintf(stderr, "deepinfer bench: %s\n", di_error_message());
            rc = 1;
        }
    if (rc == 0) printf("ceilings and kernel/baseline ratios (triad, OpenBLAS sgemm): make bench\n");
done:
    di_aligned_free(x);
    di_aligned_free(y);
    di_pool_destroy(pool);
    return rc;
}
