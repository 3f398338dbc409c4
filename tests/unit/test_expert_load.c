/* test_expert_load.c — the per (layer, expert) token counts EPLB replans from (model.h
 * expert_load, runner.h DiExpertLoad, serving.md §8.2 "Load collection"), on the golden tiny-a
 * checkpoint.  The independent reference is the router's own output: ForwardTrace.experts, the
 * [layer][row][top_k] experts each row was sent to, recounted here by hand.
 *   - batched forwards (3 requests: a prefill step, then decode steps) add exactly the recount
 *     of each step's trace, and the counts accumulate over steps until cleared;
 *   - through the engine (async and sync, chunked prefill mixed with decodes), the step observer
 *     sees every step's counts once (cleared between steps), and their sum over the run equals
 *     the recount of a direct model_forward loop generating the same greedy tokens;
 *   - with speculative decoding (the built-in tiny model's DSpark drafter), every row a forward
 *     runs counts: per layer, top_k x (prefill + decode + verified draft rows, from the engine's
 *     metrics), rejected drafts included; the drafter's own experts count in their own table. */
#include "test.h"
#include "test_golden_model.h"

#include "base/error.h"
#include "engine/engine.h"
#include "engine/runner_mock.h"
#include "engine/runner_v41.h"
#include "model/forward.h"
#include "model/state.h"
#include "model/tiny.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define N_REQ 3
#define GEN 4
#define MAX_PROMPT 11

static Model *model;
static int32_t seqs[N_REQ][MAX_PROMPT + GEN]; /* prompt, then the greedy tokens */
static int n_prompt[N_REQ];

static size_t table_size(void) { return (size_t)model->d.n_layers * (size_t)model->d.n_experts; }

/* want[l][e] += how often trace experts [L][n][K] name e in layer l. */
static void recount(const int32_t *experts, int64_t n, int64_t *want) {
    const ModelDims *d = &model->d;
    for (int64_t l = 0; l < d->n_layers; l++)
        for (int64_t i = 0; i < n * d->top_k; i++) {
            int32_t e = experts[l * n * d->top_k + i];
            CHECK(e >= 0 && e < d->n_experts);
            if (e >= 0 && e < d->n_experts) want[l * d->n_experts + e]++;
        }
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int v = 1; v < n; v++)
        if (x[v] > x[best]) best = v;
    return best;
}

/* Greedy tokens of every request by a direct model_forward loop; want = the recount of its traces. */
static int reference(int64_t *want) {
    const ModelDims *d = &model->d;
    float *logits = calloc((size_t)d->vocab, sizeof *logits);
    int32_t *ex = calloc((size_t)d->n_layers * MAX_PROMPT * (size_t)d->top_k, sizeof *ex);
    int rc = logits && ex ? 0 : -1;
    for (int r = 0; rc == 0 && r < N_REQ; r++) {
        RunState *st = state_create(d);
        int64_t pos = 0;
        for (int k = 0; st && rc == 0 && k < GEN; k++) { /* the prompt, then GEN - 1 decodes */
            int64_t n = k == 0 ? n_prompt[r] : 1;
            ForwardTrace tr = {.experts = ex};
            rc = model_forward(model, st, seqs[r] + pos, n, pos, logits, false, &tr);
            if (rc == 0) recount(ex, n, want);
            pos += n;
            seqs[r][pos] = argmax(logits, d->vocab);
        }
        if (!st) rc = -1;
        state_free(st);
    }
    free(logits);
    free(ex);
    return rc;
}

