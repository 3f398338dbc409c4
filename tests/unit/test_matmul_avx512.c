/* Specification of the AVX-512 kernel route (DEEPINFER_KERNELS=avx512, cpu/matmul_fp4_avx512.c,
 * cpu/matmul_fp4q_avx512.c):
 *  - where the CPU has AVX-512 (F, BW, VL) it is the default unless the tiles do not pay there
 *    (AMD Zen 4, di_simd_avx512_pays), DEEPINFER_KERNELS=avx512 takes it, and every FP4 GEMV
 *    output is bit for bit the AVX2 route's: random matrices over every code and every scale byte, odd and
 *    even row counts (a tile's last row pair half empty), row ranges cut at any row as the
 *    thread pool's tasks cut them, and 1 to 5 tokens (the one-token tiles inside groups);
 *  - the same for the block-order FP4 product of the reference numerics (di_matmul_qa): inputs
 *    quantised per §4.3 (the integer path, narrow blocks), with values below 1/8 of the E4M3
 *    range (wide blocks), and with some blocks inexact (float blocks inside integer tiles), and
 *    the integer path is really taken;
 *  - where the CPU lacks it, choosing the avx512 table is an error naming the variable, and auto
 *    takes the AVX2 route;
 *  - DEEPINFER_KERNELS=avx2 keeps the AVX2 route on any SIMD CPU, and a bad value is an error.
 * On an aarch64 build (no AVX-512 there, kernels/neon/) auto takes the NEON table, and avx2 and
 * avx512 are errors naming the variable. */
#include "test.h"

#include "base/error.h"
#include "base/threadpool.h"
#include "kernels/backend.h"
#include "kernels/matmul.h"
#include "kernels/cpu/matmul_simd.h"
#include "kernels/numformats.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static float rnd_act(void) { return ((float)(test_rand32() % 2000001) - 1000000.0f) / 250000.0f; }

/* rows x cols FP4 weights: random bytes (all 256 nibble pairs), with row r's first bytes
 * running through every code, and scale bytes cycling through all 256 values. */
static DiMatrix make_fp4(int64_t rows, int64_t cols, uint8_t **data, uint8_t **scale) {
    DiMatrix w = {.format = DI_MAT_FP4_ROW32, .rows = rows, .cols = cols};
    *data = malloc((size_t)(rows * cols / 2));
    for (int64_t i = 0; i < rows * cols / 2; i++) (*data)[i] = (uint8_t)test_rand32();
    for (int64_t r = 0; r < rows && cols >= 32; r++)
        for (int c = 0; c < 16; c++) (*data)[r * cols / 2 + c / 2 + (c % 2) * 8] = (uint8_t)(c | (15 - c) << 4);
    int64_t nscale = rows * (cols / 32);
    *scale = malloc((size_t)nscale);
    uint8_t start = (uint8_t)test_rand32();
    for (int64_t i = 0; i < nscale; i++) (*scale)[i] = (uint8_t)(start + i * 7);
    w.data = *data;
    w.scale = *scale;
    return w;
}

/* The table auto takes where there is no AVX-512: AVX2 on x86-64, NEON on aarch64. */
#if defined(__x86_64__)
#define BASE_SIMD_TABLE "avx2-fma"
#else
#define BASE_SIMD_TABLE "neon"
#endif

/* The table want selects, which this CPU has (checked). */
static const DiKernelBackend *table(DiEnvKernels want) {
    const DiKernelBackend *be = NULL;
    CHECK(di_backend_cpu_select((DiEnvKernelKnobs){want, DI_ENV_FP8_GEMV_AUTO}, &be) == 0);
    return be;
}

/* The name of the table the environment's knobs choose now; NULL with the error. */
static const char *env_table(void) {
    const DiKernelBackend *be = NULL;
    return di_backend_cpu_from_env(&be) == 0 ? be->name : NULL;
}

