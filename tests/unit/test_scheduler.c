/* test_scheduler.c — continuous batching against the alone-reference: every request of a random
 * workload (random prompts, arrivals, sampling parameters, chunk budgets, state memory small
 * enough to force preemption by recompute) must produce exactly the tokens it produces alone,
 * in sync and in async mode; aborts at random moments free everything; page accounting returns
 * to zero. */
#include "test.h"
#include "test_engine_helpers.h"

#include "base/error.h"
#include "engine/scheduler.h"

#define N_REQ 24

typedef struct {
    int32_t prompt[64];
    int n_prompt;
    DiSamplingParams params;
    int32_t stop_ids[2];
    int arrive_step, abort_step; /* abort_step < 0: never */
    uint64_t id;
    StreamLog log;
} Job;

static void make_jobs(Job *jobs, int n, uint64_t seed, bool with_aborts) {
    uint64_t rng = seed;
    for (int i = 0; i < n; i++) {
        Job *j = &jobs[i];
        memset(j, 0, sizeof *j);
        j->n_prompt = 1 + (int)(rng_next(&rng) % 40);
        for (int k = 0; k < j->n_prompt; k++) j->prompt[k] = (int32_t)(rng_next(&rng) % 256);
        di_sampling_params_init(&j->params);
        j->params.max_tokens = 1 + (int)(rng_next(&rng) % 24);
        j->params.has_seed = 1;
        j->params.seed = rng_next(&rng);
        switch (i % 4) {
        case 0: j->params.temperature = 0; break;
        case 1: j->params.temperature = 0.8f; j->params.top_k = 20; break;
        case 2: j->params.top_p = 0.9f; j->params.repetition_penalty = 1.2f; j->params.frequency_penalty = 0.3f; break;
        default:
            j->params.min_p = 0.05f;
            j->params.presence_penalty = 0.5f;
            j->stop_ids[0] = (int32_t)(rng_next(&rng) % 256);
            j->params.stop_token_ids = j->stop_ids;
            j->params.n_stop_token_ids = 1;
            break;
        }
        j->arrive_step = (int)(rng_next(&rng) % 12);
        j->abort_step = with_aborts && rng_next(&rng) % 3 == 0 ? j->arrive_step + (int)(rng_next(&rng) % 10) : -1;
    }
}

/* Run the workload; returns 0 when the engine ran it to the end. */
static int run_jobs(Job *jobs, int n, int async, int budget, int chunk, size_t memory, DiEngineMetrics *metrics) {
    DiEngineOptions o;
    di_engine_options_init(&o);
    o.async_scheduling = async;
    o.max_batch_tokens = budget;
    o.max_prefill_chunk = chunk;
    o.max_num_seqs = 8;
    o.state_memory_bytes = memory;
    DiEngine *e = di_engine_create_mock(MOCK_VOCAB, MOCK_SEED, &o);
    if (!e) return -1;
    di_engine_set_page_poisoning(e, 1);
    int rc = 0, active = 1;
    for (int step = 0; rc == 0 && (active > 0 || step < 40); step++) {
        for (int i = 0; i < n; i++) {
            Job *j = &jobs[i];
            if (j->arrive_step == step) {
                DiRequestInput in = {.prompt_ids = j->prompt, .n_prompt_ids = j->n_prompt};
                rc |= di_engine_add_request(e, &in, &j->params, record_stream, &j->log, &j->id);
            }
            if (j->abort_step == step && j->id) rc |= di_engine_abort(e, j->id);
        }
        rc |= di_engine_step(e, &active);
    }
    if (rc != 0) fprintf(stderr, "  engine error: %s\n", di_last_error());
    di_engine_get_metrics(e, metrics);
    di_engine_destroy(e);
    return rc;
}

