/* Specification of the optimised matmul (matmul.h, cpu/matmul_simd.h):
 *  - every stored value decodes exactly as the reference decodes it (one-hot activations pick
 *    single weights, so the product must equal di_matrix_row bit for bit), over all codes and
 *    scale bytes including the ones that need the two-step scale path;
 *  - on random matrices of awkward shapes it agrees with di_matmul_ref within the float32
 *    summation bound 2 * K * 2^-24 * sum|w*x| (the two differ only in summation order);
 *  - every SIMD table (AVX2, AVX-512 on x86-64; NEON on aarch64) on every FP8 route gives the
 *    bits of the lane order matmul_simd.h defines, written out in scalar code: one definition
 *    both architectures are held to;
 *  - batch invariance: a token's outputs are bit-identical (memcmp) whether it is computed alone,
 *    at any position of batches of many sizes (GEMV and GEMM paths), with 1 or 2 threads;
 *  - bad input is an error with a message, never a crash. */
#include "test.h"

#include "base/error.h"
#include "base/threadpool.h"
#include "kernels/backend.h"
#include "kernels/matmul.h"
#include "kernels/cpu/matmul_simd.h"
#include "kernels/numformats.h"

#include <stdint.h>
#include <stdlib.h>

static uint32_t rnd(void) { return test_rand32(); }

static float rnd_float(void) { return ((float)(rnd() % 2000001) - 1000000.0f) / 1000000.0f; }

/* A random matrix of the format with its own storage (codes avoid the NaN encodings). */
typedef struct {
    DiMatrix m;
    void *data;
    uint8_t *scale;
} TestMatrix;

static uint8_t rnd_e4m3(void) {
    uint8_t c;
    do c = (uint8_t)rnd(); while ((c & 0x7F) == 0x7F);
    return c;
}

static TestMatrix make_matrix(DiMatFormat f, int64_t rows, int64_t cols, uint8_t scale_lo, uint8_t scale_hi) {
    TestMatrix t = {.m = {.format = f, .rows = rows, .cols = cols}};
    int64_t n = rows * cols;
    switch (f) {
    case DI_MAT_F32: {
        float *d = malloc(sizeof(float) * n);
        for (int64_t i = 0; i < n; i++) d[i] = rnd_float();
        t.data = d;
        break;
    }
    case DI_MAT_BF16: {
        uint16_t *d = malloc(sizeof(uint16_t) * n);
        for (int64_t i = 0; i < n; i++) d[i] = di_f32_to_bf16(rnd_float() * 4.0f);
        t.data = d;
        break;
    }
    case DI_MAT_FP8_BLOCK: {
        uint8_t *d = malloc(n);
        for (int64_t i = 0; i < n; i++) d[i] = rnd_e4m3();
        t.data = d;
        break;
    }
    case DI_MAT_FP4_ROW32: {
        uint8_t *d = malloc(n / 2);
        for (int64_t i = 0; i < n / 2; i++) d[i] = (uint8_t)rnd();
        t.data = d;
        break;
    }
    }
    t.m.data = t.data;
    int64_t sb = di_matrix_scale_bytes(&t.m);
    if (sb > 0) {
        t.scale = malloc(sb);
        for (int64_t i = 0; i < sb; i++) t.scale[i] = (uint8_t)(scale_lo + rnd() % (scale_hi - scale_lo + 1u));
        t.m.scale = t.scale;
    }
    return t;
}

static void free_matrix(TestMatrix *t) {
    free(t->data);
    free(t->scale);
}

static float *rnd_acts(int64_t n) {
    float *x = malloc(sizeof(float) * (n ? n : 1));
    for (int64_t i = 0; i < n; i++) x[i] = rnd_float() * 3.0f;
    return x;
}

static const char *format_name(DiMatFormat f) {
    static const char *names[] = {"f32", "bf16", "fp8", "fp4"};
    return names[f];
}

/* |simd - ref| <= 2 * K * 2^-24 * sum_c |W[r][c] x[c]|: both are float32 sums of the same K exact
 * products in different orders, each within K * 2^-24 * sum|terms| of the exact sum. */
