/* test_eplb_policy.c — the dynamic EPLB policy (serving.md §8.2-8.3): presets of §2.1, the
 * window/period semantics (the plan at a period end equals a direct plan of the window's
 * summed loads), the per-step moe_lb scoring, and config validation. */
#include "test.h"

#include "deepinfer.h"
#include "cluster/eplb_policy.h"

#include <stdint.h>

TEST(presets_match_section_2_1) {
    DiEplbPolicyConfig p = di_eplb_policy_preset(DI_EPLB_PREFILL, 40, 384, 8, 1, 8);
    CHECK(p.redundant_per_gpu == 4 && p.window_steps == 100 && p.period_steps == 1000);
    DiEplbPolicyConfig d = di_eplb_policy_preset(DI_EPLB_DECODE, 40, 384, 8, 8, 64);
    CHECK(d.redundant_per_gpu == 1 && d.window_steps == 1000 && d.period_steps == 10000);
    CHECK(p.warmup_steps == 0 && d.warmup_steps == 100);
    DiEplbPolicy *pol = di_eplb_policy_create(&d);
    CHECK(pol != NULL);
    if (pol) CHECK_EQ_INT(di_eplb_policy_plan(pol)->num_replicas, 384 + 64);
    di_eplb_policy_destroy(pol);
}

/* Load for one step: expert `hot` gets 100 tokens, every other expert 1. */
static void hot_load(float *w, int L, int E, int hot) {
    for (int i = 0; i < L * E; i++) w[i] = (i % E == hot) ? 100.0f : 1.0f;
}

TEST(plan_at_period_end_uses_only_the_window) {
    enum { L = 2, E = 16, P = 4 };
    DiEplbPolicyConfig c = {L, E, 4, 2, P, 1, 3, 10, 0}; /* window 3, period 10 */
    DiEplbPolicy *pol = di_eplb_policy_create(&c);
    CHECK(pol != NULL);
    if (!pol) return;
    float w[L * E], window_sum[L * E];
    memset(window_sum, 0, sizeof window_sum);
    int replanned = 0;
    for (int step = 1; step <= 10; step++) {
        hot_load(w, L, E, step <= 7 ? 3 : 12); /* expert 3 hot before the window, 12 inside it */
        if (step >= 8)
            for (int i = 0; i < L * E; i++) window_sum[i] += w[i];
        CHECK(di_eplb_policy_record(pol, w, &replanned) == 0);
        CHECK_EQ_INT(replanned, step == 3 || step == 10); /* cold start after one window, then periods */
    }
    const DiEplbPlan *plan = di_eplb_policy_plan(pol);
    CHECK(plan->logcnt[12] >= 2); /* the hot expert of the window got its node's redundant slots */
    CHECK_EQ_INT(plan->logcnt[3], 1);
    DiEplbPlan direct;
    CHECK(di_eplb_rebalance(window_sum, L, E, E + P, 4, 2, P, &direct) == 0);
    for (int i = 0; i < L * (E + P); i++) CHECK_EQ_INT(plan->phy2log[i], direct.phy2log[i]);
    di_eplb_plan_free(&direct);
    DiEplbPolicyStats s = di_eplb_policy_stats(pol);
    CHECK_EQ_INT(s.steps, 10);
    CHECK_EQ_INT(s.replans, 2);
    CHECK(s.moved_slots > 0);
    /* 9 more steps: no replan until step 20 */
    for (int step = 11; step <= 19; step++) {
        CHECK(di_eplb_policy_record(pol, w, &replanned) == 0);
        CHECK_EQ_INT(replanned, 0);
    }
    CHECK(di_eplb_policy_record(pol, w, &replanned) == 0);
    CHECK_EQ_INT(replanned, 1);
    di_eplb_policy_destroy(pol);
}

/* warmup_steps = 2: the first plan comes after 2 steps, from exactly those 2 steps' loads (hot
 * expert 5), before the 3-step window would have closed; the second when the window closes
 * (step 3); then only at period ends. */
