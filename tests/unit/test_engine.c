/* test_engine.c — the public offline API over the mock runner: logits bit-identical alone and in
 * random batches with random chunking (memcmp, engine-features.md §4.5), streaming deltas that add
 * up to the final output, stop strings, seeds drawn and reported, abort from a callback, release,
 * logprobs against a double-precision log-softmax, and clear errors on bad input. */
#include "test.h"
#include "test_engine_helpers.h"

#include "base/error.h"

#include <math.h>

/* ---- logits capture -------------------------------------------------------------------------- */

#define MAX_ROWS 4096

typedef struct {
    uint64_t id[MAX_ROWS];
    int64_t pos[MAX_ROWS];
    float *rows; /* [MAX_ROWS][MOCK_VOCAB] */
    int n;
} RowLog;

static void observe(void *user, uint64_t id, int64_t pos, const float *logits, int32_t vocab) {
    RowLog *log = user;
    if (log->n >= MAX_ROWS) return;
    log->id[log->n] = id;
    log->pos[log->n] = pos;
    memcpy(log->rows + (size_t)log->n * MOCK_VOCAB, logits, sizeof(float) * (size_t)vocab);
    log->n++;
}

static const float *find_row(const RowLog *log, uint64_t id, int64_t pos) {
    for (int i = 0; i < log->n; i++)
        if (log->id[i] == id && log->pos[i] == pos) return log->rows + (size_t)i * MOCK_VOCAB;
    return NULL;
}

static DiEngine *make_engine(int async, int budget, int chunk, int max_seqs) {
    DiEngineOptions o;
    di_engine_options_init(&o);
    o.async_scheduling = async;
    o.max_batch_tokens = budget;
    o.max_prefill_chunk = chunk;
    o.max_num_seqs = max_seqs;
    o.batch_invariant = 1;
    o.state_memory_bytes = 1 << 20;
    return di_engine_create_mock(MOCK_VOCAB, MOCK_SEED, &o);
}

#define N_INV 12

TEST(logits_are_bit_identical_alone_and_in_random_batches) {
    static int32_t prompts[N_INV][48];
    int n_prompt[N_INV];
    DiSamplingParams params[N_INV];
    uint64_t rng = 2024;
    for (int r = 0; r < N_INV; r++) {
        n_prompt[r] = 1 + (int)(rng_next(&rng) % 48);
        for (int k = 0; k < n_prompt[r]; k++) prompts[r][k] = (int32_t)(rng_next(&rng) % MOCK_VOCAB);
        di_sampling_params_init(&params[r]);
        params[r].max_tokens = 12;
        params[r].has_seed = 1;
        params[r].seed = (uint64_t)r;
        params[r].ignore_eos = 1;
    }
    /* alone: each request in its own engine, whole prompt in one chunk */
    RowLog *alone = calloc(1, sizeof *alone), *batched = calloc(1, sizeof *batched);
    alone->rows = malloc(sizeof(float) * MOCK_VOCAB * MAX_ROWS);
    batched->rows = malloc(sizeof(float) * MOCK_VOCAB * MAX_ROWS);
    for (int r = 0; r < N_INV; r++) {
        DiEngine *e = make_engine(0, 512, 0, 1);
        RowLog one = {.rows = alone->rows + (size_t)alone->n * MOCK_VOCAB};
        di_engine_set_logits_observer(e, observe, &one);
        DiRequestInput in = {.prompt_ids = prompts[r], .n_prompt_ids = n_prompt[r]};
        CHECK_EQ_INT(di_engine_add_request(e, &in, &params[r], NULL, NULL, NULL), 0);
        CHECK_EQ_INT(di_engine_run(e), 0);
        for (int i = 0; i < one.n; i++) {
            alone->id[alone->n + i] = (uint64_t)r;
            alone->pos[alone->n + i] = one.pos[i];
        }
        alone->n += one.n;
        di_engine_destroy(e);
    }
    CHECK_EQ_INT(alone->n, N_INV * 12);
    /* batched: random budgets, chunk limits, arrival orders, sync and async */
    for (int trial = 0; trial < 6; trial++) {
        int budget = 3 + (int)(rng_next(&rng) % 40), chunk = (int)(rng_next(&rng) % 9);
        DiEngine *e = make_engine(trial % 2, budget, chunk, 2 + (int)(rng_next(&rng) % 10));
        batched->n = 0;
        di_engine_set_logits_observer(e, observe, batched);
        int order[N_INV];
        for (int r = 0; r < N_INV; r++) order[r] = r;
        for (int r = N_INV - 1; r > 0; r--) {
            int k = (int)(rng_next(&rng) % (uint64_t)(r + 1)), t = order[r];
            order[r] = order[k];
            order[k] = t;
        }
        uint64_t ids[N_INV];
        int added = 0, active = 1;
        while (added < N_INV || active > 0) {
            int burst = (int)(rng_next(&rng) % 4);
            for (int b = 0; b < burst && added < N_INV; b++, added++) {
                int r = order[added];
                DiRequestInput in = {.prompt_ids = prompts[r], .n_prompt_ids = n_prompt[r]};
                CHECK_EQ_INT(di_engine_add_request(e, &in, &params[r], NULL, NULL, &ids[r]), 0);
            }
            CHECK_EQ_INT(di_engine_step(e, &active), 0);
        }
        CHECK_EQ_INT(batched->n, N_INV * 12);
        int identical = 1, found = 1;
        for (int r = 0; r < N_INV; r++)
            for (int i = 0; i < alone->n; i++) {
                if (alone->id[i] != (uint64_t)r) continue;
                const float *row = find_row(batched, ids[r], alone->pos[i]);
                if (!row) found = 0;
                else identical &= memcmp(row, alone->rows + (size_t)i * MOCK_VOCAB, sizeof(float) * MOCK_VOCAB) == 0;
            }
        CHECK(found);
        CHECK_MSG(identical, "trial %d (budget %d, chunk %d)", trial, budget, chunk);
        di_engine_destroy(e);
    }
    free(alone->rows);
    free(batched->rows);
    free(alone);
    free(batched);
}

