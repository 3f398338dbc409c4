/* replay.h — decoder SWA bounded replay of prefill chunks (engine-features.md §2.1-2.3,
 * model-v41.md §5.10).
 *
 * A prompt token's persistent state (compressed KV, index keys) depends only on the encoder and
 * the first decoder layer's compressor, so in compact mode a prefill chunk runs the decoder layers
 * only on its last K rows, which is what the first decode steps read.  Following vLLM: the first
 * decoder layer (the CED midpoint, the decoder's only KV source) runs its pre-replay part on every
 * row — attention input, compressor and index keys, and the window KV the replayed rows read — so
 * its own window attention stays exact; then each request's last min(n, K) rows are moved into a
 * dense sub-batch that runs the rest of that layer and every later layer, whose window attention
 * is truncated to [max(s, i-W+1), i] with s the replay start.  Global KV and index keys are those
 * of off mode, bit for bit; the decoder window rings and logits are an approximation (exact for
 * chunks of at most K rows).  Every chunk trims to its own last K rows; a request asking for
 * logits of more than K rows (prompt logprobs: every row) is never trimmed.  K >= W, so the window rings and the
 * DSpark rings (filled from the last W rows) are written from replayed rows. */
#ifndef DI_MODEL_REPLAY_H
#define DI_MODEL_REPLAY_H

#include "model/attention.h"
#include "model/model.h"

#include <stdbool.h>
#include <stdint.h>

#define REPLAY_DEFAULT_KEEP 140

/* Set m's prefill mode.  Compact needs keep >= the model's sliding window and a layer plan the
 * replay can split at the CED midpoint: that layer a Full KV source, no KV source, Engram layer or
 * candidate source above it.  Not during a forward. */
int model_set_prefill_replay(Model *m, ReplayMode mode, int64_t keep);

/* The same from DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE and DEEPINFER_YOCO_PREFILL_KEEP_TOKENS
 * (default REPLAY_DEFAULT_KEEP), with errors naming them; what the engine and di_model_load apply
 * when they load a model.  KEEP_TOKENS set below the window is refused in either mode. */
int model_prefill_replay_from_env(Model *m);

/* The first decoder layer when m trims chunks (compact mode), else -1. */
int replay_first_layer(const Model *m);

/* Rows of a chunk of n rows that run the decoder layers: its last min(n, keep) in compact mode,
 * all n when off or when more than keep rows want logits (prompt logprobs: every row). */
int64_t replay_keep_rows(const Model *m, int64_t n, int64_t logit_rows);

/* Before layer L (replay_first_layer) of a forward whose rows are the workspace's fwd arrays and
 * rb: the pre-replay part of L on every row, then each request's last keep[b] rows (ws->fwd.keep)
 * moved to the front — residual streams, carried pre-mix, taps, positions — with rb's row0,
 * start and swa_floor (each trimmed request's replay start, 0 for the others) rewritten in place.
 * *n becomes the sub-batch's row count. */
int replay_enter(const Model *m, const RowBatch *rb, int layer, int64_t *n);

#endif
