/* forward.c — the V4.1 forward pass, top to bottom like model-v41.md §5 (forward.h). */
#include "model/forward.h"

#include "base/error.h"
#include "model/attention.h"
#include "model/engram.h"
#include "model/mhc.h"
#include "model/moe.h"
#include "model/replay.h"
#include "model/workspace.h"

#include <string.h>

static HcSite site_of(const Model *m, const LayerWeights *lw, bool ffn) {
    const ModelDims *d = &m->d;
    return (HcSite){.fn = ffn ? &lw->hc_ffn_fn : &lw->hc_attn_fn,
                    .base = ffn ? lw->hc_ffn_base : lw->hc_attn_base,
                    .scale = ffn ? lw->hc_ffn_scale : lw->hc_attn_scale,
                    .hc = d->hc_mult,
                    .dim = d->dim,
                    .sinkhorn_iters = d->sinkhorn_iters,
                    .eps = d->eps,
                    .hc_eps = d->hc_eps};
}

/* The per-row mHC steps of one block, run over row ranges (model_for_rows). */
typedef enum { ROWS_ATTN_IN, ROWS_ATTN_OUT, ROWS_FFN_IN, ROWS_FFN_OUT } BlockRowsStep;

typedef struct {
    const DiKernelBackend *be;
    const ModelDims *d;
    const LayerWeights *lw;
    float *X, *pi, *a, *o;
    const HcMix *mix_a, *mix_f;
    BlockRowsStep step;
} BlockRows;

static void block_rows(void *ctx, int64_t r0, int64_t r1) {
    const BlockRows *b = ctx;
    int hc = b->d->hc_mult;
    int64_t D = b->d->dim;
    for (int64_t i = r0; i < r1; i++) {
        float *Xi = b->X + i * hc * D, *ai = b->a + i * D;
        switch (b->step) {
        case ROWS_ATTN_IN: /* collapse with the carried pre-mix (previous FFN site's pre) */
            b->be->mhc_collapse(Xi, b->pi + i * hc, hc, D, ai);
            b->be->rmsnorm(ai, ai, b->lw->attn_norm, D, b->d->eps);
            break;
        case ROWS_ATTN_OUT: b->be->mhc_expand(Xi, b->o + i * D, b->mix_a[i].post, b->mix_a[i].comb, hc, D); break;
        case ROWS_FFN_IN: /* collapse with the ATTENTION site's pre (§5.5) */
            b->be->mhc_collapse(Xi, b->mix_a[i].pre, hc, D, ai);
            b->be->rmsnorm(ai, ai, b->lw->ffn_norm, D, b->d->eps);
            break;
        case ROWS_FFN_OUT:
            b->be->mhc_expand(Xi, b->o + i * D, b->mix_f[i].post, b->mix_f[i].comb, hc, D);
            memcpy(b->pi + i * hc, b->mix_f[i].pre, (size_t)hc * sizeof *b->pi); /* carried to the next block */
            break;
        }
    }
}

/* Layer L's row of the model's expert load counts (model.h): backbone layers, then DSpark stages. */
static int64_t *expert_load_row(const Model *m, int L) {
    const ModelDims *d = &m->d;
    if (L < d->n_layers) return m->expert_load ? m->expert_load + (size_t)L * (size_t)d->n_experts : NULL;
    return m->draft_expert_load ? m->draft_expert_load + (size_t)(L - d->n_layers) * (size_t)d->dspark_experts : NULL;
}