TEST(avx512_fp4_gemv_gives_the_avx2_bits) {
    if (!di_simd_available()) return; /* checked by the next test: the CPU lacks even AVX2 */
    char *env = test_env_unset("DEEPINFER_KERNELS"); /* the default, auto */
    if (!di_simd_avx512_available()) {
        CHECK_STR(env_table(), BASE_SIMD_TABLE);
        test_env_restore("DEEPINFER_KERNELS", env);
        return;
    }
    /* auto takes the AVX-512 tiles where they pay (not on Zen 4), avx512 demands them */
    CHECK_STR(env_table(), di_simd_avx512_pays() ? "avx512" : "avx2-fma");
    setenv("DEEPINFER_KERNELS", "avx512", 1);
    CHECK_STR(env_table(), "avx512");
    test_env_restore("DEEPINFER_KERNELS", env);
    DiThreadPool *pool = di_pool_create(3);
    const int64_t rows[] = {1, 2, 3, 7, 8, 9, 17, 64, 131};
    const int64_t cols[] = {32, 64, 96, 1024, 2080};
    int compared = 0;
    for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++)
        for (size_t ci = 0; ci < sizeof cols / sizeof cols[0]; ci++)
            for (int64_t n = 1; n <= 5; n++) {
                uint8_t *data, *scale;
                DiMatrix w = make_fp4(rows[ri], cols[ci], &data, &scale);
                float *x = malloc(sizeof(float) * (size_t)(n * cols[ci]));
                for (int64_t i = 0; i < n * cols[ci]; i++) x[i] = rnd_act();
                float *y2 = malloc(sizeof(float) * (size_t)(n * rows[ri]));
                float *y5 = malloc(sizeof(float) * (size_t)(n * rows[ri]));
                memset(y2, 0xA5, sizeof(float) * (size_t)(n * rows[ri]));
                memset(y5, 0x5A, sizeof(float) * (size_t)(n * rows[ri]));
                CHECK(di_matmul(table(DI_ENV_KERNELS_AVX2), pool, &w, x, n, y2) == 0);
                CHECK(di_matmul(table(DI_ENV_KERNELS_AVX512), pool, &w, x, n, y5) == 0);
                CHECK_MSG(memcmp(y2, y5, sizeof(float) * (size_t)(n * rows[ri])) == 0,
                          "fp4 %lldx%lld n=%lld: the AVX-512 route's bits differ from AVX2's", (long long)rows[ri],
                          (long long)cols[ci], (long long)n);
                compared++;
                free(x);
                free(y2);
                free(y5);
                free(data);
                free(scale);
            }
    CHECK_EQ_INT(compared, 9 * 5 * 5);
    di_pool_destroy(pool);
}

/* Row ranges as tasks cut them (any first row, any length): the kernel entry itself. */
TEST(avx512_fp4_gemv_rows_match_on_any_row_range) {
    if (!di_simd_avx512_available()) return;
    uint8_t *data, *scale;
    DiMatrix w = make_fp4(45, 256, &data, &scale);
    float x[256] __attribute__((aligned(32))), scratch[8 * 256] __attribute__((aligned(32)));
    for (int i = 0; i < 256; i++) x[i] = rnd_act();
    DiSimdActs a = {.x = x, .n_tokens = 1, .k32 = 256};
    for (int64_t r0 = 0; r0 < 45; r0 += 5)
        for (int64_t r1 = r0 + 1; r1 <= 45; r1 += 3) {
            float y2[45], y5[45];
            memset(y2, 0, sizeof y2);
            memset(y5, 0, sizeof y5);
            di_simd_gemv_rows_tiles(&w, &a, y2, r0, r1, scratch, &(DiSimdVariant){false, DI_FP8_GEMV_AUTO});
            di_simd_gemv_rows_tiles(&w, &a, y5, r0, r1, scratch, &(DiSimdVariant){true, DI_FP8_GEMV_AUTO});
            CHECK_MSG(memcmp(y2, y5, sizeof y2) == 0, "rows [%lld, %lld) differ", (long long)r0, (long long)r1);
        }
    free(data);
    free(scale);
}

/* n tokens of cols activations for di_matmul_qa: kind 0 quantised, 1 with a tiny value in every
 * block (wide blocks), 2 quantised with every fifth block made inexact (float blocks, few enough
 * that one token keeps the integer tile). */
static float *qa_acts(int64_t n, int64_t cols, int kind) {
    float *x = malloc(sizeof(float) * (size_t)(n * cols));
    for (int64_t i = 0; i < n * cols; i++) x[i] = rnd_act() * (kind == 1 && i % 32 == 5 ? 0x1p-14f : 1.0f);
    CHECK(di_roundtrip_fp8_block32(x, (size_t)(n * cols)) == 0);
    if (kind == 2)
        for (int64_t b = 0; b < n * cols / 32; b += 5) x[b * 32 + test_rand32() % 32] *= 1.0f + 0x1p-20f;
    return x;
}

