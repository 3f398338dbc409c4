/* matmul_neon.c — the aarch64 NEON kernels behind di_matmul (the interface of
 * kernels/cpu/matmul_simd.h, which kernels/cpu/matmul.c drives): the CPU check, the GEMV tiles of
 * every weight format and the panel GEMM, both in matmul_simd.h's reduction order (8 lanes as
 * two float32x4, one vfmaq_f32 per term, the fixed lane sum), so every output equals the x86
 * SIMD kernels' bit for bit.  Shared decoders: matmul_neon.h.  The block-order FP4 product of
 * di_matmul_qa is matmul_fp4q_neon.c.
 *
 * The GEMV decodes each 32-column block of a row in registers once for up to four tokens (four
 * rows a tile for one or two tokens, two for three or four: 8 to 16 accumulator registers of
 * the 32); the GEMM decodes a panel of rows into scratch once per token block and runs a
 * 2-row x 4-token register tile over it.  The FP8 GEMV widens E4M3 codes one of the three ways
 * DEEPINFER_FP8_GEMV names (the same bits every way); auto is FP16, which never meets a
 * subnormal operand and on NEON costs no more than the float32 patterns (FCVTL widens four
 * codes in one instruction).  No AVX-512 here: the avx512 queries answer false. */
#if defined(__aarch64__)

#include "kernels/neon/matmul_neon.h"

#include "kernels/numformats.h"

#include <pthread.h>
#include <time.h>

#define TILE_ROWS_MAX 4 /* GEMV: rows of one tile (four for one or two tokens, two for more) */
#define TILE_ROWS 2     /* GEMM register tile: 2 rows x 4 tokens x 2 halves = 16 accumulators */
#define TILE_TOKENS 4
#define GROUP 8         /* float32 lanes of one accumulator (two float32x4) */
#define PANEL_ROWS 48   /* rows decoded into one GEMM panel (a multiple of TILE_ROWS) */
#define PANEL_K 256     /* input columns per panel chunk: 48 x 256 floats = 48 KiB */
#define TOKEN_BLOCK 128 /* tokens whose accumulators persist across the chunks of one panel */

bool di_simd_available(void) { return true; } /* Advanced SIMD and FP16 conversion are ARMv8-A base */
bool di_simd_avx512_available(void) { return false; }
bool di_simd_avx512_pays(void) { return false; }
bool di_simd_use_avx512(void) { return false; }

/* ---- tables ------------------------------------------------------------------------------- */

uint8_t di_neon_fp4_weight_bytes[256][32] __attribute__((aligned(16)));
static pthread_once_t fp4_tables_once = PTHREAD_ONCE_INIT;

/* 2^(b-128) for scale byte b (b = 1, 0: the subnormals 2^-127, 2^-128), as bits. */
static uint32_t fp4_half_scale_bits(int b) { return b >= 2 ? (uint32_t)(b - 1) << 23 : b ? 0x00400000u : 0x00200000u; }

/* For every scale byte b and code n: twice the E2M1 magnitude of n times 2^(b-128), negated for
 * n >= 8 (the x86 decoders' weights, kernels/cpu/matmul_avx2.h); bytes 2 and 3 of its float32. */
static void fill_fp4_tables(void) {
    static const float doubled[8] = {0, 1, 2, 3, 4, 6, 8, 12};
    for (int b = 0; b < 256; b++)
        for (int n = 0; n < 16; n++) {
            float v = doubled[n & 7] * neon_f32_from_bits(fp4_half_scale_bits(b));
            uint32_t u;
            memcpy(&u, &v, sizeof u);
            u |= (uint32_t)(n >> 3) << 31;
            di_neon_fp4_weight_bytes[b][n] = (uint8_t)(u >> 16);
            di_neon_fp4_weight_bytes[b][16 + n] = (uint8_t)(u >> 24);
        }
}

void di_neon_fp4_tables_init(void) { pthread_once(&fp4_tables_once, fill_fp4_tables); }

/* ---- the FP8 route and the subnormal probe ------------------------------------------------ */

enum { PROBE_CHAIN = 256, PROBE_TRIES = 5 };

