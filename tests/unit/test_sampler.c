/* test_sampler.c — the sampler against hand-derived cases and statistics: greedy ties, min-p /
 * top-k / top-p sets worked out by hand, vLLM's penalty formulas, min_tokens masking, logprobs
 * against a double-precision log-softmax, the counter-based generator's determinism, and a
 * chi-square test of the sampled frequencies against softmax(logits / T). */
#include "test.h"

#include "base/error.h"
#include "engine/sampler.h"

#include <math.h>

static DiSampleContext ctx_at(int64_t position, uint64_t seed) {
    DiSampleContext c = {0};
    c.position = position;
    c.seed = seed;
    return c;
}

static int32_t sample1(DiSampler *s, const DiSamplingParams *p, const DiSampleContext *c, const float *logits) {
    int32_t t = -1;
    if (di_sampler_sample(s, p, c, logits, &t, NULL) != 0) return -2;
    return t;
}

/* Frequencies of n draws at positions 0..n-1. */
static void histogram(DiSampler *s, const DiSamplingParams *p, const float *logits, int vocab, int n, int *counts) {
    memset(counts, 0, (size_t)vocab * sizeof *counts);
    for (int i = 0; i < n; i++) {
        DiSampleContext c = ctx_at(i, 777);
        int32_t t = sample1(s, p, &c, logits);
        if (t >= 0 && t < vocab) counts[t]++;
    }
}

TEST(uniform_is_deterministic_and_keyed) {
    double a = di_sampler_uniform(1, 5, 0);
    CHECK(a > 0 && a < 1);
    CHECK(a == di_sampler_uniform(1, 5, 0));
    CHECK(a != di_sampler_uniform(2, 5, 0));
    CHECK(a != di_sampler_uniform(1, 6, 0));
    CHECK(a != di_sampler_uniform(1, 5, 1));
    double mean = 0;
    for (int i = 0; i < 10000; i++) mean += di_sampler_uniform(9, i, 0);
    CHECK_NEAR(mean / 10000, 0.5, 0.01);
}

TEST(create_refuses_a_missing_backend_or_vocabulary) {
    CHECK(di_sampler_create(5, NULL) == NULL);
    CHECK(strstr(di_error_message(), "no kernel backend") != NULL);
    CHECK(di_sampler_create(0, di_backend_cpu_ref()) == NULL);
    CHECK(strstr(di_error_message(), "vocabulary size") != NULL);
}

/* A backend that is the reference but counts its exp rows: the sampler must use the table it
 * was given (the engine's choice), not a kernel of its own. */
static int spy_rows;
static void spy_expf_row(const float *x, size_t n, float shift, float scale, float *out) {
    spy_rows++;
    di_backend_cpu_ref()->expf_row(x, n, shift, scale, out);
}

TEST(sampling_runs_the_given_backends_exp) {
    DiKernelBackend spy = *di_backend_cpu_ref();
    spy.expf_row = spy_expf_row;
    DiSampler *s = di_sampler_create(4, &spy), *r = di_sampler_create(4, di_backend_cpu_ref());
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.temperature = 0.7f;
    const float logits[4] = {0.5f, 1.0f, -0.25f, 0.75f};
    spy_rows = 0;
    for (int i = 0; i < 20; i++) {
        DiSampleContext c = ctx_at(i, 31);
        CHECK(sample1(s, &p, &c, logits) == sample1(r, &p, &c, logits));
    }
    CHECK(spy_rows == 20);
    p.temperature = 0.0f; /* greedy: no probabilities, no exp */
    DiSampleContext c = ctx_at(0, 31);
    CHECK(sample1(s, &p, &c, logits) == 1);
    CHECK(spy_rows == 20);
    di_sampler_destroy(s);
    di_sampler_destroy(r);
}

TEST(greedy_takes_argmax_with_lowest_id_on_ties) {
    DiSampler *s = di_sampler_create(5, di_backend_cpu_ref());
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.temperature = 0;
    float logits[5] = {1, 3, 2, 3, -1};
    DiSampleContext c = ctx_at(0, 1);
    CHECK_EQ_INT(sample1(s, &p, &c, logits), 1);
    di_sampler_destroy(s);
}