TEST(logits_equal_the_direct_reference) {
    int32_t prompt[5] = {10, 20, 30, 40, 50};
    DiEngine *e = make_engine(1, 2, 0, 4);
    RowLog *log = calloc(1, sizeof *log);
    log->rows = malloc(sizeof(float) * MOCK_VOCAB * 16);
    di_engine_set_logits_observer(e, observe, log);
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.max_tokens = 6;
    p.ignore_eos = 1;
    DiRequestInput in = {.prompt_ids = prompt, .n_prompt_ids = 5};
    uint64_t id;
    CHECK_EQ_INT(di_engine_add_request(e, &in, &p, NULL, NULL, &id), 0);
    CHECK_EQ_INT(di_engine_run(e), 0);
    DiRequestOutput out;
    CHECK_EQ_INT(di_engine_get_output(e, id, &out), 0);
    int32_t seq[11];
    memcpy(seq, prompt, sizeof prompt);
    memcpy(seq + 5, out.token_ids, sizeof(int32_t) * 6);
    float ref[MOCK_VOCAB];
    CHECK_EQ_INT(log->n, 6);
    for (int i = 0; i < log->n; i++) {
        di_mock_reference_logits(MOCK_VOCAB, MOCK_SEED, seq, log->pos[i], ref);
        CHECK(memcmp(ref, log->rows + (size_t)i * MOCK_VOCAB, sizeof ref) == 0);
    }
    free(log->rows);
    free(log);
    di_engine_destroy(e);
}

/* ---- outputs and streaming ------------------------------------------------------------------- */

static DiEngine *plain_engine(int async) { return make_engine(async, 64, 0, 8); }

static int generate(DiEngine *e, const char *text, const DiSamplingParams *p, StreamLog *log, uint64_t *id) {
    DiRequestInput in = {.prompt_text = text};
    if (di_engine_add_request(e, &in, p, record_stream, log, id) != 0) return -1;
    return di_engine_run(e);
}

