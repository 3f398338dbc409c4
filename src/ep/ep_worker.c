/* ep_worker.c — an expert rank's answers to rank 0's messages (ep.h EpWorker).
 *
 * INIT loads the model (model_load_expert_rank maps the shards and binds every tensor, reading
 * no weight bytes: the one per-matrix load-time pass, the FP8 subnormal map, a speed hint, is
 * skipped there, and FP4 experts need none), then gives back what loading left resident (the
 * vectors it read, the freed header-parse heap), so the pages an expert rank has resident are
 * those of the experts it runs: each is faulted in on first use.  INIT also fixes the dispatch
 * format (ep_dispatch.h EpWire) the LAYER payloads use.
 * PLAN swaps the placement and gives back (MADV_DONTNEED) the pages of every expert the rank no
 * longer holds; an expert it newly holds is faulted in by the next LAYER that uses it (or at
 * once with --ep-prefault: no page fault on the serving path), so moving experts needs no copy
 * and no pause.  LAYER runs the experts (ep_dispatch.h).  STOP answers
 * with the rank's memory figures and ends the loop. */
#include "ep/ep.h"

#include "base/env.h"
#include "base/error.h"
#include "base/mem.h"
#include "base/threadpool.h"
#include "model/workspace.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ep_worker_init(EpWorker *w, int rank, Model *m) {
    memset(w, 0, sizeof *w);
    w->rank = rank;
    w->m = m;
}

void ep_worker_free(EpWorker *w) {
    if (!w) return;
    if (w->own_model && w->m) {
        DiThreadPool *pool = w->m->pool;
        model_free(w->m);
        di_pool_destroy(pool);
    }
    ep_placement_free(&w->pl);
    ep_serve_free(&w->sv);
    free(w->reply);
    memset(w, 0, sizeof *w);
}

static int release_unheld(const EpWorker *w, const EpPlacement *pl, int layer);
#define ALL_LAYERS (-2) /* release_unheld's layer: every tensor */

/* What loading left behind that an expert rank never uses: the file pages of every tensor read at
 * load (the norms, biases and other vectors copied to float32, ~2.6 MB on the medium checkpoint)
 * and the heap pages the parse of the safetensors headers freed (~2.5 MB), which glibc keeps
 * resident until trimmed.  Only for a model INIT loaded (the in-process link shares its model). */
static int trim_after_load(EpWorker *w) {
    if (!w->own_model) return 0;
    if (release_unheld(w, NULL, ALL_LAYERS) != 0) return di_error_wrap("expert rank %d: giving back load-time pages", w->rank);
    malloc_trim(0);
    return 0;
}

/* INIT payload: int64 mode, rows, prefault (0/1), dispatch format (EpWire), the model directory
 * (bytes, no terminator). */
static int handle_init(EpWorker *w, const EpHeader *h, const uint8_t *p) {
    if (h->bytes < EP_INIT_WORDS * 8 + 1 || h->bytes > 4096 + EP_INIT_WORDS * 8)
        return di_errorf("INIT message of %lld bytes", (long long)h->bytes);
    int64_t word[EP_INIT_WORDS];
    memcpy(word, p, sizeof word);
    int64_t mode = word[0], rows = word[1], prefault = word[2], wire = word[3];
    char dir[4097];
    memcpy(dir, p + sizeof word, (size_t)h->bytes - sizeof word);
    dir[h->bytes - (int64_t)sizeof word] = 0;
    if (mode < MODE_REF || mode > MODE_EXACT || rows <= 0 || (prefault != 0 && prefault != 1) ||
        (wire != EP_WIRE_F32 && wire != EP_WIRE_FP8))
        return di_errorf("INIT: mode %lld, %lld rows, prefault %lld, dispatch format %lld", (long long)mode, (long long)rows,
                         (long long)prefault, (long long)wire);
    w->prefault = prefault == 1;
    w->wire = (EpWire)wire;
    if (!w->m) {
        int threads = 0;
        if (di_env_num_threads(&threads) != 0) return -1;
        DiThreadPool *pool = di_pool_create(threads);
        if (!pool) return di_error_wrap("expert rank %d: thread pool", w->rank);
        if (!(w->m = model_load_expert_rank(dir, (NumericsMode)mode))) {
            di_pool_destroy(pool);
            return di_error_wrap("expert rank %d: loading %s", w->rank, dir);
        }
        w->m->pool = pool;
        w->own_model = true;
        if (trim_after_load(w) != 0) return -1;
    }
    if (w->m->mode != (NumericsMode)mode) return di_errorf("expert rank %d: model mode differs from rank 0's", w->rank);
    if (ep_wire_check(w->wire, w->m->mode, w->m->d.dim) != 0) return di_error_wrap("expert rank %d", w->rank);
    return w->m->ws && w->m->ws->rows >= rows ? 0 : model_reserve_rows(w->m, rows);
}

