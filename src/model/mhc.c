/* mhc.c — mHC coefficients of a site (mhc.h, spec §5.4): the projection and the per-row mix on
 * the backend (kernels/backend.h: mhc_mix with the Sinkhorn, mhc_collapse, mhc_expand). */
#include "model/mhc.h"

#include "base/error.h"
#include "model/workspace.h"


typedef struct {
    const Model *m;
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
        HcMix *o = &j->out[t];
        j->m->be->mhc_mix(j->mu + t * nmix, j->X + t * flat, hc, site->dim, site->scale, site->base, site->eps, site->hc_eps,
                          site->sinkhorn_iters, o->pre, o->post, o->comb);
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
    MixRows job = {m, site, X, mu, out};
    model_for_rows(m, n, mix_rows, &job);
    return 0;
}
