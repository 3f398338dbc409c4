/* model_dims.h — the sizes and per-layer roles the forward pass reads, in one flat struct.
 *
 * The checkpoint engineer's DiModelConfig (config.h) parses and validates config.json; this is
 * the forward's own view of it (the symbols of model-v41.md: D, H, Dh, Dr, ...), filled by
 * model_dims_from_config() so the numeric code never depends on JSON field names.  Every size
 * comes from config.json: the golden sets are computed for any valid config (golden README §1). */
#ifndef DI_MODEL_MODEL_DIMS_H
#define DI_MODEL_MODEL_DIMS_H

#include <stdbool.h>
#include <stdint.h>

#define DIMS_MAX_LAYERS 256
#define DIMS_MAX_ENGRAM 8
#define DIMS_MAX_NGRAM 8
#define DIMS_MAX_TAPS 8

typedef enum { ROLE_WINDOW = 0, ROLE_FULL, ROLE_REINDEX, ROLE_REUSE } LayerRole;

typedef struct {
    int vocab, dim, n_layers, n_mtp;  /* V, D, backbone layers, DSpark stages */
    int n_heads, head_dim, rope_dim;  /* H, Dh, Dr */
    int q_rank, o_groups, o_rank;     /* Rq, G, Ro */
    int window;                       /* W */
    int ratio[DIMS_MAX_LAYERS];       /* compress ratio per layer (backbone then stages) */
    /* roles (§2.7, §5.6.7) for backbone layers */
    LayerRole role[DIMS_MAX_LAYERS];
    bool is_kv_source[DIMS_MAX_LAYERS], is_index_source[DIMS_MAX_LAYERS];
    int kv_src_of[DIMS_MAX_LAYERS];   /* latest KV source <= L (-1 for ratio 0) */
    int idx_src_of[DIMS_MAX_LAYERS];  /* latest index source <= L (-1 for ratio 0) */
    int kv_slot[DIMS_MAX_LAYERS];     /* dense index of a KV source (0..n_kv_sources-1), -1 otherwise */
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

/* Fill d from a parsed and validated config (config.h has already applied §2.5/§2.6); adds the
 * dense KV-source slots and re-checks the few limits of this struct. */
#include "model/config.h"
int model_dims_from_config(const DiModelConfig *cfg, ModelDims *d);

/* Engram layer slot of backbone layer L (-1 when L has no Engram). */
int model_dims_engram_slot(const ModelDims *d, int layer);
/* Tap index of layer L in dspark taps (-1 when L is no tap). */
int model_dims_tap_slot(const ModelDims *d, int layer);

#endif
