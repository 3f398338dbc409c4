/* test_eplb.c — the EPLB planner (serving.md §8.1, §8.4): the published README vector, the
 * primitives on hand-derived cases, plan invariants on Zipf loads at production sizes, the
 * moe_lb metric (§8.3) against hand-computed values, and input validation. */
#include "test.h"

#include "deepinfer.h"
#include "cluster/eplb.h"
#include "cluster/rng.h"

#include <stdint.h>

static const float readme_weight[2][12] = {
    {90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86},
    {20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27},
};

TEST(readme_example_reproduced_exactly) {
    static const int32_t expect[2][16] = {
        {5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1},
        {7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1},
    };
    DiEplbPlan plan;
    CHECK(di_eplb_rebalance(&readme_weight[0][0], 2, 12, 16, 4, 2, 8, &plan) == 0);
    CHECK_EQ_INT(plan.hierarchical, 1);
    CHECK_EQ_INT(plan.max_replicas, 2);
    for (int l = 0; l < 2; l++)
        for (int s = 0; s < 16; s++) CHECK_EQ_INT(plan.phy2log[l * 16 + s], expect[l][s]);
    /* expert 10 (weight 183) is replicated in layer 0, on slots 8 and 10 */
    CHECK_EQ_INT(plan.logcnt[10], 2);
    CHECK_EQ_INT(plan.log2phy[10 * 2 + 0], 8);
    CHECK_EQ_INT(plan.log2phy[10 * 2 + 1], 10);
    CHECK_EQ_INT(plan.log2phy[0 * 2 + 1], -1);
    /* serving.md §8.1: per-GPU max/mean 1.208 and 1.242 */
    double per_layer[2], agg;
    CHECK(di_eplb_moe_lb(&plan, &readme_weight[0][0], per_layer, &agg) == 0);
    CHECK_NEAR(per_layer[0], 1.208, 0.0005);
    CHECK_NEAR(per_layer[1], 1.242, 0.0005);
    di_eplb_plan_free(&plan);
}

TEST(global_policy_on_readme_input) {
    /* 3 groups on 2 nodes: not divisible -> global policy; §8.1 quotes per-GPU max/mean 1.073
     * and 1.190 for the global policy on this input. */
    DiEplbPlan plan;
    CHECK(di_eplb_rebalance(&readme_weight[0][0], 2, 12, 16, 3, 2, 8, &plan) == 0);
    CHECK_EQ_INT(plan.hierarchical, 0);
    double per_layer[2], agg;
    CHECK(di_eplb_moe_lb(&plan, &readme_weight[0][0], per_layer, &agg) == 0);
    CHECK_NEAR(per_layer[0], 1.073, 0.0005);
    CHECK_NEAR(per_layer[1], 1.190, 0.0005);
    di_eplb_plan_free(&plan);
}

TEST(balanced_packing_hand_derived) {
    /* weights 5 9 9 1 2 7 into 3 packs of 2.  Order by weight desc, stable: 1(9) 2(9) 5(7) 0(5) 4(2) 3(1).
     * 1->p0, 2->p1, 5->p2, 0->p2? no: pack sums 9,9,7 -> lightest p2 (7) gets 0 -> p2 full (12).
     * 4 -> lightest of p0(9),p1(9) = p0 -> p0 full (11); 3 -> p1. */
    const float w[6] = {5, 9, 9, 1, 2, 7};
    int32_t pack[6], rank[6];
    _Alignas(8) int32_t scratch[4 * 6 + 3 * 3];
    CHECK(di_eplb_balanced_packing(w, 6, 3, pack, rank, scratch) == 0);
    const int32_t ep[6] = {2, 0, 1, 1, 0, 2}, er[6] = {1, 0, 0, 1, 1, 0};
    for (int i = 0; i < 6; i++) {
        CHECK_EQ_INT(pack[i], ep[i]);
        CHECK_EQ_INT(rank[i], er[i]);
    }
    /* one item per pack: identity, whatever the weights */
    CHECK(di_eplb_balanced_packing(w, 6, 6, pack, rank, scratch) == 0);
    for (int i = 0; i < 6; i++) CHECK(pack[i] == i && rank[i] == 0);
    CHECK(di_eplb_balanced_packing(w, 6, 4, pack, rank, scratch) != 0);
    CHECK(strstr(di_last_error(), "evenly") != NULL);
}

/* Equal weights pack in ascending index order (eplb.c: the reference's tie order is unspecified,
 * deepinfer's is stable).  n items into m packs of 3: the m items of weight 2 (indices 0, 3, 6, ...)
 * fill one pack each in index order; then every pack weighs 2 and the weight-1 items (the other
 * indices, ascending) go round the packs from pack 0, twice. */
