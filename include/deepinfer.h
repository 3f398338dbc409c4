/* deepinfer.h — the public C API of deepinfer, an inference engine for DeepSeek-V4.1-Flash.
 *
 * Conventions: functions return 0 (or a non-NULL pointer) on success and -1 (or NULL) on
 * failure; di_last_error() then returns a message naming the cause.  Every function checks its
 * arguments.  Objects are opaque and freed by their *_free / *_destroy function. */
#ifndef DEEPINFER_H
#define DEEPINFER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DEEPINFER_VERSION "0.1.0"

/* The calling thread's last error message ("" when none). */
const char *di_last_error(void);
const char *di_version(void);

/* ---- model: checkpoint loading and the forward pass (src/model) ------------------------- */

/* Write a synthetic DeepSeek-V4.1 checkpoint in the official Hugging Face layout into out_dir:
 * preset "tiny" (model-v41.md §9 shapes, 291-token byte-level tokenizer), "spec9" (§9.2
 * verbatim, no tokenizer) or "medium" (benchmark size, ~520 MB).  Same seed, same bytes. */
int di_make_tiny(const char *out_dir, const char *preset, uint64_t seed);
/* The built-in tiny model used when no checkpoint is given: generated on first use into
 * $XDG_CACHE_HOME/deepinfer/tiny-v41 (else ~/.cache/deepinfer/tiny-v41) and reused after;
 * its directory is written to buf. */
int di_builtin_model_dir(char *buf, size_t n);

/* (model API goes here) */

/* The V4.1 forward pass on a loaded checkpoint (model-v41.md §5).  A DiModel is immutable while
 * forwards run on it, except for the setters below; each request has its own DiModelState (§6:
 * window rings, compressed KV rows, index keys, compressor pending rows, Engram history, DSpark
 * rings).  numerics: "ref" (default, NULL: the reference's FP8 activation quantisation and KV
 * round trips), "kvq" (KV / indexer round trips only), "exact" (float32 throughout). */
typedef struct DiModel DiModel;
typedef struct DiModelState DiModelState;

DiModel *di_model_load(const char *dir, const char *numerics);
void di_model_free(DiModel *model);
int32_t di_model_vocab_size(const DiModel *model);
/* Worker threads of the matrix kernels (<= 0: DEEPINFER_NUM_THREADS, else all CPUs). */
int di_model_set_threads(DiModel *model, int n_threads);
/* The Engram compressed-token map cid[t], t < len (tokenizer-derived, §5.2 a); required before
 * the first forward of a model with Engram layers. */
int di_model_set_engram_token_map(DiModel *model, const int32_t *cid, int64_t len);

DiModelState *di_model_state_new(const DiModel *model);
void di_model_state_free(DiModelState *state);
/* Positions the state holds (the next chunk starts there). */
int64_t di_model_state_positions(const DiModelState *state);

/* Process tokens at positions start_pos .. start_pos+n-1 (start_pos must equal the state's
 * positions): a prefill chunk of any length or a decode step.  logits (may be NULL): [n][vocab]
 * when all_rows, else [vocab] for the last token.  On error the state is unusable only if the
 * error came from inside the layers; argument errors leave it untouched. */
int di_model_forward(DiModel *model, DiModelState *state, const int32_t *tokens, int64_t n, int64_t start_pos,
                     float *logits, int all_rows);

/* DSpark drafter (§5.11): with `anchor` at the state's next position, fill base_logits and
 * logits [block][vocab], confidence [block] (raw logits) and tokens [block]; given = NULL drafts
 * greedily, else the block's drafts are imposed.  Commits nothing to the state. */
int di_model_draft_block_size(const DiModel *model);
int di_model_draft(DiModel *model, DiModelState *state, int32_t anchor, const int32_t *given, float *base_logits,
                   float *logits, float *confidence, int32_t *tokens);

/* ---- recipe: tokenizer (src/recipe) ----------------------------------------------------- */

/* (tokenizer API goes here) */

/* ---- recipe: prompt rendering, output parsing, protocols (src/recipe) ------------------- */

/* (rendering / parsing API goes here) */

/* ---- engine: offline inference (src/engine) -------------------------------------------- */

/* (engine API goes here) */

/* ---- serve: load balancers and EPLB (src/serve) ---------------------------------------- */

/* (serving control-plane API goes here) */

#ifdef __cplusplus
}
#endif

#endif