static void check_against_reference(const TestMatrix *t, int64_t n_tokens, DiThreadPool *pool) {
    const DiMatrix *w = &t->m;
    float *x = rnd_acts(n_tokens * w->cols);
    float *y = malloc(sizeof(float) * (n_tokens * w->rows + 1));
    float *yr = malloc(sizeof(float) * (n_tokens * w->rows + 1));
    float *row = malloc(sizeof(float) * w->cols);
    CHECK(di_matmul_simd(pool, w, x, n_tokens, y) == 0);
    CHECK(di_matmul_ref(w, x, n_tokens, yr) == 0);
    int bad = 0;
    for (int64_t r = 0; r < w->rows && bad < 3; r++) {
        di_matrix_row(w, r, row);
        for (int64_t tk = 0; tk < n_tokens && bad < 3; tk++) {
            double mag = 0;
            for (int64_t c = 0; c < w->cols; c++) mag += fabs((double)row[c] * x[tk * w->cols + c]);
            double tol = 2.0 * (double)w->cols * 0x1p-24 * mag + 1e-30;
            double d = fabs((double)y[tk * w->rows + r] - yr[tk * w->rows + r]);
            if (!(d <= tol)) bad++;
            CHECK_MSG(d <= tol, "%s [%lld x %lld] n=%lld r=%lld t=%lld: simd %.9g ref %.9g tol %g", format_name(w->format),
                      (long long)w->rows, (long long)w->cols, (long long)n_tokens, (long long)r, (long long)tk,
                      y[tk * w->rows + r], yr[tk * w->rows + r], tol);
        }
    }
    free(x);
    free(y);
    free(yr);
    free(row);
}

TEST(simd_matches_reference_on_awkward_shapes) {
    DiThreadPool *pool = di_pool_create(2);
    const int64_t rows[] = {1, 5, 33, 97, 130};
    const int64_t cols_any[] = {1, 7, 40, 100, 257};
    const int64_t cols_fp4[] = {32, 96, 160};
    const int64_t tokens[] = {1, 2, 3, 5, 9};
    for (int f = DI_MAT_F32; f <= DI_MAT_FP4_ROW32; f++)
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
            size_t nc = f == DI_MAT_FP4_ROW32 ? 3 : 5;
            for (size_t ci = 0; ci < nc; ci++) {
                int64_t c = f == DI_MAT_FP4_ROW32 ? cols_fp4[ci] : cols_any[ci];
                TestMatrix t = make_matrix((DiMatFormat)f, rows[ri], c, 112, 130);
                check_against_reference(&t, tokens[(ri + ci) % 5], pool);
                free_matrix(&t);
            }
        }
    di_pool_destroy(pool);
}

TEST(simd_matches_reference_with_extreme_scales) {
    /* 0 (2^-127, subnormal products), 134/135 (the edge of the one-multiply path), 150 (large) */
    TestMatrix a = make_matrix(DI_MAT_FP8_BLOCK, 70, 90, 0, 20);
    TestMatrix b = make_matrix(DI_MAT_FP8_BLOCK, 70, 90, 134, 150);
    TestMatrix c = make_matrix(DI_MAT_FP4_ROW32, 70, 96, 0, 20);
    TestMatrix d = make_matrix(DI_MAT_FP4_ROW32, 70, 96, 134, 150);
    check_against_reference(&a, 40, NULL); /* panel GEMM (FP8 from 17 tokens, FP4 from 32) */
    check_against_reference(&a, 16, NULL); /* GEMV, four-token tiles */
    check_against_reference(&a, 5, NULL);  /* GEMV, tokens in pairs, plain path (tiny scales) */
    check_against_reference(&b, 1, NULL);
    check_against_reference(&c, 16, NULL);
    check_against_reference(&c, 40, NULL);
    check_against_reference(&d, 1, NULL);
    check_against_reference(&d, 5, NULL); /* FP4 GEMV, tokens in pairs */
    free_matrix(&a);
    free_matrix(&b);
    free_matrix(&c);
    free_matrix(&d);
}

/* With x = e_c (one-hot), y[r] = W[r][c] exactly: one exact product, the rest adds zeros.
 * 1 token takes the register-decoding GEMV, GEMM_TOKENS tokens the panel GEMM (matmul.c). */
