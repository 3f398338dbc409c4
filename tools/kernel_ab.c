/* kernel_ab.c — A/B of the matmul kernels of two builds of the library in one process.
 *
 * On a shared, noisy machine two benchmark runs minutes apart can differ by 30 % or more, which
 * hides the few-percent effects of a kernel change.  This tool loads two builds side by side
 * (dlopen, RTLD_LOCAL: each keeps its own symbols), runs the same GEMV or GEMM on the same
 * matrix and activations alternately in 20 ms windows of thread CPU time, and reports the
 * median of the per-pair ratios B/A with its quartiles, plus whether the two outputs are the
 * same bits (they must be for a pure speed change).
 *
 *     make BUILD=/tmp/a lib     (old tree)      make BUILD=/tmp/b lib     (new tree)
 *     build/kernel_ab /tmp/a/libdeepinfer_internal.so /tmp/b/libdeepinfer_internal.so fp8 1024 1024 gemv 1 4 16
 *
 * It calls internal functions, which libdeepinfer.so does not export (only include/deepinfer.h's
 * API): give it libdeepinfer_internal.so, the same objects with every symbol exported (a tree
 * older than that library exports them from libdeepinfer.so).
 *
 * Formats: f32, bf16, fp8, fp4.  Kernels: gemv (weights decoded in registers) or gemm (panels),
 * called directly on all rows by one thread, whatever di_matmul would choose for the token count.
 * The weights are random codes (no NaN codes) with scale bytes 116..123, the activations random
 * in [-1, 1]: the same for both builds.
 *
 * Two environment variables bring it closer to a decode step, where each matrix comes from DRAM
 * and a thread-pool task computes a slice of it:
 *   KERNEL_AB_COLD_MB=M    identical copies of the matrix, at least M MB in all, used in turn
 *                          (M larger than the L3 cache: every call reads its weights from DRAM);
 *   KERNEL_AB_TASK_ROWS=R  each call is split into row slices of R rows, as matmul.c's tasks
 *                          (fp8: R a multiple of 32).
 * KERNEL_AB_FP8_SUBNORMALS=RATE draws FP8 codes from the normal ones and makes each an E4M3
 * subnormal with probability RATE (default: every code alike, 7 in 127 magnitudes subnormal; the
 * checkpoints' block-scaled weights hold ~1e-4, see bench/ggml_comparison.md).
 * KERNEL_AB_ACTS=swiglu draws the activations as silu(g) * u with g and u about N(0, 1), the
 * heavy-tailed input of an expert's down projection (default: uniform in [-1, 1]).
 * And two select what is compared:
 *   KERNEL_AB_QUANTISED=1  the activations are rounded through FP8 per 32 (§4.3), as under the
 *                          reference numerics;
 *   KERNEL_AB_ENTRY_A=fp4q, KERNEL_AB_ENTRY_B=fp4q  that side runs di_matmul_qa's block-order
 *                          FP4 kernel (di_simd_fp4q_prepare once per call, then
 *                          di_simd_fp4q_rows per slice) instead of the GEMV (fp4 gemv only;
 *                          its bits differ from the GEMV's by design). */
#include "kernels/cpu/matmul_simd.h"

#include "ab_common.h"

#include <dlfcn.h>
#include <math.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { PAIRS = 25, MAX_TOKENS = 256 };
#define WINDOW_S 0.02

typedef void (*RowsFn)(const DiMatrix *, const DiSimdActs *, float *, int64_t, int64_t, float *);
typedef int64_t (*ScratchFn)(int64_t, bool);

typedef int64_t (*BytesFn)(const DiMatrix *);
typedef int64_t (*Fp4qScratchFn)(int64_t);
typedef int64_t (*Fp4qPreparedFn)(int64_t, int64_t);
typedef void (*Fp4qPrepareFn)(const DiSimdActs *, float *);
typedef void (*Fp4qRowsFn)(const DiMatrix *, const DiSimdActs *, const float *, float *, int64_t, int64_t, float *);
typedef int (*QuantiseFn)(float *, size_t);
typedef int (*PrepareFn)(DiMatrix *, void **);
typedef const char *(*ErrorMessageFn)(void);

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)rng_state;
}


static int usage(void) {
    fprintf(stderr, "usage: kernel_ab OLD.so NEW.so f32|bf16|fp8|fp4 ROWS COLS gemv|gemm N [N ...]\n"
                    "  N: token counts, 1..%d; ROWS, COLS: 1..65536 (fp4: COLS a multiple of 32)\n",
            MAX_TOKENS);
    return 2;
}

