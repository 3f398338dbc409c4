/* test_replay.c — decoder SWA bounded replay (src/model/replay.h, engine-features.md §2.7 items
 * 1-5) on the built-in tiny model (make-tiny "tiny"): window 8, layers 0-3 encoder, layer 4 the first
 * decoder layer (Full KV source, candidate source), K in {8, 10}.
 *
 * The oracle is written here from model_block calls, the way the spec states the algorithm: every
 * layer up to and including the first decoder layer on every row of the chunk, then the later
 * layers on its last k rows with their window floored at the replay start, logits of the last row.
 * With k = n it is a plain full forward (mode off).  The window floor itself is checked on its
 * own: ring rows below the floor are poisoned and must not reach the output.  Last, the engine
 * (paged state, its own chunking) in compact mode equals the same chunks through model_forward. */
#include "test.h"

#include "base/error.h"
#include "base/log.h"
#include "engine/engine.h"
#include "engine/runner_v41.h"
#include "model/attention.h"
#include "model/engram.h"
#include "model/forward.h"
#include "model/mhc.h"
#include "model/model.h"
#include "model/replay.h"
#include "model/state.h"
#include "model/tiny.h"
#include "model/workspace.h"

static char dir[4096];
static Model *model;
static int64_t V;
static int32_t toks[64];

/* ---- the oracle ------------------------------------------------------------------------------ */

typedef struct {
    const Model *m;
    const RowBatch *rb;
    int layer;
    AttnShared *sh;
} OracleAttn;

static int oracle_attn(void *ctx, const float *a, int64_t n, float *out) {
    OracleAttn *o = ctx;
    (void)n;
    return attention_forward(o->m, o->rb, o->layer, a, o->sh, out);
}

/* Rows [from, from + k) of the published selection and pool move to rows [0, k). */
static void shift_shared(const Model *m, AttnShared *sh, int64_t from, int64_t k) {
    int64_t KI = m->d.idx_topk, CB = m->d.cand_blocks;
    memmove(sh->sel, sh->sel + from * KI, (size_t)(k * KI) * sizeof *sh->sel);
    memmove(sh->sel_count, sh->sel_count + from, (size_t)k * sizeof *sh->sel_count);
    memmove(sh->pool, sh->pool + from * CB, (size_t)(k * CB) * sizeof *sh->pool);
    memmove(sh->pool_count, sh->pool_count + from, (size_t)k * sizeof *sh->pool_count);
}

/* Chunk [s, s + n) of one request; layers above the first decoder layer on the last k rows only
 * (k = n: all rows, no floor).  logits: [V] of the last row. */
