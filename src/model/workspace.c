/* workspace.c — sizing and carving the forward's scratch (workspace.h).
 *
 * One layout function names every buffer with its size; it runs twice, once to add up the bytes
 * and once to hand out pointers into the single block allocated between the two, so a buffer's
 * size is written in exactly one place.  Every part starts on a 64-byte line (the SIMD kernels'
 * scratch needs it; the rest keeps rows on their own lines). */
#include "model/workspace.h"

#include "base/error.h"
#include "base/log.h"
#include "base/mem.h"
#include "model/forward.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    char *base; /* NULL: measuring */
    size_t used;
    bool overflow;
} Carver;

static void *carve(Carver *c, int64_t count, size_t size) {
    size_t bytes, off = (c->used + 63) & ~(size_t)63;
    if (count < 0 || !di_mul_size((size_t)count, size, &bytes) || off < c->used || bytes > SIZE_MAX - off - 64) {
        c->overflow = true;
        return NULL;
    }
    c->used = off + bytes;
    return c->base ? c->base + off : NULL;
}

#define CARVE(c, ptr, count) ((ptr) = carve((c), (count), sizeof *(ptr)))

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* The largest matmul scratch of matrix w at up to `rows` rows on `threads` threads: the GEMV's
 * (one row) and the GEMM's (all rows) added, which bounds every count in between (the per-thread
 * part is one of the two, the padded and prepared activations grow with the rows). */
static int64_t mm_need(const DiKernelBackend *be, const DiMatrix *w, int64_t rows, int threads) {
    if (!w || w->rows <= 0 || w->cols <= 0 || (unsigned)w->format >= DI_MAT_N_FORMATS) return 0;
    const DiMatTraits *t = &be->mat[w->format];
    int64_t need = 0;
    for (int qa = 0; qa < 2; qa++) need = max64(need, t->scratch_floats(be, w, 1, threads, qa) + t->scratch_floats(be, w, rows, threads, qa));
    return need;
}

typedef struct {
    int64_t pool_mm, task_mm, max_cols;
} MatSizes;

static void visit(MatSizes *s, const DiKernelBackend *be, const DiMatrix *w, int64_t rows, int threads) {
    s->pool_mm = max64(s->pool_mm, mm_need(be, w, rows, threads));
    if (w) s->max_cols = max64(s->max_cols, w->cols);
}

/* Every matrix a forward or draft multiplies by: the pool-wide ones and the experts (multiplied
 * one thread per task, moe.c). */
static MatSizes matrix_sizes(const Model *m, int64_t rows, int threads) {
    const ModelDims *d = &m->d;
    const Weights *w = &m->w;
    MatSizes s = {0, 0, 0};
    visit(&s, m->be, &w->head, rows, threads);
    visit(&s, m->be, &w->main_proj, rows, threads);
    visit(&s, m->be, &w->markov_head, 1, threads);
    visit(&s, m->be, &w->conf_proj, 1, threads);
    for (int L = 0; w->layers && L < d->n_layers + d->n_mtp; L++) {
        const LayerWeights *lw = &w->layers[L];
        const DiMatrix *mats[] = {&lw->hc_attn_fn, &lw->hc_ffn_fn, &lw->wq_a,     &lw->wq_b,   &lw->wkv,
                                  &lw->wo_a,       &lw->wo_b,      &lw->comp_wkv, &lw->comp_wgate, &lw->idx_wk,
                                  &lw->idx_wq_b,   &lw->idx_weights_proj,         &lw->gate,   &lw->engram_wkv};
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) visit(&s, m->be, mats[i], rows, threads);
        for (int e = 0; lw->experts && e <= lw->n_experts; e++) {
            const ExpertWeights *ex = e < lw->n_experts ? &lw->experts[e] : lw->has_shared ? &lw->shared : NULL;
            if (!ex) continue;
            const DiMatrix *em[] = {&ex->w1, &ex->w2, &ex->w3};
            for (int i = 0; i < 3; i++) {
                s.task_mm = max64(s.task_mm, mm_need(m->be, em[i], rows, 1));
                s.max_cols = max64(s.max_cols, em[i]->cols);
            }
        }
    }
    return s;
}

