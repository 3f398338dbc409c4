/* runner_v41.c — the V4.1 model as a runner (see runner_v41.h). */
#include "engine/runner_v41.h"

#include "base/error.h"
#include "base/mem.h"
#include "engine/state_layout.h"
#include "model/forward.h"
#include "model/state.h"

#include <stdlib.h>
#include <string.h>

/* Big enough for a release-size ring row (512 floats = 2 KiB) with little padding. */
#define V41_PAGE_BYTES 65536
#define HANDLE_MAGIC 0x3134564952554e52ULL /* "RNURIV41" */

typedef struct {
    uint64_t magic;
    RunState *state;
} StateHandle;

typedef struct {
    DiRunner base;
    Model *model;
    int own_model;
    int32_t eos[1];
    DiStateLayout layout;
    ForwardSeq *fseqs; /* scratch: the batch as model_forward_batch takes it */
    int cap_fseqs;
} V41Runner;

static size_t v41_pages_for_tokens(const DiRunner *r, int64_t n_tokens) {
    return di_state_layout_pages(&((const V41Runner *)r)->layout, n_tokens);
}

static StateHandle *handle_of(uint8_t *const *pages, size_t n_pages) {
    return n_pages > 0 ? (StateHandle *)pages[0] : NULL; /* component 0 of the layout, row 0 */
}

/* The request's RunState: a fresh one at position 0, else the one its first page names. */
static RunState *state_for(V41Runner *r, const DiRunnerSeq *seq) {
    StateHandle *h = handle_of(seq->pages, seq->n_pages);
    if (!h) {
        di_errorf("v41 runner: a sequence without state pages");
        return NULL;
    }
    if (seq->start_pos == 0) {
        if (h->magic == HANDLE_MAGIC && h->state) {
            state_reset(h->state);
            return h->state;
        }
        RunState *st = state_create(&r->model->d);
        if (!st) return NULL;
        h->magic = HANDLE_MAGIC;
        h->state = st;
        return st;
    }
    if (h->magic != HANDLE_MAGIC || !h->state) {
        di_errorf("v41 runner: no state for a sequence continuing at position %lld", (long long)seq->start_pos);
        return NULL;
    }
    if (h->state->n_pos != seq->start_pos) {
        di_errorf("v41 runner: the state holds %lld positions, the chunk starts at %lld", (long long)h->state->n_pos,
                  (long long)seq->start_pos);
        return NULL;
    }
    return h->state;
}

/* The whole batch in one model_forward_batch: every projection reads its weights once for all
 * rows, attention runs per request; each request's result is bit-identical to its own forward. */
static int v41_forward(DiRunner *base, const DiRunnerBatch *batch) {
    V41Runner *r = (V41Runner *)base;
    if (batch->n_seqs > r->cap_fseqs) {
        ForwardSeq *grown = di_realloc_array(r->fseqs, (size_t)batch->n_seqs, sizeof *grown, "forward batch");
        if (!grown) return -1;
        r->fseqs = grown;
        r->cap_fseqs = batch->n_seqs;
    }
    int row = 0;
    for (int i = 0; i < batch->n_seqs; i++) {
        const DiRunnerSeq *seq = &batch->seqs[i];
        RunState *st = state_for(r, seq);
        if (!st) return di_error_wrap("sequence %d", i);
        float *logits = seq->want_logits ? batch->logits + (size_t)row++ * (size_t)base->vocab_size : NULL;
        r->fseqs[i] = (ForwardSeq){st, seq->tokens, seq->n_tokens, seq->start_pos, logits, false};
    }
    if (model_forward_batch(r->model, r->fseqs, batch->n_seqs, NULL) != 0)
        return di_error_wrap("model forward of %d sequences", batch->n_seqs);
    return 0;
}

static void v41_release(DiRunner *base, uint8_t *const *pages, size_t n_pages) {
    (void)base;
    StateHandle *h = handle_of(pages, n_pages);
    if (!h || h->magic != HANDLE_MAGIC) return;
    state_free(h->state);
    h->magic = 0;
    h->state = NULL;
}

static void v41_destroy(DiRunner *base) {
    V41Runner *r = (V41Runner *)base;
    if (r->own_model) model_free(r->model);
    free(r->fseqs);
    free(r);
}

static const DiRunnerOps v41_ops = {v41_pages_for_tokens, v41_forward, v41_destroy};

/* The RunState's rows as state components (model/state.c allocates exactly these, in float32). */
static int describe_state(const ModelDims *d, DiStateComponent *c, int cap) {
    int n = 0;
    size_t f = sizeof(float);
    c[n++] = (DiStateComponent){"state handle", sizeof(StateHandle), 1, 0};
    c[n++] = (DiStateComponent){"window rings", (size_t)d->head_dim * f, (int64_t)d->window * d->n_layers, 0};
    if (d->n_mtp > 0)
        c[n++] = (DiStateComponent){"dspark rings", (size_t)d->head_dim * f, (int64_t)d->window * d->n_mtp, 0};
    if (d->engram_max_ngram > 1)
        c[n++] = (DiStateComponent){"engram history", sizeof(int32_t), d->engram_max_ngram - 1, 0};
    for (int L = 0; L < d->n_layers && n + 3 <= cap; L++) {
        if (d->kv_slot[L] < 0) continue;
        int m = d->ratio[L];
        if (m > 1) c[n++] = (DiStateComponent){"compressor pending rows", 2 * (size_t)d->head_dim * f, m - 1, 0};
        c[n++] = (DiStateComponent){"compressed kv", (size_t)d->head_dim * f, 0, m};
        c[n++] = (DiStateComponent){"index keys", (size_t)d->idx_head_dim * f, 0, m};
    }
    return n;
}

DiRunner *di_v41_runner_create(Model *model, int own_model, size_t page_bytes) {
    if (!model) {
        di_errorf("v41 runner: no model");
        return NULL;
    }
    V41Runner *r = di_calloc(1, sizeof *r, "v41 runner");
    if (!r) return NULL;
    DiStateComponent comps[DI_STATE_MAX_COMPONENTS];
    int n = describe_state(&model->d, comps, DI_STATE_MAX_COMPONENTS);
    if (page_bytes == 0) page_bytes = V41_PAGE_BYTES;
    if (di_state_layout_init(&r->layout, page_bytes, comps, n) != 0) {
        free(r);
        di_error_wrap("v41 runner: laying out the request state");
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
    r->base.release_state = v41_release;
    return &r->base;
}
