/* Specification of di_matmul_qa (matmul.h): the product for inputs quantised per §4.3, with FP4
 * weights reduced in block order.
 *  - the SIMD kernels equal the readable definition di_matmul_ref_qa bit for bit, on quantised
 *    inputs (the integer path), on plain float inputs (the float path), on inputs mixing both
 *    block by block, and with scales at the ends of the UE8M0 range (NaN included);
 *  - a quantised input really takes the integer path (its counter moves), its blocks holding
 *    values below 1/8 of the E4M3 range (wide blocks) included, alone and in pairs;
 *  - a token's outputs are the same bits alone, at any position of batches of 1..70 tokens, on
 *    1 or 2 threads;
 *  - the block order computes the same product as di_matmul_ref within the float32 summation
 *    bound (an independent check of the definition);
 *  - other formats are exactly di_matmul; bad input is an error. */
#include "test.h"

#include "base/error.h"
#include "base/threadpool.h"
#include "kernels/backend.h"
#include "kernels/cpu/matmul_simd.h"
#include "kernels/matmul.h"
#include "kernels/numformats.h"

#include <stdint.h>
#include <stdlib.h>

/* The table a model on this CPU gets by default (the SIMD one wherever AVX2+FMA exist). */
static const DiKernelBackend *kernels(void) {
    const DiKernelBackend *be = NULL;
    CHECK(di_backend_cpu_select((DiEnvKernelKnobs){.kernels = DI_ENV_KERNELS_AUTO}, &be) == 0);
    return be;
}

/* Row blocks the integer path is expected to take: the x86-64 kernels have one (the same bits as
 * the float path, matmul_fp4q_avx2.c); NEON computes every block on the float path
 * (kernels/neon/matmul_fp4q_neon.c), so its counter must stay at 0. */
#if defined(__x86_64__)
#define INTEGER_BLOCKS(n) (n)
#else
#define INTEGER_BLOCKS(n) 0
#endif

static float rnd_float(void) { return ((float)(test_rand32() % 2000001) - 1000000.0f) / 1000000.0f; }

typedef struct {
    DiMatrix m;
    uint8_t *data, *scale;
} Fp4Matrix;

static Fp4Matrix make_fp4(int64_t rows, int64_t cols, int scale_lo, int scale_hi) {
    Fp4Matrix t = {.m = {.format = DI_MAT_FP4_ROW32, .rows = rows, .cols = cols}};
    t.data = malloc((size_t)(rows * cols / 2));
    t.scale = malloc((size_t)(rows * cols / 32));
    for (int64_t i = 0; i < rows * cols / 2; i++) t.data[i] = (uint8_t)test_rand32();
    for (int64_t i = 0; i < rows * cols / 32; i++) t.scale[i] = (uint8_t)(scale_lo + test_rand32() % (uint32_t)(scale_hi - scale_lo + 1));
    t.m.data = t.data;
    t.m.scale = t.scale;
    return t;
}

static void free_fp4(Fp4Matrix *t) {
    free(t->data);
    free(t->scale);
}

typedef enum { ACTS_QUANTISED, ACTS_PLAIN, ACTS_MIXED } ActsKind;

/* n values: quantised per §4.3 (every block on the integer path: narrow, or wide for a value
 * below 1/8 of the E4M3 range now and then), plain floats, or quantised with some blocks made
 * inexact. */
static float *make_acts(int64_t n, ActsKind kind) {
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = rnd_float() * 3.0f;
    if (kind == ACTS_PLAIN) return x;
    CHECK(di_roundtrip_fp8_block32(x, (size_t)n) == 0);
    if (kind == ACTS_MIXED)
        for (int64_t b = 0; b < n / 32; b += 3) x[b * 32 + test_rand32() % 32] *= 1.0f + 0x1p-20f; /* 21 bits */
    return x;
}

/* Same bits, or NaN on both sides (a NaN's payload is not specified). */
static bool same_result(float a, float b) { return memcmp(&a, &b, sizeof a) == 0 || (isnan(a) && isnan(b)); }

