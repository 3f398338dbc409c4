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

/* Render a conversation to its prompt.  `json` holds the `deepinfer render` input
 * ({"encoding": "v4"|"v4-0731"|"v41", "messages": [...], "tools": [...], "thinking_mode":
 * "chat"|"thinking", "reasoning_effort": ..., "drop_thinking": bool, "tool_choice": ...,
 * "response_format": ...}); *result_json receives {"prompt": "..."} (plus "segments":
 * [{"special": bool, "text": "..."}] with DI_RENDER_WITH_SEGMENTS).  Free with free(). */
#define DI_RENDER_WITH_SEGMENTS 1
int di_render_json(const char *json, size_t len, int flags, char **result_json);

/* Streaming parser of model output (reasoning, content, DSML tool calls, JSON mode, stop
 * sequences).  options_json (NULL = defaults): {"initial": "content"|"start"|"reasoning"|
 * "content_continuation", "tools": true, "tool_stage": false, "json_mode": false,
 * "stop": ["..."], "finish": "stop"|"length"}.  Feed decoded UTF-8 text in any split; the
 * result is the same however the text is split. */
typedef struct DiOutputParser DiOutputParser;
DiOutputParser *di_output_parser_new(const char *options_json);
int di_output_parser_feed(DiOutputParser *parser, const char *text, size_t len);
/* End of stream; then the result: {"reasoning_content", "content", "tool_calls": [{"name",
 * "arguments"}], "invalid": [...], "stopped": bool, "finish_reason"}.  Free with free(). */
int di_output_parser_finish(DiOutputParser *parser, char **result_json);
void di_output_parser_free(DiOutputParser *parser);
/* The `deepinfer parse` contract: {"encoding": ..., "options": {...}, "chunks": ["..."]}. */
int di_parse_json(const char *json, size_t len, char **result_json);

/* ---- engine: offline inference (src/engine) -------------------------------------------- */

/* (engine API goes here) */

/* ---- serve: load balancers and EPLB (src/serve) ---------------------------------------- */

/* (serving control-plane API goes here) */

#ifdef __cplusplus
}
#endif

#endif