TEST(warmup_brings_the_first_plan_forward) {
    enum { L = 2, E = 16, P = 4 };
    DiEplbPolicyConfig c = {L, E, 4, 2, P, 1, 3, 10, 2};
    DiEplbPolicy *pol = di_eplb_policy_create(&c);
    CHECK(pol != NULL);
    if (!pol) return;
    float w[L * E];
    int replanned = 0;
    hot_load(w, L, E, 5);
    for (int step = 1; step <= 10; step++) {
        CHECK(di_eplb_policy_record(pol, w, &replanned) == 0);
        CHECK_EQ_INT(replanned, step == 2 || step == 3 || step == 10);
        if (step == 2) {
            const DiEplbPlan *plan = di_eplb_policy_plan(pol);
            CHECK(plan->logcnt[5] >= 2);
            float two[L * E];
            for (int i = 0; i < L * E; i++) two[i] = 2 * w[i];
            DiEplbPlan direct;
            CHECK(di_eplb_rebalance(two, L, E, E + P, 4, 2, P, &direct) == 0);
            for (int i = 0; i < L * (E + P); i++) CHECK_EQ_INT(plan->phy2log[i], direct.phy2log[i]);
            di_eplb_plan_free(&direct);
        }
    }
    di_eplb_policy_destroy(pol);
    DiEplbPolicyConfig bad = {L, E, 4, 2, P, 1, 3, 10, 11}; /* warm-up past the period */
    CHECK(di_eplb_policy_create(&bad) == NULL);
    CHECK(strstr(di_last_error(), "warmup_steps") != NULL);
}

TEST(step_scoring_equals_moe_lb_of_plan_in_force) {
    enum { L = 3, E = 24, P = 8 };
    DiEplbPolicyConfig c = {L, E, 1, 1, P, 1, 2, 4, 0};
    DiEplbPolicy *pol = di_eplb_policy_create(&c);
    CHECK(pol != NULL);
    if (!pol) return;
    float w[L * E];
    double sum_max = 0, sum_mean = 0;
    for (int step = 1; step <= 9; step++) {
        for (int i = 0; i < L * E; i++) w[i] = (float)((i * 7 + step * 13) % 29);
        /* expected: per-layer max and mean under the current plan, computed via di_eplb_moe_lb */
        const DiEplbPlan *plan = di_eplb_policy_plan(pol);
        double per_layer[L], agg;
        CHECK(di_eplb_moe_lb(plan, w, per_layer, &agg) == 0);
        double mean_step = 0, max_step = 0;
        for (int l = 0; l < L; l++) {
            double tot = 0;
            for (int e = 0; e < E; e++) tot += w[l * E + e];
            mean_step += tot / P;
            max_step += per_layer[l] * tot / P;
        }
        sum_max += max_step;
        sum_mean += mean_step;
        CHECK(di_eplb_policy_record(pol, w, NULL) == 0);
        CHECK_NEAR(di_eplb_policy_stats(pol).last_step_moe_lb, max_step / mean_step, 1e-9);
    }
    CHECK_NEAR(di_eplb_policy_moe_lb(pol), sum_max / sum_mean, 1e-9);
    di_eplb_policy_destroy(pol);
}

TEST(bad_configs_and_loads_are_rejected) {
    DiEplbPolicyConfig c = {2, 16, 4, 2, 4, 1, 20, 10, 0}; /* window > period */
    CHECK(di_eplb_policy_create(&c) == NULL);
    CHECK(strstr(di_last_error(), "window") != NULL);
    c.window_steps = 5;
    c.num_gpus = 3; /* 16 experts over 3 GPUs */
    CHECK(di_eplb_policy_create(&c) == NULL);
    CHECK(strstr(di_last_error(), "evenly") != NULL);
    c.num_gpus = 4;
    DiEplbPolicy *pol = di_eplb_policy_create(&c);
    CHECK(pol != NULL);
    float w[32];
    for (int i = 0; i < 32; i++) w[i] = 1.0f;
    w[17] = -1.0f;
    CHECK(di_eplb_policy_record(pol, w, NULL) != 0);
    CHECK(strstr(di_last_error(), "load[1][1]") != NULL);
    CHECK(di_eplb_policy_record(pol, NULL, NULL) != 0);
    di_eplb_policy_destroy(pol);
}

int main(void) {
    RUN_TEST(presets_match_section_2_1);
    RUN_TEST(plan_at_period_end_uses_only_the_window);
    RUN_TEST(warmup_brings_the_first_plan_forward);
    RUN_TEST(step_scoring_equals_moe_lb_of_plan_in_force);
    RUN_TEST(bad_configs_and_loads_are_rejected);
    return TEST_SUMMARY();
}
