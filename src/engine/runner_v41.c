/* runner_v41.c — the V4.1 model as a runner (see runner_v41.h): batched forwards over paged
 * state, several logits rows per sequence, DSpark speculation (draft; commit cuts a verify
 * chunk back to its accepted rows through model/state_undo.h), and the KV block cache's export /
 * import of compressed-KV and index-key entries with the encoder SWA bounded replay after a hit
 * (engine-features.md §2.4). */
#include "engine/runner_v41.h"

#include "base/error.h"
#include "base/mem.h"
#include "model/dspark.h"
#include "model/forward.h"
#include "model/state.h"
#include "model/state_undo.h"
#include "model/workspace.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Big enough for a release-size ring row (512 floats = 2 KiB) with little padding. */
#define V41_PAGE_BYTES 65536

/* Every row of a request's state lives in its engine pages, in the model's paged layout
 * (model/state.h): window rings, DSpark rings, pending compressor rows and the Engram history
 * first, then compressed-KV / index-key entries in the order a growing context needs them.  The
 * counters are functions of the position count, so pages + start_pos describe the state fully;
 * the RunState objects here are only per-batch-slot views, re-attached before every forward. */
typedef struct {
    DiRunner base;
    Model *model;
    int own_model;
    bool lent_pool;           /* the engine's pool is in model->pool (v41_use_threads) */
    DiThreadPool *model_pool; /* what model->pool was before, restored on destroy */
    int32_t eos[1];
    StateLayout layout;
    ForwardSeq *fseqs; /* scratch: the batch as model_forward_batch takes it */
    RunState **views;  /* one paged view per batch slot */
    int *undo_record;  /* per batch slot: its state_undo record, -1 when not speculative */
    int cap_seqs;
    /* speculation */
    StateUndo *undo;
    int64_t reserved_rows;     /* the engine's max batch rows (reserve_rows), sizes the undo */
    bool uncommitted;          /* a forward with speculative rows awaits commit() */
    struct DraftScratch *drafts; /* draft(): per-request views and outputs, grown to the most asked */
    uint64_t identity[2];      /* the KV block cache's model fingerprint (model_identity) */
} V41Runner;

static size_t v41_pages_for_tokens(const DiRunner *r, int64_t n_tokens) {
    return (size_t)state_pages_for_tokens(&((const V41Runner *)r)->layout, n_tokens);
}

static void v41_final_pages(const DiRunner *r, int64_t n_tokens, size_t *first, size_t *end) {
    const DiStateLayout *l = &((const V41Runner *)r)->layout.pages;
    *first = l->fixed_pages;
    *end = di_state_layout_final_pages(l, n_tokens);
}

static int ensure_batch_capacity(V41Runner *r, int n) {
    if (n <= r->cap_seqs) return 0;
    ForwardSeq *fseqs = di_realloc_array(r->fseqs, (size_t)n, sizeof *fseqs, "forward batch");
    if (!fseqs) return -1;
    r->fseqs = fseqs;
    RunState **views = di_realloc_array(r->views, (size_t)n, sizeof *views, "state views");
    if (!views) return -1;
    r->views = views;
    int *rec = di_realloc_array(r->undo_record, (size_t)n, sizeof *rec, "undo records");
    if (!rec) return -1;
    r->undo_record = rec;
    for (int i = r->cap_seqs; i < n; i++) r->views[i] = NULL;
    for (int i = r->cap_seqs; i < n; i++) {
        r->views[i] = state_create_paged(&r->model->d);
        if (!r->views[i]) return -1;
        r->cap_seqs = i + 1;
    }
    return 0;
}

/* Attach batch slot i's view to the sequence's pages, holding n_pos positions. */
static int attach_view(V41Runner *r, int i, const DiRunnerSeq *seq, int64_t n_pos) {
    RunState *st = r->views[i];
    state_reset(st);
    if (state_attach_pages(st, &r->layout, seq->pages, seq->n_pages, n_pos) != 0) return di_error_wrap("sequence %d", i);
    return 0;
}