TEST(stream_deltas_add_up_to_the_output) {
    for (int async = 0; async < 2; async++) {
        DiEngine *e = plain_engine(async);
        DiSamplingParams p;
        di_sampling_params_init(&p);
        p.max_tokens = 40;
        p.has_seed = 1;
        p.seed = 5;
        p.logprobs = 2;
        StreamLog log = {0};
        uint64_t id;
        CHECK_EQ_INT(generate(e, "Hello", &p, &log, &id), 0);
        DiRequestOutput out;
        CHECK_EQ_INT(di_engine_get_output(e, id, &out), 0);
        CHECK_EQ_INT(out.n_prompt_ids, 5);
        CHECK_EQ_INT(out.prompt_ids[0], 'H');
        CHECK_EQ_INT(log.n_tokens, out.n_tokens);
        CHECK(memcmp(log.tokens, out.token_ids, sizeof(int32_t) * (size_t)out.n_tokens) == 0);
        CHECK_STR(log.text, out.text);
        CHECK_EQ_INT(log.n_final, 1);
        CHECK_EQ_INT(log.n_after_final, 0);
        CHECK_EQ_INT(out.seed, 5);
        CHECK(out.logprobs != NULL);
        double cum = 0;
        for (int i = 0; i < out.n_tokens; i++) {
            CHECK_EQ_INT(out.logprobs[i].token, out.token_ids[i]);
            CHECK(out.logprobs[i].logprob <= 0);
            CHECK_EQ_INT(out.logprobs[i].n_top, 2);
            cum += out.logprobs[i].logprob;
        }
        CHECK_NEAR(out.cumulative_logprob, cum, 1e-9);
        di_engine_destroy(e);
    }
}

TEST(logprobs_are_the_raw_log_softmax) {
    DiEngine *e = plain_engine(0);
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.max_tokens = 3;
    p.temperature = 0.5f;
    p.logprobs = 1;
    p.has_seed = 1;
    p.seed = 1;
    p.ignore_eos = 1;
    int32_t prompt[2] = {7, 8};
    DiRequestInput in = {.prompt_ids = prompt, .n_prompt_ids = 2};
    uint64_t id;
    CHECK_EQ_INT(di_engine_add_request(e, &in, &p, NULL, NULL, &id), 0);
    CHECK_EQ_INT(di_engine_run(e), 0);
    DiRequestOutput out;
    di_engine_get_output(e, id, &out);
    int32_t seq[5] = {7, 8, out.token_ids[0], out.token_ids[1], out.token_ids[2]};
    float ref[MOCK_VOCAB];
    for (int i = 0; i < 3; i++) {
        di_mock_reference_logits(MOCK_VOCAB, MOCK_SEED, seq, 2 + i, ref);
        double z = 0, best = -INFINITY;
        int best_id = 0;
        for (int v = 0; v < MOCK_VOCAB; v++) {
            z += exp((double)ref[v]);
            if (ref[v] > best) best = ref[v], best_id = v;
        }
        CHECK_NEAR(out.logprobs[i].logprob, ref[seq[2 + i]] - log(z), 1e-5);
        CHECK_EQ_INT(out.logprobs[i].top_ids[0], best_id);
        CHECK_NEAR(out.logprobs[i].top_logprobs[0], best - log(z), 1e-5);
    }
    di_engine_destroy(e);
}

TEST(stop_string_cuts_the_text_and_stream_never_passes_it) {
    for (int async = 0; async < 2; async++) {
        DiSamplingParams p;
        di_sampling_params_init(&p);
        p.temperature = 0;
        p.max_tokens = 60;
        p.ignore_eos = 1;
        DiEngine *e = plain_engine(async);
        StreamLog full = {0};
        uint64_t id;
        CHECK_EQ_INT(generate(e, "abc", &p, &full, &id), 0);
        CHECK(full.text_len > 12);
        /* a stop string taken from the middle of the unstopped text */
        char stop[5];
        memcpy(stop, full.text + full.text_len / 2, 4);
        stop[4] = '\0';
        const char *first = strstr(full.text, stop);
        size_t cut = (size_t)(first - full.text);
        const char *stops[2] = {"\x01never", stop};
        p.stop = stops;
        p.n_stop = 2;
        StreamLog log = {0};
        CHECK_EQ_INT(generate(e, "abc", &p, &log, &id), 0);
        DiRequestOutput out;
        di_engine_get_output(e, id, &out);
        CHECK_EQ_INT(out.finish_reason, DI_FINISH_STOP);
        CHECK_EQ_INT(out.stop_string, 1);
        CHECK_EQ_INT(out.text_len, cut);
        CHECK(strncmp(out.text, full.text, cut) == 0);
        CHECK_STR(log.text, out.text);
        CHECK(out.n_tokens < full.n_tokens);
        di_engine_destroy(e);
    }
}