static void check_tie_order(int m) {
    int n = 3 * m;
    float *w = calloc((size_t)n, sizeof *w);
    int32_t *pack = calloc((size_t)n, sizeof *pack), *rank = calloc((size_t)n, sizeof *rank);
    int32_t *scratch = calloc((size_t)(4 * n + 3 * m), sizeof *scratch);
    for (int i = 0; i < n; i++) w[i] = i % 3 == 0 ? 2.0f : 1.0f;
    CHECK(di_eplb_balanced_packing(w, n, m, pack, rank, scratch) == 0);
    for (int i = 0, j = 0; i < n; i++) {
        int want_pack = i % 3 == 0 ? i / 3 : j % m, want_rank = i % 3 == 0 ? 0 : 1 + j / m;
        if (i % 3) j++;
        CHECK_MSG(pack[i] == want_pack && rank[i] == want_rank, "m %d item %d: pack %d rank %d, want %d %d", m, i,
                  pack[i], rank[i], want_pack, want_rank);
    }
    free(w);
    free(pack);
    free(rank);
    free(scratch);
}

TEST(balanced_packing_ties_in_index_order) {
    check_tie_order(16);  /* 48 items: the insertion sort */
    check_tie_order(128); /* 384 items: the radix sort */
}

TEST(replicate_hand_derived_with_ties) {
    /* weights 6 6 3, 6 slots: keys 6,6,3 -> expert 0 (first max) -> 3,6,3 -> expert 1 -> 3,3,3
     * -> expert 0 (first of three equal) -> 2,3,3 */
    const float w[3] = {6, 6, 3};
    int32_t p2l[6], rank[6], cnt[3], scratch[3];
    CHECK(di_eplb_replicate(w, 3, 6, p2l, rank, cnt, scratch) == 0);
    const int32_t ep[6] = {0, 1, 2, 0, 1, 0}, er[6] = {0, 0, 0, 1, 1, 2};
    for (int i = 0; i < 6; i++) {
        CHECK_EQ_INT(p2l[i], ep[i]);
        CHECK_EQ_INT(rank[i], er[i]);
    }
    CHECK(cnt[0] == 3 && cnt[1] == 2 && cnt[2] == 1);
    CHECK(di_eplb_replicate(w, 3, 2, p2l, rank, cnt, scratch) != 0);
}

/* Zipf-like skewed loads with a random expert permutation per layer. */
static void zipf_loads(float *w, int L, int E, double s, uint64_t seed) {
    DiRng rng = di_rng_seed(seed);
    for (int l = 0; l < L; l++) {
        for (int e = 0; e < E; e++) w[l * E + e] = 0.0f;
        for (int k = 0; k < E; k++) {
            int e = (int)(di_rng_next(&rng) % (uint64_t)E);
            while (w[l * E + e] != 0.0f) e = (e + 1) % E; /* a random permutation by probing */
            w[l * E + e] = (float)floor(1.0e5 / pow(k + 1, s) * (0.8 + 0.4 * di_rng_uniform(&rng))) + 1.0f;
        }
    }
}

/* Every invariant of §8.4 on one plan. */
static void check_invariants(const DiEplbPlan *p, int G, int N) {
    int L = p->num_layers, E = p->num_logical, R = p->num_replicas, X = p->max_replicas;
    int32_t *seen = calloc((size_t)E, sizeof(int32_t));
    for (int l = 0; l < L; l++) {
        const int32_t *p2l = p->phy2log + (size_t)l * R, *cnt = p->logcnt + (size_t)l * E;
        long total = 0;
        for (int e = 0; e < E; e++) {
            CHECK(cnt[e] >= 1 && cnt[e] <= X);
            total += cnt[e];
            seen[e] = 0;
        }
        CHECK_EQ_INT(total, R);
        for (int s = 0; s < R; s++) {
            int e = p2l[s];
            CHECK(e >= 0 && e < E);
            if (e < 0 || e >= E) continue;
            int k = p->phy_rank[(size_t)l * R + s];
            CHECK(k >= 0 && k < cnt[e]);
            if (k >= 0 && k < X) CHECK_EQ_INT(p->log2phy[((size_t)l * E + e) * X + k], s);
            seen[e]++;
            /* hierarchical: every replica stays on the node of its group */
            if (p->hierarchical && N > 1) {
                int node_of_slot = s / (R / N);
                int g = e / (E / G);
                for (int s2 = 0; s2 < R; s2++)
                    if (p2l[s2] / (E / G) == g) CHECK_EQ_INT(s2 / (R / N), node_of_slot);
            }
        }
        for (int e = 0; e < E; e++) CHECK_EQ_INT(seen[e], cnt[e]);
    }
    free(seen);
}

