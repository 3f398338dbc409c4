/* test_sim.c — the cluster simulator end to end (serving.md §6.4, §7.3, §8.4, §11): a single
 * request whose TTFT and TPOT follow by hand from the cost models, token conservation, seeded
 * determinism, the balancers against their baselines on a loaded synthetic workload (tiered
 * short-tier TTFT p99 below the single FIFO's, the longer tiers within 2 % of it; decode
 * imbalance <= 1.10 and below request-count and round-robin routing; EPLB moe_lb below no
 * EPLB), the bounded overtaking of long prefills, and configuration errors. */
#include "test.h"

#include "deepinfer.h"
#include "cluster/sim/sim.h"

#include <stdint.h>

static DiSimConfig small_config(void) {
    DiSimConfig c;
    di_sim_config_default(&c);
    c.moe_layers = 0;
    return c;
}

TEST(the_scheduler_fits_its_cost_model_from_profiled_steps) {
    uint64_t blocks[1] = {0};
    DiSimRequest r = {0.0, 1000, 1, blocks, 1};
    DiSimTrace t = {&r, 1, blocks, 1};
    DiSimConfig c = small_config();
    DiSimResult res;
    CHECK(di_sim_run(&t, &c, &res) == 0);
    /* 2 % profiling noise: the dominant terms come back within a few percent */
    CHECK_NEAR(res.fitted_prefill_cost.d / c.prefill_cost.d, 1.0, 0.03);
    CHECK_NEAR(res.fitted_prefill_cost.f / c.prefill_cost.f, 1.0, 0.05);
    c.profile_noise = 0.0; /* exact measurements: exact coefficients */
    CHECK(di_sim_run(&t, &c, &res) == 0);
    CHECK_NEAR(res.fitted_prefill_cost.a / c.prefill_cost.a, 1.0, 1e-6);
    CHECK_NEAR(res.fitted_prefill_cost.b / c.prefill_cost.b, 1.0, 1e-6);
}

