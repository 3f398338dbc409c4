/* expf_simd.h — private interface between the SIMD tables' expf_row op (ops_simd.c) and its AVX2
 * body (expf_avx2.c; NEON: kernels/neon/expf_exact_neon.c).  Not part of the kernel API: callers reach it through a backend table.
 *
 * The sampler turns every logits row into probabilities exp((x - max) / T); at batch 64 on a
 * small vocabulary that loop was a third of the engine's per-step overhead with the scalar expf,
 * so the SIMD tables take glibc's vector expf (libmvec) eight values at a time, the reference
 * table expf itself.  The two differ by at most 3 ulp (measured against expf on 2M points of
 * [-104, 6]; 56 % equal, 38 % one ulp apart), far below anything a sampling decision can see.
 * Every value of a row takes the same path (the tail is padded to a full vector), so the result
 * depends on the value alone, never on its position or on the row's length. */
#ifndef DI_KERNELS_CPU_EXPF_SIMD_H
#define DI_KERNELS_CPU_EXPF_SIMD_H

#include <stddef.h>

/* out[i] = expf((x[i] - shift) * scale) with glibc's AVX2 vector expf (on aarch64: expf's own
 * bits four at a time, kernels/neon/expf_exact_neon.c), the difference and product rounded to
 * float as written; x and out may be the same array.  Only call it where the SIMD kernels run. */
void di_simd_expf_row(const float *x, size_t n, float shift, float scale, float *out);

#endif