#define GEMM_TOKENS 40 /* above both switches (FP8 17, FP4 32) */
static void check_one_hot_decode(const TestMatrix *t, int64_t n_check_cols) {
    const DiMatrix *w = &t->m;
    float *x = calloc(w->cols, sizeof(float));
    float *y = malloc(sizeof(float) * w->rows);
    float *y4 = malloc(sizeof(float) * w->rows * GEMM_TOKENS);
    float *x4 = calloc(w->cols * GEMM_TOKENS, sizeof(float));
    float *row = malloc(sizeof(float) * w->cols);
    int bad = 0;
    for (int64_t k = 0; k < n_check_cols && bad < 3; k++) {
        int64_t c = (k * 7919) % w->cols;
        x[c] = 1.0f;
        for (int j = 0; j < GEMM_TOKENS; j++) x4[j * w->cols + c] = 1.0f;
        CHECK(di_matmul_simd(NULL, w, x, 1, y) == 0);   /* GEMV path */
        CHECK(di_matmul_simd(NULL, w, x4, GEMM_TOKENS, y4) == 0); /* GEMM path */
        for (int64_t r = 0; r < w->rows; r++) {
            di_matrix_row(w, r, row);
            if (y[r] != row[c] || y4[3 * w->rows + r] != row[c]) bad++;
            CHECK_MSG(y[r] == row[c] && y4[3 * w->rows + r] == row[c], "%s r=%lld c=%lld: %.9g / %.9g, expected %.9g",
                      format_name(w->format), (long long)r, (long long)c, y[r], y4[3 * w->rows + r], row[c]);
        }
        x[c] = 0.0f;
        for (int j = 0; j < GEMM_TOKENS; j++) x4[j * w->cols + c] = 0.0f;
    }
    free(x);
    free(y);
    free(y4);
    free(x4);
    free(row);
}

TEST(every_fp8_code_and_scale_decodes_exactly) {
    /* 32 x 256: column c holds code c in every row, so row block 0 covers all codes; the scale
     * bytes of the 8 column blocks sweep 0..254 over the rows of several matrices. */
    for (int base = 0; base < 255; base += 8 * 4) {
        TestMatrix t = make_matrix(DI_MAT_FP8_BLOCK, 64, 256, 127, 127);
        uint8_t *d = t.data;
        for (int64_t r = 0; r < 64; r++)
            for (int c = 0; c < 256; c++) d[r * 256 + c] = ((c & 0x7F) == 0x7F) ? 0 : (uint8_t)c;
        for (int i = 0; i < 16; i++) t.scale[i] = (uint8_t)((base + i * 2) % 247); /* 448 * 2^(b-127) stays finite */
        check_one_hot_decode(&t, 256);
        free_matrix(&t);
    }
}

TEST(every_fp4_code_and_scale_decodes_exactly) {
    TestMatrix t = make_matrix(DI_MAT_FP4_ROW32, 255, 64, 0, 0);
    uint8_t *d = t.data;
    for (int64_t r = 0; r < 255; r++) {
        for (int c = 0; c < 32; c++) d[r * 32 + c] = (uint8_t)((c % 16) | ((15 - c % 16) << 4));
        t.scale[r * 2] = (uint8_t)(r % 253); /* every scale byte whose products stay finite */
        t.scale[r * 2 + 1] = (uint8_t)(252 - r % 253);
    }
    check_one_hot_decode(&t, 64);
    free_matrix(&t);
}

TEST(bf16_and_f32_decode_exactly) {
    TestMatrix a = make_matrix(DI_MAT_BF16, 19, 45, 0, 0);
    TestMatrix b = make_matrix(DI_MAT_F32, 19, 45, 0, 0);
    check_one_hot_decode(&a, 45);
    check_one_hot_decode(&b, 45);
    free_matrix(&a);
    free_matrix(&b);
}

/* Batch invariance (engine-features.md §4.2): token `probe` computed alone, and inside batches
 * of other random tokens at several positions, with 1 and 2 threads, gives the same bytes. */
