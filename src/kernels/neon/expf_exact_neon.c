/* expf_exact_neon.c — expf with the bits of this libm's scalar expf, two doubles a register, for
 * the attention softmax (attn_neon.c, kernels/cpu/attn_lanes.h's di_attn_expf_row) and the NEON
 * table's expf_row and SwiGLU (kernels/cpu/expf_simd.h's di_simd_expf_row: glibc has no aarch64
 * libmvec before 2.38, so the NEON table's exp is expf's own, the reference's bits).
 *
 * glibc (2.27 on) computes expf in double precision; its aarch64 build (read from the
 * disassembly of Debian 12's libm) takes z = x·32/ln2 (one multiply), k = round(z) ties away
 * from zero (FRINTA and FCVTAS: the TOINT_INTRINSICS path), r = z − k, 2^(k/32) from a 32-entry
 * table of 2^(i/32) with the exponent added in the integer domain, the degree-3 polynomial in r
 * with three FMADDs, and one rounding to float at the end.  The same operations on float64x2
 * give the same bits.  Inputs outside its main path (NaN, x > 88.72, x < −103.28) go to expf.
 * Whether this libm gives these bits is checked once against expf on sample points; where it
 * does not, rows take expf throughout (di_attn_expf_row stays exact either way).
 * tests/unit/test_attn_kernels.c compares the two on a dense sweep. */
#if defined(__aarch64__)

#include "kernels/cpu/attn_lanes.h"
#include "kernels/cpu/expf_simd.h"

#include <arm_neon.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

static uint64_t exp2_table[32]; /* bits of 2^(i/32) less i << 47 (kernels/cpu/expf_exact_body.h fills it) */

#define EXP_MAIN_HI 0x1.62e42ep6f  /* above: overflow */
#define EXP_MAIN_LO -0x1.9d1d9ep6f /* below: (may) underflow */

/* Two lanes of the main path. */
static inline __attribute__((always_inline)) float64x2_t expf2(float64x2_t xd) {
    const float64x2_t inv_ln2_n = vdupq_n_f64(0x1.71547652b82fep+5);
    const float64x2_t c0 = vdupq_n_f64(0x1.c6af84b912394p-20), c1 = vdupq_n_f64(0x1.ebfce50fac4f3p-13);
    const float64x2_t c2 = vdupq_n_f64(0x1.62e42ff0c52d6p-6), one = vdupq_n_f64(1.0);
    float64x2_t z = vmulq_f64(inv_ln2_n, xd);
    float64x2_t kd = vrndaq_f64(z);
    int64x2_t ki = vcvtaq_s64_f64(z);
    float64x2_t r = vsubq_f64(z, kd);
    uint64x2_t idx = vandq_u64(vreinterpretq_u64_s64(ki), vdupq_n_u64(31));
    uint64x2_t t = {exp2_table[vgetq_lane_u64(idx, 0)], exp2_table[vgetq_lane_u64(idx, 1)]};
    t = vaddq_u64(t, vshlq_n_u64(vreinterpretq_u64_s64(ki), 47));
    float64x2_t s = vreinterpretq_f64_u64(t);
    float64x2_t p = vfmaq_f64(c1, c0, r), r2 = vmulq_f64(r, r); /* c0·r + c1 */
    float64x2_t y = vfmaq_f64(one, c2, r);                       /* c2·r + 1 */
    y = vfmaq_f64(y, p, r2);                                      /* p·r² + y */
    return vmulq_f64(y, s);
}

/* Four lanes: the main path, then expf for lanes outside it. */
static inline __attribute__((always_inline)) float32x4_t expf4(float32x4_t x) {
    float32x2_t lo = vcvt_f32_f64(expf2(vcvt_f64_f32(vget_low_f32(x))));
    float32x4_t y = vcvt_high_f32_f64(lo, expf2(vcvt_high_f64_f32(x)));
    uint32x4_t in = vandq_u32(vcgeq_f32(x, vdupq_n_f32(EXP_MAIN_LO)), vcleq_f32(x, vdupq_n_f32(EXP_MAIN_HI)));
    if (vminvq_u32(in) == 0) { /* some lane outside (NaN compares false) */
        float xs[4], ys[4];
        uint32_t ok[4];
        vst1q_f32(xs, x);
        vst1q_f32(ys, y);
        vst1q_u32(ok, in);
        for (int l = 0; l < 4; l++)
            if (!ok[l]) ys[l] = expf(xs[l]);
        y = vld1q_f32(ys);
    }
    return y;
}

#define EXPF_VW 4
static inline __attribute__((always_inline)) void expf_vec_mem(const float *x, float *y) { vst1q_f32(y, expf4(vld1q_f32(x))); }
#include "kernels/cpu/expf_exact_body.h"

void di_simd_expf_row(const float *x, size_t n, float shift, float scale, float *out) {
    const float32x4_t s = vdupq_n_f32(shift), k = vdupq_n_f32(scale);
    size_t i = 0;
    if (di_attn_expf_exact())
        for (; i + 4 <= n; i += 4) vst1q_f32(out + i, expf4(vmulq_f32(vsubq_f32(vld1q_f32(x + i), s), k)));
    for (; i < n; i++) out[i] = expf((x[i] - shift) * scale);
}

#endif /* __aarch64__ */
