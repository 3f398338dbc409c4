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
