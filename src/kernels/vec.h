/* vec.h — small element-wise vector loops the model calls in its own (non-matmul) code.
 *
 * Written with GCC's vector extensions: eight floats per operation, AVX where the build targets
 * it, without an intrinsic in the model's files.  Each element gets the same separate multiply
 * and add as the scalar loop (the build keeps ISO C's -ffp-contract=off, so no fused
 * multiply-add on either path), so the vector form is bit-identical to the scalar one and the
 * reference reading `y[i] += a * x[i]` stays true. */
#ifndef DI_KERNELS_VEC_H
#define DI_KERNELS_VEC_H

#include <stdint.h>
#include <string.h>

typedef float DiVec8 __attribute__((vector_size(32)));

/* y[i] += a * x[i] for i < n; y and x must not overlap. */
static inline void di_vec_add_scaled(float *restrict y, float a, const float *restrict x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        DiVec8 vy, vx;
        memcpy(&vy, y + i, sizeof vy);
        memcpy(&vx, x + i, sizeof vx);
        vy += a * vx;
        memcpy(y + i, &vy, sizeof vy);
    }
    for (; i < n; i++) y[i] += a * x[i];
}

/* The 8 x 8 block rows[l][c0 .. c0+7] (l < 8) as eight vectors of one column each: out[k][l] =
 * rows[l][c0 + k].  Unpacks within 128-bit lanes, then lane swaps: 24 shuffles. */
static inline void di_vec_transpose8(const float *const rows[8], int64_t c0, DiVec8 out[8]) {
    DiVec8 r[8], t[8], u[8];
    for (int l = 0; l < 8; l++) memcpy(&r[l], rows[l] + c0, sizeof r[l]);
    for (int i = 0; i < 4; i++) {
        t[2 * i] = __builtin_shufflevector(r[2 * i], r[2 * i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
        t[2 * i + 1] = __builtin_shufflevector(r[2 * i], r[2 * i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
    }
    for (int i = 0; i < 2; i++) {
        for (int h = 0; h < 2; h++) { /* h: pairs (t0,t2)/(t1,t3) for rows 0-3, (t4,t6)/(t5,t7) for 4-7 */
            DiVec8 a = t[4 * i + h], b = t[4 * i + h + 2];
            u[4 * i + 2 * h] = __builtin_shufflevector(a, b, 0, 1, 8, 9, 4, 5, 12, 13);
            u[4 * i + 2 * h + 1] = __builtin_shufflevector(a, b, 2, 3, 10, 11, 6, 7, 14, 15);
        }
    }
    for (int k = 0; k < 4; k++) { /* u[k]: columns k and k+4 of rows 0-3, u[4+k]: of rows 4-7 */
        out[k] = __builtin_shufflevector(u[k], u[4 + k], 0, 1, 2, 3, 8, 9, 10, 11);
        out[k + 4] = __builtin_shufflevector(u[k], u[4 + k], 4, 5, 6, 7, 12, 13, 14, 15);
    }
}

/* out[l] = 0 + q[0]·rows[l][0] + q[1]·rows[l][1] + ... + q[n-1]·rows[l][n-1] for l < 8, each
 * sum in ascending c with a separate multiply and add: the scalar dot product of each row, bit
 * for bit, with the eight rows' chains in the eight lanes (the scalar loop is one add latency
 * per element). */
static inline void di_vec_dot_rows8(const float *restrict q, const float *const rows[8], int64_t n, float out[8]) {
    DiVec8 acc = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t c0 = 0;
    for (; c0 + 8 <= n; c0 += 8) {
        DiVec8 col[8];
        di_vec_transpose8(rows, c0, col);
        for (int k = 0; k < 8; k++) acc += q[c0 + k] * col[k];
    }
    for (int l = 0; l < 8; l++) {
        float dot = acc[l];
        for (int64_t c = c0; c < n; c++) dot += q[c] * rows[l][c];
        out[l] = dot;
    }
}

#endif
