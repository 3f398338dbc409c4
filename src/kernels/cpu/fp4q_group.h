/* fp4q_group.h — what the block-order FP4 kernels (matmul_fp4q_avx2.c and its AVX-512 tile,
 * matmul_fp4q_avx512.c) share: the prepared activations of a token group as the tiles read them,
 * the lane sum that ends every output, and the entry points between the two files.  Include
 * after the file's target pragma. */
#ifndef DI_KERNELS_CPU_FP4Q_GROUP_H
#define DI_KERNELS_CPU_FP4Q_GROUP_H

#include "kernels/matmul.h"

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

#define FP4Q_BLOCK 32 /* FP4 scale block along the input (§3.5) */

/* How a block of one token's activations can be computed (block_integer_image). */
enum { BLOCK_FLOAT = 0, BLOCK_NARROW = 1, BLOCK_WIDE = 2 };

/* Per token: xp, the floats in the float decoder's lane order; and per block its kind, the
 * 16-bit integer image A = x / u of a narrow block, and the two halves of the 18-bit image
 * A' = x / (u/8) = 512 hi + lo of every narrow or wide block. */
typedef struct {
    const float *xp;      /* k32 floats: xp[32kb + 8g + 4h + k] = x[32kb + 8k + h + 2g] */
    const int16_t *a;     /* k32 int16: per block 16 for the vpshufb image "A", 16 for "B" */
    const int16_t *a_hi;  /* k32 int16 each, in the same word order: hi = A' >> 9 */
    const int16_t *a_lo;  /* lo = A' & 511 */
    const uint8_t *kind;  /* per block: BLOCK_FLOAT, BLOCK_NARROW or BLOCK_WIDE */
    const int16_t *f_off; /* per block: log2(u) - 8 - 128 (exponent of s*u/256 is b + f_off) */
} TokenActs;

/* 1 to 4 tokens computed together: each block's codes are decoded once for all of them. */
enum { MAX_GROUP = 4 };
typedef struct {
    int nt;
    TokenActs tk[MAX_GROUP];
    const int32_t *run_end;    /* per block: the first block at or after it where a token's is not narrow */
    const uint8_t *wide;       /* per block: 1 when a token's is wide (and none float) */
    int f_off_min, f_off_max;  /* the offsets the integer blocks may use (an empty range when none) */
    int64_t n_int_blocks;      /* blocks where no token's is float */
    const float *pow2;         /* 2^e at pow2[e - pow2_lowest], for every exponent a factor can have */
    int pow2_lowest;
} TokenGroup;

/* The factor table of block offset f_off: [b] = 2^(b + f_off) for a scale byte b. */
static inline const float *fp4q_factors(const TokenGroup *g, int f_off) { return g->pow2 + (f_off - g->pow2_lowest); }

/* The fixed lane sum ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)). */
static inline float fp4q_lane_sum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}

/* The AVX2 float path of block kb for one token and rows r0 .. r0+7, on eight accumulators in
 * memory (matmul_fp4q_avx2.c): the AVX-512 tile's way out for a block without an integer image. */
void di_simd_fp4q_float_block_1x8(const DiMatrix *w, const TokenGroup *g, int64_t r0, int64_t kb, __m256 *acc);

/* One token against rows r0 .. r0+7 on the integer path (the caller checked that every factor
 * of these rows is a normal float), AVX-512: bit for bit the AVX2 integer tile's y[r0 .. r0+7]
 * (matmul_fp4q_avx512.c).  to_l1 as fp4_prefetch_to_l1. */
void di_simd_fp4q_int_tile1_avx512(const DiMatrix *w, const TokenGroup *g, int64_t r0, float *y, bool to_l1);

#endif
