/* replay.c — decoder SWA bounded replay (replay.h): the mode's checks, the first decoder layer's
 * pre-replay part on every row, and the gather of each request's replayed rows into a dense
 * sub-batch.  The truncated window itself is RowBatch.swa_floor, honoured by attention.c. */
#include "model/replay.h"

#include "base/env.h"
#include "base/error.h"
#include "base/log.h"
#include "model/mhc.h"
#include "model/workspace.h"

#include <string.h>

/* The first decoder layer of the CED split (layer_plan.h); n_layers when there is none. */
static int decoder_start(const ModelDims *d) {
    int L = 0;
    while (L < d->n_layers && !model_dims_is_decoder(d, L)) L++;
    return L;
}

/* Why layer plan d cannot be split at its midpoint, NULL when it can. */
static const char *unsplittable(const ModelDims *d) {
    int L0 = decoder_start(d);
    if (d->n_layers < 2 || L0 >= d->n_layers) return "the model has no decoder layers";
    if (d->layer[L0].role != DI_ROLE_FULL || !d->layer[L0].is_kv_source) return "the first decoder layer is not a Full KV source";
    for (int L = L0 + 1; L < d->n_layers; L++)
        if (d->layer[L].is_kv_source) return "a decoder layer above the first is a KV source (its cache needs every row)";
    for (int e = 0; e < d->n_engram; e++)
        if (d->engram_layers[e] >= L0) return "an Engram layer is in the decoder";
    if (d->cand_src >= 0 && d->cand_src < L0) return "the candidate pool comes from the encoder";
    return NULL;
}

int model_set_prefill_replay(Model *m, ReplayMode mode, int64_t keep) {
    if (!m) return di_errorf("prefill replay: no model");
    if (mode != REPLAY_OFF && mode != REPLAY_COMPACT) return di_errorf("prefill replay: unknown mode %d", (int)mode);
    if (mode == REPLAY_COMPACT) {
        const char *why = unsplittable(&m->d);
        if (keep < m->d.window)
            return di_errorf("prefill replay: keeping %lld rows is less than the model's sliding window of %d (the rows every "
                             "decode step reads)",
                             (long long)keep, m->d.window);
        if (why) return di_errorf("prefill replay: compact mode needs a CED layer plan, but %s", why);
    }
    if (keep < 1) return di_errorf("prefill replay: %lld rows to keep", (long long)keep);
    m->replay = (PrefillReplay){mode, keep};
    return 0;
}

int model_prefill_replay_from_env(Model *m) {
    DiEnvPrefillReplay r;
    if (!m) return di_errorf("prefill replay: no model");
    if (di_env_prefill_replay(&r) != 0) return -1;
    long keep = r.keep > 0 ? r.keep : REPLAY_DEFAULT_KEEP;
    if ((r.compact || r.keep > 0) && keep < m->d.window)
        return di_errorf("DEEPINFER_YOCO_PREFILL_KEEP_TOKENS=%ld%s is less than the model's sliding window of %d: the "
                         "replay must cover the rows every decode step reads",
                         keep, r.keep > 0 ? "" : " (the default)", m->d.window);
    if (model_set_prefill_replay(m, r.compact ? REPLAY_COMPACT : REPLAY_OFF, keep) != 0)
        return di_error_wrap("DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE=%s", r.compact ? "compact" : "off");
    if (r.compact) DI_INFO("prefill: decoder bounded replay, the decoder layers run on the last %ld rows of each chunk", keep);
    return 0;
}

int replay_first_layer(const Model *m) { return m && m->replay.mode == REPLAY_COMPACT ? decoder_start(&m->d) : -1; }

int64_t replay_keep_rows(const Model *m, int64_t n, int64_t logit_rows) {
    if (replay_first_layer(m) < 0 || logit_rows > m->replay.keep || n <= m->replay.keep) return n;
    return m->replay.keep;
}

/* ---- the pre-replay part of the first decoder layer, every row ------------------------------ */

typedef struct {
    const Model *m;
    const float *X, *pi, *norm;
    float *a;
} AttnInput;

