/* activations.h — the scalar activations of V4.1 (§4.2), written as torch computes them.
 *
 * Shared by the CPU reference kernels and the tests that check them: one definition, so "silu"
 * means the same bits everywhere. */
#ifndef DI_KERNELS_ACTIVATIONS_H
#define DI_KERNELS_ACTIVATIONS_H

#include <math.h>

/* 1 / (1 + e^-x): one division. */
static inline float di_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
/* x / (1 + e^-x): one division, as torch's silu (spec §4.2).  x · sigmoid(x) rounds the
 * reciprocal and then the product, which moved routed-expert w2 inputs near an FP8 rounding
 * midpoint by an ulp and the ref-mode logits by up to 0.5 on a held-out set. */
static inline float di_silu(float x) { return x / (1.0f + expf(-x)); }
/* log1p(e^x), linear above 20 like torch's default threshold. */
static inline float di_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

#endif