/* Batched forwards: every step adds exactly its trace's recount to the model's counts. */
TEST(a_batched_forward_counts_what_the_router_chose) {
    const ModelDims *d = &model->d;
    size_t cells = table_size();
    int64_t *want = calloc(cells, sizeof *want);
    int32_t *ex = calloc((size_t)d->n_layers * N_REQ * MAX_PROMPT * (size_t)d->top_k, sizeof *ex);
    float *logits = calloc((size_t)N_REQ * (size_t)d->vocab, sizeof *logits);
    RunState *st[N_REQ];
    for (int r = 0; r < N_REQ; r++) st[r] = state_create(d);
    memset(model->expert_load, 0, cells * sizeof *model->expert_load);
    int64_t total_rows = 0;
    for (int step = 0; step < GEN; step++) { /* a prefill of all three prompts, then decodes */
        ForwardSeq fs[N_REQ];
        int64_t rows = 0;
        for (int r = 0; r < N_REQ; r++) {
            int64_t n = step == 0 ? n_prompt[r] : 1, pos = step == 0 ? 0 : n_prompt[r] + step - 1;
            fs[r] = (ForwardSeq){st[r], seqs[r] + pos, n, pos, logits + (size_t)r * (size_t)d->vocab, false, 0};
            rows += n;
        }
        ForwardTrace tr = {.experts = ex};
        int rc = model_forward_batch(model, fs, N_REQ, &tr);
        CHECK_MSG(rc == 0, "%s", di_error_message());
        if (rc != 0) break;
        total_rows += rows;
        recount(ex, rows, want); /* accumulated over steps: the model's counts are not cleared */
        CHECK_MSG(memcmp(model->expert_load, want, cells * sizeof *want) == 0, "step %d: counts differ from the recount", step);
        for (int l = 0; l < d->n_layers; l++) {
            int64_t sum = 0;
            for (int e = 0; e < d->n_experts; e++) sum += model->expert_load[(size_t)l * (size_t)d->n_experts + (size_t)e];
            CHECK_EQ_INT(sum, (int64_t)d->top_k * total_rows); /* top_k pairs per row and layer */
        }
    }
    for (int r = 0; r < N_REQ; r++) state_free(st[r]);
    free(want);
    free(ex);
    free(logits);
}

typedef struct {
    int64_t *sum;  /* [L][E] over the run */
    int steps, bad_shape;
    int64_t last_step_pairs, max_step_pairs; /* layer 0's pairs in the latest step, in the largest */
} Seen;

static void on_load(void *user, const DiExpertLoad *load) {
    Seen *s = user;
    const ModelDims *d = &model->d;
    if (load->layers != d->n_layers || load->experts != d->n_experts) {
        s->bad_shape++;
        return;
    }
    s->steps++;
    s->last_step_pairs = 0;
    for (size_t i = 0; i < table_size(); i++) s->sum[i] += load->tokens[i];
    for (int e = 0; e < d->n_experts; e++) s->last_step_pairs += load->tokens[e];
    if (s->last_step_pairs > s->max_step_pairs) s->max_step_pairs = s->last_step_pairs;
}

static void run_engine(int async, int budget, int chunk, const int64_t *want) {
    const ModelDims *d = &model->d;
    DiEngineOptions opts;
    di_engine_options_init(&opts);
    opts.draft_max = 0;
    opts.async_scheduling = async;
    opts.max_batch_tokens = budget;
    opts.max_prefill_chunk = chunk;
    DiEngine *e = di_engine_create_with_runner(di_v41_runner_create(model, 0, 4096), &opts);
    CHECK_MSG(e != NULL, "%s", di_last_error());
    if (!e) return;
    int layers = 0, experts = 0;
    CHECK_EQ_INT(di_engine_expert_load_shape(e, &layers, &experts), 0);
    CHECK_EQ_INT(layers, d->n_layers);
    CHECK_EQ_INT(experts, d->n_experts);
    model->expert_load[0] = 12345; /* forwards before the observer are no step's: cleared */
    Seen s = {calloc(table_size(), sizeof(int64_t)), 0, 0, 0, 0};
    CHECK_EQ_INT(di_engine_set_expert_load_observer(e, on_load, &s), 0);
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.temperature = 0;
    p.max_tokens = GEN;
    p.ignore_eos = 1;
    uint64_t ids[N_REQ];
    for (int r = 0; r < N_REQ; r++) {
        DiRequestInput in = {.prompt_ids = seqs[r], .n_prompt_ids = n_prompt[r]};
        CHECK_EQ_INT(di_engine_add_request(e, &in, &p, NULL, NULL, &ids[r]), 0);
    }
    CHECK_EQ_INT(di_engine_set_expert_load_observer(e, on_load, &s), -1); /* refused once requests exist */
    CHECK_MSG(di_engine_run(e) == 0, "%s", di_last_error());
    for (int r = 0; r < N_REQ; r++) {
        DiRequestOutput out;
        CHECK_EQ_INT(di_engine_get_output(e, ids[r], &out), 0);
        CHECK_MSG(out.n_tokens == GEN && memcmp(out.token_ids, seqs[r] + n_prompt[r], GEN * sizeof(int32_t)) == 0,
                  "request %d: tokens differ from the direct forward", r);
    }
    CHECK_EQ_INT(s.bad_shape, 0);
    CHECK(s.steps >= GEN);
    CHECK_MSG(memcmp(s.sum, want, table_size() * sizeof *want) == 0, "async %d budget %d: the steps' counts differ from the recount",
              async, budget);
    /* cleared between steps: no step saw more pairs than its token budget routes */
    CHECK_MSG(s.max_step_pairs <= (int64_t)budget * d->top_k, "a step saw %lld pairs", (long long)s.max_step_pairs);
    if (budget >= 512) { /* one prefill step of every prompt, then GEN - 1 decode steps of all three */
        CHECK_EQ_INT(s.steps, GEN);
        CHECK_EQ_INT(s.last_step_pairs, (int64_t)N_REQ * d->top_k);
    }
    di_engine_destroy(e);
    free(s.sum);
}