static int oracle_chunk(const Model *m, RunState *st, const int32_t *tok, int64_t n, int64_t s, int64_t k, float *logits) {
    const ModelDims *d = &m->d;
    int hc = d->hc_mult, dec = d->n_layers / 2;
    int64_t D = d->dim, cols = d->n_engram ? engram_columns(d) : 0;
    float *X = malloc((size_t)(n * hc * D) * sizeof *X), *pi = malloc((size_t)(n * hc) * sizeof *pi);
    float *row = malloc((size_t)D * sizeof *row);
    int64_t *pos = malloc((size_t)n * sizeof *pos), *eids = malloc((size_t)(n * (d->n_engram + 1) * (cols + 1)) * sizeof *eids);
    int rc = -1;
    for (int64_t i = 0; i < n; i++) {
        pos[i] = s + i;
        if (di_matrix_row(&m->w.embed, tok[i], row) != 0) goto done;
        for (int c = 0; c < hc; c++) {
            memcpy(X + (i * hc + c) * D, row, (size_t)D * sizeof *X);
            pi[i * hc + c] = c == 0 ? 1.0f : 0.0f;
        }
    }
    if (d->n_engram && engram_hash(m, st, tok, n, s, eids) != 0) goto done;
    int64_t row0[2] = {0, n}, start = s, floor = s + n - k, rows = n;
    RowBatch rb = {1, &st, row0, &start, pos, NULL, false};
    AttnShared sh;
    attn_shared_init(&sh, m->ws, n);
    float *Xc = X, *pic = pi;
    for (int L = 0; L < d->n_layers; L++) {
        int es = model_dims_engram_slot(d, L);
        if (es >= 0 && engram_forward(m, es, &m->w.layers[L], eids, X, n) != 0) goto done;
        if (L == dec + 1 && k < n) { /* the replay: the last k rows, window floored at their start */
            Xc = X + (n - k) * hc * D;
            pic = pi + (n - k) * hc;
            rows = row0[1] = k;
            start = floor;
            rb.pos = pos + (n - k);
            rb.swa_floor = &floor;
            shift_shared(m, &sh, n - k, k);
        }
        OracleAttn oa = {m, &rb, L, &sh};
        if (model_block(m, L, Xc, pic, rows, oracle_attn, &oa, NULL) != 0) goto done;
    }
    /* §5.8 head on the last row */
    m->be->mhc_collapse(Xc + (rows - 1) * hc * D, pic + (rows - 1) * hc, hc, D, row);
    m->be->rmsnorm(row, row, m->w.norm, D, d->eps);
    if (model_matmul(m, &m->w.head, row, 1, logits) != 0) goto done;
    engram_push_history(m, st, tok, n);
    st->n_pos = s + n;
    rc = 0;
done:
    free(X), free(pi), free(row), free(pos), free(eids);
    return rc;
}

/* ---- state digests (FNV-1a over the rows) ---------------------------------------------------- */

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* Global KV: every compressed row, index key and pending compressor row of every KV source. */
static uint64_t global_digest(RunState *st) {
    uint64_t h = 1469598103934665603ull;
    for (int k = 0; k < st->n_kv; k++) {
        KvSourceState *ks = &st->kv[k];
        h = fnv(h, &ks->n_rows, sizeof ks->n_rows);
        h = fnv(h, &ks->n_pending, sizeof ks->n_pending);
        for (int64_t g = 0; g < ks->n_rows; g++) {
            h = fnv(h, state_comp_row(st, k, g), (size_t)st->head_dim * sizeof(float));
            h = fnv(h, state_ikey_row(st, k, g), (size_t)st->idx_head_dim * sizeof(float));
        }
        for (int r = 0; r < ks->n_pending; r++)
            for (int w = 0; w < 2; w++) h = fnv(h, state_pending_row(st, k, w, r), (size_t)st->head_dim * sizeof(float));
    }
    return h;
}

/* Layer L's window ring: the rows of the last W positions. */
static uint64_t ring_digest(RunState *st, int L) {
    uint64_t h = 1469598103934665603ull;
    for (int64_t p = st->n_pos - st->window < 0 ? 0 : st->n_pos - st->window; p < st->n_pos; p++)
        h = fnv(h, state_window_row(st, L, p), (size_t)st->head_dim * sizeof(float));
    return h;
}

/* The DSpark context rings (fed from the taps of the replayed rows). */
static uint64_t dspark_digest(RunState *st) {
    uint64_t h = 1469598103934665603ull;
    for (int k = 0; k < st->n_mtp; k++)
        for (int64_t p = st->n_pos - st->window < 0 ? 0 : st->n_pos - st->window; p < st->n_pos; p++)
            h = fnv(h, state_dspark_row(st, k, p), (size_t)st->head_dim * sizeof(float));
    return h;
}

/* ---- helpers --------------------------------------------------------------------------------- */

static void set_mode(ReplayMode mode, int64_t keep) {
    CHECK_MSG(model_set_prefill_replay(model, mode, keep) == 0, "%s", di_error_message());
}

/* A prefill of the chunks lens[] (summing to the prompt) through model_forward; logits of the
 * final chunk's last row. */