int model_block(const Model *m, int L, float *X, float *pi, int64_t n, BlockAttnFn attn, void *ctx, int32_t *experts) {
    const ModelDims *d = &m->d;
    const LayerWeights *lw = &m->w.layers[L];
    Workspace *ws = m->ws;
    bool draft = L >= d->n_layers;
    if (!ws || n > ws->rows) return di_errorf("block of layer %d: %lld rows exceed the workspace", L, (long long)n);
    BlockRows rows = {m->be, d, lw, X, pi, ws->block.in, ws->block.out, ws->block.mix_attn, ws->block.mix_ffn, ROWS_ATTN_IN};
    HcSite sa = site_of(m, lw, false), sf = site_of(m, lw, true);
    if (mhc_mixes(m, &sa, X, n, ws->block.mix_attn) != 0) return -1;
    model_for_rows(m, n, block_rows, &rows);
    if (attn(ctx, rows.a, n, rows.o) != 0) return -1;
    rows.step = ROWS_ATTN_OUT;
    model_for_rows(m, n, block_rows, &rows);
    if (mhc_mixes(m, &sf, X, n, ws->block.mix_ffn) != 0) return -1;
    rows.step = ROWS_FFN_IN;
    model_for_rows(m, n, block_rows, &rows);
    if (moe_forward(m, lw, draft ? d->dspark_top_k : d->top_k, rows.a, n, rows.o, experts,
                    expert_load_row(m, L)) != 0)
        return -1;
    rows.step = ROWS_FFN_OUT;
    model_for_rows(m, n, block_rows, &rows);
    return 0;
}

typedef struct {
    const Model *m;
    const RowBatch *rb;
    int layer;
    AttnShared *sh;
} TrunkAttn;

static int trunk_attn(void *ctx, const float *a, int64_t n, float *out) {
    TrunkAttn *t = ctx;
    (void)n;
    return attention_forward(t->m, t->rb, t->layer, a, t->sh, out);
}

/* DSpark context: main_x = RMSNorm(main_proj · taps) per row, then every stage's ring row
 * RMSNorm(wkv_s · main_x), RoPE (main table) at the row's position, FP8 round trip (§5.11 step 1-2). */
static int update_dspark_rings(const Model *m, const RowBatch *rb, const float *taps) {
    const ModelDims *d = &m->d;
    int64_t D = d->dim, Dh = d->head_dim, W = d->window, n = rb->row0[rb->n_seqs];
    float *mx = m->ws->fwd.ctx, *kv = m->ws->fwd.ctx_kv;
    if (model_linear(m, &m->w.main_proj, taps, n, mx, model_act_quant(m)) != 0) return di_error_wrap("DSpark context");
    for (int64_t i = 0; i < n; i++) m->be->rmsnorm(mx + i * D, mx + i * D, m->w.main_norm, D, d->eps);
    for (int st_i = 0; st_i < d->n_mtp; st_i++) {
        const LayerWeights *lw = &m->w.layers[d->n_layers + st_i];
        if (attn_window_kv(m, lw, &m->rope_main, mx, n, rb->pos, kv) != 0) return di_error_wrap("DSpark context");
        for (int b = 0; b < rb->n_seqs; b++) {
            int64_t r0 = rb->row0[b], nb = rb->row0[b + 1] - r0;
            for (int64_t i = nb > W ? nb - W : 0; i < nb; i++)
                memcpy(state_dspark_row(rb->st[b], st_i, rb->start[b] + i), kv + (r0 + i) * Dh, (size_t)Dh * sizeof *kv);
        }
    }
    return 0;
}

