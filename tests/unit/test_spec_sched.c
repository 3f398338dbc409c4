/* test_spec_sched.c — the DSpark draft-length schedulers against hand-derived cases, a brute
 * force over every length vector, and the DSP appendix-A counterexample run end to end through
 * the verifier (engine-features.md §1.3 i-l, §1.7 item 5). */
#include "test.h"

#include "base/error.h"
#include "engine/spec_sched.h"
#include "engine/spec_verify.h"

#include <math.h>
#include <stdbool.h>

/* A curve with seconds(rows) = f(rows) measured at rows 1..n. */
static void curve_from(DiSpecCost *c, int n, double (*f)(int)) {
    di_spec_cost_init(c);
    for (int b = 1; b <= n; b++) di_spec_cost_observe(c, b, f(b));
}

/* A curve through the given (rows, seconds) measurements. */
static void curve_points(DiSpecCost *c, int n, const int64_t *rows, const double *seconds) {
    di_spec_cost_init(c);
    for (int i = 0; i < n; i++) di_spec_cost_observe(c, rows[i], seconds[i]);
}

static double flat_cost(int rows) { (void)rows; return 1.0; }
static double per_row_cost(int rows) { return (double)rows; }

static double rand_unit(void) { return (test_rand32() & 0xFFFFFF) / 16777216.0; }

/* Random survivals: products of random confidences, so each row is non-increasing. */
static void random_survival(float *a, int R, int gamma) {
    for (int r = 0; r < R; r++) {
        double s = 1;
        for (int j = 0; j < gamma; j++) {
            s *= rand_unit();
            a[r * gamma + j] = (float)s;
        }
    }
}

/* The test's own throughput of a length vector for the exact scheduler: (R + admitted survival)
 * / (drafter + verify seconds); the drafter ran before scheduling, so every vector pays it. */
static double theta_of(const float *a, int R, int gamma, const int32_t *len, const DiSpecStepCost *step) {
    double acc = R;
    int64_t k = 0;
    for (int r = 0; r < R; r++)
        for (int j = 0; j < len[r]; j++) acc += a[r * gamma + j], k++;
    double sec = di_spec_cost_seconds(step->cost, step->required_rows + k) + step->draft_seconds;
    return acc / sec;
}

TEST(survival_is_the_product_of_tempered_sigmoids) {
    float logits[3] = {0.0f, logf(3.0f), -INFINITY}, temps[3] = {1.0f, 2.0f, 1.0f}, a[3];
    CHECK_EQ_INT(di_spec_survival(logits, NULL, 2, a), 0);
    CHECK_NEAR(a[0], 0.5, 1e-7);
    CHECK_NEAR(a[1], 0.5 * 0.75, 1e-7); /* sigmoid(ln 3) = 3/4 */
    CHECK_EQ_INT(di_spec_survival(logits, temps, 3, a), 0);
    CHECK_NEAR(a[1], 0.5 * sqrt(3.0) / (1 + sqrt(3.0)), 1e-7); /* sigmoid(ln 3 / 2) = sqrt 3 / (1 + sqrt 3) */
    CHECK(a[2] == 0.0f);
    float bad_t[1] = {0.0f}, nan_l[1] = {NAN};
    CHECK(di_spec_survival(logits, bad_t, 1, a) == -1);
    CHECK(strstr(di_error_message(), "temperature") != NULL);
    CHECK(di_spec_survival(nan_l, NULL, 1, a) == -1);
}

TEST(cost_curve_is_a_monotone_envelope_with_linear_extrapolation) {
    DiSpecCost c;
    di_spec_cost_init(&c);
    CHECK(di_spec_cost_seconds(&c, 4) < 0); /* empty: refused */
    CHECK(strstr(di_error_message(), "no measurement") != NULL);
    CHECK_EQ_INT(di_spec_cost_observe(&c, 4, 2.0), 0);
    CHECK_NEAR(di_spec_cost_seconds(&c, 2), 2.0, 1e-12);  /* flat before the first point */
    CHECK_NEAR(di_spec_cost_seconds(&c, 8), 4.0, 1e-12);  /* one point: proportional past it */
    di_spec_cost_observe(&c, 8, 1.0);                     /* cheaper than 4 rows: the envelope lifts it */
    di_spec_cost_observe(&c, 12, 4.0);
    double x[8], y[8];
    CHECK_EQ_INT(di_spec_cost_points(&c, x, y, 8), 3);
    CHECK_NEAR(x[1], 8, 1e-12);
    CHECK_NEAR(y[1], 2.0, 1e-12);
    CHECK_NEAR(di_spec_cost_seconds(&c, 10), 3.0, 1e-12); /* halfway from (8, 2) to (12, 4) */
    CHECK_NEAR(di_spec_cost_seconds(&c, 16), 6.0, 1e-12); /* slope 0.5 per row past the last point */
    /* repeated timings of a bucket: a decayed mean (weights 0.9 and 1) */
    di_spec_cost_observe(&c, 4, 3.0);
    CHECK_NEAR(di_spec_cost_seconds(&c, 4), (0.9 * 2.0 + 3.0) / 1.9, 1e-12);
    /* large batches share buckets: 100 and 101 rows fall together (8 buckets per octave) */
    di_spec_cost_observe(&c, 100, 10.0);
    di_spec_cost_observe(&c, 101, 11.0);
    CHECK_EQ_INT(di_spec_cost_points(&c, NULL, NULL, 0), 4);
    CHECK(di_spec_cost_observe(&c, 0, 1.0) == -1);
    CHECK(di_spec_cost_observe(&c, 3, NAN) == -1);
    CHECK(di_spec_cost_observe(&c, 3, -1.0) == -1);
}

