/* backend_text.h — the served model's text: its tokenizer, the chat template, the engine's
 * text hooks.
 *
 * The engine never calls the recipe layer (layering: recipe -> engine), so the server, which
 * sits above both, turns requests into prompt ids: a chat conversation (the render input that
 * recipe/api_request.h builds) is rendered to segments and encoded by the prompt hand-off
 * (recipe.md §5.2: control tokens by id, text runs as plain BPE); a raw /v1/completions prompt
 * is plain BPE after BOS, as Hugging Face's add_special_tokens does.  The engine only gets
 * token bytes back (for its detokenizer) through di_engine_set_text_hooks.
 *
 * The tokenizer is the model directory's own tokenizer.json, loaded as is (DI_ADDED_TABLE_FILE):
 * a real checkpoint's file holds every control token at its id, and a small model's ids must
 * stay inside its vocabulary.  A template control token the file lacks (the built-in tiny
 * model has no DSML tokens, so it cannot render tool definitions) is a 400 naming the token. */
#ifndef DI_SERVE_BACKEND_TEXT_H
#define DI_SERVE_BACKEND_TEXT_H

#include "deepinfer.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct DiServeText DiServeText;

/* Load DIR/tokenizer.json.  NULL with the cause. */
DiServeText *di_serve_text_open(const char *model_dir);
void di_serve_text_close(DiServeText *t);

/* Install encode / token bytes / specials / BOS on the engine (before its first request).
 * `t` must outlive the engine. */
int di_serve_text_install(const DiServeText *t, DiEngine *engine);

/* A conversation (render input object) -> prompt ids, a fresh heap array.  Thread-safe. */
int di_serve_text_render(const DiServeText *t, const json_t *conversation, int32_t **ids, size_t *n_ids);

/* A raw prompt (NUL-terminated UTF-8) -> BOS + plain BPE ids, a fresh heap array.  Thread-safe. */
int di_serve_text_encode_prompt(const DiServeText *t, const char *prompt, int32_t **ids, size_t *n_ids);
/* The same without BOS when !add_special (/tokenize's add_special_tokens). */
int di_serve_text_encode(const DiServeText *t, const char *prompt, bool add_special, int32_t **ids, size_t *n_ids);

/* ids -> their text, special tokens included (Hugging Face decode with
 * skip_special_tokens=False): a fresh NUL-terminated string, bytes that are not valid UTF-8
 * replaced by U+FFFD per maximal invalid subpart.  -1 naming an id outside the vocabulary.
 * Thread-safe. */
int di_serve_text_decode(const DiServeText *t, const int32_t *ids, size_t n_ids, char **text);

/* The bytes of one token (a control token's spelling), valid while `t` is open; NULL with an
 * error for an id outside the tokenizer.  For logprobs. */
const char *di_serve_text_token_bytes(const DiServeText *t, int32_t id, size_t *len);

/* The end-of-thinking token (</think>), or -1 when the tokenizer lacks it.  For a reasoning budget. */
int32_t di_serve_text_think_end(const DiServeText *t);

#endif
