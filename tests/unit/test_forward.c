/* test_forward.c — the V4.1 forward pass against the golden set tiny-a (golden-v41/README.md):
 * logits, the residual streams after every layer, routed experts, indexer selections and Engram
 * row ids of an exact-mode prefill; a chunked prefill + decode schedule; kvq mode; the DSpark
 * drafter; the optimised di_matmul backend against di_matmul_ref; and the errors a caller can
 * provoke.  Positions are causal, so a prefix of the 100-token golden sequence is compared with
 * the golden rows of that prefix (keeps the binary fast, also under ASan). */
#include "test.h"

#include "base/error.h"
#include "base/file.h"
#include "base/threadpool.h"
#include "model/dspark.h"
#include "model/forward.h"
#include "golden/golden.h"
#include "model/model.h"
#include "model/state.h"
#include "model/tiny.h"

#include <stdlib.h>
#include <unistd.h>

#include <stdio.h>
#include <string.h>

/* 32 positions: two window evictions (W = 16), 16 ratio-2 entries > top-k 8, 8 ratio-1 candidate
 * blocks > 3 kept, repeated n-grams for Engram. */
#define PREFIX 32

static GoldenSet golden;
static Model *model;
static const int32_t *ids;
static int64_t V;

static const void *array(const char *name, const char *dtype, int ndim) {
    GoldenArray a;
    if (golden_array(&golden, name, dtype, ndim, NULL, &a) != 0) {
        fprintf(stderr, "  %s\n", di_error_message());
        return NULL;
    }
    return a.data;
}

/* max |got - want| over rows [0, rows) of [*, cols] arrays whose golden row stride is cols. */
static double max_diff(const float *got, const float *want, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]);
        if (!(e <= m)) m = e;
    }
    return m;
}

static int argmax(const float *v, int64_t n) {
    int b = 0;
    for (int64_t i = 1; i < n; i++)
        if (v[i] > v[b]) b = (int)i;
    return b;
}

TEST(exact_prefill_matches_golden_layer_by_layer) {
    const ModelDims *d = &model->d;
    model->mode = MODE_EXACT;
    int64_t T = PREFIX, hc = d->hc_mult, D = d->dim, L = d->n_layers, K = d->top_k, KI = d->idx_topk;
    int cols = (d->engram_max_ngram - 1) * d->engram_heads;
    float *logits = calloc((size_t)(T * V), sizeof(float)), *lo = calloc((size_t)(L * T * hc * D), sizeof(float));
    int32_t *ex = calloc((size_t)(L * T * K), sizeof(int32_t)), *sel = calloc((size_t)(L * T * KI), sizeof(int32_t));
    int64_t *eids = calloc((size_t)(T * d->n_engram * cols), sizeof(int64_t));
    RunState *st = state_create(d);
    ForwardTrace tr = {.layer_out = lo, .experts = ex, .selected = sel, .engram_ids = eids};
    int rc = model_forward(model, st, ids, T, 0, logits, true, &tr);
    CHECK_MSG(rc == 0, "%s", di_error_message());
    if (rc == 0) {
        const float *want = array("exact.prefill.logits", "f32", 2);
        const float *want_lo = array("exact.prefill.layer_out", "f32", 4);
        const int32_t *want_ex = array("exact.prefill.experts", "i32", 3);
        const int64_t *want_ids = array("engram.row_ids", "i64", 3);
        CHECK(want && want_lo && want_ex && want_ids);
        if (want && want_lo && want_ex && want_ids) {
            double m = max_diff(logits, want, T * V);
            CHECK_MSG(m <= 1e-4, "logits max_abs %g (strict tier 1e-4)", m);
            for (int64_t t = 0; t < T; t++) CHECK_EQ_INT(argmax(logits + t * V, V), argmax(want + t * V, V));
            for (int64_t l = 0; l < L; l++) {
                /* golden layer_out is [L][100][hc][D]; ours [L][T][hc][D] */
                double e = max_diff(lo + l * T * hc * D, want_lo + l * golden.seq_len * hc * D, T * hc * D);
                CHECK_MSG(e <= 1e-4, "layer %lld output max_abs %g", (long long)l, e);
                for (int64_t t = 0; t < T; t++)
                    for (int64_t k = 0; k < K; k++)
                        CHECK_MSG(ex[(l * T + t) * K + k] == want_ex[(l * golden.seq_len + t) * K + k], "layer %lld pos %lld expert %lld",
                                  (long long)l, (long long)t, (long long)k);
            }
            for (int64_t t = 0; t < T; t++)
                for (int64_t c = 0; c < d->n_engram * cols; c++) CHECK_EQ_INT(eids[t * d->n_engram * cols + c], want_ids[t * d->n_engram * cols + c]);
            int n_sel_layers = 0;
            for (int l = 0; l < L; l++) {
                if (!d->layer[l].is_index_source) continue;
                char name[96];
                snprintf(name, sizeof name, "exact.prefill.selected.layer%d", l);
                const int32_t *ws = array(name, "i32", 2);
                CHECK(ws != NULL);
                if (!ws) continue;
                n_sel_layers++;
                for (int64_t t = 0; t < T; t++)
                    for (int64_t j = 0; j < KI; j++)
                        CHECK_MSG(sel[(l * T + t) * KI + j] == ws[t * KI + j], "layer %d pos %lld selected[%lld] = %d, golden %d", l,
                                  (long long)t, (long long)j, sel[(l * T + t) * KI + j], ws[t * KI + j]);
            }
            CHECK(n_sel_layers >= 2);
        }
    }
    CHECK_EQ_INT(st->n_pos, T);
    state_free(st);
    free(logits);
    free(lo);
    free(ex);
    free(sel);
    free(eids);
}

