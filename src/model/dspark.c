/* dspark.c — DSpark drafter forward: block, base logits, Markov and confidence heads (dspark.h). */
#include "model/dspark.h"

#include "base/error.h"
#include "model/attention.h"
#include "model/forward.h"
#include "model/mhc.h"
#include "model/ops.h"
#include "model/workspace.h"

#include <string.h>

typedef struct {
    const Model *m;
    RunState *st;
    int stage;
    int64_t p0; /* position of block row 0 */
} DraftAttn;

/* Keys of every block row: the stage's ring (positions max(0, p0-W) .. p0-1, ascending) then all
 * block rows' own KV (never cached). */
static int draft_attn(void *ctx, const float *a, int64_t n, float *out) {
    DraftAttn *da = ctx;
    const Model *m = da->m;
    const ModelDims *d = &m->d;
    const LayerWeights *lw = &m->w.layers[d->n_layers + da->stage];
    int64_t H = d->n_heads, Dh = d->head_dim, W = d->window;
    const Workspace *ws = m->ws;
    float *q = ws->attn.q, *qr = ws->attn.q_low, *kv = ws->attn.kv, *o = ws->attn.heads_out, *z = ws->attn.scores;
    const float **keys = ws->attn.keys; /* one row's key slots cover W + n (workspace.c) */
    int64_t pos[DSPARK_MAX_BLOCK];
    if (n > DSPARK_MAX_BLOCK) return di_errorf("dspark: block of %lld rows exceeds %d", (long long)n, DSPARK_MAX_BLOCK);
    for (int64_t r = 0; r < n; r++) pos[r] = da->p0 + r;
    if (attn_query(m, lw, &m->rope_main, a, n, pos, q, qr) != 0 || attn_window_kv(m, lw, &m->rope_main, a, n, pos, kv) != 0) return -1;
    int64_t nk = 0;
    for (int64_t pos = da->p0 - W < 0 ? 0 : da->p0 - W; pos < da->p0; pos++) keys[nk++] = state_dspark_row(da->st, da->stage, pos);
    for (int64_t r = 0; r < n; r++) keys[nk++] = kv + r * Dh;
    for (int64_t r = 0; r < n; r++) attn_heads(m, lw, q + r * H * Dh, keys, nk, o + r * H * Dh, z);
    return attn_output(m, lw, &m->rope_main, o, n, pos, out);
}

/* given: imposed drafts; else sampler; else greedy */
static int draft(const Model *m, RunState *st, int32_t anchor, const int32_t *given, const DraftSampler *sampler, DraftOutput *out) {
    if (!m || !st || !out || !out->base_logits || !out->logits || !out->confidence || !out->tokens)
        return di_errorf("dspark: invalid arguments");
    const ModelDims *d = &m->d;
    if (!m->w.has_dspark || d->n_mtp <= 0) return di_errorf("dspark: the model has no DSpark stages");
    if (anchor < 0 || anchor >= d->vocab) return di_errorf("dspark: anchor token %d outside the vocabulary", anchor);
    int B = d->dspark_block, hc = d->hc_mult;
    if (B <= 0 || B > DSPARK_MAX_BLOCK) return di_errorf("dspark: block size %d outside [1, %d]", B, DSPARK_MAX_BLOCK);
    int64_t D = d->dim, V = d->vocab, R = d->markov_rank, p0 = st->n_pos;
    if (workspace_acquire(m) != 0) return -1;
    const Workspace *ws = m->ws; /* the block's streams in the forward's (a draft is no forward) */
    float *X = ws->fwd.X, *pi = ws->fwd.pi, *x = ws->draft.x, *zn = ws->draft.norm_x, *e = ws->draft.markov_e;
    float *bias = ws->draft.markov_bias, *cin = ws->draft.conf_in;
    int rc = -1;
    for (int r = 0; r < B; r++) {
        int32_t tok = r == 0 ? anchor : d->dspark_noise;
        if (di_matrix_row(&m->w.embed, tok, zn) != 0) goto done;
        for (int k = 0; k < hc; k++) {
            memcpy(X + ((int64_t)r * hc + k) * D, zn, (size_t)D * sizeof *zn);
            pi[r * hc + k] = k == 0 ? 1.0f : 0.0f;
        }
    }
    for (int s = 0; s < d->n_mtp; s++) {
        DraftAttn da = {m, st, s, p0};
        if (model_block(m, d->n_layers + s, X, pi, B, draft_attn, &da, NULL) != 0) {
            di_error_wrap("DSpark stage %d", s);
            goto done;
        }
    }
    for (int r = 0; r < B; r++) {
        mhc_collapse(X + (int64_t)r * hc * D, pi + r * hc, hc, (int)D, x + r * D); /* pre-norm x_r */
        op_rmsnorm(zn, x + r * D, m->w.mtp_norm, D, d->eps);
        if (model_matmul(m, &m->w.head, zn, 1, out->base_logits + r * V) != 0) goto done;
    }
    /* sequential Markov chain: row r adds W2 · W1[d_{r-1}] (d_{-1} = anchor) */
    int32_t prev = anchor;
    for (int r = 0; r < B; r++) {
        if (di_matrix_row(&m->w.markov_embed, prev, e) != 0) goto done;
        if (model_matmul(m, &m->w.markov_head, e, 1, bias) != 0) goto done;
        float *lg = out->logits + r * V;
        int32_t best = 0;
        for (int64_t v = 0; v < V; v++) {
            lg[v] = out->base_logits[r * V + v] + bias[v];
            if (lg[v] > lg[best]) best = (int32_t)v;
        }
        memcpy(cin, x + r * D, (size_t)D * sizeof *cin);
        memcpy(cin + D, e, (size_t)R * sizeof *cin);
        if (model_matmul(m, &m->w.conf_proj, cin, 1, &out->confidence[r]) != 0) goto done;
        int32_t next = given ? given[r] : sampler ? sampler->pick(sampler->ctx, lg, V, r) : best;
        if (next < 0 && sampler && !given) {
            di_error_wrap("dspark sampler, row %d", r);
            goto done;
        }
        if (next < 0 || next >= d->vocab) {
            di_errorf("dspark: draft token %d outside the vocabulary", next);
            goto done;
        }
        out->tokens[r] = next;
        prev = next;
    }
    rc = 0;
done:
    workspace_release(m);
    return rc;
}

int dspark_draft(const Model *m, RunState *st, int32_t anchor, const int32_t *given, DraftOutput *out) {
    return draft(m, st, anchor, given, NULL, out);
}

int dspark_draft_sampled(const Model *m, RunState *st, int32_t anchor, const DraftSampler *sampler, DraftOutput *out) {
    if (!sampler || !sampler->pick) return di_errorf("dspark: no sampler");
    return draft(m, st, anchor, NULL, sampler, out);
}
