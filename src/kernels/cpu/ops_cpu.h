/* ops_cpu.h — private interface of the CPU backend (backend_cpu.c): the reference ops
 * (ops_ref.c), their SIMD variants (ops_simd.c) and the matmul entries of matmul.c that take the
 * variant's tile choice as a parameter.  Not part of the kernel API: the model calls the table
 * (kernels/backend.h).  Each op's contract is the table's. */
#ifndef DI_KERNELS_CPU_OPS_CPU_H
#define DI_KERNELS_CPU_OPS_CPU_H

#include "kernels/backend.h"
#include "kernels/cpu/matmul_simd.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DI_MHC_MAX 16       /* streams the mHC ops take (the model checks its hc against it) */
#define DI_SWIGLU_CHUNK 256 /* values per stack buffer of the SwiGLU ops */

void di_ref_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps);
void di_ref_rope(const float *freq, int rot, float *x, int64_t n, int64_t pos, bool inverse);
void di_ref_expf_row(const float *x, size_t n, float shift, float scale, float *out);
void di_ref_compress_pool(const float *const *kv, const float *const *gate, int rows, int64_t dim, float *out);
void di_ref_mhc_mix(const float *mu, const float *x, int hc, int64_t dim, const float *scale, const float *base, float eps,
                    float hc_eps, int sinkhorn_iters, float *pre, float *post, float *comb);
void di_ref_mhc_collapse(const float *X, const float *pi, int hc, int64_t dim, float *out);
void di_ref_mhc_expand(float *X, const float *o, const float *post, const float *comb, int hc, int64_t dim);
void di_ref_engram_gather(const uint8_t *codes, const uint8_t *scales, const int64_t *ids, int64_t n_ids, int hd, float *out);
void di_ref_engram_gate(float *h, const float *key, const float *value, const float *qk, int64_t dim, float eps);
void di_ref_router(float *scores, const float *bias, int n_experts, int top_k, float temp, bool norm, float route_scale,
                   int32_t *ids, float *wts);
void di_ref_swiglu(const float *g, const float *u, int64_t n, float lim, float weight, float *out);
/* SwiGLU's clamps of n <= DI_SWIGLU_CHUNK values into gc / uc (shared by both variants). */
void di_swiglu_clamp(const float *g, const float *u, int64_t n, float lim, float *gc, float *uc);

/* SIMD variants (ops_simd.c); only where di_simd_available(). */
int di_simd_op_roundtrip_fp8_block32(float *x, size_t n);
void di_simd_op_expf_row(const float *x, size_t n, float shift, float scale, float *out);
void di_simd_swiglu(const float *g, const float *u, int64_t n, float lim, float weight, float *out);

/* matmul.c: the SIMD product on a table's variant (the AVX-512 tiles on or off, the FP8 route:
 * the same bits every way), on the caller's scratch, and the scratch it needs; the variant is
 * the table's, fixed when it was chosen, never read per call. */
int di_cpu_matmul_simd_into(const DiSimdVariant *v, DiThreadPool *pool, const DiMatrix *w, const float *x, int64_t n, float *y,
                            bool qa, float *scratch, int64_t scratch_floats);
int64_t di_cpu_matmul_simd_scratch_floats(const DiMatrix *w, int64_t n, int threads, bool qa);
/* matmul.c: the tables' matrix_prepare: for the reference (a check, nothing added) and for a
 * SIMD variant (the FP8 subnormal map where its FP8 GEMV route is MAPPED). */
int di_cpu_matrix_prepare_ref(DiMatrix *w, void **owned);
int di_cpu_matrix_prepare_simd(const DiSimdVariant *v, DiMatrix *w, void **owned);

#endif
