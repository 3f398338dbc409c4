/* attn_lanes.h — private pieces the SIMD attention kernels (attn_avx2.c, attn_avx512.c and
 * kernels/neon/attn_neon.c) share: the staging of key rows as columns (an 8 x 8 transpose: AVX2
 * shuffles, or vec.h's generic one on aarch64), and the exact top-k selection over a candidate
 * buffer (attn_ref.c).  Not part of the kernel API. */
#ifndef DI_KERNELS_CPU_ATTN_LANES_H
#define DI_KERNELS_CPU_ATTN_LANES_H

#include "kernels/cpu/attn_simd.h"

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include "kernels/vec.h"
#endif
#include <stdbool.h>
#include <stdint.h>

/* Widest index key or head the SIMD kernels stage on the stack (transposed keys, transposed
 * queries); wider ones take the reference loops, which give the same bits. */
#define DI_ATTN_MAX_DIM 512

/* out[k][l] = rows[l][c0 + k] for k, l < 8.  Only defined where the includer targets AVX2. */
#ifdef __AVX2__
static inline __attribute__((always_inline)) void di_attn_transpose8(const float *const rows[8], int64_t c0, __m256 out[8]) {
    __m256 r[8], t[8], u[8];
    for (int l = 0; l < 8; l++) r[l] = _mm256_loadu_ps(rows[l] + c0);
    for (int i = 0; i < 4; i++) { /* pairs of rows interleaved */
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) /* quads of rows: (t0,t2), (t1,t3) and (t4,t6), (t5,t7) */
        for (int h = 0; h < 2; h++) {
            __m256 a = t[4 * i + h], b = t[4 * i + h + 2];
            u[4 * i + 2 * h] = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0));
            u[4 * i + 2 * h + 1] = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2));
        }
    for (int k = 0; k < 4; k++) { /* u[k]: columns k and k+4 of rows 0-3; u[4+k]: of rows 4-7 */
        out[k] = _mm256_permute2f128_ps(u[k], u[4 + k], 0x20);
        out[k + 4] = _mm256_permute2f128_ps(u[k], u[4 + k], 0x31);
    }
}

/* The 8 x 8 block rows[l][c0 .. c0+7] (l < 8) stored transposed at lanes 8g .. 8g+7 of kT's rows
 * of nkeys floats: kT[(c0 + k) nkeys + 8g + l] = rows[l][c0 + k], kT 32-byte aligned.  AVX2: the
 * shuffles above; NEON: vec.h's generic form. */
static inline __attribute__((always_inline)) void di_attn_stage8(const float *const rows[8], int64_t c0, float *kT,
                                                                 int nkeys, int g) {
    __m256 col[8];
    di_attn_transpose8(rows, c0, col);
    for (int k = 0; k < 8; k++) _mm256_store_ps(kT + (c0 + k) * nkeys + 8 * g, col[k]);
}
#elif defined(__aarch64__)
static inline __attribute__((always_inline)) void di_attn_stage8(const float *const rows[8], int64_t c0, float *kT,
                                                                 int nkeys, int g) {
    DiVec8 col[8];
    di_vec_transpose8(rows, c0, col);
    for (int k = 0; k < 8; k++) memcpy(kT + (c0 + k) * nkeys + 8 * g, &col[k], sizeof col[k]);
}
#endif

#if defined(__AVX2__) || defined(__aarch64__)
/* Stages keys t0 .. t0+nb-1 (nb <= nkeys, a multiple of 8) of rows `stride` floats apart as
 * kT[c][l] = key l's element c, c < DI; lanes past nb repeat the last key (computed, not stored). */
static inline __attribute__((always_inline)) void di_attn_stage_keys(const float *keys, int64_t stride, int64_t t0,
                                                                     int64_t nb, int nkeys, int64_t DI, float *kT) {
    const float *rows[8];
    for (int g = 0; g < nkeys / 8; g++) {
        for (int l = 0; l < 8; l++) {
            int64_t i = 8 * g + l < nb ? 8 * g + l : nb - 1;
            rows[l] = keys + (t0 + i) * stride;
        }
        int64_t c = 0;
        for (; c + 8 <= DI; c += 8) di_attn_stage8(rows, c, kT, nkeys, g);
        for (; c < DI; c++)
            for (int l = 0; l < 8; l++) kT[c * nkeys + 8 * g + l] = rows[l][c];
    }
}
#endif

/* Moves the k best of buf[0..m) (score descending, id ascending; ids distinct) to buf[0..k),
 * the k-th best at buf[k-1]; returns min(k, m).  Linear expected time (quickselect). */
int64_t di_attn_select_best(DiScored *buf, int64_t m, int64_t k);

/* The k best of the m candidates in buf, their ids ascending in out; returns the count. */
int64_t di_attn_topk_finish(DiScored *buf, int64_t m, int64_t k, int32_t *out);

/* out[i] = expf(x[i]) with the bits of this libm's expf, eight at a time where its algorithm is
 * glibc's (checked once; expf_exact_avx2.c, on aarch64 expf_exact_neon.c), else through expf.
 * Only where the SIMD kernels run (AVX2 and FMA; NEON).
 * x and out may be the same array. */
void di_attn_expf_row(const float *x, int64_t n, float *out);
/* Whether the eight-at-a-time route is taken (this libm passed the check). */
bool di_attn_expf_exact(void);

#endif
