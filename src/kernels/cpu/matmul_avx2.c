/* matmul_avx2.c — the AVX2+FMA kernels behind di_matmul: weight decoders for the four storage
 * formats, a register-decoding GEMV and a panel-decoding GEMM that give bit-identical outputs.
 *
 * Why two kernels: at n = 1 every weight is used once, so decoding into registers right before
 * its multiply-add is all there is to do and the kernel is bound by decode and memory.  At larger
 * n the decode is amortised: a chunk of rows is decoded once into a float32 panel and a 3x4
 * (rows x tokens) register tile of accumulators streams it against the tokens.  Both follow the
 * order fixed in matmul_simd.h (8 lanes along the input, ascending groups, fixed lane sum), so a
 * row's result is the same whichever kernel, tile, batch or thread computes it.
 *
 * Decoding is exact and equals the reference's `code value * scale` in float32:
 *   E4M3 (§3.3): the byte, sign-extended to 16 bits, shifted and masked, is the FP16 pattern of
 *       e4m3 * 2^-8 (the 4-bit exponent and 3-bit mantissa fit FP16's, subnormals included);
 *       vcvtph2ps widens it exactly and one multiply by 2^(b-119) = 2^8 * 2^(b-127) gives
 *       code * scale with a single rounding (scale byte b <= 246; above, two multiplies).
 *       The float32 trick (bits << 20, masked) turns E4M3 subnormals into float32 subnormals:
 *       ~100 cycles per multiply on Intel cores, full speed on Zen 3; the FP8 GEMV tiles use it
 *       except where a per-process probe and a per-matrix map send them through FP16
 *       (e4m3_block_gemv_widen, di_simd_fp8_gemv_route).
 *   E2M1 (§3.3, §3.5): twice the code's value {0,1,2,3,4,6,8,12, -0..-12} times 2^(b-128),
 *       exact; the panel decoder looks the magnitude up with vpermps, the GEMV's decoder reads
 *       the same floats' two high bytes from a per-scale table with byte shuffles.
 *   BF16: the upper half of a float32.
 * NaN codes (E4M3 0x7F/0xFF) and the NaN scale byte 0xFF do not occur in checkpoints; the SIMD
 * decoders give finite values for them where the reference gives NaN.
 *
 * Instruction set: AVX2 + FMA + F16C only (the deployment target, Zen 3, has no AVX-512); the target
 * pragma below also keeps gcc from using AVX-512 registers when built with -march=native on a
 * newer machine, so what is measured is what the target runs.  matmul.c checks cpuid first. */
#if !defined(__clang__) /* clang (the fuzz build) compiles this file for -march=native as is */
#pragma GCC target("avx2,fma,f16c,no-avx512f")
#endif

#include "kernels/cpu/matmul_simd.h"
#include "kernels/cpu/fp4_lanes_avx2.h"

#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#define GROUP 8        /* floats per ymm register: the lane count of the reduction order */
#define BLOCK 32       /* scale block along the input (§3.4, §3.5) */

/* Tuning knobs (none changes a result bit; -D overrides them for experiments).  Values measured
 * on the build machine with bench_kernels and CPU-clock timings, see bench/ggml_comparison.md. */
#ifndef PREFETCH
#define PREFETCH 1     /* GEMV software prefetch one row tile ahead (prefetch_block, rows_prefetched) */
#endif
#ifndef PF_HINT
#define PF_HINT _MM_HINT_T1 /* into L2, not L1: see prefetch_block */
#endif
#ifndef PF_SKIP_4K_ROWS
#define PF_SKIP_4K_ROWS 0 /* 1: leave rows a multiple of 4 KiB apart to the hardware (the T0 rule) */
#endif
#ifndef GEMV_ROWS
#define GEMV_ROWS 8    /* rows whose accumulators the GEMV keeps in registers: 8 independent FMA chains */
#endif
#define PAIR_ROWS 4    /* rows of the two-token GEMV tiles: 4 x 2 accumulators */
#define QUAD_ROWS 2    /* rows of the four-token GEMV tiles: 2 x 4 accumulators */
#define TILE_ROWS 3    /* GEMM register tile: 3 rows x 4 tokens = 12 accumulators, + 3 weight */
#define TILE_TOKENS 4  /*   registers + 1 activation register = the 16 ymm registers of AVX2 */
#ifndef PANEL_ROWS
#define PANEL_ROWS 48  /* rows decoded into one GEMM panel (a multiple of TILE_ROWS) */
#endif
#ifndef PANEL_K
#define PANEL_K 256    /* input columns per panel chunk: 48 x 256 floats = 48 KiB, near L1/L2 */
#endif
#ifndef TOKEN_BLOCK
#define TOKEN_BLOCK 128 /* tokens whose accumulators persist across the chunks of one panel */
#endif

bool di_simd_available(void) {
    __builtin_cpu_init();
#if defined(__clang__) /* clang 14 does not know "f16c" here: read CPUID.1:ECX bit 29 */
    unsigned eax, ebx, ecx, edx;
    bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && ((ecx >> 29) & 1);
#else
    bool f16c = __builtin_cpu_supports("f16c");
#endif
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
}

int64_t di_simd_scratch_floats(int64_t cols, bool gemm) {
    /* GEMM: the panel chunk, then the accumulators of one token block (8 lanes each);
     * GEMV: FP8's scaled activations of four tokens, two widenings each, or FP4's permuted ones of
     * four tokens (k32 floats each) */
    if (gemm) return (int64_t)PANEL_ROWS * PANEL_K + (int64_t)PANEL_ROWS * TOKEN_BLOCK * GROUP;
    return 8 * ((cols + BLOCK - 1) / BLOCK * BLOCK);
}

/* ---- scale factors (as float32 bit patterns, so no libm call in the inner loops) ---------- */

static inline float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* E4M3 via FP16: 2^(b-119) = 2^8 * 2^(b-127) for b <= 246 (biased exponent b + 8, a normal
 * float32); above that two multiplies (2^8, then the scale) keep every step finite. */
static inline bool fp8_single_factor(uint8_t b, float *f) {
    if (b > 246) return false;
    *f = f32_from_bits((uint32_t)(b + 8) << 23);
    return true;
}

/* The UE8M0 scale 2^(b-127) itself (§3.3); b = 0 is the subnormal 2^-127. */
static inline float ue8m0_value(uint8_t b) {
    return b ? f32_from_bits((uint32_t)b << 23) : f32_from_bits(0x00400000u);
}

/* E2M1: the doubled code value times 2^(b-128); b = 1 and b = 0 give the subnormals 2^-127 and
 * 2^-128 (biased exponent b - 1 would be 0 or negative). */
#define FP4_HALF_SCALE_BITS(b) ((b) >= 2 ? (uint32_t)((b) - 1) << 23 : (b) ? 0x00400000u : 0x00200000u)

/* The same 256 factors as a table the decoder broadcasts straight from memory: building the
 * factor in a general register and moving it to a vector (vmovd + vbroadcastss) put two more
 * uops per block on the shuffle port, which limited the FP4 decoder before it used vpermps
 * (FP4 GEMV n = 1 and 2 ~5% faster with the table on the Intel machine measured). */
#define FP4_S4(b) {FP4_HALF_SCALE_BITS(b)}, {FP4_HALF_SCALE_BITS((b) + 1)}, {FP4_HALF_SCALE_BITS((b) + 2)}, \
                  {FP4_HALF_SCALE_BITS((b) + 3)}
#define FP4_S16(b) FP4_S4(b), FP4_S4((b) + 4), FP4_S4((b) + 8), FP4_S4((b) + 12)
#define FP4_S64(b) FP4_S16(b), FP4_S16((b) + 16), FP4_S16((b) + 32), FP4_S16((b) + 48)
static const union {
    uint32_t bits;
    float value;
} fp4_half_scales[256] = {FP4_S64(0), FP4_S64(64), FP4_S64(128), FP4_S64(192)};

/* The GEMV's FP4 decoder (decode_fp4_block_lanes) looks weights up byte-wise: for scale byte b and
 * code n, bytes 2 and 3 of the float32 that decode_fp4_block produces (the doubled E2M1 value of
 * n times the factor above, negated for n >= 8).  Those floats have at most two significant bits,
 * so their low two bytes are zero for every b (subnormals and inf included), and the two bytes
 * are the whole weight.  Row b: 16 bytes "2", then 16 bytes "3"; filled once from the same
 * multiplies, so the table holds exactly decode_fp4_block's weights. */
/* Twice the E2M1 magnitudes of codes 0..7 (§3.3): the one table both FP4 decoders start from. */
static const float fp4_doubled[8] __attribute__((aligned(32))) = {0, 1, 2, 3, 4, 6, 8, 12};

static uint8_t fp4_weight_bytes[256][32] __attribute__((aligned(32)));
static pthread_once_t fp4_weight_bytes_once = PTHREAD_ONCE_INIT;

static void fill_fp4_weight_bytes(void) {
    for (int b = 0; b < 256; b++)
        for (int n = 0; n < 16; n++) {
            float v = fp4_doubled[n & 7] * fp4_half_scales[b].value;
            uint32_t u;
            memcpy(&u, &v, sizeof u);
            u |= (uint32_t)(n >> 3) << 31;
            fp4_weight_bytes[b][n] = (uint8_t)(u >> 16);
            fp4_weight_bytes[b][16 + n] = (uint8_t)(u >> 24);
        }
}

/* ---- decoders: one 32-column block of one row into four ymm registers --------------------- */

/* 16 E4M3 codes -> the FP16 bit patterns of code * 2^-8: sign-extended to 16 bits, shifted
 * left by 7 (sign to bit 15, exponent to bits 13..10, mantissa to 9..7) and bit 14 (a copy of
 * the sign) cleared.  E4M3 subnormals land on FP16 subnormals, which vcvtph2ps converts exactly
 * and at full speed (float32 subnormal operands would stall the multiplier). */
static inline __m256i e4m3_to_fp16_bits(const uint8_t *p) {
    __m256i h = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p));
    return _mm256_and_si256(_mm256_slli_epi16(h, 7), _mm256_set1_epi16((short)0xBFFF));
}

