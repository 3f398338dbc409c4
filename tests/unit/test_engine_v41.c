/* test_engine_v41.c — the engine driving the real V4.1 forward (src/model) on the golden tiny-a
 * checkpoint of /work/shared/golden-v41 (Engram maps from its golden set): every request's
 * tokens and logits rows equal a direct model_forward loop on a private RunState (prefill in one
 * chunk, then one token at a time), whatever the batch, the chunking, sync or async mode and
 * preemption by recompute; state is freed through the runner's release hook; and a conversation's
 * second turn started from the first turn's cached state (prompt caching) gives the same logits. */
#include "test.h"
#include "test_golden_model.h"

#include "base/error.h"
#include "engine/engine.h"
#include "engine/runner_v41.h"
#include "model/forward.h"
#include "model/state.h"
#include "model/workspace.h"

#include <stdint.h>

#define N_REQ 4
#define GEN 5
#define PAGE 4096 /* small pages: requests cross page boundaries as they grow */
#define MAX_PROMPT 14

static Model *model;
static int32_t prompts[N_REQ][MAX_PROMPT];
static int n_prompt[N_REQ];
static int32_t ref_tokens[N_REQ][GEN];
static float *ref_rows; /* [N_REQ][GEN][V] */

static float *ref_row(int r, int k) { return ref_rows + ((size_t)r * GEN + (size_t)k) * (size_t)model->d.vocab; }

static int argmax(const float *x, int n) {
    int best = 0;
    for (int v = 1; v < n; v++)
        if (x[v] > x[best]) best = v;
    return best;
}

/* Greedy generation straight through model_forward: the reference. */
static int reference(int r) {
    RunState *st = state_create(&model->d);
    if (!st) return -1;
    int32_t seq[MAX_PROMPT + GEN];
    memcpy(seq, prompts[r], sizeof(int32_t) * (size_t)n_prompt[r]);
    int rc = model_forward(model, st, seq, n_prompt[r], 0, ref_row(r, 0), false, NULL);
    for (int k = 0; rc == 0 && k < GEN; k++) {
        ref_tokens[r][k] = seq[n_prompt[r] + k] = argmax(ref_row(r, k), model->d.vocab);
        if (k + 1 < GEN) rc = model_forward(model, st, &seq[n_prompt[r] + k], 1, n_prompt[r] + k, ref_row(r, k + 1), false, NULL);
    }
    state_free(st);
    return rc;
}

typedef struct {
    uint64_t ids[N_REQ];
    int mismatched_rows, seen_rows;
} Observed;

static void observe(void *user, uint64_t id, int64_t pos, const float *logits, int32_t vocab) {
    Observed *o = user;
    for (int r = 0; r < N_REQ; r++) {
        if (o->ids[r] != id) continue;
        int k = (int)(pos - n_prompt[r]);
        if (k < 0 || k >= GEN) return;
        o->seen_rows++;
        o->mismatched_rows += memcmp(logits, ref_row(r, k), sizeof(float) * (size_t)vocab) != 0;
    }
}

static int load(void) {
    model = test_golden_tiny_a(MODE_REF);
    if (!model) return -1;
    ref_rows = calloc((size_t)N_REQ * GEN * (size_t)model->d.vocab, sizeof(float));
    uint64_t x = 99;
    for (int r = 0; r < N_REQ; r++) {
        n_prompt[r] = 3 + r * 3;
        for (int k = 0; k < n_prompt[r]; k++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            prompts[r][k] = (int32_t)((x >> 33) % (uint64_t)model->d.vocab);
        }
        if (reference(r) != 0) return -1;
    }
    return 0;
}

/* Run all requests through an engine; the observer compares every logits row with the reference. */
static void run_engine(int async, int budget, int chunk, int max_seqs, size_t memory, Observed *o, DiEngineMetrics *m,
                       int32_t out[N_REQ][GEN]) {
    DiEngineOptions opts;
    di_engine_options_init(&opts);
    opts.draft_max = 0; /* speculation runs steps synchronously; test_engine_spec_v41 covers it */
    opts.async_scheduling = async;
    opts.max_batch_tokens = budget;
    opts.max_prefill_chunk = chunk;
    opts.max_num_seqs = max_seqs;
    opts.state_memory_bytes = memory;
    DiEngine *e = di_engine_create_with_runner(di_v41_runner_create(model, 0, PAGE), &opts);
    CHECK(e != NULL);
    if (!e) {
        fprintf(stderr, "  %s\n", di_last_error());
        return;
    }
    di_engine_set_logits_observer(e, observe, o);
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.temperature = 0;
    p.max_tokens = GEN;
    p.ignore_eos = 1;
    for (int r = 0; r < N_REQ; r++) {
        DiRequestInput in = {.prompt_ids = prompts[r], .n_prompt_ids = n_prompt[r]};
        CHECK_EQ_INT(di_engine_add_request(e, &in, &p, NULL, NULL, &o->ids[r]), 0);
    }
    int rc = di_engine_run(e);
    CHECK_MSG(rc == 0, "%s", di_last_error());
    for (int r = 0; r < N_REQ; r++) {
        DiRequestOutput res;
        CHECK_EQ_INT(di_engine_get_output(e, o->ids[r], &res), 0);
        CHECK_EQ_INT(res.n_tokens, GEN);
        memcpy(out[r], res.token_ids, sizeof(int32_t) * GEN);
    }
    di_engine_get_metrics(e, m);
    di_engine_destroy(e);
}