/* Every argument error is found before any state changes. */
static int check_seq(const Model *m, const ForwardSeq *q, int b) {
    const ModelDims *d = &m->d;
    if (!q->st || !q->tokens || q->n <= 0) return di_errorf("forward: request %d: invalid arguments (n = %lld)", b, (long long)q->n);
    /* bounds that keep every per-chunk buffer size far from overflow, and the context limit */
    if (q->n > FORWARD_MAX_CHUNK) return di_errorf("forward: chunk of %lld tokens exceeds the limit of %d", (long long)q->n, FORWARD_MAX_CHUNK);
    if (q->logits && !q->all_rows && (q->n_logits < 0 || q->n_logits > q->n))
        return di_errorf("forward: request %d asks for %lld logits rows of a %lld-row chunk", b, (long long)q->n_logits, (long long)q->n);
    if (q->start_pos != q->st->n_pos)
        return di_errorf("forward: chunk starts at %lld but the request state holds %lld positions", (long long)q->start_pos,
                         (long long)q->st->n_pos);
    const RunState *st = q->st;
    if (st->replay_end != 0 && (st->replay_start < 0 || st->replay_start >= st->replay_end || q->start_pos < st->replay_start))
        return di_errorf("forward: request %d: bounded replay [%lld, %lld) does not start at or before its chunk (%lld)", b,
                         (long long)st->replay_start, (long long)st->replay_end, (long long)q->start_pos);
    if (m->cfg.max_position_embeddings > 0 && q->start_pos + q->n > m->cfg.max_position_embeddings)
        return di_errorf("forward: positions up to %lld exceed max_position_embeddings %lld", (long long)(q->start_pos + q->n),
                         (long long)m->cfg.max_position_embeddings);
    for (int64_t i = 0; i < q->n; i++)
        if (q->tokens[i] < 0 || q->tokens[i] >= d->vocab)
            return di_errorf("forward: token %d at position %lld outside the vocabulary [0, %d)", q->tokens[i], (long long)(q->start_pos + i),
                             d->vocab);
    return 0;
}

/* Logits rows a request asks for: its last forward_logit_rows rows. */
static int64_t forward_logit_rows(const ForwardSeq *q) {
    if (!q->logits) return 0;
    return q->all_rows ? q->n : q->n_logits > 0 ? q->n_logits : 1;
}

/* §5.8 final collapse with the last FFN site's pre, norm, head -- one matmul over every row
 * that wants logits, so the head's weights are read once per batch, not once per request.
 * row0: the rows that reached the head (a bounded replay keeps a chunk's last rows only, and
 * never trims a request that wants logits of more rows than it keeps). */
static int head_logits(const Model *m, const ForwardSeq *seqs, int n_seqs, const int64_t *row0, const float *X, const float *pi) {
    const ModelDims *d = &m->d;
    int hc = d->hc_mult;
    int64_t D = d->dim, V = d->vocab, n_out = 0;
    float *head_in = m->ws->fwd.head_in, *head_out = m->ws->fwd.head_out;
    for (int b = 0; b < n_seqs; b++)
        if (seqs[b].logits) {
            for (int64_t r = row0[b + 1] - forward_logit_rows(&seqs[b]); r < row0[b + 1]; r++, n_out++) {
                m->be->mhc_collapse(X + r * hc * D, pi + r * hc, hc, D, head_in + n_out * D);
                m->be->rmsnorm(head_in + n_out * D, head_in + n_out * D, m->w.norm, D, d->eps);
            }
        }
    if (n_out == 0) return 0;
    if (model_matmul(m, &m->w.head, head_in, n_out, head_out) != 0) return -1;
    int64_t o = 0;
    for (int b = 0; b < n_seqs; b++) {
        if (!seqs[b].logits) continue;
        int64_t rows = forward_logit_rows(&seqs[b]);
        memcpy(seqs[b].logits, head_out + o * V, (size_t)(rows * V) * sizeof *head_out);
        o += rows;
    }
    return 0;
}