static double probe_seconds(float operand) {
    volatile float sink_in = operand;
    float32x4_t a = vdupq_n_f32(sink_in), f = vdupq_n_f32(0x1p120f), acc = vdupq_n_f32(0.0f);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < PROBE_CHAIN; i++) acc = vfmaq_f32(acc, a, f);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    volatile float sink_out = vgetq_lane_f32(acc, 0);
    (void)sink_out;
    return (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
}

double di_simd_subnormal_slowdown(void) {
    double normal = 1e9, subnormal = 1e9;
    for (int i = 0; i < PROBE_TRIES; i++) {
        double n = probe_seconds(0x1p-100f), s = probe_seconds(0x1p-140f);
        normal = n < normal ? n : normal;
        subnormal = s < subnormal ? s : subnormal;
    }
    return subnormal / (normal > 0 ? normal : 1e-9);
}

static double route_slowdown;
static pthread_once_t route_once = PTHREAD_ONCE_INIT;
static void probe_route(void) { route_slowdown = di_simd_subnormal_slowdown(); }

/* FP16 whatever the probe says: it never meets a subnormal operand and is the cheaper widening
 * here; the probe's ratio is still measured and reported (deepinfer bench). */
DiFp8GemvRoute di_simd_fp8_gemv_auto_route(double *subnormal_slowdown) {
    pthread_once(&route_once, probe_route);
    if (subnormal_slowdown) *subnormal_slowdown = route_slowdown;
    return DI_FP8_GEMV_FP16;
}

DiSimdVariant di_simd_auto_variant(void) { return (DiSimdVariant){false, di_simd_fp8_gemv_auto_route(NULL)}; }

/* AUTO -> the auto route; MAPPED without a map -> FP16 throughout (as on x86). */
static DiFp8GemvRoute effective_route(DiFp8GemvRoute route, const DiMatrix *w) {
    if (route == DI_FP8_GEMV_AUTO) route = di_simd_fp8_gemv_auto_route(NULL);
    if (route == DI_FP8_GEMV_MAPPED && !w->fp8_subnormal_map) return DI_FP8_GEMV_FP16;
    return route == DI_FP8_GEMV_F32 || route == DI_FP8_GEMV_MAPPED ? route : DI_FP8_GEMV_FP16;
}

int64_t di_simd_scratch_floats(int64_t cols, bool gemm) {
    (void)cols; /* the panel chunk is PANEL_K columns whatever the width; the GEMV needs none */
    return gemm ? (int64_t)PANEL_ROWS * PANEL_K + (int64_t)PANEL_ROWS * TOKEN_BLOCK * 8 : 0;
}

/* ---- one block of one row ------------------------------------------------------------------ */

/* The E4M3 value of one code times the scale, as the vector FP16 widening computes it. */
static __attribute__((noinline)) float fp8_scalar(uint8_t code, uint8_t b) {
    uint16_t bits = (uint16_t)((((uint16_t)(int16_t)(int8_t)code) << 7) & 0xBFFF);
    __fp16 h;
    memcpy(&h, &bits, sizeof h);
    float v = (float)h;
    if (b <= 246) return v * neon_f32_from_bits((uint32_t)(b + 8) << 23);
    return (v * 0x1p8f) * neon_ue8m0_value(b);
}

/* The columns of block kb past the matrix's end decode to 0 (FP4 rows are whole blocks). */
static __attribute__((noinline)) void decode_partial_block(const DiMatrix *w, int64_t r, int64_t kb, float32x4_t out[8]) {
    float tmp[NEON_BLOCK] = {0};
    int64_t c0 = kb * NEON_BLOCK, kblocks = (w->cols + NEON_BLOCK - 1) / NEON_BLOCK;
    for (int64_t c = c0; c < w->cols; c++) {
        switch (w->format) {
        case DI_MAT_F32: tmp[c - c0] = ((const float *)w->data)[r * w->cols + c]; break;
        case DI_MAT_BF16: tmp[c - c0] = di_bf16_to_f32(((const uint16_t *)w->data)[r * w->cols + c]); break;
        case DI_MAT_FP8_BLOCK:
            tmp[c - c0] = fp8_scalar(((const uint8_t *)w->data)[r * w->cols + c], w->scale[(r / NEON_BLOCK) * kblocks + kb]);
            break;
        case DI_MAT_FP4_ROW32: break; /* never partial */
        }
    }
    neon_decode_f32_block(tmp, out);
}

