/* ggml_ab.c — ggml's CPU mul_mat against deepinfer's di_matmul_simd in one process, for the
 * ggml comparison of issue 2 (bench/ggml_comparison.md).  Not built by `make`: it needs ggml,
 * which stays outside this repository.  Build by hand, with ggml built as that file describes:
 *
 *     cc -O2 -std=gnu11 -I$GGML/include -Isrc -Iinclude bench/ggml_ab.c -o /tmp/ggml_ab \
 *        build/libdeepinfer.a -L$GGML/build/src -lggml -lggml-base -lggml-cpu \
 *        -Wl,-rpath,$GGML/build/src -ljansson -lutf8proc -lxxhash -lmicrohttpd \
 *        -lmvec -lm -lpthread
 *     /tmp/ggml_ab q8_0|mxfp4|q8_0-ref|mxfp4-ref ROWS COLS N
 *
 * Why one process: test-backend-ops and bench_kernels run minutes apart on a shared machine whose
 * speed drifts by 2x, so their ratio says little.  Here both sides run on one thread, alternating
 * 20 ms windows of thread CPU time on the same shape (ggml: q8_0 or mxfp4 weights, f32
 * activations, its own activation quantisation included; deepinfer: FP8 block-scaled or FP4
 * row32 weights with random codes and scales; with -ref, deepinfer's §4.3 activation round
 * trip and di_matmul_qa, as under the reference numerics), and the median of the 25 per-pair
 * ratios is printed with its quartiles. */
#include "ggml.h"
#include "ggml-cpu.h"
#include "base/error.h"
#include "kernels/backend.h"
#include "kernels/matmul.h"
#include "kernels/numformats.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { PAIRS = 25 };

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)rng;
}

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The deepinfer side of one call.  -ref: as the model's reference numerics run a quantised
 * GEMM (model_linear): the activations rounded through FP8 per 32 (§4.3) into a copy, then
 * di_matmul_qa (FP4: block order, matmul.h); ggml too quantises its activations inside the call. */
static int deepinfer_side(const DiKernelBackend *be, const DiMatrix *w, const float *x, float *xq, long long n, float *y,
                          int ref) {
    if (!ref) return di_matmul_simd(NULL, w, x, n, y);
    memcpy(xq, x, sizeof(float) * (size_t)(w->cols * n));
    if (di_roundtrip_fp8_block32(xq, (size_t)(w->cols * n)) != 0) return -1;
    return di_matmul_qa(be, NULL, w, xq, n, y);
}

