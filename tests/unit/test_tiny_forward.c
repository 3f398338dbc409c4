/* test_tiny_forward.c — integration: a make-tiny checkpoint runs through the model loader and
 * the forward pass (src/model/model.h, forward.h) with finite logits of order one at every
 * position, in every numerics mode, with the Engram multipliers the config derives (§5.2 d) and
 * the token map make-tiny ships (§5.2 a).
 * This is the "activations stay O(1) through the layers" requirement of make-tiny, measured. */
#include "test.h"

#include "base/error.h"
#include "base/file.h"
#include "base/log.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/state.h"
#include "model/tiny.h"

#include <stdlib.h>
#include <unistd.h>

static char dir[256];

static void run_mode(NumericsMode mode) {
    Model *m = model_load(dir, mode);
    CHECK_MSG(m != NULL, "%s", di_error_message());
    if (!m) return;
    int64_t V = m->cfg.vocab_size, n_map;
    const int32_t *cid;
    CHECK(di_tiny_engram_token_map(&cid, &n_map) == 0 && n_map == V);
    CHECK_MSG(model_set_engram_token_map(m, cid, V) == 0, "%s", di_error_message());
    CHECK_MSG(model_set_engram_multipliers(m, m->cfg.engram_multipliers, (int64_t)m->cfg.n_engram_layers,
                                           m->cfg.engram_max_ngram_size) == 0,
              "%s", di_error_message());
    RunState *st = state_create(&m->d);
    enum { N = 19 }; /* §9.6: longer than the window 8, odd, > top-k */
    int32_t toks[N];
    for (int i = 0; i < N; i++) toks[i] = (int32_t)((i * 37 + 5) % V);
    toks[0] = 0;
    float *logits = malloc(sizeof(float) * N * (size_t)V);
    int rc = st ? model_forward(m, st, toks, N, 0, logits, true, NULL) : -1;
    CHECK_MSG(rc == 0, "%s", di_error_message());
    if (rc == 0) {
        int nonfinite = 0;
        for (int p = 0; p < N; p++) {
            double ss = 0;
            for (int64_t v = 0; v < V; v++) {
                float x = logits[p * V + v];
                nonfinite += !isfinite(x);
                ss += (double)x * x;
            }
            double r = sqrt(ss / (double)V);
            CHECK_MSG(r > 0.05 && r < 20, "mode %s position %d: logit RMS %.4f", numerics_mode_name(mode), p, r);
        }
        CHECK_EQ_INT(nonfinite, 0);
    }
    free(logits);
    state_free(st);
    model_free(m);
}

TEST(tiny_runs_in_every_mode) {
    run_mode(MODE_EXACT);
    run_mode(MODE_KVQ);
    run_mode(MODE_REF);
}

int main(void) {
    di_log_set_level(DI_LOG_ERROR);
    snprintf(dir, sizeof dir, "/tmp/di_test_tiny_forward_%d", (int)getpid());
    if (di_tiny_write(dir, "tiny", 3, 0) < 0) {
        fprintf(stderr, "%s\n", di_error_message());
        return 1;
    }
    RUN_TEST(tiny_runs_in_every_mode);
    const char *files[] = {"config.json", "tokenizer.json", "engram_token_map.json", "model.safetensors.index.json",
                           "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
    for (int i = 0; i < 6; i++) {
        char *p = di_path_join(dir, files[i]);
        unlink(p);
        free(p);
    }
    rmdir(dir);
    return TEST_SUMMARY();
}
