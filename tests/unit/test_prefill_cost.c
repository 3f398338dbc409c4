/* test_prefill_cost.c — the prefill cost model and chunk solver (serving.md §6.3, §6.4):
 * closed-form solver properties on random models (cost(q*) <= T < cost(q* + B)), the fitter
 * recovering known coefficients from noisy synthetic samples, degenerate grids, step filling. */
#include "test.h"

#include "deepinfer.h"
#include "cluster/prefill_cost.h"
#include "cluster/rng.h"

#include <stdint.h>

/* Random non-negative models spanning the plausible range (ns; d = 20..120 ns/token). */
static DiPrefillCost random_model(DiRng *r) {
    DiPrefillCost m;
    m.a = di_rng_uniform(r) < 0.2 ? 0.0 : 1e-3 * di_rng_uniform(r);
    m.b = 2e-4 * di_rng_uniform(r);
    m.d = 20.0 + 100.0 * di_rng_uniform(r);
    m.e = 0.5 * di_rng_uniform(r);
    m.f = 1e6 * di_rng_uniform(r);
    return m;
}

TEST(solver_property_largest_block_aligned_chunk) {
    DiRng r = di_rng_seed(6);
    DiChunkRules rules = {512, 512};
    int checked = 0;
    for (int it = 0; it < 20000; it++) {
        DiPrefillCost m = random_model(&r);
        int64_t c = (int64_t)(di_rng_uniform(&r) * 1.0e6);
        int64_t remaining = 1 + (int64_t)(di_rng_uniform(&r) * 300000);
        double budget = 1e5 * pow(10.0, 5.0 * di_rng_uniform(&r)); /* 0.1 ms .. 10 s, log-uniform */
        int64_t q = di_prefill_chunk_solve(&m, c, remaining, budget, &rules);
        CHECK(q >= 0 && q <= remaining);
        if (q > 0) CHECK(di_prefill_cost_request_ns(&m, q, c) <= budget);
        if (q > 0 && q < remaining) {
            CHECK_EQ_INT(q % rules.block, 0);
            int64_t next = q + rules.block < remaining ? q + rules.block : remaining;
            CHECK_MSG(di_prefill_cost_request_ns(&m, next, c) > budget, "q=%lld next fits too", (long long)q);
            checked++;
        }
        if (q == 0 && remaining >= rules.block) /* nothing fits: even one block is over budget */
            CHECK(di_prefill_cost_request_ns(&m, rules.block, c) > budget);
        /* monotone in the budget */
        int64_t q2 = di_prefill_chunk_solve(&m, c, remaining, budget * 1.5, &rules);
        CHECK(q2 >= q);
    }
    CHECK(checked > 1000);
}

TEST(solver_hand_derived_linear_and_quadratic) {
    DiChunkRules rules = {100, 0};
    /* a = 0: cost = 2 q + 1 c; c = 1000, budget 5000 -> q <= 2000 */
    DiPrefillCost lin = {0, 0, 2, 1, 0};
    CHECK_EQ_INT(di_prefill_chunk_solve(&lin, 1000, 10000, 5000, &rules), 2000);
    CHECK_EQ_INT(di_prefill_chunk_solve(&lin, 1000, 1234, 5000, &rules), 1234); /* finishes the request */
    CHECK_EQ_INT(di_prefill_chunk_solve(&lin, 6000, 10000, 5000, &rules), 0);    /* prefix alone over */
    /* q² + 0: budget 1e6 -> q <= 1000 exactly (root is an integer, boundary included) */
    DiPrefillCost quad = {1, 0, 0, 0, 0};
    CHECK_EQ_INT(di_prefill_chunk_solve(&quad, 0, 5000, 1e6, &rules), 1000);
    CHECK_EQ_INT(di_prefill_chunk_solve(&quad, 0, 5000, 1e6 - 1, &rules), 900);
    DiChunkRules min_rules = {100, 1000};
    CHECK_EQ_INT(di_prefill_chunk_solve(&quad, 0, 5000, 1e6 - 1, &min_rules), 0); /* 900 < min chunk */
    CHECK_EQ_INT(di_prefill_chunk_solve(&quad, 0, 800, 1e6, &min_rules), 800);    /* a short request still runs */
    CHECK(di_prefill_chunk_solve(&quad, -1, 5000, 1e6, &rules) < 0);
    DiPrefillCost negative = {-1, 0, 0, 0, 0};
    CHECK(di_prefill_chunk_solve(&negative, 0, 5000, 1e6, &rules) < 0);
}

