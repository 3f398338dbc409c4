/* spec_sched.h — how many drafts each request verifies in a DSpark step (engine-features.md §1.3 i-l).
 *
 * Pure host code, no engine state: the engine feeds it confidences and timings and gets back one
 * draft length per request.  Three pieces:
 *
 * Survival.  The confidence head gives one raw logit per drafted position; with the STS
 * temperatures T_i (spec_sts.h) c_i = sigmoid(logit_i / T_i) and the prefix survival is
 * a_j = c_1 ... c_j, non-increasing in j: the expected accepted drafts of length l is
 * a_1 + ... + a_l.
 *
 * Step cost.  Seconds per verify step as a function of the rows B of the batch, learnt from
 * timings the engine reports (a start-up probe, live steps, or both).  Observations fall in
 * buckets (each B up to 16 exact, then 8 per octave); a bucket keeps a decayed mean of its B and
 * seconds, so repeated timings smooth noise and recent ones win.  The curve through the bucket
 * means is made non-decreasing (running maximum: more rows never cost less), interpolated
 * linearly, flat before the first point and extended linearly past the last one with the slope of
 * the last two points (with one point: proportional to B, the pessimistic guess).
 *
 * Lengths.  With R requests, each verify step emits one token per request plus the accepted
 * drafts, so its throughput is (R + sum of admitted a) / seconds.
 *   - di_spec_schedule_exact: DSP Algorithm 1.  Candidates (r, j) with a > 0 in order of
 *     decreasing a (ties by flat index r * max_draft + j, request-major); admit them one by one
 *     while each admission raises the throughput, and STOP at the first that does not.  The early
 *     stop keeps the decision to verify (r, j) independent of the confidences after it, which
 *     depend on the sampled draft j: without it speculative sampling is not lossless (DSP
 *     appendix A).
 *   - di_spec_budget + di_spec_admit: the production variant (§1.3 l).  The budget K (drafts to
 *     verify this step, all requests together) comes from survivals of an earlier step (stale,
 *     so independent of the current drafts: every b may be tried, no early stop); then the top K
 *     current (r, j) by survival (same order and ties) are admitted.  Still lossless: whether
 *     (r, j) is in the top K depends on other requests' drafts and on request r's earlier ones,
 *     never on a_(r, j+1..), which ranks after it.
 *   - di_spec_fixed_lengths: one length for every request (DEEPINFER_ENABLE_MTP_VARLEN=0, the
 *     deterministic mode: a seeded request's tokens then depend on nothing that runs beside it).
 * Because a is non-increasing in j and ties go to the lower index, every admitted set is a
 * prefix of each request's drafts.  A cap per request (tokens left before max_tokens, a grammar
 * that refused a draft, ...) drops the drafts at and past it before ranking.
 *
 * The drafter's own cost (draft_seconds, the engine's measurement of it for this batch): the
 * budget is chosen before drafting, so it compares b > 0 drafts (drafter + verify) with the
 * baseline R / seconds(required_rows) of a step that skips the drafter.  The exact scheduler
 * runs on current confidences, so the drafter already ran: its cost is in every option, the
 * baseline included.  required_rows is the rows the forward carries anyway (R decode anchors
 * plus any prefill chunks batched with them), >= R.
 *
 * Caveat for the caller: survivals exist only for steps that drafted.  A scheduler that chose 0
 * learns nothing new; the engine should draft now and then (or when the load changes) so that
 * stale survivals stay current. */
#ifndef DI_ENGINE_SPEC_SCHED_H
#define DI_ENGINE_SPEC_SCHED_H

#include <stddef.h>
#include <stdint.h>

/* ---- survival ---------------------------------------------------------------------------- */

/* survival[j] = prod_{i <= j} sigmoid(logits[i] / temps[i]) for j < n (temps NULL: all 1).
 * A NaN logit is an error (+-inf saturate to c = 1 or 0); temps must be finite and > 0.  -1 on
 * error. */
int di_spec_survival(const float *logits, const float *temps, int32_t n, float *survival);

/* ---- step-cost curve --------------------------------------------------------------------- */

