/* ops.c — RMSNorm, activations and the projection wrapper (ops.h). */
#include "model/ops.h"

#include "base/error.h"
#include "base/mem.h"
#include "kernels/numformats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void op_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
    float ss = 0.0f;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    float r = 1.0f / sqrtf(ss / (float)n + eps);
    for (int64_t i = 0; i < n; i++) y[i] = (w ? w[i] : 1.0f) * (x[i] * r);
}

float op_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
float op_silu(float x) { return x * op_sigmoid(x); }
float op_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

int op_linear(DiThreadPool *pool, const DiMatrix *w, const float *x, int64_t n, float *y, bool act_quant) {
    if (!w || !x || !y || n < 0) return di_errorf("linear: invalid arguments");
    if (!act_quant) return di_matmul(pool, w, x, n, y);
    size_t count;
    if (!di_mul_size((size_t)n, (size_t)w->cols, &count)) return di_errorf("linear: size overflow");
    float *q = di_malloc(count * sizeof *q + 1, "quantised activations");
    if (!q) return -1;
    memcpy(q, x, count * sizeof *q);
    int rc = di_roundtrip_fp8_block32(q, count);
    if (rc == 0) rc = di_matmul(pool, w, q, n, y);
    free(q);
    return rc;
}
