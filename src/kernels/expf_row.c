/* expf_row.c — di_expf_row (see expf_row.h): the dispatch between the scalar definition
 * (cpu/ops_ref.c) and the AVX2 one, by DEEPINFER_KERNELS at each call (the sampler's entry; the
 * model takes the backend table's expf_row). */
#include "kernels/expf_row.h"

#include "kernels/cpu/expf_simd.h"
#include "kernels/cpu/ops_cpu.h"
#include "kernels/matmul.h"

void di_expf_row(const float *x, size_t n, float shift, float scale, float *out) {
    if (!x || !out || n == 0) return;
    if (di_kernels_use_simd()) {
        di_simd_expf_row(x, n, shift, scale, out);
        return;
    }
    di_ref_expf_row(x, n, shift, scale, out);
}