static RunState *prefill(const int *lens, int n_chunks, float *logits) {
    RunState *st = state_create(&model->d);
    int64_t s = 0;
    for (int c = 0; c < n_chunks; c++) {
        int rc = model_forward(model, st, toks + s, lens[c], s, c == n_chunks - 1 ? logits : NULL, false, NULL);
        CHECK_MSG(rc == 0, "chunk %d: %s", c, di_error_message());
        s += lens[c];
    }
    return st;
}

static RunState *oracle_prefill(const int *lens, int n_chunks, int64_t keep, float *logits) {
    RunState *st = state_create(&model->d);
    int64_t s = 0;
    for (int c = 0; c < n_chunks; c++) {
        int64_t k = keep > 0 && lens[c] > keep ? keep : lens[c];
        CHECK_MSG(oracle_chunk(model, st, toks + s, lens[c], s, k, logits) == 0, "oracle chunk %d: %s", c, di_error_message());
        s += lens[c];
    }
    return st;
}

static bool same_floats(const float *a, const float *b, int64_t n) { return memcmp(a, b, (size_t)n * sizeof *a) == 0; }

/* Two states hold the same global KV and the same ring in every layer below `rings_below`. */
static void check_same_state(RunState *a, RunState *b, int rings_below, const char *what) {
    CHECK_MSG(global_digest(a) == global_digest(b), "%s: global KV differs", what);
    for (int L = 0; L < rings_below; L++) CHECK_MSG(ring_digest(a, L) == ring_digest(b, L), "%s: ring of layer %d differs", what, L);
}

/* ---- the specification ----------------------------------------------------------------------- */

TEST(off_equals_a_straightforward_full_forward) {
    set_mode(REPLAY_OFF, 10);
    const int plans[][3] = {{24, 0, 0}, {13, 11, 0}, {5, 9, 17}};
    const int counts[] = {1, 2, 3};
    float *got = malloc((size_t)V * sizeof *got), *want = malloc((size_t)V * sizeof *want);
    for (int p = 0; p < 3; p++) {
        RunState *a = prefill(plans[p], counts[p], got), *b = oracle_prefill(plans[p], counts[p], 0, want);
        CHECK_MSG(same_floats(got, want, V), "plan %d: logits differ from the full forward", p);
        check_same_state(a, b, model->d.n_layers, "off vs full forward");
        state_free(a), state_free(b);
    }
    free(got), free(want);
}

TEST(prompts_up_to_k_are_identical_in_both_modes) {
    float *off = malloc((size_t)V * sizeof *off), *cmp = malloc((size_t)V * sizeof *cmp);
    const int64_t keeps[] = {8, 10};
    for (int ki = 0; ki < 2; ki++)
        for (int n = 1; n <= keeps[ki]; n += 3) {
            int len[1] = {n};
            set_mode(REPLAY_OFF, keeps[ki]);
            RunState *a = prefill(len, 1, off);
            set_mode(REPLAY_COMPACT, keeps[ki]);
            RunState *b = prefill(len, 1, cmp);
            CHECK_MSG(same_floats(off, cmp, V), "K %lld, n %d: compact differs from off", (long long)keeps[ki], n);
            check_same_state(a, b, model->d.n_layers, "n <= K");
            CHECK_MSG(dspark_digest(a) == dspark_digest(b), "K %lld, n %d: DSpark rings differ", (long long)keeps[ki], n);
            state_free(a), state_free(b);
        }
    free(off), free(cmp);
}