TEST(engine_steps_report_each_steps_counts_once) {
    int64_t *want = calloc(table_size(), sizeof *want);
    CHECK(reference(want) == 0);
    run_engine(0, 512, 0, want); /* whole prompts batched, then decodes */
    run_engine(1, 5, 3, want);   /* chunked prefill mixed with decodes, on the worker thread */
    free(want);
}

TEST(a_model_without_experts_has_no_load_to_observe) {
    DiEngineOptions opts;
    di_engine_options_init(&opts);
    DiEngine *e = di_engine_create_with_runner(di_mock_runner_create(300, 1), &opts);
    int layers = 0, experts = 0;
    CHECK_MSG(e != NULL, "%s", di_last_error());
    CHECK_EQ_INT(di_engine_expert_load_shape(e, &layers, &experts), -1);
    CHECK(strstr(di_last_error(), "no routed experts") != NULL);
    CHECK_EQ_INT(di_engine_set_expert_load_observer(e, on_load, NULL), -1);
    CHECK_EQ_INT(di_engine_expert_load_shape(NULL, &layers, &experts), -1);
    di_engine_destroy(e);
}

typedef struct {
    int64_t *sum, *draft_sum; /* [layers][experts], [draft_layers][draft_experts] over the run */
    int layers, experts, draft_layers, draft_experts;
} SpecSeen;

static void on_spec_load(void *user, const DiExpertLoad *load) {
    SpecSeen *s = user;
    s->layers = load->layers, s->experts = load->experts;
    s->draft_layers = load->draft_layers, s->draft_experts = load->draft_experts;
    for (int i = 0; i < load->layers * load->experts && i < 4096; i++) s->sum[i] += load->tokens[i];
    for (int i = 0; load->draft_tokens && i < load->draft_layers * load->draft_experts && i < 4096; i++)
        s->draft_sum[i] += load->draft_tokens[i];
}

/* A text_config integer of the built-in tiny preset. */
static int tiny_config_int(const char *key) {
    json_error_t err;
    json_t *root = json_loads(di_tiny_config_json("tiny"), 0, &err);
    int v = (int)json_integer_value(json_object_get(json_object_get(root, "text_config"), key));
    json_decref(root);
    return v;
}

