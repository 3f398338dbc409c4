/* matmul_fp4q_avx2.c — the FP4 expert product in block order (di_matmul_qa, matmul.h) with
 * AVX2+FMA: the few-token kernels behind the routed experts under the reference numerics.
 *
 * Block order (the definition is di_matmul_ref_qa in matmul_ref.c): output (t, r) keeps 8 lanes
 * L = 4h + k (h = 0, 1; k = 0..3).  In every 32-column block kb, lane L first sums its four
 * columns c = 32kb + 8k + h + 2g (g = 0..3) as p = d0*x0, then p = fma(d_g, x_g, p), where d is
 * the doubled E2M1 code value (0, ±1, ±2, ±3, ±4, ±6, ±8, ±12); then acc_L = fma(p, s, acc_L)
 * with s = 2^(b-128) for the row's scale byte b of the block; y = ((l0+l4)+(l2+l6)) +
 * ((l1+l5)+(l3+l7)).  This is the structure of the reference's fp4_gemm (§4.3: a sum of code
 * products per block, then the block's scales).
 *
 * Why the order pays: when a block of x is a power of two u times integers A of at most 15 bits
 * -- always so for most blocks of an input quantised per §4.3, whose E4M3 values are multiples
 * of 2^-6 of the block scale from 1/8 up to 448 -- every partial sum of p is an integer below
 * 2^24 times u, so p is exact whatever the order of its four terms.  One token then runs on
 * integer multiply-adds: the codes index a 16-byte table of 256*d with vpshufb, vpmaddwd
 * multiplies them with the 16-bit A and adds pairs, and the block's p*s goes in with one
 * fma(float(P), s*u/256, acc).  That is the float path's fma(p, s, acc) bit for bit (the same
 * real product, rounded once), so a token's result never depends on which path a block took.
 * Per block 2 shuffles of the codes (against 8 for the float decoder) and one multiply-add
 * instead of four: one token measured 1.18-1.24x the float GEMV of matmul_avx2.c in cache and
 * 1.10-1.14x from DRAM on Zen 4 (kernel_ab, 512x1024 to 4096x4096), 1.07-1.09x ggml's mxfp4
 * (ggml_ab, 4096x4096, activation quantisation included on both sides); two tokens 1.00-1.08x,
 * four 0.88-0.96x.
 *
 * A block holding a value below 1/8 of the E4M3 range has no exact 16-bit image, but it always
 * has an 18-bit one, A' = x / (u/8) (E4M3 values are multiples of 2^-9 of their scale, up to
 * 448): a wide block.  Its two halves hi = A' >> 9 and lo = A' & 511 each go through vpmaddwd
 * with the same looked-up codes and are joined as 512 hi + lo in one fma, exact because a lane's
 * sum stays below 2^24 units (and for the same reason the float path's partial sums round
 * nothing either, so the bits agree).  In a decode step about 15 % of the blocks of the
 * experts' down projection (whose input, the SwiGLU output, has many values near zero) were
 * wide, and went to the float path before: with the wide path one or two tokens of SwiGLU-like
 * input ran 1.03-1.07x (kernel_ab), a ref-mode decode step 1.03-1.08x (decode_ab).  What is
 * neither narrow nor wide (non-finite values, inputs not quantised, extreme scales) takes the
 * float path, block by block or tile by tile.
 *
 * Two to four tokens (routed experts with several tokens) run together, each block's codes
 * looked up once for all of them: on the integer path while at most 1/16 of their blocks need
 * the float one (for three or four tokens a wide block counts as float: MAX_WIDE_GROUP), else
 * on the float path, each block decoded once into floats as in
 * matmul_avx2.c but in block order.  The activations are prepared once per call
 * (di_simd_fp4q_prepare) and read by every task. */
#if defined(__x86_64__) /* x86-64 only; an aarch64 build takes kernels/neon/ instead */
#if !defined(__clang__) /* clang (the fuzz build) compiles this file for -march=native as is */
#pragma GCC target("avx2,fma,f16c,no-avx512f")
#endif

#include "kernels/cpu/matmul_simd.h"
#include "kernels/cpu/fp4_lanes_avx2.h"
#include "kernels/cpu/fp4q_group.h"

#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#define BLOCK FP4Q_BLOCK
#define MAX_INT_A 32767   /* |A| of a narrow block: int16 activations */
#define MAX_WIDE_A 262143 /* |A'| of a wide block: 18 bits, two int16 halves */
#define F_EXP_MIN (-126)  /* the factor s*u/256 of the integer path must be a normal float32 */
#define F_EXP_MAX 127
#define UNIT_EXP_LIMIT 96 /* |log2 u| bound: keeps every partial sum and x itself finite */

/* ---- tables -------------------------------------------------------------------------------- */

/* 2^(b-128) for every scale byte (b = 1 and 0: the subnormals 2^-127 and 2^-128; 255: NaN). */
static float half_scale[256];
/* The integer path's factors 2^(b + f_off) for scale byte b < 255 and a block offset f_off:
 * fp4q_factors(g, f_off)[b].  The table spans every f_off the range check admits (b + f_off in
 * F_EXP_MIN .. F_EXP_MAX for some b in 0..254), so the base pointer itself stays inside it;
 * entries outside the normal range are 0 and never read. */