TEST(eos_and_stop_tokens_finish_with_the_token_kept) {
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.temperature = 0;
    p.max_tokens = 30;
    p.ignore_eos = 1;
    DiEngine *e = plain_engine(1);
    StreamLog full = {0};
    uint64_t id;
    CHECK_EQ_INT(generate(e, "xyz", &p, &full, &id), 0);
    int32_t stop_id[1] = {full.tokens[4]};
    int first = 0;
    while (full.tokens[first] != stop_id[0]) first++;
    p.stop_token_ids = stop_id;
    p.n_stop_token_ids = 1;
    StreamLog log = {0};
    CHECK_EQ_INT(generate(e, "xyz", &p, &log, &id), 0);
    DiRequestOutput out;
    di_engine_get_output(e, id, &out);
    CHECK_EQ_INT(out.finish_reason, DI_FINISH_STOP);
    CHECK_EQ_INT(out.stop_token, stop_id[0]);
    CHECK_EQ_INT(out.n_tokens, first + 1);
    CHECK_EQ_INT(out.token_ids[first], stop_id[0]);
    /* min_tokens beyond the stop's position: the stop token is masked, so the stream continues */
    p.min_tokens = first + 2;
    CHECK_EQ_INT(generate(e, "xyz", &p, &log, &id), 0);
    di_engine_get_output(e, id, &out);
    CHECK(out.n_tokens >= first + 2);
    for (int i = 0; i < first + 1; i++) CHECK(out.token_ids[i] != stop_id[0]);
    di_engine_destroy(e);
}

TEST(requests_without_seed_draw_one_and_report_it) {
    DiEngine *e = plain_engine(0);
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.max_tokens = 20;
    p.ignore_eos = 1;
    StreamLog a = {0}, b = {0}, c = {0};
    uint64_t ia, ib, ic;
    CHECK_EQ_INT(generate(e, "seed me", &p, &a, &ia), 0);
    CHECK_EQ_INT(generate(e, "seed me", &p, &b, &ib), 0);
    DiRequestOutput oa, ob;
    di_engine_get_output(e, ia, &oa);
    di_engine_get_output(e, ib, &ob);
    CHECK(oa.seed != ob.seed);
    CHECK(memcmp(a.tokens, b.tokens, sizeof(int32_t) * 20) != 0);
    p.has_seed = 1;
    p.seed = oa.seed;
    CHECK_EQ_INT(generate(e, "seed me", &p, &c, &ic), 0);
    CHECK(memcmp(a.tokens, c.tokens, sizeof(int32_t) * 20) == 0);
    di_engine_destroy(e);
}

typedef struct {
    DiEngine *engine;
    uint64_t id;
    int seen;
} AbortAfter;

static void abort_after_three(void *user, const DiStreamDelta *d) {
    AbortAfter *a = user;
    a->seen += d->n_new_tokens;
    if (a->seen >= 3 && d->finish_reason == DI_FINISH_NONE) di_engine_abort(a->engine, d->request_id);
}

TEST(abort_from_a_callback_stops_and_frees) {
    for (int async = 0; async < 2; async++) {
        DiEngine *e = plain_engine(async);
        DiSamplingParams p;
        di_sampling_params_init(&p);
        p.max_tokens = 50;
        p.ignore_eos = 1;
        AbortAfter a = {e, 0, 0};
        int32_t prompt[3] = {1, 2, 3};
        DiRequestInput in = {.prompt_ids = prompt, .n_prompt_ids = 3};
        CHECK_EQ_INT(di_engine_add_request(e, &in, &p, abort_after_three, &a, &a.id), 0);
        CHECK_EQ_INT(di_engine_run(e), 0);
        DiRequestOutput out;
        CHECK_EQ_INT(di_engine_get_output(e, a.id, &out), 0);
        CHECK_EQ_INT(out.finish_reason, DI_FINISH_ABORT);
        CHECK_EQ_INT(out.n_tokens, 3);
        DiEngineMetrics m;
        di_engine_get_metrics(e, &m);
        CHECK_EQ_INT(m.pages_used, 0);
        CHECK_EQ_INT(m.requests_aborted, 1);
        CHECK_EQ_INT(di_engine_release(e, a.id), 0);
        CHECK_EQ_INT(di_engine_get_output(e, a.id, &out), -1);
        di_engine_destroy(e);
    }
}

