/* matmul_avx2.c — the AVX2+FMA kernels behind di_matmul: the CPU check, the GEMV dispatch by
 * weight format (F32 and BF16 here, FP8 in matmul_fp8_avx2.c, FP4 in matmul_fp4_avx2.c) and the
 * panel-decoding GEMM, which gives the GEMVs' bits.  Shared decoders: matmul_avx2.h; the GEMM's
 * panel and token loops: gemm_panel_body.h (shared with the NEON kernels).
 *
 * Why two kernels: at n = 1 every weight is used once, so decoding into registers right before
 * its multiply-add is all there is to do and the kernel is bound by decode and memory.  At larger
 * n the decode is amortised: a chunk of rows is decoded once into a float32 panel and a 3x4
 * (rows x tokens) register tile of accumulators streams it against the tokens.  Both follow the
 * order fixed in matmul_simd.h (8 lanes along the input, ascending groups, fixed lane sum), so a
 * row's result is the same whichever kernel, tile, batch or thread computes it.
 *
 * Instruction set: AVX2 + FMA + F16C only (the deployment target, Zen 3, has no AVX-512); the target
 * pragma below also keeps gcc from using AVX-512 registers when built with -march=native on a
 * newer machine, so what is measured is what the target runs.  matmul.c checks cpuid first. */
#if defined(__x86_64__) /* x86-64 only; an aarch64 build takes kernels/neon/ instead */
#if !defined(__clang__) /* clang (the fuzz build) compiles this file for -march=native as is */
#pragma GCC target("avx2,fma,f16c,no-avx512f")
#endif

#include "kernels/cpu/matmul_avx2.h"


#include <cpuid.h>
#include <stdatomic.h>
#include <stdlib.h>

#define TILE_ROWS 3    /* GEMM register tile: 3 rows x 4 tokens = 12 accumulators, + 3 weight */
#define TILE_TOKENS 4  /*   registers + 1 activation register = the 16 ymm registers of AVX2 */
#define PANEL_ROWS 48  /* rows decoded into one GEMM panel (a multiple of TILE_ROWS) */
#define PANEL_K 256    /* input columns per panel chunk: 48 x 256 floats = 48 KiB, near L1/L2 */
#define TOKEN_BLOCK 128 /* tokens whose accumulators persist across the chunks of one panel */

bool di_simd_available(void) {
    __builtin_cpu_init();
#if defined(__clang__) /* clang 14 does not know "f16c" here: read CPUID.1:ECX bit 29 */
    unsigned eax, ebx, ecx, edx;
    bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && ((ecx >> 29) & 1);
#else
    bool f16c = __builtin_cpu_supports("f16c");
#endif
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
}

bool di_simd_avx512_available(void) {
    __builtin_cpu_init();
    return di_simd_available() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}

/* AMD family 19h (Zen 4; Zen 3 has no AVX-512) runs a 512-bit operation as two 256-bit halves,
 * so a tile that does two rows per instruction saves it no execution slots: there the AVX-512
 * tiles measured 0.75-0.89x of the AVX2 ones (bench/kernels_cpu.md), against 1.05-1.17x on an
 * Intel Xeon.  Read once: cpuid may trap to the hypervisor, and this is asked at every call. */