/* One forward of n <= workspace rows, its arguments already checked. */
static int forward_rows(const Model *m, const ForwardSeq *seqs, int n_seqs, int64_t n, ForwardTrace *trace) {
    const ModelDims *d = &m->d;
    Workspace *ws = m->ws;
    int hc = d->hc_mult, cols = d->n_engram ? engram_columns(d) : 0;
    int64_t D = d->dim;
    float *X = ws->fwd.X, *pi = ws->fwd.pi, *taps = ws->fwd.taps;
    int64_t *eids = ws->fwd.engram_ids, *row0 = ws->fwd.row0, *start = ws->fwd.start, *pos = ws->fwd.pos;
    RunState **sts = ws->fwd.states;
    int32_t *tokens = ws->fwd.tokens;
    bool drafter = m->w.has_dspark && d->n_taps > 0;
    row0[0] = 0;
    for (int b = 0; b < n_seqs; b++) {
        row0[b + 1] = row0[b] + seqs[b].n;
        start[b] = seqs[b].start_pos;
        sts[b] = seqs[b].st;
        for (int64_t i = 0; i < seqs[b].n; i++) {
            pos[row0[b] + i] = seqs[b].start_pos + i;
            tokens[row0[b] + i] = seqs[b].tokens[i];
        }
    }
    /* bounded replay: the rows of each request that run the decoder (replay.h) */
    int replay_at = -1;
    for (int b = 0; b < n_seqs; b++) {
        ws->fwd.keep[b] = replay_keep_rows(m, seqs[b].n, forward_logit_rows(&seqs[b]));
        if (ws->fwd.keep[b] < seqs[b].n) replay_at = replay_first_layer(m);
    }
    if (replay_at >= 0 && trace && (trace->layer_out || trace->experts || trace->selected))
        return di_errorf("forward: a trace of every layer's rows needs a forward that runs every row (bounded replay trims this one)");
    RowBatch rb = {n_seqs, sts, row0, start, pos, NULL, false};
    AttnShared sh;
    attn_shared_init(&sh, ws, n);
    /* §5.1 embedding copied to every stream; carried pre-mix (1, 0, ..., 0) */
    for (int64_t i = 0; i < n; i++) {
        if (di_matrix_row(&m->w.embed, tokens[i], ws->fwd.embed_row) != 0) return -1;
        for (int k = 0; k < hc; k++) {
            memcpy(X + (i * hc + k) * D, ws->fwd.embed_row, (size_t)D * sizeof *X);
            pi[i * hc + k] = k == 0 ? 1.0f : 0.0f;
        }
    }
    /* §5.2 Engram row ids, once per forward, from each request's own history */
    for (int b = 0; b < n_seqs && d->n_engram; b++)
        if (engram_hash(m, sts[b], seqs[b].tokens, seqs[b].n, start[b], eids + row0[b] * d->n_engram * cols) != 0) return -1;
    if (trace && trace->engram_ids && d->n_engram) memcpy(trace->engram_ids, eids, (size_t)(n * d->n_engram * cols) * sizeof *eids);
    for (int L = 0; L < d->n_layers; L++) {
        const LayerWeights *lw = &m->w.layers[L];
        int es = model_dims_engram_slot(d, L);
        if (es >= 0 && engram_forward(m, es, lw, eids, X, n) != 0) return di_error_wrap("engram of layer %d", L);
        int tap = drafter ? model_dims_tap_slot(d, L) : -1;
        if (tap >= 0) /* the layer's input after Engram, averaged over the streams (§5.5) */
            for (int64_t i = 0; i < n; i++)
                for (int64_t c = 0; c < D; c++) {
                    float acc = 0;
                    for (int k = 0; k < hc; k++) acc += X[(i * hc + k) * D + c];
                    taps[(i * d->n_taps + tap) * D + c] = acc / (float)hc;
                }
        if (L == replay_at && replay_enter(m, &rb, L, &n) != 0) return -1;
        rb.sources_done = L == replay_at; /* the replay's first layer wrote its caches on every row */
        rb.swa_floor = replay_at >= 0 && L > replay_at ? ws->fwd.swa_floor : NULL;
        TrunkAttn ta = {m, &rb, L, &sh};
        int32_t *ex = trace && trace->experts ? trace->experts + (int64_t)L * n * d->top_k : NULL;
        if (model_block(m, L, X, pi, n, trunk_attn, &ta, ex) != 0) return di_error_wrap("layer %d", L);
        if (trace && trace->layer_out) memcpy(trace->layer_out + (int64_t)L * n * hc * D, X, (size_t)(n * hc * D) * sizeof *X);
        if (trace && trace->selected && d->layer[L].is_index_source)
            for (int64_t i = 0; i < n; i++)
                for (int j = 0; j < d->idx_topk; j++)
                    trace->selected[((int64_t)L * n + i) * d->idx_topk + j] = j < sh.sel_count[i] ? sh.sel[i * d->idx_topk + j] : -1;
    }
    if (trace && trace->decoder_rows)
        for (int b = 0; b < n_seqs; b++) trace->decoder_rows[b] = row0[b + 1] - row0[b];
    if (drafter && update_dspark_rings(m, &rb, taps) != 0) return -1;
    if (head_logits(m, seqs, n_seqs, row0, X, pi) != 0) return -1;
    for (int b = 0; b < n_seqs; b++) {
        engram_push_history(m, sts[b], seqs[b].tokens, seqs[b].n);
        sts[b]->n_pos = seqs[b].start_pos + seqs[b].n; /* start[] may hold a replay start */
    }
    return 0;
}

