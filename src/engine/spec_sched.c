/* spec_sched.c — survival, the step-cost curve and the draft-length schedulers of spec_sched.h. */
#include "engine/spec_sched.h"

#include "base/error.h"
#include "base/mem.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* ---- survival ---------------------------------------------------------------------------- */

int di_spec_survival(const float *logits, const float *temps, int32_t n, float *survival) {
    if (!logits || !survival || n < 0) return di_errorf("spec survival: NULL array or n = %d < 0", n);
    double a = 1.0;
    for (int32_t j = 0; j < n; j++) {
        double t = temps ? temps[j] : 1.0;
        if (isnan(logits[j])) return di_errorf("spec survival: confidence logit %d is NaN", j);
        if (!(t > 0) || !isfinite(t))
            return di_errorf("spec survival: temperature %d must be finite and > 0, got %g", j, t);
        a *= 1.0 / (1.0 + exp(-(double)logits[j] / t));
        survival[j] = (float)a;
    }
    return 0;
}

/* ---- step-cost curve --------------------------------------------------------------------- */

/* Rows 1..16 get buckets 0..15; then octave [2^o, 2^(o+1)) is split in 8 equal parts. */
static int cost_bucket(int64_t rows) {
    if (rows <= DI_SPEC_COST_EXACT) return (int)rows - 1;
    int o = 63 - __builtin_clzll((unsigned long long)rows);
    int64_t base = (int64_t)1 << o;
    int part = (int)((rows - base) * DI_SPEC_COST_PER_OCTAVE / base);
    return DI_SPEC_COST_EXACT + (o - 4) * DI_SPEC_COST_PER_OCTAVE + part;
}

#define COST_MAX_ROWS (((int64_t)1 << 28) - 1)

void di_spec_cost_init(DiSpecCost *cost) {
    if (cost) memset(cost, 0, sizeof *cost);
}

int di_spec_cost_observe(DiSpecCost *cost, int64_t rows, double seconds) {
    if (!cost) return di_errorf("spec cost: NULL curve");
    if (rows < 1 || rows > COST_MAX_ROWS)
        return di_errorf("spec cost: rows must be in [1, %lld], got %lld", (long long)COST_MAX_ROWS, (long long)rows);
    if (!(seconds > 0) || !isfinite(seconds))
        return di_errorf("spec cost: seconds must be finite and > 0, got %g", seconds);
    int b = cost_bucket(rows);
    cost->weight[b] = cost->weight[b] * DI_SPEC_COST_DECAY + 1.0;
    cost->rows[b] = cost->rows[b] * DI_SPEC_COST_DECAY + (double)rows;
    cost->seconds[b] = cost->seconds[b] * DI_SPEC_COST_DECAY + seconds;
    return 0;
}

int di_spec_cost_points(const DiSpecCost *cost, double *rows, double *seconds, int cap) {
    if (!cost) return di_errorf("spec cost: NULL curve");
    int n = 0;
    double envelope = 0;
    for (int b = 0; b < DI_SPEC_COST_BUCKETS; b++) {
        if (cost->weight[b] <= 0) continue;
        double s = cost->seconds[b] / cost->weight[b];
        envelope = s > envelope ? s : envelope;
        if (n < cap && rows && seconds) {
            rows[n] = cost->rows[b] / cost->weight[b];
            seconds[n] = envelope;
        }
        n++;
    }
    return n;
}

/* The curve's points, taken once per scheduling call. */
typedef struct {
    int n;
    double x[DI_SPEC_COST_BUCKETS], y[DI_SPEC_COST_BUCKETS];
} Curve;

static int curve_load(Curve *c, const DiSpecCost *cost) {
    c->n = di_spec_cost_points(cost, c->x, c->y, DI_SPEC_COST_BUCKETS);
    if (c->n <= 0) return di_errorf("spec cost: the step-cost curve has no measurement yet");
    return 0;
}

static double curve_at(const Curve *c, double rows) {
    int n = c->n;
    if (rows <= c->x[0]) return c->y[0];
    if (rows >= c->x[n - 1]) {
        if (n == 1) return c->y[0] * rows / c->x[0];
        double slope = (c->y[n - 1] - c->y[n - 2]) / (c->x[n - 1] - c->x[n - 2]);
        return c->y[n - 1] + slope * (rows - c->x[n - 1]);
    }
    int lo = 0, hi = n - 1; /* x[lo] < rows < x[hi] */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (c->x[mid] <= rows) lo = mid;
        else hi = mid;
    }
    double f = (rows - c->x[lo]) / (c->x[hi] - c->x[lo]);
    return c->y[lo] + f * (c->y[hi] - c->y[lo]);
}

