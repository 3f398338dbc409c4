/* matmul_neon.h — what the aarch64 NEON matmul kernels share (matmul_neon.c: the GEMV tiles, the
 * panel GEMM and the dispatch; matmul_fp4q_neon.c: the block-order FP4 product): the exact
 * weight decoders, the fixed lane sum of kernels/cpu/matmul_simd.h and the scale tables.
 * Private to those files.
 *
 * The NEON kernels implement the interface of kernels/cpu/matmul_simd.h (the x86-64 build's
 * *_avx2.c files implement it there), so the CPU backend's driver (kernels/cpu/matmul.c: scratch,
 * padding to whole blocks, the thread split) runs them unchanged, and the reduction order is the
 * one that header fixes: output (t, r) keeps 8 float32 lanes, lane j accumulating W[r][c] x[t][c]
 * for c = 8g + j, g ascending, one fused multiply-add (vfmaq_f32) per term, the lanes summed as
 * ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).  The 8 lanes are two 128-bit registers: lanes 0-3 in the
 * first, 4-7 in the second.  So every output is bit for bit the x86 SIMD kernels' output.
 *
 * Decoding is exact and equals the reference's `code value * scale` in float32 (one rounding):
 *   E4M3, FP16 widening: the byte sign-extended to 16 bits, shifted left by 7 and bit 14 cleared
 *       is the FP16 pattern of code * 2^-8 (subnormal codes on FP16 subnormals); FCVTL widens it
 *       exactly, and one multiply by 2^(b-119) (b <= 246; above, 2^8 then the scale) gives
 *       code * 2^(b-127);
 *   E4M3, float32 patterns: the byte placed in the top byte of a 32-bit lane (TBL), shifted right
 *       arithmetically by 4 and masked is the float32 pattern of code * 2^-120 (subnormal codes on
 *       float32 subnormals), times 2^(b-7) (b <= 134; above, 2^120 then the scale);
 *   E2M1: bytes 2 and 3 of the float32 weight of each of the 16 codes for the row's scale byte b
 *       (TBL from a per-scale table: twice the code value times 2^(b-128) has at most two
 *       significant bits, so bytes 0 and 1 are zero);
 *   BF16: the upper half of a float32.
 * NaN codes (E4M3 0x7F/0xFF) and the NaN scale byte 0xFF do not occur in checkpoints; the decoders
 * give the x86 kernels' finite values for them where the reference gives NaN. */
#ifndef DI_KERNELS_NEON_MATMUL_NEON_H
#define DI_KERNELS_NEON_MATMUL_NEON_H

#include "kernels/cpu/matmul_simd.h"

#include <arm_neon.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define NEON_BLOCK 32 /* scale block along the input (§3.4, §3.5): eight float32x4 of weights */

static inline float neon_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The UE8M0 scale 2^(b-127) (§3.3); b = 0 is the subnormal 2^-127. */
static inline float neon_ue8m0_value(uint8_t b) {
    return b ? neon_f32_from_bits((uint32_t)b << 23) : neon_f32_from_bits(0x00400000u);
}

/* FP4 GEMV tables (matmul_neon.c, filled once before any FP4 product runs): for scale byte b,
 * bytes 2 (first 16) and 3 (last 16) of the float32 weight of each code. */
extern uint8_t di_neon_fp4_weight_bytes[256][32];
void di_neon_fp4_tables_init(void);

/* ---- decoders: one 32-column block of one row into eight float32x4, column order ---------- */

/* 16 E4M3 codes -> the FP16 patterns of code * 2^-8, widened to four float32x4. */
static inline __attribute__((always_inline)) void neon_e4m3_widen16_fp16(int8x16_t c, float32x4_t out[4]) {
    const int16x8_t keep = vdupq_n_s16((int16_t)0xBFFF);
    int16x8_t h0 = vandq_s16(vshlq_n_s16(vmovl_s8(vget_low_s8(c)), 7), keep);
    int16x8_t h1 = vandq_s16(vshlq_n_s16(vmovl_high_s8(c), 7), keep);
    float16x8_t f0 = vreinterpretq_f16_s16(h0), f1 = vreinterpretq_f16_s16(h1);
    out[0] = vcvt_f32_f16(vget_low_f16(f0));
    out[1] = vcvt_high_f32_f16(f0);
    out[2] = vcvt_f32_f16(vget_low_f16(f1));
    out[3] = vcvt_high_f32_f16(f1);
}

/* 16 E4M3 codes -> the float32 patterns of code * 2^-120 in four float32x4. */
static inline __attribute__((always_inline)) void neon_e4m3_widen16_f32(int8x16_t c, float32x4_t out[4]) {
    static const uint8_t top[4][16] = {
        {255, 255, 255, 0, 255, 255, 255, 1, 255, 255, 255, 2, 255, 255, 255, 3},
        {255, 255, 255, 4, 255, 255, 255, 5, 255, 255, 255, 6, 255, 255, 255, 7},
        {255, 255, 255, 8, 255, 255, 255, 9, 255, 255, 255, 10, 255, 255, 255, 11},
        {255, 255, 255, 12, 255, 255, 255, 13, 255, 255, 255, 14, 255, 255, 255, 15},
    };
    const int32x4_t keep = vdupq_n_s32((int32_t)0x87F00000u);
    uint8x16_t u = vreinterpretq_u8_s8(c);
    #pragma GCC unroll 4
    for (int g = 0; g < 4; g++) { /* index 255 is out of range: TBL writes 0 there */
        int32x4_t v = vreinterpretq_s32_u8(vqtbl1q_u8(u, vld1q_u8(top[g])));
        out[g] = vreinterpretq_f32_s32(vandq_s32(vshrq_n_s32(v, 4), keep));
    }
}