TEST(longer_prompts_equal_the_truncated_window_oracle) {
    float *got = malloc((size_t)V * sizeof *got), *want = malloc((size_t)V * sizeof *want), *off = malloc((size_t)V * sizeof *off);
    const int64_t keeps[] = {8, 10};
    const int lens[] = {11, 19, 40};
    for (int ki = 0; ki < 2; ki++)
        for (int li = 0; li < 3; li++) {
            int len[1] = {lens[li]};
            set_mode(REPLAY_COMPACT, keeps[ki]);
            RunState *a = prefill(len, 1, got), *b = oracle_prefill(len, 1, keeps[ki], want);
            CHECK_MSG(same_floats(got, want, V), "K %lld, n %d: compact differs from the oracle", (long long)keeps[ki], lens[li]);
            check_same_state(a, b, model->d.n_layers, "compact vs oracle"); /* decoder rings included */
            set_mode(REPLAY_OFF, keeps[ki]);
            RunState *c = prefill(len, 1, off);
            /* the truncation is real: the answer moves (the window of layers 5-7 lost rows) */
            CHECK_MSG(!same_floats(got, off, V), "K %lld, n %d: compact equals off", (long long)keeps[ki], lens[li]);
            state_free(a), state_free(b), state_free(c);
        }
    free(got), free(want), free(off);
}

TEST(global_kv_and_index_keys_are_the_same_in_both_modes) {
    const int plans[][3] = {{40, 0, 0}, {23, 17, 0}, {9, 20, 11}};
    const int counts[] = {1, 2, 3};
    int dec = model->d.n_layers / 2;
    float *lg = malloc((size_t)V * sizeof *lg);
    for (int p = 0; p < 3; p++) {
        set_mode(REPLAY_OFF, 8);
        RunState *a = prefill(plans[p], counts[p], lg);
        set_mode(REPLAY_COMPACT, 8);
        RunState *b = prefill(plans[p], counts[p], lg);
        /* global KV and the rings up to layer dec + 1, whose window KV comes from the exact layer
         * dec's output; layer dec + 2's input has been through a truncated window */
        check_same_state(a, b, dec + 2, "off vs compact");
        CHECK_MSG(ring_digest(a, dec + 2) != ring_digest(b, dec + 2), "plan %d: the truncated layer's ring equals off's", p);
        state_free(a), state_free(b);
    }
    free(lg);
}

TEST(decoder_rows_are_k_per_request_chunk_and_batching_changes_nothing) {
    set_mode(REPLAY_COMPACT, 10);
    enum { NS = 4 };
    const int64_t lens[NS] = {5, 19, 10, 33};
    const bool all[NS] = {false, false, false, true}; /* prompt logprobs: never trimmed */
    const int64_t want_rows[NS] = {5, 10, 10, 33};
    RunState *st[NS], *alone[NS];
    float *lg = malloc((size_t)(NS * 40) * (size_t)V * sizeof *lg), *lg1 = malloc((size_t)40 * (size_t)V * sizeof *lg1);
    ForwardSeq q[NS];
    int64_t off = 0;
    for (int b = 0; b < NS; b++) {
        st[b] = state_create(&model->d);
        q[b] = (ForwardSeq){st[b], toks + b, lens[b], 0, lg + off * V, all[b], 0};
        off += all[b] ? lens[b] : 1;
    }
    int64_t rows[NS] = {0};
    ForwardTrace tr = {.decoder_rows = rows};
    CHECK_MSG(model_forward_batch(model, q, NS, &tr) == 0, "%s", di_error_message());
    off = 0;
    for (int b = 0; b < NS; b++) {
        CHECK_MSG(rows[b] == want_rows[b], "request %d: %lld decoder rows, want %lld", b, (long long)rows[b], (long long)want_rows[b]);
        alone[b] = state_create(&model->d);
        CHECK(model_forward(model, alone[b], toks + b, lens[b], 0, lg1, all[b], NULL) == 0);
        int64_t nl = all[b] ? lens[b] : 1;
        CHECK_MSG(same_floats(lg + off * V, lg1, nl * V), "request %d: batched differs from alone", b);
        check_same_state(st[b], alone[b], model->d.n_layers, "batched vs alone");
        CHECK_MSG(dspark_digest(st[b]) == dspark_digest(alone[b]), "request %d: DSpark rings differ", b);
        off += nl;
    }
    /* a second chunk of 12 rows on request 1 trims to 10 again */
    q[0] = (ForwardSeq){st[1], toks + 1 + 19, 12, 19, NULL, false, 0};
    CHECK(model_forward_batch(model, q, 1, &tr) == 0 && rows[0] == 10);
    for (int b = 0; b < NS; b++) state_free(st[b]), state_free(alone[b]);
    free(lg), free(lg1);
}