static void check_bits(const Fp4Matrix *t, int64_t n, ActsKind kind, DiThreadPool *pool) {
    const DiMatrix *w = &t->m;
    float *x = make_acts(n * w->cols, kind);
    float *y = malloc(sizeof(float) * (size_t)(n * w->rows)), *yr = malloc(sizeof(float) * (size_t)(n * w->rows));
    CHECK(di_matmul_qa(kernels(), pool, w, x, n, y) == 0);
    CHECK(di_matmul_ref_qa(w, x, n, yr) == 0);
    int bad = 0;
    for (int64_t i = 0; i < n * w->rows && bad < 3; i++)
        if (!same_result(y[i], yr[i])) {
            bad++;
            CHECK_MSG(0, "[%lld x %lld] n=%lld kind %d out %lld: simd %.9g (%a) ref %.9g (%a)", (long long)w->rows,
                      (long long)w->cols, (long long)n, (int)kind, (long long)i, y[i], y[i], yr[i], yr[i]);
        }
    free(x);
    free(y);
    free(yr);
}

TEST(fp4_block_order_equals_its_definition_bit_for_bit) {
    DiThreadPool *pool = di_pool_create(2);
    const int64_t shapes[][2] = {{1, 32}, {7, 64}, {8, 96}, {13, 512}, {64, 1024}, {130, 320}, {33, 2048}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        Fp4Matrix t = make_fp4(shapes[s][0], shapes[s][1], 110, 135);
        for (int64_t n = 1; n <= 9; n++)
            for (int kind = ACTS_QUANTISED; kind <= ACTS_MIXED; kind++) check_bits(&t, n, (ActsKind)kind, n % 2 ? NULL : pool);
        for (int64_t n = 15; n <= 17; n++) check_bits(&t, n, ACTS_MIXED, pool);
        if (shapes[s][0] * shapes[s][1] <= 64 * 1024)
            for (int kind = ACTS_QUANTISED; kind <= ACTS_MIXED; kind++) check_bits(&t, 70, (ActsKind)kind, kind == 1 ? NULL : pool);
        free_fp4(&t);
    }
    di_pool_destroy(pool);
}

TEST(extreme_scales_keep_the_definition) {
    /* Scales from 0 (2^-128) to 255 (NaN): tiles whose factor 2^(b + log2 u - 136) leaves the
     * normal range take the float path, the rest the integer one; both give the definition. */
    Fp4Matrix t = make_fp4(40, 256, 0, 255);
    for (int64_t n = 1; n <= 5; n++) check_bits(&t, n, ACTS_QUANTISED, NULL);
    check_bits(&t, 20, ACTS_QUANTISED, NULL);
    free_fp4(&t);
    t = make_fp4(100, 256, 118, 130);
    {
        /* many tokens, some of them near the float32 limits or not finite: every token gives
         * the definition, whichever path its blocks take */
        int64_t n = 24;
        float *x = make_acts(n * 256, ACTS_QUANTISED), *y = malloc(sizeof(float) * 100 * n), *yr = malloc(sizeof(float) * 100 * n);
        x[3 * 256 + 5] = 1e-39f;   /* subnormal */
        x[7 * 256 + 9] = 3e37f;    /* 48 |x| s beyond 2^126 for s >= 1 */
        x[11 * 256 + 2] = INFINITY;
        memset(x + 13 * 256, 0, 256 * sizeof(float)); /* an all-zero token */
        CHECK(di_matmul_qa(kernels(), NULL, &t.m, x, n, y) == 0);
        CHECK(di_matmul_ref_qa(&t.m, x, n, yr) == 0);
        int bad = 0;
        for (int64_t i = 0; i < n * 100 && bad < 3; i++)
            if (!same_result(y[i], yr[i])) {
                bad++;
                CHECK_MSG(0, "out %lld (token %lld): %a vs %a", (long long)i, (long long)(i / 100), y[i], yr[i]);
            }
        free(x);
        free(y);
        free(yr);
    }
    free_fp4(&t);
    t = make_fp4(40, 256, 0, 20); /* tiny scales: products in the subnormal range */
    check_bits(&t, 1, ACTS_QUANTISED, NULL);
    check_bits(&t, 1, ACTS_PLAIN, NULL);
    free_fp4(&t);
    t = make_fp4(40, 256, 230, 254); /* huge ones: sums that overflow to infinity */
    check_bits(&t, 1, ACTS_QUANTISED, NULL);
    check_bits(&t, 3, ACTS_QUANTISED, NULL);
    free_fp4(&t);
}