double di_spec_cost_seconds(const DiSpecCost *cost, int64_t rows) {
    if (!cost) return di_errorf("spec cost: NULL curve");
    if (rows < 1) return di_errorf("spec cost: rows must be >= 1, got %lld", (long long)rows);
    Curve c;
    if (curve_load(&c, cost) != 0) return -1;
    return curve_at(&c, (double)rows);
}

/* ---- lengths ----------------------------------------------------------------------------- */

typedef struct {
    float a;
    int32_t flat;   /* r * max_draft + j */
} Candidate;

struct DiSpecSched {
    int32_t max_requests, max_draft;
    Candidate *cand;   /* [max_requests * max_draft] */
    float *values;     /* [max_requests * max_draft]: stale survivals, sorted */
};

DiSpecSched *di_spec_sched_create(int32_t max_requests, int32_t max_draft) {
    if (max_requests < 1 || max_draft < 1 || (int64_t)max_requests * max_draft > INT32_MAX) {
        di_errorf("spec scheduler: max_requests (%d) and max_draft (%d) must be >= 1 with a product below 2^31",
                  max_requests, max_draft);
        return NULL;
    }
    DiSpecSched *s = di_calloc(1, sizeof *s, "spec scheduler");
    if (!s) return NULL;
    size_t n = (size_t)max_requests * (size_t)max_draft;
    s->max_requests = max_requests;
    s->max_draft = max_draft;
    s->cand = di_calloc(n, sizeof *s->cand, "spec scheduler candidates");
    s->values = di_calloc(n, sizeof *s->values, "spec scheduler stale survivals");
    if (!s->cand || !s->values) {
        di_spec_sched_destroy(s);
        return NULL;
    }
    return s;
}

void di_spec_sched_destroy(DiSpecSched *s) {
    if (!s) return;
    free(s->cand);
    free(s->values);
    free(s);
}

static int check_drafts(const DiSpecSched *s, const DiSpecDrafts *d, const int32_t *lengths) {
    if (!s || !d || !lengths || !d->survival) return di_errorf("spec scheduler: NULL argument");
    if (d->n_requests < 1 || d->n_requests > s->max_requests)
        return di_errorf("spec scheduler: n_requests must be in [1, %d], got %d", s->max_requests, d->n_requests);
    if (d->max_draft < 1 || d->max_draft > s->max_draft)
        return di_errorf("spec scheduler: max_draft must be in [1, %d], got %d", s->max_draft, d->max_draft);
    for (int32_t r = 0; r < d->n_requests; r++) {
        if (d->caps && d->caps[r] < 0) return di_errorf("spec scheduler: caps[%d] = %d < 0", r, d->caps[r]);
        const float *a = d->survival + (size_t)r * (size_t)d->max_draft;
        for (int32_t j = 0; j < d->max_draft; j++) {
            if (!(a[j] >= 0.0f && a[j] <= 1.0f))
                return di_errorf("spec scheduler: survival[%d][%d] = %g is outside [0, 1]", r, j, a[j]);
            if (j > 0 && a[j] > a[j - 1])
                return di_errorf("spec scheduler: survival of request %d rises at draft %d (%g > %g)", r, j, a[j],
                                 a[j - 1]);
        }
    }
    return 0;
}

static int check_step(const DiSpecStepCost *step, int32_t n_requests) {
    if (!step || !step->cost) return di_errorf("spec scheduler: NULL step cost");
    if (step->required_rows < n_requests)
        return di_errorf("spec scheduler: required_rows (%lld) must be >= the %d requests",
                         (long long)step->required_rows, n_requests);
    if (!(step->draft_seconds >= 0) || !isfinite(step->draft_seconds))
        return di_errorf("spec scheduler: draft_seconds must be finite and >= 0, got %g", step->draft_seconds);
    return 0;
}

static int by_survival(const void *pa, const void *pb) {
    const Candidate *a = pa, *b = pb;
    if (a->a != b->a) return a->a > b->a ? -1 : 1;
    return (a->flat > b->flat) - (a->flat < b->flat);
}

/* Every (r, j) with a > 0 and j < cap, best first; returns how many. */
static int64_t rank_candidates(DiSpecSched *s, const DiSpecDrafts *d) {
    int64_t n = 0;
    for (int32_t r = 0; r < d->n_requests; r++) {
        int32_t limit = d->caps && d->caps[r] < d->max_draft ? d->caps[r] : d->max_draft;
        const float *a = d->survival + (size_t)r * (size_t)d->max_draft;
        for (int32_t j = 0; j < limit && a[j] > 0; j++)
            s->cand[n++] = (Candidate){a[j], r * d->max_draft + j};
    }
    qsort(s->cand, (size_t)n, sizeof *s->cand, by_survival);
    return n;
}

/* Throughput of a step verifying b drafts with expected `accepted` of them accepted; `drafted`:
 * the step pays the drafter. */