/* 32 E4M3 codes -> four ymm of code * 2^-8 in column order.  Two ways to widen the FP16
 * patterns, the same values in the same order:
 *   registers (default): vextracti128 for the upper halves, vcvtph2ps from registers.  On Zen 3
 *       the multi-token GEMV tiles run 4-11 % faster this way (FP8 1024x1024, n = 4 and 12, 25
 *       alternating pairs in one process; n = 1 and the panel GEMM level);
 *   FP8_STAGED_WIDEN=1: staged in memory (64 bytes, 32-byte aligned) and widened from there.  On
 *       the Intel cores of an earlier session this cut the shuffle-port uops of a block from 8
 *       to 2 (vpmovsxbw only), and the FP8 GEMV went from 8 to ~5 cycles per block.
 * (An earlier Zen 3 session tried float32 patterns straight from the byte, (code << 20) masked,
 * times 2^112 per decoded register: 0.70-0.76x of this in the GEMV.  Without that multiply --
 * the 2^120 moved onto the prescaled activations -- the same patterns are what the GEMV tiles now
 * use; see e4m3_block_gemv_widen.) */
#ifndef FP8_STAGED_WIDEN
#define FP8_STAGED_WIDEN 0
#endif
#if FP8_STAGED_WIDEN
/* vcvtph2ps with a memory operand.  The register form needs the FP16 half in an xmm register,
 * i.e. a vextracti128 for the upper half, and is itself a p0+p5 pair on Intel cores; the memory
 * form is one p0 uop plus a load.  Written as asm so the compiler cannot turn the store and
 * reload of `stage` back into the register shuffles. */
static inline __m256 cvtph_from_memory(const uint16_t *p) {
    __m256 r;
    __asm__("vcvtph2ps %1, %0" : "=x"(r) : "m"(*(const uint16_t(*)[GROUP])p));
    return r;
}
#endif
static inline void e4m3_block_widen(const uint8_t *p, uint16_t *stage, __m256 out[4]) {
#if !FP8_STAGED_WIDEN
    (void)stage;
    __m256i h0 = e4m3_to_fp16_bits(p), h1 = e4m3_to_fp16_bits(p + 16);
    __m128i u0, u1; /* asm: gcc would otherwise turn the extract back into a store and reload */
    __asm__("vextracti128 $1, %1, %0" : "=x"(u0) : "x"(h0));
    __asm__("vextracti128 $1, %1, %0" : "=x"(u1) : "x"(h1));
    out[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(h0));
    out[1] = _mm256_cvtph_ps(u0);
    out[2] = _mm256_cvtph_ps(_mm256_castsi256_si128(h1));
    out[3] = _mm256_cvtph_ps(u1);
#else
    _mm256_store_si256((__m256i *)stage, e4m3_to_fp16_bits(p));
    _mm256_store_si256((__m256i *)(stage + 16), e4m3_to_fp16_bits(p + 16));
    #pragma GCC unroll 16
    for (int g = 0; g < 4; g++) out[g] = cvtph_from_memory(stage + GROUP * g);
#endif
}

/* The prescaled GEMV tiles (below) widen E4M3 codes one of two ways, the same products either way:
 *   float32 route: the byte sign-extended to 32 bits, shifted left by 20 and masked (sign to bit
 *       31, exponent to bits 26..23, mantissa to 22..20) is the float32 pattern of code * 2^-120,
 *       subnormal codes landing on float32 subnormals.  Three cheap uops per eight weights
 *       against the FP16 route's shuffle, shift, mask and two-uop vcvtph2ps: in L1, 16.9 against
 *       12.2 G weights/s on Zen 3 (a standalone loop of 8 rows x 4096), the same with 25 %
 *       subnormal codes -- Zen 3 multiplies float32 subnormal operands at full speed;
 *   FP16 route (e4m3_block_widen): code * 2^-8, subnormal codes landing on normal float32.
 * Intel cores take a microcode assist of ~100 cycles for every float32 subnormal operand.  On the
 * Intel Xeon (AVX-512, AMX) of the 2026-12-05 session, FP8 GEMV 4096x4096, one token, one thread
 * (kernel_ab, KERNEL_AB_FP8_SUBNORMALS), float32 route against FP16 route in GFLOP/s:
 *   random codes (7 of 127 magnitudes subnormal)           1.4 against 30.2
 *   1e-3 of the codes subnormal                            24.3 against 30.8
 *   1e-4 (block-scaled Gaussian weights: the medium bench   37.9 against 30.7
 *         checkpoint holds 1.2e-4)
 *   none                                                   40.6 against 30.6
 * Real weights hold few subnormal codes, in few blocks (the medium bench checkpoint: 0.37 % of
 * its 32-byte blocks), so where a probe finds subnormal operands slow the route is "mapped": each
 * FP8 matrix carries a map of the 8-row x 32-column blocks that hold a subnormal code
 * (fp8_subnormal_map, made once by di_matrix_prepare), and a tile widens those blocks through FP16
 * and the rest as float32 patterns, one branch per 8 x 32 block.  Where the probe finds them at
 * full speed the route is float32 throughout.  DEEPINFER_FP8_GEMV=f32|fp16|mapped overrides the
 * probe (di_simd_fp8_gemv_route).  The 2^-code_exp goes onto the activations with the block
 * scale, so the prescale range check depends on the widening, and the mapped route keeps both
 * widenings' scaled activations. */
#define FP8_CODE_EXP_F32 (-120) /* the widened weights are code * 2^code_exp */
#define FP8_CODE_EXP_FP16 (-8)

static inline int fp8_code_exp(bool via_fp16) { return via_fp16 ? FP8_CODE_EXP_FP16 : FP8_CODE_EXP_F32; }

/* The exponent of the factor 2^(b-127) / 2^code_exp that the prescaled activations carry. */
static inline int fp8_gemv_factor_exp(uint8_t b, bool via_fp16) { return (int)b - 127 - fp8_code_exp(via_fp16); }

/* via_fp16 is a constant in every caller (the branches of fp8_tile_step's callers). */
static inline __attribute__((always_inline)) void e4m3_block_gemv_widen(const uint8_t *p, uint16_t *stage,
                                                                        __m256 out[4], bool via_fp16) {
    if (via_fp16) {
        e4m3_block_widen(p, stage, out);
        return;
    }
    const __m256i keep = _mm256_set1_epi32((int)0x87F00000u);
    #pragma GCC unroll 16
    for (int g = 0; g < 4; g++) {
        __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p + GROUP * g)));
        out[g] = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(v, 20), keep));
    }
}

/* The bytes of w's fp8_subnormal_map for the row group holding row r (matmul.h). */
#define FP8_MAP_ROWS 8
_Static_assert(FP8_MAP_ROWS % GEMV_ROWS == 0 && FP8_MAP_ROWS % PAIR_ROWS == 0 && FP8_MAP_ROWS % QUAD_ROWS == 0 &&
                   BLOCK % FP8_MAP_ROWS == 0,
               "an FP8 GEMV tile must lie inside one row group of the subnormal map");
static inline const uint8_t *fp8_map_row(const DiMatrix *w, int64_t r) {
    return w->fp8_subnormal_map + (r / FP8_MAP_ROWS) * ((w->cols + BLOCK - 1) / BLOCK);
}

/* The first block at or after kb that the map marks (full when none): eight bytes at a time. */
static inline int64_t fp8_next_marked(const uint8_t *map, int64_t kb, int64_t full) {
    for (; kb + 8 <= full; kb += 8) {
        uint64_t word;
        memcpy(&word, map + kb, 8);
        if (word) return kb + __builtin_ctzll(word) / 8;
    }
    while (kb < full && !map[kb]) kb++;
    return kb;
}

/* ---- which FP8 GEMV route this process takes -------------------------------------------------
 * The probe times a dependent chain of multiply-adds whose operand is a float32 subnormal
 * (x * 2^120, the float32 route's product) against the same chain on a normal operand, best of
 * five each.  Full-speed hardware gives a ratio near 1, an assist ~25x and more (4-cycle FMA
 * latency against ~100+ cycles), so the threshold of 4 is far from both and the probe's noise. */
enum { PROBE_CHAIN = 256, PROBE_TRIES = 5 };

static double probe_seconds(float operand) {
    volatile float sink_in = operand;
    __m256 a = _mm256_set1_ps(sink_in), f = _mm256_set1_ps(0x1p120f), acc = _mm256_setzero_ps();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < PROBE_CHAIN; i++) acc = _mm256_fmadd_ps(a, f, acc);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    volatile float sink_out = _mm256_cvtss_f32(acc);
    (void)sink_out;
    return (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
}

double di_simd_subnormal_slowdown(void) {
    double normal = 1e9, subnormal = 1e9;
    for (int i = 0; i < PROBE_TRIES; i++) {
        double n = probe_seconds(0x1p-100f), s = probe_seconds(0x1p-140f); /* 2^-140: a subnormal */
        normal = n < normal ? n : normal;
        subnormal = s < subnormal ? s : subnormal;
    }
    return subnormal / (normal > 0 ? normal : 1e-9);
}

static DiFp8GemvRoute fp8_route = DI_FP8_GEMV_AUTO;
static double fp8_route_slowdown;
static pthread_once_t fp8_route_once = PTHREAD_ONCE_INIT;

static void choose_fp8_route(void) {
    DiFp8GemvRoute want = DI_FP8_GEMV_AUTO;
    if (di_fp8_gemv_route_from_env(&want) != 0) want = DI_FP8_GEMV_AUTO; /* matmul.c reports the error */
    fp8_route_slowdown = di_simd_subnormal_slowdown();
    fp8_route = want != DI_FP8_GEMV_AUTO ? want : fp8_route_slowdown < 4 ? DI_FP8_GEMV_F32 : DI_FP8_GEMV_MAPPED;
}

DiFp8GemvRoute di_simd_fp8_gemv_route(double *subnormal_slowdown) {
    pthread_once(&fp8_route_once, choose_fp8_route);
    if (subnormal_slowdown) *subnormal_slowdown = fp8_route_slowdown;
    return fp8_route;
}