TEST(engine_matches_direct_forward_in_any_batch_and_chunking) {
    struct {
        int async, budget, chunk, seqs;
        size_t memory;
    } configs[] = {
        {0, 512, 0, 8, 64u << 20},   /* all together, whole prompts */
        {1, 7, 3, 8, 64u << 20},     /* chunked prefill mixed with decodes, async */
        {1, 9, 0, 3, 64u << 20},
        {0, 16, 5, 8, 0},            /* too few pages for all: preemption */
    };
    for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++) {
        Observed o = {0};
        DiEngineMetrics m;
        int32_t out[N_REQ][GEN];
        size_t memory = configs[c].memory;
        if (memory == 0) { /* two requests admitted with their first chunk, one page to grow into */
            DiRunner *probe = di_v41_runner_create(model, 0, PAGE);
            memory = probe->page_bytes * (2 * probe->ops->pages_for_tokens(probe, configs[c].chunk) + 1);
            probe->ops->destroy(probe);
        }
        run_engine(configs[c].async, configs[c].budget, configs[c].chunk, configs[c].seqs, memory, &o, &m, out);
        CHECK_MSG(memcmp(out, ref_tokens, sizeof out) == 0, "config %zu: tokens differ from the direct forward", c);
        CHECK_EQ_INT(o.seen_rows, N_REQ * GEN);
        CHECK_MSG(o.mismatched_rows == 0, "config %zu: %d of %d logits rows differ bitwise", c, o.mismatched_rows,
                  o.seen_rows);
        CHECK_EQ_INT(m.pages_used, 0);
        if (c == 3) CHECK_MSG(m.preemptions > 0, "no preemption with %zu bytes", memory);
    }
}

/* Prompt caching on the real model: the second turn of a conversation, started from the first
 * turn's cached state (chunked prefill, async), gives bit-identical logits to recomputing it. */
typedef struct {
    uint64_t id;
    float *rows; /* [GEN][V] */
    int n;
} TurnRows;

static void observe_turn(void *user, uint64_t id, int64_t pos, const float *logits, int32_t vocab) {
    TurnRows *t = user;
    if (id != t->id || t->n >= GEN) return;
    memcpy(t->rows + (size_t)t->n++ * (size_t)vocab, logits, sizeof(float) * (size_t)vocab);
}

static int second_turn(int cache, float *rows) {
    DiEngineOptions opts;
    di_engine_options_init(&opts);
    opts.draft_max = 0; /* async, which speculation would not use */
    opts.async_scheduling = 1;
    opts.max_batch_tokens = 7;
    opts.max_prefill_chunk = 3;
    opts.state_memory_bytes = 64u << 20;
    opts.enable_prefix_caching = cache;
    DiEngine *e = di_engine_create_with_runner(di_v41_runner_create(model, 0, PAGE), &opts);
    CHECK(e != NULL);
    if (!e) return -1;
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.temperature = 0;
    p.max_tokens = GEN;
    p.ignore_eos = 1;
    const int r = N_REQ - 1;
    uint64_t first;
    DiRequestInput in = {.prompt_ids = prompts[r], .n_prompt_ids = n_prompt[r]};
    CHECK_EQ_INT(di_engine_add_request(e, &in, &p, NULL, NULL, &first), 0);
    CHECK_EQ_INT(di_engine_run(e), 0);
    DiRequestOutput res;
    CHECK_EQ_INT(di_engine_get_output(e, first, &res), 0);
    int32_t turn[MAX_PROMPT + GEN + 3];
    int n = n_prompt[r];
    memcpy(turn, prompts[r], sizeof(int32_t) * (size_t)n);
    memcpy(turn + n, res.token_ids, sizeof(int32_t) * GEN);
    n += GEN;
    for (int k = 0; k < 3; k++) turn[n++] = prompts[0][k];
    TurnRows t = {.rows = rows};
    di_engine_set_logits_observer(e, observe_turn, &t);
    in = (DiRequestInput){.prompt_ids = turn, .n_prompt_ids = n};
    CHECK_EQ_INT(di_engine_add_request(e, &in, &p, NULL, NULL, &t.id), 0);
    CHECK_EQ_INT(di_engine_run(e), 0);
    CHECK_EQ_INT(t.n, GEN);
    CHECK_EQ_INT(di_engine_get_output(e, t.id, &res), 0);
    int cached = res.n_cached_tokens;
    di_engine_destroy(e);
    return cached;
}