TEST(flat_step_cost_admits_every_draft) {
    DiSpecCost c;
    curve_from(&c, 16, flat_cost);
    DiSpecSched *s = di_spec_sched_create(4, 5);
    float a[3 * 5];
    random_survival(a, 3, 5);
    a[2 * 5 + 3] = a[2 * 5 + 4] = 0.0f; /* request 2 has drafted only 3 */
    int32_t caps[3] = {5, 2, 5}, len[3];
    DiSpecDrafts d = {3, 5, a, caps};
    DiSpecStepCost step = {&c, 3, 0.0};
    CHECK_EQ_INT(di_spec_schedule_exact(s, &d, &step, len), 5 + 2 + 3);
    CHECK_EQ_INT(len[0], 5);
    CHECK_EQ_INT(len[1], 2);
    CHECK_EQ_INT(len[2], 3);
    CHECK_EQ_INT(di_spec_budget(s, 3, &step, a, 15, 1.0), 13); /* every positive stale survival */
    di_spec_sched_destroy(s);
}

TEST(steep_step_cost_admits_nothing) {
    DiSpecCost c;
    curve_from(&c, 16, per_row_cost); /* every row costs as much as a request's whole step */
    DiSpecSched *s = di_spec_sched_create(4, 5);
    float a[4 * 5];
    random_survival(a, 4, 5);
    a[0] = 0.999f; /* even a near-certain draft earns less than the row it costs */
    int32_t len[4] = {9, 9, 9, 9};
    DiSpecDrafts d = {4, 5, a, NULL};
    DiSpecStepCost step = {&c, 4, 0.0};
    CHECK_EQ_INT(di_spec_schedule_exact(s, &d, &step, len), 0);
    for (int r = 0; r < 4; r++) CHECK_EQ_INT(len[r], 0);
    CHECK_EQ_INT(di_spec_budget(s, 4, &step, a, 20, 1.0), 0);
    /* a flat verify but a costly drafter: the budget (decided before drafting) skips it; once the
     * drafts exist the drafter is paid for and the exact scheduler takes every draft */
    DiSpecCost flat;
    curve_from(&flat, 16, flat_cost);
    DiSpecStepCost drafty = {&flat, 4, 10.0};
    CHECK_EQ_INT(di_spec_budget(s, 4, &drafty, a, 20, 1.0), 0);
    int positive = 0;
    for (int i = 0; i < 20; i++) positive += a[i] > 0;
    CHECK_EQ_INT(di_spec_schedule_exact(s, &d, &drafty, len), positive);
    di_spec_sched_destroy(s);
}

TEST(ties_go_to_the_lower_flat_index) {
    DiSpecSched *s = di_spec_sched_create(3, 2);
    float a[6] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
    int32_t len[3];
    DiSpecDrafts d = {3, 2, a, NULL};
    CHECK_EQ_INT(di_spec_admit(s, &d, 3, len), 3); /* (0,0) (0,1) (1,0) */
    CHECK_EQ_INT(len[0], 2);
    CHECK_EQ_INT(len[1], 1);
    CHECK_EQ_INT(len[2], 0);
    /* the exact scheduler in the same order: rows up to 6 cost 1, then 100: three drafts pay */
    DiSpecCost c;
    curve_points(&c, 3, (const int64_t[]){1, 6, 7}, (const double[]){1.0, 1.0, 100.0});
    DiSpecStepCost step = {&c, 3, 0.0};
    CHECK_EQ_INT(di_spec_schedule_exact(s, &d, &step, len), 3);
    CHECK_EQ_INT(len[0], 2);
    CHECK_EQ_INT(len[1], 1);
    CHECK_EQ_INT(len[2], 0);
    di_spec_sched_destroy(s);
}

