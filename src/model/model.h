/* model.h — a loaded DeepSeek-V4.1 model: config, checkpoint, bound weights, RoPE tables, the
 * Engram hash parameters and the numerics mode.  One Model serves any number of requests, each
 * with its own RunState (state.h); the forward pass is in forward.h.
 *
 * Numerics modes (golden-v41/README.md §4):
 *   MODE_REF   (default) the reference's FP8 round trip of every quantised-GEMM input plus the
 *              FP8/FP4 round trips of window KV, compressed KV, index keys and index queries;
 *   MODE_KVQ   the KV / indexer round trips only;
 *   MODE_EXACT neither (float32 throughout). */
#ifndef DI_MODEL_MODEL_H
#define DI_MODEL_MODEL_H

#include "base/threadpool.h"
#include "kernels/backend.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/model_dims.h"
#include "model/rope.h"
#include "model/weights.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum { MODE_REF = 0, MODE_KVQ, MODE_EXACT } NumericsMode;

/* Parse "ref" | "kvq" | "exact". */
int numerics_mode_parse(const char *name, NumericsMode *out);
const char *numerics_mode_name(NumericsMode mode);

/* Engram hash parameters of one Engram layer (§5.2 d, e). */
typedef struct {
    int64_t mult[DIMS_MAX_NGRAM];            /* odd multipliers M[k], k < max_ngram */
    int64_t prime[DIMS_MAX_NGRAM * 64];      /* P[o*heads + j] */
    int64_t offset[DIMS_MAX_NGRAM * 64];     /* Off[c] */
} EngramHash;

/* Decoder SWA bounded replay of prefill chunks (replay.h); set by model_set_prefill_replay. */
typedef enum { REPLAY_OFF = 0, REPLAY_COMPACT } ReplayMode;
typedef struct {
    ReplayMode mode; /* off (default): every layer on every row, exact */
    int64_t keep;    /* compact: rows of a chunk that run the decoder layers (>= the window) */
} PrefillReplay;

typedef struct {
    DiModelConfig cfg;
    ModelDims d;
    DiCheckpoint *ck;
    Weights w;
    RopeTable rope_main, rope_compress;
    NumericsMode mode;
    DiThreadPool *pool; /* may be NULL (single thread) */
    /* Engram: compressed token map (tokenizer-derived, §5.2 a) and hash parameters.  Primes,
     * offsets (config) and multipliers (engram_rng.h) are set at load; the token map must be
     * supplied with model_set_engram_token_map before a model with Engram layers can run. */
    int32_t *token_map;
    int64_t token_map_len;
    EngramHash engram[DIMS_MAX_ENGRAM];
    bool engram_mult_set;
    /* every kernel of the forward pass (kernels/backend.h), chosen at load from cpuid and
     * DEEPINFER_KERNELS; model_set_backend switches it (tests, check-golden --kernels) */
    const DiKernelBackend *be;
    /* every scratch buffer of a forward (workspace.h), sized at load; after `pool` so the A/B
     * tools (tools/decode_ab.c) set the pool of either build at the same offset */
    struct Workspace *ws;
    PrefillReplay replay;
    /* Routed (token, expert) pairs of every forward and draft since the engine last cleared them
     * (runner.h DiExpertLoad, EPLB's live load): [n_layers][n_experts] for the backbone, then
     * [n_mtp][dspark_experts] for the DSpark stages.  Sized at load; moe_forward adds to a row. */
    int64_t *expert_load, *draft_expert_load;
    /* NULL: the routed experts run here; else moe.h MoeExecutor (expert parallelism, src/ep) */
    const struct MoeExecutor *moe_exec;
} Model;

/* Load config.json and the checkpoint of `dir`, bind the weights.  NULL with an error. */
Model *model_load(const char *dir, NumericsMode mode);
/* The same for an expert-parallel expert rank (src/ep), which runs only routed experts: nothing
 * is readied at load (no FP8 subnormal map reads the dense weights), so the rank's resident
 * pages are those of the experts it runs.  Results are the same bits (the maps are hints). */
Model *model_load_expert_rank(const char *dir, NumericsMode mode);
/* Size the workspace for `rows` rows per forward call (the engine's max batch tokens; default
 * WORKSPACE_DEFAULT_ROWS): a longer call runs in chunks of that many rows.  Not during a forward. */
int model_reserve_rows(Model *m, int64_t rows);
void model_free(Model *m);
/* A 128-bit fingerprint of what a cached state row depends on: the model's shape, its numerics
 * mode and samples of its weights (embedding, head, every layer's window-KV and compressor). */
int model_identity(const Model *m, uint64_t out[2]);

/* The compressed token map cid[t] for t < len (every value < engram_compressed_vocab_size). */
int model_set_engram_token_map(Model *m, const int32_t *cid, int64_t len);
/* Override the multipliers computed at load, [n_engram][max_ngram] row-major; each must be odd
 * and small enough that cid·M cannot overflow int64 (§5.2 f). */
int model_set_engram_multipliers(Model *m, const int64_t *mult, int64_t n_layers, int64_t max_ngram);

/* Rope table of a layer with this compress ratio (ratio 0 and DSpark: main; else compress). */
const RopeTable *model_rope(const Model *m, int ratio);
/* Rotate x[n-r .. n-1] for position pos with table t on the model's backend (§4.7): pairs
 * (2i, 2i+1), angle = fp32(pos) · f_i; inverse rotates by -angle. */
void model_rope_apply(const Model *m, const RopeTable *t, float *x, int64_t n, int64_t pos, bool inverse);
bool model_act_quant(const Model *m);

/* Run every kernel on backend be from now on (re-sizing the workspace's kernel scratch for it).
 * Not during a forward. */
int model_set_backend(Model *m, const DiKernelBackend *be);

/* y[n][rows] = W · x[n][cols] on the model's kernel backend. */
int model_matmul(const Model *m, const DiMatrix *w, const float *x, int64_t n, float *y);
/* The same for a quantised GEMM: with act_quant each input row first goes through the FP8
 * block-32 round trip (§4.3, `ref` mode) on a private copy (x is not modified). */
int model_linear(const Model *m, const DiMatrix *w, const float *x, int64_t n, float *y, bool act_quant);
bool model_kv_quant(const Model *m);

/* fn(ctx, r0, r1) over contiguous ranges covering rows 0..n-1, split across the model's pool.
 * For per-row work that is independent row to row (mHC, norms): a row's result does not
 * depend on the split, so batched and single-request outputs stay bit-identical. */
typedef void (*ModelRowsFn)(void *ctx, int64_t r0, int64_t r1);
void model_for_rows(const Model *m, int64_t n, ModelRowsFn fn, void *ctx);

#endif