static int check_against_reference(Job *jobs, int n) {
    int bad = 0;
    int32_t ref[64];
    for (int i = 0; i < n; i++) {
        Job *j = &jobs[i];
        DiFinishReason reason;
        int n_ref = reference_generate(j->prompt, j->n_prompt, &j->params, j->params.seed, ref, &reason);
        int aborted = j->log.reason == DI_FINISH_ABORT;
        int ok = j->log.n_final == 1 && j->log.n_after_final == 0;
        if (aborted) {
            ok &= j->log.n_tokens <= n_ref; /* a prefix of the reference */
        } else {
            ok &= j->log.n_tokens == n_ref && j->log.reason == reason;
        }
        for (int k = 0; k < j->log.n_tokens && k < n_ref; k++) ok &= j->log.tokens[k] == ref[k];
        if (!ok) {
            fprintf(stderr, "  request %d: %d tokens (ref %d), reason %d (ref %d), finals %d\n", i, j->log.n_tokens,
                    n_ref, j->log.reason, reason, j->log.n_final);
            bad++;
        }
    }
    return bad;
}

TEST(single_greedy_request_matches_reference_with_any_chunking) {
    int32_t prompt[37];
    for (int i = 0; i < 37; i++) prompt[i] = (i * 13) % 256;
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.temperature = 0;
    p.max_tokens = 20;
    p.ignore_eos = 1;
    int32_t ref[20];
    DiFinishReason reason;
    int n_ref = reference_generate(prompt, 37, &p, 0, ref, &reason);
    CHECK_EQ_INT(n_ref, 20);
    int budgets[4] = {1, 5, 16, 512};
    for (int b = 0; b < 4; b++)
        for (int async = 0; async < 2; async++) {
            DiEngineOptions o;
            di_engine_options_init(&o);
            o.max_batch_tokens = budgets[b];
            o.async_scheduling = async;
            o.state_memory_bytes = 1 << 20;
            DiEngine *e = di_engine_create_mock(MOCK_VOCAB, MOCK_SEED, &o);
            StreamLog log = {0};
            DiRequestInput in = {.prompt_ids = prompt, .n_prompt_ids = 37};
            uint64_t id;
            CHECK_EQ_INT(di_engine_add_request(e, &in, &p, record_stream, &log, &id), 0);
            CHECK_EQ_INT(di_engine_run(e), 0);
            CHECK_EQ_INT(log.n_tokens, 20);
            CHECK(memcmp(log.tokens, ref, sizeof ref) == 0);
            CHECK_EQ_INT(log.reason, DI_FINISH_LENGTH);
            DiEngineMetrics m;
            di_engine_get_metrics(e, &m);
            CHECK_EQ_INT(m.prefill_tokens, 37);
            CHECK_EQ_INT(m.decode_tokens, 19); /* the last sampled token is never fed back */
            CHECK_EQ_INT(m.pages_used, 0);
            di_engine_destroy(e);
        }
}

TEST(random_workload_matches_reference_sync_and_async) {
    static Job jobs[N_REQ];
    for (int async = 0; async < 2; async++) {
        make_jobs(jobs, N_REQ, 7, false);
        DiEngineMetrics m;
        CHECK_EQ_INT(run_jobs(jobs, N_REQ, async, 48, 0, 1 << 20, &m), 0);
        CHECK_EQ_INT(check_against_reference(jobs, N_REQ), 0);
        CHECK_EQ_INT(m.pages_used, 0);
        CHECK_EQ_INT(m.requests_finished, N_REQ);
    }
}

/* 10 pages of 256 bytes: a request of up to 40 + 24 tokens needs up to 3 pages (1 ring + 2 of
 * rows), 8 running need up to 24: requests are preempted and recomputed. */
TEST(preemption_by_recompute_keeps_outputs_identical) {
    static Job jobs[N_REQ];
    for (int async = 0; async < 2; async++) {
        make_jobs(jobs, N_REQ, 11, false);
        DiEngineMetrics m;
        CHECK_EQ_INT(run_jobs(jobs, N_REQ, async, 32, 7, 10 * 256, &m), 0);
        CHECK_EQ_INT(check_against_reference(jobs, N_REQ), 0);
        CHECK_MSG(m.preemptions > 0, "no preemption happened (async=%d)", async);
        if (getenv("TEST_VERBOSE")) fprintf(stderr, "  async=%d preemptions=%llu peak=%zu steps=%llu\n", async, (unsigned long long)m.preemptions, m.pages_peak, (unsigned long long)m.steps);
        CHECK_EQ_INT(m.pages_used, 0);
        CHECK(m.pages_peak <= m.pages_total);
    }
}