TEST(speculative_verify_rows_count_and_the_drafter_counts_apart) {
    char dir[4096];
    CHECK(di_tiny_default_dir(dir, sizeof dir) == 0 && di_tiny_ensure(dir) == 0);
    DiEngineOptions opts;
    di_engine_options_init(&opts);
    opts.draft_max = 3;
    opts.draft_schedule = 0; /* fixed: every request verifies 3 drafts per step */
    DiEngine *e = di_engine_create(dir, &opts);
    CHECK_MSG(e != NULL, "%s", di_last_error());
    if (!e) return;
    static int64_t sum[4096], draft_sum[4096];
    SpecSeen s = {sum, draft_sum, 0, 0, 0, 0};
    CHECK_EQ_INT(di_engine_set_expert_load_observer(e, on_spec_load, &s), 0);
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.temperature = 0;
    p.max_tokens = 12;
    p.ignore_eos = 1;
    for (int r = 0; r < N_REQ; r++) {
        int32_t prompt[MAX_PROMPT]; /* byte tokens: inside the built-in model's vocabulary */
        for (int k = 0; k < n_prompt[r]; k++) prompt[k] = seqs[r][k] % 256;
        DiRequestInput in = {.prompt_ids = prompt, .n_prompt_ids = n_prompt[r]};
        uint64_t id;
        CHECK_MSG(di_engine_add_request(e, &in, &p, NULL, NULL, &id) == 0, "%s", di_last_error());
    }
    CHECK_MSG(di_engine_run(e) == 0, "%s", di_last_error());
    DiEngineMetrics m;
    di_engine_get_metrics(e, &m);
    /* rows forwarded: the prompts, then per request max_tokens - 1 anchors (less the accepted drafts, which
     * are tokens too) and every verified draft, accepted or not; the engine's decode_tokens
     * counts the same (anchors + drafts) */
    int64_t prompts = 0;
    for (int r = 0; r < N_REQ; r++) prompts += n_prompt[r];
    int64_t rows = prompts + N_REQ * (int64_t)(p.max_tokens - 1) - (int64_t)m.spec_num_accepted_tokens + (int64_t)m.spec_num_draft_tokens;
    CHECK_EQ_INT(rows, (int64_t)(m.prefill_tokens + m.decode_tokens));
    int top_k = tiny_config_int("num_experts_per_tok"), draft_k = tiny_config_int("dspark_num_experts_per_tok");
    CHECK(m.spec_num_draft_tokens > 0 && top_k > 0 && draft_k > 0);
    CHECK_EQ_INT(s.layers, tiny_config_int("num_hidden_layers"));
    for (int l = 0; l < s.layers; l++) {
        int64_t pairs = 0;
        for (int x = 0; x < s.experts; x++) pairs += sum[l * s.experts + x];
        CHECK_EQ_INT(pairs, (int64_t)top_k * rows);
    }
    CHECK(s.draft_layers > 0 && s.draft_experts == tiny_config_int("dspark_n_routed_experts"));
    for (int l = 0; l < s.draft_layers; l++) {
        int64_t pairs = 0;
        for (int x = 0; x < s.draft_experts; x++) pairs += draft_sum[l * s.draft_experts + x];
        CHECK_MSG(pairs > 0 && pairs % draft_k == 0, "DSpark stage %d: %lld pairs", l, (long long)pairs);
    }
    di_engine_destroy(e);
}

int main(void) {
    model = test_golden_tiny_a(MODE_REF);
    if (!model) {
        fprintf(stderr, "loading golden tiny-a: %s\n", di_last_error());
        printf("0 passed, 1 failed\n");
        return 1;
    }
    uint64_t x = 7;
    for (int r = 0; r < N_REQ; r++) {
        n_prompt[r] = 4 + r * 3;
        for (int k = 0; k < n_prompt[r]; k++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            seqs[r][k] = (int32_t)((x >> 33) % (uint64_t)model->d.vocab);
        }
    }
    int64_t *scratch = calloc(table_size(), sizeof *scratch);
    if (reference(scratch) != 0) { /* the greedy tokens the batched test decodes */
        fprintf(stderr, "reference: %s\n", di_last_error());
        return 1;
    }
    free(scratch);
    RUN_TEST(a_batched_forward_counts_what_the_router_chose);
    RUN_TEST(engine_steps_report_each_steps_counts_once);
    RUN_TEST(a_model_without_experts_has_no_load_to_observe);
    RUN_TEST(speculative_verify_rows_count_and_the_drafter_counts_apart);
    model_free(model);
    return TEST_SUMMARY();
}
