/* roundtrip_simd.h — private interface between the SIMD backend tables' FP8 round trip
 * (ops_simd.c) and its AVX2 body (roundtrip_avx2.c).  Not part of the kernel API. */
#ifndef DI_KERNELS_CPU_ROUNDTRIP_SIMD_H
#define DI_KERNELS_CPU_ROUNDTRIP_SIMD_H

#include <stddef.h>

/* di_roundtrip_fp8_block32 (numformats.h) with AVX2, bit for bit the scalar reference's result
 * (test_numformats compares them on every E4M3 rounding case); n a multiple of 32.  Only call it
 * where di_simd_available() (kernels/cpu/matmul_simd.h). */
void di_simd_roundtrip_fp8_block32(float *x, size_t n);

#endif