TEST(fit_recovers_known_coefficients_from_noisy_samples) {
    const DiPrefillCost truth = {2.0e-3, 6.0e-5, 45.0, 0.3, 1.5e6};
    enum { NQ = 12, NC = 10 };
    int64_t qs[NQ * NC], cs[NQ * NC];
    double ns[NQ * NC];
    DiRng r = di_rng_seed(11);
    size_t n = 0;
    for (int i = 0; i < NQ; i++)
        for (int j = 0; j < NC; j++) { /* log-spaced grid, q 256..32K, c 0..1M (§6.3) */
            qs[n] = (int64_t)(256.0 * pow(2.0, i * 7.0 / (NQ - 1)));
            cs[n] = j == 0 ? 0 : (int64_t)(1024.0 * pow(2.0, (j - 1) * 10.0 / (NC - 2)));
            double exact = di_prefill_cost_ns(&truth, qs[n], cs[n]);
            ns[n] = exact * (1.0 + 0.01 * di_rng_normal(&r)); /* 1 % measurement noise */
            n++;
        }
    DiPrefillCost fit;
    CHECK(di_prefill_cost_fit(qs, cs, ns, n, 1, &fit) == 0);
    CHECK_NEAR(fit.a / truth.a, 1.0, 0.05);
    CHECK_NEAR(fit.b / truth.b, 1.0, 0.05);
    CHECK_NEAR(fit.d / truth.d, 1.0, 0.05);
    CHECK_NEAR(fit.f / truth.f, 1.0, 0.05);
    /* predictions within 3 % everywhere on the grid; monotone in q and c */
    for (size_t i = 0; i < n; i++) {
        double exact = di_prefill_cost_ns(&truth, qs[i], cs[i]);
        CHECK_NEAR(di_prefill_cost_ns(&fit, qs[i], cs[i]) / exact, 1.0, 0.03);
        CHECK(di_prefill_cost_ns(&fit, qs[i] + 512, cs[i]) > di_prefill_cost_ns(&fit, qs[i], cs[i]));
        CHECK(di_prefill_cost_ns(&fit, qs[i], cs[i] + 4096) >= di_prefill_cost_ns(&fit, qs[i], cs[i]));
    }
    /* exact data and plain least squares: recovery to rounding */
    for (size_t i = 0; i < n; i++) ns[i] = di_prefill_cost_ns(&truth, qs[i], cs[i]);
    CHECK(di_prefill_cost_fit(qs, cs, ns, n, 0, &fit) == 0);
    CHECK_NEAR(fit.a / truth.a, 1.0, 1e-6);
    CHECK_NEAR(fit.e / truth.e, 1.0, 1e-4);
}

TEST(fit_rejects_degenerate_grids) {
    int64_t q[6] = {256, 512, 1024, 2048, 4096, 8192}, c[6] = {0};
    double ns[6] = {1, 2, 3, 4, 5, 6};
    DiPrefillCost fit;
    CHECK(di_prefill_cost_fit(q, c, ns, 6, 0, &fit) != 0); /* c always 0 */
    CHECK(strstr(di_last_error(), "vary q and c") != NULL);
    int64_t c2[6] = {10, 20, 40, 80, 160, 320};
    int64_t q2[6] = {10, 20, 40, 80, 160, 320}; /* q == c: q² and q·c collinear */
    CHECK(di_prefill_cost_fit(q2, c2, ns, 6, 0, &fit) != 0);
    CHECK(di_prefill_cost_fit(q, c2, ns, 4, 0, &fit) != 0);
    ns[2] = -1;
    CHECK(di_prefill_cost_fit(q, c2, ns, 6, 0, &fit) != 0);
    CHECK(strstr(di_last_error(), "sample 2") != NULL);
}

TEST(fill_step_respects_budget_and_token_cap) {
    DiPrefillCost m = {1e-4, 5e-5, 40.0, 0.2, 1e6};
    DiChunkRules rules = {512, 512};
    int64_t c[4] = {0, 100000, 0, 8192}, rem[4] = {3000, 50000, 200000, 700};
    int64_t q[4];
    double budget = 8e6;
    double t = di_prefill_fill_step(&m, c, rem, 4, budget, 1 << 20, &rules, q);
    CHECK(t > 0 && t <= budget);
    double sum = m.f;
    for (int i = 0; i < 4; i++) sum += q[i] ? di_prefill_cost_request_ns(&m, q[i], c[i]) : 0;
    CHECK_NEAR(t, sum, 1e-3);
    CHECK_EQ_INT(q[0], 3000); /* first request fits whole */
    t = di_prefill_fill_step(&m, c, rem, 4, 1e12, 4096, &rules, q);
    CHECK(q[0] + q[1] + q[2] + q[3] <= 4096);
    CHECK(di_prefill_fill_step(&m, c, rem, 4, budget, 0, &rules, q) < 0);
}

TEST(online_correction_converges_to_the_measured_ratio) {
    DiPrefillCorrection c;
    CHECK(di_prefill_correction_init(&c, 0.5) == 0);
    CHECK_NEAR(c.factor, 1.0, 0);
    di_prefill_correction_update(&c, 100.0, 150.0); /* 0.5 * 1 + 0.5 * 1.5 */
    CHECK_NEAR(c.factor, 1.25, 1e-12);
    for (int i = 0; i < 60; i++) di_prefill_correction_update(&c, 100.0, 150.0);
    CHECK_NEAR(c.factor, 1.5, 1e-9);
    di_prefill_correction_update(&c, 0.0, 150.0); /* ignored */
    di_prefill_correction_update(&c, 100.0, NAN);
    CHECK_NEAR(c.factor, 1.5, 1e-9);
    CHECK_EQ_INT(c.steps, 61);
    CHECK(di_prefill_correction_init(&c, 0.0) != 0);
}

int main(void) {
    RUN_TEST(solver_property_largest_block_aligned_chunk);
    RUN_TEST(solver_hand_derived_linear_and_quadratic);
    RUN_TEST(fit_recovers_known_coefficients_from_noisy_samples);
    RUN_TEST(fit_rejects_degenerate_grids);
    RUN_TEST(fill_step_respects_budget_and_token_cap);
    RUN_TEST(online_correction_converges_to_the_measured_ratio);
    return TEST_SUMMARY();
}
