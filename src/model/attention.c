/* attention.c — V4.1 attention sub-layer (attention.h, spec §5.6). */
#include "model/attention.h"

#include "base/error.h"
#include "model/workspace.h"

#include <math.h>
#include <string.h>

void attn_shared_init(AttnShared *sh, const Workspace *ws, int64_t n) {
    *sh = (AttnShared){n, ws->attn.sel, ws->attn.sel_count, -1, ws->attn.cand, ws->attn.cand_count, -1};
}

/* ---------------------------------------------------------------- query, window KV (§5.6.1-2) */

int attn_query(const Model *m, const LayerWeights *lw, const RopeTable *rope, const float *a, int64_t n, const int64_t *pos,
               float *q, float *qr) {
    const ModelDims *d = &m->d;
    int64_t Rq = d->q_rank, H = d->n_heads, Dh = d->head_dim;
    bool aq = model_act_quant(m);
    if (model_linear(m, &lw->wq_a, a, n, qr, aq) != 0) return di_error_wrap("wq_a");
    for (int64_t i = 0; i < n; i++) m->be->rmsnorm(qr + i * Rq, qr + i * Rq, lw->q_norm, Rq, d->eps);
    if (model_linear(m, &lw->wq_b, qr, n, q, aq) != 0) return di_error_wrap("wq_b");
    for (int64_t i = 0; i < n; i++)
        for (int64_t h = 0; h < H; h++) model_rope_apply(m, rope, q + (i * H + h) * Dh, Dh, pos[i], false);
    return 0;
}