TEST(async_equals_sync_under_random_schedules_with_aborts) {
    static Job sync_jobs[N_REQ], async_jobs[N_REQ];
    for (uint64_t seed = 1; seed <= 4; seed++) {
        make_jobs(sync_jobs, N_REQ, seed * 31, false);
        make_jobs(async_jobs, N_REQ, seed * 31, false);
        DiEngineMetrics ms, ma;
        CHECK_EQ_INT(run_jobs(sync_jobs, N_REQ, 0, 20 + (int)seed * 10, (int)seed, 30 * 256, &ms), 0);
        CHECK_EQ_INT(run_jobs(async_jobs, N_REQ, 1, 20 + (int)seed * 10, (int)seed, 30 * 256, &ma), 0);
        for (int i = 0; i < N_REQ; i++) {
            CHECK_EQ_INT(async_jobs[i].log.n_tokens, sync_jobs[i].log.n_tokens);
            CHECK(memcmp(async_jobs[i].log.tokens, sync_jobs[i].log.tokens,
                         sizeof(int32_t) * (size_t)sync_jobs[i].log.n_tokens) == 0);
            CHECK_STR(async_jobs[i].log.text, sync_jobs[i].log.text);
            CHECK_EQ_INT(async_jobs[i].log.reason, sync_jobs[i].log.reason);
        }
        /* with aborts: every stream is a prefix of its reference and exactly one final delivery */
        make_jobs(async_jobs, N_REQ, seed * 31, true);
        CHECK_EQ_INT(run_jobs(async_jobs, N_REQ, 1, 24, 3, 20 * 256, &ma), 0);
        CHECK_EQ_INT(check_against_reference(async_jobs, N_REQ), 0);
        CHECK_EQ_INT(ma.pages_used, 0);
        CHECK(ma.requests_aborted > 0);
        make_jobs(sync_jobs, N_REQ, seed * 31, true);
        CHECK_EQ_INT(run_jobs(sync_jobs, N_REQ, 0, 24, 3, 20 * 256, &ms), 0);
        CHECK_EQ_INT(check_against_reference(sync_jobs, N_REQ), 0);
        CHECK_EQ_INT(ms.pages_used, 0);
    }
}

