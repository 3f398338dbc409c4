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