/* A speculative sequence's undo record; the undo is sized once, at the first verify. */
static int save_undo(V41Runner *r, int i, const DiRunnerSeq *seq) {
    int64_t want = r->reserved_rows > 0 ? r->reserved_rows : WORKSPACE_DEFAULT_ROWS;
    if (state_undo_reserve(r->undo, want) != 0) return -1;
    r->undo_record[i] = state_undo_save(r->undo, r->views[i], seq->n_tokens);
    if (r->undo_record[i] < 0) return di_error_wrap("speculative sequence %d", i);
    return 0;
}

/* The whole batch in one model_forward_batch: every projection reads its weights once for all
 * rows, attention runs per request; each request's result is bit-identical to its own forward. */
static int v41_forward(DiRunner *base, const DiRunnerBatch *batch) {
    V41Runner *r = (V41Runner *)base;
    if (!batch || !batch->seqs || batch->n_seqs <= 0) return di_errorf("v41 runner: empty batch");
    if (r->uncommitted) return di_errorf("v41 runner: forward before the last speculative batch was committed");
    if (ensure_batch_capacity(r, batch->n_seqs) != 0) return -1;
    state_undo_clear(r->undo);
    int64_t row = 0;
    bool spec = false;
    for (int i = 0; i < batch->n_seqs; i++) {
        const DiRunnerSeq *seq = &batch->seqs[i];
        if (seq->n_tokens < 1 || seq->n_logits < 0 || seq->n_logits > seq->n_tokens)
            return di_errorf("sequence %d: n_logits %d outside [0, n_tokens = %d]", i, seq->n_logits, seq->n_tokens);
        if (attach_view(r, i, seq, seq->start_pos) != 0) return -1;
        /* a bounded replay after a block-cache hit (forward.c checks the range) */
        r->views[i]->replay_start = seq->replay_start;
        r->views[i]->replay_end = seq->replay_end;
        if ((int64_t)seq->n_pages < state_pages_for_tokens(&r->layout, seq->start_pos + seq->n_tokens))
            return di_errorf("sequence %d: %zu state pages cannot hold %lld positions", i, seq->n_pages,
                             (long long)(seq->start_pos + seq->n_tokens));
        r->undo_record[i] = -1;
        if (seq->speculative && save_undo(r, i, seq) != 0) {
            state_undo_clear(r->undo);
            return -1;
        }
        spec |= seq->speculative;
        float *logits = seq->n_logits > 0 ? batch->logits + (size_t)row * (size_t)base->vocab_size : NULL;
        row += seq->n_logits;
        r->fseqs[i] = (ForwardSeq){r->views[i], seq->tokens, seq->n_tokens, seq->start_pos, logits, false, seq->n_logits};
    }
    if (model_forward_batch(r->model, r->fseqs, batch->n_seqs, NULL) != 0) {
        state_undo_clear(r->undo);
        return di_error_wrap("model forward of %d sequences", batch->n_seqs);
    }
    r->uncommitted = spec;
    return 0;
}

/* Cut every speculative sequence of the last batch back to its accepted rows. */
static int v41_commit(DiRunner *base, const DiRunnerBatch *batch, const int32_t *keep) {
    V41Runner *r = (V41Runner *)base;
    if (!batch || !keep || !batch->seqs || batch->n_seqs > r->cap_seqs) return di_errorf("v41 commit: invalid arguments");
    if (!r->uncommitted) return di_errorf("v41 commit: no speculative forward to commit");
    int rc = 0;
    for (int i = 0; i < batch->n_seqs && rc == 0; i++) {
        const DiRunnerSeq *seq = &batch->seqs[i];
        if (!seq->speculative) continue;
        if (r->undo_record[i] < 0) rc = di_errorf("v41 commit: sequence %d was not speculative in the last forward", i);
        else if (keep[i] < 1 || keep[i] > seq->n_tokens) rc = di_errorf("v41 commit: sequence %d keeps %d of %d rows", i, keep[i], seq->n_tokens);
        else if (attach_view(r, i, seq, seq->start_pos + seq->n_tokens) != 0 ||
                 state_undo_commit(r->undo, r->undo_record[i], r->model, r->views[i], seq->tokens, keep[i]) != 0)
            rc = di_error_wrap("v41 commit: sequence %d", i);
    }
    state_undo_clear(r->undo);
    r->uncommitted = false;
    return rc;
}

