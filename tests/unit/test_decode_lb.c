/* test_decode_lb.c — the decode load balancer (serving.md §7.2, §7.3): the score on
 * hand-derived states, capacity limits never exceeded, LPT batching, the baselines, bookkeeping
 * errors, and the imbalance metric; plus a small simulation where the combined score keeps
 * max/mean step time lower than request-count-only routing. */
#include "test.h"

#include "deepinfer.h"
#include "cluster/decode_lb.h"
#include "cluster/rng.h"

static DiDecodeLbConfig config(int ranks, DiDecodeLbPolicy policy) {
    DiDecodeLbConfig c = {ranks, 0, 256, 1 << 30, policy, {0, 0, 0}};
    return c;
}

TEST(score_prefers_the_binding_resource) {
    DiDecodeLb lb;
    DiDecodeLbConfig c = config(2, DI_DECODE_LB_BALANCED);
    CHECK(di_decode_lb_init(&lb, &c) == 0);
    /* rank 0: 1 request with 100k KV; rank 1: 3 requests with 3k KV; a 1k prompt, H = 0.
     * Means after admission: n̄ = 5/2 = 2.5, K̄ = 104k/2 = 52k.
     * rank 0: max(2/2.5, 101k/52k) = 1.942; rank 1: max(4/2.5, 4k/52k) = 1.6 -> rank 1.
     * Count-only picks rank 0 (2 < 4); KV-only picks rank 1. */
    lb.ranks[0] = (DiDecodeRank){1, 100000, 0, 0};
    lb.ranks[1] = (DiDecodeRank){3, 3000, 0, 0};
    CHECK_EQ_INT(di_decode_lb_pick(&lb, 1000), 1);
    lb.cfg.policy = DI_DECODE_LB_COUNT;
    CHECK_EQ_INT(di_decode_lb_pick(&lb, 1000), 0);
    lb.cfg.policy = DI_DECODE_LB_KV;
    CHECK_EQ_INT(di_decode_lb_pick(&lb, 1000), 1);
    /* Make the request count binding on rank 1: with 20 requests n̄ = 11, rank 1 scores
     * 21/11 = 1.909 < 1.942 (still rank 1); with 40, n̄ = 21 and 41/21 = 1.952 > 1.942 -> rank 0. */
    lb.cfg.policy = DI_DECODE_LB_BALANCED;
    lb.ranks[1].n = 20;
    CHECK_EQ_INT(di_decode_lb_pick(&lb, 1000), 1);
    lb.ranks[1].n = 40;
    CHECK_EQ_INT(di_decode_lb_pick(&lb, 1000), 0);
    di_decode_lb_free(&lb);
}

TEST(lookahead_counts_growth_of_running_requests) {
    DiDecodeLb lb;
    DiDecodeLbConfig c = config(2, DI_DECODE_LB_KV);
    c.lookahead_steps = 1000;
    CHECK(di_decode_lb_init(&lb, &c) == 0);
    /* rank 0: 10 requests, 10k KV -> +10k in 1000 steps = 20k; rank 1: 1 request, 15k -> 16k */
    lb.ranks[0] = (DiDecodeRank){10, 10000, 0, 0};
    lb.ranks[1] = (DiDecodeRank){1, 15000, 0, 0};
    CHECK_EQ_INT(di_decode_lb_pick(&lb, 100), 1);
    lb.cfg.lookahead_steps = 0; /* without look-ahead rank 0 looks lighter */
    CHECK_EQ_INT(di_decode_lb_pick(&lb, 100), 0);
    di_decode_lb_free(&lb);
}