static inline void decode_fp8_block(const uint8_t *p, uint8_t b, __m256 out[4]) {
    uint16_t stage[BLOCK] __attribute__((aligned(32)));
    e4m3_block_widen(p, stage, out);
    float f;
    if (fp8_single_factor(b, &f)) {
        __m256 fv = _mm256_set1_ps(f);
        #pragma GCC unroll 16
        for (int i = 0; i < 4; i++) out[i] = _mm256_mul_ps(out[i], fv);
    } else {
        __m256 f1 = _mm256_set1_ps(0x1p8f), f2 = _mm256_set1_ps(ue8m0_value(b));
        #pragma GCC unroll 16
        for (int i = 0; i < 4; i++) out[i] = _mm256_mul_ps(_mm256_mul_ps(out[i], f1), f2);
    }
}

/* 16 bytes = 32 nibbles, low nibble first (§3.3 packed FP4).  Eight columns at a time: their
 * four bytes broadcast to every lane (a load, no shuffle), each lane shifts its own nibble down
 * (vpsrlvd), vpermps picks the magnitude from an eight-entry table of the doubled E2M1 values
 * times the block's factor, and the nibble's top bit, shifted to bit 31 (vpsllvd), gives the
 * sign.  One shuffle-port uop per eight columns instead of two and a half (byte shuffles and
 * sign extensions before): FP4 GEMV 4096x4096 n = 1 ~18.1 against ~15.9 GFLOP/s, one thread,
 * medians of 7 interleaved runs.  The weights are the same floats as before (magnitude times
 * factor, then the sign), so every sum is bit-identical; a negative zero weight (code 8) cannot
 * change a sum that starts at +0. */
static inline void decode_fp4_block(const uint8_t *p, uint8_t b, __m256 out[4]) {
    const __m256i down = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    const __m256i up = _mm256_setr_epi32(28, 24, 20, 16, 12, 8, 4, 0);
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    __m256 table = _mm256_mul_ps(_mm256_load_ps(fp4_doubled), _mm256_broadcast_ss(&fp4_half_scales[b].value));
    #pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        int32_t word;
        memcpy(&word, p + 4 * g, sizeof word);
        __m256i d = _mm256_set1_epi32(word);
        __m256 v = _mm256_permutevar8x32_ps(table, _mm256_srlv_epi32(d, down));
        out[g] = _mm256_xor_ps(v, _mm256_and_ps(_mm256_castsi256_ps(_mm256_sllv_epi32(d, up)), sign));
    }
}

/* The GEMV's FP4 decoder: the same 32 weights as decode_fp4_block, from in-lane shuffles only.
 * Lane-crossing shuffles (vpermps, vpermq, vextracti128) cost ~1.3 cycles each on Zen 3 against
 * 0.5 for in-lane ones, and decode_fp4_block's four vpermps and eight variable shifts per block
 * bound the GEMV there: FP4 GEMV 4096x4096 n = 1 ~16 GFLOP/s before, ~27 after (one thread,
 * warm, bench harness).  The 16 bytes go to both lanes; lane 0 keeps the low nibbles (even
 * columns), lane 1 the high ones (odd columns); two byte shuffles read bytes 2 and 3 of each
 * weight's float from fp4_weight_bytes; unpacking with zero bytes assembles the floats.
 * Register g then holds columns 8g .. 8g+7 in the lane order FP4_LANE_ORDER instead of 0 .. 7,
 * so the activations are permuted the same way (fp4_permute_acts) and lane_sum_fp4 adds the
 * lanes in matmul_simd.h's fixed order: every lane carries exactly the terms, in exactly the
 * order, it carries in the panel GEMM, and the sums are bit-identical. */
#define FP4_LANE_ORDER 0, 2, 4, 6, 1, 3, 5, 7

static inline void decode_fp4_block_lanes(const uint8_t *p, uint8_t b, __m256 out[4]) {
    __m256i byte2 = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i *)fp4_weight_bytes[b]));
    __m256i byte3 = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i *)(fp4_weight_bytes[b] + 16)));
    fp4_lanes_decode(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p)), byte2, byte3, out);
}

static inline void decode_bf16_block(const uint16_t *p, __m256 out[4]) {
    #pragma GCC unroll 16
    for (int i = 0; i < 4; i++) {
        __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p + GROUP * i)));
        out[i] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    }
}

static inline void decode_f32_block(const float *p, __m256 out[4]) {
    #pragma GCC unroll 16
    for (int i = 0; i < 4; i++) out[i] = _mm256_loadu_ps(p + GROUP * i);
}

/* Scalar twins of the decoders (same bit tricks, same roundings) for the last, partial block. */
static float fp8_scalar(uint8_t code, uint8_t b) {
    uint16_t bits = (uint16_t)((((uint16_t)(int16_t)(int8_t)code) << 7) & 0xBFFF);
    float v = _cvtsh_ss(bits), f;
    if (fp8_single_factor(b, &f)) return v * f;
    return (v * 0x1p8f) * ue8m0_value(b);
}

static float weight_scalar(const DiMatrix *w, int64_t r, int64_t c) {
    switch (w->format) {
    case DI_MAT_F32: return ((const float *)w->data)[r * w->cols + c];
    case DI_MAT_BF16: return f32_from_bits((uint32_t)((const uint16_t *)w->data)[r * w->cols + c] << 16);
    case DI_MAT_FP8_BLOCK: {
        int64_t kblocks = (w->cols + BLOCK - 1) / BLOCK;
        return fp8_scalar(((const uint8_t *)w->data)[r * w->cols + c], w->scale[(r / BLOCK) * kblocks + c / BLOCK]);
    }
    case DI_MAT_FP4_ROW32: break; /* FP4 columns are a multiple of 32: never partial */
    }
    return 0.0f;
}

/* Decode block kb (columns 32kb .. 32kb+31) of row r; columns past the end decode to 0. */
static inline __attribute__((always_inline)) void decode_block(DiMatFormat format, const DiMatrix *w, int64_t r,
                                                               int64_t kb, __m256 out[4]) {
    int64_t c0 = kb * BLOCK;
    if (c0 + BLOCK > w->cols) {
        float tmp[BLOCK] __attribute__((aligned(32))) = {0};
        for (int64_t c = c0; c < w->cols; c++) tmp[c - c0] = weight_scalar(w, r, c);
        decode_f32_block(tmp, out);
        return;
    }
    switch (format) {
    case DI_MAT_F32: decode_f32_block((const float *)w->data + r * w->cols + c0, out); break;
    case DI_MAT_BF16: decode_bf16_block((const uint16_t *)w->data + r * w->cols + c0, out); break;
    case DI_MAT_FP8_BLOCK: {
        int64_t kblocks = (w->cols + BLOCK - 1) / BLOCK;
        decode_fp8_block((const uint8_t *)w->data + r * w->cols + c0, w->scale[(r / BLOCK) * kblocks + kb], out);
        break;
    }
    case DI_MAT_FP4_ROW32:
        decode_fp4_block((const uint8_t *)w->data + r * (w->cols / 2) + c0 / 2, w->scale[r * (w->cols / BLOCK) + kb], out);
        break;
    default: /* unreachable: di_matrix_validate rejected other formats */
        for (int i = 0; i < 4; i++) out[i] = _mm256_setzero_ps();
        break;
    }
}

/* The fixed lane sum of matmul_simd.h: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)). */
static inline float lane_sum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}

/* lane_sum for accumulators in FP4_LANE_ORDER: lane j holds what lane FP4_LANE_ORDER[j] holds in
 * natural order, so the same sum is ((l0+l2)+(l1+l3)) + ((l4+l6)+(l5+l7)). */
static inline float lane_sum_fp4(__m256 v) {
    __m256 u = _mm256_add_ps(v, _mm256_permute_ps(v, 0x4E)); /* per lane: l0+l2, l1+l3 */
    u = _mm256_add_ps(u, _mm256_permute_ps(u, 0xB1));
    return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1)));
}

/* Software prefetch of the same block one row tile ahead.  A weight row of the release shapes
 * is 1-4 KiB, so every row starts a new 4 KiB page, where the hardware stream prefetchers of
 * the Intel cores of an earlier session stopped: without this their GEMV of a matrix larger
 * than L3 was latency-bound at a third of the DRAM bandwidth.
 * The hint is T1 (to L2).  With T0 (to L1), on Zen 3 (kernel_ab, FP8 and FP4 matrices of 64 MB,
 * n = 1) the prefetch paid for rows of 1, 2 and 3 KiB (without it: 0.75, 0.75 and 0.82x for FP8,
 * 0.83x for FP4 2 KiB rows) and cost for rows of 4 and 8 KiB (without it: 1.29 and 1.38x for
 * FP8, 1.34x for FP4 4 KiB rows): rows a multiple of 4 KiB apart put the same column of every
 * row, and of the row a tile ahead, in one L1 set (8 ways), so the prefetched lines evicted the
 * tile's own, and those matrices were left to the hardware.  On Zen 4 (kernel_ab, medians of 25
 * pairs, T1 for every row size against T0 with 4 KiB rows skipped): FP8 65536x1024 1.53x,
 * 32768x2048 1.20x, 16384x4096 1.17x; FP4 32768x4096 1.08x, 16384x8192 1.02-1.03x, 4096x4096
 * 1.05x; matrices in L2 0.99-1.00x; T2 measures as T1, and two or four tiles ahead as one.
 * PF_HINT=_MM_HINT_T0 PF_SKIP_4K_ROWS=1 restores the earlier rule. */
static inline bool rows_prefetched(const DiMatrix *w) {
    return PREFETCH && !(PF_SKIP_4K_ROWS && di_matrix_data_bytes(w) / w->rows % 4096 == 0);
}

/* How many rows below a block the GEMV tiles of rows r0 .. r0+nr-1 prefetch: GEMV_ROWS (one
 * one-token tile ahead), or 0 where that row does not exist or prefetching is off, so the tiles
 * prefetch the block they are about to read (no effect).  The tiles issue the prefetch without a
 * branch: a branch on it inside the unrolled loops cost the multi-token tiles on matrices in L2
 * 0.70-0.92x (kernel_ab, Zen 4), the branch-free form 0.99-1.01x. */