/* The engine's pick for one request; NULL picks the argmax (ties to the lower id), as greedy
 * drafting does, so requests with and without a pick share one batched draft. */
typedef struct {
    DiDraftPick pick;
    void *ctx;
} PickAdapter;

static int32_t pick_adapter(void *ctx, const float *logits, int64_t vocab, int row) {
    const PickAdapter *a = ctx;
    if (a->pick) return a->pick(a->ctx, row, logits, (int32_t)vocab);
    int32_t best = 0;
    for (int64_t v = 1; v < vocab; v++)
        if (logits[v] > logits[best]) best = (int32_t)v;
    return best;
}

struct DraftScratch {
    int cap;
    RunState **views;
    DraftOutput *outs;
    int32_t *anchors;
    PickAdapter *adapters;
    DraftSampler *samplers;
    float *base, *logits; /* [cap][draft_block][vocab]: base logits; logits when the caller has none */
};

static void draft_scratch_free(struct DraftScratch *ds) {
    if (!ds) return;
    for (int i = 0; i < ds->cap; i++) state_free(ds->views[i]);
    free(ds->views);
    free(ds->outs);
    free(ds->anchors);
    free(ds->adapters);
    free(ds->samplers);
    free(ds->base);
    free(ds->logits);
    free(ds);
}

/* Room for n requests' drafts (grows to the most requests one call has drafted). */
static int draft_capacity(V41Runner *r, int n) {
    struct DraftScratch *ds = r->drafts;
    if (n <= ds->cap) return 0;
    size_t rows = (size_t)n * (size_t)r->model->d.dspark_block * (size_t)r->model->d.vocab;
    RunState **views = di_realloc_array(ds->views, (size_t)n, sizeof *views, "draft views");
    if (!views) return -1;
    ds->views = views;
    for (int i = ds->cap; i < n; i++) ds->views[i] = NULL;
    if (!(ds->outs = di_realloc_array(ds->outs, (size_t)n, sizeof *ds->outs, "draft outputs")) ||
        !(ds->anchors = di_realloc_array(ds->anchors, (size_t)n, sizeof *ds->anchors, "draft anchors")) ||
        !(ds->adapters = di_realloc_array(ds->adapters, (size_t)n, sizeof *ds->adapters, "draft picks")) ||
        !(ds->samplers = di_realloc_array(ds->samplers, (size_t)n, sizeof *ds->samplers, "draft samplers")) ||
        !(ds->base = di_realloc_array(ds->base, rows, sizeof(float), "draft logits")) ||
        !(ds->logits = di_realloc_array(ds->logits, rows, sizeof(float), "draft logits")))
        return -1; /* what was grown stays owned by ds (freed with it) */
    for (int i = ds->cap; i < n; i++) {
        if (!(ds->views[i] = state_create_paged(&r->model->d))) return -1;
        ds->cap = i + 1;
    }
    return 0;
}

/* Request i's view, output arrays and pick. */
static int draft_prepare(V41Runner *r, const DiRunnerDraft *dr, int i) {
    struct DraftScratch *ds = r->drafts;
    size_t block = (size_t)r->model->d.dspark_block * (size_t)r->model->d.vocab;
    if (!dr->pages || !dr->tokens || !dr->confidence || dr->start_pos < 0)
        return di_errorf("v41 draft %d: invalid arguments (start_pos %lld)", i, (long long)dr->start_pos);
    state_reset(ds->views[i]);
    if (state_attach_pages(ds->views[i], &r->layout, dr->pages, dr->n_pages, dr->start_pos) != 0) return di_error_wrap("v41 draft %d", i);
    ds->outs[i] = (DraftOutput){ds->base + i * block, dr->logits ? dr->logits : ds->logits + i * block, dr->confidence, dr->tokens};
    ds->anchors[i] = dr->anchor;
    ds->adapters[i] = (PickAdapter){dr->pick, dr->pick_ctx};
    ds->samplers[i] = (DraftSampler){pick_adapter, &ds->adapters[i]};
    return 0;
}

