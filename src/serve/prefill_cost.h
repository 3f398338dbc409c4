/* prefill_cost.h — the prefill step-cost model and chunk solver (serving.md §6.3).
 *
 * cost(q, c) = a·q² + b·q·c + d·q + e·c + f nanoseconds for q new tokens of a request with c
 * tokens already in its KV: a·q² causal attention among the new tokens, b·q·c attention/indexing
 * against the prefix, d·q projections and MoE GEMMs, e·c reading prefix state, f the fixed
 * launch/sync overhead, paid once per step (not per request).  The coefficients are fitted by
 * least squares from measured step times; the chunk solver inverts the model in closed form to
 * give each request the largest block-aligned chunk that fits a nanosecond budget. */
#ifndef DI_SERVE_PREFILL_COST_H
#define DI_SERVE_PREFILL_COST_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    double a, b, d, e, f; /* ns, ns/token², ns/token, ns/token, ns */
} DiPrefillCost;

/* A request's share of a step, without the step's fixed overhead f (NaN for a NULL model). */
double di_prefill_cost_request_ns(const DiPrefillCost *m, int64_t q, int64_t c);
/* A whole step that runs only this request: f + request share. */
double di_prefill_cost_ns(const DiPrefillCost *m, int64_t q, int64_t c);

/* Least-squares fit of the five coefficients to n >= 5 samples (q[i], c[i], ns[i]).  With
 * relative = 1 the residuals are divided by the measurement (minimises relative error, so short
 * steps count as much as long ones).  Columns are scaled before the 5x5 normal equations are
 * solved, and a grid that cannot determine all five (e.g. c always 0) is an error. */
int di_prefill_cost_fit(const int64_t *q, const int64_t *c, const double *ns, size_t n, int relative,
                        DiPrefillCost *out);

/* The chunk rules of §6.3. */
typedef struct {
    int64_t block;     /* chunks are rounded down to a multiple of this (KV block, e.g. 512) */
    int64_t min_chunk; /* a chunk smaller than this is not run, unless it finishes the request */
} DiChunkRules;

/* Largest q in [0, remaining] with request cost(q, c) <= budget_ns, a multiple of rules->block
 * unless q == remaining, and 0 instead of a chunk below rules->min_chunk that does not finish the
 * request.  Guarantees cost(q) <= budget_ns and, when 0 < q < remaining,
 * cost(q + block) > budget_ns.  Returns -1 (with error) on bad arguments. */
int64_t di_prefill_chunk_solve(const DiPrefillCost *m, int64_t c, int64_t remaining, double budget_ns,
                               const DiChunkRules *rules);

/* One rank's step: requests in the given order (tier priority, then age) with prefix c[i] and
 * remaining[i] tokens; fills q[i] from the budget T (f paid once) until the budget or the token
 * cap is spent.  Returns the predicted step time (f + sum of request costs; 0 when nothing runs),
 * or -1 with error. */
double di_prefill_fill_step(const DiPrefillCost *m, const int64_t *c, const int64_t *remaining, size_t n,
                            double budget_ns, int64_t token_cap, const DiChunkRules *rules, int64_t *q);

/* Online correction (§6.3 "Refit online ... with an EWMA correction factor"): the ratio of
 * measured to predicted step time, smoothed; the scheduler divides its budget by it, so a model
 * that under-predicts makes chunks smaller until the two agree. */
typedef struct {
    double factor; /* measured / predicted, starts at 1 */
    double alpha;  /* weight of the newest step, (0, 1] */
    int64_t steps;
} DiPrefillCorrection;

int di_prefill_correction_init(DiPrefillCorrection *c, double alpha);
/* Fold in one step; ignores steps with a non-positive prediction or measurement. */
void di_prefill_correction_update(DiPrefillCorrection *c, double predicted_ns, double measured_ns);

#endif