TEST(release_of_a_running_request_aborts_it) {
    DiEngine *e = plain_engine(1);
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.max_tokens = 50;
    int32_t prompt[3] = {1, 2, 3};
    DiRequestInput in = {.prompt_ids = prompt, .n_prompt_ids = 3};
    uint64_t id, other;
    StreamLog log = {0};
    CHECK_EQ_INT(di_engine_add_request(e, &in, &p, record_stream, &log, &id), 0);
    CHECK_EQ_INT(di_engine_add_request(e, &in, &p, NULL, NULL, &other), 0);
    int active;
    CHECK_EQ_INT(di_engine_step(e, &active), 0);
    CHECK_EQ_INT(di_engine_step(e, &active), 0);
    CHECK_EQ_INT(di_engine_release(e, id), 0); /* in flight in async mode: freed when idle */
    CHECK_EQ_INT(log.reason, DI_FINISH_ABORT);
    CHECK_EQ_INT(di_engine_abort(e, id), -1);
    CHECK_EQ_INT(di_engine_run(e), 0);
    DiEngineMetrics m;
    di_engine_get_metrics(e, &m);
    CHECK_EQ_INT(m.pages_used, 0);
    CHECK_EQ_INT(m.requests_finished, 1);
    di_engine_destroy(e);
}

/* ---- errors ---------------------------------------------------------------------------------- */

TEST(bad_input_is_rejected_with_its_cause) {
    DiEngine *e = plain_engine(0);
    int32_t bad[2] = {5, MOCK_VOCAB};
    DiRequestInput in = {.prompt_ids = bad, .n_prompt_ids = 2};
    CHECK_EQ_INT(di_engine_add_request(e, &in, NULL, NULL, NULL, NULL), -1);
    CHECK(strstr(di_last_error(), "prompt token 300 at index 1") != NULL);
    DiRequestInput empty = {.prompt_text = ""};
    CHECK_EQ_INT(di_engine_add_request(e, &empty, NULL, NULL, NULL, NULL), -1);
    CHECK(strstr(di_last_error(), "empty") != NULL);
    DiRequestInput chat = {.chat_json = "{\"messages\":[]}"};
    CHECK_EQ_INT(di_engine_add_request(e, &chat, NULL, NULL, NULL, NULL), -1);
    CHECK(strstr(di_last_error(), "renderer") != NULL);
    DiRequestInput two = {.prompt_ids = bad, .n_prompt_ids = 1, .prompt_text = "x"};
    CHECK_EQ_INT(di_engine_add_request(e, &two, NULL, NULL, NULL, NULL), -1);
    CHECK(strstr(di_last_error(), "exactly one") != NULL);
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.max_tokens = 1 << 20; /* 1 MiB of state cannot hold it */
    DiRequestInput ok = {.prompt_ids = bad, .n_prompt_ids = 1};
    CHECK_EQ_INT(di_engine_add_request(e, &ok, &p, NULL, NULL, NULL), -1);
    CHECK(strstr(di_last_error(), "state pages") != NULL);
    p.max_tokens = 4;
    p.top_p = 2;
    CHECK_EQ_INT(di_engine_add_request(e, &ok, &p, NULL, NULL, NULL), -1);
    CHECK(strstr(di_last_error(), "top_p") != NULL);
    CHECK_EQ_INT(di_engine_abort(e, 12345), -1);
    CHECK(strstr(di_last_error(), "12345") != NULL);
    di_engine_destroy(e);
}

TEST(bad_options_and_environment_are_errors) {
    DiEngineOptions o;
    di_engine_options_init(&o);
    o.max_num_seqs = 0;
    CHECK(di_engine_create_mock(MOCK_VOCAB, 1, &o) == NULL);
    CHECK(strstr(di_last_error(), "max_num_seqs") != NULL);
    di_engine_options_init(&o);
    o.state_memory_bytes = 10;
    CHECK(di_engine_create_mock(MOCK_VOCAB, 1, &o) == NULL);
    CHECK(strstr(di_last_error(), "state page") != NULL);
    CHECK(di_engine_create_mock(100, 1, NULL) == NULL);
    CHECK(strstr(di_last_error(), "vocab_size") != NULL);
    setenv("DEEPINFER_BATCH_INVARIANT", "yes", 1);
    CHECK(di_engine_create_mock(MOCK_VOCAB, 1, NULL) == NULL);
    CHECK(strstr(di_last_error(), "DEEPINFER_BATCH_INVARIANT") != NULL);
    setenv("DEEPINFER_BATCH_INVARIANT", "1", 1);
    DiEngine *e = di_engine_create_mock(MOCK_VOCAB, 1, NULL);
    CHECK(e != NULL);
    di_engine_destroy(e);
    unsetenv("DEEPINFER_BATCH_INVARIANT");
    CHECK(di_engine_create("/nonexistent", NULL) == NULL);
    CHECK(strstr(di_last_error(), "/nonexistent") != NULL);
    /* golden tiny-a has an Engram layer; its token map and multipliers live in the golden set,
     * not in the checkpoint directory, so an engine on the directory alone must refuse */
    char dir[512];
    snprintf(dir, sizeof dir, "%s/golden-v41/tiny-a/checkpoint", test_shared_dir());
    CHECK(di_engine_create(dir, NULL) == NULL);
    CHECK_MSG(strstr(di_last_error(), "Engram") != NULL, "%s", di_last_error());
}

