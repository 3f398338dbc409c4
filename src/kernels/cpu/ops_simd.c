/* ops_simd.c — the CPU backend's faster variants of the non-matmul ops (ops_cpu.h), for the
 * AVX2 and AVX-512 tables of backend_cpu.c.
 *
 * Every op here gives the reference's bits (ops_ref.c) except swiglu, whose exp is glibc's
 * vector expf (within 3 ulp, expf_simd.h): attention's dot products keep each key's own ascending
 * order with eight keys in the eight lanes, and its weighted sum is the scalar loop vectorised
 * (kernels/vec.h: no fused multiply-add either way); the FP8 round trip is roundtrip_avx2.c. */
#include "kernels/cpu/ops_cpu.h"

#include "kernels/cpu/expf_simd.h"
#include "kernels/cpu/roundtrip_simd.h"
#include "kernels/vec.h"

#include "base/error.h"

#include <math.h>
#include <string.h>

int di_simd_op_roundtrip_fp8_block32(float *x, size_t n) {
    if (!x || n % 32) return di_errorf("fp8 round trip: length %zu is not a multiple of 32", n);
    di_simd_roundtrip_fp8_block32(x, n);
    return 0;
}

void di_simd_op_expf_row(const float *x, size_t n, float shift, float scale, float *out) {
    if (n > 0) di_simd_expf_row(x, n, shift, scale, out);
}

/* One head: eight keys' dot products at a time, each in its own ascending order. */
static void attn_head(const float *q, const float *const *keys, int64_t nk, int64_t dim, float sink, float scale, float *out,
                      float *z) {
    int64_t j = 0;
    for (; j + 8 <= nk; j += 8) {
        float dot[8];
        di_vec_dot_rows8(q, keys + j, dim, dot);
        for (int l = 0; l < 8; l++) z[j + l] = dot[l] * scale;
    }
    for (; j < nk; j++) {
        float dot = 0;
        for (int64_t c = 0; c < dim; c++) dot += q[c] * keys[j][c];
        z[j] = dot * scale;
    }
    float mx = sink;
    for (j = 0; j < nk; j++) mx = fmaxf(mx, z[j]);
    float den = expf(sink - mx);
    memset(out, 0, (size_t)dim * sizeof *out);
    for (j = 0; j < nk; j++) {
        float e = expf(z[j] - mx);
        den += e;
        di_vec_add_scaled(out, e, keys[j], dim);
    }
    for (int64_t c = 0; c < dim; c++) out[c] /= den;
}

void di_simd_attn_heads(const float *q, int64_t nh, int64_t dim, const float *const *keys, int64_t nk, const float *sink,
                        float scale, float *o, float *z) {
    for (int64_t h = 0; h < nh; h++) attn_head(q + h * dim, keys, nk, dim, sink[h], scale, o + h * dim, z);
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
