/* model.c — loading a model and its run-time parameters (model.h). */
#include "model/model.h"

#include "base/env.h"
#include "base/error.h"
#include "base/log.h"
#include "base/mem.h"
#include "model/engram_rng.h"
#include "model/forward.h"
#include "model/workspace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

int numerics_mode_parse(const char *name, NumericsMode *out) {
    if (!name || !out) return di_errorf("numerics mode: none given");
    if (strcmp(name, "ref") == 0) *out = MODE_REF;
    else if (strcmp(name, "kvq") == 0) *out = MODE_KVQ;
    else if (strcmp(name, "exact") == 0) *out = MODE_EXACT;
    else return di_errorf("unknown numerics mode '%s' (expected ref, kvq or exact)", name);
    return 0;
}

const char *numerics_mode_name(NumericsMode mode) {
    switch (mode) {
    case MODE_REF: return "ref";
    case MODE_KVQ: return "kvq";
    case MODE_EXACT: return "exact";
    }
    return "?";
}

bool model_act_quant(const Model *m) { return m->mode == MODE_REF; }
bool model_kv_quant(const Model *m) { return m->mode == MODE_REF || m->mode == MODE_KVQ; }

/* Products run on the workspace's kernel scratch, sized for every matrix of the model at its
 * rows and threads on the model's backend. */
static int matmul_on(const Model *m, const DiMatrix *w, const float *x, int64_t n, float *y, bool qa) {
    if (!m->ws) return di_errorf("matmul: the model has no workspace");
    return di_backend_matmul(m->be, m->pool, w, x, n, y, qa, m->ws->mm, m->ws->mm_floats);
}

int model_matmul(const Model *m, const DiMatrix *w, const float *x, int64_t n, float *y) { return matmul_on(m, w, x, n, y, false); }

typedef struct {
    ModelRowsFn fn;
    void *ctx;
    int64_t n;
    int parts;
} RowsJob;

static void rows_task(void *ctx, int task, int thread) {
    (void)thread;
    const RowsJob *j = ctx;
    int64_t r0 = j->n * task / j->parts, r1 = j->n * (task + 1) / j->parts;
    if (r1 > r0) j->fn(j->ctx, r0, r1);
}

void model_for_rows(const Model *m, int64_t n, ModelRowsFn fn, void *ctx) {
    if (n <= 0 || !fn) return;
    int threads = m && m->pool ? di_pool_threads(m->pool) : 1;
    if (threads <= 1 || n == 1) {
        fn(ctx, 0, n);
        return;
    }
    RowsJob j = {fn, ctx, n, (int)(n < threads ? n : threads)};
    di_pool_run(m->pool, j.parts, rows_task, &j);
}

int model_linear(const Model *m, const DiMatrix *w, const float *x, int64_t n, float *y, bool act_quant) {
    if (!w || !x || !y || n < 0) return di_errorf("linear: invalid arguments");
    if (!act_quant) return model_matmul(m, w, x, n, y);
    if (!m->ws || n > m->ws->rows || w->cols > m->ws->act_q_cols)
        return di_errorf("linear: %lld x %lld activations exceed the workspace's %lld x %lld", (long long)n, (long long)w->cols,
                         m->ws ? (long long)m->ws->rows : 0LL, m->ws ? (long long)m->ws->act_q_cols : 0LL);
    size_t count = (size_t)n * (size_t)w->cols; /* <= the workspace's act_q: rows x widest matrix */
    float *q = m->ws->act_q;
    memcpy(q, x, count * sizeof *q);
    int rc = m->be->roundtrip_fp8_block32(q, count);
    return rc == 0 ? matmul_on(m, w, q, n, y, true) : rc;
}

const RopeTable *model_rope(const Model *m, int ratio) { return ratio > 0 ? &m->rope_compress : &m->rope_main; }

void model_rope_apply(const Model *m, const RopeTable *t, float *x, int64_t n, int64_t pos, bool inverse) {
    m->be->rope(t->freq, t->dim, x, n, pos, inverse);
}

/* Primes and offsets come from the config (config.c derives them, §5.2 e). */
static int load_engram_layout(Model *m) {
    const DiModelConfig *c = &m->cfg;
    int64_t cols = c->engram_n_columns;
    if (m->d.n_engram == 0) return 0;
    if (cols != (int64_t)(m->d.engram_max_ngram - 1) * m->d.engram_heads || cols > DIMS_MAX_NGRAM * 64 || !c->engram_primes ||
        !c->engram_offsets)
        return di_errorf("engram layout: %lld hash columns, expected (max_ngram-1)*heads", (long long)cols);
    for (int l = 0; l < m->d.n_engram; l++)
        for (int64_t k = 0; k < cols; k++) {
            m->engram[l].prime[k] = c->engram_primes[l * cols + k];
            m->engram[l].offset[k] = c->engram_offsets[l * cols + k];
        }
    /* multipliers: numpy default_rng(10007 * layer_id), reproduced bit for bit (§5.2 d) */
    for (int l = 0; l < m->d.n_engram; l++)
        if (engram_multipliers(m->d.engram_layers[l], m->d.engram_compressed_vocab, m->d.engram_max_ngram, m->engram[l].mult) != 0)
            return -1;
    m->engram_mult_set = true;
    return 0;
}

