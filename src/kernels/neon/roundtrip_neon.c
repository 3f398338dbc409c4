/* roundtrip_neon.c — the FP8 block-32 round trip of the quantised GEMM inputs (§4.3) with NEON
 * (kernels/cpu/roundtrip_simd.h), bit for bit the scalar reference's result: the steps of
 * kernels/cpu/roundtrip_avx2.c, four values a vector.
 *   v = x * (1/s)          s = 2^k, so this is the quotient x / s, rounded once like it
 *   a = min(|v|, 448)      saturation to E4M3's largest finite value, as the reference clamps
 *   a < 2^-6: round(a * 2^9) * 2^-9      the subnormal grid, ties to even (FRINTN)
 *   else:     a with its float32 mantissa rounded to 3 bits, ties to even (add 0x7FFFF plus the
 *             kept lowest bit, clear the 20 dropped bits; a carry moves into the exponent)
 *   x = (a with v's sign) * s      exact: a has at most 4 significant bits
 * NaN in gives NaN out; the block maximum ignores NaN, as the reference's does. */
#if defined(__aarch64__)

#include "kernels/cpu/roundtrip_simd.h"

#include "kernels/numformats.h"

#include <arm_neon.h>
#include <math.h>
#include <stdint.h>

/* |x| > m selects: false for every NaN, quiet or signalling, so NaN is skipped as the reference's
 * comparison skips it (FMAXNM would return NaN for a signalling NaN and lose the maximum). */
static inline float block_amax(const float *x) {
    float32x4_t m = vdupq_n_f32(0.0f);
    for (int g = 0; g < 8; g++) {
        float32x4_t a = vabsq_f32(vld1q_f32(x + 4 * g));
        m = vbslq_f32(vcgtq_f32(a, m), a, m);
    }
    return vmaxvq_f32(m); /* no NaN left */
}

static inline float32x4_t e4m3_grid(float32x4_t v) {
    const uint32x4_t sign_bit = vdupq_n_u32(0x80000000u);
    uint32x4_t sign = vandq_u32(vreinterpretq_u32_f32(v), sign_bit);
    float32x4_t a = vminq_f32(vabsq_f32(v), vdupq_n_f32(DI_E4M3_MAX)); /* NaN stays NaN: replaced below */
    float32x4_t sub = vmulq_f32(vrndnq_f32(vmulq_f32(a, vdupq_n_f32(512.0f))), vdupq_n_f32(1.0f / 512.0f));
    uint32x4_t bits = vreinterpretq_u32_f32(a);
    uint32x4_t kept_lsb = vandq_u32(vshrq_n_u32(bits, 20), vdupq_n_u32(1));
    bits = vaddq_u32(bits, vaddq_u32(vdupq_n_u32(0x7FFFF), kept_lsb));
    float32x4_t normal = vreinterpretq_f32_u32(vandq_u32(bits, vdupq_n_u32(0xFFF00000u)));
    float32x4_t r = vbslq_f32(vcltq_f32(a, vdupq_n_f32(0x1p-6f)), sub, normal);
    return vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(r), sign));
}

void di_simd_roundtrip_fp8_block32(float *x, size_t n) {
    const float32x4_t nan = vdupq_n_f32(NAN);
    for (size_t b = 0; b < n; b += 32) {
        float amax = fmaxf(block_amax(x + b), 1e-4f);
        float s = di_ue8m0_to_f32(di_ue8m0_ceil(amax * (1.0f / 448.0f)));
        float32x4_t sv = vdupq_n_f32(s), inv = vdupq_n_f32(1.0f / s); /* s = 2^k: 1/s exact */
        for (int g = 0; g < 8; g++) {
            float32x4_t v = vmulq_f32(vld1q_f32(x + b + 4 * g), inv);
            float32x4_t out = vmulq_f32(e4m3_grid(v), sv);
            out = vbslq_f32(vceqq_f32(v, v), out, nan); /* v != v: NaN */
            vst1q_f32(x + b + 4 * g, out);
        }
    }
}

#endif /* __aarch64__ */
