/* test_prefill_embed_api.c — the control plane as an operator embeds it, through the public
 * header only (include/deepinfer_cluster.h; no src/ header is included here): fit the
 * prefill cost model from profiled steps, plan chunks, tier requests, run the quota controller,
 * and route requests to decode ranks.  Expected values are hand-derived in the comments. */
#include "test.h"

#include "deepinfer_cluster.h"

TEST(cost_model_is_fitted_from_profiled_steps_and_plans_chunks) {
    /* Exact samples of a known model on a (q, c) grid: the fit recovers it. */
    const DiPrefillCost truth = {0.03, 0.02, 25000.0, 5.0, 2.0e6};
    int64_t q[36], c[36];
    double ns[36];
    size_t n = 0;
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++, n++) {
            q[n] = (int64_t)512 << i;
            c[n] = j == 0 ? 0 : (int64_t)4096 << (2 * j);
            ns[n] = di_prefill_cost_ns(&truth, q[n], c[n]);
        }
    DiPrefillCost fit;
    CHECK(di_prefill_cost_fit(q, c, ns, n, 1, &fit) == 0);
    CHECK_NEAR(fit.a / truth.a, 1.0, 1e-6);
    CHECK_NEAR(fit.b / truth.b, 1.0, 1e-6);
    CHECK_NEAR(fit.d / truth.d, 1.0, 1e-6);
    CHECK_NEAR(fit.e / truth.e, 1.0, 1e-6);
    CHECK_NEAR(fit.f / truth.f, 1.0, 1e-6);
    /* Linear-only model, 100 ms budget, empty prefix: 25 us/token -> 4000 tokens fit, rounded
     * down to the 512-token block: 3584 (7 blocks; 8 blocks = 102.4 ms would not fit). */
    const DiPrefillCost linear = {0, 0, 25000.0, 0, 2.0e6};
    const DiChunkRules rules = {512, 512};
    CHECK_EQ_INT(di_prefill_chunk_solve(&linear, 0, 10000, 100e6, &rules), 3584);
    /* A remainder that fits is taken whole, even off the block grid. */
    CHECK_EQ_INT(di_prefill_chunk_solve(&linear, 0, 1000, 100e6, &rules), 1000);
    /* The online correction: steps measured 10 % slow pull the factor toward 1.1. */
    DiPrefillCorrection corr;
    CHECK(di_prefill_correction_init(&corr, 0.5) == 0);
    for (int k = 0; k < 30; k++) di_prefill_correction_update(&corr, 100e6, 110e6);
    CHECK_NEAR(corr.factor, 1.1, 1e-6);
    /* Bad input is an error with a cause, not a crash. */
    CHECK(di_prefill_chunk_solve(NULL, 0, 10, 1e6, &rules) == -1);
    CHECK(strlen(di_last_error()) > 0);
    CHECK(di_prefill_cost_fit(q, c, ns, 3, 1, &fit) == -1);
}

TEST(tiers_and_quota_controller) {
    CHECK_EQ_INT(di_prefill_tier(16383), 0);
    CHECK_EQ_INT(di_prefill_tier(DI_PREFILL_TIER1_MIN), 1);
    CHECK_EQ_INT(di_prefill_tier(DI_PREFILL_TIER2_MIN), 2);
    CHECK_EQ_INT(di_prefill_tier(DI_PREFILL_TIER3_MIN), 3);
    CHECK_EQ_INT(di_prefill_tier(-1), -1);
    /* 8 instances, one home instance per tier; all demand in tier 3: its quota grows by one
     * instance per period (hysteresis) up to 8 - 3 floors = 5, the others keep their floor. */
    DiPrefillQuotaConfig qc = {8, {1, 1, 1, 1}, 0.3, 2.0};
    DiPrefillQuota quota;
    CHECK(di_prefill_quota_init(&quota, &qc) == 0);
    CHECK_EQ_INT(quota.quota[0] + quota.quota[1] + quota.quota[2] + quota.quota[3], 8);
    const double queued[DI_PREFILL_TIERS] = {0, 0, 0, 1e10}, arrivals[DI_PREFILL_TIERS] = {0, 0, 0, 2},
                 mean[DI_PREFILL_TIERS] = {1e6, 1e7, 1e8, 1e9};
    int prev = quota.quota[3];
    for (int k = 0; k < 10; k++) {
        CHECK(di_prefill_quota_update(&quota, queued, arrivals, mean, 1.0) == 0);
        CHECK(quota.quota[3] - prev <= 1);
        prev = quota.quota[3];
    }
    CHECK_EQ_INT(quota.quota[3], 5);
    for (int t = 0; t < 3; t++) CHECK_EQ_INT(quota.quota[t], 1);
    DiPrefillQuotaConfig bad = {2, {1, 1, 1, 0}, 0.3, 2.0}; /* floors above R */
    CHECK(di_prefill_quota_init(&quota, &bad) == -1);
    CHECK(strlen(di_last_error()) > 0);
}

TEST(decode_routing_lifecycle) {
    /* Two ranks, request-count + KV score (§7.2), no look-ahead.  A 30k-token prompt goes to
     * rank 0 (tie -> lower rank); the next 1k prompt avoids rank 0's KV and goes to rank 1; after
     * the first request finishes the ranks are empty again. */
    DiDecodeLbConfig cfg = {2, 0, 4, 1 << 20, DI_DECODE_LB_BALANCED, {10e6, 40e3, 2.0}};
    DiDecodeLb lb;
    CHECK(di_decode_lb_init(&lb, &cfg) == 0);
    int r0 = di_decode_lb_pick(&lb, 30000);
    CHECK_EQ_INT(r0, 0);
    CHECK(di_decode_lb_admit(&lb, r0, 30000) == 0);
    CHECK(di_decode_lb_start(&lb, r0, 30000) == 0);
    int r1 = di_decode_lb_pick(&lb, 1000);
    CHECK_EQ_INT(r1, 1);
    CHECK(di_decode_lb_admit(&lb, r1, 1000) == 0);
    CHECK(di_decode_lb_start(&lb, r1, 1000) == 0);
    di_decode_lb_step(&lb); /* one token each */
    CHECK_EQ_INT(lb.ranks[0].kv, 30001);
    CHECK(di_decode_lb_finish(&lb, r0, 30001) == 0);
    CHECK(di_decode_lb_finish(&lb, r1, 1001) == 0);
    CHECK_EQ_INT(lb.ranks[0].n + lb.ranks[1].n, 0);
    CHECK_EQ_INT(lb.ranks[0].kv + lb.ranks[1].kv, 0);
    /* A finish on an idle rank is a bookkeeping error the caller hears about. */
    CHECK(di_decode_lb_finish(&lb, 0, 10) == -1);
    CHECK(strlen(di_last_error()) > 0);
    DiDecodeLbPolicy p;
    CHECK(di_decode_lb_policy_parse("step-time", &p) == 0 && p == DI_DECODE_LB_STEP_TIME);
    CHECK(di_decode_lb_policy_parse("fastest", &p) == -1);
    di_decode_lb_free(&lb);
}

int main(void) {
    RUN_TEST(cost_model_is_fitted_from_profiled_steps_and_plans_chunks);
    RUN_TEST(tiers_and_quota_controller);
    RUN_TEST(decode_routing_lifecycle);
    return TEST_SUMMARY();
}
