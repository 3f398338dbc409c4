/* moe.h — the mixture-of-experts feed-forward of V4.1 (§5.7): sqrt-softplus router whose bias
 * only selects, renormalised weights × routed_scaling_factor, SwiGLU experts with the one-sided
 * gate clamp and two-sided up clamp, routed outputs summed in ascending expert id, then the
 * shared expert. */
#ifndef DI_MODEL_MOE_H
#define DI_MODEL_MOE_H

#include "model/model.h"

/* y[n][D] = MoE(f[n][D]) with the layer's experts and top_k.  selected (may be NULL) receives
 * [n][top_k] expert ids, best (highest biased score) first.  load (may be NULL) is the layer's
 * row of expert load counts: load[e] grows by the rows routed to expert e (n x top_k in all). */
int moe_forward(const Model *m, const LayerWeights *lw, int top_k, const float *f, int64_t n, float *y, int32_t *selected,
                int64_t *load);

#endif
