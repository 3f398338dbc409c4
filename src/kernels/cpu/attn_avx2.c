/* attn_avx2.c — the AVX2 attention kernels (attn_simd.h), bit for bit the reference's results.
 *
 * How the order is kept: a dot product, a head sum or a softmax sum of the reference is one
 * sequential chain of separate multiplies and adds; here each vector lane carries one such
 * chain, the lanes being different keys (index scores, attention dot products after
 * transposing or broadcasting) or different heads (softmax sums) or different dimensions (the
 * weighted sum of the keys), and every chain takes its terms in the reference's order.
 * Compiled for AVX2 and FMA by the pragma whatever -march says (no FMA is formed: the build's
 * -ffp-contract=off keeps a multiply and an add apart, as in the scalar loops). */
#if defined(__x86_64__) /* x86-64 only; an aarch64 build takes kernels/neon/ instead */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,no-avx512f")
#endif

#include "kernels/cpu/attn_simd.h"
#include "kernels/cpu/attn_lanes.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------- index scores */

#define DI_ATTN_VW 8
#define DI_ATTN_INDEX_FN di_attn_index_scores_avx2
#include "kernels/cpu/attn_index_body.h"

/* ---------------------------------------------------------------- top-k */

int64_t di_attn_topk_avx2(const float *score, const int32_t *ids, int64_t n, int64_t k, DiScored *buf, int32_t *out) {
    if (k <= 0) return 0;
    /* candidates beat the k-th best kept so far (strictly: an equal score comes with a larger id);
     * the start, -inf, drops -inf and NaN as the reference's filter does */
    int64_t m = 0, lim = k < 512 ? 1024 : 2 * k;
    float thr = -INFINITY;
    __m256 tv = _mm256_set1_ps(thr);
    int64_t t = 0;
    for (; t + 8 <= n; t += 8) {
        unsigned mask = (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(score + t), tv, _CMP_GT_OQ));
        while (mask) {
            int l = __builtin_ctz(mask);
            mask &= mask - 1;
            buf[m++] = (DiScored){score[t + l], ids ? ids[t + l] : (int32_t)(t + l)};
        }
        if (m >= lim) {
            m = di_attn_select_best(buf, m, k);
            thr = buf[k - 1].score;
            tv = _mm256_set1_ps(thr);
        }
    }
    for (; t < n; t++)
        if (score[t] > thr) buf[m++] = (DiScored){score[t], ids ? ids[t] : (int32_t)t};
    return di_attn_topk_finish(buf, m, k, out);
}

/* ---------------------------------------------------------------- attention heads */

#define DOT_KEYS 8 /* keys a block of the dot products: eight chains */

/* z[j][l] = (q_l · k_j) · scale for the group's lanes; qT[c][l] holds q_l[c] (0 for absent heads). */
static void head_dots(const float *qT, int64_t Dh, const float *const *keys, int64_t nk, float scale, float *z) {
    __m256 sv = _mm256_set1_ps(scale);
    for (int64_t j0 = 0; j0 < nk; j0 += DOT_KEYS) {
        int64_t nb = nk - j0 < DOT_KEYS ? nk - j0 : DOT_KEYS;
        const float *kr[DOT_KEYS];
        for (int u = 0; u < DOT_KEYS; u++) kr[u] = keys[j0 + (u < nb ? u : nb - 1)];
        __m256 acc[DOT_KEYS];
        for (int u = 0; u < DOT_KEYS; u++) acc[u] = _mm256_setzero_ps();
        for (int64_t c = 0; c < Dh; c++) {
            __m256 qv = _mm256_load_ps(qT + c * 8);
            __asm__("" : "+v"(qv)); /* in a register: not one load folded into each multiply */
#pragma GCC unroll 8 /* the accumulators stay in registers */
            for (int u = 0; u < DOT_KEYS; u++) acc[u] = _mm256_add_ps(acc[u], _mm256_mul_ps(qv, _mm256_broadcast_ss(kr[u] + c)));
        }
        /* every accumulator read at a constant index, so none is kept in memory in the loop */
        __m256 out[DOT_KEYS];
#pragma GCC unroll 8
        for (int u = 0; u < DOT_KEYS; u++) out[u] = _mm256_mul_ps(acc[u], sv);
        memcpy(z + j0 * 8, out, (size_t)nb * sizeof out[0]);
    }
}

/* Softmax numerators in place (z[j][l] = e^(z - M_l)) and denominators den[l], l < ng. */
static void head_softmax(const float *sink, int ng, int64_t nk, float *z, float den[8]) {
    float mx[8] = {0};
    for (int l = 0; l < ng; l++) mx[l] = sink[l];
    __m256 mv = _mm256_loadu_ps(mx);
    for (int64_t j = 0; j < nk; j++) mv = _mm256_max_ps(mv, _mm256_loadu_ps(z + j * 8));
    _mm256_storeu_ps(mx, mv);
    for (int l = 0; l < 8; l++) den[l] = l < ng ? expf(sink[l] - mx[l]) : 0.0f;
    for (int64_t j = 0; j < nk; j++) _mm256_storeu_ps(z + j * 8, _mm256_sub_ps(_mm256_loadu_ps(z + j * 8), mv));
    di_attn_expf_row(z, nk * 8, z); /* expf's bits, eight at a time (absent heads' lanes: e^0) */
    __m256 dv = _mm256_loadu_ps(den);
    for (int64_t j = 0; j < nk; j++) dv = _mm256_add_ps(dv, _mm256_loadu_ps(z + j * 8));
    _mm256_storeu_ps(den, dv);
}

/* out[u][0..16) = (Σ_j e[j][l0+u] · k_j[c .. c+16)) / den[l0+u] for u < 4 (attn_heads_body.h's
 * pass; e and den hold all eight lanes). */
static inline __attribute__((always_inline)) void head_values16(const float *e, int l0, int64_t c, const float *const *keys,
                                                                int64_t nk, const float den[8], float out[4][16]) {
    __m256 acc[4][2];
    for (int u = 0; u < 4; u++) acc[u][0] = acc[u][1] = _mm256_setzero_ps();
    for (int64_t j = 0; j < nk; j++) {
        __m256 k0 = _mm256_loadu_ps(keys[j] + c), k1 = _mm256_loadu_ps(keys[j] + c + 8);
        /* loaded once into registers: left to itself the compiler folds the loads into each
         * multiply, and the loads, not the arithmetic, then bound the loop */
        __asm__("" : "+v"(k0), "+v"(k1));
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) {
            __m256 ev = _mm256_broadcast_ss(e + j * 8 + l0 + u);
            acc[u][0] = _mm256_add_ps(acc[u][0], _mm256_mul_ps(ev, k0));
            acc[u][1] = _mm256_add_ps(acc[u][1], _mm256_mul_ps(ev, k1));
        }
    }
#pragma GCC unroll 4 /* constant indices: the accumulators stay in registers */
    for (int u = 0; u < 4; u++) {
        __m256 dv = _mm256_set1_ps(den[l0 + u]);
        _mm256_store_ps(out[u], _mm256_div_ps(acc[u][0], dv));
        _mm256_store_ps(out[u] + 8, _mm256_div_ps(acc[u][1], dv));
    }
}

#define DI_ATTN_HEADS_FN di_attn_heads_avx2
#include "kernels/cpu/attn_heads_body.h"

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif /* __x86_64__ */