#define F_OFF_LOWEST (F_EXP_MIN - 254)
static float pow2_factor[F_EXP_MAX - F_OFF_LOWEST + 1];
/* Bytes 2 and 3 of float(d(n)) for the 16 codes: d has at most two significant bits, so the
 * low two bytes of its float32 are zero and these two bytes are the whole value. */
static uint8_t d_byte2[16] __attribute__((aligned(16))), d_byte3[16] __attribute__((aligned(16)));
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

/* Row blocks the integer path has computed (di_simd_fp4q_integer_blocks): one relaxed add per tile. */
static atomic_llong integer_blocks;

long long di_simd_fp4q_integer_blocks(void) { return atomic_load_explicit(&integer_blocks, memory_order_relaxed); }

static float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* d(n), twice the E2M1 value of code n (§3.3): the integer path's vpshufb table, and the source
 * of the float path's byte tables. */
static const int8_t doubled_code[16] __attribute__((aligned(16))) = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static void fill_tables(void) {
    for (int b = 0; b < 256; b++)
        half_scale[b] = b == 255 ? NAN /* UE8M0 0xFF is NaN (numformats.c) */
                                 : f32_from_bits(b >= 2 ? (uint32_t)(b - 1) << 23 : b ? 0x00400000u : 0x00200000u);
    for (int e = F_EXP_MIN; e <= F_EXP_MAX; e++) pow2_factor[e - F_OFF_LOWEST] = f32_from_bits((uint32_t)(e + 127) << 23);
    for (int n = 0; n < 16; n++) {
        float d = (float)doubled_code[n];
        uint32_t u;
        memcpy(&u, &d, sizeof u);
        if (n == 8) u = 0x80000000u; /* -0: as the float decoder of matmul_avx2.c */
        d_byte2[n] = (uint8_t)(u >> 16);
        d_byte3[n] = (uint8_t)(u >> 24);
    }
}

/* ---- the activations of one token, as both paths read them ---------------------------------- */

/* Which blocks of a token get the wide image: none (in a group of more than MAX_WIDE_GROUP),
 * those that are not narrow (a token alone), or all (a pair: a block narrow for one token may
 * be wide for the other, and then runs wide for both). */
enum { WIDE_NONE, WIDE_ONLY, WIDE_ALL };

/* One block of 32 floats into the float path's lane order: register g, lane 4h + k = column
 * 8k + h + 2g.  With v_k = columns 8k .. 8k+7 as four pairs (2g, 2g+1), that is a 4x4
 * transpose of the pairs (unpack, then swap halves) and, per register, [a0 b0 c0 d0 a1 b1 c1 d1]
 * from [a0 a1 b0 b1 c0 c1 d0 d1]. */
static inline void reorder_block(const float *x, __m256 out[4]) {
    const __m256i spread = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    __m256d v0 = _mm256_castps_pd(_mm256_loadu_ps(x)), v1 = _mm256_castps_pd(_mm256_loadu_ps(x + 8));
    __m256d v2 = _mm256_castps_pd(_mm256_loadu_ps(x + 16)), v3 = _mm256_castps_pd(_mm256_loadu_ps(x + 24));
    __m256d t0 = _mm256_unpacklo_pd(v0, v1), t1 = _mm256_unpackhi_pd(v0, v1); /* pairs (0,0)(1,0)(0,2)(1,2) ... */
    __m256d t2 = _mm256_unpacklo_pd(v2, v3), t3 = _mm256_unpackhi_pd(v2, v3);
    __m256d g0 = _mm256_permute2f128_pd(t0, t2, 0x20), g1 = _mm256_permute2f128_pd(t1, t3, 0x20);
    __m256d g2 = _mm256_permute2f128_pd(t0, t2, 0x31), g3 = _mm256_permute2f128_pd(t1, t3, 0x31);
    out[0] = _mm256_permutevar8x32_ps(_mm256_castpd_ps(g0), spread);
    out[1] = _mm256_permutevar8x32_ps(_mm256_castpd_ps(g1), spread);
    out[2] = _mm256_permutevar8x32_ps(_mm256_castpd_ps(g2), spread);
    out[3] = _mm256_permutevar8x32_ps(_mm256_castpd_ps(g3), spread);
}

/* The integer images of one reordered block, and its kind.  The largest |x| fixes the unit
 * u = 2^(e - 14) (e its binary exponent), the smallest power of two for which every |x| / u
 * stays below 2^15, so any unit that works is a multiple of it.  The block is narrow when every
 * x / u is an integer, wide when every x / (u/8) is one (below 2^18 then), else float (NaN and
 * infinity are neither; a subnormal quotient is no integer either).  Quantised per §4.3, a
 * block is E4M3 codes times one power of two, multiples of 2^-9 of it up to 448: wide always,
 * narrow unless it holds a value below 1/8 of the E4M3 range.  Every narrow block is wide too
 * (A' = 8A); want_wide says whether its wide image is written, and whether a block that is not
 * narrow is tried as wide at all.
 * Words as int_block_sum's vpmaddwd reads them: image "A" half 0 word j = column 4j+2, half 1 =
 * 4j+3, i.e. registers 1 and 3 of the reorder interleaved; "B" the same of registers 0 and 2. */
