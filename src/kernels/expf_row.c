/* expf_row.c — di_expf_row (see expf_row.h): the dispatch and the scalar definition. */
#include "kernels/expf_row.h"

#include "kernels/cpu/expf_simd.h"
#include "kernels/matmul.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

static bool use_simd_expf(void) {
    const char *backend = di_matmul_backend(); /* NULL on a bad DEEPINFER_KERNELS: the matmul reports it */
    return backend && strcmp(backend, "avx2-fma") == 0;
}

void di_expf_row(const float *x, size_t n, float shift, float scale, float *out) {
    if (!x || !out || n == 0) return;
    if (use_simd_expf()) {
        di_simd_expf_row(x, n, shift, scale, out);
        return;
    }
    for (size_t i = 0; i < n; i++) out[i] = expf((x[i] - shift) * scale);
}
