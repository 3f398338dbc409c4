/* layer_plan.h — what each layer of the model does, decided once from config.json: the one
 * layer-plan struct and the one role enum every part of the model reads (config, weights binding,
 * the checkpoint inventory, the forward, the state, the benchmarks).
 *
 * Two structures of V4.1 are named here because they are easy to get subtly wrong when each
 * consumer re-derives them (model-v41.md §2.7, §5.6.7, §5.10):
 *
 *   CED (causal encoder / decoder).  The backbone is split at its midpoint n_layers / 2: layers
 *   below it are the encoder, the rest the decoder (release: 0-19 and 20-39).  The first decoder
 *   layer is the decoder's only KV source and the candidate source, so a prompt token's persistent
 *   state depends on the encoder alone; decoder layers only add their own window rows, which is
 *   what bounded replay relies on (di_layer_is_decoder).  DSpark stages belong to neither.
 *
 *   CSA2 roles (compressed sparse attention, each layer at ratio m = compress_ratio):
 *     WINDOW   m = 0: sliding window only (also every DSpark stage);
 *     FULL     KV source (compressor + index keys, the compressed cache others read) and index
 *              source (its own top-k);
 *     REINDEX  index source but not KV source: its own top-k over its KV source's index keys,
 *              restricted to the candidate pool when it comes after the candidate source;
 *     REUSE    neither: reads the latest KV source's cache and the latest index source's selection.
 *   The candidate source (a FULL layer, release 20) builds the block pool that later index sources
 *   are masked to (uses_candidate_pool, §5.6.6).
 *
 * Layer numbering: 0 .. n_layers-1 are the backbone, n_layers .. n_layers + n_draft_stages - 1 the
 * DSpark stages (`mtp.{s}`), as in compress_ratios.  config.c builds the plan (di_layer_plan_build). */
#ifndef DI_MODEL_LAYER_PLAN_H
#define DI_MODEL_LAYER_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    DI_ROLE_WINDOW = 0,
    DI_ROLE_FULL,
    DI_ROLE_REUSE,
    DI_ROLE_REINDEX
} DiLayerRole;

/* Which half of the CED split a layer belongs to. */
typedef enum { DI_STACK_ENCODER = 0, DI_STACK_DECODER, DI_STACK_DRAFT } DiLayerStack;

typedef struct {
    DiLayerStack stack;       /* encoder / decoder (CED midpoint) or DSpark stage */
    int draft_stage;          /* s for `mtp.{s}`, -1 for backbone layers */
    int compress_ratio;       /* compress_ratios[i]: 0 = window only, m > 0 = compressed at ratio m */
    DiLayerRole role;
    bool is_kv_source;        /* FULL: owns a compressor and writes the index-key cache */
    bool is_index_source;     /* FULL or REINDEX: runs an indexer */
    bool is_candidate_source; /* builds the candidate block pool */
    bool uses_candidate_pool; /* index source after the candidate source (§5.6.6) */
    bool has_compressor_gate; /* KV source with ratio > 1 (`compressor.wgate`, §3.6) */
    int kv_source;            /* layer whose compressed KV / index keys this layer reads; -1 at ratio 0 */
    int index_source;         /* layer whose top-k selection this layer uses; -1 at ratio 0 */
    int kv_slot;              /* dense index of a KV source (0 .. n_kv_sources-1), -1 otherwise */
    int engram_slot;          /* index into the Engram arrays, -1 when no Engram module */
    int dspark_tap_slot;      /* index into dspark_target_layer_ids, -1 when not a tap */
    bool rope_compress;       /* ratio > 0: compress_rope_theta + YaRN; else rope_theta, no YaRN */
    int n_routed_experts;     /* n_routed_experts (backbone) or dspark_n_routed_experts (draft) */
    int n_experts_per_tok;
} DiLayerPlan;

/* Inputs of the plan, all from config.json after the §2.5 derivations. */
typedef struct {
    int64_t n_layers, n_draft_stages;
    const int64_t *compress_ratios; /* n_layers + n_draft_stages entries */
    const int64_t *kv_sources, *index_sources, *engram_layers, *dspark_taps; /* ascending */
    size_t n_kv_sources, n_index_sources, n_engram_layers, n_dspark_taps;
    int64_t candidate_source; /* -1: none */
    int64_t n_routed_experts, n_experts_per_tok, dspark_n_routed_experts, dspark_n_experts_per_tok;
} DiLayerPlanSpec;

/* The plan of all n_layers + n_draft_stages layers into out[] (that many entries). */
int di_layer_plan_build(const DiLayerPlanSpec *spec, DiLayerPlan *out);

/* First decoder layer: n_layers / 2 (model-v41.md §1, §5.10). */
int di_ced_midpoint(int64_t n_layers);

static inline bool di_layer_is_decoder(const DiLayerPlan *p) { return p->stack == DI_STACK_DECODER; }
static inline bool di_layer_is_draft(const DiLayerPlan *p) { return p->stack == DI_STACK_DRAFT; }

/* Role name for logs: "window", "full", "reuse", "reindex". */
const char *di_layer_role_name(DiLayerRole role);

/* Helpers over ascending layer-id lists, shared with the config's validation. */
bool di_layer_list_contains(const int64_t *v, size_t n, int64_t x);
/* The latest id <= layer (< layer when strict), -1 when none. */
int64_t di_layer_list_latest(const int64_t *v, size_t n, int64_t layer, bool strict);

#endif