/* The admitted set of di_spec_admit is the top K of an independent ranking, and it is a prefix
 * of every request's drafts (a length vector can only describe prefixes, so equality of the two
 * sets is the prefix property). */
TEST(admitted_drafts_are_the_top_k_and_prefixes) {
    DiSpecSched *s = di_spec_sched_create(6, 5);
    for (int trial = 0; trial < 200; trial++) {
        int R = 1 + (int)(test_rand32() % 6), gamma = 1 + (int)(test_rand32() % 5);
        float a[30];
        random_survival(a, R, gamma);
        if (trial % 3 == 0) /* coarse values: many ties */
            for (int i = 0; i < R * gamma; i++) a[i] = floorf(a[i] * 4) / 4;
        for (int r = 0; r < R; r++) /* keep rows non-increasing after rounding */
            for (int j = 1; j < gamma; j++) a[r * gamma + j] = fminf(a[r * gamma + j], a[r * gamma + j - 1]);
        int64_t K = test_rand32() % (R * gamma + 2);
        int32_t len[6];
        DiSpecDrafts d = {R, gamma, a, NULL};
        int64_t got = di_spec_admit(s, &d, K, len);
        /* reference: pick the best remaining (r, j) K times, ties to the lower flat index */
        uint8_t taken[30] = {0};
        int64_t want = 0;
        for (int64_t k = 0; k < K; k++) {
            int best = -1;
            for (int i = 0; i < R * gamma; i++)
                if (!taken[i] && a[i] > 0 && (best < 0 || a[i] > a[best])) best = i;
            if (best < 0) break;
            taken[best] = 1;
            want++;
        }
        CHECK_EQ_INT(got, want);
        for (int i = 0; i < R * gamma; i++)
            CHECK_MSG(taken[i] == (i % gamma < len[i / gamma]), "trial %d: draft (%d, %d) taken %d, length %d",
                      trial, i / gamma, i % gamma, taken[i], len[i / gamma]);
    }
    di_spec_sched_destroy(s);
}

static double convex_cost_a, convex_cost_b, convex_cost_c;
static double convex_cost(int rows) { return convex_cost_a + convex_cost_b * rows + convex_cost_c * rows * rows; }

/* With a convex step cost the throughput along the ranking is unimodal, so the early stop finds
 * the best of all (gamma + 1)^R length vectors. */
TEST(exact_scheduler_equals_brute_force_when_throughput_is_unimodal) {
    DiSpecSched *s = di_spec_sched_create(3, 3);
    int nonzero = 0, zero = 0;
    for (int trial = 0; trial < 300; trial++) {
        int R = 1 + (int)(test_rand32() % 3), gamma = 1 + (int)(test_rand32() % 3);
        convex_cost_a = 0.2 + rand_unit();
        convex_cost_b = 1.0 * rand_unit();
        convex_cost_c = 0.05 * rand_unit();
        DiSpecCost c;
        curve_from(&c, 16, convex_cost);
        float a[9];
        random_survival(a, R, gamma);
        for (int i = 0; i < R * gamma; i++) a[i] = powf(a[i], 0.3f); /* more survivals near 1 */
        DiSpecDrafts d = {R, gamma, a, NULL};
        DiSpecStepCost step = {&c, R, 0.1 * rand_unit()};
        int32_t len[3];
        CHECK(di_spec_schedule_exact(s, &d, &step, len) >= 0);
        double got = theta_of(a, R, gamma, len, &step), best = 0;
        int32_t v[3] = {0, 0, 0};
        for (int code = 0; code < (int)pow(gamma + 1, R); code++) {
            for (int r = 0, x = code; r < R; r++, x /= gamma + 1) v[r] = x % (gamma + 1);
            double t = theta_of(a, R, gamma, v, &step);
            best = t > best ? t : best;
        }
        CHECK_MSG(fabs(got - best) <= 1e-9 * best, "trial %d: greedy %.12g, brute force %.12g", trial, got, best);
        int total = 0;
        for (int r = 0; r < R; r++) total += len[r];
        total ? nonzero++ : zero++;
    }
    CHECK_MSG(nonzero > 30 && zero > 30, "%d schedules drafted, %d did not", nonzero, zero); /* both are exercised */
    di_spec_sched_destroy(s);
}

/* A step in the cost (one more row is expensive, the next ones free) makes throughput
 * non-unimodal: the budget looks at every b and finds the far optimum the early stop cannot. */
