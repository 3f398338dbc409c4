/* engine_model.c — di_engine_create: an engine on a model directory (the V4.1 model of src/model
 * behind runner_v41), with the directory resolved as architecture.md says: the argument, else
 * $DEEPINFER_HF_MODEL_DIR, else the built-in tiny model (generated on first use).
 *
 * A model with Engram layers also needs its compressed-token map (model-v41.md §5.2 a), which is
 * derived from the tokenizer and so cannot be built here (the tokenizer is in the layer above):
 * it comes from the options, else DIR/engram_token_map.json, else — for the built-in synthetic
 * tiny model only — the synthetic map cid[t] = t mod engram_compressed_vocab_size of §9.3. */
#include "deepinfer.h"

#include "base/env.h"
#include "base/error.h"
#include "base/file.h"
#include "base/json.h"
#include "base/mem.h"
#include "engine/engine.h"
#include "engine/runner_v41.h"
#include "model/engram_map_file.h"
#include "model/model.h"
#include "model/replay.h"
#include "model/replay.h"
#include "model/tiny.h"

#include <stdlib.h>
#include <string.h>

static const char *resolve_model_dir(const char *model_dir, char *buf, size_t n, int *builtin) {
    *builtin = 0;
    if (model_dir && *model_dir) return model_dir;
    const char *env = di_env_hf_model_dir();
    if (env) return env;
    if (di_tiny_default_dir(buf, n) != 0 || di_tiny_ensure(buf) != 0) {
        di_error_wrap("preparing the built-in tiny model");
        return NULL;
    }
    *builtin = 1;
    return buf;
}

static int setup_engram_map(Model *m, const char *dir, int builtin, const DiEngineOptions *opts) {
    if (m->d.n_engram == 0) return 0;
    if (opts && opts->engram_token_map)
        return model_set_engram_token_map(m, opts->engram_token_map, opts->engram_token_map_len);
    char *file = di_path_join(dir, "engram_token_map.json");
    if (!file) return -1;
    int exists = di_file_exists(file);
    int rc = exists ? model_load_engram_token_map_file(m, file) : 0;
    free(file);
    if (exists) return rc;
    if (!builtin)
        return di_errorf("%s: the model has %d Engram layer(s) but no compressed-token map (engram_token_map.json in "
                         "the directory, or DiEngineOptions.engram_token_map built from its tokenizer)",
                         dir, m->d.n_engram);
    int32_t *map = di_malloc((size_t)m->d.vocab * sizeof *map, "engram token map");
    if (!map) return -1;
    for (int t = 0; t < m->d.vocab; t++) map[t] = t % m->d.engram_compressed_vocab; /* §9.3 */
    rc = model_set_engram_token_map(m, map, m->d.vocab);
    free(map);
    return rc;
}

DiEngine *di_engine_create(const char *model_dir, const DiEngineOptions *opts) {
    return di_engine_create_hooked(model_dir, opts, NULL, NULL);
}

DiEngine *di_engine_create_hooked(const char *model_dir, const DiEngineOptions *opts, DiModelHook hook, void *ctx) {
    char builtin_dir[4096];
    int builtin;
    if (di_env_check() != 0) return NULL; /* embedders (Python, C API) get the CLI's checks too */
    const char *dir = resolve_model_dir(model_dir, builtin_dir, sizeof builtin_dir, &builtin);
    if (!dir) return NULL;
    Model *model = model_load(dir, MODE_REF);
    if (!model || setup_engram_map(model, dir, builtin, opts) != 0 || model_prefill_replay_from_env(model) != 0 ||
        (hook && hook(model, dir, ctx) != 0)) {
        model_free(model);
        di_error_wrap("creating the engine");
        return NULL;
    }
    DiRunner *runner = di_v41_runner_create(model, 1, 0);
    if (!runner) {
        model_free(model);
        return NULL;
    }
    DiEngine *engine = di_engine_create_with_runner(runner, opts);
    if (engine && di_engine_set_model_dir(engine, dir) != 0) {
        di_engine_destroy(engine);
        return NULL;
    }
    return engine;
}