#define DI_SPEC_COST_EXACT 16        /* rows 1..16 have a bucket each */
#define DI_SPEC_COST_PER_OCTAVE 8    /* then 8 buckets per doubling */
#define DI_SPEC_COST_BUCKETS (DI_SPEC_COST_EXACT + 24 * DI_SPEC_COST_PER_OCTAVE) /* up to 2^28 rows */
#define DI_SPEC_COST_DECAY 0.9       /* weight of a bucket's past per new observation in it */

typedef struct {
    double weight[DI_SPEC_COST_BUCKETS];   /* decayed observation count (0: bucket empty) */
    double rows[DI_SPEC_COST_BUCKETS];     /* decayed sum of weight * rows */
    double seconds[DI_SPEC_COST_BUCKETS];  /* decayed sum of weight * seconds */
} DiSpecCost;

/* An empty curve (every query then fails until one observation is in). */
void di_spec_cost_init(DiSpecCost *cost);

/* One timing: a forward of `rows` rows (>= 1) took `seconds` (finite, > 0).  -1 on bad input. */
int di_spec_cost_observe(DiSpecCost *cost, int64_t rows, double seconds);

/* Points of the curve: the non-empty buckets in order of rows, their mean rows and the
 * monotone-envelope seconds.  Returns how many (<= cap written; the count is the total). */
int di_spec_cost_points(const DiSpecCost *cost, double *rows, double *seconds, int cap);

/* Seconds of a step of `rows` rows (>= 1) from the curve; -1 with an error when the curve is
 * empty or rows < 1. */
double di_spec_cost_seconds(const DiSpecCost *cost, int64_t rows);

/* ---- lengths ----------------------------------------------------------------------------- */

/* The ranking scratch of the schedulers, sized once for the largest batch. */
typedef struct DiSpecSched DiSpecSched;

DiSpecSched *di_spec_sched_create(int32_t max_requests, int32_t max_draft);
void di_spec_sched_destroy(DiSpecSched *sched);

/* The drafts of a batch.  survival is [n_requests][max_draft] (row r: request r's
 * a_1..a_max_draft, each in [0, 1], non-increasing along the row; 0 past a request's drafts).
 * caps (NULL: none) limits request r to caps[r] >= 0 drafts. */
typedef struct {
    int32_t n_requests;        /* R >= 1, <= the max_requests of create */
    int32_t max_draft;         /* gamma >= 1, <= the max_draft of create */
    const float *survival;
    const int32_t *caps;
} DiSpecDrafts;

/* What a verify step costs. */
typedef struct {
    const DiSpecCost *cost;    /* non-empty */
    int64_t required_rows;     /* rows the step carries anyway, >= R */
    double draft_seconds;      /* the drafter's cost when any draft is verified, >= 0 */
} DiSpecStepCost;

/* DSP Algorithm 1 with the early stop: lengths[r] for each request.  Returns the total drafts
 * admitted (0 when no draft pays), -1 on bad input. */
int64_t di_spec_schedule_exact(DiSpecSched *sched, const DiSpecDrafts *drafts, const DiSpecStepCost *step,
                               int32_t *lengths);

/* The production budget for n_requests requests from stale survivals: stale holds n values
 * (any order, each in [0, 1], n <= max_requests * max_draft of create), the survivals of every
 * drafted position of an earlier step.  keep_frac in (0, 1] keeps only the ceil(keep_frac * n)
 * largest (1: all).  Returns the b maximising (R + sum of the b largest) /
 * (draft_seconds + seconds(required_rows + b)) over every b >= 1, or 0 when
 * R / seconds(required_rows) is at least as good; -1 on bad input. */
int64_t di_spec_budget(DiSpecSched *sched, int32_t n_requests, const DiSpecStepCost *step, const float *stale,
                       int64_t n, double keep_frac);

/* Admit the top `budget` (>= 0) (r, j) by current survival (a > 0 only, caps honoured, ties by
 * flat index): lengths[r] = admitted drafts of request r.  Returns the total admitted
 * (<= budget), -1 on bad input. */
int64_t di_spec_admit(DiSpecSched *sched, const DiSpecDrafts *drafts, int64_t budget, int32_t *lengths);

/* lengths[r] = min(length, caps[r]) for every request (caps NULL: length).  0 <= length. */
int di_spec_fixed_lengths(int32_t n_requests, int32_t length, const int32_t *caps, int32_t *lengths);

#endif
