/* matmul_fp4q_neon.c — the FP4 expert product in block order (di_matmul_qa, kernels/matmul.h)
 * with NEON: the few-token kernels behind the routed experts under the reference numerics, bit
 * for bit di_matmul_ref_qa (and so the x86 block-order kernels, matmul_fp4q_avx2.c).
 *
 * Block order: output (t, r) keeps 8 lanes L = 4h + k (h = 0, 1; k = 0..3).  In every 32-column
 * block kb, lane L sums its columns c = 32kb + 8k + h + 2g (g = 0..3) as p = d0*x0, then
 * p = fma(d_g, x_g, p) (d: twice the E2M1 code value, scale-free), then acc_L = fma(p, s, acc_L)
 * with s = 2^(b-128) for the row's scale byte b; y = ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
 * Here lanes 0-3 (h = 0) are one float32x4 and lanes 4-7 (h = 1) another.  Column 8k + h + 2g is
 * nibble h of byte 4k + g, so one byte shuffle (TBL) puts the bytes of step g at elements
 * 4g .. 4g+3; the low nibbles are then the h = 0 codes, the high ones the h = 1 codes, and two
 * more TBLs read the floats' bytes 2 and 3 from 16-entry tables.  The activations are reordered
 * to the same layout once per call (di_simd_fp4q_prepare), so every load is a plain LD1.
 *
 * The x86 kernels also have an integer path (exact 16-bit images of quantised blocks, the same
 * bits); NEON computes every block on this float path, so di_simd_fp4q_integer_blocks stays 0. */
#if defined(__aarch64__)

#include "kernels/neon/matmul_neon.h"

#include "kernels/numformats.h"

#include <pthread.h>

#define QA_TILE_ROWS_MAX 4

/* Bytes 2 and 3 of float(d(n)) (sign included) for the 16 codes; s = 2^(b-128) per scale byte. */
static uint8_t d_byte2[16] __attribute__((aligned(16))), d_byte3[16] __attribute__((aligned(16)));
static float half_scale[256];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void fill_tables(void) {
    for (int n = 0; n < 16; n++) {
        float d = 2.0f * di_e2m1_to_f32((uint8_t)n);
        uint32_t u;
        memcpy(&u, &d, sizeof u);
        d_byte2[n] = (uint8_t)(u >> 16);
        d_byte3[n] = (uint8_t)(u >> 24);
    }
    for (int b = 0; b < 256; b++) half_scale[b] = di_ue8m0_to_f32((uint8_t)b) * 0.5f; /* exact; NaN for 255 */
}

int64_t di_simd_fp4q_prepared_floats(int64_t n_tokens, int64_t cols) { return n_tokens * ((cols + 31) / 32 * 32); }

int64_t di_simd_fp4q_scratch_floats(int64_t cols) {
    (void)cols; /* the tiles keep everything in registers */
    return 0;
}

long long di_simd_fp4q_integer_blocks(void) { return 0; }

/* prepared[t k32 + 32kb + 16h + 4g + k] = x[t k32 + 32kb + 8k + h + 2g]. */
void di_simd_fp4q_prepare(const DiSimdActs *a, float *prepared) {
    pthread_once(&tables_once, fill_tables);
    for (int64_t t = 0; t < a->n_tokens; t++)
        for (int64_t b0 = 0; b0 < a->k32; b0 += 32) {
            const float *x = a->x + t * a->k32 + b0;
            float *p = prepared + t * a->k32 + b0;
            for (int h = 0; h < 2; h++)
                for (int g = 0; g < 4; g++)
                    for (int k = 0; k < 4; k++) p[16 * h + 4 * g + k] = x[8 * k + h + 2 * g];
        }
}

/* The codes of one block's 16 bytes in step order: d[g] lanes k (h = 0), d[4 + g] (h = 1). */
static inline __attribute__((always_inline)) void decode_d(const uint8_t *p, uint8x16_t byte2, uint8x16_t byte3,
                                                           float32x4_t d[8]) {
    static const uint8_t step_order[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};
    uint8x16_t bytes = vqtbl1q_u8(vld1q_u8(p), vld1q_u8(step_order));
    neon_fp4_lookup16(vandq_u8(bytes, vdupq_n_u8(0x0F)), byte2, byte3, d);
    neon_fp4_lookup16(vshrq_n_u8(bytes, 4), byte2, byte3, d + 4);
}