TEST(params_are_checked) {
    DiSamplingParams p;
    di_sampling_params_init(&p);
    CHECK_EQ_INT(di_sampling_params_check(&p, 10), 0);
    p.top_p = 0;
    CHECK_EQ_INT(di_sampling_params_check(&p, 10), -1);
    CHECK(strstr(di_error_message(), "top_p") != NULL);
    di_sampling_params_init(&p);
    p.temperature = NAN;
    CHECK_EQ_INT(di_sampling_params_check(&p, 10), -1);
    di_sampling_params_init(&p);
    int32_t bad[1] = {10};
    p.stop_token_ids = bad;
    p.n_stop_token_ids = 1;
    CHECK_EQ_INT(di_sampling_params_check(&p, 10), -1);
    CHECK(strstr(di_error_message(), "stop_token_ids[0] = 10") != NULL);
    di_sampling_params_init(&p);
    p.min_tokens = 20;
    CHECK_EQ_INT(di_sampling_params_check(&p, 10), -1);
    di_sampling_params_init(&p);
    p.logprobs = 21;
    CHECK_EQ_INT(di_sampling_params_check(&p, 10), -1);
}

TEST(nan_logits_are_an_error) {
    DiSampler *s = di_sampler_create(3, di_backend_cpu_ref());
    DiSamplingParams p;
    di_sampling_params_init(&p);
    float logits[3] = {0, NAN, 1};
    DiSampleContext c = ctx_at(0, 1);
    int32_t t;
    CHECK_EQ_INT(di_sampler_sample(s, &p, &c, logits, &t, NULL), -1);
    CHECK(strstr(di_error_message(), "NaN at token 1") != NULL);
    di_sampler_destroy(s);
}

/* probabilities 0.5, 0.3, 0.15, 0.05 (logits = their logs, T = 1) */
static const float quarter_logits[4] = {-0.69314718f, -1.2039728f, -1.89712f, -2.9957323f};

TEST(min_p_top_k_top_p_keep_the_hand_derived_sets) {
    DiSampler *s = di_sampler_create(4, di_backend_cpu_ref());
    DiSamplingParams p;
    di_sampling_params_init(&p);
    int counts[4];
    /* min_p 0.2: floor 0.1 -> {0, 1, 2} */
    p.min_p = 0.2f;
    histogram(s, &p, quarter_logits, 4, 4000, counts);
    CHECK(counts[0] > 0 && counts[1] > 0 && counts[2] > 0 && counts[3] == 0);
    /* top_k 2 -> {0, 1} with 0.625 / 0.375 */
    di_sampling_params_init(&p);
    p.top_k = 2;
    histogram(s, &p, quarter_logits, 4, 4000, counts);
    CHECK(counts[2] == 0 && counts[3] == 0);
    CHECK_NEAR(counts[0] / 4000.0, 0.625, 0.03);
    /* top_p 0.75: mass above token 1 is 0.5 < 0.75 (kept), above token 2 is 0.8 (dropped) */
    di_sampling_params_init(&p);
    p.top_p = 0.75f;
    histogram(s, &p, quarter_logits, 4, 4000, counts);
    CHECK(counts[0] > 0 && counts[1] > 0 && counts[2] == 0 && counts[3] == 0);
    /* top_p 0.4: only the best */
    p.top_p = 0.4f;
    histogram(s, &p, quarter_logits, 4, 500, counts);
    CHECK_EQ_INT(counts[0], 500);
    /* top_k after min_p, top_p renormalised over top_k's survivors: top_k 3 leaves 0.5/0.95,
     * 0.3/0.95, 0.15/0.95; top_p 0.8: mass above token 2 is 0.842 -> dropped */
    di_sampling_params_init(&p);
    p.top_k = 3;
    p.top_p = 0.8f;
    histogram(s, &p, quarter_logits, 4, 4000, counts);
    CHECK(counts[2] == 0 && counts[3] == 0 && counts[1] > 0);
    di_sampler_destroy(s);
}

TEST(top_k_ties_rank_lower_ids_first) {
    DiSampler *s = di_sampler_create(6, di_backend_cpu_ref());
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.top_k = 2;
    float logits[6] = {0, 1, 1, 1, 0, 1};
    int counts[6];
    histogram(s, &p, logits, 6, 2000, counts);
    CHECK(counts[1] > 0 && counts[2] > 0);
    CHECK(counts[0] + counts[3] + counts[4] + counts[5] == 0);
    di_sampler_destroy(s);
}

