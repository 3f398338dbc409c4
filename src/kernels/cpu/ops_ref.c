/* ops_ref.c — the CPU reference of every non-matmul op of the backend table (backend.h): the
 * spec's math written out as scalar loops, one fixed order per output, so a reader can check
 * each against model-v41.md and the faster variants (ops_simd.c) against it.
 *
 * The loops are the definitions the model had inline before the backend table existed; their
 * order of operations is unchanged, so the golden sets give the same bits. */
#include "kernels/cpu/ops_cpu.h"

#include "kernels/activations.h"
#include "kernels/numformats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void di_ref_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
    float ss = 0.0f;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    float r = 1.0f / sqrtf(ss / (float)n + eps);
    for (int64_t i = 0; i < n; i++) y[i] = (w ? w[i] : 1.0f) * (x[i] * r);
}

void di_ref_rope(const float *freq, int rot, float *x, int64_t n, int64_t pos, bool inverse) {
    float *v = x + (n - rot);
    for (int i = 0; i < rot / 2; i++) {
        float angle = (float)pos * freq[i]; /* one fp32 rounding, never accumulated */
        float c = cosf(angle), s = sinf(angle);
        if (inverse) s = -s;
        float x0 = v[2 * i], x1 = v[2 * i + 1];
        v[2 * i] = x0 * c - x1 * s;
        v[2 * i + 1] = x0 * s + x1 * c;
    }
}

void di_ref_expf_row(const float *x, size_t n, float shift, float scale, float *out) {
    for (size_t i = 0; i < n; i++) out[i] = expf((x[i] - shift) * scale);
}

/* ---------------------------------------------------------------- attention (§4.8, §5.6) */

/* attn_heads, index_scores, topk and best_k are the attention kernels' reference (attn_ref.c). */

void di_ref_compress_pool(const float *const *kv, const float *const *gate, int rows, int64_t dim, float *out) {
    for (int64_t c = 0; c < dim; c++) {
        float mx = gate[rows - 1][c];
        for (int j = 0; j < rows - 1; j++) mx = fmaxf(mx, gate[j][c]);
        float den = 0, num = 0;
        for (int j = 0; j < rows; j++) {
            float e = expf(gate[j][c] - mx);
            den += e;
            num += e * kv[j][c];
        }
        out[c] = num / den;
    }
}

/* ---------------------------------------------------------------- mHC (§5.4) */

/* Sinkhorn of §5.4 step 6: row softmax + eps, one column step, then iters-1 (row, column) pairs,
 * every denominator + eps. */
static void sinkhorn(float *c, int hc, int iters, float eps) {
    for (int a = 0; a < hc; a++) {
        float mx = c[a * hc];
        for (int b = 1; b < hc; b++) mx = fmaxf(mx, c[a * hc + b]);
        float s = 0;
        for (int b = 0; b < hc; b++) s += (c[a * hc + b] = expf(c[a * hc + b] - mx));
        for (int b = 0; b < hc; b++) c[a * hc + b] = c[a * hc + b] / s + eps;
    }
    for (int it = 0; it < iters; it++) {
        if (it > 0)
            for (int a = 0; a < hc; a++) {
                float s = 0;
                for (int b = 0; b < hc; b++) s += c[a * hc + b];
                for (int b = 0; b < hc; b++) c[a * hc + b] /= s + eps;
            }
        for (int b = 0; b < hc; b++) {
            float s = 0;
            for (int a = 0; a < hc; a++) s += c[a * hc + b];
            for (int a = 0; a < hc; a++) c[a * hc + b] /= s + eps;
        }
    }
}

/* §5.4 steps 3-6; REF projects the raw state first and scales by the RMS afterwards (§7 item 2). */
void di_ref_mhc_mix(const float *mu, const float *x, int hc, int64_t dim, const float *scale, const float *base, float eps,
                    float hc_eps, int sinkhorn_iters, float *pre, float *post, float *comb) {
    int64_t flat = (int64_t)hc * dim;
    float ss = 0;
    for (int64_t i = 0; i < flat; i++) ss += x[i] * x[i];
    float rho = 1.0f / sqrtf(ss / (float)flat + eps);
    for (int k = 0; k < hc; k++) {
        pre[k] = di_sigmoid(mu[k] * rho * scale[0] + base[k]) + hc_eps;
        post[k] = 2.0f * di_sigmoid(mu[hc + k] * rho * scale[1] + base[hc + k]);
    }
    for (int c = 0; c < hc * hc; c++) comb[c] = mu[2 * hc + c] * rho * scale[2] + base[2 * hc + c];
    sinkhorn(comb, hc, sinkhorn_iters, hc_eps);
}

/* Streamed along d (vectorises), k ascending for every element. */
void di_ref_mhc_collapse(const float *X, const float *pi, int hc, int64_t dim, float *out) {
    for (int64_t d = 0; d < dim; d++) out[d] = 0;
    for (int k = 0; k < hc; k++) {
        float p = pi[k];
        const float *xk = X + (size_t)k * (size_t)dim;
        for (int64_t d = 0; d < dim; d++) out[d] += p * xk[d];
    }
}