static inline void store_image(const __m256i q[4], int16_t *a) {
    /* packs: lane half 0 words = q1[0..3], q3[0..3] (columns 2,10,18,26, 6,14,22,30); the byte
     * shuffle interleaves them to 2,6,10,...,30 (half 1 likewise with the odd columns) */
    const __m256i inter = _mm256_setr_epi8(0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15,
                                           0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15);
    _mm256_store_si256((__m256i *)a, _mm256_shuffle_epi8(_mm256_packs_epi32(q[1], q[3]), inter));
    _mm256_store_si256((__m256i *)(a + 16), _mm256_shuffle_epi8(_mm256_packs_epi32(q[0], q[2]), inter));
}

static inline int block_integer_image(const __m256 xr[4], int want_wide, int16_t *a, int16_t *a_hi, int16_t *a_lo,
                                      int *unit_out) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(xr[0], abs_mask), _mm256_and_ps(xr[1], abs_mask)),
                             _mm256_max_ps(_mm256_and_ps(xr[2], abs_mask), _mm256_and_ps(xr[3], abs_mask)));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1)); /* NaN lanes may drop out here: the check below sees them */
    uint32_t bits;
    float mx = _mm_cvtss_f32(h);
    memcpy(&bits, &mx, sizeof bits);
    int e = (int)((bits >> 23) & 0xFF) - 127; /* the exponent of a normal max (all zero: see below) */
    int unit = mx == 0.0f ? 0 : e - 14;
    *unit_out = unit;
    if (bits >= 0x7F800000u || (mx != 0.0f && bits < 0x00800000u) || unit < -UNIT_EXP_LIMIT || unit > UNIT_EXP_LIMIT)
        return BLOCK_FLOAT;
    const __m256 inv_u = _mm256_set1_ps(f32_from_bits((uint32_t)(127 - unit) << 23)), lim = _mm256_set1_ps(MAX_INT_A);
    __m256 v[4];
    __m256i q[4], hi[4], lo[4];
    int narrow = 0xFF;
    for (int g = 0; g < 4; g++) {
        v[g] = _mm256_mul_ps(xr[g], inv_u); /* exact where the quotient is an integer */
        __m256 r = _mm256_round_ps(v[g], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256 good = _mm256_and_ps(_mm256_cmp_ps(v[g], r, _CMP_EQ_OQ), _mm256_cmp_ps(_mm256_and_ps(v[g], abs_mask), lim, _CMP_LE_OQ));
        narrow &= _mm256_movemask_ps(good);
        q[g] = _mm256_cvtps_epi32(v[g]);
    }
    if (narrow == 0xFF) {
        store_image(q, a);
        if (want_wide != WIDE_ALL) return BLOCK_NARROW;
        for (int g = 0; g < 4; g++) { /* A' = 8A: hi = A >> 6, lo = 8 (A & 63) */
            hi[g] = _mm256_srai_epi32(q[g], 6);
            lo[g] = _mm256_slli_epi32(_mm256_and_si256(q[g], _mm256_set1_epi32(63)), 3);
        }
    } else {
        if (want_wide == WIDE_NONE) return BLOCK_FLOAT;
        const __m256 eight = _mm256_set1_ps(8.0f), lim8 = _mm256_set1_ps(MAX_WIDE_A);
        int wide = 0xFF;
        for (int g = 0; g < 4; g++) {
            __m256 v8 = _mm256_mul_ps(v[g], eight); /* exact: a power of two */
            __m256 r8 = _mm256_round_ps(v8, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            wide &= _mm256_movemask_ps(
                _mm256_and_ps(_mm256_cmp_ps(v8, r8, _CMP_EQ_OQ), _mm256_cmp_ps(_mm256_and_ps(v8, abs_mask), lim8, _CMP_LE_OQ)));
            __m256i qw = _mm256_cvtps_epi32(v8);
            hi[g] = _mm256_srai_epi32(qw, 9); /* |A'| < 2^18: hi in -512 .. 511 */
            lo[g] = _mm256_and_si256(qw, _mm256_set1_epi32(511));
        }
        if (wide != 0xFF) return BLOCK_FLOAT;
    }
    store_image(hi, a_hi);
    store_image(lo, a_lo);
    return narrow == 0xFF ? BLOCK_NARROW : BLOCK_WIDE;
}

/* Tokens are computed in groups (fp4q_rows_to): fours, then a three, a pair or one.  The size
 * of token t's group among n. */
static int group_size_of(int64_t n, int64_t t) {
    int64_t left = n - t / 4 * 4;
    return left >= 4 ? 4 : (int)left;
}

/* Wide blocks run on the integer path for groups of at most this many tokens (the others get
 * no wide image).  Per row and token a wide block costs two more vpmaddwd, an add, a
 * conversion and an fma than a narrow one; from three tokens on, the float path's block decoded
 * once for all of them was faster (kernel_ab, Zen 4, SwiGLU-like inputs: four tokens 0.82x on
 * the integer path). */
#define MAX_WIDE_GROUP 2

/* The prepared activations of a call (di_simd_fp4q_prepare), token after token: the reordered
 * floats, the integer image, the per-block offsets and flags, and the range of the offsets of
 * the integer blocks.  Prepared once per call, read by every task (a task's own preparation had
 * cost ~10 % of a 96-row task). */
static int64_t prepared_stride(int64_t k32) {
    int64_t kblocks = k32 / BLOCK;
    int64_t n = k32 + 3 * (k32 / 2) + (kblocks + 1) / 2 + (kblocks + 3) / 4 + 2;
    return (n + 7) / 8 * 8; /* 32-byte aligned tokens */
}

/* Where token t's parts lie in the prepared buffer. */
typedef struct {
    float *xp;
    int16_t *img, *img_hi, *img_lo, *f_off;
    uint8_t *kind;
    int32_t *range; /* [0] lowest, [1] highest factor offset the integer blocks may use */
} PreparedToken;

static PreparedToken prepared_token(const float *prepared, int64_t k32, int64_t t) {
    int64_t kblocks = k32 / BLOCK;
    float *base = (float *)prepared + t * prepared_stride(k32);
    PreparedToken pt;
    pt.xp = base;
    pt.img = (int16_t *)(base + k32);
    pt.img_hi = pt.img + k32;
    pt.img_lo = pt.img_hi + k32;
    pt.f_off = (int16_t *)(base + k32 + 3 * (k32 / 2));
    pt.kind = (uint8_t *)(base + k32 + 3 * (k32 / 2) + (kblocks + 1) / 2);
    pt.range = (int32_t *)(base + k32 + 3 * (k32 / 2) + (kblocks + 1) / 2 + (kblocks + 3) / 4);
    return pt;
}

int64_t di_simd_fp4q_prepared_floats(int64_t n_tokens, int64_t cols) {
    return n_tokens * prepared_stride((cols + BLOCK - 1) / BLOCK * BLOCK);
}

void di_simd_fp4q_prepare(const DiSimdActs *a, float *prepared) {
    const int64_t k32 = a->k32, kblocks = k32 / BLOCK;
    for (int64_t t = 0; t < a->n_tokens; t++) {
        PreparedToken pt = prepared_token(prepared, k32, t);
        int size = group_size_of(a->n_tokens, t), want_wide = size == 1 ? WIDE_ONLY : size <= MAX_WIDE_GROUP ? WIDE_ALL : WIDE_NONE;
        float *xp = pt.xp;
        int16_t *f_off = pt.f_off;
        uint8_t *kind = pt.kind;
        const float *x = a->x + t * k32;
        int lo = 1 << 20, hi = -(1 << 20);
        for (int64_t kb = 0; kb < kblocks; kb++) {
            __m256 xr[4];
            reorder_block(x + kb * BLOCK, xr);
            for (int g = 0; g < 4; g++) _mm256_store_ps(xp + kb * BLOCK + 8 * g, xr[g]);
            int unit = 0;
            kind[kb] = (uint8_t)block_integer_image(xr, want_wide, pt.img + kb * BLOCK, pt.img_hi + kb * BLOCK,
                                                    pt.img_lo + kb * BLOCK, &unit);
            f_off[kb] = (int16_t)(unit - 8 - 128);
            if (kind[kb] != BLOCK_FLOAT) { /* wide blocks use f_off - 3 (the unit u/8) */
                lo = f_off[kb] - 3 < lo ? f_off[kb] - 3 : lo;
                hi = f_off[kb] > hi ? f_off[kb] : hi;
            }
        }
        pt.range[0] = lo;
        pt.range[1] = hi;
    }
}

int64_t di_simd_fp4q_scratch_floats(int64_t cols) {
    int64_t kblocks = (cols + BLOCK - 1) / BLOCK;
    return (kblocks + (kblocks + 3) / 4 + 7) / 8 * 8; /* a group's run ends (int32) and wide flags */
}

/* Tokens t0 .. t0+nt-1 into a group; its run ends and wide flags go to scratch. */
static void group_of(const float *prepared, int64_t k32, int64_t t0, int nt, float *scratch, TokenGroup *g) {
    int64_t kblocks = k32 / BLOCK;
    g->nt = nt;
    g->pow2 = pow2_factor;
    g->pow2_lowest = F_OFF_LOWEST;
    g->f_off_min = 1 << 20;
    g->f_off_max = -(1 << 20);
    for (int j = 0; j < nt; j++) {
        PreparedToken pt = prepared_token(prepared, k32, t0 + j);
        g->tk[j] = (TokenActs){pt.xp, pt.img, pt.img_hi, pt.img_lo, pt.kind, pt.f_off};
        g->f_off_min = pt.range[0] < g->f_off_min ? pt.range[0] : g->f_off_min;
        g->f_off_max = pt.range[1] > g->f_off_max ? pt.range[1] : g->f_off_max;
    }
    int32_t *run_end = (int32_t *)scratch;
    uint8_t *wide = (uint8_t *)(run_end + kblocks);
    g->run_end = run_end;
    g->wide = wide;
    g->n_int_blocks = 0;
    for (int64_t kb = kblocks - 1, next = kblocks; kb >= 0; kb--) {
        bool all = true, any_wide = false;
        for (int j = 0; j < nt; j++) {
            all = all && g->tk[j].kind[kb] != BLOCK_FLOAT;
            any_wide = any_wide || g->tk[j].kind[kb] == BLOCK_WIDE;
        }
        /* (prepare gave no token of a larger group than MAX_WIDE_GROUP a wide block) */
        if (!all || any_wide) next = kb;
        g->n_int_blocks += all;
        run_end[kb] = (int32_t)next;
        wide[kb] = all && any_wide;
    }
}

/* ---- decoders -------------------------------------------------------------------------------- */

/* Float path: the 32 codes of one block as d(n) in four registers, register g lane 4h + k =
 * column 8k + h + 2g.  The bytes are first transposed 4x4 (byte position 4g + k takes byte
 * 4k + g, whose nibbles are columns 8k + 2g and 8k + 2g + 1), then decoded in lanes
 * (fp4_lanes_avx2.h) as matmul_avx2.c's GEMV decodes them. */
static inline __attribute__((always_inline)) void decode_block_order(const uint8_t *p, __m256i b2, __m256i b3,
                                                                     __m256 out[4]) {
    const __m256i transpose = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
                                               0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    fp4_lanes_decode(_mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p)), transpose), b2,
                     b3, out);
}

