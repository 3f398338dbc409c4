/* weights.c — binding the checkpoint's tensors to the Weights struct (weights.h). */
#include "model/weights.h"

#include "base/error.h"
#include "base/mem.h"
#include "kernels/numformats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int own(Weights *w, void *p) {
    if (di_grow(&w->owned, &w->cap_owned, w->n_owned + 1, 64, sizeof *w->owned, "weight copies") != 0) return -1;
    w->owned[w->n_owned++] = p;
    return 0;
}

/* A vector of n values stored as BF16 or F32, copied to float32. */
static int bind_vec(Weights *w, DiCheckpoint *ck, const char *name, int64_t n, float **out) {
    const DiTensorInfo *t = di_checkpoint_lookup(ck, name);
    if (!t) return di_errorf("no tensor '%s'", name);
    DiDType dt = t->dtype == DI_DTYPE_F32 ? DI_DTYPE_F32 : DI_DTYPE_BF16;
    const void *data;
    if (di_checkpoint_vector(ck, name, n, dt, &data) != 0) return -1;
    float *v = di_malloc((size_t)n * sizeof *v, name);
    if (!v || own(w, v) != 0) {
        free(v);
        return -1;
    }
    for (int64_t i = 0; i < n; i++)
        v[i] = dt == DI_DTYPE_F32 ? ((const float *)data)[i] : di_bf16_to_f32(((const uint16_t *)data)[i]);
    *out = v;
    return 0;
}

/* A matrix the forward pass multiplies by, readied for the model's kernels (matrix_prepare: on
 * CPUs slow on float32 subnormals, an FP8 matrix's subnormal map, which reads its bytes once). */
static int bind_mat(Weights *w, DiCheckpoint *ck, const char *name, int64_t rows, int64_t cols, DiMatrix *out) {
    if (di_checkpoint_matrix(ck, name, rows, cols, out) != 0) return -1;
    if (!w->prepare) return 0;
    void *prepared;
    if (w->be->matrix_prepare(w->be, out, &prepared) != 0) return di_error_wrap("'%s'", name);
    if (prepared && own(w, prepared) != 0) {
        free(prepared);
        out->fp8_subnormal_map = NULL;
        return -1;
    }
    if (prepared) w->prepared_bytes += di_matrix_data_bytes(out);
    return 0;
}

#define NAME(buf, ...) snprintf(buf, sizeof buf, __VA_ARGS__)

static int bind_layer(Weights *w, DiCheckpoint *ck, const ModelDims *d, int L, LayerWeights *lw) {
    char p[64], n[160];
    bool draft = L >= d->n_layers;
    if (draft) NAME(p, "mtp.%d", L - d->n_layers);
    else NAME(p, "layers.%d", L);
    int64_t D = d->dim, hc = d->hc_mult, nmix = (2 + hc) * hc;
    int64_t H = d->n_heads, Dh = d->head_dim, G = d->o_groups;
#define V(field, len, ...) (NAME(n, __VA_ARGS__), bind_vec(w, ck, n, len, &lw->field))
#define M(field, rows, cols, ...) (NAME(n, __VA_ARGS__), bind_mat(w, ck, n, rows, cols, &lw->field))
    if (V(attn_norm, D, "%s.attn_norm.weight", p) || V(ffn_norm, D, "%s.ffn_norm.weight", p) ||
        M(hc_attn_fn, nmix, hc * D, "%s.hc_attn_fn", p) || M(hc_ffn_fn, nmix, hc * D, "%s.hc_ffn_fn", p) ||
        V(hc_attn_base, nmix, "%s.hc_attn_base", p) || V(hc_ffn_base, nmix, "%s.hc_ffn_base", p) ||
        V(hc_attn_scale, 3, "%s.hc_attn_scale", p) || V(hc_ffn_scale, 3, "%s.hc_ffn_scale", p))
        return -1;
    if (M(wq_a, d->q_rank, D, "%s.attn.wq_a.weight", p) || V(q_norm, d->q_rank, "%s.attn.q_norm.weight", p) ||
        M(wq_b, H * Dh, d->q_rank, "%s.attn.wq_b.weight", p) || M(wkv, Dh, D, "%s.attn.wkv.weight", p) ||
        V(kv_norm, Dh, "%s.attn.kv_norm.weight", p) || M(wo_b, D, G * d->o_rank, "%s.attn.wo_b.weight", p) ||
        V(attn_sink, H, "%s.attn.attn_sink", p))
        return -1;
    /* wo_a as stored (FP8): REF multiplies by its BF16 dequantisation, but e4m3 x 2^k is exact in
     * BF16 and float32 alike and the kernels decode it exactly, so the products are the same bits */
    if (M(wo_a, G * d->o_rank, (H / G) * Dh, "%s.attn.wo_a.weight", p)) return -1;
    if (!draft && d->layer[L].is_kv_source) {
        if (M(comp_wkv, Dh, D, "%s.attn.compressor.wkv.weight", p) || V(comp_norm, Dh, "%s.attn.compressor.norm.weight", p) ||
            M(idx_wk, d->idx_head_dim, Dh, "%s.attn.indexer.wk.weight", p) ||
            V(idx_k_norm, d->idx_head_dim, "%s.attn.indexer.k_norm.weight", p))
            return -1;
        if (d->layer[L].compress_ratio > 1 && M(comp_wgate, Dh, D, "%s.attn.compressor.wgate.weight", p)) return -1;
    }
    if (!draft && d->layer[L].is_index_source) {
        if (M(idx_wq_b, (int64_t)d->idx_heads * d->idx_head_dim, d->q_rank, "%s.attn.indexer.wq_b.weight", p) ||
            M(idx_weights_proj, d->idx_heads, D, "%s.attn.indexer.weights_proj.weight", p))
            return -1;
    }
    int E = draft ? d->dspark_experts : d->n_experts;
    int64_t F = d->moe_inter;
    lw->n_experts = E;
    if (M(gate, E, D, "%s.ffn.gate.weight", p) || V(gate_bias, E, "%s.ffn.gate.bias", p)) return -1;
    lw->experts = di_calloc((size_t)E, sizeof *lw->experts, "expert table");
    if (!lw->experts || own(w, lw->experts) != 0) return -1;
    for (int e = 0; e < E; e++)
        if (M(experts[e].w1, F, D, "%s.ffn.experts.%d.w1.weight", p, e) || M(experts[e].w2, D, F, "%s.ffn.experts.%d.w2.weight", p, e) ||
            M(experts[e].w3, F, D, "%s.ffn.experts.%d.w3.weight", p, e))
            return -1;
    lw->has_shared = d->n_shared > 0;
    if (lw->has_shared &&
        (M(shared.w1, F, D, "%s.ffn.shared_experts.w1.weight", p) || M(shared.w2, D, F, "%s.ffn.shared_experts.w2.weight", p) ||
         M(shared.w3, F, D, "%s.ffn.shared_experts.w3.weight", p)))
        return -1;
    int es = draft ? -1 : model_dims_engram_slot(d, L);
    if (es >= 0) {
        int64_t hd = d->engram_head_dim, cols = (int64_t)(d->engram_max_ngram - 1) * d->engram_heads * hd;
        lw->has_engram = true;
        lw->engram_rows = d->engram_rows[es];
        NAME(n, "%s.engram.embed", p);
        if (di_checkpoint_engram_table(ck, n, lw->engram_rows, hd, &lw->engram_codes, &lw->engram_scales) != 0) return -1;
        if (M(engram_wkv, (hc + 1) * D, cols, "%s.engram.wkv.weight", p)) return -1;
        const void *q, *k;
        int64_t shape[2] = {hc, D};
        NAME(n, "%s.engram.q_weight", p);
        if (di_checkpoint_tensor(ck, n, DI_DTYPE_BF16, 2, shape, &q) != 0) return -1;
        NAME(n, "%s.engram.k_weight", p);
        if (di_checkpoint_tensor(ck, n, DI_DTYPE_BF16, 2, shape, &k) != 0) return -1;
        lw->engram_qk = di_malloc((size_t)(hc * D) * sizeof(float), "engram q*k");
        if (!lw->engram_qk || own(w, lw->engram_qk) != 0) return -1;
        for (int64_t i = 0; i < hc * D; i++)
            lw->engram_qk[i] = di_bf16_to_f32(((const uint16_t *)q)[i]) * di_bf16_to_f32(((const uint16_t *)k)[i]);
    }
#undef V
#undef M
    return 0;
}

