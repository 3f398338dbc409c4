/* expf_row.c — di_expf_row (see expf_row.h): the dispatch and the scalar definition. */
#include "kernels/expf_row.h"

#include "kernels/cpu/expf_simd.h"
#include "kernels/matmul.h"

#include <math.h>

void di_expf_row(const float *x, size_t n, float shift, float scale, float *out) {
    if (!x || !out || n == 0) return;
    if (di_kernels_use_simd()) {
        di_simd_expf_row(x, n, shift, scale, out);
        return;
    }
    for (size_t i = 0; i < n; i++) out[i] = expf((x[i] - shift) * scale);
}
