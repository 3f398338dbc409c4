/* mhc.c — mHC coefficients with Sinkhorn, collapse and expansion (mhc.h, spec §5.4). */
#include "model/mhc.h"

#include "base/error.h"
#include "model/ops.h"
#include "model/workspace.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

typedef struct {
    const HcSite *site;
    const float *X, *mu;
    HcMix *out;
} MixRows;

/* Rows r0..r1-1 of §5.4 steps 3-6 from their projections mu. */
static void mix_rows(void *ctx, int64_t r0, int64_t r1) {
    const MixRows *j = ctx;
    const HcSite *site = j->site;
    int hc = site->hc;
    int64_t flat = (int64_t)hc * site->dim, nmix = (int64_t)(2 + hc) * hc;
    for (int64_t t = r0; t < r1; t++) {
        const float *v = j->X + t * flat;
        float ss = 0;
        for (int64_t i = 0; i < flat; i++) ss += v[i] * v[i];
        float rho = 1.0f / sqrtf(ss / (float)flat + site->eps);
        const float *mu = j->mu + t * nmix;
        HcMix *o = &j->out[t];
        for (int k = 0; k < hc; k++) {
            o->pre[k] = op_sigmoid(mu[k] * rho * site->scale[0] + site->base[k]) + site->hc_eps;
            o->post[k] = 2.0f * op_sigmoid(mu[hc + k] * rho * site->scale[1] + site->base[hc + k]);
        }
        for (int c = 0; c < hc * hc; c++) o->comb[c] = mu[2 * hc + c] * rho * site->scale[2] + site->base[2 * hc + c];
        sinkhorn(o->comb, hc, site->sinkhorn_iters, site->hc_eps);
    }
}

int mhc_mixes(const Model *m, const HcSite *site, const float *X, int64_t n, HcMix *out) {
    int hc = site->hc;
    int64_t flat = (int64_t)hc * site->dim, nmix = (int64_t)(2 + hc) * hc;
    if (hc <= 0 || hc > MHC_MAX || site->fn->rows != nmix || site->fn->cols != flat)
        return di_errorf("mHC: fn is [%lld, %lld], expected [%lld, %lld]", (long long)site->fn->rows, (long long)site->fn->cols,
                         (long long)nmix, (long long)flat);
    if (!m->ws || n > m->ws->rows || hc > m->d.hc_mult)
        return di_errorf("mHC: %lld rows of %d streams exceed the workspace", (long long)n, hc);
    float *mu = m->ws->block.mix_proj;
    /* REF projects the raw state first and scales by the RMS afterwards (§7 item 2). */
    if (model_matmul(m, site->fn, X, n, mu) != 0) return -1;
    MixRows job = {site, X, mu, out};
    model_for_rows(m, n, mix_rows, &job);
    return 0;
}

/* out[d] = 0 + Σ_k pi[k]·X[k][d], k ascending per element, streamed along d (vectorises).
 * out may alias none of X. */
void mhc_collapse(const float *X, const float *pi, int hc, int dim, float *out) {
    for (int d = 0; d < dim; d++) out[d] = 0;
    for (int k = 0; k < hc; k++) {
        float p = pi[k];
        const float *xk = X + (size_t)k * dim;
        for (int d = 0; d < dim; d++) out[d] += p * xk[d];
    }
}

/* Columns per pass of mhc_expand: the old values of a pass fit on the stack (MHC_MAX rows). */
#define EXPAND_CHUNK 256

/* X'[b][d] = post[b]·o[d] + Σ_a comb[a][b]·X[a][d], a ascending: the definition's order for
 * every element, but streamed along d (old columns copied first) so the loops vectorise. */
void mhc_expand(float *X, const float *o, const HcMix *mix, int hc, int dim) {
    float old[MHC_MAX][EXPAND_CHUNK];
    for (int d0 = 0; d0 < dim; d0 += EXPAND_CHUNK) {
        int w = dim - d0 < EXPAND_CHUNK ? dim - d0 : EXPAND_CHUNK;
        for (int a = 0; a < hc; a++) memcpy(old[a], X + a * dim + d0, (size_t)w * sizeof(float));
        const float *restrict od = o + d0;
        for (int b = 0; b < hc; b++) {
            /* restrict: o is the sublayer's output, never a row of X; without it gcc kept these
             * loops scalar (one vmovss per element, 2-3 % of a decode step's samples) */
            float *restrict xb = X + b * dim + d0;
            float post = mix->post[b];
            for (int d = 0; d < w; d++) xb[d] = post * od[d];
            for (int a = 0; a < hc; a++) {
                float c = mix->comb[a * hc + b];
                const float *restrict oa = old[a];
                for (int d = 0; d < w; d++) xb[d] += c * oa[d];
            }
        }
    }
}