/* chi-square of 20000 draws against softmax(logits / T); df = 5, p = 0.001 critical value 20.52 */
static double chi_square(DiSampler *s, const DiSamplingParams *p, const float *logits, int vocab, int n) {
    int counts[8];
    histogram(s, p, logits, vocab, n, counts);
    double z = 0, e[8];
    for (int v = 0; v < vocab; v++) z += e[v] = exp((double)logits[v] / p->temperature);
    double chi = 0;
    for (int v = 0; v < vocab; v++) {
        double expect = n * e[v] / z;
        chi += (counts[v] - expect) * (counts[v] - expect) / expect;
    }
    return chi;
}

TEST(sampled_frequencies_follow_softmax) {
    DiSampler *s = di_sampler_create(6, di_backend_cpu_ref());
    DiSamplingParams p;
    di_sampling_params_init(&p);
    float logits[6] = {0.5f, -1.0f, 2.0f, 0.0f, 1.0f, -0.5f};
    double chi = chi_square(s, &p, logits, 6, 20000);
    CHECK_MSG(chi < 20.52, "T=1 chi2 %.2f", chi);
    p.temperature = 0.5f;
    chi = chi_square(s, &p, logits, 6, 20000);
    CHECK_MSG(chi < 20.52, "T=0.5 chi2 %.2f", chi);
    p.temperature = 2.0f;
    chi = chi_square(s, &p, logits, 6, 20000);
    CHECK_MSG(chi < 20.52, "T=2 chi2 %.2f", chi);
    di_sampler_destroy(s);
}

TEST(seeded_draws_repeat_and_seeds_differ) {
    DiSampler *s = di_sampler_create(50, di_backend_cpu_ref());
    DiSamplingParams p;
    di_sampling_params_init(&p);
    float logits[50];
    for (int v = 0; v < 50; v++) logits[v] = (float)((v * 37) % 11) * 0.1f;
    int same = 1, differ = 0;
    for (int pos = 0; pos < 64; pos++) {
        DiSampleContext a = ctx_at(pos, 42), b = ctx_at(pos, 43);
        int32_t x = sample1(s, &p, &a, logits);
        same &= x == sample1(s, &p, &a, logits);
        differ += x != sample1(s, &p, &b, logits);
    }
    CHECK(same);
    CHECK(differ > 32);
    di_sampler_destroy(s);
}

/* vLLM: repetition divides positive / multiplies negative logits of seen tokens; frequency and
 * presence subtract count * f + p from generated tokens. */
TEST(penalties_follow_vllm_formulas) {
    DiSampler *s = di_sampler_create(4, di_backend_cpu_ref());
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.temperature = 0;
    p.logprobs = 0;
    int32_t prompt[1] = {3}, output[3] = {0, 0, 2};
    DiSampleContext c = ctx_at(4, 1);
    c.prompt = prompt;
    c.n_prompt = 1;
    c.output = output;
    c.n_output = 3;
    float logits[4] = {2.0f, 0.9f, 1.5f, 1.8f};
    /* repetition 2: token 0 -> 1.0, token 2 -> 0.75, token 3 -> 0.9, token 1 (unseen) stays 0.9:
     * the max is 1.0 at token 0 */
    p.repetition_penalty = 2.0f;
    CHECK_EQ_INT(sample1(s, &p, &c, logits), 0);
    /* frequency 0.1: token 0 -> 1.0 - 0.2 = 0.8, token 2 -> 0.75 - 0.1: max is 0.9 at tokens 1, 3 -> 1 */
    p.frequency_penalty = 0.1f;
    CHECK_EQ_INT(sample1(s, &p, &c, logits), 1);
    /* no repetition; presence 0.3: token 0 -> 1.7, token 2 -> 1.2, token 3 1.8 wins */
    p.repetition_penalty = 1.0f;
    p.frequency_penalty = 0;
    p.presence_penalty = 0.3f;
    CHECK_EQ_INT(sample1(s, &p, &c, logits), 3);
    /* negative logits are multiplied: -1 * 2 = -2 < -1.5 */
    float neg[4] = {-1.0f, -1.5f, -3.0f, -3.0f};
    di_sampling_params_init(&p);
    p.temperature = 0;
    p.repetition_penalty = 2.0f;
    CHECK_EQ_INT(sample1(s, &p, &c, neg), 1);
    /* the scratch state is clean: without penalties the raw argmax again */
    di_sampling_params_init(&p);
    p.temperature = 0;
    CHECK_EQ_INT(sample1(s, &p, &c, logits), 0);
    di_sampler_destroy(s);
}

