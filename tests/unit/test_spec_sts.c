/* test_spec_sts.c — online STS calibration (engine-features.md §1.3 j, §1.7 item 6): which
 * outcomes count as trials and hits, the decay, the cold start, a shrinkage case solved by hand,
 * and synthetic confidence logits whose true acceptance is sigmoid(z / 2) fitted to T = 2. */
#include "test.h"

#include "base/error.h"
#include "engine/spec_sts.h"

#include <math.h>
#include <stdbool.h>

/* One grid step is a factor 8^(1/24) ~ 1.09. */
static const double grid_step = 1.0905077326652577;

static double rand_unit(void) { return (test_rand32() & 0xFFFFFF) / 16777216.0; }

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

static int bin_count(const double *h) {
    int n = 0;
    for (int b = 0; b < DI_SPEC_STS_BINS; b++) n += h[b] != 0;
    return n;
}

TEST(grid_spans_an_eighth_to_eight_with_one_and_two_on_it) {
    CHECK_NEAR(di_spec_sts_grid(0), 0.125, 1e-12);
    CHECK_NEAR(di_spec_sts_grid(24), 1.0, 1e-12);
    CHECK_NEAR(di_spec_sts_grid(32), 2.0, 1e-12);
    CHECK_NEAR(di_spec_sts_grid(48), 8.0, 1e-12);
    CHECK_NEAR(di_spec_sts_grid(1) / di_spec_sts_grid(0), grid_step, 1e-12);
}

TEST(cold_start_is_temperature_one) {
    DiSpecSts sts;
    CHECK_EQ_INT(di_spec_sts_init(&sts, 5), 0);
    CHECK_EQ_INT(di_spec_sts_refit(&sts), 0);
    for (int k = 0; k < 5; k++) CHECK(sts.temps[k] == 1.0f);
    CHECK(di_spec_sts_init(&sts, 0) == -1);
    CHECK(di_spec_sts_init(&sts, DI_SPEC_STS_MAX_POSITIONS + 1) == -1);
}

/* Three drafts verified, the first accepted: positions 0 and 1 were trials (1 was reached), only
 * 0 a hit, 2 never reached.  Logits fall in unit bins over [-8, 8], outside values in the ends. */
TEST(trials_are_reached_positions_and_hits_accepted_ones) {
    DiSpecSts sts;
    di_spec_sts_init(&sts, 4);
    float z[4] = {0.5f, -3.2f, 9.0f, 1.0f};
    CHECK_EQ_INT(di_spec_sts_observe(&sts, z, 4, 3, 1), 0);
    CHECK(sts.trials[0][8] == 1.0 && sts.hits[0][8] == 1.0);  /* 0.5 in [0, 1) */
    CHECK(sts.trials[1][4] == 1.0 && sts.hits[1][4] == 0.0);  /* -3.2 in [-4, -3) */
    CHECK_EQ_INT(bin_count(sts.trials[0]) + bin_count(sts.trials[1]), 2);
    CHECK_EQ_INT(bin_count(sts.trials[2]) + bin_count(sts.trials[3]), 0);
    /* everything verified was accepted: every verified position is a trial and a hit */
    CHECK_EQ_INT(di_spec_sts_observe(&sts, z, 4, 3, 3), 0);
    CHECK(sts.trials[2][15] == 1.0 && sts.hits[2][15] == 1.0); /* 9 clamps into the last bin */
    CHECK_NEAR(sts.trials[0][8], 1.999, 1e-12); /* the old count decays by 0.999 */
    CHECK_EQ_INT(bin_count(sts.trials[3]), 0);  /* drafted, never verified */
    /* nothing verified: nothing learnt */
    DiSpecSts before = sts;
    CHECK_EQ_INT(di_spec_sts_observe(&sts, z, 4, 0, 0), 0);
    CHECK(memcmp(&before, &sts, sizeof sts) == 0);
    CHECK(di_spec_sts_observe(&sts, z, 4, 2, 3) == -1);
    CHECK(strstr(di_error_message(), "accepted") != NULL);
    CHECK(di_spec_sts_observe(&sts, z, 5, 2, 1) == -1);
    float nan_z[1] = {NAN};
    CHECK(di_spec_sts_observe(&sts, nan_z, 1, 1, 0) == -1);
}

/* Position 0: 64 trials in the bin of mid 2.5 at rate sigmoid(2.5 / 2) (fit: T = 2); position 1:
 * 64000 trials in the bin of mid -1.5 at rate sigmoid(-1.5 / 0.5) (fit: T = 0.5), which also
 * decides the pooled fit.  Shrinkage in log T with weight n / (n + 64): position 0 gets the
 * geometric mean of 2 and 0.5 (weight 1/2), position 1 stays at 0.5. */
TEST(shrinkage_toward_the_pooled_fit_is_solved_by_hand) {
    DiSpecSts sts;
    di_spec_sts_init(&sts, 2);
    sts.trials[0][10] = 64;
    sts.hits[0][10] = 64 * sigmoid(2.5 / 2.0);
    sts.trials[1][6] = 64000;
    sts.hits[1][6] = 64000 * sigmoid(-1.5 / 0.5);
    CHECK_EQ_INT(di_spec_sts_refit(&sts), 0);
    CHECK_NEAR(sts.temps[0], 1.0, 1e-6);
    CHECK_NEAR(sts.temps[1], 0.5, 1e-6);
}

/* The brief's fit test: logits uniform in [-7, 7], accepted with probability sigmoid(z / 2), every
 * draft position alike; 20000 observations of 3 drafts. */
TEST(acceptance_sigmoid_of_half_the_logit_fits_temperature_two) {
    DiSpecSts sts;
    di_spec_sts_init(&sts, 3);
    for (int i = 0; i < 20000; i++) {
        float z[3];
        int accepted = 0;
        bool alive = true;
        for (int k = 0; k < 3; k++) {
            z[k] = (float)(14 * rand_unit() - 7);
            if (alive && rand_unit() < sigmoid(z[k] / 2.0)) accepted++;
            else alive = false;
        }
        di_spec_sts_observe(&sts, z, 3, 3, accepted);
    }
    CHECK_EQ_INT(di_spec_sts_refit(&sts), 0);
    for (int k = 0; k < 3; k++)
        CHECK_MSG(fabs(log(sts.temps[k] / 2.0)) <= log(grid_step) * 1.01, "position %d: T = %g", k, sts.temps[k]);
    /* and an over-confident head (true rate sigmoid(z / 4)) moves toward 4 */
    DiSpecSts hot;
    di_spec_sts_init(&hot, 1);
    for (int i = 0; i < 20000; i++) {
        float z = (float)(14 * rand_unit() - 7);
        di_spec_sts_observe(&hot, &z, 1, 1, rand_unit() < sigmoid(z / 4.0));
    }
    di_spec_sts_refit(&hot);
    CHECK_MSG(fabs(log(hot.temps[0] / 4.0)) <= log(grid_step) * 1.01, "T = %g", hot.temps[0]);
}

int main(void) {
    RUN_TEST(grid_spans_an_eighth_to_eight_with_one_and_two_on_it);
    RUN_TEST(cold_start_is_temperature_one);
    RUN_TEST(trials_are_reached_positions_and_hits_accepted_ones);
    RUN_TEST(shrinkage_toward_the_pooled_fit_is_solved_by_hand);
    RUN_TEST(acceptance_sigmoid_of_half_the_logit_fits_temperature_two);
    return TEST_SUMMARY();
}
