/* test_engine_spec.c — speculative decoding in the engine, over the mock runner and its drafter:
 * every emitted token equals the independent reference (the mock's logits recomputed from the
 * token list, then the sampler: what plain decoding gives) for every draft length 0..5, both
 * schedules, drafts always / never / sometimes right, greedy and seeded sampling (exact match
 * with the confidence schedule; rejection sampling with fixed lengths, load-independent), beside plain
 * requests, with chunked prefill, preemption and async on and off; every verified row's logits
 * equal the reference (so a commit left the state exactly as plain decoding would); stop
 * conditions in the middle of an accepted run; constrained requests draft inside their grammar
 * and emit what they emit without drafts; the counters add up; the knobs are checked. */
#include "test.h"
#include "test_engine_helpers.h"

#include "base/error.h"
#include "engine/runner_mock.h"
#include "engine/spec_probe.h"

#include <stdio.h>

#define MAX_REQ 16
#define MAX_OUT 40

typedef struct {
    int32_t prompt[48];
    int n_prompt;
    DiSamplingParams params;
    int32_t expect[MAX_OUT];
    int n_expect;
    DiFinishReason reason;
} Case;

/* 1..40 random tokens */
static int random_prompt(uint64_t *rng, int32_t *prompt) {
    int n = 1 + (int)(rng_next(rng) % 40);
    for (int k = 0; k < n; k++) prompt[k] = (int32_t)(rng_next(rng) % MOCK_VOCAB);
    return n;
}

/* n requests of random prompts and lengths, seeded, with their reference outputs. */
static void make_cases(Case *cases, int n, uint64_t seed, float temperature) {
    uint64_t rng = seed;
    for (Case *c = cases; c < cases + n; c++) {
        c->n_prompt = random_prompt(&rng, c->prompt);
        DiSamplingParams *p = &c->params;
        di_sampling_params_init(p);
        p->temperature = temperature;
        p->top_k = temperature > 0 ? 40 : 0;
        p->max_tokens = 1 + (int)(rng_next(&rng) % MAX_OUT);
        p->has_seed = 1;
        p->seed = 1000 + (uint64_t)(c - cases);
        p->ignore_eos = 1;
        c->n_expect = reference_generate(c->prompt, c->n_prompt, p, p->seed, c->expect, &c->reason);
    }
}

typedef struct {
    int draft_max, schedule, async, budget, chunk, max_seqs;
    double agree;
    size_t memory;
} Setup;

static DiEngine *spec_engine(const Setup *s) {
    DiEngineOptions o;
    di_engine_options_init(&o);
    o.async_scheduling = s->async;
    o.max_batch_tokens = s->budget;
    o.max_prefill_chunk = s->chunk;
    o.max_num_seqs = s->max_seqs;
    o.batch_invariant = 1;
    o.state_memory_bytes = s->memory;
    o.draft_max = s->draft_max;
    o.draft_schedule = s->schedule;
    return di_engine_create_mock_drafter(MOCK_VOCAB, MOCK_SEED, 5, s->agree, &o);
}

/* ---- every verified row against the reference ------------------------------------------------ */

typedef struct {
    const Case *cases;
    const uint64_t *ids; /* set by run_cases */
    int n;
    int rows, wrong;
} RowCheck;

static void check_row(void *user, uint64_t id, int64_t pos, const float *logits, int32_t vocab) {
    RowCheck *rc = user;
    for (int r = 0; r < rc->n; r++) {
        if (rc->ids[r] != id) continue;
        const Case *c = &rc->cases[r];
        int32_t seq[48 + MAX_OUT];
        memcpy(seq, c->prompt, sizeof(int32_t) * (size_t)c->n_prompt);
        memcpy(seq + c->n_prompt, c->expect, sizeof(int32_t) * (size_t)c->n_expect);
        float ref[MOCK_VOCAB];
        if (pos > c->n_prompt + c->n_expect - 1) {
            rc->wrong++;
            return;
        }
        di_mock_reference_logits(vocab, MOCK_SEED, seq, pos, ref);
        rc->wrong += memcmp(ref, logits, sizeof ref) != 0;
        rc->rows++;
        return;
    }
    rc->wrong++;
}

typedef struct {
    int32_t tokens[MAX_REQ][MAX_OUT];
    int n[MAX_REQ];
    DiFinishReason reason[MAX_REQ];
} Outputs;

/* Run the cases arriving a few per step; their outputs into *out.  rc (may be NULL) checks every
 * verified row against the reference. */