TEST(admission_respects_sequence_limit_and_budget) {
    DiEngineOptions o;
    di_engine_options_init(&o);
    o.max_num_seqs = 3;
    o.max_batch_tokens = 10;
    o.async_scheduling = 0;
    o.state_memory_bytes = 1 << 20;
    DiEngine *e = di_engine_create_mock(MOCK_VOCAB, MOCK_SEED, &o);
    int32_t prompt[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.max_tokens = 5;
    p.ignore_eos = 1;
    for (int i = 0; i < 5; i++) {
        DiRequestInput in = {.prompt_ids = prompt, .n_prompt_ids = 8};
        CHECK_EQ_INT(di_engine_add_request(e, &in, &p, NULL, NULL, NULL), 0);
    }
    int active;
    CHECK_EQ_INT(di_engine_step(e, &active), 0);
    DiEngineMetrics m;
    di_engine_get_metrics(e, &m);
    /* budget 10: one full prompt (8) + a 2-token chunk of the second */
    CHECK_EQ_INT(m.prefill_tokens, 10);
    CHECK_EQ_INT(m.requests_running, 2);
    CHECK_EQ_INT(m.requests_waiting, 3);
    CHECK_EQ_INT(di_engine_step(e, &active), 0);
    di_engine_get_metrics(e, &m);
    CHECK_EQ_INT(m.requests_running, 3); /* max_num_seqs */
    CHECK_EQ_INT(di_engine_run(e), 0);
    di_engine_get_metrics(e, &m);
    CHECK_EQ_INT(m.requests_finished, 5);
    CHECK_EQ_INT(m.decode_tokens, 5 * 4);
    CHECK_EQ_INT(m.prefill_tokens, 5 * 8);
    di_engine_destroy(e);
}

/* 64 rows of a 20000-token vocabulary per step: enough logits for the engine to sample rows in
 * parallel on its thread pool; every request must match the same request run alone (one row per
 * step: sampled on the executing thread). */
TEST(parallel_sampling_matches_requests_run_alone) {
    enum { V = 20000, N = 64, GEN = 3 };
    DiEngineOptions o;
    di_engine_options_init(&o);
    o.max_num_seqs = N;
    o.max_batch_tokens = 4 * N;
    o.state_memory_bytes = 1 << 20;
    setenv("DEEPINFER_NUM_THREADS", "2", 1);
    DiEngine *batched = di_engine_create_mock(V, 5, &o);
    DiEngine *alone = di_engine_create_mock(V, 5, &o);
    unsetenv("DEEPINFER_NUM_THREADS");
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.max_tokens = GEN;
    p.ignore_eos = 1;
    p.has_seed = 1;
    p.top_p = 0.9f;
    uint64_t ids[N];
    for (int i = 0; i < N; i++) {
        int32_t prompt[3] = {i, i + 1, i + 2};
        DiRequestInput in = {.prompt_ids = prompt, .n_prompt_ids = 3};
        p.seed = (uint64_t)i;
        CHECK_EQ_INT(di_engine_add_request(batched, &in, &p, NULL, NULL, &ids[i]), 0);
    }
    CHECK_EQ_INT(di_engine_run(batched), 0);
    int same = 1;
    for (int i = 0; i < N; i++) {
        int32_t prompt[3] = {i, i + 1, i + 2};
        DiRequestInput in = {.prompt_ids = prompt, .n_prompt_ids = 3};
        p.seed = (uint64_t)i;
        uint64_t id;
        CHECK_EQ_INT(di_engine_add_request(alone, &in, &p, NULL, NULL, &id), 0);
        CHECK_EQ_INT(di_engine_run(alone), 0);
        DiRequestOutput a, b;
        di_engine_get_output(alone, id, &a);
        di_engine_get_output(batched, ids[i], &b);
        same &= a.n_tokens == GEN && b.n_tokens == GEN && memcmp(a.token_ids, b.token_ids, sizeof(int32_t) * GEN) == 0;
    }
    CHECK(same);
    di_engine_destroy(batched);
    di_engine_destroy(alone);
}

/* Issue 19 item 4: a pool that holds one long request at a time, async scheduling.  The step
 * after a request's last token is planned while that request still holds its pages; nothing
 * fits, so the plan is empty.  The engine must then take the in-flight step's pages back and plan
 * again, not report "no progress possible".  Async outputs equal sync ones. */
TEST(async_small_pool_plans_again_once_the_inflight_step_returns_pages) {
    enum { N = 12 };
    static Job jobs[2][N];
    DiEngineMetrics m[2];
    for (int async = 0; async < 2; async++) {
        uint64_t rng = 5;
        for (int i = 0; i < N; i++) {
            Job *j = &jobs[async][i];
            memset(j, 0, sizeof *j);
            j->n_prompt = 40 + (int)(rng_next(&rng) % 25); /* 2-3 pages of rows + the ring page */
            for (int k = 0; k < j->n_prompt; k++) j->prompt[k] = (int32_t)(rng_next(&rng) % 256);
            di_sampling_params_init(&j->params);
            j->params.max_tokens = 8;
            j->params.ignore_eos = 1;
            j->params.has_seed = 1;
            j->params.seed = (uint64_t)i;
            j->params.temperature = 0.8f;
            j->abort_step = -1;
        }
        CHECK_EQ_INT(run_jobs(jobs[async], N, async, 512, 0, 4 * 256, &m[async]), 0);
        CHECK_EQ_INT(check_against_reference(jobs[async], N), 0);
        CHECK_EQ_INT(m[async].requests_finished, N);
        CHECK_EQ_INT(m[async].pages_used, 0);
    }
    for (int i = 0; i < N; i++) {
        CHECK_EQ_INT(jobs[1][i].log.n_tokens, jobs[0][i].log.n_tokens);
        CHECK(memcmp(jobs[1][i].log.tokens, jobs[0][i].log.tokens, sizeof(int32_t) * (size_t)jobs[0][i].log.n_tokens) == 0);
    }
}

/* di_prefill_split against hand-derived splits. */
TEST(prefill_split_serves_the_oldest_then_the_shortest) {
    struct {
        int n, budget;
        int64_t remaining[5];
        int want[5], grant[5];
    } cases[] = {
        /* a 16k prompt prefilling, a 5-token one arrives: 256 to the oldest, 5, then the rest */
        {2, 512, {16000, 5}, {512, 5}, {507, 5}},
        /* two long ones and a short one: 170 to the oldest, 5, then the shorter long one */
        {3, 512, {16000, 16170, 5}, {512, 512, 5}, {507, 0, 5}},
        /* equal prompts: about first come, first served (the oldest finishes its prompt) */
        {3, 10, {8, 8, 8}, {8, 8, 8}, {8, 2, 0}},
        /* budget under the number of candidates: the oldest still gets a token */
        {5, 3, {100, 100, 100, 100, 1}, {3, 3, 3, 3, 1}, {2, 0, 0, 0, 1}},
        /* everyone fits */
        {3, 512, {40, 7, 100}, {40, 7, 100}, {40, 7, 100}},
        /* wants capped below the remaining (max_prefill_chunk): the grant never exceeds a want */
        {2, 512, {16000, 300}, {100, 100}, {100, 100}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        DiPrefillWant wants[5];
        int grant[5];
        for (int i = 0; i < cases[c].n; i++) wants[i] = (DiPrefillWant){cases[c].remaining[i], cases[c].want[i], -1};
        di_prefill_split(wants, cases[c].n, cases[c].budget, grant);
        for (int i = 0; i < cases[c].n; i++) CHECK_MSG(grant[i] == cases[c].grant[i], "case %zu: grant[%d] = %d, expected %d", c, i, grant[i], cases[c].grant[i]);
    }
}

/* Issue 19 item 5: a 16k-token prompt is prefilling (512-token budget: 32 steps) when a 5-token
 * prompt arrives.  Its first token must come in the next step (sync) or the one after (async:
 * outputs are delivered a step late), not after the long prefill, and its next ones one a step;
 * the long one loses at most one step; both match the alone-reference. */
TEST(short_prompt_is_not_starved_behind_a_long_prefill) {
    enum { LONG = 16384 };
    static int32_t long_prompt[LONG];
    int32_t short_prompt[5] = {7, 1, 9, 4, 2};
    for (int i = 0; i < LONG; i++) long_prompt[i] = (int32_t)((i * 37 + 11) % 256);
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.temperature = 0;
    p.ignore_eos = 1;
    p.max_tokens = 3;
    int32_t ref_long[3], ref_short[3];
    DiFinishReason reason;
    CHECK_EQ_INT(reference_generate(long_prompt, LONG, &p, 0, ref_long, &reason), 3);
    CHECK_EQ_INT(reference_generate(short_prompt, 5, &p, 0, ref_short, &reason), 3);
    for (int async = 0; async < 2; async++) {
        DiEngineOptions o;
        di_engine_options_init(&o);
        o.async_scheduling = async;
        o.state_memory_bytes = 1 << 20;
        DiEngine *e = di_engine_create_mock(MOCK_VOCAB, MOCK_SEED, &o);
        static StreamLog long_log, short_log;
        memset(&long_log, 0, sizeof long_log);
        memset(&short_log, 0, sizeof short_log);
        DiRequestInput in = {.prompt_ids = long_prompt, .n_prompt_ids = LONG};
        CHECK_EQ_INT(di_engine_add_request(e, &in, &p, record_stream, &long_log, NULL), 0);
        int active, steps = 0;
        for (int i = 0; i < 3; i++) CHECK_EQ_INT(di_engine_step(e, &active), 0);
        in = (DiRequestInput){.prompt_ids = short_prompt, .n_prompt_ids = 5};
        CHECK_EQ_INT(di_engine_add_request(e, &in, &p, record_stream, &short_log, NULL), 0);
        while (short_log.n_tokens == 0 && steps < 100) {
            CHECK_EQ_INT(di_engine_step(e, &active), 0);
            steps++;
        }
        CHECK_MSG(steps <= 1 + async, "async=%d: the short prompt's first token took %d steps", async, steps);
        /* then it decodes a token every step (decodes go first) while the long prompt prefills */
        while (short_log.n_final == 0 && steps < 100) {
            CHECK_EQ_INT(di_engine_step(e, &active), 0);
            steps++;
        }
        CHECK_MSG(steps <= 3 + async, "async=%d: the short prompt's 3 tokens took %d steps", async, steps);
        CHECK_EQ_INT(long_log.n_tokens, 0); /* it was still prefilling */
        CHECK_EQ_INT(di_engine_run(e), 0);
        DiEngineMetrics m;
        di_engine_get_metrics(e, &m);
        /* 32 steps of prefill + 2 decodes (+1 async): sharing costs the long prompt at most one */
        CHECK_MSG(m.steps <= LONG / 512 + 3 + (uint64_t)async, "async=%d: %llu steps", async, (unsigned long long)m.steps);
        CHECK_EQ_INT(long_log.n_tokens, 3);
        CHECK(memcmp(long_log.tokens, ref_long, sizeof ref_long) == 0);
        CHECK_EQ_INT(short_log.n_tokens, 3);
        CHECK(memcmp(short_log.tokens, ref_short, sizeof ref_short) == 0);
        di_engine_destroy(e);
    }
}

/* max_prefill_chunk caps every chunk: a lone 300-token prompt takes 100 per step. */
TEST(max_prefill_chunk_caps_each_chunk) {
    int32_t prompt[300];
    for (int i = 0; i < 300; i++) prompt[i] = i % 256;
    DiEngineOptions o;
    di_engine_options_init(&o);
    o.async_scheduling = 0;
    o.max_prefill_chunk = 100;
    o.state_memory_bytes = 1 << 20;
    DiEngine *e = di_engine_create_mock(MOCK_VOCAB, MOCK_SEED, &o);
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.max_tokens = 1;
    DiRequestInput in = {.prompt_ids = prompt, .n_prompt_ids = 300};
    CHECK_EQ_INT(di_engine_add_request(e, &in, &p, NULL, NULL, NULL), 0);
    DiEngineMetrics m;
    int active;
    for (int i = 1; i <= 3; i++) {
        CHECK_EQ_INT(di_engine_step(e, &active), 0);
        di_engine_get_metrics(e, &m);
        CHECK_EQ_INT(m.prefill_tokens, 100 * i);
    }
    CHECK_EQ_INT(active, 0);
    di_engine_destroy(e);
}

int main(void) {
    RUN_TEST(parallel_sampling_matches_requests_run_alone);
    RUN_TEST(single_greedy_request_matches_reference_with_any_chunking);
    RUN_TEST(random_workload_matches_reference_sync_and_async);
    RUN_TEST(preemption_by_recompute_keeps_outputs_identical);
    RUN_TEST(async_equals_sync_under_random_schedules_with_aborts);
    RUN_TEST(admission_respects_sequence_limit_and_budget);
    RUN_TEST(async_small_pool_plans_again_once_the_inflight_step_returns_pages);
    RUN_TEST(prefill_split_serves_the_oldest_then_the_shortest);
    RUN_TEST(short_prompt_is_not_starved_behind_a_long_prefill);
    RUN_TEST(max_prefill_chunk_caps_each_chunk);
    return TEST_SUMMARY();
}