TEST(non_finite_and_zero_activations_keep_the_definition) {
    Fp4Matrix t = make_fp4(16, 128, 120, 130);
    float *x = make_acts(128, ACTS_QUANTISED), y[16], yr[16];
    memset(x + 32, 0, 32 * sizeof(float)); /* an all-zero block */
    x[70] = INFINITY;
    x[100] = NAN;
    CHECK(di_matmul_qa(kernels(), NULL, &t.m, x, 1, y) == 0);
    CHECK(di_matmul_ref_qa(&t.m, x, 1, yr) == 0);
    for (int r = 0; r < 16; r++) CHECK_MSG(same_result(y[r], yr[r]), "row %d: %a vs %a", r, y[r], yr[r]);
    free(x);
    free_fp4(&t);
}

TEST(quantised_input_takes_the_integer_path) {
    Fp4Matrix t = make_fp4(64, 512, 115, 130);
    float *x = make_acts(512, ACTS_QUANTISED), y[64];
    long long before = di_simd_fp4q_integer_blocks();
    CHECK(di_matmul_qa(kernels(), NULL, &t.m, x, 1, y) == 0);
    long long taken = di_simd_fp4q_integer_blocks() - before;
    CHECK_MSG(taken == INTEGER_BLOCKS(64 * 16), "integer path took %lld of 1024 row blocks", taken); /* 64 rows x 16 blocks */
    for (int i = 0; i < 512; i++) x[i] = rnd_float(); /* plain floats: 2^-20 steps, 20+ bit integers */
    before = di_simd_fp4q_integer_blocks();
    CHECK(di_matmul_qa(kernels(), NULL, &t.m, x, 1, y) == 0);
    CHECK_EQ_INT(di_simd_fp4q_integer_blocks() - before, 0);
    free(x);
    free_fp4(&t);
}

/* Quantised blocks that each hold values far below their largest (down to 2^-9 of the scale,
 * E4M3's smallest subnormal): no 16-bit image is exact, the two-half (wide) one is.  One and
 * two tokens take the integer path on every block, a pair mixing a narrow and a wide token
 * too; three or four run the float path; all give the definition's bits. */
TEST(wide_blocks_take_the_integer_path) {
    const int64_t rows = 24, cols = 256, kblocks = cols / 32;
    Fp4Matrix t = make_fp4(rows, cols, 115, 130);
    float *x = malloc(sizeof(float) * 4 * cols), y[4 * 24], yr[4 * 24];
    for (int64_t i = 0; i < 4 * cols; i++) {
        float v = rnd_float() * 3.0f;
        x[i] = i % 32 == 5 ? v * 0x1p-14f : i % 32 == 17 ? v * 0x1p-9f : v; /* two tiny values per block */
    }
    CHECK(di_roundtrip_fp8_block32(x, (size_t)(4 * cols)) == 0);
    for (int64_t b = 0; b < 4 * kblocks; b++) /* each block's tiny value survived the round trip */
        CHECK_MSG(x[b * 32 + 5] != 0.0f, "block %lld lost its tiny value", (long long)b);
    for (int64_t n = 1; n <= 4; n++) {
        long long before = di_simd_fp4q_integer_blocks();
        CHECK(di_matmul_qa(kernels(), NULL, &t.m, x, n, y) == 0);
        long long taken = di_simd_fp4q_integer_blocks() - before;
        CHECK(di_matmul_ref_qa(&t.m, x, n, yr) == 0);
        for (int64_t i = 0; i < n * rows; i++) CHECK_MSG(same_result(y[i], yr[i]), "n=%lld out %lld: %a vs %a", (long long)n, (long long)i, y[i], yr[i]);
        long long want = INTEGER_BLOCKS(n <= 2 ? n * rows * kblocks : 0);
        CHECK_MSG(taken == want, "n=%lld: integer path took %lld of %lld row blocks, expected %lld", (long long)n, taken,
                  (long long)(n * rows * kblocks), want);
    }
    /* a pair: token 0 narrow everywhere, token 1 wide everywhere */
    float *pair = make_acts(2 * cols, ACTS_QUANTISED);
    for (int64_t c = 0; c < cols; c++) pair[c] = (float)((c % 61) - 30); /* small integers: narrow */
    memcpy(pair + cols, x, sizeof(float) * cols);
    long long before = di_simd_fp4q_integer_blocks();
    CHECK(di_matmul_qa(kernels(), NULL, &t.m, pair, 2, y) == 0);
    CHECK_EQ_INT(di_simd_fp4q_integer_blocks() - before, INTEGER_BLOCKS(2 * rows * kblocks));
    CHECK(di_matmul_ref_qa(&t.m, pair, 2, yr) == 0);
    for (int64_t i = 0; i < 2 * rows; i++) CHECK_MSG(same_result(y[i], yr[i]), "pair out %lld: %a vs %a", (long long)i, y[i], yr[i]);
    free(pair);
    /* scale bytes over the whole UE8M0 range: the tiles whose wide factor 2^(b + f_off - 3)
     * would leave the normal range take the float path; the bits stay the definition's */
    Fp4Matrix e = make_fp4(rows, cols, 0, 255);
    for (int64_t n = 1; n <= 2; n++) {
        CHECK(di_matmul_qa(kernels(), NULL, &e.m, x, n, y) == 0);
        CHECK(di_matmul_ref_qa(&e.m, x, n, yr) == 0);
        for (int64_t i = 0; i < n * rows; i++)
            CHECK_MSG(same_result(y[i], yr[i]), "extreme scales n=%lld out %lld: %a vs %a", (long long)n, (long long)i, y[i], yr[i]);
    }
    free_fp4(&e);
    free(x);
    free_fp4(&t);
}