int64_t ep_expert_pages(const Model *m, const ExpertWeights *ex, bool resident) {
    int64_t (*op)(const DiCheckpoint *, const void *, size_t) = resident ? di_checkpoint_prefault_pages : di_checkpoint_release_pages;
    const DiMatrix *mats[3] = {&ex->w1, &ex->w2, &ex->w3};
    int64_t sum = 0;
    for (int i = 0; i < 3; i++) {
        int64_t a = op(m->ck, mats[i]->data, (size_t)di_matrix_data_bytes(mats[i]));
        int64_t b = mats[i]->scale ? op(m->ck, mats[i]->scale, (size_t)di_matrix_scale_bytes(mats[i])) : 0;
        if (a < 0 || b < 0) return -1;
        sum += a + b;
    }
    return sum;
}

/* Give back every page of layer `layer`'s tensors (layer -1: of the tensors outside the layers;
 * ALL_LAYERS: of every tensor) that is not an expert pl places here (pl NULL: none).  With
 * prefault: the kernel maps whole page-cache folios around each page faulted in (tens of KiB), so
 * prefaulting the held experts also maps their neighbours in the file, which this rank never
 * reads; done layer by layer, the peak stays near the share. */
static int release_unheld(const EpWorker *w, const EpPlacement *pl, int layer) {
    const DiCheckpoint *ck = w->m->ck;
    for (size_t i = 0; i < di_checkpoint_n_tensors(ck); i++) {
        const DiTensorInfo *t = di_checkpoint_tensor_at(ck, i);
        int l = -1, e = -1, used = 0;
        bool in_layer = sscanf(t->name, "layers.%d.%n", &l, &used) == 1 && used > 0;
        if (layer != ALL_LAYERS && (in_layer ? l != layer : layer != -1)) continue;
        used = 0;
        if (pl && in_layer && sscanf(t->name, "layers.%d.ffn.experts.%d.%n", &l, &e, &used) == 2 && used > 0 &&
            ep_placement_holds(pl, w->rank, l, e))
            continue;
        if (di_checkpoint_release_pages(ck, t->data, t->nbytes) < 0) return -1;
    }
    return 0;
}

/* PLAN payload: int32 L, E, R, P, first_rank, then phy2log[L][R] and phy_rank[L][R]. */
static int handle_plan(EpWorker *w, const EpHeader *h, const uint8_t *p) {
    if (!w->m) return di_errorf("PLAN before INIT");
    int32_t dims[5];
    if (h->bytes < 20) return di_errorf("PLAN message of %lld bytes", (long long)h->bytes);
    memcpy(dims, p, sizeof dims);
    int64_t LR = (int64_t)dims[0] * dims[2];
    if (dims[0] != w->m->d.n_layers || dims[1] != w->m->d.n_experts || dims[0] <= 0 || dims[2] <= 0 || h->bytes != 20 + 8 * LR)
        return di_errorf("PLAN for %d layers of %d experts (%lld bytes); the model has %d of %d", dims[0], dims[1],
                         (long long)h->bytes, w->m->d.n_layers, w->m->d.n_experts);
    int32_t *arr = di_malloc((size_t)(2 * LR) * sizeof *arr, "plan");
    if (!arr) return -1;
    memcpy(arr, p + 20, (size_t)(8 * LR));
    EpPlacement pl;
    int rc = ep_placement_build(dims[0], dims[1], dims[2], dims[3], dims[4], arr, arr + LR, &pl);
    free(arr);
    if (rc != 0) return -1;
    for (int l = 0; l <= pl.n_layers; l++) {
        for (int e = 0; l < pl.n_layers && e < pl.n_experts; e++) {
            bool had = w->pl.nrep && ep_placement_holds(&w->pl, w->rank, l, e), has = ep_placement_holds(&pl, w->rank, l, e);
            if (had == has || (has && !w->prefault)) continue;
            int64_t b = ep_expert_pages(w->m, &w->m->w.layers[l].experts[e], has);
            if (b < 0) {
                ep_placement_free(&pl);
                return -1;
            }
            if (!has) w->stats.released_bytes += b;
        }
        if (w->prefault && release_unheld(w, &pl, l < pl.n_layers ? l : -1) != 0) {
            ep_placement_free(&pl);
            return -1;
        }
    }
    ep_placement_free(&w->pl);
    w->pl = pl;
    return 0;
}