static void check_batch_invariance(DiMatFormat f, int64_t rows, int64_t cols) {
    TestMatrix t = make_matrix(f, rows, cols, 115, 128);
    const DiMatrix *w = &t.m;
    const int64_t max_batch = 70;
    float *probe = rnd_acts(cols);
    float *alone = malloc(sizeof(float) * rows);
    float *x = malloc(sizeof(float) * max_batch * cols);
    float *y = malloc(sizeof(float) * max_batch * rows);
    DiThreadPool *pool = di_pool_create(2);
    CHECK(di_matmul_simd(NULL, w, probe, 1, alone) == 0);
    const int64_t batches[] = {1, 2, 3, 4, 5, 7, 8, 12, 13, 16, 17, 31, 32, 64, 65, 70}; /* both sides of each GEMV/GEMM switch */
    for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
        int64_t n = batches[bi];
        for (int64_t pos = 0; pos < n; pos += (n > 8 ? n / 3 : 1)) {
            for (int64_t i = 0; i < n * cols; i++) x[i] = rnd_float() * 3.0f;
            memcpy(x + pos * cols, probe, sizeof(float) * cols);
            for (int threads = 1; threads <= 2; threads++) {
                CHECK(di_matmul_simd(threads == 2 ? pool : NULL, w, x, n, y) == 0);
                CHECK_MSG(memcmp(y + pos * rows, alone, sizeof(float) * rows) == 0,
                          "%s [%lld x %lld]: token at %lld of %lld, %d threads differs from alone", format_name(f),
                          (long long)rows, (long long)cols, (long long)pos, (long long)n, threads);
            }
        }
    }
    di_pool_destroy(pool);
    free(probe);
    free(alone);
    free(x);
    free(y);
    free_matrix(&t);
}

/* The FP8 GEMV moves the block scale onto the activations only when that is exact; a token
 * with activations near the float32 limits takes the plain path.  Either way the token's
 * outputs alone (GEMV) equal its outputs inside a batch (panel GEMM), bit for bit. */
TEST(fp8_gemv_with_extreme_activations_stays_batch_invariant) {
    /* The factor is 2^(b-7) on the float32-pattern route, 2^(b-119) on the FP16 one: either
     * route this machine takes sees one row block on each path (fp8_gemv_routes_agree runs both). */
    TestMatrix t = make_matrix(DI_MAT_FP8_BLOCK, 64, 96, 110, 135);
    for (int kb = 0; kb < 3; kb++) {
        t.scale[kb] = 110;    /* rows 0..31: 2e33 * 2^103 overflows -> plain path */
        t.scale[3 + kb] = 20; /* rows 32..63: 2e33 * 2^13 and 1e-38 * 2^13 exact -> scaled activations */
    }
    float *x = rnd_acts(5 * 96), alone[64], batch[5 * 64], ref[64];
    float *probe = x + 2 * 96;
    probe[3] = 1e-38f;    /* near the bottom of the normal range */
    probe[50] = 2e33f;    /* and near the top */
    probe[51] = -INFINITY; /* non-finite values scale exactly */
    probe[60] = 0.0f;
    CHECK(di_matmul_simd(NULL, &t.m, probe, 1, alone) == 0);
    CHECK(di_matmul_simd(NULL, &t.m, x, 5, batch) == 0);
    CHECK(memcmp(alone, batch + 2 * 64, sizeof alone) == 0);
    probe[51] = 1.0f; /* finite again: compare with the reference within the summation bound */
    CHECK(di_matmul_simd(NULL, &t.m, probe, 1, alone) == 0);
    CHECK(di_matmul_ref(&t.m, probe, 1, ref) == 0);
    float row[96];
    for (int r = 0; r < 64; r++) {
        double mag = 0;
        di_matrix_row(&t.m, r, row);
        for (int c = 0; c < 96; c++) mag += fabs((double)row[c] * probe[c]);
        if (isinf(ref[r])) CHECK(alone[r] == ref[r]); /* both overflow the same way */
        else CHECK_MSG(fabs((double)alone[r] - ref[r]) <= 2.0 * 96 * 0x1p-24 * mag, "row %d: %.9g vs %.9g", r, alone[r], ref[r]);
    }
    free(x);
    free_matrix(&t);
}

/* The FP8 GEMV's two ways of widening E4M3 (float32 patterns, or through FP16; the process takes
 * one, di_backend_cpu_fp8_gemv_route) give the same bits as each other and as the panel GEMM, on every
 * code (subnormals included), for 1 to 5 tokens, full and partial column blocks, and scale bytes
 * for which one route prescales the activations and the other takes the plain path. */
