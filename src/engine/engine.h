/* engine.h — the engine's internal entry points: creating an engine over any model runner (the
 * public di_engine_create* functions go through it) and observing logits (tests). */
#ifndef DI_ENGINE_ENGINE_H
#define DI_ENGINE_ENGINE_H

#include "deepinfer.h"
#include "engine/kvcache/kv_cache.h"
#include "engine/runner.h"
#include "engine/step.h"
#include "model/model.h"

/* Takes ownership of the runner (destroyed with the engine, or on failure). */
DiEngine *di_engine_create_with_runner(DiRunner *runner, const DiEngineOptions *opts);

/* di_engine_create with `hook` (may be NULL) called on the loaded model, with its resolved
 * directory, before the engine runs anything on it: what must be set once at load (the MoE
 * executor of expert parallelism, src/ep) is set there.  A hook's -1 fails the creation. */
typedef int (*DiModelHook)(Model *m, const char *dir, void *ctx);
DiEngine *di_engine_create_hooked(const char *model_dir, const DiEngineOptions *opts, DiModelHook hook, void *ctx);

/* Record the model directory (di_engine_model_dir). */
int di_engine_set_model_dir(DiEngine *engine, const char *dir);

/* Call `observer` with every logits row before it is sampled (on the thread executing the step). */
void di_engine_set_logits_observer(DiEngine *engine, DiLogitsObserver observer, void *user);

/* Expert load (runner.h DiExpertLoad): the backbone's [layers][experts] shape; -1 with an error
 * when the model has no routed experts (the mock runners). */
int di_engine_expert_load_shape(const DiEngine *engine, int *layers, int *experts);
/* Send every successful step's expert load to `observer` (step.h; on the thread executing steps,
 * the counts cleared after each call: one step's routed pairs per call) and clear the counts so
 * far.  Before the first request; -1 with an error as di_engine_expert_load_shape. */
int di_engine_set_expert_load_observer(DiEngine *engine, DiExpertLoadObserver observer, void *user);

/* Poison freed state pages (tests: a stale page then gives wrong logits). Before any request. */
int di_engine_set_page_poisoning(DiEngine *engine, int on);

/* The points of the speculation policy's step-cost curve (di_spec_cost_points; 0 without
 * speculation): tests of the start-up probe. */
int di_engine_spec_cost_points(const DiEngine *engine, double *rows, double *seconds, int cap);

/* The engine's KV block cache (thread-safe) and what names its blocks: the model fingerprint, B
 * and one block's bytes (a PD worker reads and writes blocks by key, serve/kv_transfer.h).  NULL
 * when the block cache is off. */
DiKvCache *di_engine_kv_cache(const DiEngine *engine, DiKvKey *fingerprint, int *block_tokens, size_t *block_bytes);

/* Exact request states between engines (a PD prefill worker's to its decode worker; the
 * serialised form is prefix_cache.h's).  Export: the state of finished request `id`'s
 * tokens[0, n_computed) (for a prompt run with max_tokens 1, the prompt), from inside its FINISH
 * callback (its own pages) or later from the prefix cache entry that kept it; the request must
 * not have been restored from KV blocks (DiRequestInput.exact_state with the block cache on).
 * A fresh heap buffer in *blob.  Import: keep a state as a prefix cache entry (the cache must be
 * on), so that a request extending its tokens starts there, exactly; refused when the pool has
 * no room besides running requests.  Both on the thread that drives the engine; -1 with the
 * cause. */
int di_engine_export_state(DiEngine *engine, uint64_t id, void **blob, size_t *len);
int di_engine_import_state(DiEngine *engine, const void *blob, size_t len, int64_t *n_tokens);
/* PD streaming: where a running request's state stands between steps, so that a prefill worker
 * can send the pages no later step writes while the prefill still runs (runner.h final_pages).
 * Pages [first_final, end_final) of `pages` are final; they sit in the state that
 * di_engine_export_state will give at FINISH (state_bytes long, for the prompt's n_prompt
 * positions) at byte offset pages_at + p * page_bytes.  The pointers are valid until the next
 * step.  On the engine's thread; -1 with the cause (no such request, or a model without
 * final_pages: then first_final == end_final and nothing streams, not an error). */
typedef struct {
    int64_t n_committed;  /* positions whose state is computed (none of them in the step in flight) */
    int64_t n_prompt;
    size_t state_bytes, pages_at, page_bytes;
    uint8_t *const *pages;
    size_t first_final, end_final;
} DiStateProgress;
int di_engine_state_progress(DiEngine *engine, uint64_t id, DiStateProgress *out);

/* The bytes of one state page (fixed at creation): what an exported state's pages hold. */
size_t di_engine_page_bytes(const DiEngine *engine);

/* Resolve the DEEPINFER_BATCH_INVARIANT setting: opt (-1: the environment), -1 with an error on a
 * bad environment value. */
int di_engine_resolve_batch_invariant(int opt);

#endif