/* Rank 0 may size its engine for more rows after INIT (the engine's max batch tokens).  A layer
 * message of n_tok tokens needs a workspace of n_tok rows: an expert may get every token (the
 * kernels' scratch is per row of one expert's call), and n_asg <= n_tok x top-k. */
static int grow_rows(EpWorker *w, int64_t n_tok) {
    const Workspace *ws = w->m ? w->m->ws : NULL;
    if (!ws) return di_errorf("expert rank %d: no workspace", w->rank);
    return n_tok <= ws->rows ? 0 : model_reserve_rows(w->m, n_tok);
}

static int reply_room(EpWorker *w, int64_t bytes) {
    if (bytes < 0) return di_errorf("reply of %lld bytes", (long long)bytes);
    size_t n = (size_t)(bytes + 3) / 4;
    if (n <= w->cap_reply) return 0;
    float *r = realloc(w->reply, n * sizeof *r);
    if (!r) return di_errorf("out of memory for a reply of %lld bytes", (long long)bytes);
    w->reply = r;
    w->cap_reply = n;
    return 0;
}

int ep_worker_handle(EpWorker *w, const EpHeader *h, const uint8_t *payload, const void **reply, bool *stop) {
    if (!w || !h || !reply || !stop || (h->bytes > 0 && !payload) || h->bytes < 0)
        return di_errorf("ep_worker_handle: invalid arguments");
    *reply = NULL;
    *stop = false;
    if (reply_room(w, h->reply_bytes) != 0) return -1;
    *reply = w->reply;
    int64_t word = 0;
    switch (h->cmd) {
    case EP_CMD_INIT:
        return handle_init(w, h, payload);
    case EP_CMD_PLAN:
        if (h->reply_bytes != 8 || handle_plan(w, h, payload) != 0) return di_error_wrap("expert rank %d: new plan", w->rank);
        word = w->stats.released_bytes;
        memcpy(w->reply, &word, 8);
        return 0;
    case EP_CMD_LAYER:
        if (!w->pl.nrep) return di_errorf("expert rank %d: LAYER before any PLAN", w->rank);
        if (h->reply_bytes != 4 * h->n_asg * (w->m ? w->m->d.dim : 0)) return di_errorf("LAYER reply of %lld bytes", (long long)h->reply_bytes);
        if (grow_rows(w, h->n_tok) != 0) return -1;
        if (ep_serve_layer(&w->sv, w->m, &w->pl, w->rank, w->wire, h, payload, w->reply) != 0)
            return di_error_wrap("expert rank %d", w->rank);
        w->stats.layers_served++;
        return 0;
    case EP_CMD_STOP:
        if (h->reply_bytes != (int64_t)sizeof w->stats) return di_errorf("STOP reply of %lld bytes", (long long)h->reply_bytes);
        if (ep_self_memory(&w->stats.hwm_kb, &w->stats.rss_kb) != 0) return -1;
        memcpy(w->reply, &w->stats, sizeof w->stats);
        *stop = true;
        return 0;
    default:
        return di_errorf("expert rank %d: unknown command %lld", w->rank, (long long)h->cmd);
    }
}