TEST(one_request_follows_the_cost_models_exactly) {
    uint64_t blocks[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    DiSimRequest r = {0.0, 4096, 3, blocks, 8};
    DiSimTrace t = {&r, 1, blocks, 8};
    DiSimConfig c = small_config();
    DiSimResult res;
    CHECK(di_sim_run(&t, &c, &res) == 0);
    CHECK_EQ_INT(res.completed, 1);
    /* prefill: one rank runs all 4096 tokens in one step (budget 150 ms holds 4096 x 25 us = 102 ms):
     * f + a q² + d q, with c = 0 */
    double q = 4096, ttft = (c.prefill_cost.f + c.prefill_cost.a * q * q + c.prefill_cost.d * q) * 1e-9;
    CHECK_NEAR(res.ttft_s[0].p50, ttft, 1e-9);
    CHECK_EQ_INT(res.prefill_steps, 1);
    CHECK_EQ_INT(res.prefill_tokens_computed, 4096);
    /* decode: 2 steps (the first of 3 tokens came from prefill), one request with K = 4096 then
     * 4097 KV tokens: step = alpha + beta + gamma K */
    double s1 = c.decode_cost.alpha + c.decode_cost.beta + c.decode_cost.gamma * 4096;
    double s2 = c.decode_cost.alpha + c.decode_cost.beta + c.decode_cost.gamma * 4097;
    CHECK_NEAR(res.tpot_s.p50, (s1 + s2) / 2 * 1e-9, 1e-12);
    CHECK_EQ_INT(res.decode_steps, 2);
    /* a lone request: every other decode rank idles at alpha, so max/mean = s / mean */
    double mean1 = (s1 + 63 * c.decode_cost.alpha) / 64, mean2 = (s2 + 63 * c.decode_cost.alpha) / 64;
    CHECK_NEAR(res.decode_imbalance, (s1 + s2) / (mean1 + mean2), 1e-9);
    double transfer = 4096 * c.kv_bytes_per_token / (c.transfer_gb_per_s * 1e9);
    CHECK_NEAR(res.makespan_s, ttft + transfer + (s1 + s2) * 1e-9, 1e-9);
}

TEST(prefix_cache_hits_and_token_conservation) {
    /* two identical 10-block requests, the second after the first has finished: the second hits
     * 9 full blocks... all 10 ids match, capped at input - 1 tokens */
    uint64_t blocks[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    DiSimRequest r[2] = {{0.0, 5000, 2, blocks, 10}, {10.0, 5000, 2, blocks, 10}};
    DiSimTrace t = {r, 2, blocks, 10};
    DiSimConfig c = small_config();
    DiSimResult res;
    CHECK(di_sim_run(&t, &c, &res) == 0);
    CHECK_EQ_INT(res.completed, 2);
    CHECK_EQ_INT(res.prefill_tokens_computed, 5000 + 1);
    CHECK_NEAR(res.hit_rate, 4999.0 / 10000.0, 1e-12);
}

/* Synthetic load: contexts up to 256K (70/20/10 % per tier), 600-token mean outputs. */
static DiSimTrace loaded_workload(size_t n, double rate, uint64_t seed) {
    DiSimSynthConfig sc = {n, rate, 200, 1.0, 0.5, 600.0, {0.7, 0.2, 0.1, 0.0}, seed};
    DiSimTrace t;
    if (di_sim_trace_synthetic(&sc, &t) != 0) memset(&t, 0, sizeof t);
    return t;
}

TEST(runs_are_deterministic_for_a_seed) {
    DiSimTrace t = loaded_workload(600, 40.0, 3);
    CHECK(t.n == 600);
    DiSimConfig c = small_config();
    c.moe_layers = 2;
    DiSimResult a, b;
    CHECK(di_sim_run(&t, &c, &a) == 0);
    CHECK(di_sim_run(&t, &c, &b) == 0);
    CHECK(memcmp(&a, &b, sizeof a) == 0);
    CHECK_EQ_INT(a.completed + a.rejected, 600);
    c.seed = 4; /* the seed moves the expert loads and the profiling noise of the cost fit */
    CHECK(di_sim_run(&t, &c, &b) == 0);
    CHECK(a.moe_decode.eplb != b.moe_decode.eplb);
    CHECK(a.fitted_prefill_cost.d != b.fitted_prefill_cost.d);
    CHECK_EQ_INT(b.completed + b.rejected, 600);
    di_sim_trace_free(&t);
}

TEST(balancers_beat_their_baselines_on_a_loaded_cluster) {
    DiSimTrace t = loaded_workload(4000, 100.0, 1); /* queues build up in prefill (TTFT p99 > 0.4 s) */
    DiSimConfig c = small_config();
    c.moe_layers = 2;
    DiSimResult ours, fifo, rr;
    CHECK(di_sim_run(&t, &c, &ours) == 0);
    c.moe_layers = 0;
    c.prefill_policy = DI_SIM_PREFILL_FIFO;
    c.decode_policy = DI_DECODE_LB_COUNT;
    CHECK(di_sim_run(&t, &c, &fifo) == 0);
    c.prefill_policy = DI_SIM_PREFILL_ROUND_ROBIN;
    c.decode_policy = DI_DECODE_LB_ROUND_ROBIN;
    CHECK(di_sim_run(&t, &c, &rr) == 0);
    CHECK_MSG(ours.ttft_s[0].p99 < fifo.ttft_s[0].p99, "short-tier TTFT p99 %.3f s vs FIFO %.3f s",
              ours.ttft_s[0].p99, fifo.ttft_s[0].p99);
    CHECK_MSG(ours.ttft_s[0].p99 < rr.ttft_s[0].p99, "vs round robin %.3f s", rr.ttft_s[0].p99);
    /* the short tier's gain is not paid for by the longer tiers (issue 6 target); 2 % covers
     * the block rounding of the 150 ms steps long requests share with short ones */
    for (int k = 1; k < 3; k++)
        CHECK_MSG(ours.ttft_s[k].p99 <= 1.02 * fifo.ttft_s[k].p99, "tier %d TTFT p99 %.3f s vs FIFO %.3f s", k,
                  ours.ttft_s[k].p99, fifo.ttft_s[k].p99);
    CHECK_MSG(ours.decode_imbalance <= 1.10, "decode imbalance %.4f", ours.decode_imbalance);
    CHECK_MSG(ours.decode_imbalance < fifo.decode_imbalance && ours.decode_imbalance < rr.decode_imbalance,
              "decode imbalance %.4f vs count-only %.4f, round robin %.4f", ours.decode_imbalance,
              fifo.decode_imbalance, rr.decode_imbalance);
    CHECK(ours.has_moe && !fifo.has_moe);
    CHECK_MSG(ours.moe_prefill.eplb < ours.moe_prefill.fixed && ours.moe_prefill.eplb <= 1.09,
              "prefill moe_lb %.4f vs no EPLB %.4f", ours.moe_prefill.eplb, ours.moe_prefill.fixed);
    CHECK_MSG(ours.moe_decode.eplb < ours.moe_decode.fixed, "decode moe_lb %.4f vs no EPLB %.4f",
              ours.moe_decode.eplb, ours.moe_decode.fixed);
    di_sim_trace_free(&t);
}

/* One prefill rank: a 100K-token request at t = 0, then 40 short 2K-token requests every 10 ms.
 * Ranks keep admission order across tiers unless jump_slowdown lets short work overtake: with
 * 0 the long request finishes as if almost alone (its steps can only grow from the short chunks
 * filling the rest of each 150 ms budget: < 5 %); with unbounded overtaking it waits for all
 * 40 x 2048 x 25 us = 2 s of short work; with 0.25 for at most a quarter of its own cost (plus
 * two 150 ms steps of granularity).  Measured: 2.64 s alone, 2.71 / 3.44 / 4.72 s. */
static double long_ttft(double jump_slowdown, int with_short) {
    DiSimRequest r[41];
    r[0] = (DiSimRequest){0.0, 100000, 1, NULL, 0};
    for (int k = 1; k <= 40; k++) r[k] = (DiSimRequest){0.01 * k, 2048, 1, NULL, 0};
    DiSimTrace t = {r, with_short ? 41 : 1, NULL, 0};
    DiSimConfig c = small_config();
    c.prefill_instances = 1;
    c.prefill_ranks = 1;
    c.profile_noise = 0; /* an exact fitted model: the scheduler plans what runs */
    c.jump_slowdown = jump_slowdown;
    DiSimResult res;
    if (di_sim_run(&t, &c, &res) != 0) return -1;
    return res.ttft_s[2].p99;
}

TEST(long_prefills_are_overtaken_only_within_their_allowance) {
    double alone = long_ttft(0.0, 0), none = long_ttft(0.0, 1), quarter = long_ttft(0.25, 1),
           unbounded = long_ttft(1e9, 1);
    CHECK(alone > 2.5); /* 100K x 25 us plus attention */
    CHECK_MSG(none >= alone && none <= 1.05 * alone, "no overtaking: %.3f s vs alone %.3f s", none, alone);
    CHECK_MSG(quarter > none && quarter <= 1.25 * alone + 0.3, "allowance 0.25: %.3f s vs alone %.3f s", quarter,
              alone);
    CHECK_MSG(unbounded >= alone + 2.0, "unbounded: %.3f s vs alone %.3f s", unbounded, alone);
}

TEST(bad_configs_are_rejected) {
    uint64_t blocks[1] = {0};
    DiSimRequest r = {0.0, 100, 2, blocks, 1};
    DiSimTrace t = {&r, 1, blocks, 1};
    DiSimConfig c = small_config();
    DiSimResult res;
    c.speedup = 0;
    CHECK(di_sim_run(&t, &c, &res) != 0);
    CHECK(strstr(di_last_error(), "speedup") != NULL);
    c = small_config();
    c.moe_layers = 2;
    c.decode_ranks = 7; /* 384 experts over 7 ranks */
    CHECK(di_sim_run(&t, &c, &res) != 0);
    CHECK(strstr(di_last_error(), "spread evenly") != NULL);
    c = small_config();
    CHECK(di_sim_run(NULL, &c, &res) != 0);
    DiSimTrace empty = {NULL, 0, NULL, 0};
    CHECK(di_sim_run(&empty, &c, &res) != 0);
}

int main(void) {
    RUN_TEST(the_scheduler_fits_its_cost_model_from_profiled_steps);
    RUN_TEST(one_request_follows_the_cost_models_exactly);
    RUN_TEST(prefix_cache_hits_and_token_conservation);
    RUN_TEST(runs_are_deterministic_for_a_seed);
    RUN_TEST(balancers_beat_their_baselines_on_a_loaded_cluster);
    RUN_TEST(long_prefills_are_overtaken_only_within_their_allowance);
    RUN_TEST(bad_configs_are_rejected);
    return TEST_SUMMARY();
}
