/* dspark.c — DSpark drafter forward: block, base logits, Markov and confidence heads (dspark.h). */
#include "model/dspark.h"

#include "base/error.h"
#include "model/attention.h"
#include "model/forward.h"
#include "model/mhc.h"
#include "model/workspace.h"

#include <string.h>

typedef struct {
    const Model *m;
    RunState *const *st;
    int n_req, B, stage;
    const int64_t *pos; /* [n_req * B]: request b's block rows at st[b]->n_pos + r */
} DraftAttn;

/* Keys of every block row of request b: the stage's ring of b (positions max(0, p0-W) .. p0-1,
 * ascending) then all B block rows' own KV (never cached).  Queries and KV of every request's
 * rows in one product each. */
static int draft_attn(void *ctx, const float *a, int64_t n, float *out) {
    DraftAttn *da = ctx;
    const Model *m = da->m;
    const ModelDims *d = &m->d;
    const LayerWeights *lw = &m->w.layers[d->n_layers + da->stage];
    int64_t H = d->n_heads, Dh = d->head_dim, W = d->window;
    const Workspace *ws = m->ws;
    float *q = ws->attn.q, *qr = ws->attn.q_low, *kv = ws->attn.kv, *o = ws->attn.heads_out, *z = ws->attn.scores;
    const float **keys = ws->attn.keys; /* one row's key slots cover W + B (workspace.c) */
    if (attn_query(m, lw, &m->rope_main, a, n, da->pos, q, qr) != 0 || attn_window_kv(m, lw, &m->rope_main, a, n, da->pos, kv) != 0) return -1;
    for (int b = 0; b < da->n_req; b++) {
        int64_t nk = 0, p0 = da->st[b]->n_pos, r0 = (int64_t)b * da->B;
        for (int64_t pos = p0 - W < 0 ? 0 : p0 - W; pos < p0; pos++) keys[nk++] = state_dspark_row(da->st[b], da->stage, pos);
        for (int64_t r = 0; r < da->B; r++) keys[nk++] = kv + (r0 + r) * Dh;
        for (int64_t r = r0; r < r0 + da->B; r++) attn_heads(m, lw, q + r * H * Dh, keys, nk, o + r * H * Dh, z);
    }
    return attn_output(m, lw, &m->rope_main, o, n, da->pos, out);
}

/* The block rows [anchor, noise, ...] of every request through the stages, then the shared head:
 * x (pre-norm collapsed rows, kept for the confidence head) and every row's base logits. */
static int draft_blocks(const Model *m, RunState *const *st, const int32_t *anchors, int n_req, DraftOutput *outs) {
    const ModelDims *d = &m->d;
    const Workspace *ws = m->ws; /* the block's streams in the forward's (a draft is no forward) */
    int B = d->dspark_block, hc = d->hc_mult;
    int64_t D = d->dim, V = d->vocab, N = (int64_t)n_req * B;
    float *X = ws->fwd.X, *pi = ws->fwd.pi, *x = ws->fwd.head_in, *zn = ws->fwd.ctx;
    int64_t *pos = ws->fwd.pos;
    for (int64_t i = 0; i < N; i++) {
        int64_t r = i % B;
        if (di_matrix_row(&m->w.embed, r == 0 ? anchors[i / B] : d->dspark_noise, ws->fwd.embed_row) != 0) return -1;
        for (int k = 0; k < hc; k++) {
            memcpy(X + (i * hc + k) * D, ws->fwd.embed_row, (size_t)D * sizeof *X);
            pi[i * hc + k] = k == 0 ? 1.0f : 0.0f;
        }
        pos[i] = st[i / B]->n_pos + r;
    }
    for (int s = 0; s < d->n_mtp; s++) {
        DraftAttn da = {m, st, n_req, B, s, pos};
        if (model_block(m, d->n_layers + s, X, pi, N, draft_attn, &da, NULL) != 0) return di_error_wrap("DSpark stage %d", s);
    }
    for (int64_t i = 0; i < N; i++) {
        m->be->mhc_collapse(X + i * hc * D, pi + i * hc, hc, D, x + i * D);
        m->be->rmsnorm(zn + i * D, x + i * D, m->w.mtp_norm, D, d->eps);
    }
    if (model_matmul(m, &m->w.head, zn, N, ws->fwd.head_out) != 0) return -1;
    for (int b = 0; b < n_req; b++) memcpy(outs[b].base_logits, ws->fwd.head_out + (int64_t)b * B * V, (size_t)(B * V) * sizeof(float));
    return 0;
}