TEST(budget_looks_past_a_dip_the_exact_scheduler_stops_at) {
    DiSpecCost c;
    curve_points(&c, 4, (const int64_t[]){1, 2, 3, 5}, (const double[]){1.0, 1.0, 1.5, 1.5});
    DiSpecSched *s = di_spec_sched_create(2, 2);
    float a[4] = {0.6f, 0.6f, 0.6f, 0.6f};
    DiSpecDrafts d = {2, 2, a, NULL};
    DiSpecStepCost step = {&c, 2, 0.0};
    int32_t len[2];
    /* b = 1: 2.6 / 1.5 < 2 = the baseline; b = 3: 3.8 / 1.5 > 2 */
    CHECK_EQ_INT(di_spec_schedule_exact(s, &d, &step, len), 0);
    CHECK_EQ_INT(di_spec_budget(s, 2, &step, a, 3, 1.0), 3);
    CHECK_EQ_INT(di_spec_budget(s, 2, &step, a, 4, 0.5), 2); /* keep_frac keeps the best 2 of 4 */
    CHECK(di_spec_budget(s, 2, &step, a, 4, 0.0) == -1);
    CHECK(di_spec_budget(s, 2, &step, a, 5, 1.0) == -1); /* more than max_requests * max_draft */
    di_spec_sched_destroy(s);
}

TEST(fixed_lengths_and_bad_inputs) {
    int32_t caps[3] = {5, 0, 2}, len[3];
    CHECK_EQ_INT(di_spec_fixed_lengths(3, 3, caps, len), 0);
    CHECK_EQ_INT(len[0], 3);
    CHECK_EQ_INT(len[1], 0);
    CHECK_EQ_INT(len[2], 2);
    CHECK_EQ_INT(di_spec_fixed_lengths(3, 4, NULL, len), 0);
    CHECK_EQ_INT(len[1], 4);
    CHECK(di_spec_fixed_lengths(3, -1, NULL, len) == -1);
    DiSpecSched *s = di_spec_sched_create(2, 2);
    float rising[4] = {0.2f, 0.4f, 0.1f, 0.0f}, nan_a[4] = {NAN, 0, 0, 0};
    DiSpecDrafts d = {2, 2, rising, NULL};
    CHECK(di_spec_admit(s, &d, 1, len) == -1);
    CHECK(strstr(di_error_message(), "rises") != NULL);
    d.survival = nan_a;
    CHECK(di_spec_admit(s, &d, 1, len) == -1);
    d.survival = rising + 2;
    d.n_requests = 3; /* more than create's 2 */
    CHECK(di_spec_admit(s, &d, 1, len) == -1);
    DiSpecCost empty;
    di_spec_cost_init(&empty);
    float ok[2] = {0.5f, 0.25f};
    DiSpecDrafts one = {1, 2, ok, NULL};
    DiSpecStepCost step = {&empty, 1, 0.0};
    CHECK(di_spec_schedule_exact(s, &one, &step, len) == -1);
    step.required_rows = 0;
    CHECK(di_spec_schedule_exact(s, &one, &step, len) == -1);
    CHECK(strstr(di_error_message(), "required_rows") != NULL);
    CHECK(di_spec_sched_create(0, 5) == NULL);
    di_spec_sched_destroy(s);
}

/* DSP appendix A: target p = (0.7, 0.3) at every position, draft q = (0.5, 0.5), the second
 * confidence high only when the first draft is token 0.  With `steep` costs verifying one draft
 * does not pay but two likely ones do: a scheduler that looks past a non-improving draft
 * verifies exactly when d1 = 0 and the first emitted token becomes 0 with probability
 * 0.5 + 0.5 * 0.7 = 0.85; the early stop decides on d1 before it sees the confidence that depends
 * on it.  With gentle costs one draft always pays and the second only when d1 = 0: the length
 * depends on d1, but only through the admission of d2, which stays lossless.  pairs[a][b] counts
 * the first two emitted tokens (a second, plain step when the first emitted only one). */
