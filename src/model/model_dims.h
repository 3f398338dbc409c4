/* model_dims.h — the sizes and the layer plan the forward pass reads, in one flat struct.
 *
 * The checkpoint engineer's DiModelConfig (config.h) parses and validates config.json; this is
 * the forward's own view of it (the symbols of model-v41.md: D, H, Dh, Dr, ...), filled by
 * model_dims_from_config() so the numeric code never depends on JSON field names.  What each layer
 * does (CSA2 role, KV/index source, CED encoder or decoder) is the config's own layer plan
 * (layer_plan.h), copied here, not re-derived.  Every size comes from config.json: the golden
 * sets are computed for any valid config (golden README §1). */
#ifndef DI_MODEL_MODEL_DIMS_H
#define DI_MODEL_MODEL_DIMS_H

#include "model/config.h"

#include <stdbool.h>
#include <stdint.h>

#define DIMS_MAX_LAYERS 256
#define DIMS_MAX_ENGRAM 8
#define DIMS_MAX_NGRAM 8
#define DIMS_MAX_TAPS 8

typedef struct {
    int vocab, dim, n_layers, n_mtp;  /* V, D, backbone layers, DSpark stages */
    int n_heads, head_dim, rope_dim;  /* H, Dh, Dr */
    int q_rank, o_groups, o_rank;     /* Rq, G, Ro */
    int window;                       /* W */
    DiLayerPlan layer[DIMS_MAX_LAYERS]; /* backbone then DSpark stages (layer_plan.h) */
    int ced_midpoint;                 /* first decoder layer (n_layers / 2) */
    int n_kv_sources;
    int cand_src, cand_blocks, cand_block_size; /* candidate source layer (-1: none), CB, CS */
    int idx_heads, idx_head_dim, idx_topk;      /* HI, DI, KI */
    double rope_theta, compress_theta, yarn_factor, beta_fast, beta_slow, original_seq_len;
    float eps, hc_eps;
    int hc_mult, sinkhorn_iters;
    int n_experts, top_k, n_shared, moe_inter;  /* E, K, shared count (0 or 1), F */
    float route_scale, swiglu_limit, gate_temp;
    bool norm_topk;
    /* Engram (§5.2-5.3) */
    int n_engram, engram_layers[DIMS_MAX_ENGRAM];
    int64_t engram_rows[DIMS_MAX_ENGRAM];
    int engram_max_ngram, engram_heads, engram_head_dim, engram_pad_id, engram_compressed_vocab;
    int64_t engram_vocab_size;
    /* DSpark (§5.11) */
    int dspark_block, dspark_noise, n_taps, taps[DIMS_MAX_TAPS], markov_rank;
    int dspark_experts, dspark_top_k;
} ModelDims;

/* Fill d from a parsed and validated config (config.h has already applied §2.5/§2.6) and
 * re-check the few limits of this struct. */
int model_dims_from_config(const DiModelConfig *cfg, ModelDims *d);

/* Is backbone layer L in the CED decoder (L >= n_layers / 2)?  False for DSpark stages. */
bool model_dims_is_decoder(const ModelDims *d, int layer);

/* Engram layer slot of backbone layer L (-1 when L has no Engram). */
int model_dims_engram_slot(const ModelDims *d, int layer);
/* Tap index of layer L in dspark taps (-1 when L is no tap). */
int model_dims_tap_slot(const ModelDims *d, int layer);

#endif