static void check_fp8_routes(const TestMatrix *t, const float *x, int64_t n) {
    int64_t rows = t->m.rows, k32 = (t->m.cols + 31) / 32 * 32;
    float *xp = calloc((size_t)(n * k32), sizeof(float));
    float *y[3], *scratch = aligned_alloc(32, sizeof(float) * (size_t)(di_simd_scratch_floats(t->m.cols, true) + 4 * k32));
    for (int i = 0; i < 3; i++) y[i] = malloc(sizeof(float) * (size_t)(n * rows));
    for (int64_t j = 0; j < n; j++) memcpy(xp + j * k32, x + j * t->m.cols, sizeof(float) * (size_t)t->m.cols);
    DiSimdActs a = {.x = xp, .n_tokens = n, .k32 = k32};
    di_simd_fp8_gemv_rows_on(DI_FP8_GEMV_F32, &t->m, &a, y[0], 0, rows, scratch);
    di_simd_gemm_rows(&t->m, &a, y[2], 0, rows, scratch);
    CHECK_MSG(memcmp(y[0], y[2], sizeof(float) * (size_t)(n * rows)) == 0, "[%lld x %lld] n=%lld: GEMV and GEMM differ",
              (long long)rows, (long long)t->m.cols, (long long)n);
    /* the mapped route with the true map, with none (FP16 throughout), with a map of zeros (float32
     * patterns on the subnormal codes too) and of ones (FP16 throughout): a map is a speed hint */
    int64_t map_bytes = di_matrix_fp8_subnormal_map_bytes(&t->m);
    uint8_t *map = malloc((size_t)map_bytes);
    const char *names[] = {"fp16", "mapped (true map)", "mapped (no map)", "mapped (zeros)", "mapped (ones)"};
    for (int v = 0; v < 5; v++) {
        DiMatrix m = t->m;
        m.fp8_subnormal_map = v == 2 ? NULL : map;
        if (v == 1) di_matrix_fp8_subnormal_map(&m, map);
        if (v >= 3) memset(map, v == 3 ? 0 : 1, (size_t)map_bytes);
        di_simd_fp8_gemv_rows_on(v == 0 ? DI_FP8_GEMV_FP16 : DI_FP8_GEMV_MAPPED, &m, &a, y[1], 0, rows, scratch);
        CHECK_MSG(memcmp(y[0], y[1], sizeof(float) * (size_t)(n * rows)) == 0,
                  "[%lld x %lld] n=%lld: route %s differs from f32", (long long)rows, (long long)t->m.cols, (long long)n,
                  names[v]);
    }
    free(map);
    for (int i = 0; i < 3; i++) free(y[i]);
    free(scratch);
    free(xp);
}

TEST(fp8_gemv_routes_agree) {
    const int64_t cols[] = {256, 300, 256, 300};
    for (int ci = 0; ci < 4; ci++) {
        /* scale bytes 100..150: the float32 route's factor 2^(b-7) overflows the prescale above
         * b = 133, the FP16 route's 2^(b-119) never does here, so the routes take different
         * paths; 115..130: both prescale, so the mapped route runs its mixed tiles */
        TestMatrix t = ci < 2 ? make_matrix(DI_MAT_FP8_BLOCK, 96, cols[ci], 100, 150)
                              : make_matrix(DI_MAT_FP8_BLOCK, 96, cols[ci], 115, 130);
        if (ci >= 2) { /* as in real weights: normal codes, a subnormal in one byte of ~400, so the
                        * mapped route mixes the two widenings within a tile */
            uint8_t *d = t.data;
            for (int64_t i = 0; i < 96 * cols[ci]; i++)
                d[i] = (uint8_t)((d[i] & 0x80) | (rnd() % 400 == 0 ? 1 + rnd() % 7 : 8 + rnd() % 0x77));
        }
        float *x = rnd_acts(5 * cols[ci]);
        if (ci < 2) x[7] = 3e-38f; /* prescaled to a subnormal on the FP16 route at small scale bytes */
        for (int64_t n = 1; n <= 5; n++) check_fp8_routes(&t, x, n);
        free(x);
        free_matrix(&t);
    }
}

