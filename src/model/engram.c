/* engram.c — Engram hashing and gated memory lookup (engram.h, spec §5.2-5.3). */
#include "model/engram.h"

#include "base/error.h"
#include "model/workspace.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int engram_columns(const ModelDims *d) { return (d->engram_max_ngram - 1) * d->engram_heads; }

static int token_cid(const Model *m, int32_t tok, int32_t *cid) {
    if (tok < 0 || tok >= m->token_map_len) return di_errorf("engram: token %d outside the compressed token map (%lld entries)", tok, (long long)m->token_map_len);
    *cid = m->token_map[tok];
    return 0;
}

int engram_hash(const Model *m, RunState *st, const int32_t *tokens, int64_t n, int64_t s, int64_t *ids) {
    const ModelDims *d = &m->d;
    if (d->n_engram == 0) return 0;
    if (!m->token_map || !m->engram_mult_set) return di_errorf("engram: the compressed token map is not set (tokenizer-derived, §5.2 a; model_set_engram_token_map)");
    int N = d->engram_max_ngram, H = d->engram_heads, cols = engram_columns(d);
    int32_t pad = 0;
    if (token_cid(m, d->engram_pad_id, &pad) != 0) return -1;
    /* positions below a bounded replay's start are absent, like those before the sequence's */
    int64_t floor = st->replay_end > 0 ? st->replay_start : 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t p = s + i;
        int64_t x[DIMS_MAX_NGRAM];
        /* (c) look-back: position p-k, pad once it would cross the sequence (or replay) start */
        for (int k = 0; k < N; k++) {
            if (p - k < floor) {
                x[k] = pad;
                continue;
            }
            int64_t q = p - k;
            int32_t cid = 0;
            if (q >= s) {
                if (token_cid(m, tokens[q - s], &cid) != 0) return -1;
            } else {
                cid = state_engram_history(st)[s - 1 - q];
            }
            x[k] = cid;
        }
        for (int l = 0; l < d->n_engram; l++) {
            const EngramHash *eh = &m->engram[l];
            /* (f) u_k = x_k·M_k (no overflow: x < C, M < 2^63/C), XOR chain over the orders */
            uint64_t r = (uint64_t)(x[0] * eh->mult[0]);
            for (int o = 0; o < N - 1; o++) {
                r ^= (uint64_t)(x[o + 1] * eh->mult[o + 1]);
                for (int j = 0; j < H; j++) {
                    int c = o * H + j;
                    ids[(i * d->n_engram + l) * cols + c] = (int64_t)(r % (uint64_t)eh->prime[c]) + eh->offset[c];
                }
            }
        }
    }
    return 0;
}

void engram_push_history(const Model *m, RunState *st, const int32_t *tokens, int64_t n) {
    int keep = st->ngram_hist;
    if (keep <= 0 || !m->token_map) return;
    int32_t *hist = state_engram_history(st);
    for (int64_t i = 0; i < n; i++) {
        for (int k = keep - 1; k > 0; k--) hist[k] = hist[k - 1];
        int32_t t = tokens[i];
        hist[0] = (t >= 0 && t < m->token_map_len) ? m->token_map[t] : 0;
    }
}

int engram_forward(const Model *m, int slot, const LayerWeights *lw, const int64_t *ids, float *X, int64_t n) {
    const ModelDims *d = &m->d;
    int cols = engram_columns(d), hd = d->engram_head_dim, hc = d->hc_mult;
    int64_t D = d->dim, in = (int64_t)cols * hd, outw = (int64_t)(hc + 1) * D;
    if (!m->ws || n > m->ws->rows) return di_errorf("engram: %lld rows exceed the workspace", (long long)n);
    float *u = m->ws->engram.rows, *kv = m->ws->engram.kv;
    for (int64_t i = 0; i < n; i++) { /* §5.3 step 1: the rows' FP8 table entries, dequantised exactly */
        const int64_t *row_ids = ids + (i * d->n_engram + slot) * cols;
        for (int c = 0; c < cols; c++)
            if (row_ids[c] < 0 || row_ids[c] >= lw->engram_rows)
                return di_errorf("engram: row id %lld outside the table (%lld rows)", (long long)row_ids[c], (long long)lw->engram_rows);
        m->be->engram_gather(lw->engram_codes, lw->engram_scales, row_ids, cols, hd, u + i * in);
    }
    if (model_linear(m, &lw->engram_wkv, u, n, kv, model_act_quant(m)) != 0) return di_error_wrap("engram wkv");
    for (int64_t i = 0; i < n; i++) {
        const float *value = kv + i * outw + (int64_t)hc * D;
        for (int k = 0; k < hc; k++)
            m->be->engram_gate(X + (i * hc + k) * D, kv + i * outw + (int64_t)k * D, value, lw->engram_qk + (int64_t)k * D, D, d->eps);
    }
    return 0;
}