TEST(text_hooks_are_checked_and_used) {
    DiEngine *e = plain_engine(0);
    DiTextHooks none = {NULL, NULL, NULL, NULL, NULL, -1};
    CHECK_EQ_INT(di_engine_set_text_hooks(e, &none), 0);
    DiRequestInput text = {.prompt_text = "hi"};
    CHECK_EQ_INT(di_engine_add_request(e, &text, NULL, NULL, NULL, NULL), -1);
    CHECK(strstr(di_last_error(), "tokenizer") != NULL);
    DiTextHooks bad_bos = none;
    bad_bos.bos_id = MOCK_VOCAB;
    CHECK_EQ_INT(di_engine_set_text_hooks(e, &bad_bos), -1);
    /* the mock's hooks with a BOS: the prompt is BOS + the bytes */
    DiTextHooks mock;
    di_mock_text_hooks(&mock);
    mock.bos_id = 299;
    CHECK_EQ_INT(di_engine_set_text_hooks(e, &mock), 0);
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.max_tokens = 2;
    uint64_t id;
    CHECK_EQ_INT(di_engine_add_request(e, &text, &p, NULL, NULL, &id), 0);
    CHECK_EQ_INT(di_engine_set_text_hooks(e, &mock), -1); /* not once requests exist */
    CHECK_EQ_INT(di_engine_run(e), 0);
    DiRequestOutput out;
    di_engine_get_output(e, id, &out);
    CHECK_EQ_INT(out.n_prompt_ids, 3);
    CHECK_EQ_INT(out.prompt_ids[0], 299);
    CHECK_EQ_INT(out.prompt_ids[1], 'h');
    CHECK(di_engine_model_dir(e) == NULL);
    di_engine_destroy(e);
}

/* A runner that wraps the mock and fails its forward when the batch holds a token 13. */
typedef struct {
    DiRunner base;
    DiRunner *inner;
    int failures;
} FailingRunner;

static size_t failing_pages(const DiRunner *r, int64_t n) {
    const FailingRunner *f = (const FailingRunner *)r;
    return f->inner->ops->pages_for_tokens(f->inner, n);
}

static int failing_forward(DiRunner *r, const DiRunnerBatch *b) {
    FailingRunner *f = (FailingRunner *)r;
    for (int i = 0; i < b->n_seqs; i++)
        for (int t = 0; t < b->seqs[i].n_tokens; t++)
            if (b->seqs[i].tokens[t] == 13) {
                f->failures++;
                return di_errorf("injected failure at position %lld", (long long)(b->seqs[i].start_pos + t));
            }
    return f->inner->ops->forward(f->inner, b);
}

static void failing_destroy(DiRunner *r) {
    FailingRunner *f = (FailingRunner *)r;
    f->inner->ops->destroy(f->inner);
    free(f);
}

static const DiRunnerOps failing_ops = {failing_pages, failing_forward, failing_destroy, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};

