/* test_expf_row.c — the backend tables' expf_row (kernels/backend.h, cpu/expf_simd.h): within
 * a few ulp of glibc's expf in the SIMD tables (libmvec measured <= 3), expf itself in the
 * reference table, and a result that depends on the value alone.  Each table is chosen explicitly
 * (di_backend_cpu_select), as the model and the engine choose theirs once. */
#include "test.h"

#include "base/error.h"
#include "kernels/backend.h"
#include "kernels/cpu/matmul_simd.h"

#include <stdbool.h>

static uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* ulps between two non-negative finite floats (their bit patterns are ordered like the values) */
static long ulp_distance(float a, float b) { return labs((long)float_bits(a) - (long)float_bits(b)); }

enum { N = 4099 }; /* not a multiple of 8: the tail path runs too */

static void random_row(float *x, float lo, float hi) {
    for (int i = 0; i < N; i++) x[i] = lo + (hi - lo) * (float)((double)test_rand32() / 4294967295.0);
}

/* The table under test: the SIMD one where this CPU has it (AVX2: libmvec's vector expf; NEON:
 * expf's own bits four at a time), else the reference. */
static const DiKernelBackend *vector_table(void) {
    const DiKernelBackend *be = di_backend_cpu_ref();
    if (di_simd_available() && di_backend_cpu_select((DiEnvKernelKnobs){.kernels = DI_ENV_KERNELS_SIMD}, &be) != 0) return NULL;
    return be;
}

static void expf_row(const float *x, size_t n, float shift, float scale, float *out) {
    vector_table()->expf_row(x, n, shift, scale, out);
}

TEST(row_is_expf_of_the_scaled_difference_within_four_ulp) {
    static float x[N], y[N];
    random_row(x, -120.0f, 8.0f); /* down through the subnormal results to underflow */
    float shift = 3.5f, scale = 1.25f;
    expf_row(x, N, shift, scale, y);
    long worst = 0;
    for (int i = 0; i < N; i++) {
        float want = expf((x[i] - shift) * scale);
        long d = ulp_distance(y[i], want);
        if (d > worst) worst = d;
    }
    CHECK_MSG(worst <= 4, "worst error %ld ulp", worst);
#if defined(__aarch64__) /* no aarch64 libmvec: the NEON table's exp is expf's, bit for bit */
    CHECK_MSG(worst == 0, "NEON expf_row: worst error %ld ulp, expected expf's own bits", worst);
#endif
}

TEST(masked_and_maximal_entries_are_exact) {
    float x[11] = {-INFINITY, 2.0f, -INFINITY, 2.0f, -1e30f, 2.0f, -INFINITY, -INFINITY, -INFINITY, 2.0f, -INFINITY};
    float y[11];
    expf_row(x, 11, 2.0f, 1.0f / 0.7f, y);
    for (int i = 0; i < 11; i++) {
        if (x[i] == 2.0f) CHECK_MSG(y[i] == 1.0f, "exp(0) at %d gave %.9g", i, y[i]);
        else CHECK_MSG(y[i] == 0.0f, "exp(-inf) at %d gave %.9g", i, y[i]);
    }
}

/* The sampler's determinism rests on this: a logit's probability must not depend on where it
 * sits in the row or on the row's length (vector body or padded tail). */
TEST(result_depends_on_the_value_alone) {
    const float values[4] = {-0.3f, -17.25f, -88.7f, 0.0f};
    for (int k = 0; k < 4; k++) {
        float alone;
        expf_row(&values[k], 1, 0.5f, 1.3f, &alone);
        for (int len = 1; len <= 19; len++)
            for (int at = 0; at < len; at++) {
                float x[19], y[19];
                for (int i = 0; i < len; i++) x[i] = -(float)i;
                x[at] = values[k];
                expf_row(x, (size_t)len, 0.5f, 1.3f, y);
                CHECK_MSG(float_bits(y[at]) == float_bits(alone), "value %g at %d of %d: %.9g vs %.9g", values[k], at,
                          len, y[at], alone);
            }
    }
}

TEST(in_place_gives_the_same_result) {
    static float x[N], y[N], z[N];
    random_row(x, -30.0f, 0.0f);
    memcpy(z, x, sizeof x);
    expf_row(x, N, -1.0f, 0.9f, y);
    expf_row(z, N, -1.0f, 0.9f, z);
    CHECK(memcmp(y, z, sizeof y) == 0);
}

TEST(reference_kernels_give_expf_exactly) {
    static float x[N], y[N];
    random_row(x, -50.0f, 2.0f);
    di_backend_cpu_ref()->expf_row(x, N, 1.0f, 1.1f, y);
    int diff = 0;
    for (int i = 0; i < N; i++) diff += float_bits(y[i]) != float_bits(expf((x[i] - 1.0f) * 1.1f));
    CHECK_EQ_INT(diff, 0);
}

TEST(empty_rows_write_nothing) {
    float y = 42.0f;
    expf_row(&y, 0, 0, 1, &y);
    di_backend_cpu_ref()->expf_row(&y, 0, 0, 1, &y);
    CHECK(y == 42.0f);
}

int main(void) {
    if (!vector_table()) return fprintf(stderr, "the SIMD table was refused: %s\n", di_error_message()), 1;
    if (!di_simd_available()) printf("note: no SIMD table here: the reference path serves every case\n");
    RUN_TEST(row_is_expf_of_the_scaled_difference_within_four_ulp);
    RUN_TEST(masked_and_maximal_entries_are_exact);
    RUN_TEST(result_depends_on_the_value_alone);
    RUN_TEST(in_place_gives_the_same_result);
    RUN_TEST(reference_kernels_give_expf_exactly);
    RUN_TEST(empty_rows_write_nothing);
    return TEST_SUMMARY();
}
