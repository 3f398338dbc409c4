/* model_api.c — the public C API of the model (deepinfer.h, model section): thin wrappers that
 * check arguments and forward to model.h / forward.h / dspark.h. */
#include "deepinfer.h"

#include "base/error.h"
#include "base/mem.h"
#include "base/threadpool.h"
#include "model/dspark.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/replay.h"
#include "model/state.h"

#include <stdlib.h>

struct DiModel {
    Model *m;
};

struct DiModelState {
    RunState *st;
    const DiModel *owner;
};

DiModel *di_model_load(const char *dir, const char *numerics) {
    NumericsMode mode = MODE_REF;
    if (numerics && numerics_mode_parse(numerics, &mode) != 0) return NULL;
    DiModel *dm = di_calloc(1, sizeof *dm, "model");
    if (!dm) return NULL;
    dm->m = model_load(dir, mode);
    if (!dm->m || model_prefill_replay_from_env(dm->m) != 0) {
        model_free(dm->m);
        free(dm);
        return NULL;
    }
    return dm;
}

void di_model_free(DiModel *model) {
    if (!model) return;
    if (model->m->pool) di_pool_destroy(model->m->pool);
    model_free(model->m);
    free(model);
}

int32_t di_model_vocab_size(const DiModel *model) {
    if (!model) return di_errorf("di_model_vocab_size: no model");
    return model->m->d.vocab;
}

int di_model_set_threads(DiModel *model, int n_threads) {
    if (!model) return di_errorf("di_model_set_threads: no model");
    DiThreadPool *pool = di_pool_create(n_threads);
    if (!pool) return -1;
    if (model->m->pool) di_pool_destroy(model->m->pool);
    model->m->pool = pool;
    return 0;
}

int di_model_set_engram_token_map(DiModel *model, const int32_t *cid, int64_t len) {
    if (!model) return di_errorf("di_model_set_engram_token_map: no model");
    return model_set_engram_token_map(model->m, cid, len);
}

DiModelState *di_model_state_new(const DiModel *model) {
    if (!model) {
        di_errorf("di_model_state_new: no model");
        return NULL;
    }
    DiModelState *s = di_calloc(1, sizeof *s, "model state");
    if (!s) return NULL;
    s->st = state_create(&model->m->d);
    s->owner = model;
    if (!s->st) {
        free(s);
        return NULL;
    }
    return s;
}

void di_model_state_free(DiModelState *state) {
    if (!state) return;
    state_free(state->st);
    free(state);
}

int64_t di_model_state_positions(const DiModelState *state) {
    if (!state) return di_errorf("di_model_state_positions: no state");
    return state->st->n_pos;
}

static int check_pair(const DiModel *model, const DiModelState *state, const char *fn) {
    if (!model || !state) return di_errorf("%s: no model or state", fn);
    if (state->owner != model) return di_errorf("%s: the state was created for another model", fn);
    return 0;
}

int di_model_forward(DiModel *model, DiModelState *state, const int32_t *tokens, int64_t n, int64_t start_pos, float *logits,
                     int all_rows) {
    if (check_pair(model, state, "di_model_forward") != 0) return -1;
    return model_forward(model->m, state->st, tokens, n, start_pos, logits, all_rows != 0, NULL);
}

int di_model_draft_block_size(const DiModel *model) {
    if (!model) return di_errorf("di_model_draft_block_size: no model");
    return model->m->w.has_dspark ? model->m->d.dspark_block : 0;
}

int di_model_draft(DiModel *model, DiModelState *state, int32_t anchor, const int32_t *given, float *base_logits, float *logits,
                   float *confidence, int32_t *tokens) {
    if (check_pair(model, state, "di_model_draft") != 0) return -1;
    DraftOutput out = {base_logits, logits, confidence, tokens};
    return dspark_draft(model->m, state->st, anchor, given, &out);
}
