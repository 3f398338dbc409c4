/* runner_v41.c — the V4.1 model as a runner (see runner_v41.h). */
#include "engine/runner_v41.h"

#include "base/error.h"
#include "base/mem.h"
#include "model/forward.h"
#include "model/state.h"

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
    int cap_seqs;
} V41Runner;

static size_t v41_pages_for_tokens(const DiRunner *r, int64_t n_tokens) {
    return (size_t)state_pages_for_tokens(&((const V41Runner *)r)->layout, n_tokens);
}

static int ensure_batch_capacity(V41Runner *r, int n) {
    if (n <= r->cap_seqs) return 0;
    ForwardSeq *fseqs = di_realloc_array(r->fseqs, (size_t)n, sizeof *fseqs, "forward batch");
    if (!fseqs) return -1;
    r->fseqs = fseqs;
    RunState **views = di_realloc_array(r->views, (size_t)n, sizeof *views, "state views");
    if (!views) return -1;
    r->views = views;
    for (int i = r->cap_seqs; i < n; i++) r->views[i] = NULL;
    for (int i = r->cap_seqs; i < n; i++) {
        r->views[i] = state_create_paged(&r->model->d);
        if (!r->views[i]) return -1;
        r->cap_seqs = i + 1;
    }
    return 0;
}

/* The whole batch in one model_forward_batch: every projection reads its weights once for all
 * rows, attention runs per request; each request's result is bit-identical to its own forward. */
static int v41_forward(DiRunner *base, const DiRunnerBatch *batch) {
    V41Runner *r = (V41Runner *)base;
    if (ensure_batch_capacity(r, batch->n_seqs) != 0) return -1;
    int row = 0;
    for (int i = 0; i < batch->n_seqs; i++) {
        const DiRunnerSeq *seq = &batch->seqs[i];
        if (seq->n_logits > 1 || seq->speculative)
            return di_errorf("sequence %d: several logits rows and speculative rows are not supported", i);
        RunState *st = r->views[i];
        state_reset(st);
        if (state_attach_pages(st, &r->layout, seq->pages, seq->n_pages, seq->start_pos) != 0)
            return di_error_wrap("sequence %d", i);
        if ((int64_t)seq->n_pages < state_pages_for_tokens(&r->layout, seq->start_pos + seq->n_tokens))
            return di_errorf("sequence %d: %zu state pages cannot hold %lld positions", i, seq->n_pages,
                             (long long)(seq->start_pos + seq->n_tokens));
        float *logits = seq->n_logits > 0 ? batch->logits + (size_t)row++ * (size_t)base->vocab_size : NULL;
        r->fseqs[i] = (ForwardSeq){st, seq->tokens, seq->n_tokens, seq->start_pos, logits, false};
    }
    if (model_forward_batch(r->model, r->fseqs, batch->n_seqs, NULL) != 0)
        return di_error_wrap("model forward of %d sequences", batch->n_seqs);
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
    return 0;
}

static void v41_destroy(DiRunner *base) {
    V41Runner *r = (V41Runner *)base;
    if (r->lent_pool) r->model->pool = r->model_pool;
    if (r->own_model) model_free(r->model);
    for (int i = 0; i < r->cap_seqs; i++) state_free(r->views[i]);
    free(r->views);
    free(r->fseqs);
    free(r);
}

static const DiRunnerOps v41_ops = {v41_pages_for_tokens, v41_forward, v41_destroy, v41_use_threads, v41_reserve_rows, NULL, NULL};

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
    r->eos[0] = (int32_t)model->cfg.eos_token_id;
    r->base.ops = &v41_ops;
    r->base.vocab_size = model->d.vocab;
    r->base.page_bytes = page_bytes;
    r->base.eos_ids = r->eos;
    r->base.n_eos_ids = 1;
    r->base.name = "DeepSeek-V4.1 model";
    return &r->base;
}