TEST(min_tokens_masks_eos_and_stop_tokens) {
    DiSampler *s = di_sampler_create(4, di_backend_cpu_ref());
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.temperature = 0;
    p.min_tokens = 2;
    int32_t stop[1] = {2}, eos[1] = {0};
    p.stop_token_ids = stop;
    p.n_stop_token_ids = 1;
    float logits[4] = {5, 1, 4, 2};
    DiSampleContext c = ctx_at(0, 1);
    c.eos_ids = eos;
    c.n_eos_ids = 1;
    int32_t out[2] = {3, 3};
    c.output = out;
    c.n_output = 1;
    CHECK_EQ_INT(sample1(s, &p, &c, logits), 3);
    c.n_output = 2;
    CHECK_EQ_INT(sample1(s, &p, &c, logits), 0);
    di_sampler_destroy(s);
}

TEST(logprobs_match_double_log_softmax) {
    DiSampler *s = di_sampler_create(6, di_backend_cpu_ref());
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.logprobs = 3;
    p.temperature = 0.7f; /* logprobs are of the raw logits, whatever the temperature */
    float logits[6] = {0.5f, -1.0f, 2.0f, 2.0f, 1.0f, -0.5f};
    double z = 0;
    for (int v = 0; v < 6; v++) z += exp((double)logits[v]);
    DiSampleContext c = ctx_at(3, 5);
    int32_t t;
    DiTokenLogprobs lp;
    CHECK_EQ_INT(di_sampler_sample(s, &p, &c, logits, &t, &lp), 0);
    CHECK_EQ_INT(lp.token, t);
    CHECK_NEAR(lp.logprob, logits[t] - log(z), 1e-6);
    CHECK_EQ_INT(lp.n_top, 3);
    CHECK_EQ_INT(lp.top_ids[0], 2);
    CHECK_EQ_INT(lp.top_ids[1], 3);
    CHECK_EQ_INT(lp.top_ids[2], 4);
    CHECK_NEAR(lp.top_logprobs[2], 1.0 - log(z), 1e-6);
    di_sampler_destroy(s);
}

TEST(large_vocab_top_k_matches_a_full_sort) {
    enum { V = 5000 };
    DiSampler *s = di_sampler_create(V, di_backend_cpu_ref());
    static float logits[V];
    for (int v = 0; v < V; v++) logits[v] = (float)((v * 7919) % 1000) / 100.0f; /* many ties */
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.top_k = 10;
    /* the 10 best by (value desc, id asc): value 9.99 is taken by the ids with v*7919 % 1000 == 999 */
    int allowed_max = 0;
    int ok = 1;
    for (int i = 0; i < 300; i++) {
        DiSampleContext c = ctx_at(i, 3);
        int32_t t = sample1(s, &p, &c, logits);
        /* count tokens strictly better than t */
        int better = 0;
        for (int v = 0; v < V; v++) better += logits[v] > logits[t] || (logits[v] == logits[t] && v < t);
        ok &= better < 10;
        if (better > allowed_max) allowed_max = better;
    }
    CHECK(ok);
    CHECK(allowed_max > 0);
    di_sampler_destroy(s);
}

static const float *sort_logits;
static int by_logit_desc(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (sort_logits[x] != sort_logits[y]) return sort_logits[x] > sort_logits[y] ? -1 : 1;
    return (x > y) - (x < y);
}

/* top-p over a large vocabulary (the quickselect path) against a brute-force nucleus: sort by
 * probability, keep tokens while the mass ranked above them is below top_p. */
