/* engram.h — Engram n-gram memory (§5.2 hashing, §5.3 the module): per position, hash the last
 * n tokens' compressed ids into table rows, look the rows up (FP8 table, exact dequantisation),
 * project them to hc keys and one value, and add the value to each residual stream through that
 * stream's own gate. */
#ifndef DI_MODEL_ENGRAM_H
#define DI_MODEL_ENGRAM_H

#include "model/model.h"
#include "model/state.h"

/* Number of hash columns per Engram layer: (max_ngram-1) · heads. */
int engram_columns(const ModelDims *d);

/* Row ids of every Engram layer for the chunk's tokens at positions s .. s+n-1:
 * ids[(i·n_engram + l)·cols + c].  History before s comes from st (not modified here). */
int engram_hash(const Model *m, RunState *st, const int32_t *tokens, int64_t n, int64_t s, int64_t *ids);

/* Push the chunk's compressed ids into st's look-back history (after the forward). */
void engram_push_history(const Model *m, RunState *st, const int32_t *tokens, int64_t n);

/* X[n][hc][D] += gate·value for Engram layer slot l, row ids from engram_hash. */
int engram_forward(const Model *m, int slot, const LayerWeights *lw, const int64_t *ids, float *X, int64_t n);

#endif