static void layout(Workspace *ws, const Model *m, Carver *c) {
    const ModelDims *d = &m->d;
    int64_t R = ws->rows, T = ws->threads, D = d->dim, hc = d->hc_mult, V = d->vocab, Dh = d->head_dim;
    int64_t H = d->n_heads, HI = d->idx_heads, DI = d->idx_head_dim, W = d->window, G = d->o_groups, Ro = d->o_rank;
    int64_t cols = d->n_engram ? (int64_t)(d->engram_max_ngram - 1) * d->engram_heads : 0;
    int64_t E = max64(d->n_experts, d->dspark_experts), K = max64(d->top_k, d->dspark_top_k);
    int64_t gathered = R * (K + 1), F = d->moe_inter, B = d->dspark_block > 0 ? d->dspark_block : 1;
    MatSizes ms = matrix_sizes(m, R, (int)T);
    /* forward */
    CARVE(c, ws->fwd.X, R * hc * D);
    CARVE(c, ws->fwd.pi, R * hc);
    CARVE(c, ws->fwd.embed_row, D);
    CARVE(c, ws->fwd.taps, R * d->n_taps * D);
    CARVE(c, ws->fwd.head_in, R * D);
    CARVE(c, ws->fwd.head_out, R * V);
    CARVE(c, ws->fwd.ctx, R * D);
    CARVE(c, ws->fwd.ctx_kv, R * Dh);
    CARVE(c, ws->fwd.engram_ids, R * d->n_engram * cols);
    CARVE(c, ws->fwd.row0, R + 1);
    CARVE(c, ws->fwd.start, R);
    CARVE(c, ws->fwd.pos, R);
    CARVE(c, ws->fwd.keep, R);
    CARVE(c, ws->fwd.swa_floor, R);
    CARVE(c, ws->fwd.tokens, R);
    CARVE(c, ws->fwd.states, R);
    ws->fwd.pieces = carve(c, R, sizeof(ForwardSeq));
    /* mHC block */
    CARVE(c, ws->block.mix_attn, R);
    CARVE(c, ws->block.mix_ffn, R);
    CARVE(c, ws->block.mix_proj, R * (2 + hc) * hc);
    CARVE(c, ws->block.in, R * D);
    CARVE(c, ws->block.out, R * D);
    /* attention: key slots per row cover a trunk row (window + selection) and a draft row (the
     * ring + the block's rows) */
    ws->attn.key_slots = max64(W + d->idx_topk, W + B) + 1;
    int min_ratio = 0;
    for (int L = 0; L < d->n_layers; L++)
        if (d->layer[L].compress_ratio > 0 && (min_ratio == 0 || d->layer[L].compress_ratio < min_ratio)) min_ratio = d->layer[L].compress_ratio;
    ws->attn.max_entries = min_ratio > 0 ? m->cfg.max_position_embeddings / min_ratio + 1 : 1;
    int64_t N = ws->attn.max_entries, CS = d->cand_block_size > 0 ? d->cand_block_size : 1;
    CARVE(c, ws->attn.sel, R * max64(d->idx_topk, 1));
    CARVE(c, ws->attn.sel_count, R);
    CARVE(c, ws->attn.cand, R * max64(d->cand_blocks, 1));
    CARVE(c, ws->attn.cand_count, R);
    /* Each stage's own scratch below lives only while the stage runs, and the stages of a block
     * run one after another (Engram, attention, MoE): they share one region as large as the
     * largest of them (release config, 512 rows: 709 MB in all instead of 965 MB side by side,
     * leaving out the matmul scratch and act_q, which depend on the weights). */
    size_t stages = c->used, end = stages;
    /* attention */
    CARVE(c, ws->attn.q, R * H * Dh);
    CARVE(c, ws->attn.q_low, R * d->q_rank);
    CARVE(c, ws->attn.kv, R * Dh);
    CARVE(c, ws->attn.heads_out, R * H * Dh);
    CARVE(c, ws->attn.scores, T * ws->attn.key_slots * DI_BACKEND_HEAD_GROUP);
    CARVE(c, ws->attn.keys, R * ws->attn.key_slots);
    CARVE(c, ws->attn.n_keys, R);
    CARVE(c, ws->attn.comp_kv, R * Dh);
    CARVE(c, ws->attn.comp_gate, R * Dh);
    CARVE(c, ws->attn.idx_q, R * HI * DI);
    CARVE(c, ws->attn.idx_w, R * HI);
    CARVE(c, ws->attn.groups, R * G * Ro);
    CARVE(c, ws->attn.group_in, R * (G > 0 ? H / G : 0) * Dh);
    CARVE(c, ws->attn.group_out, R * (Ro + 31)); /* a group may start inside a 32-row FP8 block */
    CARVE(c, ws->attn.latent, Dh);
    CARVE(c, ws->attn.idx_key, DI);
    CARVE(c, ws->attn.idx_scores, DI_BACKEND_INDEX_ROWS * (N + 1));
    CARVE(c, ws->attn.ranked, N + 8); /* the backend's top-k takes 8 pairs beyond the entries */
    CARVE(c, ws->attn.pool_ids, max64(d->cand_blocks, 1) * (1 + CS));
    end = c->used > end ? c->used : end;
    c->used = stages;
    /* MoE: gathered rows are the routed ones then the shared expert's */
    CARVE(c, ws->moe.router, R * E);
    CARVE(c, ws->moe.weights, R * K);
    CARVE(c, ws->moe.ids, R * K);
    CARVE(c, ws->moe.rows, gathered);
    CARVE(c, ws->moe.count, E + 1);
    CARVE(c, ws->moe.slots, E + 1);
    CARVE(c, ws->moe.tasks, 2 * (E + 1 + 4 * T)); /* moe.c: TASKS_PER_THREAD (4) per thread */
    CARVE(c, ws->moe.x, gathered * D);
    CARVE(c, ws->moe.row_weight, gathered);
    CARVE(c, ws->moe.hidden, gathered * F);
    CARVE(c, ws->moe.gate, gathered * F);
    CARVE(c, ws->moe.up, gathered * F);
    CARVE(c, ws->moe.y, gathered * D);
    CARVE(c, ws->moe.y_task, gathered * D);
    ws->moe.max_experts = (int)E;
    ws->moe.max_top_k = (int)K;
    ws->moe.task_mm_floats = (ms.task_mm + 15) / 16 * 16;
    CARVE(c, ws->moe.task_mm, T * ws->moe.task_mm_floats);
    end = c->used > end ? c->used : end;
    c->used = stages;
    /* Engram */
    CARVE(c, ws->engram.rows, R * cols * d->engram_head_dim);
    CARVE(c, ws->engram.kv, R * (hc + 1) * D);
    c->used = c->used > end ? c->used : end;
    /* DSpark draft heads (the block's streams are fwd.X / fwd.pi: a draft is not a forward) */
    CARVE(c, ws->draft.markov_e, d->markov_rank);
    CARVE(c, ws->draft.markov_bias, V);
    CARVE(c, ws->draft.conf_in, D + d->markov_rank);
    /* model_linear and the kernels */
    ws->act_q_cols = ms.max_cols;
    CARVE(c, ws->act_q, R * ms.max_cols);
    ws->mm_floats = ms.pool_mm;
    CARVE(c, ws->mm, ms.pool_mm);
}