static void run_cases(const Setup *s, const Case *cases, int n, RowCheck *rc, Outputs *out, DiEngineMetrics *m,
                      const char *what) {
    memset(out, 0, sizeof *out);
    DiEngine *e = spec_engine(s);
    CHECK_MSG(e != NULL, "%s: %s", what, di_last_error());
    if (!e) return;
    uint64_t ids[MAX_REQ];
    if (rc) {
        rc->ids = ids;
        di_engine_set_logits_observer(e, check_row, rc);
    }
    int added = 0, active = 1, steps = 0;
    while ((added < n || active > 0) && steps < 10000) {
        for (int b = 0; b < 3 && added < n; b++, added++) {
            DiRequestInput in = {.prompt_ids = cases[added].prompt, .n_prompt_ids = cases[added].n_prompt};
            CHECK_EQ_INT(di_engine_add_request(e, &in, &cases[added].params, NULL, NULL, &ids[added]), 0);
        }
        int rc_step = di_engine_step(e, &active);
        CHECK_MSG(rc_step == 0, "%s: %s", what, di_last_error());
        if (rc_step != 0) break;
        steps++;
    }
    for (int r = 0; r < n; r++) {
        DiRequestOutput o;
        CHECK_EQ_INT(di_engine_get_output(e, ids[r], &o), 0);
        out->n[r] = o.n_tokens < MAX_OUT ? o.n_tokens : MAX_OUT;
        out->reason[r] = o.finish_reason;
        memcpy(out->tokens[r], o.token_ids, sizeof(int32_t) * (size_t)out->n[r]);
    }
    di_engine_get_metrics(e, m);
    di_engine_destroy(e);
}

/* Every output must equal its reference, and every verified row the reference's logits. */
static void run_and_compare(const Setup *s, const Case *cases, int n, DiEngineMetrics *m, const char *what) {
    static Outputs out;
    RowCheck rc = {cases, NULL, n, 0, 0};
    run_cases(s, cases, n, &rc, &out, m, what);
    int same = 1;
    for (int r = 0; r < n; r++) {
        int ok = out.n[r] == cases[r].n_expect && out.reason[r] == cases[r].reason &&
                 memcmp(out.tokens[r], cases[r].expect, sizeof(int32_t) * (size_t)out.n[r]) == 0;
        if (!ok) printf("  %s: request %d: %d tokens, expected %d\n", what, r, out.n[r], cases[r].n_expect);
        same &= ok;
    }
    CHECK_MSG(same, "%s", what);
    CHECK_MSG(rc.wrong == 0, "%s: %d verified rows differ from the reference (of %d)", what, rc.wrong, rc.rows);
}

static void check_counters(const DiEngineMetrics *m, const char *what) {
    uint64_t drafts = 0, accepted = 0;
    for (int k = 0; k <= DI_MAX_DRAFT; k++) {
        drafts += m->spec_accepted_hist[k];
        accepted += (uint64_t)k * m->spec_accepted_hist[k];
    }
    CHECK_MSG(drafts == m->spec_num_drafts, "%s: histogram holds %llu verify steps, counter %llu", what,
              (unsigned long long)drafts, (unsigned long long)m->spec_num_drafts);
    CHECK_MSG(accepted == m->spec_num_accepted_tokens, "%s: histogram", what);
    CHECK(m->spec_num_accepted_tokens <= m->spec_num_draft_tokens);
}

TEST(greedy_output_is_the_plain_output_for_every_length_schedule_and_acceptance) {
    static Case cases[MAX_REQ];
    make_cases(cases, 8, 7, 0.0f);
    int outputs = 0;
    for (int r = 0; r < 8; r++) outputs += cases[r].n_expect;
    const double agree[3] = {1.0, 0.0, 0.6};
    for (int len = 0; len <= 5; len++)
        for (int sched = 0; sched <= 1; sched++)
            for (int a = 0; a < 3; a++) {
                Setup s = {len, sched, 0, 64, 0, 8, agree[a], 1 << 20};
                char what[96];
                snprintf(what, sizeof what, "draft_max %d, %s, agree %.1f", len, sched ? "confidence" : "fixed", agree[a]);
                DiEngineMetrics m;
                run_and_compare(&s, cases, 8, &m, what);
                check_counters(&m, what);
                CHECK_EQ_INT(m.spec_draft_max, len);
                if (len == 0) CHECK_MSG(m.spec_num_drafts == 0, "%s", what);
                /* right drafts are all accepted; wrong ones never are, and the confidence
                 * schedule does not even verify them */
                if (a == 0) CHECK_MSG(m.spec_num_accepted_tokens == m.spec_num_draft_tokens, "%s", what);
                if (a == 0 && len > 0) CHECK_MSG(m.spec_num_accepted_tokens > 0, "%s", what);
                if (a == 1) CHECK_MSG(m.spec_num_accepted_tokens == 0, "%s", what);
                /* never right: the confidence schedule learns that drafting does not pay and
                 * only probes (one draft per request) now and then */
                if (a == 1 && sched == 1)
                    CHECK_MSG(m.spec_num_draft_tokens == m.spec_num_drafts && m.spec_num_drafts * 4 < (uint64_t)outputs,
                              "%s: %llu drafts in %llu verify steps for %d tokens", what,
                              (unsigned long long)m.spec_num_draft_tokens, (unsigned long long)m.spec_num_drafts, outputs);
                if (a == 1 && sched == 0 && len > 0) CHECK_MSG(m.spec_num_draft_tokens > 0, "%s", what);
                /* sometimes right: fixed lengths verify wrong drafts too */
                if (a == 2 && len > 0) CHECK_MSG(m.spec_num_accepted_tokens > 0, "%s", what);
                if (a == 2 && len > 0 && sched == 0)
                    CHECK_MSG(m.spec_num_accepted_tokens < m.spec_num_draft_tokens, "%s", what);
            }
}