static int avx512_pays_probe(void) {
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return 1;
    bool amd = ebx == 0x68747541u && edx == 0x69746e65u && ecx == 0x444d4163u; /* "AuthenticAMD" */
    if (!amd || !__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 1;
    unsigned family = ((eax >> 8) & 0xF) + ((eax >> 20) & 0xFF);
    return family != 0x19;
}

bool di_simd_avx512_pays(void) {
    static atomic_int pays = -1; /* -1: not probed yet; the probe is idempotent, so a race is harmless */
    int p = atomic_load_explicit(&pays, memory_order_relaxed);
    if (p < 0) {
        p = avx512_pays_probe();
        atomic_store_explicit(&pays, p, memory_order_relaxed);
    }
    return p != 0;
}

bool di_simd_use_avx512(void) { return di_simd_avx512_available() && di_simd_avx512_pays(); }

int64_t di_simd_scratch_floats(int64_t cols, bool gemm) {
    /* GEMM: the panel chunk, then the accumulators of one token block (8 lanes each);
     * GEMV: FP8's scaled activations of four tokens, two widenings each, or FP4's permuted ones of
     * four tokens (k32 floats each) */
    if (gemm) return (int64_t)PANEL_ROWS * PANEL_K + (int64_t)PANEL_ROWS * TOKEN_BLOCK * GROUP;
    return 8 * ((cols + BLOCK - 1) / BLOCK * BLOCK);
}

/* nt tokens (2, 3 or 4, a constant) against rows r0 .. r0+nr-1 (nr <= QUAD_ROWS): each block is
 * read and decoded once for all of them (F32 and BF16 below their GEMM switch; a token at a time
 * re-read the matrix per token).  Every (row, token) accumulator sees gemv_tile's sequence. */
static inline __attribute__((always_inline)) void gemv_group_tile(DiMatFormat format, const DiMatrix *w, const float *x,
                                                                  int64_t k32, int nt, int64_t r0, int nr, float *y) {
    __m256 acc[QUAD_ROWS][4];
    #pragma GCC unroll 16
    for (int i = 0; i < QUAD_ROWS; i++)
        #pragma GCC unroll 16
        for (int t = 0; t < nt; t++) acc[i][t] = _mm256_setzero_ps();
    int64_t ahead_rows = prefetch_rows_ahead(w, r0, nr);
    for (int64_t kb = 0; kb < k32 / BLOCK; kb++) {
        #pragma GCC unroll 16
        for (int i = 0; i < nr; i++) {
            prefetch_block(format, w, r0 + i + ahead_rows, kb);
            __m256 wv[4];
            decode_block(format, w, r0 + i, kb, wv);
            ACCUMULATE_TOKENS(acc[i], wv, x + kb * BLOCK, k32, nt);
        }
    }
    #pragma GCC unroll 16
    for (int i = 0; i < nr; i++)
        #pragma GCC unroll 16
        for (int t = 0; t < nt; t++) y[t * w->rows + r0 + i] = lane_sum(acc[i][t]);
}

static inline __attribute__((always_inline)) void gemv_group(DiMatFormat format, const DiMatrix *w, const DiSimdActs *a,
                                                             int64_t t, int nt, float *y, int64_t r0, int64_t r1) {
    const float *x = a->x + t * a->k32;
    float *yt = y + t * w->rows;
    int64_t r = r0;
    for (; r + QUAD_ROWS <= r1; r += QUAD_ROWS) gemv_group_tile(format, w, x, a->k32, nt, r, QUAD_ROWS, yt);
    for (; r < r1; r++) gemv_group_tile(format, w, x, a->k32, nt, r, 1, yt);
}

/* One format's GEMV, specialised by the constant `format` so no switch is left in the loops:
 * tokens in fours (three, twos), the rest one at a time -- the groups gemv_token_group forms,
 * written out because the one-loop form FP8 and FP4 use measured 0.94-0.99x for BF16 at three
 * tokens (kernel_ab 1024x1024, Intel Xeon). */
static inline __attribute__((always_inline)) void gemv_rows(DiMatFormat format, const DiMatrix *w,
                                                            const DiSimdActs *a, float *y, int64_t r0, int64_t r1) {
    int64_t t0 = 0;
    for (; t0 + 4 <= a->n_tokens; t0 += 4) gemv_group(format, w, a, t0, 4, y, r0, r1);
    if (a->n_tokens - t0 == 3) gemv_group(format, w, a, t0, 3, y, r0, r1), t0 += 3;
    for (; t0 + 2 <= a->n_tokens; t0 += 2) gemv_group(format, w, a, t0, 2, y, r0, r1);
    for (int64_t t = t0; t < a->n_tokens; t++) {
        const float *x = a->x + t * a->k32;
        float *yt = y + t * w->rows;
        int64_t r = r0;
        for (; r + GEMV_ROWS <= r1; r += GEMV_ROWS) gemv_tile(format, w, x, a->k32, r, GEMV_ROWS, yt);
        for (; r < r1; r++) gemv_tile(format, w, x, a->k32, r, 1, yt);
    }
}

void di_simd_gemv_rows_tiles(const DiMatrix *w, const DiSimdActs *a, float *y, int64_t r0, int64_t r1, float *scratch,
                             const DiSimdVariant *v) {
    switch (w->format) {
    case DI_MAT_F32: gemv_rows(DI_MAT_F32, w, a, y, r0, r1); break;
    case DI_MAT_BF16: gemv_rows(DI_MAT_BF16, w, a, y, r0, r1); break;
    case DI_MAT_FP8_BLOCK: di_simd_fp8_gemv_rows_tiles(v->fp8, v->avx512, w, a, y, r0, r1, scratch); break;
    case DI_MAT_FP4_ROW32: di_simd_fp4_gemv_rows(w, a, y, r0, r1, scratch, v->avx512); break;
    }
}

DiSimdVariant di_simd_auto_variant(void) {
    return (DiSimdVariant){di_simd_use_avx512(), di_simd_fp8_gemv_auto_route(NULL)};
}

/* ---- GEMM: a decoded panel against a block of tokens, accumulators kept across chunks ------ */

/* Where the accumulator of panel row i and token j of the block lives in `accs` (in ymm units):
 * token-major, so that the final lane sums write each token's outputs y[t][r0 ..] contiguously.
 * Row-major, the 128 stores of one row hit addresses rows * 4 bytes apart, 4 KiB for a
 * 1024-row matrix, which all fall in one L1 set; the lane-sum loop was ~10 % of a prefill. */
#define ACC_INDEX(i, j) ((j) * PANEL_ROWS + (i))

/* acc[nr][nt] lanes live in `accs` between chunks (stored and reloaded unchanged, so chunking
 * does not alter the per-lane order).  panel: nr rows of `kc` floats at stride PANEL_K. */
static inline __attribute__((always_inline)) void gemm_tile(const float *panel, const float *x, int64_t xstride,
                                                            int64_t kc, float *accs, int nr, int nt) {
    __m256 acc[TILE_ROWS][TILE_TOKENS];
    #pragma GCC unroll 16
    for (int i = 0; i < nr; i++)
        #pragma GCC unroll 16
        for (int j = 0; j < nt; j++) acc[i][j] = _mm256_load_ps(accs + ACC_INDEX(i, j) * GROUP);
    for (int64_t k = 0; k < kc; k += GROUP) {
        __m256 wv[TILE_ROWS];
        #pragma GCC unroll 16
        for (int i = 0; i < nr; i++) {
            wv[i] = _mm256_load_ps(panel + i * PANEL_K + k);
            __asm__("" : "+x"(wv[i])); /* in a register for all nt tokens */
        }
        #pragma GCC unroll 16
        for (int j = 0; j < nt; j++) {
            __m256 xv = _mm256_loadu_ps(x + j * xstride + k);
            __asm__("" : "+x"(xv)); /* keep it in a register: one load, not one per row */
            #pragma GCC unroll 16
            for (int i = 0; i < nr; i++) acc[i][j] = _mm256_fmadd_ps(wv[i], xv, acc[i][j]);
        }
    }
    #pragma GCC unroll 16
    for (int i = 0; i < nr; i++)
        #pragma GCC unroll 16
        for (int j = 0; j < nt; j++) _mm256_store_ps(accs + ACC_INDEX(i, j) * GROUP, acc[i][j]);
}

/* Dispatch to a tile specialised for its size (the compiler keeps the full one in registers). */
static void gemm_tile_any(const float *panel, const float *x, int64_t xstride, int64_t kc, float *accs, int nr, int nt) {
#define TILE_CASE(R, T) \
    case (R) * 8 + (T): gemm_tile(panel, x, xstride, kc, accs, R, T); break;
    switch (nr * 8 + nt) {
        TILE_CASE(3, 4) TILE_CASE(3, 3) TILE_CASE(3, 2) TILE_CASE(3, 1)
        TILE_CASE(2, 4) TILE_CASE(2, 3) TILE_CASE(2, 2) TILE_CASE(2, 1)
        TILE_CASE(1, 4) TILE_CASE(1, 3) TILE_CASE(1, 2) TILE_CASE(1, 1)
    default: break;
    }
#undef TILE_CASE
}

/* Rows r0 .. r0+nr-1, columns k0 .. k0+kc-1 decoded into the panel (row stride PANEL_K);
 * specialised per format by the constant `format`, like the GEMV. */
static inline __attribute__((always_inline)) void decode_panel_fmt(DiMatFormat format, const DiMatrix *w, int64_t r0,
                                                                   int nr, int64_t k0, int64_t kc, float *panel) {
    for (int i = 0; i < nr; i++)
        for (int64_t k = 0; k < kc; k += BLOCK) {
            __m256 wv[4];
            decode_block(format, w, r0 + i, (k0 + k) / BLOCK, wv);
            #pragma GCC unroll 16
            for (int g = 0; g < 4; g++) _mm256_store_ps(panel + i * PANEL_K + k + GROUP * g, wv[g]);
        }
}

/* The fixed lane sum of one stored accumulator (32-byte aligned). */
static inline float acc_lane_sum(const float *acc) { return lane_sum(_mm256_load_ps(acc)); }

#include "kernels/cpu/gemm_panel_body.h"

#endif /* __x86_64__ */