/* Columns per pass of the expansion: the old values of a pass fit on the stack. */
#define EXPAND_CHUNK 256

/* The definition's order for every element (post first, then a ascending), streamed along d
 * with the old columns copied first so the loops vectorise. */
void di_ref_mhc_expand(float *X, const float *o, const float *post, const float *comb, int hc, int64_t dim) {
    float old[DI_MHC_MAX][EXPAND_CHUNK];
    for (int64_t d0 = 0; d0 < dim; d0 += EXPAND_CHUNK) {
        int64_t w = dim - d0 < EXPAND_CHUNK ? dim - d0 : EXPAND_CHUNK;
        for (int a = 0; a < hc; a++) memcpy(old[a], X + a * dim + d0, (size_t)w * sizeof(float));
        const float *restrict od = o + d0;
        for (int b = 0; b < hc; b++) {
            /* restrict: o is the sublayer's output, never a row of X; without it gcc kept these
             * loops scalar */
            float *restrict xb = X + b * dim + d0;
            float pb = post[b];
            for (int64_t d = 0; d < w; d++) xb[d] = pb * od[d];
            for (int a = 0; a < hc; a++) {
                float c = comb[a * hc + b];
                const float *restrict oa = old[a];
                for (int64_t d = 0; d < w; d++) xb[d] += c * oa[d];
            }
        }
    }
}

/* ---------------------------------------------------------------- Engram (§5.3) */

void di_ref_engram_gather(const uint8_t *codes, const uint8_t *scales, const int64_t *ids, int64_t n_ids, int hd, float *out) {
    for (int64_t i = 0; i < n_ids; i++) {
        const uint8_t *cr = codes + ids[i] * hd, *sr = scales + ids[i] * (hd / 32);
        for (int c = 0; c < hd; c++) out[i * hd + c] = di_e4m3_to_f32(cr[c]) * di_ue8m0_to_f32(sr[c / 32]);
    }
}

void di_ref_engram_gate(float *h, const float *key, const float *value, const float *qk, int64_t dim, float eps) {
    float hh = 0, kk = 0, dot = 0;
    for (int64_t c = 0; c < dim; c++) {
        hh += h[c] * h[c];
        kk += key[c] * key[c];
        dot += h[c] * qk[c] * key[c];
    }
    /* per-stream RMS factors (not joint over the streams), §5.3 step 4 */
    float r = (1.0f / sqrtf(hh / (float)dim + eps)) * (1.0f / sqrtf(kk / (float)dim + eps));
    dot = dot * r * (1.0f / sqrtf((float)dim));
    float g = di_sigmoid(copysignf(sqrtf(fmaxf(fabsf(dot), 1e-6f)), dot));
    for (int64_t c = 0; c < dim; c++) h[c] += g * value[c];
}

/* ---------------------------------------------------------------- MoE (§5.7) */

/* Top-k of biased scores, ties to the lower expert id (§5.7 step 2); ids best first. */
static void select_experts(const float *score, const float *bias, int E, int k, int32_t *ids) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        float bv = 0;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int i = 0; i < j; i++) taken |= ids[i] == e;
            if (taken) continue;
            float v = score[e] + bias[e];
            if (best < 0 || v > bv) best = e, bv = v;
        }
        ids[j] = best;
    }
}

void di_ref_router(float *s, const float *bias, int E, int top_k, float temp, bool norm, float route_scale, int32_t *ids,
                   float *wts) {
    for (int e = 0; e < E; e++) s[e] = sqrtf(di_softplus(s[e] / temp));
    select_experts(s, bias, E, top_k, ids);
    float sum = 0;
    for (int j = 0; j < top_k; j++) sum += s[ids[j]];
    for (int j = 0; j < top_k; j++) {
        float w = s[ids[j]];
        if (norm && top_k > 1) w /= sum + 1e-20f;
        wts[j] = w * route_scale;
    }
}

/* The clamps as compares (a NaN gives the limit either way); gcc called libm for fminf/fmaxf. */
void di_swiglu_clamp(const float *g, const float *u, int64_t n, float lim, float *gc, float *uc) {
    for (int64_t i = 0; i < n; i++) {
        float gv = g[i], uv = u[i];
        if (lim > 0) {
            gv = gv < lim ? gv : lim;
            uv = uv > -lim ? uv : -lim;
            uv = uv < lim ? uv : lim;
        }
        gc[i] = gv, uc[i] = uv;
    }
}

void di_ref_swiglu(const float *g, const float *u, int64_t n, float lim, float weight, float *out) {
    for (int64_t i0 = 0; i0 < n; i0 += DI_SWIGLU_CHUNK) {
        int64_t len = n - i0 < DI_SWIGLU_CHUNK ? n - i0 : DI_SWIGLU_CHUNK;
        float gc[DI_SWIGLU_CHUNK], uc[DI_SWIGLU_CHUNK];
        di_swiglu_clamp(g + i0, u + i0, len, lim, gc, uc);
        for (int64_t i = 0; i < len; i++) out[i0 + i] = di_silu(gc[i]) * uc[i] * weight;
    }
}