int attn_window_kv(const Model *m, const LayerWeights *lw, const RopeTable *rope, const float *a, int64_t n, const int64_t *pos,
                   float *kv) {
    const ModelDims *d = &m->d;
    int64_t Dh = d->head_dim;
    if (model_linear(m, &lw->wkv, a, n, kv, model_act_quant(m)) != 0) return di_error_wrap("wkv");
    for (int64_t i = 0; i < n; i++) {
        float *row = kv + i * Dh;
        m->be->rmsnorm(row, row, lw->kv_norm, Dh, d->eps);
        model_rope_apply(m, rope, row, Dh, pos[i], false);
        /* §4.4: FP8 round trip over the whole row after RoPE, rotary dims included */
        if (model_kv_quant(m) && m->be->roundtrip_fp8_block32(row, (size_t)Dh) != 0) return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- compressor (§5.6.3-5.6.5) */

/* Store the entry g of KV source `slot` from its pooled, un-normalised latent (pre-RoPE). */
static int emit_entry(const Model *m, RunState *st, const LayerWeights *lw, int slot, int ratio, int64_t g, float *latent,
                      float *key) {
    const ModelDims *d = &m->d;
    int64_t Dh = d->head_dim, DI = d->idx_head_dim;
    const RopeTable *rope = model_rope(m, ratio);
    bool kq = model_kv_quant(m);
    m->be->rmsnorm(latent, latent, lw->comp_norm, Dh, d->eps);
    /* index key from the pre-RoPE latent (§5.6.4) */
    if (model_matmul(m, &lw->idx_wk, latent, 1, key) != 0) return -1;
    m->be->rmsnorm(key, key, lw->idx_k_norm, DI, d->eps);
    model_rope_apply(m, rope, key, DI, g * ratio, false); /* rotated at the group's first position */
    if (kq && m->be->roundtrip_fp4_ue8m0_block32(key, (size_t)DI) != 0) return -1;
    /* compressed row: the post-RoPE latent (§5.6.5) */
    model_rope_apply(m, rope, latent, Dh, g * ratio, false);
    if (kq && m->be->roundtrip_fp4_e4m3_block16(latent, (size_t)Dh) != 0) return -1;
    int64_t idx = state_kv_append(st, slot);
    if (idx < 0) return -1;
    if (idx != g) return di_errorf("compressor: entry %lld emitted but the cache holds %lld rows", (long long)g, (long long)idx);
    memcpy(state_comp_row(st, slot, g), latent, (size_t)Dh * sizeof *latent);
    memcpy(state_ikey_row(st, slot, g), key, (size_t)DI * sizeof *key);
    return 0;
}

/* Position p's group lies below a bounded replay's end, so its entry is already in the cache
 * (imported): only the counters advance, the rows stay as they are (engine-features.md §2.4). */
static int keep_imported_entry(RunState *st, int slot, int ratio, int64_t p) {
    KvSourceState *ks = &st->kv[slot];
    if (ks->n_pending != (int)(p % ratio)) return di_errorf("%d pending rows at replayed position %lld", ks->n_pending, (long long)p);
    if (p % ratio < ratio - 1) {
        ks->n_pending++;
        return 0;
    }
    ks->n_pending = 0;
    int64_t idx = state_kv_append(st, slot);
    if (idx != p / ratio) return di_errorf("replayed entry %lld but the cache holds %lld rows", (long long)(p / ratio), (long long)idx);
    return 0;
}

/* One request's rows: kc / zc are their compressor projections (zc NULL at ratio 1). */
static int run_compressor(const Model *m, RunState *st, int L, const LayerWeights *lw, const float *kc, const float *zc,
                          int64_t n, int64_t s) {
    const ModelDims *d = &m->d;
    int ratio = d->layer[L].compress_ratio, slot = d->layer[L].kv_slot;
    int64_t Dh = d->head_dim;
    KvSourceState *ks = &st->kv[slot];
    float *latent = m->ws->attn.latent, *key = m->ws->attn.idx_key;
    int rc = -1;
    if (ratio > DIMS_MAX_LAYERS) return di_errorf("compressor of layer %d: ratio %d too large", L, ratio);
    for (int64_t i = 0; i < n; i++) {
        int64_t p = s + i;
        if ((p / ratio + 1) * ratio <= st->replay_end) { /* a bounded replay: the entry was imported */
            if (keep_imported_entry(st, slot, ratio, p) != 0) goto done;
            continue;
        }
        if (ratio == 1) {
            memcpy(latent, kc + i * Dh, (size_t)Dh * sizeof *latent);
            if (emit_entry(m, st, lw, slot, ratio, p, latent, key) != 0) goto done;
            continue;
        }
        int r = (int)(p % ratio);
        if (ks->n_pending != r) {
            di_errorf("compressor of layer %d: %d pending rows at position %lld", L, ks->n_pending, (long long)p);
            goto done;
        }
        if (r < ratio - 1) { /* hold the row until its group is complete */
            memcpy(state_pending_row(st, slot, 0, r), kc + i * Dh, (size_t)Dh * sizeof(float));
            memcpy(state_pending_row(st, slot, 1, r), zc + i * Dh, (size_t)Dh * sizeof(float));
            state_log_pending(st, slot, p, kc + i * Dh, zc + i * Dh); /* a speculative verify's undo */
            ks->n_pending = r + 1;
            continue;
        }
        /* λ[c] = Σ_r softmax_r(ζ_r[c]) · κ_r[c] over the m rows of the group */
        const float *pk[DIMS_MAX_LAYERS], *pz[DIMS_MAX_LAYERS];
        for (int j = 0; j < ratio - 1; j++) pk[j] = state_pending_row(st, slot, 0, j), pz[j] = state_pending_row(st, slot, 1, j);
        pk[ratio - 1] = kc + i * Dh;
        pz[ratio - 1] = zc + i * Dh;
        m->be->compress_pool(pk, pz, ratio, Dh, latent);
        ks->n_pending = 0;
        if (emit_entry(m, st, lw, slot, ratio, p / ratio, latent, key) != 0) goto done;
    }
    rc = 0;
done:
    if (rc != 0) di_error_wrap("compressor of layer %d", L);
    return rc;
}

int attn_write_sources(const Model *m, const RowBatch *rb, int L, const float *a) {
    const ModelDims *d = &m->d;
    if (!rb || !a || L < 0 || L >= d->n_layers || d->layer[L].role != DI_ROLE_FULL)
        return di_errorf("compressor: layer %d is not a Full layer of the backbone", L);
    const LayerWeights *lw = &m->w.layers[L];
    int ratio = d->layer[L].compress_ratio;
    int64_t Dh = d->head_dim, n = rb->row0[rb->n_seqs];
    float *kc = m->ws->attn.comp_kv, *zc = m->ws->attn.comp_gate;
    /* fp32 GEMMs without activation quantisation (§4.3), every request's rows at once */
    if (model_matmul(m, &lw->comp_wkv, a, n, kc) != 0 || (ratio > 1 && model_matmul(m, &lw->comp_wgate, a, n, zc) != 0))
        return di_error_wrap("compressor of layer %d", L);
    for (int b = 0; b < rb->n_seqs; b++) { /* each extends its own request's caches */
        int64_t r0 = rb->row0[b], nb = rb->row0[b + 1] - r0;
        if (run_compressor(m, rb->st[b], L, lw, kc + r0 * Dh, ratio > 1 ? zc + r0 * Dh : NULL, nb, rb->start[b]) != 0) return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- indexer (§5.6.6) */

typedef DiScored Scored;

/* Index scores of nq consecutive rows of one request (scores of row r at score + r·sstride),
 * entries t0 .. t1-1 written from out, a key span per kernel call. */
typedef struct {
    const DiKernelBackend *be;
    RunState *st;
    int slot;
    const float *q, *wh;
    int64_t nq, HI, DI, sstride;
} ScoreRows;

static void score_range(const ScoreRows *r, int64_t t0, int64_t t1, float *out) {
    for (int64_t t = t0; t < t1;) {
        int64_t stride, run;
        const float *keys = state_ikey_span(r->st, r->slot, t, &stride, &run);
        if (run > t1 - t) run = t1 - t;
        r->be->index_scores(r->q, r->wh, r->nq, r->HI, r->DI, keys, stride, run, out + (t - t0), r->sstride);
        t += run;
    }
}

/* Long rows' entries split over the pool: each entry's scores are computed whole by one task. */
typedef struct {
    const ScoreRows *rows;
    int64_t n, per_task;
    float *score;
} ScoreJob;

static void score_task(void *ctx, int task, int thread) {
    const ScoreJob *j = ctx;
    int64_t t0 = task * j->per_task, t1 = t0 + j->per_task < j->n ? t0 + j->per_task : j->n;
    score_range(j->rows, t0, t1, j->score + t0);
}

/* Below this many multiply-adds the rows are scored on the calling thread (a pool round costs
 * a few microseconds). */
#define SCORE_SPLIT_MACS (1 << 18)

static void score_entries(const Model *m, const ScoreRows *r, int64_t n, float *score) {
    int threads = di_pool_threads(m->pool);
    if (threads <= 1 || n * r->nq * r->HI * r->DI < SCORE_SPLIT_MACS) {
        score_range(r, 0, n, score);
        return;
    }
    int64_t per_task = ((n + 2 * threads - 1) / (2 * threads) + 31) / 32 * 32;
    ScoreJob job = {r, n, per_task, score};
    di_pool_run(m->pool, (int)((n + per_task - 1) / per_task), score_task, &job);
}

static int by_id(const void *pa, const void *pb) {
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    return (a > b) - (a < b);
}

/* A Reindex layer after the candidate source scores only the entries of row i's pool, the
 * others being -inf (§5.6.6 step 5): the pool's visible entries, ascending, into ids and their
 * scores into score; returns their count. */
static int64_t score_pool(const ScoreRows *r, const int32_t *pool, int count, int64_t nvis, int CS, int32_t *blocks,
                          int32_t *ids, float *score) {
    int64_t nb = 0, n = 0, nblocks = (nvis + CS - 1) / CS;
    for (int j = 0; j < count; j++)
        if (pool[j] >= 0 && pool[j] < nblocks) blocks[nb++] = pool[j];
    qsort(blocks, (size_t)nb, sizeof *blocks, by_id);
    for (int64_t j = 0; j < nb; j++) {
        if (j > 0 && blocks[j] == blocks[j - 1]) continue;
        int64_t t0 = (int64_t)blocks[j] * CS, t1 = t0 + CS < nvis ? t0 + CS : nvis;
        score_range(r, t0, t1, score + n);
        for (int64_t t = t0; t < t1; t++) ids[n++] = (int32_t)t;
    }
    return n;
}

/* The candidate source's pool of row i: block score = max of its entries; the newest block is
 * always kept (§5.6.6 step 4). */
static int candidate_blocks(const Model *m, const float *score, int64_t nvis, int CS, int CB, Scored *tmp, int32_t *pool) {
    int64_t nblocks = (nvis + CS - 1) / CS;
    for (int64_t b = 0; b < nblocks; b++) {
        float bm = -INFINITY;
        for (int64_t t = b * CS; t < nvis && t < (b + 1) * CS; t++) bm = fmaxf(bm, score[t]);
        tmp[b] = (Scored){b == (nvis - 1) / CS ? INFINITY : bm, (int32_t)b};
    }
    int keep = (int)m->be->best_k(tmp, nblocks, CB);
    for (int j = 0; j < keep; j++) pool[j] = tmp[j].id;
    return keep;
}

/* Rows r0 .. r0+n-1 of the batch belong to one request (positions s .. s+n-1), with index
 * queries qi (rotated here, in place) and head weights wp (scaled here, in place); their
 * selections and pools go to those rows of sh. */
static int run_indexer(const Model *m, RunState *st, int L, float *qi, float *wp, int64_t n, int64_t s,
                       AttnShared *sh, int64_t r0) {
    const ModelDims *d = &m->d;
    int ratio = d->layer[L].compress_ratio, slot = d->layer[d->layer[L].kv_source].kv_slot;
    int64_t HI = d->idx_heads, DI = d->idx_head_dim, N = st->kv[slot].n_rows;
    int K = d->idx_topk, CS = d->cand_block_size > 0 ? d->cand_block_size : 1, CB = d->cand_blocks;
    bool is_cand = L == d->cand_src, masked = d->cand_src >= 0 && L > d->cand_src;
    const RopeTable *rope = model_rope(m, ratio);
    float *score = m->ws->attn.idx_scores;
    Scored *tmp = m->ws->attn.ranked;
    int32_t *blocks = m->ws->attn.pool_ids, *ids = blocks + (CB > 0 ? CB : 1);
    int rc = -1;
    if (N > m->ws->attn.max_entries) {
        di_errorf("indexer of layer %d: %lld compressed entries exceed the workspace's %lld", L, (long long)N, (long long)m->ws->attn.max_entries);
        goto done;
    }
    if (masked && sh->pool_layer != d->cand_src) {
        di_errorf("indexer of layer %d: no candidate pool from layer %d in this forward", L, d->cand_src);
        goto done;
    }
    float wscale = 1.0f / sqrtf((float)DI) / sqrtf((float)HI); /* DI^-1/2 · HI^-1/2 (§5.6.6 step 2) */
    for (int64_t i = 0; i < n; i++) {
        int64_t p = s + i, nvis = (p + 1) / ratio;
        if (nvis > N) {
            di_errorf("indexer of layer %d: %lld entries visible at position %lld but only %lld emitted", L, (long long)nvis,
                      (long long)p, (long long)N);
            goto done;
        }
        float *q = qi + i * HI * DI, *w = wp + i * HI;
        for (int64_t h = 0; h < HI; h++) model_rope_apply(m, rope, q + h * DI, DI, p, false);
        if (model_kv_quant(m) && m->be->roundtrip_fp4_ue8m0_block32(q, (size_t)(HI * DI)) != 0) goto done;
        for (int64_t h = 0; h < HI; h++) w[h] *= wscale; /* (w·scale)·relu(dot): the spec's product order */
    }
    /* rows in groups (one staging of each key block serves the group), each scored up to the
     * last row's visible count; a row reads only its own visible entries */
    int64_t group = masked ? 1 : DI_BACKEND_INDEX_ROWS, sstride = m->ws->attn.max_entries + 1;
    for (int64_t i0 = 0; i0 < n; i0 += group) {
        int64_t i1 = i0 + group < n ? i0 + group : n;
        ScoreRows rows = {m->be, st, slot, qi + i0 * HI * DI, wp + i0 * HI, i1 - i0, HI, DI, sstride};
        if (masked) {
            int64_t nvis = (s + i0 + 1) / ratio;
            int64_t np = score_pool(&rows, sh->pool + (r0 + i0) * CB, sh->pool_count[r0 + i0], nvis, CS, blocks, ids, score);
            sh->sel_count[r0 + i0] = (int32_t)m->be->topk(score, ids, np, K, tmp, sh->sel + (r0 + i0) * K);
            continue;
        }
        score_entries(m, &rows, (s + i1) / ratio, score);
        for (int64_t i = i0; i < i1; i++) {
            int64_t nvis = (s + i + 1) / ratio;
            const float *sc = score + (i - i0) * sstride;
            if (is_cand) sh->pool_count[r0 + i] = nvis > 0 ? candidate_blocks(m, sc, nvis, CS, CB, tmp, sh->pool + (r0 + i) * CB) : 0;
            sh->sel_count[r0 + i] = (int32_t)m->be->topk(sc, NULL, nvis, K, tmp, sh->sel + (r0 + i) * K);
        }
    }
    rc = 0;
done:
    if (rc != 0) di_error_wrap("indexer of layer %d", L);
    return rc;
}

/* ---------------------------------------------------------------- attention core (§4.8) */

void attn_head(const Model *m, const LayerWeights *lw, int64_t h, const float *qh, const float *const *keys, int64_t nk,
               float *oh, float *z) {
    int64_t Dh = m->d.head_dim;
    m->be->attn_heads(qh, 1, Dh, keys, nk, lw->attn_sink + h, 1.0f / sqrtf((float)Dh), oh, z);
}

void attn_heads(const Model *m, const LayerWeights *lw, const float *q, const float *const *keys, int64_t nk, float *o,
                float *z) {
    int64_t Dh = m->d.head_dim;
    m->be->attn_heads(q, m->d.n_heads, Dh, keys, nk, lw->attn_sink, 1.0f / sqrtf((float)Dh), o, z);
}

int attn_wo_a(const Model *m, const DiMatrix *wo_a, const float *o, int64_t n, float *z) {
    const ModelDims *d = &m->d;
    int64_t H = d->n_heads, Dh = d->head_dim, G = d->o_groups, Ro = d->o_rank;
    int64_t gw = (H / G) * Dh, align = di_matrix_row_align(wo_a); /* input width of one group */
    if (wo_a->rows != G * Ro || wo_a->cols != gw)
        return di_errorf("wo_a is [%lld, %lld], expected [%lld, %lld]", (long long)wo_a->rows, (long long)wo_a->cols,
                         (long long)(G * Ro), (long long)gw);
    if (!m->ws || n > m->ws->rows || align > 32) return di_errorf("wo_a: %lld rows exceed the workspace", (long long)n);
    float *xg = m->ws->attn.group_in, *yg = m->ws->attn.group_out;
    for (int64_t g = 0; g < G; g++) {
        for (int64_t i = 0; i < n; i++) memcpy(xg + i * gw, o + i * H * Dh + g * gw, (size_t)gw * sizeof *xg);
        /* rows g·Ro .. g·Ro+Ro-1, from the start of the FP8 scale row-block holding the first (a
         * group of a small model may start inside one; the extra rows are computed and dropped,
         * each row's result is the same whatever rows it runs with); a plain GEMM, no
         * activation quantisation */
        int64_t r0 = g * Ro / align * align, skip = g * Ro - r0, len = skip + Ro;
        DiMatrix rows;
        if (di_matrix_rows(wo_a, r0, len, &rows) != 0 || model_matmul(m, &rows, xg, n, yg) != 0) return -1;
        for (int64_t i = 0; i < n; i++) memcpy(z + i * G * Ro + g * Ro, yg + i * len + skip, (size_t)Ro * sizeof *z);
    }
    return 0;
}

int attn_output(const Model *m, const LayerWeights *lw, const RopeTable *rope, float *o, int64_t n, const int64_t *pos, float *out) {
    const ModelDims *d = &m->d;
    int64_t H = d->n_heads, Dh = d->head_dim;
    float *z = m->ws->attn.groups;
    for (int64_t i = 0; i < n; i++)
        for (int64_t h = 0; h < H; h++) model_rope_apply(m, rope, o + (i * H + h) * Dh, Dh, pos[i], true);
    if (attn_wo_a(m, &lw->wo_a, o, n, z) != 0 || model_linear(m, &lw->wo_b, z, n, out, model_act_quant(m)) != 0) return -1;
    return 0;
}

/* ---------------------------------------------------------------- the sub-layer */

/* One task per (row, group of DI_BACKEND_HEAD_GROUP heads): at batch 1 a row alone would keep every
 * other thread idle, and a head's result depends only on its row's query and keys.  Scores go
 * to the thread's own slice of z (kw · DI_BACKEND_HEAD_GROUP floats each). */
typedef struct {
    const Model *m;
    const LayerWeights *lw;
    const float *q;
    const float *const *keys;
    const int64_t *nkeys;
    float *o, *z;
    int64_t kw; /* key slots per row */
} RowHeadsJob;

static void row_head_task(void *ctx, int task, int thread) {
    const RowHeadsJob *j = ctx;
    int64_t H = j->m->d.n_heads, Dh = j->m->d.head_dim, G = (H + DI_BACKEND_HEAD_GROUP - 1) / DI_BACKEND_HEAD_GROUP;
    int64_t i = task / G, h = task % G * DI_BACKEND_HEAD_GROUP, nh = H - h < DI_BACKEND_HEAD_GROUP ? H - h : DI_BACKEND_HEAD_GROUP;
    j->m->be->attn_heads(j->q + (i * H + h) * Dh, nh, Dh, j->keys + i * j->kw, j->nkeys[i], j->lw->attn_sink + h,
                              1.0f / sqrtf((float)Dh), j->o + (i * H + h) * Dh, j->z + thread * j->kw * DI_BACKEND_HEAD_GROUP);
}

int attention_forward(const Model *m, const RowBatch *rb, int L, const float *a, AttnShared *sh, float *out) {
    const ModelDims *d = &m->d;
    const LayerWeights *lw = &m->w.layers[L];
    int ratio = d->layer[L].compress_ratio;
    const RopeTable *rope = model_rope(m, ratio);
    int64_t H = d->n_heads, Dh = d->head_dim, W = d->window, K = d->idx_topk, n = rb->row0[rb->n_seqs];
    Workspace *ws = m->ws;
    int64_t KW = ws->attn.key_slots; /* key slots per row: at least W + K */
    float *q = ws->attn.q, *qr = ws->attn.q_low, *kv = ws->attn.kv, *o = ws->attn.heads_out, *z = ws->attn.scores;
    float *qi = ws->attn.idx_q, *wp = ws->attn.idx_w;
    const float **keys = ws->attn.keys;
    int64_t *nkeys = ws->attn.n_keys;
    int rc = -1;
    /* projections of every row of every request at once */
    if (attn_query(m, lw, rope, a, n, rb->pos, q, qr) != 0 || attn_window_kv(m, lw, rope, a, n, rb->pos, kv) != 0) goto done;
    /* the KV source's caches first: the indexer reads the entries of this chunk's rows */
    bool index = d->layer[L].role == DI_ROLE_FULL || d->layer[L].role == DI_ROLE_REINDEX;
    if (d->layer[L].role == DI_ROLE_FULL && !rb->sources_done && attn_write_sources(m, rb, L, a) != 0) goto done;
    /* the indexer's projections are per row: every request's rows at once */
    int64_t HI = d->idx_heads, DI = d->idx_head_dim;
    if (index && (model_linear(m, &lw->idx_wq_b, qr, n, qi, model_act_quant(m)) != 0 || model_matmul(m, &lw->idx_weights_proj, a, n, wp) != 0))
        goto done;
    /* then scoring per request: it reads that request's caches */
    for (int b = 0; b < rb->n_seqs && index; b++) {
        int64_t r0 = rb->row0[b], nb = rb->row0[b + 1] - r0;
        if (run_indexer(m, rb->st[b], L, qi + r0 * HI * DI, wp + r0 * HI, nb, rb->start[b], sh, r0) != 0) goto done;
    }
    if (d->layer[L].role == DI_ROLE_FULL || d->layer[L].role == DI_ROLE_REINDEX) {
        sh->sel_layer = L;
        if (L == d->cand_src) sh->pool_layer = L;
    }
    if (ratio > 0 && sh->sel_layer != d->layer[L].index_source) {
        di_errorf("layer %d: no selection published by its index source %d", L, d->layer[L].index_source);
        goto done;
    }
    int slot = ratio > 0 ? d->layer[d->layer[L].kv_source].kv_slot : -1;
    for (int b = 0; b < rb->n_seqs; b++) {
        RunState *st = rb->st[b];
        int64_t r0 = rb->row0[b], s = rb->start[b], floor = rb->swa_floor ? rb->swa_floor[b] : 0;
        if (st->replay_end > 0 && st->replay_start > floor) floor = st->replay_start; /* encoder SWA replay */
        for (int64_t i = r0; i < rb->row0[b + 1]; i++) {
            int64_t p = rb->pos[i], nk = 0;
            const float **ki = keys + i * KW;
            /* window rows of this layer, ascending positions max(floor, p-W+1) .. p (§5.6.7; the
             * floor is a bounded replay's start, replay.h) */
            for (int64_t pos = p - W + 1 < floor ? floor : p - W + 1; pos <= p; pos++)
                ki[nk++] = pos >= s ? kv + (r0 + pos - s) * Dh : state_window_row(st, L, pos);
            /* then the selected compressed rows of the KV source, ascending entry index */
            if (ratio > 0)
                for (int j = 0; j < sh->sel_count[i]; j++) {
                    int32_t t = sh->sel[i * K + j];
                    if (t < 0 || t >= st->kv[slot].n_rows) {
                        di_errorf("layer %d: selected entry %d outside the cache", L, t);
                        goto done;
                    }
                    ki[nk++] = state_comp_row(st, slot, t);
                }
            nkeys[i] = nk;
        }
    }
    /* every row's heads on the pool: a row reads only its own keys and writes only its output */
    RowHeadsJob job = {m, lw, q, keys, nkeys, o, z, KW};
    di_pool_run(m->pool, (int)(n * ((H + DI_BACKEND_HEAD_GROUP - 1) / DI_BACKEND_HEAD_GROUP)), row_head_task, &job);
    if (attn_output(m, lw, rope, o, n, rb->pos, out) != 0) goto done;
    /* each ring keeps its request's last W rows; earlier chunk rows were only needed inside the chunk */
    for (int b = 0; b < rb->n_seqs; b++) {
        int64_t r0 = rb->row0[b], nb = rb->row0[b + 1] - r0;
        for (int64_t i = nb > W ? nb - W : 0; i < nb; i++)
            memcpy(state_window_row(rb->st[b], L, rb->start[b] + i), kv + (r0 + i) * Dh, (size_t)Dh * sizeof *kv);
    }
    rc = 0;
done:
    if (rc != 0) di_error_wrap("attention of layer %d", L);
    return rc;
}
