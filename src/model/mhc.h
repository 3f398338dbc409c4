/* mhc.h — manifold-constrained hyper-connections, single-pass schedule (§5.4, §5.5): the
 * per-token mixing coefficients of one site (pre, post, and the Sinkhorn-normalised combine
 * matrix), the collapse of the hc residual streams into one sub-layer input, and the expansion
 * of the sub-layer output back into the streams. */
#ifndef DI_MODEL_MHC_H
#define DI_MODEL_MHC_H

#include "kernels/matmul.h"
#include "model/model.h"

#include <stdint.h>

#define MHC_MAX 16 /* = DI_MHC_MAX of the CPU kernels */

typedef struct {
    float pre[MHC_MAX], post[MHC_MAX];
    float comb[MHC_MAX * MHC_MAX]; /* comb[a*hc + b]: source stream a -> destination stream b */
} HcMix;

typedef struct {
    const DiMatrix *fn; /* F32 [(2+hc)·hc, hc·D] */
    const float *base;  /* [(2+hc)·hc] */
    const float *scale; /* [3] */
    int hc, dim, sinkhorn_iters;
    float eps, hc_eps;
} HcSite;

/* Coefficients for n tokens of state X [n][hc][D]; out[n]. */
int mhc_mixes(const Model *m, const HcSite *site, const float *X, int64_t n, HcMix *out);
/* Collapse (out[D] = Σ_k pi[k]·X[k]) and expansion (X[b] = post[b]·o + Σ_a comb[a][b]·X[a]) of
 * one token are backend ops: m->be->mhc_collapse, m->be->mhc_expand. */

#endif
