/* state.h — the per-request decode state of §6: everything a forward of a later chunk needs
 * from earlier chunks of the same request.
 *
 *   window rings     every backbone layer: the last W window-KV rows (slot = position mod W)
 *   DSpark rings     every draft stage: the last W context-KV rows (§5.11 step 2)
 *   pending rows     KV sources with ratio m > 1: the (κ, ζ) rows of an incomplete group (§5.6.3)
 *   Engram history   compressed ids of the last max_ngram-1 positions (§5.2 b)
 *   compressed KV    every KV source: one row per emitted entry (post-RoPE latent, §5.6.5)
 *   index keys       every KV source: one row per emitted entry (§5.6.4)
 *
 * Two storages behind the same accessors: owned (heap rows, growing by doubling; tests, tools)
 * and paged (rows inside fixed-size pages owned by the engine, state_attach_pages).  The forward
 * never does pointer arithmetic on the state, only calls the accessors below.
 *
 * Paged layout (state_layout) goes through the one layout engine, page_layout.h.  Fixed
 * components, all rows of head_dim floats: the window rings (layer-major), the DSpark rings, the
 * pending rows of every ratio > 1 KV source, the Engram history (one row).  Growing components,
 * one per KV source in slot order: an entry is its compressed row followed by its index-key row,
 * one entry per m positions.  Counters (positions, entries, pending rows) are functions of the
 * position count, so a paged state is fully described by its pages plus start_pos. */
#ifndef DI_MODEL_STATE_H
#define DI_MODEL_STATE_H

#include "model/model_dims.h"
#include "model/page_layout.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int64_t n_rows;   /* entries emitted so far = floor(n_pos / m) */
    int n_pending;    /* rows of the current incomplete group = n_pos mod m (m > 1) */
    /* owned storage */
    float *comp, *ikeys;
    int64_t cap_rows;
    float *pend;      /* [2][m-1][head_dim]: κ rows then ζ rows */
} KvSourceState;

typedef struct {
    DiStateLayout pages;       /* the components below, laid out */
    int c_window, c_dspark, c_pending, c_hist; /* fixed component indices, -1 when absent */
    int c_entries0;            /* growing component of KV source slot k: c_entries0 + k */
    int64_t pending_row0[DIMS_MAX_LAYERS]; /* first pending row of each KV source slot */
    int64_t entry_floats;      /* head_dim + idx_head_dim */
} StateLayout;

typedef struct {
    int n_layers, n_mtp, window, head_dim, idx_head_dim, n_kv, ngram_hist;
    int64_t n_pos;            /* positions processed so far (next chunk starts here) */
    KvSourceState *kv;        /* [n_kv] */
    int kv_ratio[DIMS_MAX_LAYERS];
    /* owned storage */
    float *window_rows;       /* [n_layers][window][head_dim] */
    float *dspark_rows;       /* [n_mtp][window][head_dim] */
    int32_t hist_own[DIMS_MAX_NGRAM];
    /* paged storage */
    bool paged;
    StateLayout layout;
    uint8_t *const *pages;
    size_t n_pages;
    /* speculative verify (state_undo.h): where the compressor logs the pending rows it writes */
    float *pend_log;          /* [pend_log_rows][n_kv][2][head_dim], NULL when not logging */
    int64_t pend_log_start, pend_log_rows;
    /* Encoder SWA bounded replay after a KV block-cache hit at replay_end (both 0: none; set by
     * the caller before a forward, engine-features.md §2.4): rows below replay_end keep the
     * imported compressed-KV / index-key entries (their compressor writes are suppressed), and
     * no window key, ring row or Engram look-back below replay_start is read. */
    int64_t replay_start, replay_end;
} RunState;

RunState *state_create(const ModelDims *d);
/* A state that only ever runs attached to pages (no owned rows: cheap to keep one per batch slot). */
RunState *state_create_paged(const ModelDims *d);
void state_free(RunState *st);
/* Forget everything (a new request on the same state). */
void state_reset(RunState *st);

/* ---- paged storage */
/* Layout for pages of page_bytes (a multiple of 64, at least one entry and one slot). */
int state_layout(const ModelDims *d, size_t page_bytes, StateLayout *out);
/* Pages a context of n_tokens positions needs (non-decreasing in n_tokens). */
int64_t state_pages_for_tokens(const StateLayout *l, int64_t n_tokens);
/* A state whose rows live in `pages` (not owned), holding positions [0, n_pos).  The pages must
 * cover state_pages_for_tokens(n_pos + the chunk about to run).  st must have been made by
 * state_create for the same dims; its owned buffers are left alone. */
int state_attach_pages(RunState *st, const StateLayout *l, uint8_t *const *pages, size_t n_pages, int64_t n_pos);

/* Cut the counters back to n_pos positions (<= st->n_pos); rows past them are overwritten later. */
void state_set_positions(RunState *st, int64_t n_pos);

/* ---- KV block cache (state_blocks.c): the compressed-KV and index-key entries of positions
 * [first, first + block_tokens) of every KV source, in slot order, raw page bytes.  block_bytes
 * is 0 when block_tokens is not a multiple of 128 and of every compress ratio; first must be a
 * multiple of block_tokens and the pages must hold first + block_tokens positions. */
size_t state_block_bytes(const StateLayout *l, int block_tokens);
int state_export_block(const StateLayout *l, uint8_t *const *pages, size_t n_pages, int64_t first, int block_tokens, void *out);
int state_import_block(const StateLayout *l, uint8_t *const *pages, size_t n_pages, int64_t first, int block_tokens,
                       const void *in);

/* ---- speculative verify: a log of the compressor's pending rows (state_undo.h) */
void state_log_pending_start(RunState *st, float *log, int64_t start, int64_t rows);
void state_log_pending_stop(RunState *st);
/* The compressor wrote (κ, ζ) rows of position pos into KV source slot k's pending rows. */
void state_log_pending(RunState *st, int slot, int64_t pos, const float *kappa, const float *zeta);

/* ---- accessors used by the forward */
float *state_window_row(RunState *st, int layer, int64_t pos);
float *state_dspark_row(RunState *st, int stage, int64_t pos);
/* Pending row r (< m-1) of KV source slot k: which = 0 κ, 1 ζ. */
float *state_pending_row(RunState *st, int slot, int which, int r);
/* Engram look-back: hist[k] = compressed id of position n_pos-1-k. */
int32_t *state_engram_history(RunState *st);
/* Compressed-KV / index-key row g of KV source slot k (g < n_rows). */
float *state_comp_row(RunState *st, int slot, int64_t g);
float *state_ikey_row(RunState *st, int slot, int64_t g);
/* Index-key rows g, g+1, ..., g+*run-1 (*run >= 1) of KV source slot k lie *stride floats
 * apart from the returned row g (one page's entries, or the whole unpaged array): the indexer
 * scores a span per kernel call. */
const float *state_ikey_span(RunState *st, int slot, int64_t g, int64_t *stride, int64_t *run);
/* Append one entry to KV source slot k; returns its index, -1 (error) when out of memory or
 * beyond the attached pages.  The caller then fills the comp / ikey rows of that index. */
int64_t state_kv_append(RunState *st, int slot);

#endif