static inline int64_t prefetch_rows_ahead_by(const DiMatrix *w, int64_t r0, int nr, int ahead) {
    return rows_prefetched(w) && r0 + nr - 1 + ahead < w->rows ? ahead : 0;
}

static inline int64_t prefetch_rows_ahead(const DiMatrix *w, int64_t r0, int nr) {
    return prefetch_rows_ahead_by(w, r0, nr, GEMV_ROWS);
}

static inline __attribute__((always_inline)) void prefetch_block(DiMatFormat format, const DiMatrix *w, int64_t r,
                                                                 int64_t kb) {
    const char *p = w->data;
    switch (format) {
    case DI_MAT_F32: p += (r * w->cols + kb * BLOCK) * 4; _mm_prefetch(p + 64, PF_HINT); break;
    case DI_MAT_BF16: p += (r * w->cols + kb * BLOCK) * 2; break;
    case DI_MAT_FP8_BLOCK: p += r * w->cols + kb * BLOCK; break;
    case DI_MAT_FP4_ROW32: p += r * (w->cols / 2) + kb * (BLOCK / 2); break;
    }
    _mm_prefetch(p, PF_HINT);
}

/* ---- GEMV: weights decoded in registers, GEMV_ROWS rows per pass over the activations ------ */

static inline __attribute__((always_inline)) void gemv_tile(DiMatFormat format, const DiMatrix *w, const float *x,
                                                            int64_t k32, int64_t r0, int nr, float *y) {
    __m256 acc[GEMV_ROWS];
    int64_t ahead_rows = prefetch_rows_ahead(w, r0, nr);
    #pragma GCC unroll 16
    for (int i = 0; i < GEMV_ROWS; i++) acc[i] = _mm256_setzero_ps();
    for (int64_t kb = 0; kb < k32 / BLOCK; kb++) {
        const float *xb = x + kb * BLOCK;
        #pragma GCC unroll 16
        for (int i = 0; i < nr; i++) {
            prefetch_block(format, w, r0 + i + ahead_rows, kb);
            __m256 wv[4];
            decode_block(format, w, r0 + i, kb, wv);
            #pragma GCC unroll 16
            for (int g = 0; g < 4; g++) acc[i] = _mm256_fmadd_ps(wv[g], _mm256_loadu_ps(xb + GROUP * g), acc[i]);
        }
    }
    #pragma GCC unroll 16
    for (int i = 0; i < nr; i++) y[r0 + i] = lane_sum(acc[i]);
}

/* acc[t] += the four decoded registers times token t's activations at x + t * k32, for t < nt:
 * one block of one row in the multi-token GEMV tiles.  A macro, not an inline function: passed
 * as an array argument the accumulators went through memory (kernel_ab: 0.85-0.89x). */
#define ACCUMULATE_TOKENS(acc, wv, x, k32, nt)                                                             \
    _Pragma("GCC unroll 16") for (int t_ = 0; t_ < (nt); t_++)                                           \
        _Pragma("GCC unroll 16") for (int g_ = 0; g_ < 4; g_++)                                          \
            (acc)[t_] = _mm256_fmadd_ps((wv)[g_], _mm256_loadu_ps((x) + t_ * (k32) + GROUP * g_), (acc)[t_])

/* nt tokens (2, 3 or 4, a constant) against rows r0 .. r0+nr-1 (nr <= QUAD_ROWS): each block is
 * read and decoded once for all of them (F32 and BF16 below their GEMM switch; a token at a time
 * re-read the matrix per token).  Every (row, token) accumulator sees gemv_tile's sequence. */
static inline __attribute__((always_inline)) void gemv_group_tile(DiMatFormat format, const DiMatrix *w, const float *x,
                                                                  int64_t k32, int nt, int64_t r0, int nr, float *y) {
    __m256 acc[QUAD_ROWS][4];
    #pragma GCC unroll 16
    for (int i = 0; i < QUAD_ROWS; i++)
        #pragma GCC unroll 16
        for (int t = 0; t < nt; t++) acc[i][t] = _mm256_setzero_ps();
    int64_t ahead_rows = prefetch_rows_ahead(w, r0, nr);
    for (int64_t kb = 0; kb < k32 / BLOCK; kb++) {
        #pragma GCC unroll 16
        for (int i = 0; i < nr; i++) {
            prefetch_block(format, w, r0 + i + ahead_rows, kb);
            __m256 wv[4];
            decode_block(format, w, r0 + i, kb, wv);
            ACCUMULATE_TOKENS(acc[i], wv, x + kb * BLOCK, k32, nt);
        }
    }
    #pragma GCC unroll 16
    for (int i = 0; i < nr; i++)
        #pragma GCC unroll 16
        for (int t = 0; t < nt; t++) y[t * w->rows + r0 + i] = lane_sum(acc[i][t]);
}

static inline __attribute__((always_inline)) void gemv_group(DiMatFormat format, const DiMatrix *w, const DiSimdActs *a,
                                                             int64_t t, int nt, float *y, int64_t r0, int64_t r1) {
    const float *x = a->x + t * a->k32;
    float *yt = y + t * w->rows;
    int64_t r = r0;
    for (; r + QUAD_ROWS <= r1; r += QUAD_ROWS) gemv_group_tile(format, w, x, a->k32, nt, r, QUAD_ROWS, yt);
    for (; r < r1; r++) gemv_group_tile(format, w, x, a->k32, nt, r, 1, yt);
}

/* One format's GEMV, specialised by the constant `format` so no switch is left in the loops:
 * tokens in fours (three, twos), the rest one at a time. */
static inline __attribute__((always_inline)) void gemv_rows(DiMatFormat format, const DiMatrix *w,
                                                            const DiSimdActs *a, float *y, int64_t r0, int64_t r1) {
    int64_t t0 = 0;
    for (; t0 + 4 <= a->n_tokens; t0 += 4) gemv_group(format, w, a, t0, 4, y, r0, r1);
    if (a->n_tokens - t0 == 3) gemv_group(format, w, a, t0, 3, y, r0, r1), t0 += 3;
    for (; t0 + 2 <= a->n_tokens; t0 += 2) gemv_group(format, w, a, t0, 2, y, r0, r1);
    for (int64_t t = t0; t < a->n_tokens; t++) {
        const float *x = a->x + t * a->k32;
        float *yt = y + t * w->rows;
        int64_t r = r0;
        for (; r + GEMV_ROWS <= r1; r += GEMV_ROWS) gemv_tile(format, w, x, a->k32, r, GEMV_ROWS, yt);
        for (; r < r1; r++) gemv_tile(format, w, x, a->k32, r, 1, yt);
    }
}

/* ---- FP8 GEMV with the block scale moved onto the activations --------------------------------
 * An FP8 scale is shared by 32 rows (§3.4), so instead of multiplying every decoded weight
 * w' = code * 2^E (E = FP8_GEMV_CODE_EXP: -120 for the float32 patterns, -8 for the FP16
 * route) by f = 2^(b-127-E), the GEMV multiplies the 32-row block's activations once:
 * fma(w', x * f, acc) rounds the same real number w' * x * f + acc as fma(w' * f, x, acc) does,
 * so the result is bit-identical to the panel GEMM -- provided x * f and w' * f are exact.
 * They are when f keeps every non-zero activation of the token a normal, finite float32 and
 * the weights finite (fp8_prescale_exact); otherwise the row block takes the plain path.  The
 * decision looks only at this token and this row block, so it never depends on the batch. */

typedef struct {
    float min_nonzero, max; /* of |x| over the finite, non-zero activations of one token */
} ActRange;

static ActRange act_range(const float *x, int64_t n) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    const __m256 inf = _mm256_set1_ps(INFINITY), zero = _mm256_setzero_ps();
    __m256 lo = inf, hi = zero;
    int64_t i = 0;
    for (; i + GROUP <= n; i += GROUP) {
        __m256 v = _mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask);
        __m256 counted = _mm256_and_ps(_mm256_cmp_ps(v, zero, _CMP_GT_OQ), _mm256_cmp_ps(v, inf, _CMP_LT_OQ));
        lo = _mm256_min_ps(lo, _mm256_blendv_ps(inf, v, counted));   /* zeros, inf, NaN ignored */
        hi = _mm256_max_ps(hi, _mm256_blendv_ps(zero, v, counted));
    }
    float l[GROUP], h[GROUP];
    _mm256_storeu_ps(l, lo);
    _mm256_storeu_ps(h, hi);
    ActRange r = {INFINITY, 0.0f};
    for (int j = 0; j < GROUP; j++) {
        r.min_nonzero = l[j] < r.min_nonzero ? l[j] : r.min_nonzero;
        r.max = h[j] > r.max ? h[j] : r.max;
    }
    for (; i < n; i++) {
        float v = fabsf(x[i]);
        if (v == 0.0f || !isfinite(v)) continue; /* zeros, inf and NaN scale exactly */
        if (v < r.min_nonzero) r.min_nonzero = v;
        if (v > r.max) r.max = v;
    }
    return r;
}

static bool fp8_prescale_exact(const uint8_t *scales, int64_t kblocks, ActRange x, bool via_fp16) {
    uint8_t lo = 255, hi = 0;
    for (int64_t i = 0; i < kblocks; i++) {
        lo = scales[i] < lo ? scales[i] : lo;
        hi = scales[i] > hi ? scales[i] : hi;
    }
    if (lo < 20 || hi > 240) return false;            /* code * scale stays a finite, exact float32 */
    if (fp8_gemv_factor_exp(hi, via_fp16) > 126) return false;  /* the factor itself a normal float32 */
    if (x.max == 0.0f) return true;                             /* all zero (or non-finite): exact */
    return ldexp(x.max, fp8_gemv_factor_exp(hi, via_fp16)) < 0x1p126 &&
           ldexp(x.min_nonzero, fp8_gemv_factor_exp(lo, via_fp16)) >= 0x1p-126;
}