/* The block sum p of one token: the four registers against the token's 32 reordered floats. */
static inline __attribute__((always_inline)) __m256 block_sum(const __m256 wv[4], const float *xpb) {
    __m256 p = _mm256_mul_ps(wv[0], _mm256_load_ps(xpb));
    p = _mm256_fmadd_ps(wv[1], _mm256_load_ps(xpb + 8), p);
    p = _mm256_fmadd_ps(wv[2], _mm256_load_ps(xpb + 16), p);
    return _mm256_fmadd_ps(wv[3], _mm256_load_ps(xpb + 24), p);
}

/* Integer path, the codes of one row's block: the 16 bytes as 8 words, word j = columns
 * 4j..4j+3 (nibbles n0..n3).  Image "A" takes n2 (half 0) or n3 (half 1) into the high byte of
 * each word, "B" n0 or n1; the low bytes are 0, which vpshufb maps to d(0) = 0, so the words are
 * 256 * d. */
static inline __attribute__((always_inline)) void int_codes(const uint8_t *p, __m256i table, __m256i nib_hi, __m256i *ha,
                                                            __m256i *hb) {
    __m256i x = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p));
    __m256i ia = _mm256_and_si256(_mm256_blend_epi32(x, _mm256_srli_epi16(x, 4), 0xF0), nib_hi);
    __m256i ib = _mm256_and_si256(_mm256_blend_epi32(_mm256_slli_epi16(x, 8), _mm256_slli_epi16(x, 4), 0xF0), nib_hi);
    *ha = _mm256_shuffle_epi8(table, ia);
    *hb = _mm256_shuffle_epi8(table, ib);
}