TEST(avx512_fp4q_tile_gives_the_avx2_bits) {
    if (!di_simd_avx512_available()) return;
    DiThreadPool *pool = di_pool_create(3);
    const int64_t rows[] = {8, 9, 17, 64, 131};
    const int64_t cols[] = {32, 256, 1024, 2080};
    for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++)
        for (size_t ci = 0; ci < sizeof cols / sizeof cols[0]; ci++)
            for (int kind = 0; kind < 3; kind++)
                for (int64_t n = 1; n <= 3; n++) {
                    uint8_t *data, *scale;
                    DiMatrix w = make_fp4(rows[ri], cols[ci], &data, &scale);
                    for (int64_t i = 0; i < rows[ri] * (cols[ci] / 32); i++) scale[i] = (uint8_t)(118 + test_rand32() % 16);
                    float *x = qa_acts(n, cols[ci], kind);
                    size_t bytes = sizeof(float) * (size_t)(n * rows[ri]);
                    float *y2 = malloc(bytes), *y5 = malloc(bytes);
                    CHECK(di_matmul_qa(table(DI_ENV_KERNELS_AVX2), pool, &w, x, n, y2) == 0);
                    long long before = di_simd_fp4q_integer_blocks();
                    CHECK(di_matmul_qa(table(DI_ENV_KERNELS_AVX512), pool, &w, x, n, y5) == 0);
                    CHECK_MSG(memcmp(y2, y5, bytes) == 0, "fp4q %lldx%lld kind %d n=%lld: AVX-512 bits differ from AVX2's",
                              (long long)rows[ri], (long long)cols[ci], kind, (long long)n);
                    if (n == 1 && kind == 0)
                        CHECK_EQ_INT(di_simd_fp4q_integer_blocks() - before, rows[ri] * (cols[ci] / 32));
                    free(x);
                    free(y2);
                    free(y5);
                    free(data);
                    free(scale);
                }
    di_pool_destroy(pool);
}

/* rows x cols FP8 weights: random non-NaN codes, about one in fifty an E4M3 subnormal (so the
 * mapped route mixes both widenings in a tile), scale bytes lo..hi (outside ~20..130 the
 * activations cannot be prescaled exactly and the plain path runs), with the subnormal map. */
static DiMatrix make_fp8(int64_t rows, int64_t cols, int lo, int hi, uint8_t **data, uint8_t **scale, uint8_t **map) {
    DiMatrix w = {.format = DI_MAT_FP8_BLOCK, .rows = rows, .cols = cols};
    int64_t kblocks = (cols + 31) / 32, nscale = (rows + 31) / 32 * kblocks;
    *data = malloc((size_t)(rows * cols));
    *scale = malloc((size_t)nscale);
    for (int64_t i = 0; i < rows * cols; i++) {
        uint32_t u = test_rand32();
        uint8_t mag = u % 50 == 0 ? (uint8_t)(1 + (u >> 8) % 7) : (uint8_t)(8 + (u >> 8) % 0x77); /* 0x08..0x7E */
        (*data)[i] = (uint8_t)((u >> 16 & 0x80) | mag);
    }
    for (int64_t i = 0; i < nscale; i++) (*scale)[i] = (uint8_t)(lo + (int)(test_rand32() % (uint32_t)(hi - lo + 1)));
    w.data = *data;
    w.scale = *scale;
    *map = malloc((size_t)di_matrix_fp8_subnormal_map_bytes(&w));
    di_matrix_fp8_subnormal_map(&w, *map);
    w.fp8_subnormal_map = *map;
    return w;
}

/* The one-token FP8 tile (matmul_fp8_avx512.c) against the AVX2 one, bit for bit: every route
 * (the mapped one with its map, and without one: FP16 throughout), full and partial column
 * blocks, tile tails of 1-7 rows, every task range a pool can cut (32-row steps), scale bytes
 * that prescale and that take the plain path, 1 to 5 tokens (two or more: the AVX2 group tiles
 * both sides); and through the tables with three threads. */
