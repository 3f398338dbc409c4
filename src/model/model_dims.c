/* model_dims.c — the forward's flat view of DiModelConfig (model_dims.h). */
#include "model/model_dims.h"

#include "base/error.h"

#include <string.h>

int model_dims_engram_slot(const ModelDims *d, int layer) {
    for (int i = 0; i < d->n_engram; i++)
        if (d->engram_layers[i] == layer) return i;
    return -1;
}

int model_dims_tap_slot(const ModelDims *d, int layer) {
    for (int i = 0; i < d->n_taps; i++)
        if (d->taps[i] == layer) return i;
    return -1;
}

bool model_dims_is_decoder(const ModelDims *d, int layer) {
    return d && layer >= 0 && layer < d->n_layers + d->n_mtp && di_layer_is_decoder(&d->layer[layer]);
}

int model_dims_from_config(const DiModelConfig *cfg, ModelDims *d) {
    if (!cfg || !d) return di_errorf("model dims: no config");
    memset(d, 0, sizeof *d);
    if (cfg->n_total_layers > DIMS_MAX_LAYERS || cfg->n_total_layers != cfg->n_layers + cfg->n_draft_stages || !cfg->layers)
        return di_errorf("model dims: %lld layers not supported (max %d)", (long long)cfg->n_total_layers, DIMS_MAX_LAYERS);
    if ((int64_t)cfg->n_engram_layers > DIMS_MAX_ENGRAM || (int64_t)cfg->n_dspark_targets > DIMS_MAX_TAPS ||
        cfg->engram_max_ngram_size > DIMS_MAX_NGRAM)
        return di_errorf("model dims: too many Engram layers, DSpark taps or n-gram orders");
    d->vocab = (int)cfg->vocab_size;
    d->dim = (int)cfg->hidden_size;
    d->n_layers = (int)cfg->n_layers;
    d->n_mtp = (int)cfg->n_draft_stages;
    d->n_heads = (int)cfg->n_heads;
    d->head_dim = (int)cfg->head_dim;
    d->rope_dim = (int)cfg->rope_head_dim;
    d->q_rank = (int)cfg->q_lora_rank;
    d->o_groups = (int)cfg->o_groups;
    d->o_rank = (int)cfg->o_lora_rank;
    d->window = (int)cfg->sliding_window;
    memcpy(d->layer, cfg->layers, (size_t)cfg->n_total_layers * sizeof *d->layer);
    d->n_kv_sources = (int)cfg->n_kv_sources;
    d->ced_midpoint = di_ced_midpoint(cfg->n_layers);
    d->cand_src = (int)cfg->candidate_source;
    d->cand_blocks = (int)cfg->n_candidate_blocks;
    d->cand_block_size = (int)cfg->candidate_block_size;
    d->idx_heads = (int)cfg->index_n_heads;
    d->idx_head_dim = (int)cfg->index_head_dim;
    d->idx_topk = (int)cfg->index_topk;
    d->rope_theta = cfg->rope_theta;
    d->compress_theta = cfg->compress_rope_theta;
    d->yarn_factor = cfg->rope_factor;
    d->beta_fast = cfg->beta_fast;
    d->beta_slow = cfg->beta_slow;
    d->original_seq_len = (double)cfg->original_max_position_embeddings;
    d->eps = (float)cfg->rms_norm_eps;
    d->hc_eps = (float)cfg->hc_eps;
    d->hc_mult = (int)cfg->hc_mult;
    d->sinkhorn_iters = (int)cfg->hc_sinkhorn_iters;
    d->n_experts = (int)cfg->n_routed_experts;
    d->top_k = (int)cfg->n_experts_per_tok;
    d->n_shared = (int)cfg->n_shared_experts;
    d->moe_inter = (int)cfg->moe_intermediate_size;
    d->route_scale = (float)cfg->routed_scaling_factor;
    d->swiglu_limit = (float)cfg->swiglu_limit;
    d->gate_temp = cfg->gate_temp > 0 ? (float)cfg->gate_temp : 1.0f;
    d->norm_topk = cfg->norm_topk_prob;
    d->n_engram = (int)cfg->n_engram_layers;
    for (int i = 0; i < d->n_engram; i++) {
        d->engram_layers[i] = (int)cfg->engram_layer_ids[i];
        d->engram_rows[i] = cfg->engram_num_embeddings[i];
    }
    d->engram_max_ngram = (int)cfg->engram_max_ngram_size;
    d->engram_heads = (int)cfg->engram_n_heads;
    d->engram_head_dim = (int)cfg->engram_head_dim;
    d->engram_pad_id = (int)cfg->engram_pad_token_id;
    d->engram_compressed_vocab = (int)cfg->engram_compressed_vocab_size;
    d->engram_vocab_size = cfg->engram_vocab_size;
    d->dspark_block = (int)cfg->dspark_block_size;
    d->dspark_noise = (int)cfg->dspark_noise_token_id;
    d->n_taps = (int)cfg->n_dspark_targets;
    for (int i = 0; i < d->n_taps; i++) d->taps[i] = (int)cfg->dspark_target_layer_ids[i];
    d->markov_rank = (int)cfg->dspark_markov_rank;
    d->dspark_experts = (int)cfg->dspark_n_routed_experts;
    d->dspark_top_k = (int)cfg->dspark_n_experts_per_tok;
    if (d->n_shared > 1) return di_errorf("model dims: n_shared_experts %d > 1 not supported", d->n_shared);
    if (d->hc_mult <= 0 || d->hc_mult > 16) return di_errorf("model dims: hc_mult %d out of range", d->hc_mult);
    if (d->rope_dim > 512) return di_errorf("model dims: qk_rope_head_dim %d too large", d->rope_dim);
    return 0;
}