TEST(capacity_is_never_exceeded) {
    DiDecodeLb lb;
    DiDecodeLbConfig c = {4, 16, 8, 40000, DI_DECODE_LB_BALANCED, {0, 0, 0}};
    CHECK(di_decode_lb_init(&lb, &c) == 0);
    DiRng r = di_rng_seed(3);
    int rejected = 0;
    for (int i = 0; i < 200; i++) {
        int64_t p = 100 + (int64_t)(di_rng_uniform(&r) * 8000);
        int g = di_decode_lb_pick(&lb, p);
        if (g < 0) {
            rejected++;
            CHECK(strstr(di_last_error(), "capacity") != NULL);
            continue;
        }
        CHECK(di_decode_lb_admit(&lb, g, p) == 0);
        CHECK(di_decode_lb_start(&lb, g, p) == 0);
        for (int k = 0; k < 16; k++) di_decode_lb_step(&lb);
        for (int h = 0; h < 4; h++) {
            CHECK(lb.ranks[h].n <= 8);
            CHECK(lb.ranks[h].kv <= 40000);
        }
    }
    CHECK(rejected > 0);
    di_decode_lb_free(&lb);
}

TEST(round_robin_cycles_and_batches_go_longest_first) {
    DiDecodeLb lb;
    DiDecodeLbConfig c = config(3, DI_DECODE_LB_ROUND_ROBIN);
    CHECK(di_decode_lb_init(&lb, &c) == 0);
    int seq[6];
    for (int i = 0; i < 6; i++) {
        seq[i] = di_decode_lb_pick(&lb, 10);
        di_decode_lb_admit(&lb, seq[i], 10);
    }
    for (int i = 0; i < 6; i++) CHECK_EQ_INT(seq[i], i % 3);
    di_decode_lb_free(&lb);
    c = config(2, DI_DECODE_LB_KV);
    CHECK(di_decode_lb_init(&lb, &c) == 0);
    /* LPT over {1, 9, 5, 5} with KV-only scores (pending prompts count): 9 -> r0 (all empty,
     * lowest rank), 5 -> r1 (0 < 9), 5 -> r1 (5 < 9), 1 -> r0 (9 < 10). */
    int64_t prompts[4] = {1, 9, 5, 5};
    int ranks[4];
    CHECK_EQ_INT(di_decode_lb_assign_batch(&lb, prompts, 4, ranks), 4);
    CHECK(ranks[1] == 0 && ranks[2] == 1 && ranks[3] == 1 && ranks[0] == 0);
    CHECK_EQ_INT(lb.ranks[0].pending_kv, 10);
    CHECK_EQ_INT(lb.ranks[1].pending_kv, 10);
    di_decode_lb_free(&lb);
}

TEST(bookkeeping_errors_and_imbalance) {
    DiDecodeLb lb;
    DiDecodeLbConfig c = config(2, DI_DECODE_LB_BALANCED);
    CHECK(di_decode_lb_init(&lb, &c) == 0);
    CHECK(di_decode_lb_start(&lb, 0, 10) != 0); /* nothing pending */
    CHECK(di_decode_lb_finish(&lb, 1, 0) != 0);
    CHECK(di_decode_lb_admit(&lb, 2, 10) != 0);
    CHECK(di_decode_lb_pick(&lb, -5) < 0);
    DiDecodeCost cost = {1000, 100, 1};
    CHECK_NEAR(di_decode_lb_imbalance(&lb, &cost, NULL), 1.0, 0);
    lb.ranks[0] = (DiDecodeRank){2, 3000, 0, 0}; /* t = 1000 + 200 + 3000 = 4200 */
    lb.ranks[1] = (DiDecodeRank){1, 700, 0, 0};  /* t = 1000 + 100 + 700 = 1800; mean 3000 */
    double max;
    CHECK_NEAR(di_decode_lb_imbalance(&lb, &cost, &max), 1.4, 1e-12);
    CHECK_NEAR(max, 4200, 1e-9);
    DiDecodeLbPolicy p;
    CHECK(di_decode_lb_policy_parse("count", &p) == 0 && p == DI_DECODE_LB_COUNT);
    CHECK(di_decode_lb_policy_parse("fastest", &p) != 0);
    CHECK(di_decode_lb_policy_parse("step-time", &p) == 0 && p == DI_DECODE_LB_STEP_TIME);
    di_decode_lb_free(&lb);
    DiDecodeLbConfig no_cost = {2, 0, 1, 1, DI_DECODE_LB_STEP_TIME, {0, 0, 0}};
    CHECK(di_decode_lb_init(&lb, &no_cost) != 0);
    DiDecodeLbConfig bad = {0, 0, 1, 1, DI_DECODE_LB_BALANCED, {0, 0, 0}};
    CHECK(di_decode_lb_init(&lb, &bad) != 0);
}