TEST(tokens_are_bit_identical_across_batches_and_threads) {
    Fp4Matrix t = make_fp4(96, 384, 115, 130);
    const int64_t cols = 384, rows = 96, max_batch = 70;
    float *probe = make_acts(cols, ACTS_MIXED), alone[96];
    float *x = malloc(sizeof(float) * max_batch * cols), *y = malloc(sizeof(float) * max_batch * rows);
    DiThreadPool *pool = di_pool_create(2);
    CHECK(di_matmul_qa(kernels(), NULL, &t.m, probe, 1, alone) == 0);
    const int64_t batches[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 33, 70};
    for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
        int64_t n = batches[bi];
        float *fill = make_acts(n * cols, ACTS_QUANTISED);
        memcpy(x, fill, sizeof(float) * (size_t)(n * cols));
        free(fill);
        for (int64_t pos = 0; pos < n; pos += (n > 9 ? n / 4 : 1)) {
            memcpy(x + pos * cols, probe, sizeof(float) * cols);
            for (int threads = 1; threads <= 2; threads++) {
                CHECK(di_matmul_qa(kernels(), threads == 2 ? pool : NULL, &t.m, x, n, y) == 0);
                CHECK_MSG(memcmp(y + pos * rows, alone, sizeof alone) == 0, "token at %lld of %lld, %d threads",
                          (long long)pos, (long long)n, threads);
            }
        }
    }
    di_pool_destroy(pool);
    free(probe);
    free(x);
    free(y);
    free_fp4(&t);
}

/* |qa - ref| <= 2 * K * 2^-24 * sum|w x|: the same K exact products, summed in two orders. */
TEST(block_order_is_the_same_product) {
    Fp4Matrix t = make_fp4(50, 1024, 118, 130);
    float *x = make_acts(1024, ACTS_QUANTISED), y[50], yr[50], row[1024];
    CHECK(di_matmul_qa(kernels(), NULL, &t.m, x, 1, y) == 0);
    CHECK(di_matmul_ref(&t.m, x, 1, yr) == 0);
    for (int r = 0; r < 50; r++) {
        CHECK(di_matrix_row(&t.m, r, row) == 0);
        double mag = 0, exact = 0;
        for (int c = 0; c < 1024; c++) {
            mag += fabs((double)row[c] * x[c]);
            exact += (double)row[c] * x[c];
        }
        double tol = 2.0 * 1024 * 0x1p-24 * mag;
        CHECK_MSG(fabs((double)y[r] - yr[r]) <= tol, "row %d: qa %.9g plain %.9g tol %g", r, y[r], yr[r], tol);
        CHECK_MSG(fabs((double)y[r] - exact) <= tol / 2, "row %d: qa %.9g exact %.9g", r, y[r], exact);
    }
    free(x);
    free_fp4(&t);
}

