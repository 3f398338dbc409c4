/* test_workspace.c — the forward's workspace (src/model/workspace.h): a decode step of the tiny
 * model, alone or batched, and a DSpark draft make no heap allocation once warm (they made ~570
 * per decoded token before the workspace); a call longer than the workspace's rows runs in
 * chunks with the same logits, bit for bit, as one call; a second concurrent call is refused. */
#include "test.h"

#include "base/error.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/threadpool.h"
#include "model/dspark.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/state.h"
#include "model/tiny.h"
#include "model/workspace.h"

#include <stdlib.h>
#include <string.h>

static char dir[1024];

static Model *load(NumericsMode mode) {
    Model *m = model_load(dir, mode);
    CHECK_MSG(m != NULL, "%s", di_error_message());
    if (!m) return NULL;
    int64_t n_map;
    const int32_t *cid;
    CHECK(di_tiny_engram_token_map(&cid, &n_map) == 0);
    CHECK_MSG(model_set_engram_token_map(m, cid, n_map) == 0, "%s", di_error_message());
    return m;
}

static void fill_tokens(int32_t *t, int n, int V, int seed) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)((i * 37 + seed * 11 + 5) % V);
}

enum { PROMPT = 12, WARM = 2, STEPS = 6 };

/* Heap allocations of STEPS decode steps after WARM warm-up steps, at batch `batch`. */
static long long decode_allocs(Model *m, int batch) {
    int V = m->d.vocab;
    RunState *st[4] = {0};
    int32_t prompt[PROMPT];
    float *logits = malloc(sizeof(float) * (size_t)V * 4);
    long long counted = -1;
    for (int b = 0; b < batch; b++) {
        st[b] = state_create(&m->d);
        fill_tokens(prompt, PROMPT, V, b);
        if (!st[b] || model_forward(m, st[b], prompt, PROMPT, 0, logits, false, NULL) != 0) goto done;
    }
    long long before = 0;
    for (int s = 0; s < WARM + STEPS; s++) {
        if (s == WARM) before = di_alloc_count();
        ForwardSeq q[4];
        int32_t tok[4];
        for (int b = 0; b < batch; b++) {
            tok[b] = (int32_t)((s * 13 + b * 7 + 3) % V);
            q[b] = (ForwardSeq){st[b], &tok[b], 1, PROMPT + s, logits + (size_t)b * V, false, 0};
        }
        if (model_forward_batch(m, q, batch, NULL) != 0) goto done;
    }
    counted = di_alloc_count() - before;
done:
    CHECK_MSG(counted >= 0, "%s", di_error_message());
    for (int b = 0; b < batch; b++) state_free(st[b]);
    free(logits);
    return counted;
}

TEST(decode_steps_allocate_nothing) {
    NumericsMode modes[] = {MODE_REF, MODE_EXACT};
    for (int i = 0; i < 2; i++) {
        Model *m = load(modes[i]);
        if (!m) return;
        DiThreadPool *pool = di_pool_create(2);
        m->pool = pool;
        long long one = decode_allocs(m, 1), four = decode_allocs(m, 4);
        CHECK_MSG(one == 0, "mode %s: %lld heap allocations in %d decode steps at batch 1", numerics_mode_name(modes[i]), one, STEPS);
        CHECK_MSG(four == 0, "mode %s: %lld heap allocations in %d decode steps at batch 4", numerics_mode_name(modes[i]), four, STEPS);
        m->pool = NULL;
        di_pool_destroy(pool);
        model_free(m);
    }
}

TEST(draft_allocates_nothing) {
    Model *m = load(MODE_REF);
    if (!m) return;
    int V = m->d.vocab, B = m->d.dspark_block;
    RunState *st = state_create(&m->d);
    int32_t prompt[PROMPT], tokens[DSPARK_MAX_BLOCK];
    fill_tokens(prompt, PROMPT, V, 1);
    float *base = malloc(sizeof(float) * (size_t)(B * V)), *lg = malloc(sizeof(float) * (size_t)(B * V)), conf[DSPARK_MAX_BLOCK];
    DraftOutput out = {base, lg, conf, tokens};
    CHECK(st && model_forward(m, st, prompt, PROMPT, 0, NULL, false, NULL) == 0);
    CHECK_MSG(dspark_draft(m, st, 7, NULL, &out) == 0, "%s", di_error_message());
    long long before = di_alloc_count();
    for (int i = 0; i < 3; i++) CHECK(dspark_draft(m, st, 7, NULL, &out) == 0);
    CHECK_EQ_INT((int)(di_alloc_count() - before), 0);
    free(base);
    free(lg);
    state_free(st);
    model_free(m);
}

