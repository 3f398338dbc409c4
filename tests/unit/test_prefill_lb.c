/* test_prefill_lb.c — prefill tiers and the quota controller (serving.md §6.2): tier bounds,
 * proportional targets with floors, hysteresis (at most one instance per tier per period),
 * convergence to the demand split, and config validation. */
#include "test.h"

#include "deepinfer.h"
#include "cluster/prefill_lb.h"

TEST(tier_bounds_are_16k_64k_256k) {
    CHECK_EQ_INT(di_prefill_tier(0), 0);
    CHECK_EQ_INT(di_prefill_tier(16383), 0);
    CHECK_EQ_INT(di_prefill_tier(16384), 1);
    CHECK_EQ_INT(di_prefill_tier(65535), 1);
    CHECK_EQ_INT(di_prefill_tier(65536), 2);
    CHECK_EQ_INT(di_prefill_tier(262143), 2);
    CHECK_EQ_INT(di_prefill_tier(262144), 3);
    CHECK_EQ_INT(di_prefill_tier(1 << 20), 3);
    CHECK(di_prefill_tier(-1) < 0);
}

static int sum4(const int v[4]) { return v[0] + v[1] + v[2] + v[3]; }

TEST(targets_proportional_with_floors) {
    DiPrefillQuotaConfig c = {16, {1, 1, 1, 1}, 0.5, 1.0};
    int t[4];
    const double d1[4] = {8, 4, 2, 2}; /* exactly proportional: 8 4 2 2 */
    CHECK(di_prefill_quota_targets(&c, d1, t) == 0);
    CHECK(t[0] == 8 && t[1] == 4 && t[2] == 2 && t[3] == 2);
    const double d2[4] = {100, 0, 0, 1}; /* tiers 1 and 2 pinned to their floor, 3 too (share 0.14) */
    CHECK(di_prefill_quota_targets(&c, d2, t) == 0);
    CHECK(t[0] == 13 && t[1] == 1 && t[2] == 1 && t[3] == 1);
    const double d3[4] = {1, 1, 1, 0}; /* 15 over three tiers: 5 5 5 1 */
    CHECK(di_prefill_quota_targets(&c, d3, t) == 0);
    CHECK(t[0] == 5 && t[1] == 5 && t[2] == 5 && t[3] == 1);
    const double d4[4] = {1, 1, 1, 1}; /* 16/4 */
    CHECK(di_prefill_quota_targets(&c, d4, t) == 0);
    CHECK(t[0] == 4 && t[3] == 4);
    const double zero[4] = {0, 0, 0, 0};
    CHECK(di_prefill_quota_targets(&c, zero, t) == 0);
    CHECK(t[0] == 13 && t[1] == 1 && sum4(t) == 16);
    const double d5[4] = {1, 1, 1, 2}; /* 3.2 3.2 3.2 6.4 -> largest remainders */
    CHECK(di_prefill_quota_targets(&c, d5, t) == 0);
    CHECK_EQ_INT(sum4(t), 16);
    CHECK(t[3] == 6 || t[3] == 7);
}

TEST(controller_moves_one_instance_per_tier_per_period_and_converges) {
    DiPrefillQuotaConfig c = {16, {1, 1, 1, 0}, 1.0, 0.0};
    DiPrefillQuota q;
    CHECK(di_prefill_quota_init(&q, &c) == 0);
    CHECK_EQ_INT(sum4(q.quota), 16);
    const double queued[4] = {0, 0, 1e9, 0}; /* all demand in tier 2 */
    const double arrivals[4] = {0, 0, 0, 0}, mean[4] = {1, 1, 1, 1};
    int prev[4];
    for (int period = 0; period < 20; period++) {
        memcpy(prev, q.quota, sizeof prev);
        CHECK(di_prefill_quota_update(&q, queued, arrivals, mean, 1.0) == 0);
        CHECK_EQ_INT(sum4(q.quota), 16);
        for (int t = 0; t < 4; t++) {
            CHECK(abs(q.quota[t] - prev[t]) <= 1);
            CHECK(q.quota[t] >= c.min_quota[t]);
        }
    }
    CHECK(q.quota[0] == 1 && q.quota[1] == 1 && q.quota[2] == 14 && q.quota[3] == 0);
    /* steady demand: no more moves */
    int64_t moves = q.moves;
    CHECK(di_prefill_quota_update(&q, queued, arrivals, mean, 1.0) == 0);
    CHECK_EQ_INT(q.moves, moves);
}

TEST(arrival_rate_is_an_ewma) {
    DiPrefillQuotaConfig c = {8, {0, 0, 0, 0}, 0.25, 2.0};
    DiPrefillQuota q;
    CHECK(di_prefill_quota_init(&q, &c) == 0);
    const double queued[4] = {0}, mean[4] = {10, 10, 10, 10};
    const double a1[4] = {8, 0, 0, 0}, a2[4] = {0, 0, 0, 0};
    CHECK(di_prefill_quota_update(&q, queued, a1, mean, 2.0) == 0);
    CHECK_NEAR(q.rate[0], 4.0, 1e-12); /* first period initialises */
    CHECK(di_prefill_quota_update(&q, queued, a2, mean, 2.0) == 0);
    CHECK_NEAR(q.rate[0], 3.0, 1e-12); /* 0.25 * 0 + 0.75 * 4 */
}

TEST(bad_configs_rejected) {
    DiPrefillQuota q;
    DiPrefillQuotaConfig c = {3, {1, 1, 1, 1}, 0.5, 1.0};
    CHECK(di_prefill_quota_init(&q, &c) != 0);
    CHECK(strstr(di_last_error(), "floors") != NULL);
    DiPrefillQuotaConfig c2 = {4, {0, 0, 0, 0}, 0.0, 1.0};
    CHECK(di_prefill_quota_init(&q, &c2) != 0);
    DiPrefillQuotaConfig c3 = {4, {0, 0, 0, 0}, 0.5, 1.0};
    CHECK(di_prefill_quota_init(&q, &c3) == 0);
    const double bad[4] = {-1, 0, 0, 0}, ok[4] = {0};
    CHECK(di_prefill_quota_update(&q, bad, ok, ok, 1.0) != 0);
    CHECK(di_prefill_quota_update(&q, ok, ok, ok, 0.0) != 0);
}

int main(void) {
    RUN_TEST(tier_bounds_are_16k_64k_256k);
    RUN_TEST(targets_proportional_with_floors);
    RUN_TEST(controller_moves_one_instance_per_tier_per_period_and_converges);
    RUN_TEST(arrival_rate_is_an_ewma);
    RUN_TEST(bad_configs_rejected);
    return TEST_SUMMARY();
}