/* Every request's block in one batched drafter pass (the drafter only reads the states). */
static int v41_draft(DiRunner *base, const DiRunnerDraft *drafts, int n) {
    V41Runner *r = (V41Runner *)base;
    if (!drafts || n < 0) return di_errorf("v41 draft: invalid arguments");
    if (r->uncommitted) return di_errorf("v41 draft: the last speculative batch is not committed");
    if (n == 0) return 0;
    if (draft_capacity(r, n) != 0) return di_error_wrap("v41 draft: room for %d requests", n);
    bool any_pick = false;
    for (int i = 0; i < n; i++) {
        if (draft_prepare(r, &drafts[i], i) != 0) return -1;
        any_pick |= drafts[i].pick != NULL;
    }
    struct DraftScratch *ds = r->drafts;
    if (dspark_draft_batch(r->model, ds->views, ds->anchors, NULL, any_pick ? ds->samplers : NULL, ds->outs, n) != 0)
        return di_error_wrap("v41 draft of %d requests", n);
    return 0;
}

/* The model's kernels run on the engine's threads.  The model may outlive the runner (own_model
 * 0, as in tests), so destroy gives back the pool it had. */
static void v41_use_threads(DiRunner *base, DiThreadPool *pool) {
    V41Runner *r = (V41Runner *)base;
    if (!r->lent_pool) r->model_pool = r->model->pool;
    r->lent_pool = true;
    r->model->pool = pool;
}

/* The model's workspace is sized for the engine's largest step, so no step is split into
 * several forwards (which would read the weights once per piece). */
static int v41_reserve_rows(DiRunner *base, int64_t rows) {
    V41Runner *r = (V41Runner *)base;
    if (model_reserve_rows(r->model, rows) != 0) return di_error_wrap("v41 runner: workspace for %lld rows", (long long)rows);
    r->reserved_rows = rows;
    return 0;
}

static void v41_destroy(DiRunner *base) {
    V41Runner *r = (V41Runner *)base;
    if (r->lent_pool) r->model->pool = r->model_pool;
    if (r->own_model) model_free(r->model);
    for (int i = 0; i < r->cap_seqs; i++) state_free(r->views[i]);
    free(r->views);
    free(r->undo_record);
    state_undo_free(r->undo);
    draft_scratch_free(r->drafts);
    free(r->fseqs);
    free(r);
}

/* The positions before a block-cache hit at H that a replay must recompute for the fixed rows to
 * be a cold prefill's (engine-features.md §2.6, "dependency-preserving").  Layer l's window ring
 * holds KV projected from layer l's input, and a query at H reads positions [H - W + 1, H]; a row's
 * output at layer l is exact once its window [p - W + 1, p] at l's input is, so with the replay
 * starting at s layer l's input is exact from s + l (W - 1).  The DSpark stages read the top
 * layer's output (one more W - 1) and attend over their own rings in turn (W - 1 each): the last
 * ring row a decode step reads is exact when H - W + 1 >= s + (n_layers + n_mtp) (W - 1), so
 * W + (n_layers + n_mtp)(W - 1) covers it with a row to spare.  The compressor's pending rows are
 * empty at a block boundary (blocks are whole groups) and the Engram look-back is shorter than a
 * window. */
static int32_t v41_exact_replay_rows(const ModelDims *d) {
    int64_t rows = (int64_t)d->window + (int64_t)(d->n_layers + d->n_mtp) * (d->window - 1);
    return rows > INT32_MAX ? 0 : (int32_t)rows;
}

static size_t v41_block_bytes(const DiRunner *base, int block_tokens) {
    return state_block_bytes(&((const V41Runner *)base)->layout, block_tokens);
}

static int v41_export_block(const DiRunner *base, uint8_t *const *pages, size_t n_pages, int64_t first, int block_tokens,
                            void *out) {
    if (state_export_block(&((const V41Runner *)base)->layout, pages, n_pages, first, block_tokens, out) != 0)
        return di_error_wrap("v41 runner: exporting the block at %lld", (long long)first);
    return 0;
}