/* A hand-checked case: one block, one row.  Codes 1 (0.5) in even columns, 0x9 (-0.5) in odd
 * ones, scale byte 128 (2^1): W = +1 / -1.  x = column index (exact E4M3 values up to 31).
 * y = sum of even c - sum of odd c = -16. */
TEST(hand_computed_block) {
    uint8_t data[16], scale[1] = {128};
    for (int i = 0; i < 16; i++) data[i] = 0x91; /* low nibble 1 (even column), high 9 (odd) */
    DiMatrix w = {.format = DI_MAT_FP4_ROW32, .rows = 1, .cols = 32, .data = data, .scale = scale};
    float x[32], y = 0, yr = 0;
    for (int c = 0; c < 32; c++) x[c] = (float)c;
    long long before = di_simd_fp4q_integer_blocks();
    CHECK(di_matmul_qa(kernels(), NULL, &w, x, 1, &y) == 0);
    CHECK(di_matmul_ref_qa(&w, x, 1, &yr) == 0);
    CHECK(y == -16.0f);
    CHECK(yr == -16.0f);
    CHECK_EQ_INT(di_simd_fp4q_integer_blocks() - before, INTEGER_BLOCKS(1));
}

TEST(other_formats_and_bad_input) {
    uint8_t codes[64 * 64], scales[4];
    for (int i = 0; i < 64 * 64; i++) codes[i] = (uint8_t)(test_rand32() & 0x77);
    for (int i = 0; i < 4; i++) scales[i] = 125;
    DiMatrix fp8 = {.format = DI_MAT_FP8_BLOCK, .rows = 64, .cols = 64, .data = codes, .scale = scales};
    float x[2 * 64], y[2 * 64], yp[2 * 64];
    for (int i = 0; i < 128; i++) x[i] = rnd_float();
    CHECK(di_matmul_qa(kernels(), NULL, &fp8, x, 2, y) == 0);
    CHECK(di_matmul(kernels(), NULL, &fp8, x, 2, yp) == 0);
    CHECK(memcmp(y, yp, sizeof y) == 0);
    CHECK(di_matmul_ref_qa(&fp8, x, 2, y) == 0);
    CHECK(di_matmul_ref(&fp8, x, 2, yp) == 0);
    CHECK(memcmp(y, yp, sizeof y) == 0);
    Fp4Matrix t = make_fp4(4, 64, 127, 127);
    di_error_clear();
    CHECK(di_matmul_qa(kernels(), NULL, &t.m, NULL, 1, y) == -1);
    CHECK(strstr(di_error_message(), "activations") != NULL);
    CHECK(di_matmul_ref_qa(&t.m, x, -1, y) == -1);
    DiMatrix bad = t.m;
    bad.cols = 40;
    CHECK(di_matmul_qa(kernels(), NULL, &bad, x, 1, y) == -1);
    CHECK(strstr(di_error_message(), "divisible by 32") != NULL);
    CHECK(di_matmul_ref_qa(&bad, x, 1, y) == -1);
    CHECK(di_matmul_qa(kernels(), NULL, &t.m, x, 0, y) == 0);
    free_fp4(&t);
}

int main(void) {
    RUN_TEST(fp4_block_order_equals_its_definition_bit_for_bit);
    RUN_TEST(extreme_scales_keep_the_definition);
    RUN_TEST(non_finite_and_zero_activations_keep_the_definition);
    RUN_TEST(quantised_input_takes_the_integer_path);
    RUN_TEST(wide_blocks_take_the_integer_path);
    RUN_TEST(tokens_are_bit_identical_across_batches_and_threads);
    RUN_TEST(block_order_is_the_same_product);
    RUN_TEST(hand_computed_block);
    RUN_TEST(other_formats_and_bad_input);
    return TEST_SUMMARY();
}
