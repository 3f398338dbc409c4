/* weights.h — every tensor the V4.1 forward pass reads, bound by name from an open checkpoint
 * with the shapes the config implies (llama2.c's Weights struct, one per model).
 *
 * Matrices stay in their stored format inside the checkpoint's memory maps (DiMatrix; a real
 * checkpoint is ~500 GB, nothing is copied; attn.wo_a too stays FP8, although REF-CONV
 * dequantises it to BF16 at load: e4m3 x 2^k is exact either way, so the product is the same,
 * attention.h attn_wo_a).  The exceptions are small: norm weights, biases, sinks and mHC
 * base/scale vectors are copied to float32 (a few KB), and Engram's q ⊙ k is precomputed.
 * Every tensor is checked for dtype and shape by the checkpoint accessors; a missing or
 * mis-shaped tensor is an error naming it. */
#ifndef DI_MODEL_WEIGHTS_H
#define DI_MODEL_WEIGHTS_H

#include "kernels/backend.h"
#include "kernels/matmul.h"
#include "model/checkpoint.h"
#include "model/model_dims.h"

typedef struct {
    DiMatrix w1, w2, w3; /* gate [F, D], down [D, F], up [F, D] */
} ExpertWeights;

typedef struct {
    /* mHC sites (§5.4): fn [(2+hc)·hc, hc·D] (F32), base [(2+hc)·hc], scale [3] */
    DiMatrix hc_attn_fn, hc_ffn_fn;
    float *hc_attn_base, *hc_attn_scale, *hc_ffn_base, *hc_ffn_scale;
    float *attn_norm, *ffn_norm;
    /* attention (§5.6) */
    DiMatrix wq_a, wq_b, wkv, wo_a /* [G·Ro, (H/G)·Dh] */, wo_b;
    float *q_norm, *kv_norm, *attn_sink;
    /* compressor (KV sources) */
    DiMatrix comp_wkv, comp_wgate; /* wgate only at ratio > 1 */
    float *comp_norm;
    /* indexer: wk/k_norm at KV sources; wq_b/weights_proj at index sources */
    DiMatrix idx_wk, idx_wq_b, idx_weights_proj;
    float *idx_k_norm;
    /* MoE (§5.7) */
    DiMatrix gate;
    float *gate_bias;
    int n_experts;
    ExpertWeights *experts;
    ExpertWeights shared;
    bool has_shared;
    /* Engram (§5.3) */
    bool has_engram;
    const uint8_t *engram_codes, *engram_scales; /* [rows, hd] E4M3, [rows, hd/32] UE8M0 */
    int64_t engram_rows;
    DiMatrix engram_wkv;
    float *engram_qk; /* q_weight ⊙ k_weight, [hc, D] */
} LayerWeights;

typedef struct {
    DiMatrix embed, head; /* BF16 [V, D] */
    float *norm;
    LayerWeights *layers; /* n_layers backbone layers, then n_mtp DSpark stages */
    /* DSpark extras */
    DiMatrix main_proj; /* [D, taps·D] */
    float *main_norm, *mtp_norm;
    DiMatrix markov_embed, markov_head; /* BF16 [V, R] */
    DiMatrix conf_proj;                  /* BF16 [1, D + R] */
    bool has_dspark;
    /* every float copy made at bind time, freed by weights_free */
    void **owned;
    size_t n_owned, cap_owned;
    int64_t prepared_bytes; /* weight bytes be->matrix_prepare read (FP8 subnormal maps) */
    const DiKernelBackend *be; /* the kernels the matrices were readied for (weights_bind) */
    bool prepare;              /* weights_bind's: whether matrices were readied */
} Weights;

/* Bind all tensors of the text model (and the DSpark drafter when the config has stages). */
/* be: the model's kernels, whose matrix_prepare readies every matrix the forward multiplies by;
 * with prepare false nothing is readied (an expert rank, which runs only the routed experts and
 * must not read the other weights: a matrix_prepare is a speed hint, never a result bit). */
int weights_bind(Weights *w, DiCheckpoint *ck, const ModelDims *d, const DiKernelBackend *be, bool prepare);
void weights_free(Weights *w);

#endif