/* One 32-column step of an FP8 tile: rows 0..nr-1 widened one way (via_fp16, a constant), each
 * against the nt tokens' prescaled activations xs[t] for that way (acc[i][t]). */
static inline __attribute__((always_inline)) void fp8_tile_step(const uint8_t *const *row, int nr, int nt,
                                                                int64_t kb, int64_t ahead, const float *const *xs,
                                                                uint16_t (*stage)[BLOCK], __m256 (*acc)[4],
                                                                bool via_fp16) {
    #pragma GCC unroll 16
    for (int i = 0; i < nr; i++) {
        const uint8_t *p = row[i] + kb * BLOCK;
        _mm_prefetch((const char *)p + ahead, PF_HINT);
        __m256 wv[4];
        e4m3_block_gemv_widen(p, stage[i], wv, via_fp16);
        #pragma GCC unroll 16
        for (int t = 0; t < nt; t++)
            #pragma GCC unroll 16
            for (int g = 0; g < 4; g++)
                acc[i][t] = _mm256_fmadd_ps(wv[g], _mm256_loadu_ps(xs[t] + kb * BLOCK + GROUP * g), acc[i][t]);
    }
}

/* Rows r0 .. r0+nr-1 of one 32-row block (inside one FP8_MAP_ROWS group); xs32 / xs16: x * f
 * per column block for the float32 / FP16 widening (full blocks only; the route reads the ones
 * it needs). */
static inline __attribute__((always_inline)) void gemv_fp8_prescaled_tile(const DiMatrix *w, const float *x,
                                                                          const float *xs32, const float *xs16,
                                                                          int64_t k32, int64_t r0, int nr, float *y,
                                                                          DiFp8GemvRoute route) {
    const uint8_t *row[GEMV_ROWS];
    uint16_t stage[GEMV_ROWS][BLOCK] __attribute__((aligned(32))); /* one per row: no false dependences */
    int64_t full = w->cols / BLOCK, ahead = prefetch_rows_ahead(w, r0, nr) * w->cols;
    const uint8_t *map = route == DI_FP8_GEMV_MAPPED ? fp8_map_row(w, r0) : NULL;
    __m256 acc[GEMV_ROWS][4]; /* [i][0]: the one token's (the step's layout); in registers after inlining */
    #pragma GCC unroll 16
    for (int i = 0; i < GEMV_ROWS; i++) {
        acc[i][0] = _mm256_setzero_ps();
        row[i] = (const uint8_t *)w->data + (r0 + (i < nr ? i : 0)) * w->cols;
    }
    const float *const x32[1] = {xs32}, *const x16[1] = {xs16};
    if (route == DI_FP8_GEMV_MAPPED) { /* runs of float32 steps, each up to a marked block */
        for (int64_t kb = 0; kb < full;) {
            int64_t end = fp8_next_marked(map, kb, full);
            for (; kb < end; kb++) fp8_tile_step(row, nr, 1, kb, ahead, x32, stage, acc, false);
            if (kb < full) {
                fp8_tile_step(row, nr, 1, kb, ahead, x16, stage, acc, true);
                kb++;
            }
        }
    } else {
        bool via_fp16 = route == DI_FP8_GEMV_FP16;
        for (int64_t kb = 0; kb < full; kb++) fp8_tile_step(row, nr, 1, kb, ahead, via_fp16 ? x16 : x32, stage, acc, via_fp16);
    }
    if (full < k32 / BLOCK) { /* the partial last block: the plain decode, unscaled x */
        #pragma GCC unroll 16
        for (int i = 0; i < nr; i++) {
            __m256 wv[4];
            decode_block(DI_MAT_FP8_BLOCK, w, r0 + i, full, wv);
            #pragma GCC unroll 16
            for (int g = 0; g < 4; g++)
                acc[i][0] = _mm256_fmadd_ps(wv[g], _mm256_loadu_ps(x + full * BLOCK + GROUP * g), acc[i][0]);
        }
    }
    #pragma GCC unroll 16
    for (int i = 0; i < nr; i++) y[r0 + i] = lane_sum(acc[i][0]);
}

/* FP4 rows r0 .. r0+nr-1 (nr <= FP4_GEMV_ROWS): each row has its own scales (§3.5), so they stay
 * on the weights.  Four rows, not GEMV_ROWS' eight: the decoder's temporaries, eight
 * accumulators and sixteen row and scale pointers spilled (kernel_ab, Zen 4, n = 1, 4 against 8
 * rows, prefetching a tile ahead either way: from DRAM 1.13x for 16384x1024 and 512x1024, 1.02x
 * for 4096x4096; in cache 1.02-1.035x; same bits).  FP8 measured the other way (0.88-0.92x from
 * DRAM), so the other tiles keep eight. */
#ifndef FP4_GEMV_ROWS
#define FP4_GEMV_ROWS 4
#endif
static inline __attribute__((always_inline)) void gemv_fp4_tile(const DiMatrix *w, const float *x, int64_t r0, int nr,
                                                                float *y, bool to_l1) {
    const uint8_t *row[FP4_GEMV_ROWS], *srow[FP4_GEMV_ROWS];
    int64_t kblocks = w->cols / BLOCK, ahead = prefetch_rows_ahead_by(w, r0, nr, FP4_GEMV_ROWS) * (w->cols / 2);
    __m256 acc[FP4_GEMV_ROWS];
    #pragma GCC unroll 16
    for (int i = 0; i < FP4_GEMV_ROWS; i++) {
        int64_t r = r0 + (i < nr ? i : 0);
        acc[i] = _mm256_setzero_ps();
        row[i] = (const uint8_t *)w->data + r * (w->cols / 2);
        srow[i] = w->scale + r * kblocks;
    }
    for (int64_t kb = 0; kb < kblocks; kb++) {
        const float *xb = x + kb * BLOCK;
        #pragma GCC unroll 16
        for (int i = 0; i < nr; i++) {
            const uint8_t *p = row[i] + kb * (BLOCK / 2);
            prefetch_fp4(p + ahead, to_l1);
            __m256 wv[4];
            decode_fp4_block_lanes(p, srow[i][kb], wv);
            #pragma GCC unroll 16
            for (int g = 0; g < 4; g++) acc[i] = _mm256_fmadd_ps(wv[g], _mm256_loadu_ps(xb + GROUP * g), acc[i]);
        }
    }
    #pragma GCC unroll 16
    for (int i = 0; i < nr; i++) y[r0 + i] = lane_sum_fp4(acc[i]);
}

/* Two tokens at once for the few-token case (routed experts): each block is decoded once and
 * meets both tokens; every (row, token) accumulator sees the same sequence as alone. */
static inline __attribute__((always_inline)) void gemv_fp4_pair_tile(const DiMatrix *w, const float *x0,
                                                                     const float *x1, int64_t r0, int nr,
                                                                     float *y0, float *y1, bool to_l1) {
    const uint8_t *row[PAIR_ROWS], *srow[PAIR_ROWS];
    int64_t kblocks = w->cols / BLOCK;
    __m256 a0[PAIR_ROWS], a1[PAIR_ROWS];
    #pragma GCC unroll 16
    for (int i = 0; i < PAIR_ROWS; i++) {
        int64_t r = r0 + (i < nr ? i : 0);
        a0[i] = a1[i] = _mm256_setzero_ps();
        row[i] = (const uint8_t *)w->data + r * (w->cols / 2);
        srow[i] = w->scale + r * kblocks;
    }
    int64_t ahead = prefetch_rows_ahead(w, r0, nr) * (w->cols / 2);
    for (int64_t kb = 0; kb < kblocks; kb++) {
        const float *xb0 = x0 + kb * BLOCK, *xb1 = x1 + kb * BLOCK;
        #pragma GCC unroll 16
        for (int i = 0; i < nr; i++) {
            const uint8_t *p = row[i] + kb * (BLOCK / 2);
            prefetch_fp4(p + ahead, to_l1);
            __m256 wv[4];
            decode_fp4_block_lanes(p, srow[i][kb], wv);
            #pragma GCC unroll 16
            for (int g = 0; g < 4; g++) {
                a0[i] = _mm256_fmadd_ps(wv[g], _mm256_loadu_ps(xb0 + GROUP * g), a0[i]);
                a1[i] = _mm256_fmadd_ps(wv[g], _mm256_loadu_ps(xb1 + GROUP * g), a1[i]);
            }
        }
    }
    #pragma GCC unroll 16
    for (int i = 0; i < nr; i++) {
        y0[r0 + i] = lane_sum_fp4(a0[i]);
        y1[r0 + i] = lane_sum_fp4(a1[i]);
    }
}

/* Four (or three) tokens at once (routed experts at batch sizes of a few tokens per expert): a
 * block is decoded once for all of them instead of once per pair (and once more for a third).
 * QUAD_ROWS x nt accumulators, the four decoded registers of the current row, and activations
 * read from memory by the FMAs.  nt is a constant at every call (3 or 4). */
static inline __attribute__((always_inline)) void gemv_fp4_quad_tile(const DiMatrix *w, const float *x, int64_t k32,
                                                                     int nt, int64_t r0, int nr, float *y,
                                                                     bool to_l1) {
    const uint8_t *row[QUAD_ROWS], *srow[QUAD_ROWS];
    int64_t kblocks = w->cols / BLOCK;
    __m256 acc[QUAD_ROWS][4];
    #pragma GCC unroll 16
    for (int i = 0; i < QUAD_ROWS; i++) {
        int64_t r = r0 + (i < nr ? i : 0);
        #pragma GCC unroll 16
        for (int t = 0; t < nt; t++) acc[i][t] = _mm256_setzero_ps();
        row[i] = (const uint8_t *)w->data + r * (w->cols / 2);
        srow[i] = w->scale + r * kblocks;
    }
    int64_t ahead = prefetch_rows_ahead(w, r0, nr) * (w->cols / 2);
    for (int64_t kb = 0; kb < kblocks; kb++) {
        #pragma GCC unroll 16
        for (int i = 0; i < nr; i++) {
            const uint8_t *p = row[i] + kb * (BLOCK / 2);
            prefetch_fp4(p + ahead, to_l1);
            __m256 wv[4];
            decode_fp4_block_lanes(p, srow[i][kb], wv);
            ACCUMULATE_TOKENS(acc[i], wv, x + kb * BLOCK, k32, nt);
        }
    }
    #pragma GCC unroll 16
    for (int i = 0; i < nr; i++)
        #pragma GCC unroll 16
        for (int t = 0; t < nt; t++) y[t * w->rows + r0 + i] = lane_sum_fp4(acc[i][t]);
}

