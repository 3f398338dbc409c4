/* test_mhc.c — mHC (§5.4) on hand-derived cases: the Sinkhorn normalisation of a known logit
 * matrix (row softmax + eps, then alternating column/row normalisation ending with a column step),
 * the pre/post sigmoid forms, the RMS that scales the projection, collapse, and an expansion that
 * sums over the FIRST index of the combine matrix (a transposed expansion is caught). */
#include "test.h"

#include "model/mhc.h"
#include "model/workspace.h"

#include <math.h>
#include <string.h>

/* A hand-made model of hc streams of width D with a one-row workspace (the mixes' projections
 * go there); free with workspace_free(m.ws). */
static Model fake_model(int hc, int D) {
    Model m;
    memset(&m, 0, sizeof m);
    m.be = di_backend_cpu_ref();
    m.d.hc_mult = hc;
    m.d.dim = D;
    m.ws = workspace_create(&m, 1, 1);
    CHECK(m.ws != NULL);
    return m;
}

/* hc = 2, D = 2: fn rows 0..7 pick single state entries so μ is known exactly. */
TEST(mixes_of_a_hand_derived_state) {
    const int hc = 2, D = 2, nmix = (2 + hc) * hc, flat = hc * D;
    float fn[8 * 4] = {0};
    /* μ_c = ρ · v[c mod 4], v = X flattened stream-major */
    for (int c = 0; c < nmix; c++) fn[c * flat + c % flat] = 1.0f;
    float base[8] = {0.5f, -0.5f, 0.25f, 0, 0.1f, -0.2f, 0.3f, 0};
    float scale[3] = {1.0f, 2.0f, 0.5f};
    DiMatrix w = {.format = DI_MAT_F32, .rows = nmix, .cols = flat, .data = fn};
    HcSite site = {.fn = &w, .base = base, .scale = scale, .hc = hc, .dim = D, .sinkhorn_iters = 20, .eps = 1e-20f, .hc_eps = 1e-6f};
    float X[4] = {1, -1, 2, 0}; /* mean square = 6/4 -> ρ = 1/sqrt(1.5) */
    Model m = fake_model(hc, D);
    HcMix mix;
    CHECK(mhc_mixes(&m, &site, X, 1, &mix) == 0);
    CHECK(mhc_mixes(&m, &site, X, 2, &mix) == -1); /* more rows than the workspace holds */
    double rho = 1.0 / sqrt(1.5), v[4] = {1, -1, 2, 0};
    for (int k = 0; k < hc; k++) {
        CHECK_NEAR(mix.pre[k], 1.0 / (1.0 + exp(-(v[k] * rho * 1.0 + base[k]))) + 1e-6, 1e-6);
        CHECK_NEAR(mix.post[k], 2.0 / (1.0 + exp(-(v[2 + k] * rho * 2.0 + base[2 + k]))), 1e-6);
    }
    /* Sinkhorn in double, same schedule */
    double c[4];
    for (int i = 0; i < 4; i++) c[i] = v[i] * rho * 0.5 + base[4 + i];
    for (int a = 0; a < 2; a++) {
        double mx = fmax(c[a * 2], c[a * 2 + 1]), s = exp(c[a * 2] - mx) + exp(c[a * 2 + 1] - mx);
        for (int b = 0; b < 2; b++) c[a * 2 + b] = exp(c[a * 2 + b] - mx) / s + 1e-6;
    }
    for (int it = 0; it < 20; it++) {
        if (it)
            for (int a = 0; a < 2; a++) {
                double s = c[a * 2] + c[a * 2 + 1] + 1e-6;
                c[a * 2] /= s, c[a * 2 + 1] /= s;
            }
        for (int b = 0; b < 2; b++) {
            double s = c[b] + c[2 + b] + 1e-6;
            c[b] /= s, c[2 + b] /= s;
        }
    }
    for (int i = 0; i < 4; i++) CHECK_NEAR(mix.comb[i], c[i], 1e-6);
    /* ends with a column step: columns sum to ~1 */
    CHECK_NEAR(mix.comb[0] + mix.comb[2], 1.0, 1e-5);
    CHECK_NEAR(mix.comb[1] + mix.comb[3], 1.0, 1e-5);
    workspace_free(m.ws);
}

TEST(collapse_and_expand) {
    const int hc = 2, D = 3;
    float X[6] = {1, 2, 3, 10, 20, 30}, pi[2] = {0.25f, 0.5f}, out[3];
    const DiKernelBackend *be = di_backend_cpu_ref();
    be->mhc_collapse(X, pi, hc, D, out);
    CHECK_NEAR(out[0], 5.25, 1e-6);
    CHECK_NEAR(out[2], 15.75, 1e-6);
    HcMix mix;
    memset(&mix, 0, sizeof mix);
    mix.post[0] = 1, mix.post[1] = 2;
    /* comb[a][b]: source a -> destination b; an asymmetric matrix catches a transpose */
    mix.comb[0] = 0.5f, mix.comb[1] = 0.25f, mix.comb[2] = 0.125f, mix.comb[3] = 1.0f;
    float o[3] = {1, 1, 1};
    be->mhc_expand(X, o, mix.post, mix.comb, hc, D);
    /* X'[0] = 1·o + 0.5·X0 + 0.125·X1 ; X'[1] = 2·o + 0.25·X0 + 1·X1 */
    CHECK_NEAR(X[0], 1 + 0.5 * 1 + 0.125 * 10, 1e-6);
    CHECK_NEAR(X[2], 1 + 0.5 * 3 + 0.125 * 30, 1e-6);
    CHECK_NEAR(X[3], 2 + 0.25 * 1 + 10, 1e-6);
    CHECK_NEAR(X[5], 2 + 0.25 * 3 + 30, 1e-6);
}

TEST(wrong_fn_shape_is_an_error) {
    float fn[4] = {0}, base[8] = {0}, scale[3] = {1, 1, 1}, X[4] = {0};
    DiMatrix w = {.format = DI_MAT_F32, .rows = 1, .cols = 4, .data = fn};
    HcSite site = {.fn = &w, .base = base, .scale = scale, .hc = 2, .dim = 2, .sinkhorn_iters = 20, .eps = 1e-20f, .hc_eps = 1e-6f};
    Model m = fake_model(2, 2);
    HcMix mix;
    CHECK(mhc_mixes(&m, &site, X, 1, &mix) == -1);
    workspace_free(m.ws);
}

int main(void) {
    RUN_TEST(mixes_of_a_hand_derived_state);
    RUN_TEST(collapse_and_expand);
    RUN_TEST(wrong_fn_shape_is_an_error);
    return TEST_SUMMARY();
}