/* Chunks and single decode steps from a persistent state give the prefill's logits. */
TEST(chunked_schedule_matches_prefill_golden) {
    model->mode = MODE_EXACT;
    const int64_t chunks[] = {13, 1, 1, 3, 9, 1, 4};
    int64_t T = 0;
    for (size_t i = 0; i < sizeof chunks / sizeof *chunks; i++) T += chunks[i];
    float *logits = calloc((size_t)(T * V), sizeof(float));
    RunState *st = state_create(&model->d);
    int64_t pos = 0;
    for (size_t i = 0; i < sizeof chunks / sizeof *chunks; i++) {
        int rc = model_forward(model, st, ids + pos, chunks[i], pos, logits + pos * V, true, NULL);
        CHECK_MSG(rc == 0, "%s", di_error_message());
        pos += chunks[i];
    }
    const float *want = array("exact.prefill.logits", "f32", 2);
    if (want) {
        double m = max_diff(logits, want, T * V);
        CHECK_MSG(m <= 1e-4, "chunked logits max_abs %g", m);
    }
    /* last-row-only logits equal the last row of the all-rows call */
    float *last = calloc((size_t)V, sizeof(float));
    int rc = model_forward(model, st, ids + pos, 1, pos, last, false, NULL);
    CHECK_MSG(rc == 0, "%s", di_error_message());
    if (want) CHECK_MSG(max_diff(last, want + pos * V, V) <= 1e-4, "decode row %lld", (long long)pos);
    state_free(st);
    free(logits);
    free(last);
}

TEST(kvq_prefill_matches_golden) {
    const ModelDims *d = &model->d;
    model->mode = MODE_KVQ;
    int64_t T = PREFIX, L = d->n_layers, K = d->top_k;
    float *logits = calloc((size_t)(T * V), sizeof(float));
    int32_t *ex = calloc((size_t)(L * T * K), sizeof(int32_t));
    RunState *st = state_create(d);
    ForwardTrace tr = {.experts = ex};
    int rc = model_forward(model, st, ids, T, 0, logits, true, &tr);
    CHECK_MSG(rc == 0, "%s", di_error_message());
    const float *want = array("kvq.prefill.logits", "f32", 2);
    const int32_t *want_ex = array("kvq.prefill.experts", "i32", 3);
    if (rc == 0 && want && want_ex) {
        double m = max_diff(logits, want, T * V);
        CHECK_MSG(m <= 2e-2, "kvq logits max_abs %g", m);
        for (int64_t l = 0; l < L; l++)
            for (int64_t t = 0; t < T * K; t++) CHECK(ex[l * T * K + t] == want_ex[l * golden.seq_len * K + t]);
    }
    /* the KV round trips must change something: exact-mode logits differ from kvq ones */
    const float *exact = array("exact.prefill.logits", "f32", 2);
    if (exact && want) CHECK(max_diff(want, exact, T * V) > 1e-5);
    state_free(st);
    free(logits);
    free(ex);
}

static int32_t pick_argmax(void *ctx, const float *logits, int64_t vocab, int row) {
    (void)ctx, (void)row;
    return (int32_t)argmax(logits, vocab);
}

static int32_t pick_fail(void *ctx, const float *logits, int64_t vocab, int row) {
    (void)ctx, (void)logits, (void)vocab, (void)row;
    return di_errorf("sampler gave up");
}

