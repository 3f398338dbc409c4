/* matmul.h — the narrow kernel interface the model calls for every projection.
 *
 * A weight matrix is described by DiMatrix in the exact storage format of the official
 * checkpoint (no conversion at load time), and di_matmul computes
 *     y[t][r] = sum_c W[r][c] * x[t][c]      for t < n_tokens, r < rows
 * with float32 activations.  Batch invariance (engine-features.md §4): the value of y[t][r] must
 * not depend on n_tokens, on t, or on the thread count — every implementation reduces each
 * output in one fixed order per row.  di_matmul_ref is the readable scalar definition; the
 * optimised backend (SIMD, threads) must agree with it to float32 rounding.
 *
 * Activation quantisation (the reference's FP8 round trip of GEMM inputs, §4.3) is the caller's
 * choice and is applied to x before the call (numformats.h), so one kernel serves all modes. */
#ifndef DI_KERNELS_MATMUL_H
#define DI_KERNELS_MATMUL_H

#include "base/threadpool.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct DiKernelBackend DiKernelBackend; /* kernels/backend.h */

typedef enum {
    DI_MAT_F32 = 0,  /* data: float[rows][cols] */
    DI_MAT_BF16,     /* data: uint16_t[rows][cols] */
    DI_MAT_FP8_BLOCK,/* data: e4m3[rows][cols]; scale: ue8m0[ceil(rows/32)][ceil(cols/32)] (§3.4) */
    DI_MAT_FP4_ROW32 /* data: packed e2m1[rows][cols/2], low nibble = even column;
                        scale: ue8m0[rows][cols/32] (§3.5) */
} DiMatFormat;

typedef struct {
    DiMatFormat format;
    int64_t rows, cols; /* logical [out, in] */
    const void *data;
    const uint8_t *scale; /* FP8 / FP4 only */
    /* Optional speed hint for the FP8 GEMV, set by di_matrix_prepare (NULL: none): one byte per
     * 8-row group and 32-column block, map[(r / 8) * ceil(cols / 32) + c / 32], non-zero where a
     * row of the group holds an E4M3 subnormal code (exponent 0, mantissa not 0) in the block.
     * Results never depend on it: a wrong map costs speed, never a bit. */
    const uint8_t *fp8_subnormal_map;
} DiMatrix;

/* Readies a weight matrix for the free SIMD functions (di_matmul_simd, di_simd_gemv_rows: the
 * cpuid / probe choice; a model's table readies its own, backend.h matrix_prepare): speed only,
 * the results are the same with or without it.  Today: on CPUs that take an assist on float32
 * subnormal operands (the FP8 GEMV route "mapped", di_backend_cpu_fp8_gemv_route), an FP8 matrix
 * gets its fp8_subnormal_map, so the GEMV widens only the blocks that hold subnormal codes
 * through FP16 (this reads every byte of the matrix once).  Reads no knob.  *owned: memory to
 * free() after the last use of w, NULL when nothing was added.  -1 with an error for an invalid matrix or out of memory. */
int di_matrix_prepare(DiMatrix *w, void **owned);

/* Bytes of di_matrix_fp8_subnormal_map's map for an FP8 matrix, and the map itself (map: that many
 * bytes), whatever the CPU. */
int64_t di_matrix_fp8_subnormal_map_bytes(const DiMatrix *w);
void di_matrix_fp8_subnormal_map(const DiMatrix *w, uint8_t *map);

/* Checks the description (format, sizes, pointers, FP4 column count even and a multiple of 32). */
int di_matrix_validate(const DiMatrix *w, const char *name);
/* Bytes of data / of scale the description refers to (for loaders and memory accounting). */
int64_t di_matrix_data_bytes(const DiMatrix *w);
int64_t di_matrix_scale_bytes(const DiMatrix *w);

/* Rows r0 .. r0+len-1 of w as a matrix of their own: same format, pointers into w's storage (scales
 * and fp8_subnormal_map offset with the rows).  An FP8 matrix's r0 must be a multiple of
 * di_matrix_row_align (32: a scale row-block is never split); -1 with an error for such an r0 or
 * a range outside w. */
int di_matrix_rows(const DiMatrix *w, int64_t r0, int64_t len, DiMatrix *out);
/* The row granule di_matrix_rows takes: 32 for FP8, 1 for the other formats. */
int64_t di_matrix_row_align(const DiMatrix *w);

/* out[c] = W[r][c] for one row, exactly (every stored value is exact in float32). */
int di_matrix_row(const DiMatrix *w, int64_t r, float *out);

/* Readable reference: scalar, single thread, ascending-c accumulation in float32. */
int di_matmul_ref(const DiMatrix *w, const float *x, int64_t n_tokens, float *y);

/* y = W x on the kernel table be (kernels/backend.h, chosen once: di_backend_cpu_select), with
 * scratch allocated for this one call: for tests and tools; the model passes its workspace to
 * di_backend_matmul instead.  pool may be NULL.  -1 with an error for a NULL be or bad input. */
int di_matmul(const DiKernelBackend *be, DiThreadPool *pool, const DiMatrix *w, const float *x, int64_t n_tokens, float *y);

/* The AVX2+FMA path itself (an error on a CPU without AVX2 and FMA), the SIMD tables' product,
 * with the AVX-512 tiles where they pay and the probe's FP8 route (cpu/matmul_simd.h's auto
 * variant).  Bit-identical for every n_tokens, token position and thread count; agrees with
 * di_matmul_ref up to float32 summation order (8 lanes along the input, see cpu/matmul_simd.h).  pool may be NULL (one thread). */
int di_matmul_simd(DiThreadPool *pool, const DiMatrix *w, const float *x, int64_t n_tokens, float *y);

/* The same product for activations the caller quantised per §4.3 (the reference numerics),
 * with FP4 weights reduced in block order, the structure of the reference's fp4_gemm: output
 * (t, r) keeps 8 lanes L = 4h + k (h < 2, k < 4); in every 32-column block lane L sums its
 * columns c = 32kb + 8k + h + 2g (g = 0..3) as p = d*x, p = fma(d, x, p) (d: twice the E2M1
 * code value), then acc_L = fma(p, 2^(b-128), acc_L) with b the block's scale byte; y = the lane
 * sum ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).  On a quantised input each block sum is exact, so
 * the kernels may compute it with integer multiply-adds (matmul_fp4q_avx2.c) -- any input gives
 * the defined result, only slower.  Other formats: exactly di_matmul / di_matmul_ref.
 * di_matmul_ref_qa is the readable definition; di_matmul_qa (on the table be, as di_matmul) is
 * bit-identical to it for FP4, for every n_tokens and thread count. */
int di_matmul_ref_qa(const DiMatrix *w, const float *x, int64_t n_tokens, float *y);
int di_matmul_qa(const DiKernelBackend *be, DiThreadPool *pool, const DiMatrix *w, const float *x, int64_t n_tokens,
                 float *y);

#endif
