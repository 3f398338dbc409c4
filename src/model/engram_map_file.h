/* engram_map_file.h — reading the Engram compressed-token map (model-v41.md §5.2 a) from a file.
 *
 * The release derives the map from its tokenizer; a checkpoint directory may instead ship it as
 * engram_token_map.json (make-tiny writes one).  Two shapes are accepted, so a map printed by any
 * of our tools loads: a bare JSON array of compressed ids, one per token id, or an object
 * {"token_map": [...], "compressed_vocab_size": C, ...} (what make-tiny writes; C is checked). */
#ifndef DI_MODEL_ENGRAM_MAP_FILE_H
#define DI_MODEL_ENGRAM_MAP_FILE_H

#include "model/model.h"

/* Reads the map at `path` and installs it with model_set_engram_token_map. */
int model_load_engram_token_map_file(Model *m, const char *path);

#endif