TEST(dspark_draft_matches_golden) {
    model->mode = MODE_EXACT;
    const ModelDims *d = &model->d;
    int64_t B = d->dspark_block;
    json_t *cases = json_object_get(golden.root, "cases");
    json_t *c = NULL;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        const char *n = json_string_value(json_object_get(json_array_get(cases, i), "name"));
        if (n && strcmp(n, "exact.dspark_p10_greedy") == 0) c = json_array_get(cases, i);
    }
    CHECK(c != NULL);
    if (!c) return;
    int64_t p = json_integer_value(json_object_get(c, "committed"));
    int32_t anchor = (int32_t)json_integer_value(json_object_get(c, "anchor"));
    RunState *st = state_create(d);
    float *base = calloc((size_t)(B * V), sizeof(float)), *lg = calloc((size_t)(B * V), sizeof(float)), conf[64];
    int32_t tok[64];
    int rc = model_forward(model, st, ids, p, 0, NULL, false, NULL);
    CHECK_MSG(rc == 0, "%s", di_error_message());
    DraftOutput out = {base, lg, conf, tok};
    rc = dspark_draft(model, st, anchor, NULL, &out);
    CHECK_MSG(rc == 0, "%s", di_error_message());
    const float *wb = array("exact.dspark_p10_greedy.base_logits", "f32", 2), *wl = array("exact.dspark_p10_greedy.logits", "f32", 2);
    const float *wc = array("exact.dspark_p10_greedy.confidence", "f32", 1);
    const int32_t *wt = array("exact.dspark_p10_greedy.tokens", "i32", 1);
    if (rc == 0 && wb && wl && wc && wt) {
        CHECK_MSG(max_diff(base, wb, B * V) <= 1e-4, "base logits %g", max_diff(base, wb, B * V));
        CHECK_MSG(max_diff(lg, wl, B * V) <= 1e-4, "Markov logits %g", max_diff(lg, wl, B * V));
        CHECK_MSG(max_diff(conf, wc, B) <= 1e-4, "confidence %g", max_diff(conf, wc, B));
        for (int64_t r = 0; r < B; r++) CHECK_EQ_INT(tok[r], wt[r]);
    }
    CHECK_EQ_INT(st->n_pos, p); /* drafting does not commit anything */
    /* a sampler that always picks the row's argmax reproduces the greedy chain */
    float *b2 = calloc((size_t)(2 * B * V), sizeof(float)), conf2[64];
    int32_t tok2[64];
    DraftOutput out2 = {b2, b2 + B * V, conf2, tok2};
    DraftSampler greedy = {pick_argmax, NULL}, failing = {pick_fail, NULL};
    CHECK(dspark_draft_sampled(model, st, anchor, &greedy, &out2) == 0);
    CHECK(memcmp(tok, tok2, (size_t)B * sizeof *tok) == 0);
    CHECK(memcmp(lg, b2 + B * V, (size_t)(B * V) * sizeof *lg) == 0);
    CHECK(dspark_draft_sampled(model, st, anchor, &failing, &out2) == -1);
    CHECK(strstr(di_error_message(), "sampler gave up") != NULL);
    free(b2);
    state_free(st);
    free(base);
    free(lg);
}

/* The optimised backend must agree with the scalar reference on a whole forward.  Exact mode:
 * no quantisation point can amplify an fp32 summation-order difference into a rounding flip
 * (in ref mode one flip moves logits by ~0.5, see check-golden --kernels), so anything above
 * float32 noise is a kernel bug. */
TEST(optimised_matmul_matches_reference_kernel) {
    model->mode = MODE_EXACT;
    int64_t T = 40;
    float *a = calloc((size_t)(T * V), sizeof(float)), *b = calloc((size_t)(T * V), sizeof(float));
    RunState *s1 = state_create(&model->d), *s2 = state_create(&model->d);
    const DiKernelBackend *loaded = model->be;
    CHECK(model_set_backend(model, di_backend_cpu_ref()) == 0);
    int rc1 = model_forward(model, s1, ids, T, 0, a, true, NULL);
    CHECK(model_set_backend(model, loaded) == 0);
    int rc2 = model_forward(model, s2, ids, T, 0, b, true, NULL);
    CHECK(rc1 == 0 && rc2 == 0);
    double m = max_diff(a, b, T * V);
    CHECK_MSG(m <= 1e-4, "backend vs reference max_abs %g", m);
    state_free(s1);
    state_free(s2);
    free(a);
    free(b);
}