/* 256 * (the block sum in units of u) of one token, in int32 lanes: vpmaddwd against its image
 * adds the word pairs (columns 8k+2, 8k+6 from "A" and 8k, 8k+4 from "B" in half 0; +1 in
 * half 1), so lane 4h + k holds columns 8k + h + {0, 2, 4, 6}, the lane the block order gives
 * them. */
static inline __attribute__((always_inline)) __m256i int_block_sum(__m256i ha, __m256i hb, const int16_t *ab) {
    return _mm256_add_epi32(_mm256_madd_epi16(ha, _mm256_load_si256((const __m256i *)ab)),
                            _mm256_madd_epi16(hb, _mm256_load_si256((const __m256i *)(ab + 16))));
}

/* ---- tiles ------------------------------------------------------------------------------------ */

/* The smallest and largest scale byte of rows r0 .. r0+nr-1. */
static void scale_range(const DiMatrix *w, int64_t r0, int64_t nr, int *lo, int *hi) {
    int64_t kblocks = w->cols / BLOCK, n = nr * kblocks;
    const uint8_t *s = w->scale + r0 * kblocks;
    __m256i mn = _mm256_set1_epi8((char)0xFF), mx = _mm256_setzero_si256();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(s + i));
        mn = _mm256_min_epu8(mn, v);
        mx = _mm256_max_epu8(mx, v);
    }
    /* fold 32 bytes to one: halves, then 8-, 4-, 2- and 1-byte shifts */
    __m128i a = _mm_min_epu8(_mm256_castsi256_si128(mn), _mm256_extracti128_si256(mn, 1));
    __m128i b = _mm_max_epu8(_mm256_castsi256_si128(mx), _mm256_extracti128_si256(mx, 1));
    a = _mm_min_epu8(a, _mm_srli_si128(a, 8)), b = _mm_max_epu8(b, _mm_srli_si128(b, 8));
    a = _mm_min_epu8(a, _mm_srli_si128(a, 4)), b = _mm_max_epu8(b, _mm_srli_si128(b, 4));
    a = _mm_min_epu8(a, _mm_srli_si128(a, 2)), b = _mm_max_epu8(b, _mm_srli_si128(b, 2));
    a = _mm_min_epu8(a, _mm_srli_si128(a, 1)), b = _mm_max_epu8(b, _mm_srli_si128(b, 1));
    int l = _mm_cvtsi128_si32(a) & 0xFF, h = _mm_cvtsi128_si32(b) & 0xFF;
    for (; i < n; i++) {
        l = s[i] < l ? s[i] : l;
        h = s[i] > h ? s[i] : h;
    }
    *lo = l;
    *hi = h;
}

/* The float path of one block for rows r0 .. r0+nr-1 and the group's tokens, on accumulators in
 * memory (acc[i * nt + t]). */