/* A batch of more rows than the workspace holds runs as consecutive forwards of at most that
 * many rows, each request cut into consecutive chunks (the way the engine chunks a prefill), so
 * every row sees the same state it would in one call. */
static int forward_chunked(const Model *m, const ForwardSeq *seqs, int n_seqs, ForwardTrace *trace) {
    Workspace *ws = m->ws;
    ForwardSeq *pieces = ws->fwd.pieces;
    int64_t V = m->d.vocab, off = 0;
    if (trace) return di_errorf("forward: a trace needs the batch within the workspace's %lld rows", (long long)ws->rows);
    for (int b = 0; b < n_seqs;) {
        int np = 0;
        int64_t used = 0;
        while (b < n_seqs && used < ws->rows) {
            const ForwardSeq *q = &seqs[b];
            int64_t k = q->n - off < ws->rows - used ? q->n - off : ws->rows - used;
            /* the logits rows are a suffix of the request, so their part in a piece is its suffix */
            int64_t first = q->n - forward_logit_rows(q), from = first > off ? first : off;
            int64_t rows = off + k > from ? off + k - from : 0;
            float *lg = rows > 0 ? q->logits + (from - first) * V : NULL;
            pieces[np++] = (ForwardSeq){q->st, q->tokens + off, k, q->start_pos + off, lg, false, rows};
            used += k;
            off += k;
            if (off == q->n) b++, off = 0;
        }
        if (forward_rows(m, pieces, np, used, NULL) != 0) return -1;
    }
    return 0;
}

int model_forward_batch(const Model *m, const ForwardSeq *seqs, int n_seqs, ForwardTrace *trace) {
    if (!m || !seqs || n_seqs <= 0) return di_errorf("forward: no requests");
    if (trace && n_seqs != 1 && (trace->layer_out || trace->selected || trace->engram_ids))
        return di_errorf("forward: a trace of layer outputs, selections or Engram rows needs a single request");
    int64_t total = 0;
    for (int b = 0; b < n_seqs; b++) {
        if (check_seq(m, &seqs[b], b) != 0) return -1;
        for (int c = 0; c < b; c++)
            if (seqs[c].st == seqs[b].st) return di_errorf("forward: requests %d and %d share one state", c, b);
        total += seqs[b].n;
        if (total > FORWARD_MAX_CHUNK) return di_errorf("forward: batch of more than %d rows", FORWARD_MAX_CHUNK);
    }
    if (workspace_acquire(m) != 0) return -1;
    int rc = total <= m->ws->rows ? forward_rows(m, seqs, n_seqs, total, trace) : forward_chunked(m, seqs, n_seqs, trace);
    workspace_release(m);
    return rc;
}

int model_forward(const Model *m, RunState *st, const int32_t *tokens, int64_t n, int64_t s, float *logits, bool all_rows,
                  ForwardTrace *trace) {
    ForwardSeq q = {st, tokens, n, s, logits, all_rows, 0};
    return model_forward_batch(m, &q, 1, trace);
}