int main(int argc, char **argv) {
    const char *kinds[] = {"q8_0", "mxfp4", "q8_0-ref", "mxfp4-ref"};
    int kind = -1;
    for (int i = 0; argc == 5 && i < 4; i++)
        if (strcmp(argv[1], kinds[i]) == 0) kind = i;
    if (kind < 0) {
        fprintf(stderr, "usage: ggml_ab q8_0|mxfp4|q8_0-ref|mxfp4-ref ROWS COLS N\n");
        return 2;
    }
    int q8 = kind % 2 == 0, ref = kind >= 2;
    long long rows = atoll(argv[2]), cols = atoll(argv[3]), n = atoll(argv[4]);
    if (rows < 1 || rows > 65536 || cols < 32 || cols > 65536 || cols % 32 || n < 1 || n > 1024) {
        fprintf(stderr, "ggml_ab: ROWS 1..65536, COLS 32..65536 (a multiple of 32), N 1..1024\n");
        return 2;
    }

    /* ggml side: c = a x b, a [rows x cols] quantised, b [n x cols] f32 */
    struct ggml_init_params ip = {.mem_size = (size_t)rows * cols * 2 + (size_t)n * (cols + rows) * 4 + (64u << 20)};
    struct ggml_context *ctx = ggml_init(ip);
    if (!ctx) return fprintf(stderr, "ggml_ab: ggml_init failed\n"), 1;
    struct ggml_tensor *a = ggml_new_tensor_2d(ctx, q8 ? GGML_TYPE_Q8_0 : GGML_TYPE_MXFP4, cols, rows);
    struct ggml_tensor *b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, cols, n);
    struct ggml_tensor *c = ggml_mul_mat(ctx, a, b);
    struct ggml_cgraph *graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, c);
    uint8_t *blocks = a->data;
    for (size_t i = 0; i < (size_t)rows * cols / 32; i++) {
        if (q8) { /* block_q8_0: fp16 scale, 32 int8 */
            uint16_t d = 0x2000 + (rnd() & 0xff);
            memcpy(blocks + 34 * i, &d, 2);
            for (int j = 0; j < 32; j++) blocks[34 * i + 2 + j] = (uint8_t)rnd();
        } else { /* block_mxfp4: E8M0 scale, 16 bytes of E2M1 pairs */
            blocks[17 * i] = (uint8_t)(120 + rnd() % 8);
            for (int j = 0; j < 16; j++) blocks[17 * i + 1 + j] = (uint8_t)rnd();
        }
    }
    float *x = b->data;
    for (long long i = 0; i < cols * n; i++) x[i] = (float)((int)(rnd() % 2001) - 1000) / 1000.0f;

    /* deepinfer side: the same shape in the checkpoint's formats (no NaN codes) */
    DiMatrix w = {.format = q8 ? DI_MAT_FP8_BLOCK : DI_MAT_FP4_ROW32, .rows = rows, .cols = cols};
    size_t data_bytes = (size_t)di_matrix_data_bytes(&w), scale_bytes = (size_t)di_matrix_scale_bytes(&w);
    uint8_t *data = malloc(data_bytes), *scale = malloc(scale_bytes);
    float *y = malloc(sizeof(float) * rows * n);
    if (!data || !scale || !y) return fprintf(stderr, "ggml_ab: out of memory\n"), 1;
    /* GGML_AB_FP8_SUBNORMALS=RATE: FP8 codes drawn from the normal ones, each made an E4M3
     * subnormal with probability RATE (block-scaled Gaussian weights hold ~1e-4; random codes,
     * the default, 7 magnitudes in 127), for CPUs that take an assist on float32 subnormals */
    const char *sub_env = getenv("GGML_AB_FP8_SUBNORMALS");
    double sub_rate = -1;
    if (sub_env && *sub_env) {
        char *end;
        sub_rate = strtod(sub_env, &end);
        if (*end || !(sub_rate >= 0 && sub_rate <= 1))
            return fprintf(stderr, "ggml_ab: GGML_AB_FP8_SUBNORMALS=%s: expected a rate in [0, 1]\n", sub_env), 2;
    }
    for (size_t i = 0; i < data_bytes; i++) {
        uint8_t v = (uint8_t)rnd();
        data[i] = (q8 && (v & 0x7f) == 0x7f) ? 0x7e : v;
        if (q8 && sub_rate >= 0) {
            uint8_t magnitude = (double)rnd() / 4294967296.0 < sub_rate ? (uint8_t)(1 + rnd() % 7) : (uint8_t)(8 + rnd() % 0x77);
            data[i] = (uint8_t)((v & 0x80) | magnitude);
        }
    }
    for (size_t i = 0; i < scale_bytes; i++) scale[i] = (uint8_t)(116 + rnd() % 8);
    w.data = data;
    w.scale = scale;
    void *prepared = NULL; /* as the model readies each weight (matmul.h): the FP8 subnormal map where used */
    if (di_matrix_prepare(&w, &prepared) != 0) return fprintf(stderr, "ggml_ab: %s\n", di_error_message()), 1;
    const DiKernelBackend *be; /* the SIMD table, as di_matmul_simd's side runs it */
    if (di_backend_cpu_select((DiEnvKernelKnobs){.kernels = DI_ENV_KERNELS_SIMD}, &be) != 0) return fprintf(stderr, "ggml_ab: %s\n", di_error_message()), 1;

    float *xq = malloc(sizeof(float) * cols * n);
    if (!xq) return fprintf(stderr, "ggml_ab: out of memory\n"), 1;
    double ratio[PAIRS], gflops[2][PAIRS];
    for (int warm = 0; warm < 10; warm++) {
        ggml_graph_compute_with_ctx(ctx, graph, 1);
        if (deepinfer_side(be, &w, x, xq, n, y, ref)) return fprintf(stderr, "ggml_ab: %s\n", di_error_message()), 1;
    }
    for (int p = 0; p < PAIRS; p++)
        for (int side = 0; side < 2; side++) {
            double t0 = cpu_now(), t;
            long calls = 0;
            do {
                if (side) deepinfer_side(be, &w, x, xq, n, y, ref);
                else ggml_graph_compute_with_ctx(ctx, graph, 1);
                calls++;
            } while ((t = cpu_now() - t0) < 0.02);
            gflops[side][p] = 2.0 * rows * cols * n * calls / t * 1e-9;
            if (side) ratio[p] = gflops[1][p] / gflops[0][p];
        }
    qsort(ratio, PAIRS, sizeof(double), cmp_double);
    qsort(gflops[0], PAIRS, sizeof(double), cmp_double);
    qsort(gflops[1], PAIRS, sizeof(double), cmp_double);
    printf("%s vs %s %lldx%lld n=%lld: ggml %.1f  deepinfer %.1f GFLOP/s (medians of %d)  "
           "deepinfer/ggml %.3f [quartiles %.3f %.3f]\n",
           argv[1], q8 ? (ref ? "FP8 ref" : "FP8") : (ref ? "FP4 ref" : "FP4"), rows, cols, n, gflops[0][PAIRS / 2], gflops[1][PAIRS / 2], PAIRS,
           ratio[PAIRS / 2], ratio[PAIRS / 4], ratio[3 * PAIRS / 4]);
    free(data);
    free(scale);
    free(prepared);
    free(y);
    free(xq);
    ggml_free(ctx);
    return 0;
}
