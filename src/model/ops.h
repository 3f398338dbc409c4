/* ops.h — the small float32 building blocks of the V4.1 forward pass: RMSNorm and the scalar
 * activations.
 *
 * All activations are float32 (the golden sets are computed that way, golden-v41/README.md §4);
 * every function reduces in one fixed order so a row's result never depends on the batch. */
#ifndef DI_MODEL_OPS_H
#define DI_MODEL_OPS_H

#include <stdbool.h>
#include <stdint.h>

/* y = w ⊙ (x · rsqrt(mean(x²) + eps)) over n values (§4.1). w may be NULL (unweighted). y may alias x. */
void op_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps);

/* 1 / (1 + e^-x) and x / (1 + e^-x): each one division, as torch computes them (§4.2). */
float op_sigmoid(float x);
float op_silu(float x);
/* log1p(e^x), linear above 20 like torch's default threshold (§4.2). */
float op_softplus(float x);

#endif