/* Block kb of row r in format fmt (a constant); FP8 on route (a constant: F32, FP16 or MAPPED). */
static inline __attribute__((always_inline)) void decode_block(DiMatFormat fmt, DiFp8GemvRoute route, const DiMatrix *w,
                                                               int64_t r, int64_t kb, float32x4_t out[8]) {
    int64_t c0 = kb * NEON_BLOCK;
    if (c0 + NEON_BLOCK > w->cols) {
        decode_partial_block(w, r, kb, out);
        return;
    }
    switch (fmt) {
    case DI_MAT_F32: neon_decode_f32_block((const float *)w->data + r * w->cols + c0, out); break;
    case DI_MAT_BF16: neon_decode_bf16_block((const uint16_t *)w->data + r * w->cols + c0, out); break;
    case DI_MAT_FP8_BLOCK: {
        int64_t kblocks = (w->cols + NEON_BLOCK - 1) / NEON_BLOCK;
        const uint8_t *p = (const uint8_t *)w->data + r * w->cols + c0;
        uint8_t b = w->scale[(r / NEON_BLOCK) * kblocks + kb];
        bool via_fp16 = route == DI_FP8_GEMV_FP16 ||
                        (route == DI_FP8_GEMV_MAPPED && w->fp8_subnormal_map[(r / 8) * kblocks + kb]);
        if (via_fp16)
            neon_decode_fp8_block(p, b, out, true);
        else
            neon_decode_fp8_block(p, b, out, false);
        break;
    }
    case DI_MAT_FP4_ROW32:
        neon_decode_fp4_block((const uint8_t *)w->data + r * (w->cols / 2) + c0 / 2, w->scale[r * (w->cols / NEON_BLOCK) + kb], out);
        break;
    }
}

/* ---- GEMV: weights decoded in registers, a tile of rows against up to four tokens ---------- */

static inline int gemv_tile_rows(int nt) { return nt <= 2 ? 4 : 2; }

/* Rows r0 .. r0+nr-1 against nt tokens (constants) at x + t * k32; y[t * rows + r]. */
static inline __attribute__((always_inline)) void gemv_tile(DiMatFormat fmt, DiFp8GemvRoute route, const DiMatrix *w,
                                                            const float *x, int64_t k32, int nt, int64_t r0, int nr,
                                                            float *y) {
    float32x4_t acc[TILE_ROWS_MAX][4][2];
    #pragma GCC unroll 4
    for (int i = 0; i < nr; i++)
        #pragma GCC unroll 4
        for (int t = 0; t < nt; t++) acc[i][t][0] = acc[i][t][1] = vdupq_n_f32(0.0f);
    for (int64_t kb = 0; kb < k32 / NEON_BLOCK; kb++) {
        #pragma GCC unroll 4
        for (int i = 0; i < nr; i++) {
            float32x4_t wv[8];
            decode_block(fmt, route, w, r0 + i, kb, wv);
            #pragma GCC unroll 4
            for (int t = 0; t < nt; t++) {
                const float *xb = x + t * k32 + kb * NEON_BLOCK;
                #pragma GCC unroll 4
                for (int g = 0; g < 4; g++) {
                    acc[i][t][0] = vfmaq_f32(acc[i][t][0], wv[2 * g], vld1q_f32(xb + 8 * g));
                    acc[i][t][1] = vfmaq_f32(acc[i][t][1], wv[2 * g + 1], vld1q_f32(xb + 8 * g + 4));
                }
            }
        }
    }
    #pragma GCC unroll 4
    for (int i = 0; i < nr; i++)
        #pragma GCC unroll 4
        for (int t = 0; t < nt; t++) y[t * w->rows + r0 + i] = neon_lane_sum(acc[i][t][0], acc[i][t][1]);
}

/* Rows [r0, r1) against nt tokens (a constant): whole tiles, then single rows. */
static inline __attribute__((always_inline)) void gemv_tiles(DiMatFormat fmt, DiFp8GemvRoute route, const DiMatrix *w,
                                                             const float *x, int64_t k32, int nt, float *yt, int64_t r0,
                                                             int64_t r1) {
    int rows = gemv_tile_rows(nt);
    int64_t r = r0;
    for (; r + rows <= r1; r += rows) gemv_tile(fmt, route, w, x, k32, nt, r, rows, yt);
    for (; r < r1; r++) gemv_tile(fmt, route, w, x, k32, nt, r, 1, yt);
}

