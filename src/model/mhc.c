/* mhc.c — mHC coefficients with Sinkhorn, collapse and expansion (mhc.h, spec §5.4). */
#include "model/mhc.h"

#include "base/error.h"
#include "base/mem.h"
#include "model/ops.h"

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

int mhc_mixes(const Model *m, const HcSite *site, const float *X, int64_t n, HcMix *out) {
    int hc = site->hc;
    int64_t flat = (int64_t)hc * site->dim, nmix = (int64_t)(2 + hc) * hc;
    if (hc <= 0 || hc > MHC_MAX || site->fn->rows != nmix || site->fn->cols != flat)
        return di_errorf("mHC: fn is [%lld, %lld], expected [%lld, %lld]", (long long)site->fn->rows, (long long)site->fn->cols,
                         (long long)nmix, (long long)flat);
    float *mu = di_malloc((size_t)(n * nmix) * sizeof *mu + 1, "mHC projections");
    if (!mu) return -1;
    /* REF projects the raw state first and scales by the RMS afterwards (§7 item 2). */
    if (model_matmul(m, site->fn, X, n, mu) != 0) {
        free(mu);
        return -1;
    }
    for (int64_t t = 0; t < n; t++) {
        const float *v = X + t * flat;
        float ss = 0;
        for (int64_t i = 0; i < flat; i++) ss += v[i] * v[i];
        float rho = 1.0f / sqrtf(ss / (float)flat + site->eps);
        float *m = mu + t * nmix;
        HcMix *o = &out[t];
        for (int k = 0; k < hc; k++) {
            o->pre[k] = op_sigmoid(m[k] * rho * site->scale[0] + site->base[k]) + site->hc_eps;
            o->post[k] = 2.0f * op_sigmoid(m[hc + k] * rho * site->scale[1] + site->base[hc + k]);
        }
        for (int c = 0; c < hc * hc; c++) o->comb[c] = m[2 * hc + c] * rho * site->scale[2] + site->base[2 * hc + c];
        sinkhorn(o->comb, hc, site->sinkhorn_iters, site->hc_eps);
    }
    free(mu);
    return 0;
}

void mhc_collapse(const float *X, const float *pi, int hc, int dim, float *out) {
    for (int d = 0; d < dim; d++) {
        float s = 0;
        for (int k = 0; k < hc; k++) s += pi[k] * X[k * dim + d];
        out[d] = s;
    }
}

void mhc_expand(float *X, const float *o, const HcMix *mix, int hc, int dim) {
    float acc[MHC_MAX];
    for (int d = 0; d < dim; d++) {
        for (int b = 0; b < hc; b++) {
            float s = mix->post[b] * o[d];
            for (int a = 0; a < hc; a++) s += mix->comb[a * hc + b] * X[a * dim + d];
            acc[b] = s;
        }
        for (int b = 0; b < hc; b++) X[b * dim + d] = acc[b];
    }
}