/* A verify-style request asks for its last n_logits rows: within K they are replayed rows (the
 * last one as with one logits row); beyond K the chunk is not trimmed (as off mode). */
static int64_t forward_rows_of(ReplayMode mode, int64_t n, int64_t n_logits, float *logits) {
    set_mode(mode, 10);
    RunState *st = state_create(&model->d);
    int64_t rows = -1;
    ForwardSeq q = {st, toks, n, 0, logits, false, n_logits};
    ForwardTrace tr = {.decoder_rows = &rows};
    CHECK_MSG(model_forward_batch(model, &q, 1, &tr) == 0, "%s", di_error_message());
    state_free(st);
    return rows;
}

TEST(logits_of_more_rows_than_k_keep_the_chunk_whole) {
    float *a = malloc((size_t)12 * (size_t)V * sizeof *a), *b = malloc((size_t)12 * (size_t)V * sizeof *b);
    CHECK_EQ_INT((int)forward_rows_of(REPLAY_COMPACT, 19, 3, a), 10);
    CHECK_EQ_INT((int)forward_rows_of(REPLAY_COMPACT, 19, 1, b), 10);
    CHECK_MSG(same_floats(a + 2 * V, b, V), "the last of 3 logits rows differs from the single row");
    CHECK_EQ_INT((int)forward_rows_of(REPLAY_COMPACT, 19, 12, a), 19);
    CHECK_EQ_INT((int)forward_rows_of(REPLAY_OFF, 19, 12, b), 19);
    CHECK_MSG(same_floats(a, b, 12 * V), "12 logits rows in compact mode differ from off's");
    free(a), free(b);
}

TEST(chunked_prefill_ends_in_the_same_final_replay) {
    /* the final chunk [26, 40) has 14 > K rows: its replay reads no decoder row of earlier chunks */
    set_mode(REPLAY_COMPACT, 10);
    const int plans[][4] = {{26, 14, 0, 0}, {10, 16, 14, 0}, {3, 7, 16, 14}, {1, 25, 14, 0}};
    const int counts[] = {2, 3, 4, 3};
    float *ref = malloc((size_t)V * sizeof *ref), *got = malloc((size_t)V * sizeof *got);
    RunState *r = oracle_prefill(plans[0], 2, 10, ref);
    for (int p = 0; p < 4; p++) {
        RunState *st = prefill(plans[p], counts[p], got);
        CHECK_MSG(same_floats(got, ref, V), "plan %d: final chunk's logits differ", p);
        check_same_state(st, r, model->d.n_layers, "chunkings");
        state_free(st);
    }
    state_free(r);
    free(ref), free(got);
}