static inline __attribute__((always_inline)) void float_block_body(const DiMatrix *w, const TokenGroup *g, int nt,
                                                                   int64_t r0, int nr, int64_t kb, __m256 *acc) {
    const int64_t kblocks = w->cols / BLOCK, row_bytes = w->cols / 2;
    const __m256i b2 = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i *)d_byte2));
    const __m256i b3 = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i *)d_byte3));
    #pragma GCC unroll 16
    for (int i = 0; i < nr; i++) {
        __m256 wv[4];
        decode_block_order((const uint8_t *)w->data + (r0 + i) * row_bytes + kb * (BLOCK / 2), b2, b3, wv);
        __m256 s = _mm256_broadcast_ss(&half_scale[w->scale[(r0 + i) * kblocks + kb]]);
        #pragma GCC unroll 16
        for (int t = 0; t < nt; t++)
            acc[i * nt + t] = _mm256_fmadd_ps(block_sum(wv, g->tk[t].xp + kb * BLOCK), s, acc[i * nt + t]);
    }
}

/* Out of line, so that the integer loop around it keeps its accumulators in registers; one copy
 * per tile shape of group_rows (the unrolled loops ran ~4x slower per block as one generic
 * function: 3.8 % of a ref-mode decode for the 6 % of blocks that take it), and a generic one for
 * the single-row remainder tiles. */
#define FLOAT_BLOCK_FN(NT, NR)                                                                               \
    static __attribute__((noinline)) void float_block_##NT##x##NR(const DiMatrix *w, const TokenGroup *g,    \
                                                                  int64_t r0, int64_t kb, __m256 *acc) {     \
        float_block_body(w, g, NT, r0, NR, kb, acc);                                                         \
    }
FLOAT_BLOCK_FN(1, 8)
FLOAT_BLOCK_FN(2, 4)
FLOAT_BLOCK_FN(3, 2)
FLOAT_BLOCK_FN(4, 2)
void di_simd_fp4q_float_block_1x8(const DiMatrix *w, const TokenGroup *g, int64_t r0, int64_t kb, __m256 *acc) {
    float_block_1x8(w, g, r0, kb, acc);
}

static __attribute__((noinline)) void float_block_any(const DiMatrix *w, const TokenGroup *g, int64_t r0, int nr,
                                                      int64_t kb, __m256 *acc) {
    for (int i = 0; i < nr; i++) float_block_body(w, g, g->nt, r0 + i, 1, kb, acc + i * g->nt);
}

static inline __attribute__((always_inline)) void float_block_rows(const DiMatrix *w, const TokenGroup *g, int nt,
                                                                   int64_t r0, int nr, int64_t kb, __m256 *acc) {
    if (nt == 1 && nr == 8) float_block_1x8(w, g, r0, kb, acc);
    else if (nt == 2 && nr == 4) float_block_2x4(w, g, r0, kb, acc);
    else if (nt == 3 && nr == 2) float_block_3x2(w, g, r0, kb, acc);
    else if (nt == 4 && nr == 2) float_block_4x2(w, g, r0, kb, acc);
    else float_block_any(w, g, r0, nr, kb, acc);
}

/* Rows of the tiles for nt tokens: 8 accumulators (the integer tile of one token keeps 8 rows). */
#define INT_TILE_ROWS(nt) ((nt) == 1 ? 8 : (nt) == 2 ? 4 : 2)
#define FLOAT_TILE_ROWS(nt) ((nt) <= 2 ? 4 : 2)
#define MAX_TILE_ROWS 8

/* One block of the integer path for rows row[0 .. nr-1] (wide a constant at every call).
 * Narrow: per token vpmaddwd against its 16-bit image, then fma(P, s*u/256, acc).  Wide: the
 * two halves of A' through the same looked-up codes, joined as 512 hi + lo in one fma -- exact,
 * since the block sum is below 2^24 units u/8 (4 terms of |d| <= 12 and |A'| < 2^18 per lane),
 * so the join rounds nothing -- then applied with the factor of the unit u/8. */
static inline __attribute__((always_inline)) void int_block_rows(const TokenGroup *g, int nt, bool wide,
                                                                 const uint8_t *const *row, const uint8_t *const *srow,
                                                                 int nr, int64_t kb, int64_t ahead, bool to_l1,
                                                                 __m256i table, __m256i nib_hi,
                                                                 __m256 acc[][MAX_GROUP]) {
    const __m256 join = _mm256_set1_ps(512.0f);
    const int16_t *hi[MAX_GROUP], *lo[MAX_GROUP];
    const float *factor[MAX_GROUP]; /* [b]: a normal float (the caller checked) */
    #pragma GCC unroll 16
    for (int t = 0; t < nt; t++) {
        hi[t] = (wide ? g->tk[t].a_hi : g->tk[t].a) + kb * BLOCK;
        lo[t] = g->tk[t].a_lo + kb * BLOCK;
        factor[t] = fp4q_factors(g, g->tk[t].f_off[kb] - (wide ? 3 : 0));
    }
    #pragma GCC unroll 16
    for (int i = 0; i < nr; i++) {
        const uint8_t *p = row[i] + kb * (BLOCK / 2);
        prefetch_fp4(p + ahead, to_l1);
        __m256i ha, hb;
        int_codes(p, table, nib_hi, &ha, &hb);
        #pragma GCC unroll 16
        for (int t = 0; t < nt; t++) {
            __m256 sum = _mm256_cvtepi32_ps(int_block_sum(ha, hb, hi[t]));
            if (wide) sum = _mm256_fmadd_ps(sum, join, _mm256_cvtepi32_ps(int_block_sum(ha, hb, lo[t])));
            acc[i][t] = _mm256_fmadd_ps(sum, _mm256_broadcast_ss(&factor[t][srow[i][kb]]), acc[i][t]);
        }
    }
}

