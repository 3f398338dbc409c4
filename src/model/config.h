/* config.h — the DeepSeek-V4.1 model configuration: the nested HF config.json read into one
 * struct, completed by the derivation rules of model-v41.md §2.5, checked against every rule of
 * §2.6, and expanded into per-layer roles (§2.7) so the forward pass never re-derives them.
 *
 * Why one struct with resolved roles: the sharing structure of V4.1 (KV sources, index sources,
 * Reindex layers, the candidate pool, Engram layers, DSpark taps) is easy to get subtly wrong;
 * it is derived and validated once here, and every consumer reads the answer from
 * DiModelConfig.layers[i].
 *
 * Layer numbering: 0 .. n_layers-1 are the backbone layers (`layers.{i}`), n_layers ..
 * n_layers + n_draft_stages - 1 are the DSpark stages (`mtp.{s}`, s = i - n_layers).  Both kinds
 * appear in `layers[]` (n_total_layers entries), like `compress_ratios` in config.json. */
#ifndef DI_MODEL_CONFIG_H
#define DI_MODEL_CONFIG_H

#include "model/layer_plan.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DI_CONFIG_STR_MAX 64


typedef struct {
    bool present;
    char model_type[DI_CONFIG_STR_MAX];
    int64_t num_hidden_layers; /* 0 disables the vision path (no gate.bias_vl) */
    int64_t hidden_size, num_attention_heads, intermediate_size, patch_size;
    double rope_theta;
    int64_t downsample_ratio, max_image_tokens, min_pixels;
    double max_wh_ratio; /* < 0 when null/absent */
} DiVisionConfig;

typedef struct {
    /* ---- top level (§2.1) */
    char architecture[DI_CONFIG_STR_MAX]; /* architectures[0] */
    char model_type[DI_CONFIG_STR_MAX];   /* "deepseek_v41" */
    char dtype[DI_CONFIG_STR_MAX];        /* nominal, "bfloat16" */
    int64_t bos_token_id, eos_token_id, pad_token_id, image_token_id;
    bool tie_word_embeddings;

    /* ---- quantization_config (§2.2); anything but the release values is rejected */
    char quant_method[DI_CONFIG_STR_MAX];      /* "fp8" */
    char activation_scheme[DI_CONFIG_STR_MAX]; /* "dynamic" */
    char quant_fmt[DI_CONFIG_STR_MAX];         /* "e4m3" when given, else "" */
    int64_t weight_block_size[2];              /* 32, 32 */
    char scale_fmt[DI_CONFIG_STR_MAX];         /* "ue8m0" */
    char expert_dtype[DI_CONFIG_STR_MAX];      /* "fp4" */

    /* ---- text_config (§2.3), HF names; REF names in comments where they differ */
    char text_model_type[DI_CONFIG_STR_MAX]; /* "deepseek_v41_text" */
    int64_t vocab_size;
    int64_t hidden_size;   /* D (dim) */
    int64_t n_layers;      /* num_hidden_layers (n_layers) */
    int64_t n_heads;       /* num_attention_heads (n_heads) */
    int64_t n_kv_heads;    /* num_key_value_heads, must be 1 */
    int64_t head_dim;      /* Dh */
    int64_t rope_head_dim; /* qk_rope_head_dim (rope_head_dim), the last Dr dims */
    int64_t q_lora_rank, o_groups, o_lora_rank;
    int64_t sliding_window;     /* window_size */
    int64_t n_candidate_blocks; /* candidate_topk_blocks */
    int64_t candidate_block_size;
    int64_t candidate_source; /* candidate_source_layer_id, -1 = disabled */
    int64_t index_n_heads, index_head_dim, index_topk;
    double rope_theta, compress_rope_theta;
    char rope_type[DI_CONFIG_STR_MAX];        /* rope_scaling.rope_type, "yarn" or "" when absent */
    double rope_factor, beta_fast, beta_slow; /* rope_scaling; defaults 1 / 32 / 1 */
    int64_t original_max_position_embeddings; /* original_seq_len */
    int64_t max_position_embeddings;
    double rms_norm_eps; /* norm_eps */
    int64_t hc_mult, hc_sinkhorn_iters;
    double hc_eps;
    int64_t n_routed_experts, n_experts_per_tok, n_shared_experts; /* num_experts_per_tok */
    int64_t moe_intermediate_size;                                 /* F (moe_inter_dim) */
    char scoring_func[DI_CONFIG_STR_MAX];                          /* "sqrtsoftplus" */
    char topk_method[DI_CONFIG_STR_MAX];                           /* "noaux_tc" */
    bool norm_topk_prob;
    double routed_scaling_factor; /* route_scale */
    double gate_temp;             /* absent => 1.0 */
    double swiglu_limit;
    char hidden_act[DI_CONFIG_STR_MAX]; /* "silu" */
    bool attention_bias;                /* absent => false; true is rejected */

    /* Engram (§5.2, §5.3).  Arrays have n_engram_layers entries. */
    size_t n_engram_layers;
    int64_t *engram_layer_ids;
    int64_t *engram_num_embeddings; /* table rows per Engram layer */
    int64_t engram_max_ngram_size, engram_n_heads, engram_head_dim, engram_vocab_size;
    int64_t engram_pad_token_id; /* engram_pad_token_id or engram_pad_id (§8 row 1) */
    int64_t engram_compressed_vocab_size;
    /* Derived (§5.2 e): per Engram layer, (max_ngram-1)*n_heads primes and row offsets, flat
     * order c = o*n_heads + j.  engram_primes[l * engram_n_columns + c]. */
    int64_t engram_n_columns;
    int64_t *engram_primes;
    int64_t *engram_offsets;
    /* Derived (§5.2 d): per Engram layer, engram_max_ngram_size odd hash multipliers,
     * engram_multipliers[l * engram_max_ngram_size + k]. */
    int64_t *engram_multipliers;

    /* DSpark (§5.11) */
    int64_t n_draft_stages; /* num_nextn_predict_layers (n_mtp_layers) */
    int64_t dspark_block_size, dspark_noise_token_id, dspark_markov_rank;
    int64_t dspark_n_routed_experts, dspark_n_experts_per_tok;
    size_t n_dspark_targets;
    int64_t *dspark_target_layer_ids;

    /* Source lists as given or derived (§2.5), ascending. */
    size_t n_kv_sources, n_index_sources;
    int64_t *kv_source_layer_ids;
    int64_t *index_source_layer_ids;

    /* Per layer, backbone then DSpark stages: n_total_layers = n_layers + n_draft_stages. */
    int64_t n_total_layers;
    int64_t *compress_ratios; /* normalised to n_total_layers entries */
    DiLayerPlan *layers; /* layer_plan.h */

    DiVisionConfig vision;
} DiModelConfig;

