/* ops.c — RMSNorm and activations (ops.h). */
#include "model/ops.h"

#include <math.h>

void op_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
    float ss = 0.0f;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    float r = 1.0f / sqrtf(ss / (float)n + eps);
    for (int64_t i = 0; i < n; i++) y[i] = (w ? w[i] : 1.0f) * (x[i] * r);
}

float op_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
/* One division, as torch's silu computes it (spec §4.2): x · sigmoid(x) rounds the reciprocal and
 * then the product, which moved routed-expert w2 inputs near an FP8 rounding midpoint by an ulp
 * and the ref-mode logits by up to 0.5 on a held-out set. */
float op_silu(float x) { return x / (1.0f + expf(-x)); }
float op_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

