/* spec_probe.h — the step-cost curve measured when an engine with the confidence schedule starts
 * (engine-features.md §1.3 l: "a step-cost curve measured at start-up").
 *
 * Without it the schedule knows nothing of the forward's cost until live steps have run, so its
 * first decisions are cold-start probes.  At creation the engine times the runner's forward over
 * verify-shaped batches of 1, 2, 4, ... rows up to its largest verify batch (max_num_seqs x
 * (1 + gamma), bounded by the step's rows) and feeds them to the policy's curve; live steps keep
 * updating it afterwards.  The batches run on scratch pages taken from the engine's pool and
 * returned at once (their state is discarded), and the probe starts no size past its time
 * budget (it always measures one row), so a large model measures fewer sizes rather than
 * delaying start-up. */
#ifndef DI_ENGINE_SPEC_PROBE_H
#define DI_ENGINE_SPEC_PROBE_H

#include "engine/pages.h"
#include "engine/runner.h"
#include "engine/spec_control.h"

#include <stdint.h>

typedef struct {
    DiRunner *runner;
    DiPagePool *pool;       /* scratch pages come from it and go back to it */
    float *logits;          /* room for max_rows logits rows */
    int64_t max_rows;       /* the largest verify batch, >= 1 */
    int32_t rows_per_seq;   /* 1 + gamma: a verify sequence's rows, >= 1 */
    double budget_s;        /* stop starting new sizes past this many seconds (> 0) */
} DiSpecProbe;

/* Time the forward at each size and feed the timings to c's curve; logs the curve in one line.
 * Returns the sizes measured (0 when the pool cannot hold even one scratch sequence), -1 with
 * the cause on bad input or a failed forward. */
int di_spec_probe_cost(const DiSpecProbe *p, DiSpecControl *c);

#endif
