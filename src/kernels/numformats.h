/* numformats.h — the number formats of the official DeepSeek-V4.1 checkpoint and reference code,
 * bit-exact: FP8 E4M3 (e4m3fn), FP4 E2M1, UE8M0 power-of-two scales, BF16; and the three
 * quantise-dequantise round trips the reference applies to activations and cached rows.
 *
 * Everything here is scalar and exact; SIMD kernels may use faster equivalents but must agree
 * bit for bit.  Spec: model-v41.md §3.3 (formats), §4.3–4.6 (quantisers and rounding),
 * golden-v41/README.md §4 (the same rules as the golden sets apply them). */
#ifndef DI_KERNELS_NUMFORMATS_H
#define DI_KERNELS_NUMFORMATS_H

#include <stddef.h>
#include <stdint.h>

/* Largest finite magnitudes: E4M3 448 (code 0x7E), E2M1 6. */
#define DI_E4M3_MAX 448.0f
#define DI_E2M1_MAX 6.0f

/* FP8 E4M3 (fn variant: no infinities, 0x7F/0xFF are NaN). */
float di_e4m3_to_f32(uint8_t code);
/* Round to nearest even, subnormals included; |x| is clamped to 448 first; NaN -> 0x7F. */
uint8_t di_f32_to_e4m3(float x);

/* FP4 E2M1: bit 3 sign, bits 2..0 index {0, .5, 1, 1.5, 2, 3, 4, 6}. */
float di_e2m1_to_f32(uint8_t code);
/* Round to nearest, ties to the even code (§4.6); |x| clamped to 6; negative -> sign bit kept. */
uint8_t di_f32_to_e2m1(float x);

/* UE8M0 scale byte b = 2^(b-127) (a multiplier); 0xFF is NaN. */
float di_ue8m0_to_f32(uint8_t b);
/* The UE8M0 byte of 2^ceil(log2 t) for t > 0 normal: exponent field, +1 if mantissa != 0 (§4.3). */
uint8_t di_ue8m0_ceil(float t);

/* BF16 = the upper 16 bits of an fp32. */
float di_bf16_to_f32(uint16_t h);
uint16_t di_f32_to_bf16(float x); /* round to nearest even; NaN stays NaN */

/* ---- round trips (in place) ---------------------------------------------------------------
 * n must be a multiple of the block size (32 or 16); -1 with an error otherwise. */

/* §4.3/§4.4: FP8 per block of 32: a = max(amax, 1e-4), s = 2^ceil(log2(a * fp32(1/448))),
 * x = e4m3(x / s) * s.  Used on the inputs of the quantised GEMMs (ref mode) and on window KV rows. */
/* This is the scalar definition through the E4M3 byte code; the SIMD backend tables' op
 * (cpu/roundtrip_avx2.c) gives its bits, faster: the model calls its table's, chosen once. */
int di_roundtrip_fp8_block32(float *x, size_t n);
/* The same round trip split in two, for sending FP8 rows (expert-parallel dispatch): codes[n]
 * receives the E4M3 codes and scales[n / 32] the UE8M0 scale bytes; decoding them
 * (e4m3(code) * 2^(scale-127)) gives di_roundtrip_fp8_block32's result bit for bit. */
int di_quant_fp8_block32(const float *x, size_t n, uint8_t *codes, uint8_t *scales);
int di_dequant_fp8_block32(const uint8_t *codes, const uint8_t *scales, size_t n, float *x);
/* §4.5(a): FP4 with a UE8M0 scale per 32: a = max(amax, 6*2^-126), s = 2^ceil(log2(a * fp32(1/6))),
 * x = e2m1(x / s) * s.  Index keys and index queries. */
int di_roundtrip_fp4_ue8m0_block32(float *x, size_t n);
/* §4.5(b): FP4 with an E4M3 scale per 16: a = max(amax, 6*2^-9), s = e4m3(a / 6) (not a power of
 * two), x = e2m1(x / s) * s.  Compressed KV rows. */
int di_roundtrip_fp4_e4m3_block16(float *x, size_t n);

#endif
