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

/* The DeepSeek V3 / V4 / V4.1 tokenizer: byte-level BPE loaded from a Hugging Face
 * tokenizer.json (recipe.md §1).  A loaded tokenizer is immutable and may be shared by threads;
 * only di_tokenizer_set_threads changes it.  Text is UTF-8: invalid UTF-8 is an error naming
 * the byte offset, never silently replaced.  BOS is never added implicitly. */
typedef struct DiTokenizer DiTokenizer;

/* Which added-token table to use on top of the file's own (recipe-data/README.md):
 * FILE = the file as it is; V4 = plus the V4 additions (ids 128815..129279) the file lacks;
 * V41 = V4 plus <｜System｜> at 128799 in place of the V3 placeholder.  A token the file
 * already has at an id always wins (a real checkpoint's tokenizer.json loads as is). */
typedef enum { DI_ADDED_TABLE_FILE = 0, DI_ADDED_TABLE_V4 = 1, DI_ADDED_TABLE_V41 = 2 } DiAddedTable;

DiTokenizer *di_tokenizer_load(const char *path);
DiTokenizer *di_tokenizer_load_table(const char *path, DiAddedTable table);
/* The same from tokenizer.json contents in memory; `what` names the source in errors. */
DiTokenizer *di_tokenizer_load_buffer(const char *json, size_t len, const char *what, DiAddedTable table);
void di_tokenizer_free(DiTokenizer *tok);

/* Encode long texts on n_threads threads (<= 1: sequentially, the default).  The ids are
 * identical to the sequential ones; texts are cut only where pre-tokenization allows (§5.4). */
int di_tokenizer_set_threads(DiTokenizer *tok, int n_threads);

/* Number of ids: highest vocab or added-token id + 1 (129280 for V4 / V4.1). */
size_t di_tokenizer_vocab_size(const DiTokenizer *tok);

/* Plain text -> ids with no added-token recognition (recipe.md §1.2): "<｜User｜>" in the text
 * is 5 ordinary tokens.  *ids is a fresh heap array (free with free()); NULL when empty. */
int di_tokenizer_encode(const DiTokenizer *tok, const char *text, size_t len, int32_t **ids, size_t *n_ids);
/* Hugging Face compatible encoding (recipe.md §1.4): added-token spellings in the text become
 * their ids (non-normalized tokens first, then normalized ones, leftmost-longest), the gaps are
 * encoded as plain text.  For tools and tests; prompts use di_tokenizer_encode_segments. */
int di_tokenizer_encode_with_added(const DiTokenizer *tok, const char *text, size_t len, int32_t **ids,
                                   size_t *n_ids);

/* Bytes of ids, concatenated exactly (not necessarily valid UTF-8), NUL-terminated; free with
 * free().  An id with no token is an error. */
int di_tokenizer_decode(const DiTokenizer *tok, const int32_t *ids, size_t n_ids, char **out, size_t *out_len);
/* The bytes of one token (not NUL-terminated), NULL with an error for an invalid id. */
const char *di_tokenizer_token_bytes(const DiTokenizer *tok, int32_t id, size_t *len);

/* id <-> spelling: vocab entries in their byte-level form ("Ġworld"), added tokens as
 * written ("<｜User｜>").  token_to_id returns -1 with an error when there is none. */
const char *di_tokenizer_id_to_token(const DiTokenizer *tok, int32_t id);
int32_t di_tokenizer_token_to_id(const DiTokenizer *tok, const char *spelling);
/* The id of an added (special or control) token by spelling; -1 with an error otherwise. */
int32_t di_tokenizer_special_id(const DiTokenizer *tok, const char *spelling);
/* 1 when id is an added token, 0 when it is a plain vocab entry, -1 (error) when invalid. */
int di_tokenizer_is_added(const DiTokenizer *tok, int32_t id);

/* Incremental decoding for streaming (recipe.md §1.5): text is released only as whole UTF-8
 * characters; bytes that can never become valid come out as U+FFFD, one per maximal invalid
 * subpart; an incomplete tail at the end of the stream is dropped. */
typedef struct DiDecodeStream DiDecodeStream;
DiDecodeStream *di_decode_stream_new(const DiTokenizer *tok);
/* Feed one id; *text and *len get the text it releases (possibly empty), valid until the next
 * call.  *text is NUL-terminated. */
int di_decode_stream_push(DiDecodeStream *stream, int32_t id, const char **text, size_t *len);
/* Ids whose bytes are still held back (they count as output only once their text is out). */
size_t di_decode_stream_pending_ids(const DiDecodeStream *stream);
void di_decode_stream_free(DiDecodeStream *stream);

/* ---- recipe: prompt rendering, output parsing, protocols (src/recipe) ------------------- */

/* Render a conversation to its prompt.  `json` holds the `deepinfer render` input
 * ({"encoding": "v4"|"v4-0731"|"v41", "messages": [...], "tools": [...], "thinking_mode":
 * "chat"|"thinking", "reasoning_effort": ..., "drop_thinking": bool, "tool_choice": ...,
 * "response_format": ...}); *result_json receives {"prompt": "..."} (plus "segments":
 * [{"special": bool, "text": "..."}] with DI_RENDER_WITH_SEGMENTS).  Free with free(). */
#define DI_RENDER_WITH_SEGMENTS 1
int di_render_json(const char *json, size_t len, int flags, char **result_json);
/* The same plus "ids": the prompt's token ids, SPECIAL segments by id and TEXT runs as plain
 * BPE (recipe.md §5.2).  Load `tok` with DI_ADDED_TABLE_V41 (or from the model's own
 * tokenizer.json) so every control token of every encoding has its id. */
int di_render_json_ids(const DiTokenizer *tok, const char *json, size_t len, int flags, char **result_json);

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