/* The group's tokens, rows r0 .. r0+nr-1, when every factor 2^(b + f_off) of these rows is a
 * normal float32: the integer path on blocks where no token's is float (narrow or wide), the
 * float path (out of line) on the others.  nt and nr are constants. */
static inline __attribute__((always_inline)) void int_tile(const DiMatrix *w, const TokenGroup *g, int nt, int64_t r0,
                                                           int nr, float *const *y, bool to_l1) {
    const int64_t kblocks = w->cols / BLOCK, row_bytes = w->cols / 2;
    const __m256i table = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i *)doubled_code));
    const __m256i nib_hi = _mm256_set1_epi16(0x0F00);
    const int tile_rows = INT_TILE_ROWS(nt);
    int64_t ahead = r0 + nr + tile_rows <= w->rows ? tile_rows * row_bytes : 0;
    const uint8_t *row[MAX_TILE_ROWS], *srow[MAX_TILE_ROWS]; /* pointers, as the float GEMV keeps them */
    __m256 acc[MAX_TILE_ROWS][MAX_GROUP];
    #pragma GCC unroll 16
    for (int i = 0; i < nr; i++) {
        #pragma GCC unroll 16
        for (int t = 0; t < nt; t++) acc[i][t] = _mm256_setzero_ps();
        row[i] = (const uint8_t *)w->data + (r0 + i) * row_bytes;
        srow[i] = w->scale + (r0 + i) * kblocks;
    }
    for (int64_t kb = 0; kb < kblocks;) {
        /* a run of narrow blocks, then a wide one, or (rarely) a float one out of line */
        for (int64_t end = g->run_end[kb]; kb < end; kb++)
            int_block_rows(g, nt, false, row, srow, nr, kb, ahead, to_l1, table, nib_hi, acc);
        if (nt <= MAX_WIDE_GROUP && kb < kblocks && g->wide[kb]) { /* nt a constant: no code for larger groups */
            int_block_rows(g, nt, true, row, srow, nr, kb, ahead, to_l1, table, nib_hi, acc);
            kb++;
        } else if (kb < kblocks) {
            __m256 spill[MAX_TILE_ROWS * MAX_GROUP];
            #pragma GCC unroll 16
            for (int i = 0; i < nr; i++)
                #pragma GCC unroll 16
                for (int t = 0; t < nt; t++) spill[i * nt + t] = acc[i][t];
            float_block_rows(w, g, nt, r0, nr, kb, spill);
            #pragma GCC unroll 16
            for (int i = 0; i < nr; i++)
                #pragma GCC unroll 16
                for (int t = 0; t < nt; t++) acc[i][t] = spill[i * nt + t];
            kb++;
        }
    }
    #pragma GCC unroll 16
    for (int i = 0; i < nr; i++)
        #pragma GCC unroll 16
        for (int t = 0; t < nt; t++) y[t][r0 + i] = fp4q_lane_sum(acc[i][t]);
    atomic_fetch_add_explicit(&integer_blocks, (long long)nr * nt * g->n_int_blocks, memory_order_relaxed);
}

/* The float path alone, rows r0 .. r0+nr-1: each block decoded once for the group's tokens. */
static inline __attribute__((always_inline)) void float_tile(const DiMatrix *w, const TokenGroup *g, int nt, int64_t r0,
                                                             int nr, float *const *y, bool to_l1) {
    const int64_t kblocks = w->cols / BLOCK, row_bytes = w->cols / 2;
    const uint8_t *data = (const uint8_t *)w->data + r0 * row_bytes, *scale = w->scale + r0 * kblocks;
    const __m256i b2 = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i *)d_byte2));
    const __m256i b3 = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i *)d_byte3));
    int64_t ahead = r0 + 2 * nr <= w->rows ? nr * row_bytes : 0;
    __m256 acc[MAX_TILE_ROWS][MAX_GROUP];
    #pragma GCC unroll 16
    for (int i = 0; i < nr; i++)
        #pragma GCC unroll 16
        for (int t = 0; t < nt; t++) acc[i][t] = _mm256_setzero_ps();
    for (int64_t kb = 0; kb < kblocks; kb++) {
        #pragma GCC unroll 16
        for (int i = 0; i < nr; i++) {
            const uint8_t *p = data + i * row_bytes + kb * (BLOCK / 2);
            prefetch_fp4(p + ahead, to_l1);
            __m256 wv[4];
            decode_block_order(p, b2, b3, wv);
            __m256 s = _mm256_broadcast_ss(&half_scale[scale[i * kblocks + kb]]);
            #pragma GCC unroll 16
            for (int t = 0; t < nt; t++) acc[i][t] = _mm256_fmadd_ps(block_sum(wv, g->tk[t].xp + kb * BLOCK), s, acc[i][t]);
        }
    }
    #pragma GCC unroll 16
    for (int i = 0; i < nr; i++)
        #pragma GCC unroll 16
        for (int t = 0; t < nt; t++) y[t][r0 + i] = fp4q_lane_sum(acc[i][t]);
}