/* Activations of `n` tokens in FP4_LANE_ORDER within each group of eight (see
 * decode_fp4_block_lanes), n * k32 floats into xp. */
static void fp4_permute_acts(const float *x, int64_t k32, int n, float *xp) {
    const __m256i order = _mm256_setr_epi32(FP4_LANE_ORDER);
    for (int64_t i = 0; i < n * k32; i += GROUP)
        _mm256_store_ps(xp + i, _mm256_permutevar8x32_ps(_mm256_loadu_ps(x + i), order));
}

/* Tokens t .. t+nt-1 (nt = 3 or 4, a constant) against rows [r0, r1), four-token tiles. */
static inline __attribute__((always_inline)) void gemv_fp4_group(const DiMatrix *w, const DiSimdActs *a, int64_t t,
                                                                 int nt, float *y, int64_t r0, int64_t r1, float *xp,
                                                                 bool to_l1) {
    fp4_permute_acts(a->x + t * a->k32, a->k32, nt, xp);
    float *yt = y + t * w->rows;
    int64_t r = r0;
    for (; r + QUAD_ROWS <= r1; r += QUAD_ROWS) gemv_fp4_quad_tile(w, xp, a->k32, nt, r, QUAD_ROWS, yt, to_l1);
    for (; r < r1; r++) gemv_fp4_quad_tile(w, xp, a->k32, nt, r, 1, yt, to_l1);
}

/* xp: 4 * k32 floats of scratch for the permuted activations of up to four tokens; to_l1 a
 * constant at both calls (gemv_fp4_rows). */
static inline __attribute__((always_inline)) void gemv_fp4_rows_to(const DiMatrix *w, const DiSimdActs *a, float *y,
                                                                   int64_t r0, int64_t r1, float *xp, bool to_l1) {
    int64_t t = 0, k32 = a->k32;
    for (; t + 4 <= a->n_tokens; t += 4) gemv_fp4_group(w, a, t, 4, y, r0, r1, xp, to_l1);
    if (a->n_tokens - t == 3) { /* one decode for three tokens, not a pair and a single */
        gemv_fp4_group(w, a, t, 3, y, r0, r1, xp, to_l1);
        t += 3;
    }
    for (; t + 2 <= a->n_tokens; t += 2) {
        fp4_permute_acts(a->x + t * k32, k32, 2, xp);
        float *y0 = y + t * w->rows, *y1 = y0 + w->rows;
        int64_t r = r0;
        for (; r + PAIR_ROWS <= r1; r += PAIR_ROWS) gemv_fp4_pair_tile(w, xp, xp + k32, r, PAIR_ROWS, y0, y1, to_l1);
        for (; r < r1; r++) gemv_fp4_pair_tile(w, xp, xp + k32, r, 1, y0, y1, to_l1);
    }
    for (; t < a->n_tokens; t++) {
        fp4_permute_acts(a->x + t * k32, k32, 1, xp);
        float *yt = y + t * w->rows;
        int64_t r = r0;
        for (; r + FP4_GEMV_ROWS <= r1; r += FP4_GEMV_ROWS) gemv_fp4_tile(w, xp, r, FP4_GEMV_ROWS, yt, to_l1);
        for (; r < r1; r++) gemv_fp4_tile(w, xp, r, 1, yt, to_l1);
    }
}

static void gemv_fp4_rows(const DiMatrix *w, const DiSimdActs *a, float *y, int64_t r0, int64_t r1, float *xp) {
    pthread_once(&fp4_weight_bytes_once, fill_fp4_weight_bytes);
    if (fp4_prefetch_to_l1(w))
        gemv_fp4_rows_to(w, a, y, r0, r1, xp, true);
    else
        gemv_fp4_rows_to(w, a, y, r0, r1, xp, false);
}

/* xs = x * 2^(b-127) / 2^code_exp for column block kb of one 32-row scale block (see above). */
static inline void fp8_scale_block(const float *x, const uint8_t *scales, int64_t kb, float *xs, bool via_fp16) {
    /* a normal float32: fp8_prescale_exact checked the exponent */
    __m256 fv = _mm256_set1_ps(f32_from_bits((uint32_t)(fp8_gemv_factor_exp(scales[kb], via_fp16) + 127) << 23));
    #pragma GCC unroll 16
    for (int g = 0; g < 4; g++)
        _mm256_store_ps(xs + kb * BLOCK + GROUP * g, _mm256_mul_ps(_mm256_loadu_ps(x + kb * BLOCK + GROUP * g), fv));
}

/* fp8_scale_block for every full column block. */
static void fp8_scale_acts(const float *x, const uint8_t *scales, int64_t full, float *xs, bool via_fp16) {
    for (int64_t kb = 0; kb < full; kb++) fp8_scale_block(x, scales, kb, xs, via_fp16);
}

/* fp8_scale_acts through FP16, for nt tokens, of the column blocks that some row group of the
 * 32-row block at rb marks in the subnormal map: the only ones the mapped route's FP16 steps read.
 * The map is read eight blocks at a time; most words of it are zero. */
static void fp8_scale_acts_marked(const DiMatrix *w, int64_t rb, const uint8_t *scales, int64_t full, int nt,
                                  const float *const *x, float *const *xs16) {
    int64_t kblocks = (w->cols + BLOCK - 1) / BLOCK, rows_left = w->rows - rb;
    int64_t groups = rows_left < BLOCK ? (rows_left + FP8_MAP_ROWS - 1) / FP8_MAP_ROWS : BLOCK / FP8_MAP_ROWS;
    const uint8_t *map = fp8_map_row(w, rb);
    for (int64_t k8 = 0; k8 < full; k8 += 8) {
        uint64_t marked = 0;
        for (int64_t g = 0; g < groups; g++) {
            uint64_t word = 0;
            memcpy(&word, map + g * kblocks + k8, (size_t)(full - k8 < 8 ? full - k8 : 8));
            marked |= word;
        }
        for (int64_t kb = k8; marked; kb++, marked >>= 8) { /* little-endian: byte j is block k8 + j */
            if (!(marked & 0xFF)) continue;
            for (int t = 0; t < nt; t++) fp8_scale_block(x[t], scales, kb, xs16[t], true);
        }
    }
}

/* The route one row block takes for tokens whose prescaled activations are exact on the float32
 * widening (exact32) and on the FP16 one (exact16): the mapped route needs both (its steps mix
 * the two), and falls back to FP16 alone; FP8_PLAIN_PATH when neither prescale is exact. */
#define FP8_PLAIN_PATH DI_FP8_GEMV_AUTO /* the plain decode_block tiles, unscaled activations */
static DiFp8GemvRoute fp8_block_route(DiFp8GemvRoute route, bool exact32, bool exact16) {
    switch (route) {
    case DI_FP8_GEMV_F32: return exact32 ? DI_FP8_GEMV_F32 : FP8_PLAIN_PATH;
    case DI_FP8_GEMV_MAPPED: return exact32 && exact16 ? DI_FP8_GEMV_MAPPED : exact16 ? DI_FP8_GEMV_FP16 : FP8_PLAIN_PATH;
    default: return exact16 ? DI_FP8_GEMV_FP16 : FP8_PLAIN_PATH;
    }
}

/* The prescaled activations of nt tokens that a block route's tiles read: xs32[t] for the float32
 * widening, xs16[t] for FP16 (the mapped route: only the blocks its map marks). */
static void fp8_prescale_tokens(const DiMatrix *w, int64_t rb, DiFp8GemvRoute block_route, const uint8_t *scales,
                                int nt, const float *const *x, float *const *xs32, float *const *xs16) {
    int64_t full = w->cols / BLOCK;
    for (int t = 0; t < nt; t++) {
        if (block_route != DI_FP8_GEMV_FP16) fp8_scale_acts(x[t], scales, full, xs32[t], false);
        if (block_route == DI_FP8_GEMV_FP16) fp8_scale_acts(x[t], scales, full, xs16[t], true);
    }
    if (block_route == DI_FP8_GEMV_MAPPED) fp8_scale_acts_marked(w, rb, scales, full, nt, x, xs16);
}

/* Rows [rb, rb_end) of one scale row block for one token on a fixed route (a constant). */
static inline __attribute__((always_inline)) void fp8_rowblock_tiles(const DiMatrix *w, const float *x,
                                                                     const float *xs32, const float *xs16, int64_t k32,
                                                                     int64_t rb, int64_t rb_end, float *yt,
                                                                     DiFp8GemvRoute route) {
    int64_t r = rb;
    for (; r + GEMV_ROWS <= rb_end; r += GEMV_ROWS) gemv_fp8_prescaled_tile(w, x, xs32, xs16, k32, r, GEMV_ROWS, yt, route);
    for (; r < rb_end; r++) gemv_fp8_prescaled_tile(w, x, xs32, xs16, k32, r, 1, yt, route);
}

/* The tiles are instantiated once per route, here and in fp8_group_tiles_on, and nowhere else:
 * inlined into every caller and every case, the clang sanitizer build of this file took minutes. */
static __attribute__((noinline)) void fp8_rowblock_tiles_on(DiFp8GemvRoute route, const DiMatrix *w, const float *x,
                                                            const float *xs32, const float *xs16, int64_t k32,
                                                            int64_t rb, int64_t rb_end, float *yt) {
    switch (route) {
    case DI_FP8_GEMV_F32: fp8_rowblock_tiles(w, x, xs32, xs16, k32, rb, rb_end, yt, DI_FP8_GEMV_F32); break;
    case DI_FP8_GEMV_FP16: fp8_rowblock_tiles(w, x, xs32, xs16, k32, rb, rb_end, yt, DI_FP8_GEMV_FP16); break;
    default: fp8_rowblock_tiles(w, x, xs32, xs16, k32, rb, rb_end, yt, DI_FP8_GEMV_MAPPED); break;
    }
}