TEST(accepted_runs_emit_several_tokens_per_step) {
    static Case cases[1];
    make_cases(cases, 1, 3, 0.0f);
    cases[0].params.max_tokens = 36;
    cases[0].n_expect = reference_generate(cases[0].prompt, cases[0].n_prompt, &cases[0].params, cases[0].params.seed,
                                           cases[0].expect, &cases[0].reason);
    Setup s = {5, 0, 0, 64, 0, 1, 1.0, 1 << 20};
    DiEngineMetrics m;
    run_and_compare(&s, cases, 1, &m, "one request, drafts always right");
    /* 1 token from the prefill, then 6 per verify step (anchor row + 5 drafts): 35 = 5 x 6 + 5 */
    CHECK_EQ_INT((int)m.spec_num_drafts, 6);
    CHECK_EQ_INT((int)m.spec_accepted_hist[5], 5);
    CHECK_EQ_INT((int)m.spec_accepted_hist[4], 1);
    CHECK_EQ_INT((int)m.steps, 7);
}

/* T > 0 with fixed lengths: drafts are verified by the rejection rule, so a seed's tokens depend
 * on where drafts are verified, and fixed lengths put them at the same positions whatever the
 * load: alone and in a crowd (small budget, prefill chunks, async requested) give the same
 * tokens.  Right drafts are nearly always accepted (their distribution is the target's). */
/* One request at a time with a large budget, or ten with a budget of 23 and chunks of 5. */
static Setup alone_setup(int len, int sched) { return (Setup){len, sched, 0, 64, 0, 1, 0.7, 1 << 20}; }
static Setup crowd_setup(int len, int sched) { return (Setup){len, sched, 1, 23, 5, 10, 0.7, 1 << 20}; }

TEST(seeded_samples_in_fixed_mode_do_not_depend_on_what_runs_beside) {
    static Case cases[MAX_REQ];
    static Outputs alone_out, crowd_out;
    make_cases(cases, 10, 11, 0.8f);
    for (int len = 1; len <= 5; len += 2) {
        char what[64];
        snprintf(what, sizeof what, "T 0.8, draft_max %d, fixed", len);
        Setup alone = alone_setup(len, 0), crowd = crowd_setup(len, 0);
        DiEngineMetrics m;
        run_cases(&alone, cases, 10, NULL, &alone_out, &m, what);
        run_cases(&crowd, cases, 10, NULL, &crowd_out, &m, what);
        CHECK_MSG(memcmp(&alone_out, &crowd_out, sizeof alone_out) == 0, "%s", what);
        for (int r = 0; r < 10; r++) CHECK_EQ_INT(crowd_out.n[r], cases[r].params.max_tokens);
        check_counters(&m, what);
        CHECK_MSG(m.spec_num_accepted_tokens * 2 > m.spec_num_draft_tokens, "%s: %llu of %llu accepted", what,
                  (unsigned long long)m.spec_num_accepted_tokens, (unsigned long long)m.spec_num_draft_tokens);
    }
}

/* Preemption is caused by what runs beside, so it must not change a seeded request's tokens in
 * fixed mode either: the recompute restores the state over the tokens the request has and the
 * next verify block starts at the anchor it would have had (alone, 1 MiB: never preempted; 2 KiB
 * of state beside fifteen others, whole prefills or chunked: preempted). */