static bool parse_int(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

/* An environment variable as an integer in 1..hi, `fallback` when unset; -1 when malformed. */
static long env_long(const char *name, long fallback, long hi) {
    const char *s = getenv(name);
    long v;
    if (!s || !*s) return fallback;
    return parse_int(s, 1, hi, &v) ? v : -1;
}

static int parse_format(const char *s, DiMatFormat *f) {
    static const char *const names[] = {"f32", "bf16", "fp8", "fp4"};
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0) return *f = (DiMatFormat)i, 0;
    return -1;
}

/* KERNEL_AB_FP8_SUBNORMALS=RATE: FP8 codes drawn from the normal ones, each replaced by an E4M3
 * subnormal (exponent field 0, mantissa 1..7) with probability RATE; -1: every code alike. */
static double fp8_subnormal_rate = -1;

/* The library's byte counts of a matrix's data and scale (matmul.h), from the first build. */
static BytesFn matrix_data_bytes, matrix_scale_bytes;

/* Random weights in the format's storage (see matmul.h), owned by the caller (free data, scale). */
static int random_matrix(DiMatrix *m, DiMatFormat f, int64_t rows, int64_t cols) {
    *m = (DiMatrix){.format = f, .rows = rows, .cols = cols};
    int64_t bytes = matrix_data_bytes(m), sbytes = matrix_scale_bytes(m);
    uint8_t *d = malloc((size_t)bytes), *s = malloc((size_t)sbytes + 1);
    if (!d || !s) {
        free(d);
        free(s);
        return -1;
    }
    for (int64_t i = 0; i < bytes; i++) {
        uint8_t v = (uint8_t)rnd();
        d[i] = f == DI_MAT_FP8_BLOCK && (v & 0x7F) == 0x7F ? 0x7E : v; /* no NaN codes */
        if (f == DI_MAT_FP8_BLOCK && fp8_subnormal_rate >= 0) { /* normal codes, subnormals at the rate */
            bool subnormal = (double)rnd() / 4294967296.0 < fp8_subnormal_rate;
            uint8_t magnitude = subnormal ? (uint8_t)(1 + rnd() % 7) : (uint8_t)(8 + rnd() % 0x77);
            d[i] = (uint8_t)((v & 0x80) | magnitude);
        }
    }
    if (f == DI_MAT_BF16)
        for (int64_t i = 0; i < rows * cols; i++) ((uint16_t *)d)[i] = (uint16_t)(0x3F80 + (rnd() & 0x7F) + ((rnd() & 1) << 15));
    if (f == DI_MAT_F32)
        for (int64_t i = 0; i < rows * cols; i++) ((float *)d)[i] = (float)((int)(rnd() % 2001) - 1000) / 1000.0f;
    for (int64_t i = 0; i < sbytes; i++) s[i] = (uint8_t)(116 + rnd() % 8);
    m->data = d;
    m->scale = s;
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 8) return usage();
    DiMatFormat format;
    long rows, cols;
    if (parse_format(argv[3], &format) != 0 || !parse_int(argv[4], 1, 65536, &rows) || !parse_int(argv[5], 1, 65536, &cols) ||
        (format == DI_MAT_FP4_ROW32 && cols % 32 != 0) || (strcmp(argv[6], "gemv") != 0 && strcmp(argv[6], "gemm") != 0))
        return usage();
    bool gemm = strcmp(argv[6], "gemm") == 0;
    RowsFn fn[2];
    ScratchFn scratch_floats = NULL;
    int64_t fp4q_scratch = 0, fp4q_prepared = 0;
    Fp4qPrepareFn qprep[2] = {NULL, NULL};
    Fp4qRowsFn qrows[2] = {NULL, NULL};
    QuantiseFn quantise = NULL;
    PrepareFn prepare = NULL;
    ErrorMessageFn prepare_error = NULL; /* the same library's di_error_message */
    for (int i = 0; i < 2; i++) {
        void *h = dlopen(argv[1 + i], RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            fprintf(stderr, "kernel_ab: %s\n", dlerror());
            return 1;
        }
        const char *entry = getenv(i == 0 ? "KERNEL_AB_ENTRY_A" : "KERNEL_AB_ENTRY_B");
        bool fp4q = entry && strcmp(entry, "fp4q") == 0;
        if (entry && !fp4q) {
            fprintf(stderr, "kernel_ab: KERNEL_AB_ENTRY_%c=%s: the only other entry is fp4q\n", i == 0 ? 'A' : 'B', entry);
            return 2;
        }
        if (fp4q && (format != DI_MAT_FP4_ROW32 || gemm)) {
            fprintf(stderr, "kernel_ab: the fp4q entry takes fp4 gemv\n");
            return 2;
        }
        fn[i] = (RowsFn)dlsym(h, gemm ? "di_simd_gemm_rows" : "di_simd_gemv_rows");
        PrepareFn pr = (PrepareFn)dlsym(h, "di_matrix_prepare"); /* B's when both have one */
        if (pr) {
            prepare = pr;
            prepare_error = (ErrorMessageFn)dlsym(h, "di_error_message");
        }
        ScratchFn sf = (ScratchFn)dlsym(h, "di_simd_scratch_floats");
        if (fp4q) { /* prepared once per call, then the row slices, as matmul.c does */
            Fp4qScratchFn qf = (Fp4qScratchFn)dlsym(h, "di_simd_fp4q_scratch_floats");
            Fp4qPreparedFn pf = (Fp4qPreparedFn)dlsym(h, "di_simd_fp4q_prepared_floats");
            qprep[i] = (Fp4qPrepareFn)dlsym(h, "di_simd_fp4q_prepare");
            qrows[i] = (Fp4qRowsFn)dlsym(h, "di_simd_fp4q_rows");
            if (!qf || !pf || !qprep[i] || !qrows[i]) {
                fprintf(stderr, "kernel_ab: %s lacks the di_simd_fp4q entry points (%s)\n", argv[1 + i], AB_INTERNAL_HINT);
                return 1;
            }
            fp4q_scratch = qf(cols) > fp4q_scratch ? qf(cols) : fp4q_scratch;
            fp4q_prepared = pf(MAX_TOKENS, cols) > fp4q_prepared ? pf(MAX_TOKENS, cols) : fp4q_prepared;
        }
        if (i == 0) {
            quantise = (QuantiseFn)dlsym(h, "di_roundtrip_fp8_block32");
            matrix_data_bytes = (BytesFn)dlsym(h, "di_matrix_data_bytes");
            matrix_scale_bytes = (BytesFn)dlsym(h, "di_matrix_scale_bytes");
        }
        if (!fn[i] || !sf || !matrix_data_bytes || !matrix_scale_bytes) {
            fprintf(stderr, "kernel_ab: %s lacks the SIMD kernel entry points (%s)\n", argv[1 + i], AB_INTERNAL_HINT);
            return 1;
        }
        if (!scratch_floats || sf(cols, gemm) > scratch_floats(cols, gemm)) scratch_floats = sf;
    }
    long cold_mb = env_long("KERNEL_AB_COLD_MB", 0, 65536), task_rows = env_long("KERNEL_AB_TASK_ROWS", rows, 65536);
    if (cold_mb < 0 || task_rows < 0 || (format == DI_MAT_FP8_BLOCK && task_rows % 32 != 0 && task_rows < rows)) {
        fprintf(stderr, "kernel_ab: KERNEL_AB_COLD_MB and KERNEL_AB_TASK_ROWS take positive integers (fp8 rows: a multiple of 32)\n");
        return 2;
    }
    DiMatrix m;
    int64_t k32 = (cols + 31) / 32 * 32;
    float *x = calloc((size_t)(MAX_TOKENS * k32), sizeof *x);
    float *y[2] = {malloc(sizeof(float) * (size_t)(MAX_TOKENS * rows)), malloc(sizeof(float) * (size_t)(MAX_TOKENS * rows))};
    int64_t scratch_n = scratch_floats(cols, gemm) > fp4q_scratch ? scratch_floats(cols, gemm) : fp4q_scratch;
    float *scratch = aligned_alloc(32, (size_t)(scratch_n + 64) * sizeof(float));
    float *prepared = fp4q_prepared ? aligned_alloc(32, (size_t)(fp4q_prepared + 64) * sizeof(float)) : NULL;
    if (fp4q_prepared && !prepared) {
        fprintf(stderr, "kernel_ab: out of memory\n");
        return 1;
    }
    const char *sub_env = getenv("KERNEL_AB_FP8_SUBNORMALS");
    if (sub_env && *sub_env) {
        char *end;
        errno = 0;
        fp8_subnormal_rate = strtod(sub_env, &end);
        if (errno || *end || !(fp8_subnormal_rate >= 0 && fp8_subnormal_rate <= 1)) {
            fprintf(stderr, "kernel_ab: KERNEL_AB_FP8_SUBNORMALS=%s: expected a rate in [0, 1]\n", sub_env);
            return 2;
        }
    }
    if (random_matrix(&m, format, rows, cols) != 0 || !x || !y[0] || !y[1] || !scratch) {
        fprintf(stderr, "kernel_ab: out of memory\n");
        return 1;
    }
    /* as the model does for each weight (matmul.h): the FP8 subnormal map where this CPU's route
     * uses one; both builds then see it (a build without the field reads the struct's prefix) */
    void *map_owned = NULL; /* freed at exit */
    if (prepare && prepare(&m, &map_owned) != 0) {
        fprintf(stderr, "kernel_ab: di_matrix_prepare: %s\n", prepare_error ? prepare_error() : "failed");
        return 1;
    }
    const char *acts_env = getenv("KERNEL_AB_ACTS");
    bool swiglu = acts_env && strcmp(acts_env, "swiglu") == 0;
    if (acts_env && *acts_env && !swiglu && strcmp(acts_env, "uniform") != 0) {
        fprintf(stderr, "kernel_ab: KERNEL_AB_ACTS=%s: expected uniform or swiglu\n", acts_env);
        return 2;
    }
    for (int64_t t = 0; t < MAX_TOKENS; t++)
        for (int64_t c = 0; c < cols; c++) {
            float v = (float)((int)(rnd() % 2001) - 1000) / 1000.0f;
            if (swiglu) { /* silu(g) * u, g and u about N(0, 1): the down projection's input */
                float g = 0, u = 0;
                for (int i = 0; i < 4; i++) g += (float)((int)(rnd() % 2001) - 1000) / 577.0f, u += (float)((int)(rnd() % 2001) - 1000) / 577.0f;
                g /= 2, u /= 2;
                v = g / (1.0f + expf(-g)) * u;
            }
            x[t * k32 + c] = v;
        }
    const char *q_env = getenv("KERNEL_AB_QUANTISED");
    bool quantised = q_env && strcmp(q_env, "1") == 0;
    if (q_env && *q_env && !quantised && strcmp(q_env, "0") != 0) {
        fprintf(stderr, "kernel_ab: KERNEL_AB_QUANTISED=%s: expected 0 or 1\n", q_env);
        return 2;
    }
    if (quantised && (!quantise || k32 != cols || quantise(x, (size_t)(MAX_TOKENS * k32)) != 0)) {
        fprintf(stderr, "kernel_ab: KERNEL_AB_QUANTISED=1 needs cols a multiple of 32 and di_roundtrip_fp8_block32\n");
        return 2;
    }
    int64_t data_bytes = matrix_data_bytes(&m), scale_bytes = matrix_scale_bytes(&m);
    int64_t n_copies = cold_mb ? (cold_mb * 1000000 + data_bytes - 1) / data_bytes : 1;
    DiMatrix *copies = malloc((size_t)n_copies * sizeof *copies);
    if (!copies) return 1;
    copies[0] = m;
    for (int64_t i = 1; i < n_copies; i++) {
        uint8_t *d = malloc((size_t)data_bytes), *sc = malloc((size_t)scale_bytes + 1);
        if (!d || !sc) {
            fprintf(stderr, "kernel_ab: out of memory for %lld copies\n", (long long)n_copies);
            return 1;
        }
        memcpy(d, m.data, (size_t)data_bytes);
        memcpy(sc, m.scale, (size_t)scale_bytes);
        copies[i] = m;
        copies[i].data = d;
        copies[i].scale = sc;
    }
    int64_t next_copy = 0;
    for (int ai = 7; ai < argc; ai++) {
        long n;
        if (!parse_int(argv[ai], 1, MAX_TOKENS, &n)) return usage();
        DiSimdActs acts = {x, n, k32};
        double rate[2][PAIRS], ratio[PAIRS];
        for (int p = 0; p < PAIRS; p++)
            for (int v = 0; v < 2; v++) {
                double t0 = clock_s(CLOCK_THREAD_CPUTIME_ID), dt;
                long calls = 0;
                do {
                    const DiMatrix *mc = &copies[next_copy];
                    next_copy = (next_copy + 1) % n_copies;
                    if (qrows[v]) qprep[v](&acts, prepared);
                    for (int64_t r = 0; r < rows; r += task_rows) {
                        int64_t r_end = r + task_rows < rows ? r + task_rows : rows;
                        if (qrows[v]) qrows[v](mc, &acts, prepared, y[v], r, r_end, scratch);
                        else fn[v](mc, &acts, y[v], r, r_end, scratch);
                    }
                    calls++;
                } while ((dt = clock_s(CLOCK_THREAD_CPUTIME_ID) - t0) < WINDOW_S);
                rate[v][p] = 2.0 * (double)rows * (double)cols * (double)n * (double)calls / dt * 1e-9;
                if (v == 1) ratio[p] = rate[1][p] / rate[0][p];
            }
        bool same = memcmp(y[0], y[1], sizeof(float) * (size_t)(n * rows)) == 0;
        qsort(rate[0], PAIRS, sizeof(double), cmp_double);
        qsort(rate[1], PAIRS, sizeof(double), cmp_double);
        qsort(ratio, PAIRS, sizeof(double), cmp_double);
        printf("%s %ldx%ld %s n=%3ld  A %6.1f  B %6.1f GFLOP/s (medians of %d)  B/A %.3f [quartiles %.3f %.3f]  %s\n", argv[3], rows, cols,
               argv[6], n, rate[0][PAIRS / 2], rate[1][PAIRS / 2], PAIRS, ratio[PAIRS / 2], ratio[PAIRS / 4], ratio[3 * PAIRS / 4],
               same ? "same bits" : "DIFFERENT BITS");
    }
    return 0;
}