TEST(large_vocab_top_p_matches_a_brute_force_nucleus) {
    enum { V = 3000 };
    static float logits[V];
    static int32_t order[V];
    static char in_nucleus[V];
    uint64_t x = 77;
    for (int v = 0; v < V; v++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        logits[v] = (float)(x >> 40) / 16777216.0f * 6.0f;
        order[v] = v;
    }
    sort_logits = logits;
    qsort(order, V, sizeof *order, by_logit_desc);
    double z = 0, above = 0;
    for (int v = 0; v < V; v++) z += exp((double)logits[v] - logits[order[0]]);
    int n_nucleus = 0;
    for (int i = 0; i < V && above < 0.9 * z; i++) {
        in_nucleus[order[i]] = 1;
        n_nucleus++;
        above += exp((double)logits[order[i]] - logits[order[0]]);
    }
    DiSampler *s = di_sampler_create(V, di_backend_cpu_ref());
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.top_p = 0.9f;
    int inside = 1, distinct = 0;
    static char seen[V];
    for (int i = 0; i < 4000; i++) {
        DiSampleContext c = ctx_at(i, 8);
        int32_t t = sample1(s, &p, &c, logits);
        inside &= t >= 0 && in_nucleus[t];
        if (t >= 0 && !seen[t]) seen[t] = 1, distinct++;
    }
    CHECK(inside);
    CHECK_MSG(distinct > n_nucleus / 2, "%d distinct of a %d-token nucleus", distinct, n_nucleus);
    di_sampler_destroy(s);
}

/* OpenAI logit_bias: +100 on a token makes it win greedy and sampled draws; -100 on the argmax
 * hands greedy to the runner-up; the biases change the choice only, not the raw logprobs. */
TEST(logit_bias_moves_the_choice) {
    DiSampler *s = di_sampler_create(6, di_backend_cpu_ref());
    DiSamplingParams p;
    di_sampling_params_init(&p);
    float logits[6] = {0.5f, 4, 1, 2, 3, -1};
    DiLogitBias up = {5, 100}, down = {1, -100};
    p.temperature = 0;
    DiSampleContext c = ctx_at(0, 3);
    CHECK_EQ_INT(sample1(s, &p, &c, logits), 1);
    p.logit_bias = &down;
    p.n_logit_bias = 1;
    CHECK_EQ_INT(sample1(s, &p, &c, logits), 4);
    p.logit_bias = &up;
    p.temperature = 1;
    int forced = 0;
    for (int i = 0; i < 200; i++) {
        DiSampleContext ci = ctx_at(i, 11);
        forced += sample1(s, &p, &ci, logits) == 5;
    }
    CHECK_EQ_INT(forced, 200); /* e^-95 of the mass is left to the others: never drawn */
    p.logprobs = 0;
    DiTokenLogprobs lp;
    int32_t t = -1;
    CHECK_EQ_INT(di_sampler_sample(s, &p, &c, logits, &t, &lp), 0);
    double z = 0;
    for (int v = 0; v < 6; v++) z += exp((double)logits[v]);
    CHECK_EQ_INT(t, 5);
    CHECK_NEAR(lp.logprob, -1.0 - log(z), 1e-5); /* the raw logit's, as vLLM reports */
    DiLogitBias bad = {6, 1};
    p.logit_bias = &bad;
    CHECK_EQ_INT(di_sampling_params_check(&p, 6), -1);
    CHECK(strstr(di_error_message(), "logit_bias token 6 is outside the vocabulary") != NULL);
    bad = (DiLogitBias){2, 101};
    CHECK_EQ_INT(di_sampling_params_check(&p, 6), -1);
    di_sampler_destroy(s);
}

/* A reasoning budget: after `thinking_budget` generated tokens without the end-of-thinking token
 * that token is forced (whatever the logits), once; before the budget, or once it was generated,
 * sampling is untouched. */