TEST(seeded_samples_in_fixed_mode_keep_their_tokens_through_preemption) {
    static Case cases[MAX_REQ];
    static Outputs alone_out, crowd_out;
    make_cases(cases, MAX_REQ, 23, 0.8f);
    for (int len = 1; len <= 5; len += 2) {
        Setup alone = alone_setup(len, 0);
        DiEngineMetrics ma, mc;
        run_cases(&alone, cases, MAX_REQ, NULL, &alone_out, &ma, "alone");
        CHECK_MSG(ma.preemptions == 0, "draft_max %d: %llu preemptions alone", len, (unsigned long long)ma.preemptions);
        /* whole prefills, synchronous; prefill chunks of 5 in a budget of 23, async requested */
        const Setup crowds[] = {{len, 0, 0, 32, 0, 16, 0.7, 2048}, {len, 0, 1, 23, 5, 16, 0.7, 2048}};
        for (int c = 0; c < 2; c++) {
            char what[64];
            snprintf(what, sizeof what, "T 0.8, draft_max %d, fixed, crowd %d", len, c);
            run_cases(&crowds[c], cases, MAX_REQ, NULL, &crowd_out, &mc, what);
            CHECK_MSG(mc.preemptions > 0, "%s: not preempted", what);
            for (int r = 0; r < MAX_REQ; r++) {
                CHECK_EQ_INT(crowd_out.n[r], cases[r].params.max_tokens);
                CHECK_MSG(memcmp(alone_out.tokens[r], crowd_out.tokens[r], sizeof alone_out.tokens[r]) == 0,
                          "%s: request %d", what, r);
            }
            check_counters(&mc, what);
        }
    }
}

/* The confidence schedule at T > 0 verifies by exact match: the tokens are plain decoding's,
 * alone and in a crowd. */
TEST(seeded_samples_with_the_confidence_schedule_are_the_plain_samples) {
    static Case cases[MAX_REQ];
    make_cases(cases, 10, 13, 0.8f);
    for (int len = 1; len <= 5; len += 2) {
        char what[64];
        snprintf(what, sizeof what, "T 0.8, draft_max %d, confidence", len);
        Setup setups[2] = {alone_setup(len, 1), crowd_setup(len, 1)};
        DiEngineMetrics m;
        for (int k = 0; k < 2; k++) run_and_compare(&setups[k], cases, 10, &m, what);
        check_counters(&m, what);
    }
}

/* Without a caller's seed (request or engine) there is no sample to keep, so the confidence
 * schedule verifies T > 0 drafts by the rejection rule: more of them are accepted than by exact
 * match, every request still runs to its length, and the counters stay consistent. */
TEST(unseeded_samples_with_the_confidence_schedule_use_the_rejection_rule) {
    static Case seeded[MAX_REQ], unseeded[MAX_REQ];
    static Outputs out;
    make_cases(seeded, 10, 17, 0.8f);
    memcpy(unseeded, seeded, sizeof seeded);
    for (int r = 0; r < 10; r++) unseeded[r].params.has_seed = 0;
    Setup s = alone_setup(5, 1);
    DiEngineMetrics ms, mu;
    run_cases(&s, seeded, 10, NULL, &out, &ms, "seeded, confidence");
    run_cases(&s, unseeded, 10, NULL, &out, &mu, "unseeded, confidence");
    for (int r = 0; r < 10; r++) CHECK_EQ_INT(out.n[r], unseeded[r].params.max_tokens);
    check_counters(&mu, "unseeded, confidence");
    double rate_s = ms.spec_num_draft_tokens ? (double)ms.spec_num_accepted_tokens / (double)ms.spec_num_draft_tokens : 0;
    double rate_u = mu.spec_num_draft_tokens ? (double)mu.spec_num_accepted_tokens / (double)mu.spec_num_draft_tokens : 0;
    CHECK_MSG(mu.spec_num_draft_tokens > 0 && rate_u > rate_s, "accepted: unseeded %.3f of %llu, seeded %.3f of %llu", rate_u,
              (unsigned long long)mu.spec_num_draft_tokens, rate_s, (unsigned long long)ms.spec_num_draft_tokens);
    printf("  T 0.8, confidence: accepted %.3f of drafts unseeded (rejection rule), %.3f seeded (exact match)\n", rate_u,
           rate_s);
}

TEST(speculation_beside_prefill_chunks_preemption_and_async) {
    static Case cases[MAX_REQ];
    make_cases(cases, MAX_REQ, 19, 0.0f);
    /* 2 KiB of state: 8 pages of 256 bytes, far fewer than 16 requests need: preemption */
    const Setup setups[] = {
        {5, 1, 0, 16, 3, 6, 0.8, 1 << 20},  {5, 1, 1, 16, 3, 6, 0.8, 1 << 20}, {3, 0, 1, 7, 2, 16, 0.5, 1 << 20},
        {5, 0, 0, 32, 0, 16, 0.9, 2048},    {4, 1, 1, 12, 4, 16, 0.9, 2048},
    };
    uint64_t preemptions = 0;
    for (size_t i = 0; i < sizeof setups / sizeof setups[0]; i++) {
        char what[64];
        snprintf(what, sizeof what, "setup %zu", i);
        DiEngineMetrics m;
        run_and_compare(&setups[i], cases, MAX_REQ, &m, what);
        check_counters(&m, what);
        CHECK_MSG(m.spec_num_accepted_tokens > 0, "%s", what);
        preemptions += m.preemptions;
    }
    CHECK(preemptions > 0);
}

