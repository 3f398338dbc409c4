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
float op_silu(float x) { return x * op_sigmoid(x); }
float op_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

