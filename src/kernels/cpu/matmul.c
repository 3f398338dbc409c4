/* matmul.c — the CPU backend's dispatch for di_matmul (matmul.h).
 * For now every format goes to the reference; SIMD kernels plug in here by format. */
#include "kernels/matmul.h"

int di_matmul(DiThreadPool *pool, const DiMatrix *w, const float *x, int64_t n_tokens, float *y) {
    (void)pool;
    return di_matmul_ref(w, x, n_tokens, y);
}
