/* attn_neon.c — the NEON attention kernels (kernels/cpu/attn_simd.h), bit for bit the
 * reference's results, as the AVX2 ones (kernels/cpu/attn_avx2.c) are.
 *
 * How the order is kept: a dot product, a head sum or a softmax sum of the reference is one
 * sequential chain of separate multiplies and adds; here each vector lane carries one such
 * chain, the lanes being different keys (index scores), heads (the heads' dot products and
 * softmax sums) or dimensions (the weighted sum of the keys), and every chain takes its terms in
 * the reference's order.  The build's -ffp-contract=off keeps every multiply and add apart
 * (no FMLA is formed), as in the scalar loops.  The heads work on eight-head groups with GCC's
 * generic eight-float vectors (two q registers each); the indexer is attn_index_body.h with four
 * keys a vector; exp is expf's own bits (expf_exact_neon.c). */
#if defined(__aarch64__)

#include "kernels/cpu/attn_simd.h"
#include "kernels/cpu/attn_lanes.h"
#include "kernels/vec.h"

#include <arm_neon.h>
#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------- index scores */

#define DI_ATTN_VW 4
#define DI_ATTN_VREG "w"
#define DI_ATTN_INDEX_FN di_attn_index_scores_neon
#include "kernels/cpu/attn_index_body.h"

/* ---------------------------------------------------------------- top-k */

int64_t di_attn_topk_neon(const float *score, const int32_t *ids, int64_t n, int64_t k, DiScored *buf, int32_t *out) {
    if (k <= 0) return 0;
    /* candidates beat the k-th best kept so far (strictly: an equal score comes with a larger id);
     * the start, -inf, drops -inf and NaN as the reference's filter does */
    int64_t m = 0, lim = k < 512 ? 1024 : 2 * k;
    float thr = -INFINITY;
    float32x4_t tv = vdupq_n_f32(thr);
    int64_t t = 0;
    for (; t + 4 <= n; t += 4) {
        if (vmaxvq_u32(vcgtq_f32(vld1q_f32(score + t), tv)) == 0) continue; /* no candidate here */
        for (int l = 0; l < 4; l++)
            if (score[t + l] > thr) buf[m++] = (DiScored){score[t + l], ids ? ids[t + l] : (int32_t)(t + l)};
        if (m >= lim) {
            m = di_attn_select_best(buf, m, k);
            thr = buf[k - 1].score;
            tv = vdupq_n_f32(thr);
        }
    }
    for (; t < n; t++)
        if (score[t] > thr) buf[m++] = (DiScored){score[t], ids ? ids[t] : (int32_t)t};
    return di_attn_topk_finish(buf, m, k, out);
}

/* ---------------------------------------------------------------- attention heads */

#define DOT_KEYS 8 /* keys a block of the dot products: eight chains of eight heads */

static inline DiVec8 load8(const float *p) {
    DiVec8 v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* z[j][l] = (q_l · k_j) · scale for the group's lanes; qT[c][l] holds q_l[c] (0 for absent heads). */
static void head_dots(const float *qT, int64_t Dh, const float *const *keys, int64_t nk, float scale, float *z) {
    for (int64_t j0 = 0; j0 < nk; j0 += DOT_KEYS) {
        int64_t nb = nk - j0 < DOT_KEYS ? nk - j0 : DOT_KEYS;
        const float *kr[DOT_KEYS];
        for (int u = 0; u < DOT_KEYS; u++) kr[u] = keys[j0 + (u < nb ? u : nb - 1)];
        DiVec8 acc[DOT_KEYS];
        for (int u = 0; u < DOT_KEYS; u++) acc[u] = (DiVec8){0};
        for (int64_t c = 0; c < Dh; c++) {
            DiVec8 qv = load8(qT + c * 8);
#pragma GCC unroll 8 /* the accumulators stay in registers */
            for (int u = 0; u < DOT_KEYS; u++) acc[u] = acc[u] + qv * kr[u][c];
        }
        DiVec8 out[DOT_KEYS];
#pragma GCC unroll 8
        for (int u = 0; u < DOT_KEYS; u++) out[u] = acc[u] * scale;
        memcpy(z + j0 * 8, out, (size_t)nb * sizeof out[0]);
    }
}

/* Softmax numerators in place (z[j][l] = e^(z - M_l)) and denominators den[l], l < ng. */
static void head_softmax(const float *sink, int ng, int64_t nk, float *z, float den[8]) {
    float mx[8] = {0};
    for (int l = 0; l < ng; l++) mx[l] = sink[l];
    float32x4_t m0 = vld1q_f32(mx), m1 = vld1q_f32(mx + 4);
    for (int64_t j = 0; j < nk; j++) { /* FMAXNM: fmaxf's choice, NaN ignored */
        m0 = vmaxnmq_f32(m0, vld1q_f32(z + j * 8));
        m1 = vmaxnmq_f32(m1, vld1q_f32(z + j * 8 + 4));
    }
    vst1q_f32(mx, m0);
    vst1q_f32(mx + 4, m1);
    for (int l = 0; l < 8; l++) den[l] = l < ng ? expf(sink[l] - mx[l]) : 0.0f;
    for (int64_t j = 0; j < nk; j++) {
        vst1q_f32(z + j * 8, vsubq_f32(vld1q_f32(z + j * 8), m0));
        vst1q_f32(z + j * 8 + 4, vsubq_f32(vld1q_f32(z + j * 8 + 4), m1));
    }
    di_attn_expf_row(z, nk * 8, z); /* expf's bits, four at a time (absent heads' lanes: e^0) */
    float32x4_t d0 = vld1q_f32(den), d1 = vld1q_f32(den + 4);
    for (int64_t j = 0; j < nk; j++) {
        d0 = vaddq_f32(d0, vld1q_f32(z + j * 8));
        d1 = vaddq_f32(d1, vld1q_f32(z + j * 8 + 4));
    }
    vst1q_f32(den, d0);
    vst1q_f32(den + 4, d1);
}

/* out[u][0..16) = (Σ_j e[j][l0+u] · k_j[c .. c+16)) / den[l0+u] for u < 4 (attn_heads_body.h's
 * pass). */
static inline __attribute__((always_inline)) void head_values16(const float *e, int l0, int64_t c, const float *const *keys,
                                                                int64_t nk, const float den[8], float out[4][16]) {
    DiVec8 acc[4][2];
    for (int u = 0; u < 4; u++) acc[u][0] = acc[u][1] = (DiVec8){0};
    for (int64_t j = 0; j < nk; j++) {
        DiVec8 k0 = load8(keys[j] + c), k1 = load8(keys[j] + c + 8);
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) {
            float ev = e[j * 8 + l0 + u];
            acc[u][0] = acc[u][0] + ev * k0;
            acc[u][1] = acc[u][1] + ev * k1;
        }
    }
#pragma GCC unroll 4
    for (int u = 0; u < 4; u++) {
        DiVec8 q0 = acc[u][0] / den[l0 + u], q1 = acc[u][1] / den[l0 + u];
        memcpy(out[u], &q0, sizeof q0);
        memcpy(out[u] + 8, &q1, sizeof q1);
    }
}

#define DI_ATTN_HEADS_FN di_attn_heads_neon
#include "kernels/cpu/attn_heads_body.h"

#endif /* __aarch64__ */