/* One token against rows [rb, rb_end) of one scale row block: scaled activations when exact.
 * xs: 2 * k32 floats of scratch (the float32 widening's scaled activations, then the FP16 one's). */
static void fp8_rowblock_one(const DiMatrix *w, const float *x, int64_t k32, ActRange range, int64_t rb,
                             int64_t rb_end, float *xs, float *yt, DiFp8GemvRoute route) {
    int64_t kblocks = (w->cols + BLOCK - 1) / BLOCK;
    const uint8_t *scales = w->scale + (rb / BLOCK) * kblocks;
    bool exact32 = route != DI_FP8_GEMV_FP16 && fp8_prescale_exact(scales, kblocks, range, false);
    bool exact16 = route != DI_FP8_GEMV_F32 && fp8_prescale_exact(scales, kblocks, range, true);
    DiFp8GemvRoute block_route = fp8_block_route(route, exact32, exact16);
    if (block_route == FP8_PLAIN_PATH) {
        int64_t r = rb;
        for (; r + GEMV_ROWS <= rb_end; r += GEMV_ROWS) gemv_tile(DI_MAT_FP8_BLOCK, w, x, k32, r, GEMV_ROWS, yt);
        for (; r < rb_end; r++) gemv_tile(DI_MAT_FP8_BLOCK, w, x, k32, r, 1, yt);
        return;
    }
    float *xs32 = xs, *xs16 = xs + k32;
    fp8_prescale_tokens(w, rb, block_route, scales, 1, &x, &xs32, &xs16);
    fp8_rowblock_tiles_on(block_route, w, x, xs32, xs16, k32, rb, rb_end, yt);
}

/* NT tokens (2, 3 or 4), all with exact scaled activations: each block decoded once for all of
 * them.  Rows per tile: PAIR_ROWS for two tokens, QUAD_ROWS for four (8 accumulators either way).
 * x[t]: the token's activations (the partial last block), xs32[t] / xs16[t]: its scaled ones for
 * the two widenings (the route reads the ones it needs). */
static inline __attribute__((always_inline)) void gemv_fp8_group_tile(const DiMatrix *w, int nt,
                                                                      const float *const *x, const float *const *xs32,
                                                                      const float *const *xs16, int64_t k32,
                                                                      int64_t r0, int nr, float *const *y,
                                                                      DiFp8GemvRoute route) {
    enum { MAX_TILE_ROWS = PAIR_ROWS > QUAD_ROWS ? PAIR_ROWS : QUAD_ROWS };
    const uint8_t *row[MAX_TILE_ROWS];
    uint16_t stage[MAX_TILE_ROWS][BLOCK] __attribute__((aligned(32)));
    int64_t full = w->cols / BLOCK;
    int tile_rows = nt >= 3 ? QUAD_ROWS : PAIR_ROWS;
    const uint8_t *map = route == DI_FP8_GEMV_MAPPED ? fp8_map_row(w, r0) : NULL;
    __m256 acc[MAX_TILE_ROWS][4];
    #pragma GCC unroll 16
    for (int i = 0; i < tile_rows; i++) {
        #pragma GCC unroll 16
        for (int t = 0; t < nt; t++) acc[i][t] = _mm256_setzero_ps();
        row[i] = (const uint8_t *)w->data + (r0 + (i < nr ? i : 0)) * w->cols;
    }
    int64_t ahead = prefetch_rows_ahead(w, r0, nr) * w->cols;
    if (route == DI_FP8_GEMV_MAPPED) { /* runs of float32 steps, each up to a marked block */
        for (int64_t kb = 0; kb < full;) {
            int64_t end = fp8_next_marked(map, kb, full);
            for (; kb < end; kb++) fp8_tile_step(row, nr, nt, kb, ahead, xs32, stage, acc, false);
            if (kb < full) {
                fp8_tile_step(row, nr, nt, kb, ahead, xs16, stage, acc, true);
                kb++;
            }
        }
    } else {
        bool via_fp16 = route == DI_FP8_GEMV_FP16;
        for (int64_t kb = 0; kb < full; kb++) fp8_tile_step(row, nr, nt, kb, ahead, via_fp16 ? xs16 : xs32, stage, acc, via_fp16);
    }
    if (full < k32 / BLOCK) { /* the partial last block: the plain decode, unscaled x */
        #pragma GCC unroll 16
        for (int i = 0; i < nr; i++) {
            __m256 wv[4];
            decode_block(DI_MAT_FP8_BLOCK, w, r0 + i, full, wv);
            #pragma GCC unroll 16
            for (int t = 0; t < nt; t++)
                #pragma GCC unroll 16
                for (int g = 0; g < 4; g++)
                    acc[i][t] = _mm256_fmadd_ps(wv[g], _mm256_loadu_ps(x[t] + full * BLOCK + GROUP * g), acc[i][t]);
        }
    }
    #pragma GCC unroll 16
    for (int i = 0; i < nr; i++)
        #pragma GCC unroll 16
        for (int t = 0; t < nt; t++) y[t][r0 + i] = lane_sum(acc[i][t]);
}

/* Rows [rb, rb_end) of one scale row block for nt tokens on a fixed route (a constant). */
static inline __attribute__((always_inline)) void fp8_group_tiles(const DiMatrix *w, int nt, const float *const *x,
                                                                  const float *const *xs32, const float *const *xs16,
                                                                  int64_t k32, int64_t rb, int64_t rb_end,
                                                                  float *const *yt, DiFp8GemvRoute route) {
    int tile_rows = nt >= 3 ? QUAD_ROWS : PAIR_ROWS;
    int64_t r = rb;
    for (; r + tile_rows <= rb_end; r += tile_rows) gemv_fp8_group_tile(w, nt, x, xs32, xs16, k32, r, tile_rows, yt, route);
    for (; r < rb_end; r++) gemv_fp8_group_tile(w, nt, x, xs32, xs16, k32, r, 1, yt, route);
}

/* One instantiation per route and token count (the mapped route only takes pairs, fp8_token_group). */
static __attribute__((noinline)) void fp8_group_tiles_on(DiFp8GemvRoute route, const DiMatrix *w, int nt,
                                                         const float *const *x, const float *const *xs32,
                                                         const float *const *xs16, int64_t k32, int64_t rb,
                                                         int64_t rb_end, float *const *yt) {
#define FP8_GROUP_CASE(r, n) \
    case (r) * 8 + (n): fp8_group_tiles(w, n, x, xs32, xs16, k32, rb, rb_end, yt, r); break
    switch ((int)route * 8 + nt) {
        FP8_GROUP_CASE(DI_FP8_GEMV_F32, 2);
        FP8_GROUP_CASE(DI_FP8_GEMV_F32, 3);
        FP8_GROUP_CASE(DI_FP8_GEMV_F32, 4);
        FP8_GROUP_CASE(DI_FP8_GEMV_FP16, 2);
        FP8_GROUP_CASE(DI_FP8_GEMV_FP16, 3);
        FP8_GROUP_CASE(DI_FP8_GEMV_FP16, 4);
        FP8_GROUP_CASE(DI_FP8_GEMV_MAPPED, 2);
    default: break; /* not reached: fp8_token_group sends three or four tokens through FP16 */
    }
#undef FP8_GROUP_CASE
}

/* Tokens t0 .. t0+nt-1 (nt = 2, 3 or 4) against rows [r0, r1): per 32-row scale block, the group
 * tile when every token's scaled activations are exact there, else each token alone.
 * xs_scratch: 8 * k32 floats (per token its float32-widening then its FP16-widening scaled
 * activations; a token alone uses the first two). */
static void fp8_token_group(const DiMatrix *w, const DiSimdActs *a, int64_t t0, int nt, float *y, int64_t r0,
                            int64_t r1, float *xs_scratch, DiFp8GemvRoute route) {
    /* three or four tokens share each widening, so FP16 costs them little: mapped tiles measured
     * 0.95x of FP16 ones at four tokens, 1.05x at two (kernel_ab 4096x4096, 1e-4 subnormal codes) */
    if (route == DI_FP8_GEMV_MAPPED && nt >= 3) route = DI_FP8_GEMV_FP16;
    int64_t kblocks = (w->cols + BLOCK - 1) / BLOCK, k32 = a->k32;
    const float *x[4], *xs32[4], *xs16[4]; /* xs32/xs16 point into xs_scratch (written by fp8_prescale_tokens) */
    float *yt[4];
    ActRange range[4];
    for (int t = 0; t < nt; t++) {
        x[t] = a->x + (t0 + t) * k32;
        xs32[t] = xs_scratch + 2 * t * k32;
        xs16[t] = xs_scratch + (2 * t + 1) * k32;
        yt[t] = y + (t0 + t) * w->rows;
        range[t] = act_range(x[t], w->cols);
    }
    for (int64_t rb = r0; rb < r1; rb += BLOCK) { /* r0 is a multiple of 32 */
        int64_t rb_end = rb + BLOCK < r1 ? rb + BLOCK : r1;
        const uint8_t *scales = w->scale + (rb / BLOCK) * kblocks;
        bool exact32 = route != DI_FP8_GEMV_FP16, exact16 = route != DI_FP8_GEMV_F32;
        for (int t = 0; t < nt; t++) {
            exact32 = exact32 && fp8_prescale_exact(scales, kblocks, range[t], false);
            exact16 = exact16 && fp8_prescale_exact(scales, kblocks, range[t], true);
        }
        DiFp8GemvRoute block_route = fp8_block_route(route, exact32, exact16);
        if (block_route == FP8_PLAIN_PATH) {
            for (int t = 0; t < nt; t++)
                fp8_rowblock_one(w, x[t], k32, range[t], rb, rb_end, xs_scratch, yt[t], route);
            continue;
        }
        fp8_prescale_tokens(w, rb, block_route, scales, nt, x, (float *const *)xs32, (float *const *)xs16);
        fp8_group_tiles_on(block_route, w, nt, x, xs32, xs16, k32, rb, rb_end, yt);
    }
}

