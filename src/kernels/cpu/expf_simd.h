/* expf_simd.h — private interface between di_expf_row (kernels/expf_row.c) and its AVX2
 * version (expf_avx2.c).  Not part of the kernel API. */
#ifndef DI_KERNELS_CPU_EXPF_SIMD_H
#define DI_KERNELS_CPU_EXPF_SIMD_H

#include <stddef.h>

/* di_expf_row with glibc's AVX2 vector expf.  Only call it where the AVX2 kernels run. */
void di_simd_expf_row(const float *x, size_t n, float shift, float scale, float *out);

#endif