/* Steady-state toy: Poisson arrivals of mixed prompts, geometric outputs; returns the mean
 * over steps of max/mean step time. */
static double run_toy(DiDecodeLbPolicy policy) {
    enum { G = 16, MAXR = 4096 };
    DiDecodeLb lb;
    DiDecodeLbConfig c = {G, 64, 256, 1 << 30, policy, {5e6, 2e4, 50}};
    di_decode_lb_init(&lb, &c);
    DiDecodeCost cost = {5e6, 2e4, 50};
    struct { int rank; int64_t kv, left; } req[MAXR];
    int nreq = 0;
    DiRng r = di_rng_seed(99);
    double sum_ratio = 0;
    int steps = 0;
    for (int step = 0; step < 3000; step++) {
        int arrivals = (int)(di_rng_uniform(&r) * 4.0); /* 0..3 per step */
        for (int a = 0; a < arrivals && nreq < MAXR; a++) {
            int64_t p = di_rng_uniform(&r) < 0.2 ? 30000 + (int64_t)(di_rng_uniform(&r) * 60000)
                                                 : 500 + (int64_t)(di_rng_uniform(&r) * 4000);
            int g = di_decode_lb_pick(&lb, p);
            if (g < 0) continue;
            di_decode_lb_admit(&lb, g, p);
            di_decode_lb_start(&lb, g, p);
            req[nreq].rank = g;
            req[nreq].kv = p;
            req[nreq].left = 20 + (int64_t)di_rng_exponential(&r, 300);
            nreq++;
        }
        if (step > 500) {
            sum_ratio += di_decode_lb_imbalance(&lb, &cost, NULL);
            steps++;
        }
        di_decode_lb_step(&lb);
        for (int i = 0; i < nreq;) {
            req[i].kv++;
            if (--req[i].left == 0) {
                di_decode_lb_finish(&lb, req[i].rank, req[i].kv);
                req[i] = req[--nreq];
            } else {
                i++;
            }
        }
    }
    di_decode_lb_free(&lb);
    return sum_ratio / steps;
}

TEST(combined_score_beats_count_only_and_round_robin) {
    double balanced = run_toy(DI_DECODE_LB_BALANCED), count = run_toy(DI_DECODE_LB_COUNT),
           rr = run_toy(DI_DECODE_LB_ROUND_ROBIN), step = run_toy(DI_DECODE_LB_STEP_TIME);
    CHECK_MSG(balanced < count && balanced < rr, "balanced %.3f, count %.3f, round robin %.3f", balanced, count, rr);
    CHECK_MSG(step < count && step < rr, "step-time %.3f, count %.3f, round robin %.3f", step, count, rr);
    CHECK_MSG(balanced <= 1.10 && step <= 1.10, "imbalance: balanced %.3f, step-time %.3f", balanced, step);
}

int main(void) {
    RUN_TEST(score_prefers_the_binding_resource);
    RUN_TEST(lookahead_counts_growth_of_running_requests);
    RUN_TEST(capacity_is_never_exceeded);
    RUN_TEST(round_robin_cycles_and_batches_go_longest_first);
    RUN_TEST(bookkeeping_errors_and_imbalance);
    RUN_TEST(combined_score_beats_count_only_and_round_robin);
    return TEST_SUMMARY();
}