/* xs: 8 * k32 floats of scratch. */
static void gemv_fp8_rows_by(const DiMatrix *w, const DiSimdActs *a, float *y, int64_t r0, int64_t r1, float *xs,
                             DiFp8GemvRoute route) {
    int64_t k32 = a->k32, t = 0;
    for (; t + 4 <= a->n_tokens; t += 4) fp8_token_group(w, a, t, 4, y, r0, r1, xs, route);
    if (a->n_tokens - t == 3) { /* one decode for three tokens, not a pair and a single */
        fp8_token_group(w, a, t, 3, y, r0, r1, xs, route);
        t += 3;
    }
    for (; t + 2 <= a->n_tokens; t += 2) fp8_token_group(w, a, t, 2, y, r0, r1, xs, route);
    for (; t < a->n_tokens; t++) {
        const float *x = a->x + t * k32;
        ActRange range = act_range(x, w->cols);
        for (int64_t rb = r0; rb < r1; rb += BLOCK)
            fp8_rowblock_one(w, x, k32, range, rb, rb + BLOCK < r1 ? rb + BLOCK : r1, xs, y + t * w->rows, route);
    }
}

void di_simd_fp8_gemv_rows_on(DiFp8GemvRoute route, const DiMatrix *w, const DiSimdActs *a, float *y, int64_t r0,
                              int64_t r1, float *xs) {
    if (route == DI_FP8_GEMV_MAPPED && !w->fp8_subnormal_map) route = DI_FP8_GEMV_FP16;
    if (route != DI_FP8_GEMV_FP16 && route != DI_FP8_GEMV_MAPPED) route = DI_FP8_GEMV_F32;
    gemv_fp8_rows_by(w, a, y, r0, r1, xs, route);
}

static void gemv_fp8_rows(const DiMatrix *w, const DiSimdActs *a, float *y, int64_t r0, int64_t r1, float *xs) {
    di_simd_fp8_gemv_rows_on(di_simd_fp8_gemv_route(NULL), w, a, y, r0, r1, xs);
}

void di_simd_gemv_rows(const DiMatrix *w, const DiSimdActs *a, float *y, int64_t r0, int64_t r1, float *scratch) {
    switch (w->format) {
    case DI_MAT_F32: gemv_rows(DI_MAT_F32, w, a, y, r0, r1); break;
    case DI_MAT_BF16: gemv_rows(DI_MAT_BF16, w, a, y, r0, r1); break;
    case DI_MAT_FP8_BLOCK: gemv_fp8_rows(w, a, y, r0, r1, scratch); break;
    case DI_MAT_FP4_ROW32: gemv_fp4_rows(w, a, y, r0, r1, scratch); break;
    }
}

/* ---- GEMM: a decoded panel against a block of tokens, accumulators kept across chunks ------ */

/* Where the accumulator of panel row i and token j of the block lives in `accs` (in ymm units):
 * token-major, so that the final lane sums write each token's outputs y[t][r0 ..] contiguously.
 * Row-major, the 128 stores of one row hit addresses rows * 4 bytes apart, 4 KiB for a
 * 1024-row matrix, which all fall in one L1 set; the lane-sum loop was ~10 % of a prefill. */
#define ACC_INDEX(i, j) ((j) * PANEL_ROWS + (i))

/* acc[nr][nt] lanes live in `accs` between chunks (stored and reloaded unchanged, so chunking
 * does not alter the per-lane order).  panel: nr rows of `kc` floats at stride PANEL_K. */
static inline __attribute__((always_inline)) void gemm_tile(const float *panel, const float *x, int64_t xstride,
                                                            int64_t kc, float *accs, int nr, int nt) {
    __m256 acc[TILE_ROWS][TILE_TOKENS];
    #pragma GCC unroll 16
    for (int i = 0; i < nr; i++)
        #pragma GCC unroll 16
        for (int j = 0; j < nt; j++) acc[i][j] = _mm256_load_ps(accs + ACC_INDEX(i, j) * GROUP);
    for (int64_t k = 0; k < kc; k += GROUP) {
        __m256 wv[TILE_ROWS];
        #pragma GCC unroll 16
        for (int i = 0; i < nr; i++) {
            wv[i] = _mm256_load_ps(panel + i * PANEL_K + k);
            __asm__("" : "+x"(wv[i])); /* in a register for all nt tokens */
        }
        #pragma GCC unroll 16
        for (int j = 0; j < nt; j++) {
            __m256 xv = _mm256_loadu_ps(x + j * xstride + k);
            __asm__("" : "+x"(xv)); /* keep it in a register: one load, not one per row */
            #pragma GCC unroll 16
            for (int i = 0; i < nr; i++) acc[i][j] = _mm256_fmadd_ps(wv[i], xv, acc[i][j]);
        }
    }
    #pragma GCC unroll 16
    for (int i = 0; i < nr; i++)
        #pragma GCC unroll 16
        for (int j = 0; j < nt; j++) _mm256_store_ps(accs + ACC_INDEX(i, j) * GROUP, acc[i][j]);
}

/* Dispatch to a tile specialised for its size (the compiler keeps the full one in registers). */
static void gemm_tile_any(const float *panel, const float *x, int64_t xstride, int64_t kc, float *accs, int nr, int nt) {
#define TILE_CASE(R, T) \
    case (R) * 8 + (T): gemm_tile(panel, x, xstride, kc, accs, R, T); break;
    switch (nr * 8 + nt) {
        TILE_CASE(3, 4) TILE_CASE(3, 3) TILE_CASE(3, 2) TILE_CASE(3, 1)
        TILE_CASE(2, 4) TILE_CASE(2, 3) TILE_CASE(2, 2) TILE_CASE(2, 1)
        TILE_CASE(1, 4) TILE_CASE(1, 3) TILE_CASE(1, 2) TILE_CASE(1, 1)
    default: break;
    }
#undef TILE_CASE
}

/* Rows r0 .. r0+nr-1, columns k0 .. k0+kc-1 decoded into the panel (row stride PANEL_K);
 * specialised per format by the constant `format`, like the GEMV. */
static inline __attribute__((always_inline)) void decode_panel_fmt(DiMatFormat format, const DiMatrix *w, int64_t r0,
                                                                   int nr, int64_t k0, int64_t kc, float *panel) {
    for (int i = 0; i < nr; i++)
        for (int64_t k = 0; k < kc; k += BLOCK) {
            __m256 wv[4];
            decode_block(format, w, r0 + i, (k0 + k) / BLOCK, wv);
            #pragma GCC unroll 16
            for (int g = 0; g < 4; g++) _mm256_store_ps(panel + i * PANEL_K + k + GROUP * g, wv[g]);
        }
}

static void decode_panel(const DiMatrix *w, int64_t r0, int nr, int64_t k0, int64_t kc, float *panel) {
    switch (w->format) {
    case DI_MAT_F32: decode_panel_fmt(DI_MAT_F32, w, r0, nr, k0, kc, panel); break;
    case DI_MAT_BF16: decode_panel_fmt(DI_MAT_BF16, w, r0, nr, k0, kc, panel); break;
    case DI_MAT_FP8_BLOCK: decode_panel_fmt(DI_MAT_FP8_BLOCK, w, r0, nr, k0, kc, panel); break;
    case DI_MAT_FP4_ROW32: decode_panel_fmt(DI_MAT_FP4_ROW32, w, r0, nr, k0, kc, panel); break;
    }
}

/* One panel of up to PANEL_ROWS rows against tokens [t0, t0 + nt_block). */
static void gemm_panel(const DiMatrix *w, const DiSimdActs *a, float *y, int64_t r0, int nr_panel, int64_t t0,
                       int nt_block, float *panel, float *accs) {
    for (int j = 0; j < nt_block; j++) /* only the accumulators this block uses */
        memset(accs + ACC_INDEX(0, j) * GROUP, 0, sizeof(float) * (size_t)nr_panel * GROUP);
    for (int64_t k0 = 0; k0 < a->k32; k0 += PANEL_K) {
        int64_t kc = a->k32 - k0 < PANEL_K ? a->k32 - k0 : PANEL_K;
        decode_panel(w, r0, nr_panel, k0, kc, panel);
        for (int j = 0; j < nt_block; j += TILE_TOKENS) {
            int nt = nt_block - j < TILE_TOKENS ? nt_block - j : TILE_TOKENS;
            const float *x = a->x + (t0 + j) * a->k32 + k0;
            for (int i = 0; i < nr_panel; i += TILE_ROWS) {
                int nr = nr_panel - i < TILE_ROWS ? nr_panel - i : TILE_ROWS;
                gemm_tile_any(panel + i * PANEL_K, x, a->k32, kc, accs + ACC_INDEX(i, j) * GROUP, nr, nt);
            }
        }
    }
    for (int j = 0; j < nt_block; j++)
        for (int i = 0; i < nr_panel; i++) {
            __m256 v = _mm256_load_ps(accs + ACC_INDEX(i, j) * GROUP);
            y[(t0 + j) * w->rows + r0 + i] = lane_sum(v);
        }
}

void di_simd_gemm_rows(const DiMatrix *w, const DiSimdActs *a, float *y, int64_t r0, int64_t r1, float *scratch) {
    float *panel = scratch, *accs = scratch + (int64_t)PANEL_ROWS * PANEL_K;
    for (int64_t t0 = 0; t0 < a->n_tokens; t0 += TOKEN_BLOCK) {
        int nt_block = a->n_tokens - t0 < TOKEN_BLOCK ? (int)(a->n_tokens - t0) : TOKEN_BLOCK;
        for (int64_t r = r0; r < r1; r += PANEL_ROWS) {
            int nr_panel = r1 - r < PANEL_ROWS ? (int)(r1 - r) : PANEL_ROWS;
            gemm_panel(w, a, y, r, nr_panel, t0, nt_block, panel, accs);
        }
    }
}