/* ---- stops inside an accepted run ------------------------------------------------------------ */

TEST(stops_inside_an_accepted_run_end_the_output_there) {
    static Case cases[1];
    make_cases(cases, 1, 5, 0.0f);
    Case *c = &cases[0];
    c->params.max_tokens = 30;
    c->n_expect = reference_generate(c->prompt, c->n_prompt, &c->params, c->params.seed, c->expect, &c->reason);
    CHECK_EQ_INT(c->n_expect, 30);
    /* a stop token first generated at output index 9: with drafts always right the verify step
     * covering indices 7..12 accepts past it */
    int at = 9;
    for (int k = 0; k < at; k++)
        if (c->expect[k] == c->expect[at]) at = k;
    int32_t stop_id = c->expect[at];
    c->params.stop_token_ids = &stop_id;
    c->params.n_stop_token_ids = 1;
    c->params.logprobs = 2;
    c->n_expect = reference_generate(c->prompt, c->n_prompt, &c->params, c->params.seed, c->expect, &c->reason);
    CHECK_EQ_INT(c->n_expect, at + 1);
    CHECK_EQ_INT(c->reason, DI_FINISH_STOP);
    Setup s = {5, 0, 0, 64, 0, 1, 1.0, 1 << 20};
    DiEngine *e = spec_engine(&s);
    StreamLog log = {0};
    uint64_t id;
    DiRequestInput in = {.prompt_ids = c->prompt, .n_prompt_ids = c->n_prompt};
    CHECK_EQ_INT(di_engine_add_request(e, &in, &c->params, record_stream, &log, &id), 0);
    CHECK_EQ_INT(di_engine_run(e), 0);
    DiRequestOutput out;
    CHECK_EQ_INT(di_engine_get_output(e, id, &out), 0);
    CHECK_EQ_INT(out.n_tokens, at + 1);
    CHECK(memcmp(out.token_ids, c->expect, sizeof(int32_t) * (size_t)out.n_tokens) == 0);
    CHECK_EQ_INT(out.stop_token, stop_id);
    CHECK_EQ_INT(log.n_tokens, at + 1);
    CHECK_EQ_INT(log.n_final, 1);
    for (int k = 0; k < out.n_tokens; k++) CHECK_EQ_INT(out.logprobs[k].token, out.token_ids[k]);
    CHECK(out.spec_num_accepted_tokens > 0);
    di_engine_destroy(e);

    /* max_tokens inside a run: drafts are cut so that no verify step passes it */
    c->params.n_stop_token_ids = 0;
    c->params.max_tokens = 8;
    c->n_expect = reference_generate(c->prompt, c->n_prompt, &c->params, c->params.seed, c->expect, &c->reason);
    DiEngineMetrics m;
    run_and_compare(&s, cases, 1, &m, "max_tokens 8");
    CHECK_EQ_INT((int)m.spec_num_draft_tokens, 5); /* 1 prefill token, 5 drafts + 1, then a plain decode */
}

TEST(stop_strings_give_the_plain_text) {
    Setup s = {5, 1, 0, 64, 0, 4, 1.0, 1 << 20};
    DiEngine *spec = spec_engine(&s);
    Setup p = s;
    p.draft_max = 0;
    DiEngine *plain = spec_engine(&p);
    DiSamplingParams params;
    di_sampling_params_init(&params);
    params.temperature = 0;
    params.max_tokens = 30;
    params.ignore_eos = 1;
    DiRequestInput in = {.prompt_text = "speculate"};
    uint64_t id_plain, id_spec;
    CHECK_EQ_INT(di_engine_add_request(plain, &in, &params, NULL, NULL, &id_plain), 0);
    CHECK_EQ_INT(di_engine_run(plain), 0);
    DiRequestOutput a, b;
    CHECK_EQ_INT(di_engine_get_output(plain, id_plain, &a), 0);
    CHECK(a.text_len > 12);
    char stop[8] = {0};
    memcpy(stop, a.text + a.text_len / 2, 3); /* a string the plain text has in its middle */
    const char *stops[1] = {stop};
    params.stop = stops;
    params.n_stop = 1;
    CHECK_EQ_INT(di_engine_add_request(plain, &in, &params, NULL, NULL, &id_plain), 0);
    CHECK_EQ_INT(di_engine_run(plain), 0);
    CHECK_EQ_INT(di_engine_add_request(spec, &in, &params, NULL, NULL, &id_spec), 0);
    CHECK_EQ_INT(di_engine_run(spec), 0);
    CHECK_EQ_INT(di_engine_get_output(plain, id_plain, &a), 0);
    CHECK_EQ_INT(di_engine_get_output(spec, id_spec, &b), 0);
    CHECK_EQ_INT(b.stop_string, 0);
    CHECK_EQ_INT((int)b.text_len, (int)a.text_len);
    CHECK_STR(b.text, a.text);
    CHECK_EQ_INT(b.n_tokens, a.n_tokens);
    di_engine_destroy(spec);
    di_engine_destroy(plain);
}

