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

#endif
