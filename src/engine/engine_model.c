/* engine_model.c — di_engine_create: an engine on a model directory (the V4.1 model of src/model
 * behind runner_v41), with the directory resolved as architecture.md says: the argument, else
 * $DEEPINFER_HF_MODEL_DIR, else the built-in tiny model (generated on first use). */
#include "deepinfer.h"

#include "base/error.h"
#include "engine/engine.h"
#include "engine/runner_v41.h"
#include "model/model.h"
#include "model/tiny.h"

#include <stdlib.h>

static const char *resolve_model_dir(const char *model_dir, char *buf, size_t n) {
    if (model_dir && *model_dir) return model_dir;
    const char *env = getenv("DEEPINFER_HF_MODEL_DIR");
    if (env && *env) return env;
    if (di_tiny_default_dir(buf, n) != 0 || di_tiny_ensure(buf) != 0) {
        di_error_wrap("preparing the built-in tiny model");
        return NULL;
    }
    return buf;
}

DiEngine *di_engine_create(const char *model_dir, const DiEngineOptions *opts) {
    char builtin[4096];
    const char *dir = resolve_model_dir(model_dir, builtin, sizeof builtin);
    if (!dir) return NULL;
    Model *model = model_load(dir, MODE_REF);
    if (!model) {
        di_error_wrap("creating the engine");
        return NULL;
    }
    /* Engram layers hash token ids through a tokenizer-derived compressed vocabulary and fixed
     * multipliers (model-v41.md §5.2); without them every forward fails, so fail here, once. */
    if (model->d.n_engram > 0 && (!model->token_map || !model->engram_mult_set)) {
        di_errorf("creating the engine on %s: the model has %d Engram layer(s) but no compressed-token map and hash "
                  "multipliers (model_set_engram_token_map / model_set_engram_multipliers); the model core does not "
                  "derive them from a checkpoint directory yet",
                  dir, model->d.n_engram);
        model_free(model);
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
