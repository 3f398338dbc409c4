/* ops_simd.c — the CPU backend's faster variants of the non-matmul ops (ops_cpu.h), for the
 * SIMD tables of backend_cpu.c (AVX2 and AVX-512 on x86-64, NEON on aarch64).
 *
 * Every op here gives the reference's bits (ops_ref.c) except, on x86-64, swiglu, whose exp is
 * glibc's vector expf (within 3 ulp, expf_simd.h; NEON's di_simd_expf_row has expf's own bits,
 * kernels/neon/expf_exact_neon.c); the FP8 round trip is roundtrip_avx2.c (roundtrip_neon.c).
 * The attention kernels are attn_avx2.c and attn_avx512.c (kernels/neon/attn_neon.c). */
#include "kernels/cpu/ops_cpu.h"

#include "kernels/cpu/expf_simd.h"
#include "kernels/cpu/roundtrip_simd.h"

#include "base/error.h"


int di_simd_op_roundtrip_fp8_block32(float *x, size_t n) {
    if (!x || n % 32) return di_errorf("fp8 round trip: length %zu is not a multiple of 32", n);
    di_simd_roundtrip_fp8_block32(x, n);
    return 0;
}

void di_simd_op_expf_row(const float *x, size_t n, float shift, float scale, float *out) {
    if (n > 0) di_simd_expf_row(x, n, shift, scale, out);
}

/* silu's expf(-g) eight at a time, the same one division (a vector divide). */
void di_simd_swiglu(const float *g, const float *u, int64_t n, float lim, float weight, float *out) {
    for (int64_t i0 = 0; i0 < n; i0 += DI_SWIGLU_CHUNK) {
        int64_t len = n - i0 < DI_SWIGLU_CHUNK ? n - i0 : DI_SWIGLU_CHUNK;
        float gc[DI_SWIGLU_CHUNK], uc[DI_SWIGLU_CHUNK], e[DI_SWIGLU_CHUNK];
        di_swiglu_clamp(g + i0, u + i0, len, lim, gc, uc);
        di_simd_expf_row(gc, (size_t)len, 0.0f, -1.0f, e);
        for (int64_t i = 0; i < len; i++) out[i0 + i] = gc[i] / (1.0f + e[i]) * uc[i] * weight;
    }
}