static double throughput(const Curve *c, const DiSpecStepCost *step, int32_t n_requests, int64_t b, double accepted,
                         bool drafted) {
    double seconds = curve_at(c, (double)(step->required_rows + b)) + (drafted ? step->draft_seconds : 0.0);
    return ((double)n_requests + accepted) / seconds;
}

/* Admission of a ranked candidate: its request's length becomes j + 1 (a prefix, by the order). */
static void admit_one(const DiSpecDrafts *d, const Candidate *c, int32_t *lengths) {
    lengths[c->flat / d->max_draft] = c->flat % d->max_draft + 1;
}

int64_t di_spec_schedule_exact(DiSpecSched *s, const DiSpecDrafts *d, const DiSpecStepCost *step, int32_t *lengths) {
    if (check_drafts(s, d, lengths) != 0 || check_step(step, d->n_requests) != 0) return -1;
    Curve curve;
    if (curve_load(&curve, step->cost) != 0) return -1;
    memset(lengths, 0, (size_t)d->n_requests * sizeof *lengths);
    int64_t n = rank_candidates(s, d), admitted = 0;
    /* the drafts exist: the drafter ran whatever is chosen now */
    double accepted = 0, best = throughput(&curve, step, d->n_requests, 0, 0, true);
    for (int64_t i = 0; i < n; i++) {
        double theta = throughput(&curve, step, d->n_requests, admitted + 1, accepted + s->cand[i].a, true);
        if (!(theta > best)) break; /* the early stop: later candidates may depend on this draft */
        best = theta;
        accepted += s->cand[i].a;
        admitted++;
        admit_one(d, &s->cand[i], lengths);
    }
    return admitted;
}

static int by_value_desc(const void *pa, const void *pb) {
    float a = *(const float *)pa, b = *(const float *)pb;
    return (a < b) - (a > b);
}

int64_t di_spec_budget(DiSpecSched *s, int32_t n_requests, const DiSpecStepCost *step, const float *stale, int64_t n,
                       double keep_frac) {
    if (!s || (!stale && n > 0)) return di_errorf("spec budget: NULL argument");
    if (n_requests < 1) return di_errorf("spec budget: n_requests must be >= 1, got %d", n_requests);
    if (check_step(step, n_requests) != 0) return -1;
    int64_t cap = (int64_t)s->max_requests * s->max_draft;
    if (n < 0 || n > cap)
        return di_errorf("spec budget: %lld stale survivals, expected [0, %lld]", (long long)n, (long long)cap);
    if (!(keep_frac > 0 && keep_frac <= 1))
        return di_errorf("spec budget: keep_frac must be in (0, 1], got %g", keep_frac);
    for (int64_t i = 0; i < n; i++)
        if (!(stale[i] >= 0.0f && stale[i] <= 1.0f))
            return di_errorf("spec budget: stale survival %lld = %g is outside [0, 1]", (long long)i, stale[i]);
    Curve curve;
    if (curve_load(&curve, step->cost) != 0) return -1;
    memcpy(s->values, stale, (size_t)n * sizeof *stale);
    qsort(s->values, (size_t)n, sizeof *s->values, by_value_desc);
    int64_t keep = (int64_t)ceil(keep_frac * (double)n);
    keep = keep > n ? n : keep;
    int64_t best_b = 0;
    double best = throughput(&curve, step, n_requests, 0, 0, false), accepted = 0; /* 0: no drafter run */
    for (int64_t b = 1; b <= keep; b++) { /* every b: stale data cannot depend on this step's drafts */
        accepted += s->values[b - 1];
        double theta = throughput(&curve, step, n_requests, b, accepted, true);
        if (theta > best) {
            best = theta;
            best_b = b;
        }
    }
    return best_b;
}

int64_t di_spec_admit(DiSpecSched *s, const DiSpecDrafts *d, int64_t budget, int32_t *lengths) {
    if (check_drafts(s, d, lengths) != 0) return -1;
    if (budget < 0) return di_errorf("spec admit: budget must be >= 0, got %lld", (long long)budget);
    memset(lengths, 0, (size_t)d->n_requests * sizeof *lengths);
    int64_t n = rank_candidates(s, d);
    int64_t take = budget < n ? budget : n;
    for (int64_t i = 0; i < take; i++) admit_one(d, &s->cand[i], lengths);
    return take;
}

int di_spec_fixed_lengths(int32_t n_requests, int32_t length, const int32_t *caps, int32_t *lengths) {
    if (!lengths || n_requests < 0) return di_errorf("spec fixed lengths: NULL lengths or n_requests < 0");
    if (length < 0) return di_errorf("spec fixed lengths: length must be >= 0, got %d", length);
    for (int32_t r = 0; r < n_requests; r++) {
        if (caps && caps[r] < 0) return di_errorf("spec fixed lengths: caps[%d] = %d < 0", r, caps[r]);
        lengths[r] = caps && caps[r] < length ? caps[r] : length;
    }
    return 0;
}
