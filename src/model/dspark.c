/* dspark.c — DSpark drafter forward: block, base logits, Markov and confidence heads (dspark.h). */
#include "model/dspark.h"

#include "base/error.h"
#include "base/mem.h"
#include "model/attention.h"
#include "model/forward.h"
#include "model/mhc.h"
#include "model/ops.h"

#include <stdlib.h>
#include <string.h>

#define ALLOC(ptr, count, what) ((ptr) = di_malloc((size_t)(count) * sizeof *(ptr) + 1, what))

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
    float *q, *qr, *kv, *o, *z;
    const float **keys;
    int64_t pos[DSPARK_MAX_BLOCK];
    int rc = -1;
    if (n > DSPARK_MAX_BLOCK) return di_errorf("dspark: block of %lld rows exceeds %d", (long long)n, DSPARK_MAX_BLOCK);
    for (int64_t r = 0; r < n; r++) pos[r] = da->p0 + r;
    ALLOC(q, n * H * Dh, "draft queries");
    ALLOC(qr, n * d->q_rank, "draft low-rank queries");
    ALLOC(kv, n * Dh, "draft block KV");
    ALLOC(o, n * H * Dh, "draft attention output");
    ALLOC(z, W + n + 1, "draft scores");
    ALLOC(keys, W + n + 1, "draft keys");
    if (!q || !qr || !kv || !o || !z || !keys) goto done;
    if (attn_query(m, lw, &m->rope_main, a, n, pos, q, qr) != 0 || attn_window_kv(m, lw, &m->rope_main, a, n, pos, kv) != 0)
        goto done;
    int64_t nk = 0;
    for (int64_t pos = da->p0 - W < 0 ? 0 : da->p0 - W; pos < da->p0; pos++) keys[nk++] = state_dspark_row(da->st, da->stage, pos);
    for (int64_t r = 0; r < n; r++) keys[nk++] = kv + r * Dh;
    for (int64_t r = 0; r < n; r++) attn_heads(m, lw, q + r * H * Dh, keys, nk, o + r * H * Dh, z);
    if (attn_output(m, lw, &m->rope_main, o, n, pos, out) != 0) goto done;
    rc = 0;
done:
    free(q);
    free(qr);
    free(kv);
    free(o);
    free(z);
    free(keys);
    return rc;
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
    float *X, *pi, *x, *zn, *e, *bias, *cin;
    int rc = -1;
    ALLOC(X, (int64_t)B * hc * D, "draft streams");
    ALLOC(pi, (int64_t)B * hc, "draft pre-mix");
    ALLOC(x, (int64_t)B * D, "draft hidden");
    ALLOC(zn, D, "draft normed hidden");
    ALLOC(e, R, "Markov embedding");
    ALLOC(bias, V, "Markov bias");
    ALLOC(cin, D + R, "confidence input");
    if (!X || !pi || !x || !zn || !e || !bias || !cin) goto done;
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
    free(X);
    free(pi);
    free(x);
    free(zn);
    free(e);
    free(bias);
    free(cin);
    return rc;
}

int dspark_draft(const Model *m, RunState *st, int32_t anchor, const int32_t *given, DraftOutput *out) {
    return draft(m, st, anchor, given, NULL, out);
}

int dspark_draft_sampled(const Model *m, RunState *st, int32_t anchor, const DraftSampler *sampler, DraftOutput *out) {
    if (!sampler || !sampler->pick) return di_errorf("dspark: no sampler");
    return draft(m, st, anchor, NULL, sampler, out);
}
