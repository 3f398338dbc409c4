/* matmul_simd.h — private interface between the CPU dispatch (matmul.c) and the AVX2+FMA
 * kernels (matmul_avx2.c).  Not part of the kernel API: the model calls di_matmul (matmul.h).
 *
 * The one reduction order every SIMD path uses (batch invariance, engine-features.md §4.2):
 * the input dimension is padded with zeros to K32 = a multiple of 32 (one scale block, §3.4/§3.5);
 * output (t, r) keeps 8 float32 lanes, lane j accumulating W[r][c] * x[t][c] for c = 8g + j,
 * g = 0, 1, ... in ascending order with one fused multiply-add per term; the 8 lanes are then
 * summed as ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).  W[r][c] is decoded exactly as the reference
 * does (code value times scale, one float32 rounding), so only the summation order differs from
 * di_matmul_ref, and it never depends on n_tokens, on the row's neighbours or on the thread.
 * The one exception is di_matmul_qa's FP4 product (di_simd_fp4q_rows, matmul_fp4q_avx2.c), which
 * keeps the block order that matmul.h defines, bit-identical to di_matmul_ref_qa. */
#ifndef DI_KERNELS_CPU_MATMUL_SIMD_H
#define DI_KERNELS_CPU_MATMUL_SIMD_H

#include "kernels/matmul.h"

#include <stdbool.h>
#include <stdint.h>

/* Rows handed to one task (at most; GEMV tasks of small matrices are finer, matmul.c): a
 * multiple of 32 so an FP8 scale row-block (§3.4) never straddles two tasks and of the row
 * tiles of both kernels below. */
#define DI_SIMD_ROW_CHUNK 96

/* The activations as the kernels read them: n rows of k32 floats, zero beyond cols. */
typedef struct {
    const float *x;
    int64_t n_tokens, k32;
} DiSimdActs;

/* True when this CPU runs the AVX2+FMA kernels (checked at run time with cpuid). */
bool di_simd_available(void);

/* True when it also has AVX-512 F, BW and VL, which the AVX-512 tiles use (cpuid). */
bool di_simd_avx512_available(void);

/* Whether the AVX-512 tiles are faster than the AVX2 ones on this CPU: false on AMD family 19h
 * (Zen 4), whose units split 512-bit operations in two, true elsewhere (cpuid, probed once). */
bool di_simd_avx512_pays(void);

/* Whether the free functions (di_matmul_simd, di_simd_gemv_rows, di_simd_fp4q_rows) take their
 * AVX-512 tiles: where the CPU has them and they pay (probed once; the auto choice).  They read
 * no knob: a caller that wants the tiles on or off passes that to the *_tiles forms, as the
 * backend tables do (backend_cpu.c).  The AVX-512 tiles give the AVX2 ones' bits. */
bool di_simd_use_avx512(void);

/* How the FP8 GEMV widens E4M3 codes (matmul_fp8_avx2.c, e4m3_block_gemv_widen): the same bits
 * every way, only the speed differs.  F32: straight to float32 patterns, fastest where the
 * multiplier takes float32 subnormal operands at full speed (Zen); FP16: through FP16, whose
 * speed never depends on the codes (Intel cores take a ~100-cycle assist per subnormal operand);
 * MAPPED: float32 patterns except in the blocks the matrix's fp8_subnormal_map marks (FP16
 * throughout for a matrix without a map).  AUTO: the probe's choice below. */
typedef enum { DI_FP8_GEMV_AUTO, DI_FP8_GEMV_F32, DI_FP8_GEMV_FP16, DI_FP8_GEMV_MAPPED } DiFp8GemvRoute;

/* The probe's route (F32 where subnormal operands run at full speed, else MAPPED), measured once
 * per process; *subnormal_slowdown (when not NULL): the probe's ratio of a multiply-add chain's
 * time on a float32 subnormal operand to its time on a normal one.  Reads no knob: the parsed
 * DEEPINFER_FP8_GEMV, where it names a route, is the table's instead (backend_cpu.c). */
DiFp8GemvRoute di_simd_fp8_gemv_auto_route(double *subnormal_slowdown);