/* A structured-output request does not draft (its mask would be needed per verify row); beside
 * it a plain request does, and both give the tokens of an engine without speculation. */
/* Hand-written checkers of the two constraints below (independent of the grammar engine). */
static bool is_abcd_e(const char *t, size_t n) { /* (ab|cd)+e */
    if (n < 3 || (n - 1) % 2 != 0 || t[n - 1] != 'e') return false;
    for (size_t i = 0; i + 1 < n; i += 2)
        if (!(t[i] == 'a' && t[i + 1] == 'b') && !(t[i] == 'c' && t[i + 1] == 'd')) return false;
    return true;
}

static bool is_printable(const char *t, size_t n) { /* [ -~]+ */
    for (size_t i = 0; i < n; i++)
        if (t[i] < ' ' || t[i] > '~') return false;
    return n > 0;
}

#define N_CONSTRAINED 5

/* Constrained requests draft: the mock drafter proposes the unconstrained continuation, which the
 * grammar refuses often (a strict regex: nearly always at the first draft; a printable one: at
 * the control bytes), so drafts are cut there and counted; what is left is verified row by row
 * under masks, and the output is exactly the one without speculation, greedy and seeded. */
TEST(constrained_requests_draft_within_their_grammar) {
    static const char *regex[N_CONSTRAINED] = {NULL, "(ab|cd)+e", "(ab|cd)+e", "[ -~]+", "[ -~]+"};
    DiRequestOutput out[2][N_CONSTRAINED];
    int32_t tokens[2][N_CONSTRAINED][32]; /* copied: an output's arrays go with its engine */
    DiEngineMetrics m[2];
    for (int spec = 0; spec <= 1; spec++) {
        Setup s = {spec ? 5 : 0, 0, 0, 64, 0, 8, 1.0, 1 << 20}; /* fixed lengths: every step drafts */
        DiEngine *e = spec_engine(&s);
        uint64_t id[N_CONSTRAINED];
        for (int k = 0; k < N_CONSTRAINED; k++) {
            DiSamplingParams p;
            di_sampling_params_init(&p);
            p.max_tokens = 30;
            p.has_seed = 1;
            p.seed = 3 + (uint64_t)k;
            /* one request of each regex samples: with fixed lengths a plain one would verify by the
             * rejection rule (other tokens), a constrained one verifies by exact match */
            p.temperature = k == 2 || k == 4 ? 0.8f : 0.0f;
            p.ignore_eos = k == 0;
            p.constraint_type = regex[k] ? DI_CONSTRAINT_REGEX : DI_CONSTRAINT_NONE;
            p.constraint = regex[k];
            int32_t prompt[2] = {':', (int32_t)(7 * k)};
            DiRequestInput in = {.prompt_ids = prompt, .n_prompt_ids = 2};
            CHECK_EQ_INT(di_engine_add_request(e, &in, &p, NULL, NULL, &id[k]), 0);
        }
        CHECK_EQ_INT(di_engine_run(e), 0);
        for (int k = 0; k < N_CONSTRAINED; k++) {
            CHECK_EQ_INT(di_engine_get_output(e, id[k], &out[spec][k]), 0);
            CHECK(out[spec][k].n_tokens > 0 && out[spec][k].n_tokens <= 30);
            memcpy(tokens[spec][k], out[spec][k].token_ids, sizeof(int32_t) * (size_t)out[spec][k].n_tokens);
            if (k == 1 || k == 2) CHECK(is_abcd_e(out[spec][k].text, out[spec][k].text_len));
            if (k == 3 || k == 4) CHECK(is_printable(out[spec][k].text, out[spec][k].text_len));
        }
        di_engine_get_metrics(e, &m[spec]);
        di_engine_destroy(e);
    }
    for (int k = 0; k < N_CONSTRAINED; k++) {
        CHECK_EQ_INT(out[1][k].n_tokens, out[0][k].n_tokens);
        CHECK(memcmp(tokens[0][k], tokens[1][k], sizeof(int32_t) * (size_t)out[0][k].n_tokens) == 0);
    }
    CHECK(out[1][0].spec_num_drafts > 0);
    CHECK(out[1][3].spec_num_accepted_tokens > 0); /* drafts inside the grammar do get through */
    CHECK(m[1].spec_num_grammar_truncated > 0);
    CHECK_EQ_INT((int)m[0].spec_num_grammar_truncated, 0);
}