static Model *load(const char *dir, NumericsMode mode, bool prepare);

Model *model_load(const char *dir, NumericsMode mode) { return load(dir, mode, true); }
Model *model_load_expert_rank(const char *dir, NumericsMode mode) { return load(dir, mode, false); }

static Model *load(const char *dir, NumericsMode mode, bool prepare) {
    if (!dir) {
        di_errorf("model: no directory");
        return NULL;
    }
    Model *m = di_calloc(1, sizeof *m, "model");
    if (!m) return NULL;
    m->mode = mode;
    if (di_backend_cpu_from_env(&m->be) != 0) goto fail; /* the one read of the kernel knobs: calls go through m->be */
    if (di_config_load(dir, &m->cfg) != 0) goto fail;
    if (model_dims_from_config(&m->cfg, &m->d) != 0) goto fail;
    m->ck = di_checkpoint_open(dir, &m->cfg);
    if (!m->ck) goto fail;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (weights_bind(&m->w, m->ck, &m->d, m->be, prepare) != 0) goto fail;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (m->w.prepared_bytes > 0) /* this CPU's FP8 GEMV keeps subnormal maps, which read the weights once */
        DI_INFO("weights: bound in %.2f s, with FP8 subnormal maps over %.1f MB of them (FP8 GEMV route %s)",
                (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec), (double)m->w.prepared_bytes / 1e6,
                di_backend_cpu_fp8_gemv_route(m->be, NULL));
    const ModelDims *d = &m->d;
    if (rope_table_init(&m->rope_main, d->rope_dim, d->rope_theta, false, 0, 0, 0, 0) != 0 ||
        rope_table_init(&m->rope_compress, d->rope_dim, d->compress_theta, strcmp(m->cfg.rope_type, "yarn") == 0, d->yarn_factor, d->beta_fast,
                        d->beta_slow, d->original_seq_len) != 0)
        goto fail;
    if (load_engram_layout(m) != 0) goto fail;
    m->expert_load = di_calloc((size_t)d->n_layers * (size_t)d->n_experts, sizeof *m->expert_load, "expert load counts");
    if (!m->expert_load) goto fail;
    if (d->n_mtp > 0 && d->dspark_experts > 0 &&
        !(m->draft_expert_load = di_calloc((size_t)d->n_mtp * (size_t)d->dspark_experts, sizeof *m->draft_expert_load, "draft expert load counts")))
        goto fail;
    int threads = di_default_threads();
    if (threads < 1 || !(m->ws = workspace_create(m, WORKSPACE_DEFAULT_ROWS, threads))) goto fail;
    DI_INFO("workspace: %.1f MB for %lld rows per forward on %d threads, %s kernels", (double)m->ws->bytes / 1e6,
            (long long)m->ws->rows, threads, m->be->name);
    return m;
fail:
    di_error_wrap("loading model %s", dir);
    model_free(m);
    return NULL;
}

void model_free(Model *m) {
    if (!m) return;
    workspace_free(m->ws);
    weights_free(&m->w);
    if (m->ck) di_checkpoint_close(m->ck);
    di_config_free(&m->cfg);
    free(m->token_map);
    free(m->expert_load);
    free(m->draft_expert_load);
    free(m);
}

int model_reserve_rows(Model *m, int64_t rows) {
    if (!m || rows < 1 || rows > FORWARD_MAX_CHUNK) return di_errorf("reserve rows: %lld outside [1, %d]", (long long)rows, FORWARD_MAX_CHUNK);
    if (m->ws && atomic_load(&m->ws->busy)) return di_errorf("reserve rows: a forward is running on the model");
    int threads = m->ws ? m->ws->threads : di_default_threads();
    Workspace *ws = threads >= 1 ? workspace_create(m, rows, threads) : NULL;
    if (!ws) return di_error_wrap("reserving %lld rows per forward", (long long)rows);
    workspace_free(m->ws);
    m->ws = ws;
    return 0;
}

int model_set_backend(Model *m, const DiKernelBackend *be) {
    if (!m || !be) return di_errorf("set backend: no model or no backend");
    if (m->ws && atomic_load(&m->ws->busy)) return di_errorf("set backend: a forward is running on the model");
    const DiKernelBackend *was = m->be;
    m->be = be;
    if (!m->ws) return 0;
    Workspace *ws = workspace_create(m, m->ws->rows, m->ws->threads); /* the kernel scratch differs by backend */
    if (!ws) {
        m->be = was;
        return di_error_wrap("switching to the %s kernels", be->name);
    }
    workspace_free(m->ws);
    m->ws = ws;
    return 0;
}