/* Every token, four at a time, for one format and route; one instantiation each. */
static inline __attribute__((always_inline)) void gemv_rows_fmt(DiMatFormat fmt, DiFp8GemvRoute route, const DiMatrix *w,
                                                                const DiSimdActs *a, float *y, int64_t r0, int64_t r1) {
    for (int64_t t = 0; t < a->n_tokens;) {
        int64_t left = a->n_tokens - t;
        int nt = left >= 4 ? 4 : (int)left;
        const float *x = a->x + t * a->k32;
        float *yt = y + t * w->rows;
        switch (nt) {
        case 4: gemv_tiles(fmt, route, w, x, a->k32, 4, yt, r0, r1); break;
        case 3: gemv_tiles(fmt, route, w, x, a->k32, 3, yt, r0, r1); break;
        case 2: gemv_tiles(fmt, route, w, x, a->k32, 2, yt, r0, r1); break;
        default: gemv_tiles(fmt, route, w, x, a->k32, 1, yt, r0, r1); break;
        }
        t += nt;
    }
}

#define GEMV_FN(name, fmt, route)                                                                            \
    static __attribute__((noinline)) void name(const DiMatrix *w, const DiSimdActs *a, float *y, int64_t r0, \
                                               int64_t r1) {                                                 \
        gemv_rows_fmt(fmt, route, w, a, y, r0, r1);                                                          \
    }
GEMV_FN(gemv_f32, DI_MAT_F32, DI_FP8_GEMV_FP16)
GEMV_FN(gemv_bf16, DI_MAT_BF16, DI_FP8_GEMV_FP16)
GEMV_FN(gemv_fp8_fp16, DI_MAT_FP8_BLOCK, DI_FP8_GEMV_FP16)
GEMV_FN(gemv_fp8_f32, DI_MAT_FP8_BLOCK, DI_FP8_GEMV_F32)
GEMV_FN(gemv_fp8_mapped, DI_MAT_FP8_BLOCK, DI_FP8_GEMV_MAPPED)
GEMV_FN(gemv_fp4, DI_MAT_FP4_ROW32, DI_FP8_GEMV_FP16)
#undef GEMV_FN

void di_simd_fp8_gemv_rows_tiles(DiFp8GemvRoute route, bool avx512, const DiMatrix *w, const DiSimdActs *a, float *y,
                                 int64_t r0, int64_t r1, float *scratch) {
    (void)avx512, (void)scratch; /* avx512 is false on aarch64 (di_simd_avx512_available); no scratch used */
    switch (effective_route(route, w)) {
    case DI_FP8_GEMV_F32: gemv_fp8_f32(w, a, y, r0, r1); break;
    case DI_FP8_GEMV_MAPPED: gemv_fp8_mapped(w, a, y, r0, r1); break;
    default: gemv_fp8_fp16(w, a, y, r0, r1); break;
    }
}

void di_simd_fp8_gemv_rows_on(DiFp8GemvRoute route, const DiMatrix *w, const DiSimdActs *a, float *y, int64_t r0,
                              int64_t r1, float *scratch) {
    di_simd_fp8_gemv_rows_tiles(route, false, w, a, y, r0, r1, scratch);
}

void di_simd_gemv_rows_tiles(const DiMatrix *w, const DiSimdActs *a, float *y, int64_t r0, int64_t r1, float *scratch,
                             const DiSimdVariant *v) {
    switch (w->format) {
    case DI_MAT_F32: gemv_f32(w, a, y, r0, r1); break;
    case DI_MAT_BF16: gemv_bf16(w, a, y, r0, r1); break;
    case DI_MAT_FP8_BLOCK: di_simd_fp8_gemv_rows_tiles(v->fp8, false, w, a, y, r0, r1, scratch); break;
    case DI_MAT_FP4_ROW32:
        di_neon_fp4_tables_init();
        gemv_fp4(w, a, y, r0, r1);
        break;
    }
}

/* ---- GEMM: a decoded panel against a block of tokens, accumulators kept across chunks ------ */