/* ---- the start-up step-cost probe ------------------------------------------------------------ */

/* An engine with the confidence schedule times verify batches of 1, 2, 4, ... rows up to its
 * largest (4 sequences x (1 + 5) rows = 24, under the 64-token budget) before its first step;
 * the curve through them never falls, and live steps add to it without dropping the probe's
 * sizes.  Fixed lengths (the curve unused) and draft_max = 0 do not probe. */
TEST(start_up_probe_measures_a_monotone_step_cost_curve) {
    static const double sizes[] = {1, 2, 4, 8, 16, 24};
    double rows[64], seconds[64];
    Setup s = {5, 1, 0, 64, 0, 4, 1.0, 1 << 20};
    DiEngine *e = spec_engine(&s);
    int n = di_engine_spec_cost_points(e, rows, seconds, 64);
    CHECK_EQ_INT(n, 6);
    for (int i = 0; i < n && i < 6; i++) {
        CHECK(rows[i] == sizes[i]);
        CHECK(seconds[i] > 0);
        if (i > 0) CHECK(seconds[i] >= seconds[i - 1]);
    }
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.max_tokens = 20;
    p.ignore_eos = 1;
    int32_t prompt[3] = {5, 6, 7};
    DiRequestInput in = {.prompt_ids = prompt, .n_prompt_ids = 3};
    CHECK_EQ_INT(di_engine_add_request(e, &in, &p, NULL, NULL, NULL), 0);
    CHECK_EQ_INT(di_engine_run(e), 0);
    int after = di_engine_spec_cost_points(e, rows, seconds, 64);
    CHECK(after >= n);
    for (int i = 0; i < after && i < 64; i++)
        if (i > 0) CHECK(seconds[i] >= seconds[i - 1]);
    di_engine_destroy(e);
    for (int k = 0; k < 2; k++) {
        Setup off = {k ? 5 : 0, k ? 0 : 1, 0, 64, 0, 4, 1.0, 1 << 20};
        e = spec_engine(&off);
        CHECK_EQ_INT(di_engine_spec_cost_points(e, rows, seconds, 64), 0);
        di_engine_destroy(e);
    }
}

/* The probe itself: a spent budget stops it after its first size, a pool that holds one verify
 * sequence bounds the sizes to its rows, and bad arguments are refused. */
TEST(start_up_probe_honours_its_budget_and_its_pool) {
    DiRunner *runner = di_mock_runner_create(MOCK_VOCAB, MOCK_SEED);
    DiSpecControl c;
    CHECK_EQ_INT(di_spec_control_init(&c, true, 4, 5), 0);
    size_t pages = runner->ops->pages_for_tokens(runner, 6);
    DiPagePool *pool = di_page_pool_create(runner->page_bytes, pages, false); /* one sequence of 1 + 5 */
    float *logits = calloc((size_t)24 * MOCK_VOCAB, sizeof *logits);
    DiSpecProbe p = {runner, pool, logits, 24, 6, 1e-12};
    CHECK_EQ_INT(di_spec_probe_cost(&p, &c), 1);
    double rows[64], seconds[64];
    CHECK_EQ_INT(di_spec_cost_points(&c.cost, rows, seconds, 64), 1);
    CHECK(rows[0] == 1);
    p.budget_s = 10;
    CHECK_EQ_INT(di_spec_probe_cost(&p, &c), 4); /* 1, 2, 4, 6: the pool's one sequence */
    CHECK_EQ_INT(di_spec_cost_points(&c.cost, rows, seconds, 64), 4);
    CHECK(rows[3] == 6);
    CHECK_EQ_INT((int)di_page_pool_used(pool), 0); /* the scratch pages went back */
    p.rows_per_seq = 0;
    CHECK_EQ_INT(di_spec_probe_cost(&p, &c), -1);
    di_error_clear();
    free(logits);
    di_page_pool_destroy(pool);
    di_spec_control_free(&c);
    runner->ops->destroy(runner);
}

/* ---- the knobs ------------------------------------------------------------------------------- */