/* The map marks exactly the 8-row x 32-column blocks holding a byte whose magnitude bits are
 * 1..7 (E4M3 exponent 0, mantissa not 0): zero codes (0x00, 0x80), the smallest normal (0x08)
 * and negative subnormals checked one by one, on a matrix with a partial last row group and
 * column block. */
TEST(fp8_subnormal_map_marks_the_blocks_with_subnormal_codes) {
    enum { ROWS = 21, COLS = 70 };
    static uint8_t data[ROWS * COLS], scale[1 * 3];
    DiMatrix m = {.format = DI_MAT_FP8_BLOCK, .rows = ROWS, .cols = COLS, .data = data, .scale = scale};
    memset(scale, 127, sizeof scale);
    for (int i = 0; i < ROWS * COLS; i++) data[i] = (uint8_t)(0x08 + i % 0x70) | (uint8_t)(i & 0x80); /* normal codes */
    data[0 * COLS + 5] = 0x00;    /* zero: no mark */
    data[3 * COLS + 40] = 0x80;   /* negative zero: no mark */
    data[9 * COLS + 33] = 0x01;   /* row group 1, block 1 */
    data[20 * COLS + 69] = 0x87;  /* row group 2 (a partial group), block 2 (partial), negative */
    data[17 * COLS + 2] = 0x07;   /* row group 2, block 0 */
    data[12 * COLS + 64] = 0x08;  /* the smallest normal: no mark */
    CHECK(di_matrix_fp8_subnormal_map_bytes(&m) == 3 * 3);
    uint8_t map[9];
    di_matrix_fp8_subnormal_map(&m, map);
    const uint8_t want[9] = {0, 0, 0, 0, 1, 0, 1, 0, 1};
    for (int i = 0; i < 9; i++) CHECK_MSG((map[i] != 0) == (want[i] != 0), "map[%d] = %d, want %d", i, map[i], want[i]);
    void *owned = (void *)1;
    DiMatrix prepared = m;
    CHECK(di_matrix_prepare(&prepared, &owned) == 0);
    if (di_simd_fp8_gemv_auto_route(NULL) == DI_FP8_GEMV_MAPPED) { /* the free functions' route */
        CHECK(owned != NULL && prepared.fp8_subnormal_map == owned);
        CHECK(memcmp(prepared.fp8_subnormal_map, map, sizeof map) == 0);
    } else {
        CHECK(owned == NULL && prepared.fp8_subnormal_map == NULL); /* nothing to prepare on this CPU */
    }
    free(owned);
    DiMatrix bad = m;
    bad.rows = 0;
    CHECK(di_matrix_prepare(&bad, &owned) == -1 && owned == NULL);
    CHECK(di_matrix_prepare(NULL, &owned) == -1);
}

/* Every route of the FP8 GEMV knob, chosen with the table, multiplies to the same bits. */
TEST(fp8_gemv_routes_of_the_tables_agree) {
    TestMatrix t = make_matrix(DI_MAT_FP8_BLOCK, 32, 64, 120, 125);
    float *x = rnd_acts(64), y[4][32];
    static const DiEnvFp8Gemv knobs[] = {DI_ENV_FP8_GEMV_AUTO, DI_ENV_FP8_GEMV_F32, DI_ENV_FP8_GEMV_FP16, DI_ENV_FP8_GEMV_MAPPED};
    for (int i = 0; i < 4; i++) {
        const DiKernelBackend *be = NULL;
        CHECK(di_backend_cpu_select((DiEnvKernelKnobs){.kernels = DI_ENV_KERNELS_SIMD, knobs[i]}, &be) == 0);
        DiMatrix w = t.m;
        void *owned = NULL;
        CHECK(be->matrix_prepare(be, &w, &owned) == 0);
        CHECK(di_matmul(be, NULL, &w, x, 1, y[i]) == 0);
        CHECK_MSG(memcmp(y[i], y[0], sizeof y[0]) == 0, "route %s differs", di_backend_cpu_fp8_gemv_route(be, NULL));
        free(owned);
    }
    free(x);
    free_matrix(&t);
}