TEST(bad_calls_are_errors_with_causes) {
    model->mode = MODE_EXACT;
    RunState *st = state_create(&model->d);
    float *lg = calloc((size_t)V, sizeof(float));
    int32_t bad = (int32_t)V;
    CHECK(model_forward(model, st, &bad, 1, 0, lg, false, NULL) == -1);
    CHECK(strstr(di_error_message(), "outside the vocabulary") != NULL);
    CHECK(model_forward(model, st, ids, 1, 5, lg, false, NULL) == -1);
    CHECK(strstr(di_error_message(), "holds 0 positions") != NULL);
    CHECK(model_forward(model, st, ids, 0, 0, lg, false, NULL) == -1);
    CHECK(model_forward(model, st, ids, (int64_t)FORWARD_MAX_CHUNK + 1, 0, lg, false, NULL) == -1);
    CHECK(strstr(di_error_message(), "exceeds the limit") != NULL);
    CHECK(model_forward(model, st, ids, model->cfg.max_position_embeddings + 1, 0, lg, false, NULL) == -1);
    CHECK(strstr(di_error_message(), "max_position_embeddings") != NULL);
    CHECK(model_forward(NULL, st, ids, 1, 0, lg, false, NULL) == -1);
    CHECK_EQ_INT(st->n_pos, 0); /* a rejected call leaves the state untouched */
    DraftOutput out = {lg, lg, lg, NULL};
    CHECK(dspark_draft(model, st, 0, NULL, &out) == -1);
    state_free(st);
    free(lg);
    /* a model with Engram layers refuses to run without the token map */
    char *dir = di_path_join(golden.dir, "checkpoint");
    Model *m2 = model_load(dir, MODE_EXACT);
    CHECK(m2 != NULL);
    if (m2) {
        RunState *s2 = state_create(&m2->d);
        CHECK(model_forward(m2, s2, ids, 1, 0, NULL, false, NULL) == -1);
        CHECK(strstr(di_error_message(), "token map") != NULL);
        int32_t map[4] = {0, 1, 2, 100000};
        CHECK(model_set_engram_token_map(m2, map, 4) == -1);
        int64_t even[16] = {2};
        CHECK(model_set_engram_multipliers(m2, even, m2->d.n_engram, m2->d.engram_max_ngram) == -1);
        state_free(s2);
        model_free(m2);
    }
    free(dir);
    CHECK(model_load("/nonexistent-model-dir", MODE_REF) == NULL);
    CHECK(strstr(di_error_message(), "/nonexistent-model-dir") != NULL);
}

/* Three requests at different stages in one batched forward give exactly (memcmp) what each
 * gives alone: rows never influence each other.  The batched forward runs on `threads` threads
 * (attention rows, MoE expert slices and matmul rows are pool tasks), the separate ones on one. */
static void batched_vs_separate(int threads) {
    DiThreadPool *pool = threads > 1 ? di_pool_create(threads) : NULL;
    model->mode = MODE_REF;
    const ModelDims *d = &model->d;
    RunState *a1 = state_create(d), *b1 = state_create(d), *c1 = state_create(d);
    RunState *a2 = state_create(d), *b2 = state_create(d), *c2 = state_create(d);
    /* history: A has 10 positions, C has 5, B is new */
    CHECK(model_forward(model, a1, ids, 10, 0, NULL, false, NULL) == 0);
    CHECK(model_forward(model, a2, ids, 10, 0, NULL, false, NULL) == 0);
    CHECK(model_forward(model, c1, ids + 40, 5, 0, NULL, false, NULL) == 0);
    CHECK(model_forward(model, c2, ids + 40, 5, 0, NULL, false, NULL) == 0);
    float *sep = calloc((size_t)(12 * V), sizeof(float)), *bat = calloc((size_t)(12 * V), sizeof(float));
    /* separately: A decodes 1, B prefills 7 (all rows), C continues with 4 (last row) */
    CHECK(model_forward(model, a1, ids + 10, 1, 10, sep, false, NULL) == 0);
    CHECK(model_forward(model, b1, ids + 20, 7, 0, sep + V, true, NULL) == 0);
    CHECK(model_forward(model, c1, ids + 45, 4, 5, sep + 8 * V, false, NULL) == 0);
    ForwardSeq q[3] = {{a2, ids + 10, 1, 10, bat, false, 0}, {b2, ids + 20, 7, 0, bat + V, true, 0}, {c2, ids + 45, 4, 5, bat + 8 * V, false, 0}};
    model->pool = pool;
    int rc = model_forward_batch(model, q, 3, NULL);
    model->pool = NULL;
    CHECK_MSG(rc == 0, "%s", di_error_message());
    CHECK(memcmp(sep, bat, (size_t)(9 * V) * sizeof *sep) == 0);
    /* and the states continue identically */
    float *x = calloc((size_t)V, sizeof(float)), *y = calloc((size_t)V, sizeof(float));
    CHECK(model_forward(model, b1, ids + 27, 1, 7, x, false, NULL) == 0);
    CHECK(model_forward(model, b2, ids + 27, 1, 7, y, false, NULL) == 0);
    CHECK(memcmp(x, y, (size_t)V * sizeof *x) == 0);
    /* a state twice in one batch, or a bad request, is rejected before anything changes */
    ForwardSeq dup[2] = {{a2, ids, 1, 11, NULL, false, 0}, {a2, ids, 1, 11, NULL, false, 0}};
    CHECK(model_forward_batch(model, dup, 2, NULL) == -1);
    ForwardSeq badq[2] = {{a2, ids, 1, 11, NULL, false, 0}, {b2, ids, 1, 3, NULL, false, 0}};
    CHECK(model_forward_batch(model, badq, 2, NULL) == -1);
    CHECK_EQ_INT(a2->n_pos, 11);
    free(x);
    free(y);
    free(sep);
    free(bat);
    state_free(a1), state_free(b1), state_free(c1), state_free(a2), state_free(b2), state_free(c2);
    if (pool) di_pool_destroy(pool);
}

