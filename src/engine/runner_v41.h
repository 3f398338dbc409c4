/* runner_v41.h — the DeepSeek-V4.1 model (src/model) behind the engine's runner interface.
 *
 * A request's whole decode state lives in the engine's fixed-size pages, in the model's paged
 * layout (model/state.h: window rings, DSpark rings, pending compressor rows and the Engram
 * history first, then compressed-KV / index-key entries in the order a growing context needs
 * them), so the page pool's accounting is the state's real size and a long context never needs
 * one contiguous buffer.  The state is fully described by its pages and the position count; the
 * runner keeps only per-batch-slot views that it re-attaches before every forward.  Each step is
 * one model_forward_batch: weights are read once for all rows, and every request's result is
 * bit-identical to running it alone.
 *
 * Speculative decoding (runner.h): a sequence may ask for the logits of its last n_logits rows;
 * a speculative one (a verify: anchor + drafts, at most the model's window of rows) is cut back
 * by commit() through model/state_undo.h, whose buffers are sized at the first verify for the
 * engine's reserve_rows.  draft() (set when the checkpoint has DSpark stages and taps;
 * draft_block = dspark_block_size) runs the drafter over a request's pages, one request at a
 * time, without writing them. */
#ifndef DI_ENGINE_RUNNER_V41_H
#define DI_ENGINE_RUNNER_V41_H

#include "engine/runner.h"
#include "model/model.h"

/* A runner over a loaded model.  With own_model the runner frees the model when destroyed.
 * page_bytes: the state page size (0: 64 KiB).  Text: none (a codec comes from above). */
DiRunner *di_v41_runner_create(Model *model, int own_model, size_t page_bytes);

#endif