TEST(draft_options_are_checked_and_resolved) {
    DiEngineOptions o;
    di_engine_options_init(&o);
    CHECK_EQ_INT(o.draft_max, -1);
    CHECK_EQ_INT(o.draft_schedule, -1);
    DiEngineMetrics m;
    unsetenv("DEEPINFER_USE_NEXTN_DECODE");
    DiEngine *e = di_engine_create_mock_drafter(MOCK_VOCAB, 1, 5, 1.0, &o);
    di_engine_get_metrics(e, &m);
    CHECK_EQ_INT(m.spec_draft_max, 5); /* the default */
    di_engine_destroy(e);
    e = di_engine_create_mock(MOCK_VOCAB, 1, &o);
    di_engine_get_metrics(e, &m);
    CHECK_EQ_INT(m.spec_draft_max, 0); /* the default on a model without a drafter */
    di_engine_destroy(e);
    setenv("DEEPINFER_USE_NEXTN_DECODE", "2", 1);
    e = di_engine_create_mock_drafter(MOCK_VOCAB, 1, 5, 1.0, &o);
    di_engine_get_metrics(e, &m);
    CHECK_EQ_INT(m.spec_draft_max, 2);
    di_engine_destroy(e);
    setenv("DEEPINFER_USE_NEXTN_DECODE", "17", 1);
    CHECK(di_engine_create_mock_drafter(MOCK_VOCAB, 1, 5, 1.0, &o) == NULL);
    CHECK(strstr(di_last_error(), "DEEPINFER_USE_NEXTN_DECODE") != NULL);
    unsetenv("DEEPINFER_USE_NEXTN_DECODE");
    setenv("DEEPINFER_ENABLE_MTP_VARLEN", "yes", 1);
    CHECK(di_engine_create_mock_drafter(MOCK_VOCAB, 1, 5, 1.0, &o) == NULL);
    CHECK(strstr(di_last_error(), "DEEPINFER_ENABLE_MTP_VARLEN") != NULL);
    unsetenv("DEEPINFER_ENABLE_MTP_VARLEN");
    o.draft_max = 8; /* a maximum: the drafter's block of 5 caps it */
    e = di_engine_create_mock_drafter(MOCK_VOCAB, 1, 5, 1.0, &o);
    di_engine_get_metrics(e, &m);
    CHECK_EQ_INT(m.spec_draft_max, 5);
    di_engine_destroy(e);
    o.draft_max = 3;
    CHECK(di_engine_create_mock(MOCK_VOCAB, 1, &o) == NULL);
    CHECK(strstr(di_last_error(), "draft_max 3: the model (mock runner) has no drafter") != NULL);
    o.draft_max = 17;
    CHECK(di_engine_create_mock_drafter(MOCK_VOCAB, 1, 5, 1.0, &o) == NULL);
    CHECK(strstr(di_last_error(), "draft_max") != NULL);
    o.draft_max = 2;
    o.draft_schedule = 2;
    CHECK(di_engine_create_mock_drafter(MOCK_VOCAB, 1, 5, 1.0, &o) == NULL);
    CHECK(strstr(di_last_error(), "draft_schedule") != NULL);
    o.draft_schedule = 0;
    CHECK(di_engine_create_mock_drafter(MOCK_VOCAB, 1, 0, 1.0, &o) == NULL);
    CHECK(strstr(di_last_error(), "draft_block") != NULL);
    CHECK(di_engine_create_mock_drafter(MOCK_VOCAB, 1, 5, 1.5, &o) == NULL);
    CHECK(strstr(di_last_error(), "agree_rate") != NULL);
}

int main(void) {
    RUN_TEST(greedy_output_is_the_plain_output_for_every_length_schedule_and_acceptance);
    RUN_TEST(accepted_runs_emit_several_tokens_per_step);
    RUN_TEST(seeded_samples_in_fixed_mode_do_not_depend_on_what_runs_beside);
    RUN_TEST(seeded_samples_in_fixed_mode_keep_their_tokens_through_preemption);
    RUN_TEST(seeded_samples_with_the_confidence_schedule_are_the_plain_samples);
    RUN_TEST(unseeded_samples_with_the_confidence_schedule_use_the_rejection_rule);
    RUN_TEST(speculation_beside_prefill_chunks_preemption_and_async);
    RUN_TEST(stops_inside_an_accepted_run_end_the_output_there);
    RUN_TEST(stop_strings_give_the_plain_text);
    RUN_TEST(constrained_requests_draft_within_their_grammar);
    RUN_TEST(start_up_probe_measures_a_monotone_step_cost_curve);
    RUN_TEST(start_up_probe_honours_its_budget_and_its_pool);
    RUN_TEST(draft_options_are_checked_and_resolved);
    return TEST_SUMMARY();
}