TEST(batched_requests_equal_separate_forwards) { batched_vs_separate(1); }
TEST(batched_requests_on_two_threads_equal_separate_forwards) { batched_vs_separate(2); }

/* A second geometry with no golden values (§9.2 verbatim: 8 layers, hidden 96, output groups of
 * 48 rows straddling the 32-row scale blocks, 4-gram Engram, 2 candidate blocks of 4): prefill
 * and token-by-token decode must agree (exact mode, fp32 summation-order differences only). */
TEST(spec9_geometry_prefill_equals_decode) {
    char dir[] = "/tmp/di-test-spec9-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    int rc = di_tiny_write(dir, "spec9", 3, 0);
    CHECK_MSG(rc == 0, "%s", di_error_message());
    Model *m = rc == 0 ? model_load(dir, MODE_EXACT) : NULL;
    CHECK_MSG(m != NULL, "%s", di_error_message());
    if (m) {
        int64_t T = 23, Vs = m->d.vocab;
        int32_t *map = calloc((size_t)Vs, sizeof *map), tok[23];
        for (int t = 0; t < Vs; t++) map[t] = t % m->d.engram_compressed_vocab; /* §9.3 map */
        CHECK(model_set_engram_token_map(m, map, Vs) == 0);
        for (int i = 0; i < T; i++) tok[i] = i == 0 ? 0 : (int32_t)((i * 37 + (i % 5 == 0 ? 128 : 0)) % Vs);
        float *a = calloc((size_t)(T * Vs), sizeof(float)), *b = calloc((size_t)(T * Vs), sizeof(float));
        RunState *s1 = state_create(&m->d), *s2 = state_create(&m->d);
        CHECK(model_forward(m, s1, tok, T, 0, a, true, NULL) == 0);
        for (int64_t p = 0; p < T; p++) CHECK(model_forward(m, s2, tok + p, 1, p, b + p * Vs, true, NULL) == 0);
        double e = max_diff(a, b, T * Vs);
        CHECK_MSG(e <= 1e-4, "prefill vs decode max_abs %g", e);
        state_free(s1);
        state_free(s2);
        free(a);
        free(b);
        free(map);
        model_free(m);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

int main(void) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/golden-v41/tiny-a", test_shared_dir());
    if (golden_open(dir, &golden) != 0) {
        fprintf(stderr, "cannot open %s: %s\n", dir, di_error_message());
        return 1;
    }
    char *ck = di_path_join(dir, "checkpoint");
    model = model_load(ck, MODE_EXACT);
    free(ck);
    if (!model || golden_prepare_model(&golden, model) != 0) {
        fprintf(stderr, "cannot load model: %s\n", di_error_message());
        return 1;
    }
    ids = array("input_ids", "i32", 1);
    V = model->d.vocab;
    RUN_TEST(exact_prefill_matches_golden_layer_by_layer);
    RUN_TEST(chunked_schedule_matches_prefill_golden);
    RUN_TEST(kvq_prefill_matches_golden);
    RUN_TEST(dspark_draft_matches_golden);
    RUN_TEST(optimised_matmul_matches_reference_kernel);
    RUN_TEST(bad_calls_are_errors_with_causes);
    RUN_TEST(batched_requests_equal_separate_forwards);
    RUN_TEST(batched_requests_on_two_threads_equal_separate_forwards);
    RUN_TEST(spec9_geometry_prefill_equals_decode);
    model_free(model);
    golden_close(&golden);
    return TEST_SUMMARY();
}