static int v41_import_block(const DiRunner *base, uint8_t *const *pages, size_t n_pages, int64_t first, int block_tokens,
                            const void *in) {
    if (state_import_block(&((const V41Runner *)base)->layout, pages, n_pages, first, block_tokens, in) != 0)
        return di_error_wrap("v41 runner: importing the block at %lld", (long long)first);
    return 0;
}

/* The model's own counts (model.h expert_load), which moe_forward adds to. */
static int v41_expert_load(DiRunner *base, DiExpertLoad *out) {
    const Model *m = ((V41Runner *)base)->model;
    const ModelDims *d = &m->d;
    if (!m->expert_load) return di_errorf("v41 runner: the model keeps no expert load counts");
    *out = (DiExpertLoad){m->expert_load, d->n_layers, d->n_experts, m->draft_expert_load,
                          m->draft_expert_load ? d->n_mtp : 0, m->draft_expert_load ? d->dspark_experts : 0};
    return 0;
}

static const DiRunnerOps v41_ops = {v41_pages_for_tokens, v41_forward, v41_destroy, v41_use_threads, v41_reserve_rows, NULL, v41_commit,
                                    v41_block_bytes, v41_export_block, v41_import_block, v41_expert_load, v41_final_pages};
static const DiRunnerOps v41_ops_dspark = {v41_pages_for_tokens, v41_forward, v41_destroy, v41_use_threads, v41_reserve_rows, v41_draft,
                                           v41_commit, v41_block_bytes, v41_export_block, v41_import_block, v41_expert_load,
                                           v41_final_pages};

/* The drafter's scratch, when the checkpoint has DSpark stages and taps. */
static int setup_drafter(V41Runner *r) {
    const ModelDims *d = &r->model->d;
    if (!r->model->w.has_dspark || d->n_mtp <= 0 || d->n_taps <= 0) return 0;
    if (d->dspark_block <= 0 || d->dspark_block > DSPARK_MAX_BLOCK) return di_errorf("v41 runner: DSpark block size %d", d->dspark_block);
    r->drafts = di_calloc(1, sizeof *r->drafts, "draft scratch");
    if (!r->drafts) return -1;
    r->base.ops = &v41_ops_dspark;
    r->base.draft_block = d->dspark_block;
    return draft_capacity(r, 1);
}

DiRunner *di_v41_runner_create(Model *model, int own_model, size_t page_bytes) {
    if (!model) {
        di_errorf("v41 runner: no model");
        return NULL;
    }
    V41Runner *r = di_calloc(1, sizeof *r, "v41 runner");
    if (!r) return NULL;
    if (page_bytes == 0) page_bytes = V41_PAGE_BYTES;
    if (state_layout(&model->d, page_bytes, &r->layout) != 0) {
        free(r);
        di_error_wrap("v41 runner: laying out the request state in %zu-byte pages", page_bytes);
        return NULL;
    }
    r->model = model;
    r->own_model = own_model;
    r->base.ops = &v41_ops;
    r->undo = state_undo_create(&model->d);
    if (!r->undo || setup_drafter(r) != 0) {
        r->own_model = 0; /* the caller keeps its model when creation fails */
        v41_destroy(&r->base);
        di_error_wrap("v41 runner: speculative decoding state");
        return NULL;
    }
    r->eos[0] = (int32_t)model->cfg.eos_token_id;
    r->base.vocab_size = model->d.vocab;
    r->base.page_bytes = page_bytes;
    r->base.eos_ids = r->eos;
    r->base.n_eos_ids = 1;
    r->base.name = "DeepSeek-V4.1 model";
    r->base.be = model->be;
    r->base.replay_window = model->d.window;
    r->base.replay_exact_rows = v41_exact_replay_rows(&model->d);
    if (model_identity(model, r->identity) != 0) {
        r->own_model = 0;
        v41_destroy(&r->base);
        di_error_wrap("v41 runner: the model's fingerprint");
        return NULL;
    }
    r->base.identity = r->identity;
    r->base.identity_len = sizeof r->identity;
    return &r->base;
}