TEST(window_floor_hides_every_ring_row_below_it) {
    /* layer 1 (window only): a 4-row chunk at 16 with its window floored at 16 reads no ring row;
     * poisoning the ring's rows below 16 must leave its output unchanged and finite */
    set_mode(REPLAY_OFF, 10);
    const ModelDims *d = &model->d;
    int64_t D = d->dim, n = 4, s = 16, row0[2] = {0, 4}, pos[4] = {16, 17, 18, 19}, floor = 16;
    int len[1] = {16};
    float *lg = malloc((size_t)V * sizeof *lg), *a = malloc((size_t)(n * D) * sizeof *a);
    float *out[3];
    for (int64_t i = 0; i < n * D; i++) a[i] = (float)((i * 7919) % 97) / 97.0f - 0.5f;
    for (int run = 0; run < 3; run++) {
        RunState *st = prefill(len, 1, lg);
        if (run == 1)
            for (int64_t p = s - d->window; p < s; p++)
                for (int c = 0; c < d->head_dim; c++) state_window_row(st, 1, p)[c] = NAN;
        RowBatch rb = {1, &st, row0, &s, pos, run < 2 ? &floor : NULL, false};
        AttnShared sh;
        attn_shared_init(&sh, model->ws, n);
        out[run] = malloc((size_t)(n * D) * sizeof *out[run]);
        CHECK_MSG(attention_forward(model, &rb, 1, a, &sh, out[run]) == 0, "%s", di_error_message());
        state_free(st);
    }
    int finite = 1;
    for (int64_t i = 0; i < n * D; i++) finite &= isfinite(out[1][i]) != 0;
    CHECK(finite);
    CHECK_MSG(same_floats(out[0], out[1], n * D), "a poisoned row below the floor reached the output");
    CHECK_MSG(!same_floats(out[0], out[2], n * D), "the floor changed nothing (the ring rows below it matter without it)");
    for (int run = 0; run < 3; run++) free(out[run]);
    free(lg), free(a);
}

/* The engine (paged state, its own chunking) in compact mode: a 30-token prompt in chunks of 12
 * (12, 12, 6: the last within K, so it reads the second chunk's replayed decoder rows) then greedy
 * decoding gives the tokens and logits rows of the same chunks through model_forward. */
enum { E_PROMPT = 30, E_CHUNK = 12, E_GEN = 4 };
typedef struct {
    float *rows; /* [E_GEN][V] */
    int n;
} EngineRows;

static void observe_rows(void *user, uint64_t id, int64_t pos, const float *logits, int32_t vocab) {
    EngineRows *e = user;
    (void)id, (void)pos;
    if (e->n < E_GEN) memcpy(e->rows + (size_t)e->n++ * (size_t)vocab, logits, (size_t)vocab * sizeof *logits);
}

static int argmax(const float *x, int64_t n) {
    int best = 0;
    for (int v = 1; v < n; v++)
        if (x[v] > x[best]) best = v;
    return best;
}

TEST(the_engine_prefills_in_compact_mode_and_decodes) {
    set_mode(REPLAY_COMPACT, 8);
    float *want = malloc((size_t)E_GEN * (size_t)V * sizeof *want), *got = calloc((size_t)E_GEN * (size_t)V, sizeof *got);
    int32_t seq[E_PROMPT + E_GEN], ref[E_GEN];
    memcpy(seq, toks, sizeof(int32_t) * E_PROMPT);
    RunState *st = state_create(&model->d);
    for (int s = 0; s < E_PROMPT; s += E_CHUNK) {
        int n = E_PROMPT - s < E_CHUNK ? E_PROMPT - s : E_CHUNK;
        CHECK(model_forward(model, st, seq + s, n, s, s + n == E_PROMPT ? want : NULL, false, NULL) == 0);
    }
    for (int k = 0; k < E_GEN; k++) {
        ref[k] = seq[E_PROMPT + k] = argmax(want + (size_t)k * (size_t)V, V);
        float *next = want + (size_t)(k + 1) * (size_t)V;
        if (k + 1 < E_GEN) CHECK(model_forward(model, st, &seq[E_PROMPT + k], 1, E_PROMPT + k, next, false, NULL) == 0);
    }
    state_free(st);
    DiEngineOptions opts;
    di_engine_options_init(&opts);
    opts.async_scheduling = 0;
    opts.max_batch_tokens = E_CHUNK;
    opts.max_prefill_chunk = E_CHUNK;
    DiEngine *e = di_engine_create_with_runner(di_v41_runner_create(model, 0, 4096), &opts);
    CHECK_MSG(e != NULL, "%s", di_last_error());
    if (e) {
        EngineRows rows = {got, 0};
        di_engine_set_logits_observer(e, observe_rows, &rows);
        DiSamplingParams p;
        di_sampling_params_init(&p);
        p.temperature = 0;
        p.max_tokens = E_GEN;
        p.ignore_eos = 1;
        DiRequestInput in = {.prompt_ids = toks, .n_prompt_ids = E_PROMPT};
        uint64_t id;
        DiRequestOutput res;
        CHECK(di_engine_add_request(e, &in, &p, NULL, NULL, &id) == 0 && di_engine_run(e) == 0);
        CHECK(di_engine_get_output(e, id, &res) == 0 && res.n_tokens == E_GEN);
        CHECK_MSG(res.n_tokens == E_GEN && memcmp(res.token_ids, ref, sizeof ref) == 0, "engine tokens differ from model_forward's");
        CHECK_EQ_INT(rows.n, E_GEN);
        CHECK_MSG(same_floats(got, want, (int64_t)E_GEN * V), "engine logits rows differ from model_forward's");
        di_engine_destroy(e);
    }
    free(want), free(got);
}