/* The layer's attention input: collapse with the carried pre-mix, then attn_norm (§5.5). */
static void attn_input_rows(void *ctx, int64_t r0, int64_t r1) {
    const AttnInput *t = ctx;
    int hc = t->m->d.hc_mult;
    int64_t D = t->m->d.dim;
    for (int64_t i = r0; i < r1; i++) {
        t->m->be->mhc_collapse(t->X + i * hc * D, t->pi + i * hc, hc, D, t->a + i * D);
        t->m->be->rmsnorm(t->a + i * D, t->a + i * D, t->norm, D, t->m->d.eps);
    }
}

/* Compressed KV and index keys of every row, and layer L's window KV of the rows a trimmed
 * request's replay reads below its start ([s - W + 1, s)), written to its ring so the replay's
 * window attention in L is exact; the replay itself rewrites the ring's newest W rows. */
static int pre_replay(const Model *m, const RowBatch *rb, int L) {
    const ModelDims *d = &m->d;
    const LayerWeights *lw = &m->w.layers[L];
    Workspace *ws = m->ws;
    int64_t Dh = d->head_dim, W = d->window, n = rb->row0[rb->n_seqs];
    float *a = ws->block.in, *kv = ws->attn.kv;
    AttnInput in = {m, ws->fwd.X, ws->fwd.pi, lw->attn_norm, a};
    model_for_rows(m, n, attn_input_rows, &in);
    if (attn_write_sources(m, rb, L, a) != 0) return -1;
    if (attn_window_kv(m, lw, model_rope(m, d->layer[L].compress_ratio), a, n, rb->pos, kv) != 0) return di_error_wrap("window KV of layer %d", L);
    for (int b = 0; b < rb->n_seqs; b++) {
        int64_t r0 = rb->row0[b], nb = rb->row0[b + 1] - r0, first = nb - ws->fwd.keep[b];
        for (int64_t i = first - W + 1 < 0 ? 0 : first - W + 1; i < first; i++)
            memcpy(state_window_row(rb->st[b], L, rb->start[b] + i), kv + (r0 + i) * Dh, (size_t)Dh * sizeof *kv);
    }
    return 0;
}

/* ---- the gather ----------------------------------------------------------------------------- */

/* Rows src .. src+cnt-1 of a [rows][width] array to dst (dst <= src, regions may overlap). */
static void move_rows(void *base, size_t row_bytes, int64_t dst, int64_t src, int64_t cnt) {
    if (dst != src && cnt > 0) memmove((char *)base + dst * row_bytes, (char *)base + src * row_bytes, (size_t)cnt * row_bytes);
}

int replay_enter(const Model *m, const RowBatch *rb, int L, int64_t *n) {
    if (!m || !rb || !n || L != replay_first_layer(m)) return di_errorf("prefill replay: layer %d does not start a replay", L);
    Workspace *ws = m->ws;
    if (rb->row0 != ws->fwd.row0 || rb->start != ws->fwd.start || rb->pos != ws->fwd.pos)
        return di_errorf("prefill replay: the batch is not the workspace's");
    if (pre_replay(m, rb, L) != 0) return di_error_wrap("prefill replay");
    const ModelDims *d = &m->d;
    size_t xb = (size_t)d->hc_mult * (size_t)d->dim * sizeof(float), pb = (size_t)d->hc_mult * sizeof(float);
    size_t tb = (size_t)d->n_taps * (size_t)d->dim * sizeof(float);
    int64_t *row0 = ws->fwd.row0, *start = ws->fwd.start, dst = 0;
    /* ascending: a request's rows only move down, onto rows already gathered or its own */
    for (int b = 0; b < rb->n_seqs; b++) {
        int64_t nb = row0[b + 1] - row0[b], k = ws->fwd.keep[b], src = row0[b] + nb - k;
        move_rows(ws->fwd.X, xb, dst, src, k);
        move_rows(ws->fwd.pi, pb, dst, src, k);
        move_rows(ws->fwd.taps, tb, dst, src, k);
        move_rows(ws->fwd.pos, sizeof *ws->fwd.pos, dst, src, k);
        start[b] += nb - k;
        ws->fwd.swa_floor[b] = k < nb ? start[b] : 0;
        row0[b] = dst; /* row0[b + 1] is read above before it is rewritten */
        dst += k;
    }
    row0[rb->n_seqs] = dst;
    *n = dst;
    return 0;
}
