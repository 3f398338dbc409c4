/* expf_row.h — exp over a row of scaled differences, the numerator of a softmax.
 *
 * The sampler turns every logits row into probabilities exp((x - max) / T); at batch 64 on a
 * small vocabulary that loop was a third of the engine's per-step overhead with the scalar expf.
 * Where the matmuls take their AVX2 kernels the row goes through glibc's vector expf (libmvec)
 * eight values at a time; otherwise, and with DEEPINFER_KERNELS=ref, through expf.  The two
 * differ by at most 3 ulp (measured against expf on 2M points of [-104, 6]; 56 % equal, 38 % one
 * ulp apart), far below anything a sampling decision can see.  Every value of a row takes the same path (the tail is
 * padded to a full vector), so the result depends on the value alone, never on its position or
 * on the row's length. */
#ifndef DI_KERNELS_EXPF_ROW_H
#define DI_KERNELS_EXPF_ROW_H

#include <stddef.h>

/* out[i] = expf((x[i] - shift) * scale) for i < n, the difference and product rounded to float
 * as written.  x and out may be the same array. */
void di_expf_row(const float *x, size_t n, float shift, float scale, float *out);

#endif
