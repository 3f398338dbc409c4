/* moe.c — router, routed experts and the shared expert (moe.h, spec §5.7). */
#include "model/moe.h"

#include "base/error.h"
#include "base/mem.h"
#include "model/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Top-k of biased scores, ties to the lower expert id (§5.7 step 2); ids best first. */
static void select_experts(const float *score, const float *bias, int E, int k, int32_t *ids) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        float bv = 0;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int i = 0; i < j; i++) taken |= ids[i] == e;
            if (taken) continue;
            float v = score[e] + bias[e];
            if (best < 0 || v > bv) best = e, bv = v;
        }
        ids[j] = best;
    }
}

/* One expert on a batch of rows: out[r] = w2 · (silu(min(w1 x, L)) · clamp(w3 x, ±L) · weight[r]). */
static int run_expert(const Model *m, const ExpertWeights *ex, const float *x, int64_t n, const float *weight, float *out,
                      float *gate, float *up) {
    int64_t F = ex->w1.rows;
    float lim = m->d.swiglu_limit;
    bool aq = model_act_quant(m);
    if (model_linear(m, &ex->w1, x, n, gate, aq) != 0 || model_linear(m, &ex->w3, x, n, up, aq) != 0) return -1;
    for (int64_t r = 0; r < n; r++)
        for (int64_t i = 0; i < F; i++) {
            float g = gate[r * F + i], u = up[r * F + i];
            if (lim > 0) {
                g = fminf(g, lim);
                u = fminf(fmaxf(u, -lim), lim);
            }
            gate[r * F + i] = op_silu(g) * u * (weight ? weight[r] : 1.0f);
        }
    return model_linear(m, &ex->w2, gate, n, out, aq);
}

int moe_forward(const Model *m, const LayerWeights *lw, int top_k, const float *f, int64_t n, float *y, int32_t *selected) {
    const ModelDims *d = &m->d;
    int E = lw->n_experts;
    int64_t D = d->dim, F = d->moe_inter;
    if (top_k <= 0 || top_k > E) return di_errorf("MoE: top-k %d out of range for %d experts", top_k, E);
    float *logits = di_malloc((size_t)(n * E) * sizeof(float) + 1, "router logits");
    int32_t *ids = di_malloc((size_t)(n * top_k) * sizeof(int32_t) + 1, "routing");
    float *wts = di_malloc((size_t)(n * top_k) * sizeof(float) + 1, "routing weights");
    float *xb = di_malloc((size_t)(n * D) * sizeof(float) + 1, "expert rows");
    float *ob = di_malloc((size_t)(n * D) * sizeof(float) + 1, "expert outputs");
    float *gate = di_malloc((size_t)(n * F) * sizeof(float) + 1, "expert hidden");
    float *up = di_malloc((size_t)(n * F) * sizeof(float) + 1, "expert hidden");
    float *rw = di_malloc((size_t)n * sizeof(float) + 1, "expert weights");
    int64_t *rows = di_malloc((size_t)n * sizeof(int64_t) + 1, "expert rows");
    int rc = -1;
    if (!logits || !ids || !wts || !xb || !ob || !gate || !up || !rw || !rows) goto done;
    /* 1. router: fp32 logits, / gate_temp, sqrt(softplus) */
    if (model_matmul(m, &lw->gate, f, n, logits) != 0) goto done;
    for (int64_t r = 0; r < n; r++) {
        float *s = logits + r * E;
        for (int e = 0; e < E; e++) s[e] = sqrtf(op_softplus(s[e] / d->gate_temp));
        select_experts(s, lw->gate_bias, E, top_k, ids + r * top_k);
        float sum = 0;
        for (int j = 0; j < top_k; j++) sum += s[ids[r * top_k + j]];
        for (int j = 0; j < top_k; j++) {
            float w = s[ids[r * top_k + j]];
            if (d->norm_topk && top_k > 1) w /= sum + 1e-20f;
            wts[r * top_k + j] = w * d->route_scale;
        }
    }
    if (selected) memcpy(selected, ids, (size_t)(n * top_k) * sizeof *ids);
    memset(y, 0, (size_t)(n * D) * sizeof *y);
    /* 2. routed experts in ascending id: each row's sum runs in ascending expert order. */
    for (int e = 0; e < E; e++) {
        int64_t cnt = 0;
        for (int64_t r = 0; r < n; r++)
            for (int j = 0; j < top_k; j++)
                if (ids[r * top_k + j] == e) {
                    rows[cnt] = r;
                    rw[cnt] = wts[r * top_k + j];
                    memcpy(xb + cnt * D, f + r * D, (size_t)D * sizeof *xb);
                    cnt++;
                }
        if (cnt == 0) continue;
        if (run_expert(m, &lw->experts[e], xb, cnt, rw, ob, gate, up) != 0) {
            di_error_wrap("expert %d", e);
            goto done;
        }
        for (int64_t i = 0; i < cnt; i++)
            for (int64_t c = 0; c < D; c++) y[rows[i] * D + c] += ob[i * D + c];
    }
    /* 3. shared expert last */
    if (lw->has_shared) {
        if (run_expert(m, &lw->shared, f, n, NULL, ob, gate, up) != 0) {
            di_error_wrap("shared expert");
            goto done;
        }
        for (int64_t i = 0; i < n * D; i++) y[i] += ob[i];
    }
    rc = 0;
done:
    free(logits);
    free(ids);
    free(wts);
    free(xb);
    free(ob);
    free(gate);
    free(up);
    free(rw);
    free(rows);
    return rc;
}