/* What a SIMD kernel table runs (its impl, backend_cpu.c), fixed when the table is chosen: the
 * AVX-512 tiles on or off and the FP8 GEMV route (F32, FP16 or MAPPED).  The same bits every way. */
typedef struct {
    bool avx512;
    DiFp8GemvRoute fp8;
} DiSimdVariant;

/* The variant the free functions run: di_simd_use_avx512() and the probe's FP8 route. */
DiSimdVariant di_simd_auto_variant(void);

/* di_simd_gemv_rows for an FP8 matrix on the given route (F32, FP16 or MAPPED; AUTO: the
 * probe's), for the variants and for tests that every route gives the same bits. */
void di_simd_fp8_gemv_rows_on(DiFp8GemvRoute route, const DiMatrix *w, const DiSimdActs *a, float *y, int64_t r0,
                              int64_t r1, float *scratch);
/* The same with the AVX-512 tiles (one token and groups) on or off (the same bits; on only where
 * di_simd_avx512_available()), for the variants (di_simd_gemv_rows_tiles). */
void di_simd_fp8_gemv_rows_tiles(DiFp8GemvRoute route, bool avx512, const DiMatrix *w, const DiSimdActs *a, float *y,
                                 int64_t r0, int64_t r1, float *scratch);

/* The probe itself, run afresh: the ratio above (best of five of each chain). */
double di_simd_subnormal_slowdown(void);

/* Floats of per-thread scratch (32-byte aligned, any contents) the GEMM (gemm) or the GEMV needs
 * for a matrix with this many columns. */
int64_t di_simd_scratch_floats(int64_t cols, bool gemm);

/* y[t][r] for r in [r0, r1) and every token: weights decoded in registers, a token at a time
 * (FP8 and FP4: four, then two, then one) -- the decode-bound few-token case.  For FP8, r0 is a multiple
 * of 32 (a scale row-block); other formats take any r0. */
void di_simd_gemv_rows(const DiMatrix *w, const DiSimdActs *a, float *y, int64_t r0, int64_t r1,
                       float *scratch);
/* The same on the variant given (the same bits), for the backend tables, which choose once at
 * load; di_simd_gemv_rows runs di_simd_auto_variant(). */
void di_simd_gemv_rows_tiles(const DiMatrix *w, const DiSimdActs *a, float *y, int64_t r0, int64_t r1, float *scratch,
                             const DiSimdVariant *v);

/* The same outputs, bit for bit, by decoding the rows once into a panel in `scratch` and
 * running a register-tiled product over the tokens. */
void di_simd_gemm_rows(const DiMatrix *w, const DiSimdActs *a, float *y, int64_t r0, int64_t r1,
                       float *scratch);

/* di_matmul_qa for an FP4 matrix (matmul_fp4q_avx2.c), in two steps: the activations are
 * prepared once per call (reordered, and their 16-bit integer image where exact) into a buffer
 * of di_simd_fp4q_prepared_floats floats (32-byte aligned), which every task then reads; each
 * task computes y[t][r] for r in [r0, r1) and every token in block order, bit-identical to
 * di_matmul_ref_qa for any token count and row range, with di_simd_fp4q_scratch_floats floats of
 * its own scratch (32-byte aligned). */
int64_t di_simd_fp4q_prepared_floats(int64_t n_tokens, int64_t cols);
void di_simd_fp4q_prepare(const DiSimdActs *a, float *prepared);
int64_t di_simd_fp4q_scratch_floats(int64_t cols);
void di_simd_fp4q_rows(const DiMatrix *w, const DiSimdActs *a, const float *prepared, float *y, int64_t r0, int64_t r1,
                       float *scratch);
/* The same with the AVX-512 one-token tile on or off as given (the same bits), for the backend
 * tables; di_simd_fp4q_rows takes di_simd_use_avx512(). */
void di_simd_fp4q_rows_tiles(const DiMatrix *w, const DiSimdActs *a, const float *prepared, float *y, int64_t r0, int64_t r1,
                             float *scratch, bool avx512);

/* Row blocks di_simd_fp4q_rows has computed on its integer path since the process started (for
 * tests: a quantised input must take it). */
long long di_simd_fp4q_integer_blocks(void);

#endif