/* Load `<dir>/config.json`, or the file itself when the path names a file; parse, derive and
 * validate.  On error *out is left empty (di_config_free is still safe) and the message names the
 * file and field.  Returns 0 / -1. */
int di_config_load(const char *model_dir_or_config_json, DiModelConfig *out);

/* Parse an already-loaded config.json root (the nested V4.1 layout).  Derives absent fields
 * (§2.5), validates (§2.6) and fills the layer roles.  Errors name the field, e.g.
 * "text_config.index_source_layer_ids[2]: 7 is not a KV source ...".  Returns 0 / -1. */
int di_config_parse_json(const json_t *root, DiModelConfig *out);

void di_config_free(DiModelConfig *cfg);

/* The §5.2 (d) multipliers of one Engram layer: numpy default_rng(10007 * layer_id)
 * .integers(0, B, size=n, dtype=int64) * 2 + 1 with B = max(1, (2^63-1) div compressed_vocab div 2),
 * bit-exact (config_engram.c).  compressed_vocab must be < 2^30. */
int di_engram_hash_multipliers(int64_t layer_id, int64_t compressed_vocab, int64_t n, int64_t *out);


/* Per-request state of §6 for a context of `context_len` tokens, in bytes.  packed = the lossless
 * packed encodings of §4.4/§4.5 (what an engine may store), else REF's bf16 layout. */
typedef struct {
    int64_t window_rings;  /* every layer: sliding_window rows x head_dim */
    int64_t compressed_kv; /* KV sources: ceil(len/m) rows x head_dim */
    int64_t index_keys;    /* KV sources: ceil(len/m) rows x index_head_dim */
    int64_t pending_rows;  /* ratio > 1 KV sources: the incomplete compression group */
    int64_t dspark_rings;  /* DSpark stages: sliding_window rows x head_dim */
    int64_t dspark_inputs; /* the taps of the last committed position */
    int64_t total;
} DiStateBytes;
int di_config_state_bytes(const DiModelConfig *cfg, int64_t context_len, bool packed, DiStateBytes *out);

#endif