/* The sequential Markov chain of one request: row r adds W2 · W1[d_{r-1}] (d_{-1} = anchor);
 * given: imposed drafts; else sampler; else greedy. */
static int markov_chain(const Model *m, int32_t anchor, const float *x, const int32_t *given, const DraftSampler *sampler, DraftOutput *out) {
    const ModelDims *d = &m->d;
    const Workspace *ws = m->ws;
    int64_t D = d->dim, V = d->vocab, R = d->markov_rank;
    float *e = ws->draft.markov_e, *bias = ws->draft.markov_bias, *cin = ws->draft.conf_in;
    int32_t prev = anchor;
    for (int r = 0; r < d->dspark_block; r++) {
        if (di_matrix_row(&m->w.markov_embed, prev, e) != 0) return -1;
        if (model_matmul(m, &m->w.markov_head, e, 1, bias) != 0) return -1;
        float *lg = out->logits + r * V;
        int32_t best = 0;
        for (int64_t v = 0; v < V; v++) {
            lg[v] = out->base_logits[r * V + v] + bias[v];
            if (lg[v] > lg[best]) best = (int32_t)v;
        }
        memcpy(cin, x + r * D, (size_t)D * sizeof *cin);
        memcpy(cin + D, e, (size_t)R * sizeof *cin);
        if (model_matmul(m, &m->w.conf_proj, cin, 1, &out->confidence[r]) != 0) return -1;
        int32_t next = given ? given[r] : sampler ? sampler->pick(sampler->ctx, lg, V, r) : best;
        if (next < 0 && sampler && !given) return di_error_wrap("dspark sampler, row %d", r);
        if (next < 0 || next >= d->vocab) return di_errorf("dspark: draft token %d outside the vocabulary", next);
        out->tokens[r] = next;
        prev = next;
    }
    return 0;
}

static int check_request(const Model *m, RunState *st, int32_t anchor, const DraftOutput *out) {
    if (!st || !out || !out->base_logits || !out->logits || !out->confidence || !out->tokens) return di_errorf("dspark: invalid arguments");
    if (anchor < 0 || anchor >= m->d.vocab) return di_errorf("dspark: anchor token %d outside the vocabulary", anchor);
    return 0;
}

int dspark_draft_batch(const Model *m, RunState *const *st, const int32_t *anchors, const int32_t *const *given,
                       const DraftSampler *samplers, DraftOutput *outs, int n_req) {
    if (!m || !st || !anchors || !outs || n_req < 1) return di_errorf("dspark: invalid arguments");
    const ModelDims *d = &m->d;
    if (!m->w.has_dspark || d->n_mtp <= 0) return di_errorf("dspark: the model has no DSpark stages");
    int B = d->dspark_block;
    if (B <= 0 || B > DSPARK_MAX_BLOCK) return di_errorf("dspark: block size %d outside [1, %d]", B, DSPARK_MAX_BLOCK);
    for (int b = 0; b < n_req; b++) {
        if (check_request(m, st[b], anchors[b], &outs[b]) != 0) return di_error_wrap("dspark: request %d", b);
        if (samplers && !samplers[b].pick) return di_errorf("dspark: request %d has no sampler", b);
    }
    if (workspace_acquire(m) != 0) return -1;
    int per = (int)(m->ws->rows / B), rc = per >= 1 ? 0 : di_errorf("dspark: a block of %d rows exceeds the workspace", B);
    for (int b0 = 0; rc == 0 && b0 < n_req; b0 += per) { /* as many blocks as the workspace holds */
        int nb = n_req - b0 < per ? n_req - b0 : per;
        rc = draft_blocks(m, st + b0, anchors + b0, nb, outs + b0);
        for (int b = b0; rc == 0 && b < b0 + nb; b++)
            if (markov_chain(m, anchors[b], m->ws->fwd.head_in + (int64_t)(b - b0) * B * d->dim, given ? given[b] : NULL,
                             samplers ? &samplers[b] : NULL, &outs[b]) != 0)
                rc = di_error_wrap("dspark: request %d", b);
    }
    workspace_release(m);
    return rc;
}

int dspark_draft(const Model *m, RunState *st, int32_t anchor, const int32_t *given, DraftOutput *out) {
    return dspark_draft_batch(m, &st, &anchor, given ? &given : NULL, NULL, out, 1);
}

int dspark_draft_sampled(const Model *m, RunState *st, int32_t anchor, const DraftSampler *sampler, DraftOutput *out) {
    if (!sampler || !sampler->pick) return di_errorf("dspark: no sampler");
    return dspark_draft_batch(m, &st, &anchor, NULL, sampler, out, 1);
}
