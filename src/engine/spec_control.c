/* spec_control.c — the engine's draft-length policy (see spec_control.h). */
#include "engine/spec_control.h"

#include "base/error.h"
#include "base/mem.h"

#include <stdlib.h>
#include <string.h>

int di_spec_control_init(DiSpecControl *c, bool confidence, int32_t max_requests, int32_t block) {
    memset(c, 0, sizeof *c);
    if (max_requests < 1 || block < 1 || block > DI_SPEC_STS_MAX_POSITIONS)
        return di_errorf("speculation: %d requests of %d drafts is out of range", max_requests, block);
    c->confidence = confidence;
    c->max_requests = max_requests;
    c->block = block;
    c->budget = -1;
    c->probe_interval = DI_SPEC_PROBE_EVERY;
    di_spec_cost_init(&c->cost);
    if (di_spec_sts_init(&c->sts, block) != 0) return -1;
    size_t n = (size_t)max_requests * (size_t)block;
    c->sched = di_spec_sched_create(max_requests, block);
    c->survival = di_calloc(n, sizeof *c->survival, "draft survivals");
    c->stale = di_calloc(n, sizeof *c->stale, "stale draft survivals");
    if (!c->sched || !c->survival || !c->stale) {
        di_spec_control_free(c);
        return -1;
    }
    return 0;
}

void di_spec_control_free(DiSpecControl *c) {
    di_spec_sched_destroy(c->sched);
    free(c->survival);
    free(c->stale);
    memset(c, 0, sizeof *c);
}

/* The budget from the last drafting step's survivals; -1 when there is no usable history. */
static int64_t stale_budget(DiSpecControl *c, int32_t n_requests, int64_t required_rows) {
    if (c->n_stale == 0 || c->steps_without_draft >= c->probe_interval) return -1;
    DiSpecStepCost step = {&c->cost, required_rows, c->draft_s_per_request * n_requests};
    int64_t k = di_spec_budget(c->sched, n_requests, &step, c->stale, c->n_stale, 1.0);
    if (k < 0) di_error_clear(); /* an empty cost curve: probe */
    return k;
}

bool di_spec_control_want_drafts(DiSpecControl *c, int32_t n_requests, int64_t required_rows) {
    if (!c->confidence) return true;
    c->budget = stale_budget(c, n_requests, required_rows);
    if (c->budget != 0) return true;
    c->steps_without_draft++;
    return false;
}

int di_spec_control_lengths(DiSpecControl *c, int32_t n_requests, const float *confidence, const int32_t *caps,
                            int32_t *lengths) {
    if (n_requests < 1 || n_requests > c->max_requests || !confidence || !caps || !lengths)
        return di_errorf("speculation: lengths for %d requests (at most %d)", n_requests, c->max_requests);
    if (!c->confidence) return di_spec_fixed_lengths(n_requests, c->block, caps, lengths);
    int32_t block = c->block;
    for (int32_t r = 0; r < n_requests; r++)
        if (di_spec_survival(confidence + (size_t)r * (size_t)block, c->sts.temps, block,
                             c->survival + (size_t)r * (size_t)block) != 0)
            return -1;
    c->n_stale = (int64_t)n_requests * block;
    memcpy(c->stale, c->survival, (size_t)c->n_stale * sizeof *c->stale);
    c->probing = c->budget < 0 && c->steps_without_draft > 0; /* not the cold start */
    c->probe_accepted = 0;
    c->steps_without_draft = 0;
    if (c->budget < 0) { /* a probe: one draft each */
        for (int32_t r = 0; r < n_requests; r++) lengths[r] = caps[r] < 1 ? caps[r] : 1;
        return 0;
    }
    DiSpecDrafts drafts = {n_requests, block, c->survival, caps};
    return di_spec_admit(c->sched, &drafts, c->budget, lengths) < 0 ? -1 : 0;
}

#define DRAFT_COST_DECAY 0.9

void di_spec_control_timing(DiSpecControl *c, int64_t rows, double forward_s, int32_t n_drafted, double draft_s) {
    if (rows >= 1 && forward_s > 0 && di_spec_cost_observe(&c->cost, rows, forward_s) != 0) di_error_clear();
    if (n_drafted < 1 || !(draft_s > 0)) return;
    double per = draft_s / n_drafted;
    c->draft_s_per_request = c->draft_s_per_request > 0
                                 ? DRAFT_COST_DECAY * c->draft_s_per_request + (1 - DRAFT_COST_DECAY) * per
                                 : per;
}

void di_spec_control_outcome(DiSpecControl *c, const float *confidence, int32_t verified, int32_t accepted) {
    c->probe_accepted += accepted;
    if (c->confidence && di_spec_sts_observe(&c->sts, confidence, c->block, verified, accepted) != 0) di_error_clear();
}

void di_spec_control_refit(DiSpecControl *c) {
    if (!c->confidence) return;
    di_spec_sts_refit(&c->sts);
    if (c->probing) /* a fruitless probe waits longer for the next; a fruitful one resets */
        c->probe_interval = c->probe_accepted > 0                   ? DI_SPEC_PROBE_EVERY
                            : c->probe_interval * 2 > DI_SPEC_PROBE_MAX ? DI_SPEC_PROBE_MAX
                                                                   : c->probe_interval * 2;
    c->probing = false;
}