/* The reduction order of cpu/matmul_simd.h written out as scalar code: lane j of output (t, r)
 * accumulates W[r][c] x[t][c] for c = 8g + j ascending with fmaf, the columns past cols up to
 * the next multiple of 32 being zero (as the kernels pad them); then ((l0+l4)+(l2+l6)) +
 * ((l1+l5)+(l3+l7)).  Every SIMD table must give exactly these bits: the x86-64 kernels (AVX2,
 * AVX-512) and the aarch64 ones (NEON) are held to this one definition, so they agree with each
 * other bit for bit although no test can run both in one process. */
static float lane_order_dot(const float *w_row, const float *x, int64_t cols) {
    float l[8] = {0};
    for (int64_t c = 0; c < (cols + 31) / 32 * 32; c++) l[c % 8] = fmaf(c < cols ? w_row[c] : 0.0f, c < cols ? x[c] : 0.0f, l[c % 8]);
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

/* Table be against the definition on w for n tokens (GEMV below the GEMM switch, GEMM above). */
static void check_lane_order(const DiKernelBackend *be, DiThreadPool *pool, const TestMatrix *t, int64_t n) {
    DiMatrix w = t->m;
    void *owned = NULL;
    CHECK(be->matrix_prepare(be, &w, &owned) == 0); /* the mapped route's subnormal map */
    float *x = rnd_acts(n * w.cols), *y = malloc(sizeof(float) * (size_t)(n * w.rows)), *row = malloc(sizeof(float) * (size_t)w.cols);
    CHECK(di_matmul(be, pool, &w, x, n, y) == 0);
    int bad = 0;
    for (int64_t r = 0; r < w.rows && bad < 3; r++) {
        CHECK(di_matrix_row(&w, r, row) == 0);
        for (int64_t tk = 0; tk < n; tk++) {
            float want = lane_order_dot(row, x + tk * w.cols, w.cols), got = y[tk * w.rows + r];
            if (memcmp(&want, &got, sizeof want) == 0) continue;
            bad++;
            CHECK_MSG(0, "%s route %s %s [%lld x %lld] n=%lld r=%lld t=%lld: %a, the lane order gives %a", be->name,
                      di_backend_cpu_fp8_gemv_route(be, NULL), format_name(w.format), (long long)w.rows, (long long)w.cols,
                      (long long)n, (long long)r, (long long)tk, got, want);
        }
    }
    free(x), free(y), free(row), free(owned);
}

TEST(every_simd_table_gives_the_lane_order_bits) {
    const DiKernelBackend *tab[DI_BACKEND_CPU_TABLES_MAX + 3];
    int nt = di_backend_cpu_tables(tab, DI_BACKEND_CPU_TABLES_MAX);
    static const DiEnvFp8Gemv routes[] = {DI_ENV_FP8_GEMV_F32, DI_ENV_FP8_GEMV_FP16, DI_ENV_FP8_GEMV_MAPPED};
    for (int i = 0; i < 3 && nt > 1; i++)
        CHECK(di_backend_cpu_select((DiEnvKernelKnobs){DI_ENV_KERNELS_SIMD, routes[i]}, &tab[nt++]) == 0);
    CHECK_MSG(nt > 1, "no SIMD table on this CPU: nothing is held to the lane order");
    static const struct {
        DiMatFormat f;
        int64_t rows, cols;
        uint8_t lo, hi;
    } shapes[] = {
        {DI_MAT_F32, 37, 70, 0, 0},          {DI_MAT_BF16, 33, 100, 0, 0},
        {DI_MAT_FP8_BLOCK, 70, 96, 110, 140}, {DI_MAT_FP8_BLOCK, 40, 75, 0, 200}, /* subnormal products, a partial block */
        {DI_MAT_FP4_ROW32, 45, 128, 110, 140}, {DI_MAT_FP4_ROW32, 9, 64, 0, 200},
    };
    static const int64_t ns[] = {1, 2, 3, 5, 20};
    DiThreadPool *pool = di_pool_create(2);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        TestMatrix t = make_matrix(shapes[s].f, shapes[s].rows, shapes[s].cols, shapes[s].lo, shapes[s].hi);
        if (shapes[s].f == DI_MAT_FP8_BLOCK) ((uint8_t *)t.data)[3] = 0x05, ((uint8_t *)t.data)[t.m.cols + 40] = 0x81; /* subnormal codes */
        for (int i = 1; i < nt; i++)
            for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) check_lane_order(tab[i], k == 2 ? pool : NULL, &t, ns[k]);
        free_matrix(&t);
    }
    di_pool_destroy(pool);
}