TEST(thinking_budget_forces_the_end_of_thinking) {
    DiSampler *s = di_sampler_create(6, di_backend_cpu_ref());
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.temperature = 0;
    p.has_thinking_budget = 1;
    p.thinking_budget = 3;
    p.think_end_id = 2;
    float logits[6] = {0, 5, -50, 1, 1, 1};
    int32_t out[4] = {1, 1, 1, 1};
    DiSampleContext c = ctx_at(0, 1);
    c.output = out;
    c.n_output = 2;
    CHECK_EQ_INT(sample1(s, &p, &c, logits), 1);
    c.n_output = 3;
    CHECK_EQ_INT(sample1(s, &p, &c, logits), 2);
    out[3] = 2;
    c.n_output = 4;
    CHECK_EQ_INT(sample1(s, &p, &c, logits), 1);
    p.thinking_budget = 0; /* no reasoning at all */
    c.n_output = 0;
    CHECK_EQ_INT(sample1(s, &p, &c, logits), 2);
    p.think_end_id = 6;
    CHECK_EQ_INT(di_sampling_params_check(&p, 6), -1);
    p.has_thinking_budget = 0;
    CHECK_EQ_INT(di_sampling_params_check(&p, 6), 0);
    di_sampler_destroy(s);
}

/* di_sampler_probs is the distribution di_sampler_sample draws from: the hand-derived top-k set
 * renormalised, one-hot when greedy or forced, and the empirical frequencies of the draws. */
TEST(probs_are_the_distribution_the_draws_follow) {
    DiSampler *s = di_sampler_create(4, di_backend_cpu_ref());
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.top_k = 2;
    float logits[4] = {1, 2, 0, -1}, probs[4];
    DiSampleContext c = ctx_at(0, 3);
    CHECK_EQ_INT(di_sampler_probs(s, &p, &c, logits, probs), 0);
    double e = exp(1.0);
    CHECK_NEAR(probs[0], 1 / (1 + e), 1e-6); /* e^1 / (e^1 + e^2) */
    CHECK_NEAR(probs[1], e / (1 + e), 1e-6);
    CHECK(probs[2] == 0.0f && probs[3] == 0.0f);
    int counts[4] = {0};
    for (int i = 0; i < 20000; i++) {
        DiSampleContext ci = ctx_at(i, 3);
        counts[sample1(s, &p, &ci, logits)]++;
    }
    CHECK_NEAR(counts[0] / 20000.0, probs[0], 0.012); /* 4 standard errors */
    CHECK_EQ_INT(counts[2] + counts[3], 0);
    p.temperature = 0;
    CHECK_EQ_INT(di_sampler_probs(s, &p, &c, logits, probs), 0);
    CHECK(probs[0] == 0.0f && probs[1] == 1.0f && probs[2] == 0.0f && probs[3] == 0.0f);
    p.temperature = 1;
    p.has_thinking_budget = 1; /* budget 0 spent at once: the end of thinking is forced */
    p.think_end_id = 3;
    CHECK_EQ_INT(di_sampler_probs(s, &p, &c, logits, probs), 0);
    CHECK(probs[3] == 1.0f && probs[1] == 0.0f);
    logits[2] = NAN;
    p.has_thinking_budget = 0;
    CHECK(di_sampler_probs(s, &p, &c, logits, probs) == -1);
    di_sampler_destroy(s);
}

int main(void) {
    RUN_TEST(logit_bias_moves_the_choice);
    RUN_TEST(thinking_budget_forces_the_end_of_thinking);
    RUN_TEST(probs_are_the_distribution_the_draws_follow);
    RUN_TEST(large_vocab_top_p_matches_a_brute_force_nucleus);
    RUN_TEST(uniform_is_deterministic_and_keyed);
    RUN_TEST(create_refuses_a_missing_backend_or_vocabulary);
    RUN_TEST(sampling_runs_the_given_backends_exp);
    RUN_TEST(greedy_takes_argmax_with_lowest_id_on_ties);
    RUN_TEST(params_are_checked);
    RUN_TEST(nan_logits_are_an_error);
    RUN_TEST(min_p_top_k_top_p_keep_the_hand_derived_sets);
    RUN_TEST(top_k_ties_rank_lower_ids_first);
    RUN_TEST(sampled_frequencies_follow_softmax);
    RUN_TEST(seeded_draws_repeat_and_seeds_differ);
    RUN_TEST(penalties_follow_vllm_formulas);
    RUN_TEST(min_tokens_masks_eos_and_stop_tokens);
    RUN_TEST(logprobs_match_double_log_softmax);
    RUN_TEST(large_vocab_top_k_matches_a_full_sort);
    return TEST_SUMMARY();
}