TEST(a_failing_forward_aborts_its_requests_and_reports_the_cause) {
    for (int async = 0; async < 2; async++) {
        FailingRunner *f = calloc(1, sizeof *f);
        f->inner = di_mock_runner_create(MOCK_VOCAB, MOCK_SEED);
        f->base = *f->inner;
        f->base.ops = &failing_ops;
        DiEngineOptions o;
        di_engine_options_init(&o);
        o.async_scheduling = async;
        o.state_memory_bytes = 1 << 20;
        DiEngine *e = di_engine_create_with_runner(&f->base, &o);
        int32_t bad[3] = {1, 13, 2}, good[2] = {4, 5};
        DiSamplingParams p;
        di_sampling_params_init(&p);
        p.max_tokens = 4;
        p.ignore_eos = 1;
        /* a fixed seed: with a drawn one the good request's own samples could include the
         * failure token 13 now and then (seen once in CI) */
        p.has_seed = 1;
        p.seed = 7;
        uint64_t id_bad, id_good;
        DiRequestInput in_bad = {.prompt_ids = bad, .n_prompt_ids = 3}, in_good = {.prompt_ids = good, .n_prompt_ids = 2};
        CHECK_EQ_INT(di_engine_add_request(e, &in_bad, &p, NULL, NULL, &id_bad), 0);
        CHECK_EQ_INT(di_engine_run(e), -1);
        CHECK_MSG(strstr(di_last_error(), "injected failure at position 1") != NULL, "%s", di_last_error());
        DiRequestOutput out;
        CHECK_EQ_INT(di_engine_get_output(e, id_bad, &out), 0);
        CHECK_EQ_INT(out.finish_reason, DI_FINISH_ABORT);
        /* the engine goes on: a good request afterwards completes, nothing leaks */
        CHECK_EQ_INT(di_engine_add_request(e, &in_good, &p, NULL, NULL, &id_good), 0);
        CHECK_EQ_INT(di_engine_run(e), 0);
        CHECK_EQ_INT(di_engine_get_output(e, id_good, &out), 0);
        CHECK_EQ_INT(out.n_tokens, 4);
        DiEngineMetrics m;
        di_engine_get_metrics(e, &m);
        CHECK_EQ_INT(m.pages_used, 0);
        CHECK_EQ_INT(f->failures, 1);
        di_engine_destroy(e);
    }
}

static int codec_bytes_encode(void *ctx, const char *text, size_t len, int32_t **ids, size_t *n) {
    (void)ctx;
    *ids = malloc((len ? len : 1) * sizeof **ids);
    for (size_t i = 0; i < len; i++) (*ids)[i] = (uint8_t)text[i] + 1; /* shifted: proves the codec is used */
    *n = len;
    return 0;
}

static void codec_x_piece(void *ctx, int32_t id, const char **bytes, size_t *len) {
    (void)ctx;
    (void)id;
    *bytes = "x";
    *len = 1;
}

TEST(a_runner_codec_serves_as_text_when_no_hooks_are_set) {
    DiRunner *r = di_mock_runner_create(MOCK_VOCAB, MOCK_SEED);
    r->codec = (DiTextCodec){codec_bytes_encode, codec_x_piece, NULL};
    DiEngineOptions o;
    di_engine_options_init(&o);
    o.state_memory_bytes = 1 << 20;
    DiEngine *e = di_engine_create_with_runner(r, &o);
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.max_tokens = 3;
    p.ignore_eos = 1;
    DiRequestInput in = {.prompt_text = "ab"};
    uint64_t id;
    CHECK_EQ_INT(di_engine_add_request(e, &in, &p, NULL, NULL, &id), 0);
    CHECK_EQ_INT(di_engine_run(e), 0);
    DiRequestOutput out;
    di_engine_get_output(e, id, &out);
    CHECK_EQ_INT(out.n_prompt_ids, 2);
    CHECK_EQ_INT(out.prompt_ids[0], 'a' + 1);
    CHECK_STR(out.text, "xxx");
    di_engine_destroy(e);
}

int main(void) {
    RUN_TEST(a_runner_codec_serves_as_text_when_no_hooks_are_set);
    RUN_TEST(a_failing_forward_aborts_its_requests_and_reports_the_cause);
    RUN_TEST(text_hooks_are_checked_and_used);
    RUN_TEST(logits_are_bit_identical_alone_and_in_random_batches);
    RUN_TEST(logits_equal_the_direct_reference);
    RUN_TEST(stream_deltas_add_up_to_the_output);
    RUN_TEST(logprobs_are_the_raw_log_softmax);
    RUN_TEST(stop_string_cuts_the_text_and_stream_never_passes_it);
    RUN_TEST(eos_and_stop_tokens_finish_with_the_token_kept);
    RUN_TEST(requests_without_seed_draw_one_and_report_it);
    RUN_TEST(abort_from_a_callback_stops_and_frees);
    RUN_TEST(release_of_a_running_request_aborts_it);
    RUN_TEST(bad_input_is_rejected_with_its_cause);
    RUN_TEST(bad_options_and_environment_are_errors);
    return TEST_SUMMARY();
}
