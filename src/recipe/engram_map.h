/* engram_map.h — the Engram compressed-token map of a tokenizer (model-v41.md §5.2 a).
 *
 * Engram layers hash n-grams of *compressed* token ids: tokens whose text is the same after a
 * fixed normalisation share one id.  The map is derived from the tokenizer, so it lives in the
 * recipe layer (the model below must not call up); a checkpoint ships no map file, and
 * generate, chat, the Python LLM and the server all build it here and hand it to the engine via
 * DiEngineOptions.engram_token_map.  Public entry point: di_tokenizer_engram_map (deepinfer.h). */
#ifndef DI_RECIPE_ENGRAM_MAP_H
#define DI_RECIPE_ENGRAM_MAP_H

#include "deepinfer.h"

#include <stddef.h>

/* The map key of one decoded token's text (len bytes, valid UTF-8 without U+FFFD): NFKC -> NFD
 * -> drop combining marks (Mn) -> lowercase -> runs of [ \t\r\n] to one space -> strip Python
 * whitespace unless the whole key is one space -> empty becomes the text itself.  Heap string
 * (free()); NULL with an error. */
char *di_engram_key(const char *text, size_t len);

#endif
