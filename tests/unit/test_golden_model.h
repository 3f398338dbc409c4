/* test_golden_model.h — the golden tiny-a checkpoint of the shared data (golden-v41/tiny-a),
 * loaded and prepared (Engram token map and multipliers from its golden set), for the unit tests
 * that run the real V4.1 forward. */
#ifndef DI_TEST_GOLDEN_MODEL_H
#define DI_TEST_GOLDEN_MODEL_H

#include "test.h"

#include "golden/golden.h"
#include "model/model.h"

#include <stdio.h>

/* NULL with an error when the shared data or the checkpoint cannot be read. */
static inline Model *test_golden_tiny_a(NumericsMode mode) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/golden-v41/tiny-a", test_shared_dir());
    GoldenSet g;
    if (golden_open(dir, &g) != 0) return NULL;
    snprintf(dir, sizeof dir, "%s/golden-v41/tiny-a/checkpoint", test_shared_dir());
    Model *m = model_load(dir, mode);
    if (m && golden_prepare_model(&g, m) != 0) {
        model_free(m);
        m = NULL;
    }
    golden_close(&g);
    return m;
}

#endif