TEST(invariants_at_production_sizes) {
    enum { L = 4, E = 384 };
    float *w = malloc(sizeof(float) * L * E);
    zipf_loads(w, L, E, 1.0, 42);
    struct { int R, G, N, P; } cases[] = {
        {384 + 64, 8, 8, 64},  /* decode EP64, 1 redundant per GPU, hierarchical over 8 nodes */
        {384 + 32, 8, 1, 8},   /* prefill EP8, 4 redundant per GPU, one node */
        {384 + 128, 8, 16, 128}, /* EP128: 16 nodes do not divide 8 groups -> global */
        {384, 8, 2, 64},       /* no redundancy: pure rearrangement */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        DiEplbPlan plan;
        CHECK(di_eplb_rebalance(w, L, E, cases[c].R, cases[c].G, cases[c].N, cases[c].P, &plan) == 0);
        CHECK_EQ_INT(plan.hierarchical, cases[c].G % cases[c].N == 0);
        check_invariants(&plan, cases[c].G, cases[c].N);
        di_eplb_plan_free(&plan);
    }
    free(w);
}

/* Identity placement: no redundancy, experts e on GPU e / (E / P). */
static double identity_moe_lb(const float *w, int L, int E, int P) {
    double sum_max = 0, sum_mean = 0;
    for (int l = 0; l < L; l++) {
        double max = 0, tot = 0;
        for (int g = 0; g < P; g++) {
            double load = 0;
            for (int e = g * (E / P); e < (g + 1) * (E / P); e++) load += w[l * E + e];
            if (load > max) max = load;
            tot += load;
        }
        sum_max += max;
        sum_mean += tot / P;
    }
    return sum_max / sum_mean;
}

TEST(redundancy_balances_skewed_load) {
    enum { L = 8, E = 384 };
    float *w = malloc(sizeof(float) * L * E);
    zipf_loads(w, L, E, 0.9, 7);
    double ident = identity_moe_lb(w, L, E, 64), with_redundancy, no_redundancy;
    DiEplbPlan plan;
    CHECK(di_eplb_rebalance(w, L, E, E + 64, 1, 1, 64, &plan) == 0);
    CHECK(di_eplb_moe_lb(&plan, w, NULL, &with_redundancy) == 0);
    di_eplb_plan_free(&plan);
    CHECK(di_eplb_rebalance(w, L, E, E, 1, 1, 64, &plan) == 0);
    CHECK(di_eplb_moe_lb(&plan, w, NULL, &no_redundancy) == 0);
    di_eplb_plan_free(&plan);
    CHECK_MSG(with_redundancy < no_redundancy && no_redundancy < ident, "identity %.3f, rearranged %.3f, redundant %.3f",
              ident, no_redundancy, with_redundancy);
    CHECK_MSG(with_redundancy <= 1.09, "moe_lb with 1 redundant/GPU = %.4f", with_redundancy);
    free(w);
}

TEST(rejects_bad_input_with_cause) {
    DiEplbPlan plan;
    float w[4] = {1, 2, 3, 4};
    CHECK(di_eplb_rebalance(NULL, 1, 4, 4, 1, 1, 1, &plan) != 0);
    CHECK(di_eplb_rebalance(w, 1, 4, 4, 1, 1, 1, NULL) != 0);
    CHECK(di_eplb_rebalance(w, 1, 4, 4, 3, 1, 1, &plan) != 0);
    CHECK(strstr(di_last_error(), "groups") != NULL);
    CHECK(di_eplb_rebalance(w, 1, 4, 6, 1, 1, 4, &plan) != 0);
    CHECK(strstr(di_last_error(), "multiple of num_gpus") != NULL);
    CHECK(di_eplb_rebalance(w, 1, 4, 4, 1, 3, 4, &plan) != 0);
    CHECK(strstr(di_last_error(), "num_nodes") != NULL);
    CHECK(di_eplb_rebalance(w, 1, 4, 2, 1, 1, 2, &plan) != 0);
    CHECK(strstr(di_last_error(), "smaller") != NULL);
    w[2] = NAN;
    CHECK(di_eplb_rebalance(w, 1, 4, 4, 1, 1, 1, &plan) != 0);
    CHECK(strstr(di_last_error(), "weight[0][2]") != NULL);
    CHECK(plan.phy2log == NULL);
    double agg;
    CHECK(di_eplb_moe_lb(&plan, w, NULL, &agg) != 0);
}

TEST(splitmix64_published_vector) {
    /* SplitMix64 seeded with 1234567: the first outputs of the reference implementation */
    DiRng r = di_rng_seed(1234567);
    CHECK(di_rng_next(&r) == 6457827717110365317ULL);
    CHECK(di_rng_next(&r) == 3203168211198807973ULL);
    CHECK(di_rng_next(&r) == 9817491932198370423ULL);
}

int main(void) {
    RUN_TEST(readme_example_reproduced_exactly);
    RUN_TEST(global_policy_on_readme_input);
    RUN_TEST(balanced_packing_hand_derived);
    RUN_TEST(balanced_packing_ties_in_index_order);
    RUN_TEST(replicate_hand_derived_with_ties);
    RUN_TEST(invariants_at_production_sizes);
    RUN_TEST(redundancy_balances_skewed_load);
    RUN_TEST(rejects_bad_input_with_cause);
    RUN_TEST(splitmix64_published_vector);
    return TEST_SUMMARY();
}