/* Rows r0 .. r0+nr-1 against nt tokens (constants) of the prepared activations xp + t * k32. */
static inline __attribute__((always_inline)) void qa_tile(const DiMatrix *w, const float *xp, int64_t k32, int nt,
                                                          int64_t r0, int nr, float *y) {
    const uint8x16_t byte2 = vld1q_u8(d_byte2), byte3 = vld1q_u8(d_byte3);
    int64_t kblocks = w->cols / 32;
    float32x4_t acc[QA_TILE_ROWS_MAX][4][2];
    #pragma GCC unroll 4
    for (int i = 0; i < nr; i++)
        #pragma GCC unroll 4
        for (int t = 0; t < nt; t++) acc[i][t][0] = acc[i][t][1] = vdupq_n_f32(0.0f);
    for (int64_t kb = 0; kb < kblocks; kb++) {
        #pragma GCC unroll 4
        for (int i = 0; i < nr; i++) {
            int64_t r = r0 + i;
            float32x4_t d[8];
            decode_d((const uint8_t *)w->data + r * (w->cols / 2) + kb * 16, byte2, byte3, d);
            float32x4_t s = vdupq_n_f32(half_scale[w->scale[r * kblocks + kb]]);
            #pragma GCC unroll 4
            for (int t = 0; t < nt; t++) {
                const float *xb = xp + t * k32 + kb * 32;
                #pragma GCC unroll 2
                for (int h = 0; h < 2; h++) {
                    float32x4_t p = vmulq_f32(d[4 * h], vld1q_f32(xb + 16 * h));
                    p = vfmaq_f32(p, d[4 * h + 1], vld1q_f32(xb + 16 * h + 4));
                    p = vfmaq_f32(p, d[4 * h + 2], vld1q_f32(xb + 16 * h + 8));
                    p = vfmaq_f32(p, d[4 * h + 3], vld1q_f32(xb + 16 * h + 12));
                    acc[i][t][h] = vfmaq_f32(acc[i][t][h], p, s);
                }
            }
        }
    }
    #pragma GCC unroll 4
    for (int i = 0; i < nr; i++)
        #pragma GCC unroll 4
        for (int t = 0; t < nt; t++) y[t * w->rows + r0 + i] = neon_lane_sum(acc[i][t][0], acc[i][t][1]);
}

static inline __attribute__((always_inline)) void qa_tiles(const DiMatrix *w, const float *xp, int64_t k32, int nt,
                                                           float *yt, int64_t r0, int64_t r1) {
    int rows = nt <= 2 ? 4 : 2;
    int64_t r = r0;
    for (; r + rows <= r1; r += rows) qa_tile(w, xp, k32, nt, r, rows, yt);
    for (; r < r1; r++) qa_tile(w, xp, k32, nt, r, 1, yt);
}

void di_simd_fp4q_rows_tiles(const DiMatrix *w, const DiSimdActs *a, const float *prepared, float *y, int64_t r0, int64_t r1,
                             float *scratch, bool avx512) {
    (void)scratch, (void)avx512; /* no scratch used; avx512 is false on aarch64 */
    pthread_once(&tables_once, fill_tables);
    for (int64_t t = 0; t < a->n_tokens;) {
        int64_t left = a->n_tokens - t;
        int nt = left >= 4 ? 4 : (int)left;
        const float *xp = prepared + t * a->k32;
        float *yt = y + t * w->rows;
        switch (nt) {
        case 4: qa_tiles(w, xp, a->k32, 4, yt, r0, r1); break;
        case 3: qa_tiles(w, xp, a->k32, 3, yt, r0, r1); break;
        case 2: qa_tiles(w, xp, a->k32, 2, yt, r0, r1); break;
        default: qa_tiles(w, xp, a->k32, 1, yt, r0, r1); break;
        }
        t += nt;
    }
}

void di_simd_fp4q_rows(const DiMatrix *w, const DiSimdActs *a, const float *prepared, float *y, int64_t r0, int64_t r1,
                       float *scratch) {
    di_simd_fp4q_rows_tiles(w, a, prepared, y, r0, r1, scratch, false);
}

#endif /* __aarch64__ */
