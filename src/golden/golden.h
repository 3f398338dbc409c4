/* golden.h — the golden test sets of /work/shared/golden-v41 (format: golden-v41/README.md §5):
 * golden.json (array index, cases, margins) + golden.bin (raw little-endian arrays), and the
 * runner behind `deepinfer check-golden`: every case is replayed on a loaded model in its numerics
 * mode and compared against the tolerances of README §6.
 *
 * Nothing about the shapes is assumed: every size comes from golden.json and the checkpoint's
 * config.json (a held-out set has different shapes). */
#ifndef DI_GOLDEN_H
#define DI_GOLDEN_H

#include "base/file.h"
#include "model/model.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct {
    json_t *root;
    DiMappedFile bin;
    char *dir;
    int64_t seq_len;
} GoldenSet;

typedef struct {
    const void *data;
    int ndim;
    int64_t shape[8];
    int64_t numel;
} GoldenArray;

int golden_open(const char *dir, GoldenSet *g);
void golden_close(GoldenSet *g);

/* Array `name` of dtype "f32" | "i32" | "i64" with ndim dims; shape entries >= 0 must match. */
int golden_array(const GoldenSet *g, const char *name, const char *dtype, int ndim, const int64_t *shape, GoldenArray *out);

/* The Engram compressed-token map and hash multipliers shipped as golden arrays (README §2). */
int golden_prepare_model(const GoldenSet *g, Model *m);

size_t golden_n_cases(const GoldenSet *g);

typedef struct {
    char name[128];
    char mode[16];
    bool ok;
    double max_abs, mean_abs, max_rel; /* over the case's float arrays (logits; DSpark: logits + base logits) */
    double conf_max_abs;               /* DSpark only */
    double argmax_agree;               /* fraction of rows with the same argmax */
    char why[512];                     /* first failed check, "" when ok */
} GoldenResult;

/* Run case i on m (its mode is set from the case).  -1 only when the case cannot be run at all
 * (bad golden data, forward error); tolerance failures are reported in res->ok / res->why. */
int golden_run_case(const GoldenSet *g, Model *m, size_t i, GoldenResult *res);

#endif