int model_set_engram_token_map(Model *m, const int32_t *cid, int64_t len) {
    if (!m || !cid || len <= 0) return di_errorf("engram token map: invalid arguments");
    for (int64_t t = 0; t < len; t++)
        if (cid[t] < 0 || cid[t] >= m->d.engram_compressed_vocab)
            return di_errorf("engram token map: cid[%lld] = %d outside [0, %d)", (long long)t, cid[t], m->d.engram_compressed_vocab);
    int32_t *copy = di_malloc((size_t)len * sizeof *copy, "engram token map");
    if (!copy) return -1;
    memcpy(copy, cid, (size_t)len * sizeof *copy);
    free(m->token_map);
    m->token_map = copy;
    m->token_map_len = len;
    return 0;
}

int model_set_engram_multipliers(Model *m, const int64_t *mult, int64_t n_layers, int64_t max_ngram) {
    if (!m || !mult) return di_errorf("engram multipliers: invalid arguments");
    if (n_layers != m->d.n_engram || max_ngram != m->d.engram_max_ngram)
        return di_errorf("engram multipliers: shape [%lld, %lld], expected [%d, %d]", (long long)n_layers, (long long)max_ngram,
                         m->d.n_engram, m->d.engram_max_ngram);
    int64_t bound = INT64_MAX / (m->d.engram_compressed_vocab > 0 ? m->d.engram_compressed_vocab : 1);
    for (int64_t l = 0; l < n_layers; l++)
        for (int64_t k = 0; k < max_ngram; k++) {
            int64_t v = mult[l * max_ngram + k];
            if (v <= 0 || v % 2 == 0 || v > bound)
                return di_errorf("engram multiplier [%lld][%lld] = %lld must be odd, positive and < 2^63 / %d", (long long)l,
                                 (long long)k, (long long)v, m->d.engram_compressed_vocab);
            m->engram[l].mult[k] = v;
        }
    m->engram_mult_set = true;
    return 0;
}

/* One row of w into the hash (w absent: nothing); row holds at least w->cols floats. */
static int hash_row(XXH3_state_t *h, const DiMatrix *w, int64_t r, float *row) {
    if (w->rows <= 0) return 0;
    if (di_matrix_row(w, r, row) != 0) return -1;
    XXH3_128bits_update(h, row, (size_t)w->cols * sizeof *row);
    return 0;
}

/* The shape as text (no struct padding in the hash), then sampled weight rows: the embedding's
 * first and last, the head's first, and the first row of every layer's window-KV and compressor
 * projections (the cached rows' own weights). */
int model_identity(const Model *m, uint64_t out[2]) {
    if (!m || !out) return di_errorf("model identity: invalid arguments");
    const ModelDims *d = &m->d;
    int64_t cols = d->dim;
    for (int L = 0; L < d->n_layers; L++) {
        const LayerWeights *lw = &m->w.layers[L];
        if (lw->wkv.cols > cols) cols = lw->wkv.cols;
        if (lw->comp_wkv.cols > cols) cols = lw->comp_wkv.cols;
    }
    XXH3_state_t *h = XXH3_createState();
    float *row = di_calloc((size_t)cols, sizeof *row, "identity row");
    int rc = -1;
    if (!h || !row || XXH3_128bits_reset(h) != XXH_OK) goto done;
    char text[64];
    int len = snprintf(text, sizeof text, "v41 %s %d %d %d %d %d %d", numerics_mode_name(m->mode), d->vocab, d->dim, d->n_layers,
                       d->head_dim, d->idx_head_dim, d->window);
    XXH3_128bits_update(h, text, (size_t)len);
    if (hash_row(h, &m->w.embed, 0, row) != 0 || hash_row(h, &m->w.embed, d->vocab - 1, row) != 0 ||
        hash_row(h, &m->w.head, 0, row) != 0)
        goto done;
    for (int L = 0; L < d->n_layers; L++) {
        const LayerWeights *lw = &m->w.layers[L];
        int32_t lay[3] = {d->layer[L].compress_ratio, d->layer[L].kv_slot, d->layer[L].kv_source};
        XXH3_128bits_update(h, lay, sizeof lay);
        if (hash_row(h, &lw->wkv, 0, row) != 0 || hash_row(h, &lw->comp_wkv, 0, row) != 0) goto done;
    }
    XXH128_hash_t v = XXH3_128bits_digest(h);
    out[0] = v.high64;
    out[1] = v.low64;
    rc = 0;
done:
    if (rc != 0) di_error_wrap("model identity: hashing the shape and sampled weight rows");
    XXH3_freeState(h);
    free(row);
    return rc;
}
