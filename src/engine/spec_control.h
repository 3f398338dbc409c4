/* spec_control.h — the engine's draft-length policy for speculative decoding: what the executor
 * asks before drafting (draft at all this step?) and after (how many drafts each request
 * verifies), and what it reports after verifying (timings, outcomes).
 *
 * Fixed (DEEPINFER_ENABLE_MTP_VARLEN=0): every request drafts and verifies its maximum, a
 * deterministic rule.  Confidence (=1, the default): the production variant of DSpark's scheduler
 * (spec_sched.h, engine-features.md §1.3 l) over a step-cost curve measured at start-up
 * (spec_probe.h) and kept current by the engine's own forwards, and the drafter's measured cost, with the confidences calibrated online (spec_sts.h):
 *   - before drafting, the budget K of verified drafts comes from the survivals of the last step
 *     that drafted (stale, so independent of this step's drafts); K = 0 means drafting does not
 *     pay and the step skips the drafter, except for a probe step that drafts one token per
 *     request so the survivals and the calibration stay current (the load or the text may
 *     change): after PROBE_EVERY skipped steps, the interval doubling (up to PROBE_MAX) while
 *     probes accept nothing;
 *   - after drafting, the top K (request, draft) pairs by current survival are verified (every
 *     request's drafts a prefix);
 *   - with no history yet (the first decode steps), a probe step.
 * Pure host state, used only by the thread that executes steps. */
#ifndef DI_ENGINE_SPEC_CONTROL_H
#define DI_ENGINE_SPEC_CONTROL_H

#include "engine/spec_sched.h"
#include "engine/spec_sts.h"

#include <stdbool.h>
#include <stdint.h>

#define DI_SPEC_PROBE_EVERY 16
#define DI_SPEC_PROBE_MAX 256

typedef struct {
    bool confidence;         /* the schedule; false: fixed */
    int32_t max_requests, block;
    DiSpecCost cost;
    DiSpecSts sts;
    DiSpecSched *sched;
    float *survival;         /* [max_requests][block]: this step's */
    float *stale;            /* [max_requests * block]: the last drafting step's */
    int64_t n_stale;
    int64_t budget;          /* K of this step (confidence), -1: a probe */
    double draft_s_per_request; /* decayed mean of the drafter's seconds per request (0: unknown) */
    int steps_without_draft;
    int probe_interval;      /* skipped steps before the next probe */
    bool probing;            /* this step is a probe */
    int64_t probe_accepted;  /* drafts its requests accepted */
} DiSpecControl;

/* block: the drafter's block (1 .. DI_SPEC_STS_MAX_POSITIONS); max_requests: sequences one step
 * may verify.  -1 on bad input or allocation failure. */
int di_spec_control_init(DiSpecControl *c, bool confidence, int32_t max_requests, int32_t block);
void di_spec_control_free(DiSpecControl *c);

/* Before drafting: should the n_requests (>= 1) speculative requests of a step that carries
 * required_rows rows anyway draft at all? */
bool di_spec_control_want_drafts(DiSpecControl *c, int32_t n_requests, int64_t required_rows);

/* After drafting: lengths[r] <= caps[r] drafts to verify for each request, from their raw
 * confidence logits confidence[r * block + j].  -1 on bad input. */
int di_spec_control_lengths(DiSpecControl *c, int32_t n_requests, const float *confidence, const int32_t *caps,
                            int32_t *lengths);

/* After the step: a forward of `rows` rows took forward_s; the drafter took draft_s for
 * n_drafted requests (0: it did not run). */
void di_spec_control_timing(DiSpecControl *c, int64_t rows, double forward_s, int32_t n_drafted, double draft_s);

/* After verifying one request: its drafts' confidence logits, how many were verified and
 * accepted (calibration).  Call di_spec_control_refit once the step's requests are in. */
void di_spec_control_outcome(DiSpecControl *c, const float *confidence, int32_t verified, int32_t accepted);
void di_spec_control_refit(DiSpecControl *c);

#endif