/* via_fp16: the widening (a constant at every call). */
static inline __attribute__((always_inline)) void neon_decode_fp8_block(const uint8_t *p, uint8_t b, float32x4_t out[8],
                                                                        bool via_fp16) {
    int8x16_t c0 = vld1q_s8((const int8_t *)p), c1 = vld1q_s8((const int8_t *)p + 16);
    if (via_fp16) {
        neon_e4m3_widen16_fp16(c0, out);
        neon_e4m3_widen16_fp16(c1, out + 4);
    } else {
        neon_e4m3_widen16_f32(c0, out);
        neon_e4m3_widen16_f32(c1, out + 4);
    }
    int single_max = via_fp16 ? 246 : 134; /* 2^(b-119) resp. 2^(b-7) still a finite float32 */
    if (b <= single_max) {
        float32x4_t f = vdupq_n_f32(neon_f32_from_bits((uint32_t)(b + (via_fp16 ? 8 : 120)) << 23));
        #pragma GCC unroll 8
        for (int i = 0; i < 8; i++) out[i] = vmulq_f32(out[i], f);
    } else { /* code * 2^code_exp * 2^-code_exp is the code value, exactly; then the scale */
        float32x4_t f1 = vdupq_n_f32(via_fp16 ? 0x1p8f : 0x1p120f), f2 = vdupq_n_f32(neon_ue8m0_value(b));
        #pragma GCC unroll 8
        for (int i = 0; i < 8; i++) out[i] = vmulq_f32(vmulq_f32(out[i], f1), f2);
    }
}

/* 16 codes (one per byte, 0..15) -> four float32x4 from the weight-byte tables of one scale. */
static inline __attribute__((always_inline)) void neon_fp4_lookup16(uint8x16_t codes, uint8x16_t byte2, uint8x16_t byte3,
                                                                    float32x4_t out[4]) {
    uint8x16_t lo = vqtbl1q_u8(byte2, codes), hi = vqtbl1q_u8(byte3, codes);
    uint16x8_t h0 = vreinterpretq_u16_u8(vzip1q_u8(lo, hi)), h1 = vreinterpretq_u16_u8(vzip2q_u8(lo, hi));
    out[0] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h0), 16));
    out[1] = vreinterpretq_f32_u32(vshll_high_n_u16(h0, 16));
    out[2] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h1), 16));
    out[3] = vreinterpretq_f32_u32(vshll_high_n_u16(h1, 16));
}

/* 16 bytes = 32 packed E2M1 codes (low nibble = even column, §3.3) of scale byte b. */
static inline __attribute__((always_inline)) void neon_decode_fp4_block(const uint8_t *p, uint8_t b, float32x4_t out[8]) {
    uint8x16_t bytes = vld1q_u8(p);
    uint8x16_t lo = vandq_u8(bytes, vdupq_n_u8(0x0F)), hi = vshrq_n_u8(bytes, 4);
    uint8x16_t byte2 = vld1q_u8(di_neon_fp4_weight_bytes[b]), byte3 = vld1q_u8(di_neon_fp4_weight_bytes[b] + 16);
    neon_fp4_lookup16(vzip1q_u8(lo, hi), byte2, byte3, out);     /* columns 0..15 */
    neon_fp4_lookup16(vzip2q_u8(lo, hi), byte2, byte3, out + 4); /* columns 16..31 */
}

static inline __attribute__((always_inline)) void neon_decode_bf16_block(const uint16_t *p, float32x4_t out[8]) {
    #pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        uint16x8_t h = vld1q_u16(p + 8 * i);
        out[2 * i] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16));
        out[2 * i + 1] = vreinterpretq_f32_u32(vshll_high_n_u16(h, 16));
    }
}

static inline __attribute__((always_inline)) void neon_decode_f32_block(const float *p, float32x4_t out[8]) {
    #pragma GCC unroll 8
    for (int i = 0; i < 8; i++) out[i] = vld1q_f32(p + 4 * i);
}

/* The one lane sum of matmul_simd.h for lanes 0-3 in lo and 4-7 in hi:
 * s = lo + hi holds l0+l4, l1+l5, l2+l6, l3+l7; then (s0+s2) + (s1+s3). */
static inline float neon_lane_sum(float32x4_t lo, float32x4_t hi) {
    float32x4_t s = vaddq_f32(lo, hi);
    float32x2_t t = vadd_f32(vget_low_f32(s), vget_high_f32(s));
    return vget_lane_f32(t, 0) + vget_lane_f32(t, 1);
}

#endif