int weights_bind(Weights *w, DiCheckpoint *ck, const ModelDims *d, const DiKernelBackend *be, bool prepare) {
    if (!w || !ck || !d || !be || !be->matrix_prepare) return di_errorf("weights: invalid arguments");
    memset(w, 0, sizeof *w);
    w->be = be;
    w->prepare = prepare;
    char n[160];
    int64_t D = d->dim, V = d->vocab;
    if (bind_mat(w, ck, "embed.weight", V, D, &w->embed) || bind_mat(w, ck, "head.weight", V, D, &w->head) ||
        bind_vec(w, ck, "norm.weight", D, &w->norm))
        goto fail;
    int total = d->n_layers + d->n_mtp;
    w->layers = di_calloc((size_t)total, sizeof *w->layers, "layer weights");
    if (!w->layers) goto fail;
    for (int L = 0; L < total; L++)
        if (bind_layer(w, ck, d, L, &w->layers[L]) != 0) {
            if (L < d->n_layers) di_error_wrap("binding layers.%d", L);
            else di_error_wrap("binding mtp.%d", L - d->n_layers);
            goto fail;
        }
    if (d->n_mtp > 0) {
        int last = d->n_mtp - 1;
        w->has_dspark = true;
        if (bind_mat(w, ck, "mtp.0.main_proj.weight", D, (int64_t)d->n_taps * D, &w->main_proj) ||
            bind_vec(w, ck, "mtp.0.main_norm.weight", D, &w->main_norm))
            goto fail;
        snprintf(n, sizeof n, "mtp.%d.norm.weight", last);
        if (bind_vec(w, ck, n, D, &w->mtp_norm)) goto fail;
        snprintf(n, sizeof n, "mtp.%d.markov_head.embed.weight", last);
        if (bind_mat(w, ck, n, V, d->markov_rank, &w->markov_embed)) goto fail;
        snprintf(n, sizeof n, "mtp.%d.markov_head.head.weight", last);
        if (bind_mat(w, ck, n, V, d->markov_rank, &w->markov_head)) goto fail;
        snprintf(n, sizeof n, "mtp.%d.confidence_head.proj.weight", last);
        if (bind_mat(w, ck, n, 1, D + d->markov_rank, &w->conf_proj)) goto fail;
    }
    return 0;
fail:
    di_error_wrap("binding weights");
    weights_free(w);
    return -1;
}

void weights_free(Weights *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_owned; i++) free(w->owned[i]);
    free(w->owned);
    free(w->layers);
    memset(w, 0, sizeof *w);
}
