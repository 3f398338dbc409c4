/* ops.h — the small float32 building blocks of the V4.1 forward pass: RMSNorm, the scalar
 * activations, and the projection wrapper that applies the reference's optional FP8 activation
 * round trip before a quantised GEMM.
 *
 * All activations are float32 (the golden sets are computed that way, golden-v41/README.md §4);
 * every function reduces in one fixed order so a row's result never depends on the batch. */
#ifndef DI_MODEL_OPS_H
#define DI_MODEL_OPS_H

#include "base/threadpool.h"
#include "kernels/matmul.h"

#include <stdbool.h>
#include <stdint.h>

/* y = w ⊙ (x · rsqrt(mean(x²) + eps)) over n values (§4.1). w may be NULL (unweighted). y may alias x. */
void op_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps);

float op_sigmoid(float x);
float op_silu(float x);
/* log1p(e^x), linear above 20 like torch's default threshold (§4.2). */
float op_softplus(float x);

/* Projection y[t] = W · x[t] for n rows.  With act_quant, each input row first goes through the
 * FP8 block-32 round trip (§4.3; `ref` mode) on a private copy (x is not modified). */
int op_linear(DiThreadPool *pool, const DiMatrix *w, const float *x, int64_t n, float *y, bool act_quant);

#endif