TEST(avx512_fp8_gemv_gives_the_avx2_bits) {
    if (!di_simd_avx512_available()) return;
    static const int64_t rows[] = {1, 7, 8, 9, 33, 100}, cols[] = {32, 64, 300, 1024};
    static const DiFp8GemvRoute routes[] = {DI_FP8_GEMV_F32, DI_FP8_GEMV_FP16, DI_FP8_GEMV_MAPPED};
    DiThreadPool *pool = di_pool_create(3);
    int compared = 0;
    for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++)
        for (size_t ci = 0; ci < sizeof cols / sizeof cols[0]; ci++)
            for (int plain = 0; plain < 2; plain++) {
                uint8_t *data, *scale, *map;
                int64_t R = rows[ri], C = cols[ci], k32 = (C + 31) / 32 * 32;
                DiMatrix w = make_fp8(R, C, plain ? 100 : 116, plain ? 150 : 123, &data, &scale, &map);
                float *x = calloc((size_t)(5 * k32), sizeof(float)), *xc = malloc(sizeof(float) * (size_t)(5 * C));
                float *y2 = malloc(sizeof(float) * (size_t)(5 * R)), *y5 = malloc(sizeof(float) * (size_t)(5 * R));
                float *scratch = aligned_alloc(64, sizeof(float) * (size_t)(8 * k32 + 64));
                for (int64_t t = 0; t < 5; t++)
                    for (int64_t c = 0; c < C; c++) x[t * k32 + c] = xc[t * C + c] = rnd_act();
                for (int64_t n = 1; n <= 5; n++)
                    for (int v = 0; v < 4; v++) {
                        DiMatrix wv = w;
                        if (v == 3) wv.fp8_subnormal_map = NULL;
                        DiSimdActs a = {.x = x, .n_tokens = n, .k32 = k32};
                        for (int64_t r0 = 0; r0 < R; r0 += 32) {
                            int64_t r1 = r0 + 32 * (1 + r0 % 3) < R ? r0 + 32 * (1 + r0 % 3) : R;
                            memset(y2, 0xA5, sizeof(float) * (size_t)(n * R));
                            memset(y5, 0x5A, sizeof(float) * (size_t)(n * R));
                            di_simd_fp8_gemv_rows_tiles(routes[v % 3], false, &wv, &a, y2, r0, r1, scratch);
                            di_simd_fp8_gemv_rows_tiles(routes[v % 3], true, &wv, &a, y5, r0, r1, scratch);
                            bool same = true;
                            for (int64_t t = 0; t < n; t++)
                                same = same && memcmp(y2 + t * R + r0, y5 + t * R + r0, sizeof(float) * (size_t)(r1 - r0)) == 0;
                            CHECK_MSG(same, "fp8 %lldx%lld n=%lld route %d%s rows [%lld, %lld)%s: bits differ", (long long)R,
                                      (long long)C, (long long)n, (int)routes[v % 3], v == 3 ? " (no map)" : "",
                                      (long long)r0, (long long)r1, plain ? " (plain scales)" : "");
                        }
                        compared++;
                    }
                CHECK(di_matmul(table(DI_ENV_KERNELS_AVX2), pool, &w, xc, 1, y2) == 0);
                CHECK(di_matmul(table(DI_ENV_KERNELS_AVX512), pool, &w, xc, 1, y5) == 0);
                CHECK_MSG(memcmp(y2, y5, sizeof(float) * (size_t)R) == 0, "fp8 %lldx%lld: the tables' bits differ",
                          (long long)R, (long long)C);
                free(x), free(xc), free(y2), free(y5), free(scratch), free(data), free(scale), free(map);
            }
    CHECK_EQ_INT(compared, 6 * 4 * 2 * 5 * 4);
    di_pool_destroy(pool);
}

TEST(kernels_env_names_the_route) {
    setenv("DEEPINFER_KERNELS", "avx2", 1);
#if defined(__x86_64__)
    CHECK_STR(env_table(), di_simd_available() ? "avx2-fma" : NULL);
#else
    CHECK(env_table() == NULL); /* an x86-64 table on an aarch64 build */
    CHECK(strstr(di_error_message(), "DEEPINFER_KERNELS=avx2") != NULL);
#endif
    setenv("DEEPINFER_KERNELS", "avx1024", 1);
    CHECK(env_table() == NULL);
    CHECK(strstr(di_error_message(), "DEEPINFER_KERNELS=avx1024") != NULL);
    if (!di_simd_avx512_available()) {
        const DiKernelBackend *be;
        CHECK(di_backend_cpu_select((DiEnvKernelKnobs){.kernels = DI_ENV_KERNELS_AVX512}, &be) == -1);
        CHECK(strstr(di_error_message(), "DEEPINFER_KERNELS=avx512") != NULL);
    }
    unsetenv("DEEPINFER_KERNELS");
}

int main(void) {
    RUN_TEST(avx512_fp4_gemv_gives_the_avx2_bits);
    RUN_TEST(avx512_fp4_gemv_rows_match_on_any_row_range);
    RUN_TEST(avx512_fp4q_tile_gives_the_avx2_bits);
    RUN_TEST(avx512_fp8_gemv_gives_the_avx2_bits);
    RUN_TEST(kernels_env_names_the_route);
    return TEST_SUMMARY();
}