TEST(rows_are_bit_identical_across_batches_and_threads) {
    check_batch_invariance(DI_MAT_FP8_BLOCK, 200, 300);
    check_batch_invariance(DI_MAT_FP4_ROW32, 130, 320);
    check_batch_invariance(DI_MAT_BF16, 101, 77);
    check_batch_invariance(DI_MAT_F32, 67, 64);
}

TEST(bad_input_is_an_error) {
    TestMatrix t = make_matrix(DI_MAT_FP8_BLOCK, 4, 32, 127, 127);
    float x[32] = {0}, y[4];
    di_error_clear();
    CHECK(di_matmul_simd(NULL, &t.m, NULL, 1, y) == -1);
    CHECK(strstr(di_error_message(), "activations") != NULL);
    CHECK(di_matmul_simd(NULL, &t.m, x, -1, y) == -1);
    DiMatrix bad = t.m;
    bad.scale = NULL;
    CHECK(di_matmul_simd(NULL, &bad, x, 1, y) == -1);
    CHECK(strstr(di_error_message(), "without scales") != NULL);
    bad = t.m;
    bad.rows = 0;
    CHECK(di_matmul_simd(NULL, &bad, x, 1, y) == -1);
    CHECK(strstr(di_error_message(), "shape") != NULL);
    bad = t.m;
    bad.format = DI_MAT_FP4_ROW32;
    bad.cols = 40;
    CHECK(di_matmul(di_backend_cpu_ref(), NULL, &bad, x, 1, y) == -1);
    CHECK(di_matmul(NULL, NULL, &t.m, x, 1, y) == -1);
    CHECK(strstr(di_error_message(), "no kernel table") != NULL);
    CHECK(di_matmul_simd(NULL, &t.m, x, 0, y) == 0); /* no tokens: nothing to do */
    free_matrix(&t);
}

TEST(backend_choice_follows_env) {
    TestMatrix t = make_matrix(DI_MAT_BF16, 8, 64, 0, 0);
    float *x = rnd_acts(64), y[8], yr[8];
    const DiKernelBackend *be = NULL;
    CHECK(di_backend_cpu_select((DiEnvKernelKnobs){.kernels = DI_ENV_KERNELS_REF}, &be) == 0);
    CHECK(di_matmul(be, NULL, &t.m, x, 1, y) == 0);
    CHECK(di_matmul_ref(&t.m, x, 1, yr) == 0);
    CHECK(memcmp(y, yr, sizeof y) == 0); /* the reference itself, bit for bit */
    /* the build machine has AVX2+FMA (and on some CPUs AVX-512: test_matmul_avx512); aarch64 NEON */
    char *env = test_env_unset("DEEPINFER_KERNELS"); /* the default, auto */
    CHECK(di_backend_cpu_from_env(&be) == 0);
#if defined(__x86_64__)
    CHECK_STR(be->name, di_simd_avx512_available() && di_simd_avx512_pays() ? "avx512" : "avx2-fma");
#else
    CHECK_STR(be->name, "neon");
#endif
    test_env_restore("DEEPINFER_KERNELS", env);
    free(x);
    free_matrix(&t);
}

int main(void) {
    RUN_TEST(simd_matches_reference_on_awkward_shapes);
    RUN_TEST(simd_matches_reference_with_extreme_scales);
    RUN_TEST(every_fp8_code_and_scale_decodes_exactly);
    RUN_TEST(every_fp4_code_and_scale_decodes_exactly);
    RUN_TEST(bf16_and_f32_decode_exactly);
    RUN_TEST(fp8_gemv_with_extreme_activations_stays_batch_invariant);
    RUN_TEST(fp8_gemv_routes_agree);
    RUN_TEST(fp8_subnormal_map_marks_the_blocks_with_subnormal_codes);
    RUN_TEST(fp8_gemv_routes_of_the_tables_agree);
    RUN_TEST(every_simd_table_gives_the_lane_order_bits);
    RUN_TEST(rows_are_bit_identical_across_batches_and_threads);
    RUN_TEST(bad_input_is_an_error);
    RUN_TEST(backend_choice_follows_env);
    return TEST_SUMMARY();
}