TEST(bad_settings_are_refused_with_their_cause) {
    CHECK(model_set_prefill_replay(model, REPLAY_COMPACT, 7) != 0);
    CHECK(strstr(di_error_message(), "sliding window of 8") != NULL);
    CHECK(model_set_prefill_replay(NULL, REPLAY_COMPACT, 10) != 0);
    CHECK(model_set_prefill_replay(model, (ReplayMode)7, 10) != 0);
    /* a per-layer trace needs every row in every layer */
    set_mode(REPLAY_COMPACT, 8);
    RunState *st = state_create(&model->d);
    float *lo = malloc((size_t)(model->d.n_layers * 12 * model->d.hc_mult * model->d.dim) * sizeof *lo);
    ForwardTrace tr = {.layer_out = lo};
    CHECK(model_forward(model, st, toks, 12, 0, NULL, false, &tr) != 0);
    CHECK(strstr(di_error_message(), "bounded replay") != NULL);
    CHECK_EQ_INT((int)st->n_pos, 0); /* refused before any state changed */
    CHECK(model_forward(model, st, toks, 8, 0, NULL, false, &tr) == 0); /* nothing trimmed: allowed */
    state_free(st);
    free(lo);
}

int main(void) {
    di_log_set_level(DI_LOG_ERROR);
    if (di_tiny_default_dir(dir, sizeof dir) != 0 || di_tiny_ensure(dir) != 0 || !(model = model_load(dir, MODE_REF))) {
        fprintf(stderr, "%s\n", di_error_message());
        return 1;
    }
    int64_t n_map;
    const int32_t *cid;
    if (di_tiny_engram_token_map(&cid, &n_map) != 0 || model_set_engram_token_map(model, cid, n_map) != 0) {
        fprintf(stderr, "%s\n", di_error_message());
        return 1;
    }
    V = model->d.vocab;
    for (int i = 0; i < 64; i++) toks[i] = (int32_t)(3 + (i * 131 + 17) % (V - 3));
    RUN_TEST(off_equals_a_straightforward_full_forward);
    RUN_TEST(prompts_up_to_k_are_identical_in_both_modes);
    RUN_TEST(longer_prompts_equal_the_truncated_window_oracle);
    RUN_TEST(global_kv_and_index_keys_are_the_same_in_both_modes);
    RUN_TEST(decoder_rows_are_k_per_request_chunk_and_batching_changes_nothing);
    RUN_TEST(logits_of_more_rows_than_k_keep_the_chunk_whole);
    RUN_TEST(chunked_prefill_ends_in_the_same_final_replay);
    RUN_TEST(window_floor_hides_every_ring_row_below_it);
    RUN_TEST(the_engine_prefills_in_compact_mode_and_decodes);
    RUN_TEST(bad_settings_are_refused_with_their_cause);
    model_free(model);
    return TEST_SUMMARY();
}