TEST(a_cached_conversation_state_gives_bit_identical_logits) {
    size_t row_floats = (size_t)GEN * (size_t)model->d.vocab;
    float *fresh = calloc(row_floats, sizeof(float)), *cached = calloc(row_floats, sizeof(float));
    CHECK_EQ_INT(second_turn(0, fresh), 0);
    int n_cached = second_turn(1, cached);
    /* the first turn's state: its prompt and its outputs but the last (never fed back) */
    CHECK_MSG(n_cached >= n_prompt[N_REQ - 1] + GEN - 1, "%d positions came from the cache", n_cached);
    CHECK_MSG(memcmp(fresh, cached, row_floats * sizeof(float)) == 0, "logits differ with the cached state");
    free(fresh);
    free(cached);
}

/* The model's kernels run on the engine's thread pool (DEEPINFER_NUM_THREADS, else every CPU):
 * the engine lends it to the runner, and the model gets back its own pool when the engine goes.
 * (The engine's model once had no pool at all: generate, serve and Python ran on one core.) */
TEST(the_engine_lends_its_threads_to_the_model) {
    setenv("DEEPINFER_NUM_THREADS", "2", 1);
    CHECK(model->pool == NULL); /* the direct references above ran single-threaded */
    DiEngineOptions opts;
    di_engine_options_init(&opts);
    DiEngine *e = di_engine_create_with_runner(di_v41_runner_create(model, 0, PAGE), &opts);
    CHECK(e != NULL);
    if (e) {
        CHECK(model->pool != NULL);
        if (model->pool) CHECK_EQ_INT(di_pool_threads(model->pool), 2);
        /* two threads give the single-threaded reference tokens and logits, bit for bit */
        DiSamplingParams p;
        di_sampling_params_init(&p);
        p.temperature = 0;
        p.max_tokens = GEN;
        p.ignore_eos = 1;
        Observed o = {{UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX}, 0, 0};
        di_engine_set_logits_observer(e, observe, &o);
        DiRequestInput in = {.prompt_ids = prompts[0], .n_prompt_ids = n_prompt[0]};
        CHECK_EQ_INT(di_engine_add_request(e, &in, &p, NULL, NULL, &o.ids[0]), 0);
        CHECK_EQ_INT(di_engine_run(e), 0);
        DiRequestOutput res;
        CHECK_EQ_INT(di_engine_get_output(e, o.ids[0], &res), 0);
        CHECK_EQ_INT(res.n_tokens, GEN);
        CHECK(memcmp(res.token_ids, ref_tokens[0], sizeof(int32_t) * GEN) == 0);
        CHECK_EQ_INT(o.seen_rows, GEN);
        CHECK_EQ_INT(o.mismatched_rows, 0);
        di_engine_destroy(e);
    }
    CHECK(model->pool == NULL);
    unsetenv("DEEPINFER_NUM_THREADS");
}

/* The model's workspace is sized for the engine's step budget at creation, so a step of up to
 * max_batch_tokens rows runs as one forward (a smaller workspace would split it into pieces,
 * each reading every weight again). */
TEST(the_engine_sizes_the_model_workspace_for_its_step_budget) {
    DiEngineOptions opts;
    di_engine_options_init(&opts);
    opts.max_batch_tokens = 700;
    DiEngine *e = di_engine_create_with_runner(di_v41_runner_create(model, 0, PAGE), &opts);
    CHECK(e != NULL);
    CHECK(model->ws != NULL);
    if (model->ws) CHECK_EQ_INT(model->ws->rows, 700);
    if (e) di_engine_destroy(e);
}

int main(void) {
    if (load() != 0) {
        fprintf(stderr, "loading golden tiny-a: %s\n", di_last_error());
        printf("0 passed, 1 failed\n");
        return 1;
    }
    RUN_TEST(engine_matches_direct_forward_in_any_batch_and_chunking);
    RUN_TEST(a_cached_conversation_state_gives_bit_identical_logits);
    RUN_TEST(the_engine_lends_its_threads_to_the_model);
    RUN_TEST(the_engine_sizes_the_model_workspace_for_its_step_budget);
    free(ref_rows);
    model_free(model);
    return TEST_SUMMARY();
}