/* (Re)lay out ws for its rows and threads in a fresh block. */
static int build(Workspace *ws, const Model *m) {
    Carver c = {NULL, 0, false};
    Workspace probe;
    memcpy(&probe, ws, sizeof probe); /* measuring nulls the pointers: ws keeps its old block until the new one exists */
    layout(&probe, m, &c);
    if (c.overflow) return di_errorf("workspace: %lld rows on %d threads overflow the address space", (long long)ws->rows, ws->threads);
    char *block = di_aligned_malloc(1, c.used, "forward workspace");
    if (!block) return di_error_wrap("workspace for %lld rows on %d threads", (long long)ws->rows, ws->threads);
    di_aligned_free(ws->mem);
    ws->mem = block;
    ws->bytes = c.used;
    c = (Carver){block, 0, false};
    layout(ws, m, &c);
    return 0;
}

Workspace *workspace_create(const Model *m, int64_t rows, int threads) {
    if (!m || !m->be || rows < 1 || rows > FORWARD_MAX_CHUNK || threads < 1) {
        di_errorf("workspace: no model, no kernel backend or invalid sizes (%lld rows, %d threads)", (long long)rows, threads);
        return NULL;
    }
    Workspace *ws = di_calloc(1, sizeof *ws, "workspace");
    if (!ws) return NULL;
    /* a DSpark block runs as one forward of its rows */
    ws->rows = rows > m->d.dspark_block ? rows : m->d.dspark_block;
    ws->threads = threads;
    if (build(ws, m) != 0) {
        free(ws);
        return NULL;
    }
    return ws;
}

void workspace_free(Workspace *ws) {
    if (!ws) return;
    di_aligned_free(ws->mem);
    free(ws);
}

int workspace_acquire(const Model *m) {
    Workspace *ws = m->ws;
    if (!ws) return di_errorf("forward: the model has no workspace (load it with model_load)");
    int idle = 0;
    if (!atomic_compare_exchange_strong(&ws->busy, &idle, 1))
        return di_errorf("forward: another forward or draft is running on this model (one at a time)");
    int threads = m->pool ? di_pool_threads(m->pool) : 1;
    if (threads > ws->threads) {
        int was = ws->threads;
        ws->threads = threads;
        if (build(ws, m) != 0) {
            ws->threads = was;
            atomic_store(&ws->busy, 0);
            return -1;
        }
        DI_INFO("workspace: per-thread scratch re-sized from %d to %d threads (%.1f MB)", was, threads, (double)ws->bytes / 1e6);
    }
    return 0;
}

void workspace_release(const Model *m) {
    if (m && m->ws) atomic_store(&m->ws->busy, 0);
}