/* 3 requests of 9, 1 and 14 rows on a workspace of 4 rows: chunks cut inside requests, a
 * request whose last row lands in a later chunk, logits of every row or the last. */
TEST(long_batch_runs_in_chunks_with_the_same_bits) {
    Model *a = load(MODE_REF), *b = load(MODE_REF);
    if (!a || !b) return;
    CHECK_MSG(model_reserve_rows(b, 4) == 0, "%s", di_error_message());
    CHECK(b->ws->rows == 5); /* never below the DSpark block (5 in tiny) */
    int V = a->d.vocab;
    int64_t n[3] = {9, 1, 14};
    bool all[3] = {true, false, true};
    int32_t tok[3][14];
    float *la = calloc((size_t)24 * V, sizeof(float)), *lb = calloc((size_t)24 * V, sizeof(float));
    RunState *sa[3], *sb[3];
    ForwardSeq qa[3], qb[3];
    size_t off = 0;
    for (int i = 0; i < 3; i++) {
        fill_tokens(tok[i], (int)n[i], V, i);
        sa[i] = state_create(&a->d);
        sb[i] = state_create(&b->d);
        qa[i] = (ForwardSeq){sa[i], tok[i], n[i], 0, la + off, all[i], 0};
        qb[i] = (ForwardSeq){sb[i], tok[i], n[i], 0, lb + off, all[i], 0};
        off += (size_t)(all[i] ? n[i] : 1) * V;
    }
    CHECK_MSG(model_forward_batch(a, qa, 3, NULL) == 0, "%s", di_error_message());
    CHECK_MSG(model_forward_batch(b, qb, 3, NULL) == 0, "%s", di_error_message());
    CHECK(memcmp(la, lb, off * sizeof(float)) == 0);
    /* the next step continues from the chunked states the same way */
    int32_t next[3] = {3, 4, 5};
    for (int i = 0; i < 3; i++) {
        qa[i] = (ForwardSeq){sa[i], &next[i], 1, n[i], la + (size_t)i * V, false, 0};
        qb[i] = (ForwardSeq){sb[i], &next[i], 1, n[i], lb + (size_t)i * V, false, 0};
    }
    CHECK(model_forward_batch(a, qa, 3, NULL) == 0 && model_forward_batch(b, qb, 3, NULL) == 0);
    CHECK(memcmp(la, lb, (size_t)3 * V * sizeof(float)) == 0);
    /* a trace needs the whole batch in one chunk */
    RunState *sc = state_create(&b->d);
    int32_t *ex = calloc((size_t)b->d.n_layers * 14 * b->d.top_k, sizeof *ex);
    ForwardTrace tr = {.experts = ex};
    CHECK(model_forward(b, sc, tok[2], 14, 0, NULL, false, &tr) == -1);
    CHECK(strstr(di_error_message(), "workspace") != NULL);
    free(ex);
    state_free(sc);
    for (int i = 0; i < 3; i++) state_free(sa[i]), state_free(sb[i]);
    free(la);
    free(lb);
    CHECK(model_reserve_rows(b, 0) == -1);
    model_free(a);
    model_free(b);
}

TEST(a_second_call_on_a_busy_workspace_is_refused) {
    Model *m = load(MODE_EXACT);
    if (!m) return;
    RunState *st = state_create(&m->d);
    int32_t t = 1;
    CHECK(workspace_acquire(m) == 0);
    CHECK(model_forward(m, st, &t, 1, 0, NULL, false, NULL) == -1);
    CHECK(strstr(di_error_message(), "one at a time") != NULL);
    CHECK(model_reserve_rows(m, 8) == -1);
    workspace_release(m);
    CHECK_MSG(model_forward(m, st, &t, 1, 0, NULL, false, NULL) == 0, "%s", di_error_message());
    state_free(st);
    model_free(m);
}

int main(void) {
    di_log_set_level(DI_LOG_ERROR);
    /* the built-in tiny checkpoint, generated once into the user's cache and only read here */
    if (di_tiny_default_dir(dir, sizeof dir) != 0 || di_tiny_ensure(dir) != 0) {
        fprintf(stderr, "%s\n", di_error_message());
        return 1;
    }
    RUN_TEST(decode_steps_allocate_nothing);
    RUN_TEST(draft_allocates_nothing);
    RUN_TEST(long_batch_runs_in_chunks_with_the_same_bits);
    RUN_TEST(a_second_call_on_a_busy_workspace_is_refused);
    return TEST_SUMMARY();
}