/* The accumulator (8 floats) of panel row i and token j of the block in `accs`: token-major. */
#define ACC_INDEX(i, j) ((j) * PANEL_ROWS + (i))

/* nr x nt accumulators (constants) over kc columns of the panel (row stride PANEL_K); stored
 * and reloaded unchanged between chunks, so chunking does not alter the per-lane order. */
static inline __attribute__((always_inline)) void gemm_tile(const float *panel, const float *x, int64_t xstride,
                                                            int64_t kc, float *accs, int nr, int nt) {
    float32x4_t acc[TILE_ROWS][TILE_TOKENS][2];
    #pragma GCC unroll 4
    for (int i = 0; i < nr; i++)
        #pragma GCC unroll 4
        for (int j = 0; j < nt; j++) {
            acc[i][j][0] = vld1q_f32(accs + ACC_INDEX(i, j) * GROUP);
            acc[i][j][1] = vld1q_f32(accs + ACC_INDEX(i, j) * GROUP + 4);
        }
    for (int64_t k = 0; k < kc; k += 8) {
        float32x4_t w0[TILE_ROWS], w1[TILE_ROWS];
        #pragma GCC unroll 4
        for (int i = 0; i < nr; i++) {
            w0[i] = vld1q_f32(panel + i * PANEL_K + k);
            w1[i] = vld1q_f32(panel + i * PANEL_K + k + 4);
        }
        #pragma GCC unroll 4
        for (int j = 0; j < nt; j++) {
            float32x4_t x0 = vld1q_f32(x + j * xstride + k), x1 = vld1q_f32(x + j * xstride + k + 4);
            #pragma GCC unroll 4
            for (int i = 0; i < nr; i++) {
                acc[i][j][0] = vfmaq_f32(acc[i][j][0], w0[i], x0);
                acc[i][j][1] = vfmaq_f32(acc[i][j][1], w1[i], x1);
            }
        }
    }
    #pragma GCC unroll 4
    for (int i = 0; i < nr; i++)
        #pragma GCC unroll 4
        for (int j = 0; j < nt; j++) {
            vst1q_f32(accs + ACC_INDEX(i, j) * GROUP, acc[i][j][0]);
            vst1q_f32(accs + ACC_INDEX(i, j) * GROUP + 4, acc[i][j][1]);
        }
}

static void gemm_tile_any(const float *panel, const float *x, int64_t xstride, int64_t kc, float *accs, int nr, int nt) {
#define TILE_CASE(R, T) \
    case (R) * 8 + (T): gemm_tile(panel, x, xstride, kc, accs, R, T); break;
    switch (nr * 8 + nt) {
        TILE_CASE(2, 4) TILE_CASE(2, 3) TILE_CASE(2, 2) TILE_CASE(2, 1)
        TILE_CASE(1, 4) TILE_CASE(1, 3) TILE_CASE(1, 2) TILE_CASE(1, 1)
    default: break;
    }
#undef TILE_CASE
}

/* Rows r0 .. r0+nr-1, columns k0 .. k0+kc-1 decoded into the panel (row stride PANEL_K). */
static inline __attribute__((always_inline)) void decode_panel_fmt(DiMatFormat fmt, const DiMatrix *w, int64_t r0, int nr,
                                                                   int64_t k0, int64_t kc, float *panel) {
    for (int i = 0; i < nr; i++)
        for (int64_t k = 0; k < kc; k += NEON_BLOCK) {
            float32x4_t wv[8];
            decode_block(fmt, DI_FP8_GEMV_FP16, w, r0 + i, (k0 + k) / NEON_BLOCK, wv);
            #pragma GCC unroll 8
            for (int g = 0; g < 8; g++) vst1q_f32(panel + i * PANEL_K + k + 4 * g, wv[g]);
        }
}

/* The fixed lane sum of one stored accumulator: lanes 0-3, then 4-7. */
static inline float acc_lane_sum(const float *acc) { return neon_lane_sum(vld1q_f32(acc), vld1q_f32(acc + 4)); }

#define GEMM_ROWS_PREPARE(w) ((w)->format == DI_MAT_FP4_ROW32 ? di_neon_fp4_tables_init() : (void)0)
#include "kernels/cpu/gemm_panel_body.h"

#endif /* __aarch64__ */