static void first_two_tokens(bool exact, bool steep, int n, int pairs[2][2], int lengths[3]) {
    DiSpecVerifier *v = di_spec_verifier_create(2, di_backend_cpu_ref());
    DiSpecSched *s = di_spec_sched_create(1, 2);
    DiSpecCost c;
    const double steep_s[3] = {1.0, 1.6, 1.7}, gentle_s[3] = {1.0, 1.2, 1.3};
    curve_points(&c, 3, (const int64_t[]){1, 2, 3}, steep ? steep_s : gentle_s);
    DiSpecStepCost step = {&c, 1, 0.0};
    DiSamplingParams p;
    di_sampling_params_init(&p);
    const float target[3 * 2] = {0.0f, logf(0.3f / 0.7f), 0.0f, logf(0.3f / 0.7f), 0.0f, logf(0.3f / 0.7f)};
    const float draft[2 * 2] = {0, 0, 0, 0};
    memset(pairs, 0, 4 * sizeof pairs[0][0]);
    memset(lengths, 0, 3 * sizeof *lengths);
    for (int i = 0; i < n; i++) {
        DiSampleContext base = {.position = 100, .seed = (uint64_t)i * 7919u + 1};
        int32_t d[2], out[3], acc, len[1];
        di_spec_draft_pick(v, &p, &base, d, 0, draft, &d[0]);
        di_spec_draft_pick(v, &p, &base, d, 1, draft + 2, &d[1]);
        float conf[2] = {0.0f, d[0] == 0 ? 4.0f : -4.6f}, a[2];
        di_spec_survival(conf, NULL, 2, a);
        DiSpecDrafts dr = {1, 2, a, NULL};
        if (exact) {
            di_spec_schedule_exact(s, &dr, &step, len);
        } else { /* the best length by brute force, no early stop */
            len[0] = 0;
            double best = 1.0 / di_spec_cost_seconds(&c, 1);
            for (int l = 1; l <= 2; l++) {
                double t = (1 + a[0] + (l == 2 ? a[1] : 0)) / di_spec_cost_seconds(&c, 1 + l);
                if (t > best) best = t, len[0] = l;
            }
        }
        lengths[len[0]]++;
        di_spec_verify(v, &p, &base, target, d, len[0], draft, out, NULL, &acc);
        if (acc == 0) { /* one token out: the next one from a plain step at the next position */
            DiSampleContext next = base;
            next.position++;
            int32_t none;
            di_spec_verify(v, &p, &next, target, NULL, 0, NULL, &out[1], NULL, &none);
        }
        pairs[out[0]][out[1]]++;
    }
    di_spec_sched_destroy(s);
    di_spec_verifier_destroy(v);
}

/* Chi-square of pair counts against (0.7, 0.3) x (0.7, 0.3) (3 degrees of freedom). */
static double chi_square_pairs(int pairs[2][2], int n) {
    const double p[2] = {0.7, 0.3};
    double chi = 0;
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            double e = p[a] * p[b] * n;
            chi += (pairs[a][b] - e) * (pairs[a][b] - e) / e;
        }
    return chi;
}

TEST(appendix_a_counterexample_stays_lossless_with_the_early_stop) {
    const int n = 20000; /* standard error of a rate ~0.0033; P(chi2_3 > 20) ~ 2e-4 */
    int pairs[2][2], lengths[3];
    first_two_tokens(false, true, n, pairs, lengths);
    CHECK_NEAR((pairs[0][0] + pairs[0][1]) / (double)n, 0.85, 0.015); /* the distortion is real */
    first_two_tokens(true, true, n, pairs, lengths);
    CHECK_EQ_INT(lengths[0], n); /* one draft never pays, and the early stop looks no further */
    CHECK_NEAR((pairs[0][0] + pairs[0][1]) / (double)n, 0.7, 0.015);
    CHECK_MSG(chi_square_pairs(pairs, n) < 20, "steep costs: chi-square %.1f", chi_square_pairs(pairs, n));
    first_two_tokens(true, false, n, pairs, lengths);
    CHECK(lengths[0] == 0 && lengths[1] > n / 3 && lengths[2] > n / 3); /* d2 verified iff d1 = 0 */
    CHECK_MSG(chi_square_pairs(pairs, n) < 20, "gentle costs: chi-square %.1f", chi_square_pairs(pairs, n));
}

int main(void) {
    RUN_TEST(survival_is_the_product_of_tempered_sigmoids);
    RUN_TEST(cost_curve_is_a_monotone_envelope_with_linear_extrapolation);
    RUN_TEST(flat_step_cost_admits_every_draft);
    RUN_TEST(steep_step_cost_admits_nothing);
    RUN_TEST(ties_go_to_the_lower_flat_index);
    RUN_TEST(admitted_drafts_are_the_top_k_and_prefixes);
    RUN_TEST(exact_scheduler_equals_brute_force_when_throughput_is_unimodal);
    RUN_TEST(budget_looks_past_a_dip_the_exact_scheduler_stops_at);
    RUN_TEST(fixed_lengths_and_bad_inputs);
    RUN_TEST(appendix_a_counterexample_stays_lossless_with_the_early_stop);
    return TEST_SUMMARY();
}
