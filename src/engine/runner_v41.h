/* runner_v41.h — the DeepSeek-V4.1 model (src/model) behind the engine's runner interface.
 *
 * The model keeps a request's decode state in its own RunState (model/state.h, heap arrays
 * reached through accessors).  Until state.c places those rows in pages, this adapter keeps one
 * RunState per request and stores its handle in the request's first page; the pages are the
 * request's state *budget*: pages_for_tokens counts exactly the rows the RunState holds for a
 * context (window rings, DSpark rings, pending compressor rows and Engram history, fixed; one
 * compressed-KV row and one index-key row per `ratio` positions at every KV source, growing;
 * float32 as the RunState stores them, allocator slack not counted), so admission, preemption and
 * the reported accounting follow the real state size.  The release hook frees the RunState when
 * the engine returns the pages (finish, abort, preemption).
 *
 * One forward runs the whole batch through model_forward_batch (weights read once for all rows,
 * attention per request), whose per-request results are bit-identical to separate forwards:
 * batch invariant by construction on CPU, which test_engine_v41 checks with memcmp. */
#ifndef DI_ENGINE_RUNNER_V41_H
#define DI_ENGINE_RUNNER_V41_H

#include "engine/runner.h"
#include "model/model.h"

/* A runner over a loaded model.  With own_model the runner frees the model when destroyed.
 * page_bytes: the state page size (0: 64 KiB).  Text: none (a codec comes from above). */
DiRunner *di_v41_runner_create(Model *model, int own_model, size_t page_bytes);

#endif