/* True when the integer path's factors 2^(b + f_off) are normal floats for rows r0 .. r0+nr-1. */
static bool integer_path_fits(const DiMatrix *w, const TokenGroup *g, int64_t r0, int64_t nr) {
    if (g->n_int_blocks == 0) return false;
    int lo, hi;
    scale_range(w, r0, nr, &lo, &hi);
    return hi < 255 && lo + g->f_off_min >= F_EXP_MIN && hi + g->f_off_max <= F_EXP_MAX;
}

/* The group against rows [r0, r1), nt a constant.  The factor check reads each tile's scales
 * just before the tile does, so they are in L1 when it runs (one check of the whole range first
 * would read a 4096-column matrix's 512 KB of scales twice; measured level either way, ggml_ab
 * mxfp4-ref 4096x4096 n = 1: 0.98x). */
static inline __attribute__((always_inline)) void group_rows(const DiMatrix *w, const TokenGroup *g, int nt,
                                                             float *const *y, int64_t r0, int64_t r1, bool to_l1,
                                                             bool avx512) {
    const int ti = INT_TILE_ROWS(nt), tf = FLOAT_TILE_ROWS(nt); /* ti is a multiple of tf */
    int64_t kblocks = w->cols / BLOCK, n_float = kblocks - g->n_int_blocks;
    /* Which path is a matter of speed only (the bits are the same).  A float block inside the
     * integer loop costs a call and the accumulators' round trip, ~3-4x an integer block, and in
     * a group it is float when one token's block is: several tokens take the integer tile only
     * when at most 1/16 of the blocks are float, one token when at most 1/4 are (kernel_ab,
     * Zen 4: float tiles 0.84-0.93x of the matmul_avx2.c GEMV for 2-4 tokens, integer ones 0.88-1.0x
     * without float blocks). */
    if (n_float * (nt == 1 ? 4 : 16) > kblocks) {
        int64_t r = r0;
        for (; r + tf <= r1; r += tf) float_tile(w, g, nt, r, tf, y, to_l1);
        for (; r < r1; r++) float_tile(w, g, nt, r, 1, y, to_l1);
        return;
    }
    int64_t r = r0;
    for (; r + ti <= r1; r += ti) {
        if (!integer_path_fits(w, g, r, ti)) {
            for (int64_t q = r; q < r + ti; q += tf) float_tile(w, g, nt, q, tf, y, to_l1);
        } else if (nt == 1 && avx512) { /* the same bits, two rows a register */
            di_simd_fp4q_int_tile1_avx512(w, g, r, y[0], to_l1);
            atomic_fetch_add_explicit(&integer_blocks, (long long)ti * g->n_int_blocks, memory_order_relaxed);
        } else {
            int_tile(w, g, nt, r, ti, y, to_l1);
        }
    }
    for (; r < r1; r++) {
        if (integer_path_fits(w, g, r, 1))
            int_tile(w, g, nt, r, 1, y, to_l1);
        else
            float_tile(w, g, nt, r, 1, y, to_l1);
    }
}

/* ---- rows of one task ------------------------------------------------------------------------- */

static inline __attribute__((always_inline)) void fp4q_rows_to(const DiMatrix *w, const DiSimdActs *a,
                                                               const float *prepared, float *y, int64_t r0, int64_t r1,
                                                               float *scratch, bool to_l1, bool avx512) {
    const int64_t k32 = a->k32;
    for (int64_t t = 0; t < a->n_tokens;) {
        int nt = group_size_of(a->n_tokens, t); /* fours, then a three, a pair or one */
        TokenGroup g;
        group_of(prepared, k32, t, nt, scratch, &g);
        float *yt[MAX_GROUP];
        for (int j = 0; j < nt; j++) yt[j] = y + (t + j) * w->rows;
        switch (nt) {
        case 1: group_rows(w, &g, 1, yt, r0, r1, to_l1, avx512); break;
        case 2: group_rows(w, &g, 2, yt, r0, r1, to_l1, avx512); break;
        case 3: group_rows(w, &g, 3, yt, r0, r1, to_l1, avx512); break;
        default: group_rows(w, &g, 4, yt, r0, r1, to_l1, avx512); break;
        }
        t += nt;
    }
}

void di_simd_fp4q_rows(const DiMatrix *w, const DiSimdActs *a, const float *prepared, float *y, int64_t r0, int64_t r1,
                       float *scratch) {
    di_simd_fp4q_rows_tiles(w, a, prepared, y, r0, r1, scratch, di_simd_use_avx512());
}

void di_simd_fp4q_rows_tiles(const DiMatrix *w, const DiSimdActs *a, const float *prepared, float *y, int64_t r0, int64_t r1,
                             float *scratch, bool avx512) {
    pthread_once(&tables_once, fill_tables);
    if (fp4_prefetch_to_l1(w))
        fp4q_rows_to(w, a, prepared, y, r0, r1, scratch, true, avx512);
    else
        fp4q_rows_to(w, a, prepared, y, r0, r1, scratch, false, avx512);
}

#endif /* __x86_64__ */
