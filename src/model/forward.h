/* forward.h — one forward of a chunk: forward(model, state, tokens, n, start_pos, logits).
 *
 * Processes tokens at positions start_pos .. start_pos+n-1 of one request (prefill chunk of any
 * length, decode step n = 1, or a mix) against the request's RunState, which must hold exactly
 * start_pos earlier positions, and leaves the state ready for the next chunk.  Layer order and
 * every rounding point follow model-v41.md §5 (single-pass mHC, Engram before the block, taps,
 * CSA2 sources publishing for later layers, MoE, final norm and head).  Each row's result is
 * independent of how the sequence was chunked up to float32 summation order. */
#ifndef DI_MODEL_FORWARD_H
#define DI_MODEL_FORWARD_H

#include "model/model.h"
#include "model/state.h"

/* Optional debug outputs of a forward (each may be NULL), used by the golden unit tests to
 * locate a first divergence:
 *   layer_out [n_layers][n][hc][D]  residual streams after every backbone layer
 *   experts   [n_layers][n][top_k]  routed experts, best first
 *   selected  [n_layers][n][index_topk]  selection of each index-source layer (-1 padded)
 *   engram_ids [n][n_engram][cols]  Engram table rows
 * The per-layer ones need every row to run every layer (no bounded replay trim, replay.h). */
typedef struct {
    float *layer_out;
    int32_t *experts;
    int32_t *selected;
    int64_t *engram_ids;
    int64_t *decoder_rows; /* [n_seqs]: rows of each request that ran the decoder layers (bounded replay) */
} ForwardTrace;

/* Longest chunk one call accepts (the engine splits longer prefills).  A call of more rows than
 * the model's workspace holds (workspace.h, model_reserve_rows) runs as consecutive forwards of
 * that many rows, with the same results; the buffers of every step come from the workspace, so a
 * forward makes no heap allocation (one forward or draft at a time per model). */
#define FORWARD_MAX_CHUNK (1 << 20)

/* logits: [n][V] when all_rows, else [V] for the last row only; may be NULL (state update only). */
int model_forward(const Model *m, RunState *st, const int32_t *tokens, int64_t n, int64_t start_pos, float *logits,
                  bool all_rows, ForwardTrace *trace);

/* One request's part of a batched forward. */
typedef struct {
    RunState *st;
    const int32_t *tokens;
    int64_t n, start_pos;
    float *logits; /* as model_forward's; may be NULL */
    bool all_rows;
    /* Without all_rows: logits rows for the last n_logits rows, in position order ([n_logits][V];
     * 0 means 1, the plain decode).  A speculative verify asks for the anchor and its drafts. */
    int64_t n_logits;
} ForwardSeq;

/* Several requests in one forward: their rows go through every projection together (weights
 * are read once per batch), attention and the caches per request.  Each request's result is
 * bit-identical to its own model_forward (every reduction is per row, in a fixed order).
 * States must be distinct.  A trace of layer outputs, selections or Engram rows needs n_seqs == 1;
 * trace->experts alone works for any batch: its rows are the batch's rows in request order. */
int model_forward_batch(const Model *m, const ForwardSeq *seqs, int n_seqs, ForwardTrace *trace);

/* One mHC block (§5.5) on rows X[n][hc][D] with carried pre-mix pi[n][hc], for any layer or
 * DSpark stage; the attention sub-layer is the callback.  experts may be NULL. */
typedef int (*BlockAttnFn)(void *ctx, const float *a, int64_t n, float *out);
int model_block(const Model *m, int layer, float *X, float *pi, int64_t n, BlockAttnFn attn, void *ctx, int32_t *experts);

#endif
