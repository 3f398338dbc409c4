/* state.h — the per-request decode state of §6: everything a forward of a later chunk needs
 * from earlier chunks of the same request.
 *
 *   window rings     every backbone layer: the last W window-KV rows (slot = position mod W)
 *   compressed KV    every KV source: one row per emitted entry (post-RoPE latent, §5.6.5)
 *   index keys       every KV source: one row per emitted entry (§5.6.4)
 *   pending rows     KV sources with ratio m > 1: the (κ, ζ) of an incomplete group (§5.6.3)
 *   Engram history   compressed ids of the last max_ngram-1 positions (§5.2 b)
 *   DSpark rings     every draft stage: the last W context-KV rows (§5.11 step 2)
 *
 * All rows are reached through the small accessor functions below, never by pointer arithmetic
 * in the forward, so the engine can later move the rows into fixed-size pages without touching
 * the model code.  The engine owns one RunState per request. */
#ifndef DI_MODEL_STATE_H
#define DI_MODEL_STATE_H

#include "model/model_dims.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    float *comp, *ikeys;      /* rows × head_dim, rows × index_head_dim */
    int64_t n_rows, cap_rows; /* entries emitted so far */
    float *pend_kv, *pend_gate; /* (ratio-1) pending rows × head_dim each */
    int n_pending;              /* rows of the current incomplete group */
} KvSourceState;

typedef struct {
    int n_layers, n_mtp, window, head_dim, idx_head_dim, n_kv, ngram_hist;
    int64_t n_pos;            /* positions processed so far (next chunk starts here) */
    float *window_rows;       /* [n_layers][window][head_dim] */
    KvSourceState *kv;        /* [n_kv] */
    int32_t hist[DIMS_MAX_NGRAM]; /* hist[k] = compressed id of position n_pos-1-k */
    float *dspark_rows;       /* [n_mtp][window][head_dim] */
} RunState;

RunState *state_create(const ModelDims *d);
void state_free(RunState *st);
/* Forget everything (a new request on the same state). */
void state_reset(RunState *st);

/* Window row of backbone layer L holding position pos (slot pos mod W). */
float *state_window_row(RunState *st, int layer, int64_t pos);
/* DSpark ring row of stage s holding position pos. */
float *state_dspark_row(RunState *st, int stage, int64_t pos);
/* Compressed-KV / index-key row g of KV source slot k (g < n_rows). */
float *state_comp_row(RunState *st, int slot, int64_t g);
float *state_ikey_row(RunState *st, int slot, int64_t g);
/* Append one entry to KV source slot k; returns its index (or -1 on allocation failure).
 * The caller then fills state_comp_row / state_ikey_row of that index. */
int64_t state_kv_append(RunState *st, int slot);

#endif
