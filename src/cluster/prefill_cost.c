/* prefill_cost.c — fitted quadratic prefill cost model and closed-form chunk solver
 * (serving.md §6.3, §6.4; see prefill_cost.h). */
#include "cluster/prefill_cost.h"

#include "base/error.h"

#include <math.h>
#include <string.h>

double di_prefill_cost_request_ns(const DiPrefillCost *m, int64_t q, int64_t c) {
    if (!m) return NAN; /* a hot-path evaluator: NaN, not an error code, fails every comparison */
    double dq = (double)q, dc = (double)c;
    return m->a * dq * dq + m->b * dq * dc + m->d * dq + m->e * dc;
}

double di_prefill_cost_ns(const DiPrefillCost *m, int64_t q, int64_t c) {
    return m ? m->f + di_prefill_cost_request_ns(m, q, c) : NAN;
}

/* ---- least squares ---------------------------------------------------------------------- */

enum { NF = 5 }; /* features q², q·c, q, c, 1 -> a, b, d, e, f */

static void features(int64_t q, int64_t c, double x[NF]) {
    double dq = (double)q, dc = (double)c;
    x[0] = dq * dq;
    x[1] = dq * dc;
    x[2] = dq;
    x[3] = dc;
    x[4] = 1.0;
}

/* Solve the NF x NF system A z = y in place by Gaussian elimination with partial pivoting. */
static int solve(double A[NF][NF], double y[NF], double z[NF]) {
    double scale = 0.0;
    for (int i = 0; i < NF; i++)
        for (int j = 0; j < NF; j++) scale = fmax(scale, fabs(A[i][j]));
    for (int col = 0; col < NF; col++) {
        int piv = col;
        for (int r = col + 1; r < NF; r++)
            if (fabs(A[r][col]) > fabs(A[piv][col])) piv = r;
        if (!(fabs(A[piv][col]) > 1e-12 * scale)) return -1;
        if (piv != col) {
            for (int j = 0; j < NF; j++) {
                double t = A[col][j];
                A[col][j] = A[piv][j];
                A[piv][j] = t;
            }
            double t = y[col];
            y[col] = y[piv];
            y[piv] = t;
        }
        for (int r = col + 1; r < NF; r++) {
            double k = A[r][col] / A[col][col];
            for (int j = col; j < NF; j++) A[r][j] -= k * A[col][j];
            y[r] -= k * y[col];
        }
    }
    for (int i = NF - 1; i >= 0; i--) {
        double s = y[i];
        for (int j = i + 1; j < NF; j++) s -= A[i][j] * z[j];
        z[i] = s / A[i][i];
    }
    return 0;
}

int di_prefill_cost_fit(const int64_t *q, const int64_t *c, const double *ns, size_t n, int relative,
                        DiPrefillCost *out) {
    if (!q || !c || !ns || !out) return di_errorf("prefill cost fit: NULL argument");
    if (n < NF) return di_errorf("prefill cost fit: need at least %d samples, got %zu", NF, n);
    double colmax[NF] = {0};
    for (size_t i = 0; i < n; i++) {
        if (q[i] < 0 || c[i] < 0 || !isfinite(ns[i]) || ns[i] <= 0.0)
            return di_errorf("prefill cost fit: sample %zu (q=%lld, c=%lld, ns=%g) is not a valid measurement", i,
                             (long long)q[i], (long long)c[i], ns[i]);
        double x[NF];
        features(q[i], c[i], x);
        for (int j = 0; j < NF; j++) colmax[j] = fmax(colmax[j], fabs(x[j]));
    }
    for (int j = 0; j < NF; j++)
        if (colmax[j] == 0.0)
            return di_errorf("prefill cost fit: the samples cannot determine coefficient %d (vary q and c)", j);
    double A[NF][NF] = {{0}}, y[NF] = {0}, z[NF];
    for (size_t i = 0; i < n; i++) {
        double x[NF], wgt = relative ? 1.0 / (ns[i] * ns[i]) : 1.0;
        features(q[i], c[i], x);
        for (int j = 0; j < NF; j++) x[j] /= colmax[j];
        for (int j = 0; j < NF; j++) {
            for (int k = 0; k < NF; k++) A[j][k] += wgt * x[j] * x[k];
            y[j] += wgt * x[j] * ns[i];
        }
    }
    if (solve(A, y, z) != 0)
        return di_errorf("prefill cost fit: the (q, c) grid is degenerate (features are collinear); vary q and c independently");
    out->a = z[0] / colmax[0];
    out->b = z[1] / colmax[1];
    out->d = z[2] / colmax[2];
    out->e = z[3] / colmax[3];
    out->f = z[4] / colmax[4];
    return 0;
}

/* ---- chunk solving ---------------------------------------------------------------------- */

/* The real root of a q² + u q + v = 0 bounding {cost <= budget}, floored; v < 0 here. */
static double largest_q(const DiPrefillCost *m, int64_t c, double budget_ns) {
    double u = m->b * (double)c + m->d, v = m->e * (double)c - budget_ns;
    if (v > 0.0) return -1.0; /* reading the prefix alone exceeds the budget */
    if (m->a > 0.0) return floor((-u + sqrt(u * u - 4.0 * m->a * v)) / (2.0 * m->a));
    if (u > 0.0) return floor(-v / u);
    return INFINITY; /* cost does not grow with q */
}

int64_t di_prefill_chunk_solve(const DiPrefillCost *m, int64_t c, int64_t remaining, double budget_ns,
                               const DiChunkRules *rules) {
    if (!m || !rules) return di_errorf("chunk solver: NULL argument");
    if (c < 0 || remaining < 0 || rules->block <= 0 || rules->min_chunk < 0 || isnan(budget_ns))
        return di_errorf("chunk solver: bad arguments (c=%lld, remaining=%lld, block=%lld)", (long long)c,
                         (long long)remaining, (long long)rules->block);
    if (m->a < 0.0 || m->b < 0.0 || m->d < 0.0 || m->e < 0.0)
        return di_errorf("chunk solver: cost model has a negative coefficient; refit it");
    if (remaining == 0 || budget_ns <= 0.0) return 0;
    double qf = largest_q(m, c, budget_ns);
    if (qf < 0.0) return 0;
    int64_t q;
    if (qf >= (double)remaining) {
        q = remaining;
    } else {
        q = ((int64_t)qf / rules->block) * rules->block;
    }
    /* guard the square root's rounding: step down until the model agrees */
    while (q > 0 && di_prefill_cost_request_ns(m, q, c) > budget_ns)
        q = (q == remaining && q % rules->block) ? (q / rules->block) * rules->block : q - rules->block;
    if (q < 0) q = 0;
    /* and up, when the root was rounded low: the largest feasible chunk is wanted */
    while (q < remaining) {
        int64_t next = q + rules->block < remaining ? q + rules->block : remaining;
        if (di_prefill_cost_request_ns(m, next, c) > budget_ns) break;
        q = next;
    }
    if (q < remaining && q < rules->min_chunk) q = 0;
    return q;
}

double di_prefill_fill_step(const DiPrefillCost *m, const int64_t *c, const int64_t *remaining, size_t n,
                            double budget_ns, int64_t token_cap, const DiChunkRules *rules, int64_t *q) {
    if (!m || !rules || !q || (n > 0 && (!c || !remaining))) return di_errorf("fill step: NULL argument");
    if (token_cap <= 0) return di_errorf("fill step: token cap must be positive, got %lld", (long long)token_cap);
    double left = budget_ns - m->f, spent = 0.0;
    int64_t tokens = 0;
    for (size_t i = 0; i < n; i++) {
        q[i] = 0;
        if (left <= 0.0 || tokens >= token_cap) continue;
        int64_t want = remaining[i] < token_cap - tokens ? remaining[i] : token_cap - tokens;
        int64_t got = di_prefill_chunk_solve(m, c[i], want, left, rules);
        if (got < 0) return -1;
        if (got == 0) continue;
        double cost = di_prefill_cost_request_ns(m, got, c[i]);
        q[i] = got;
        tokens += got;
        left -= cost;
        spent += cost;
    }
    return tokens > 0 ? m->f + spent : 0.0;
}

/* ---- online correction ------------------------------------------------------------------ */

int di_prefill_correction_init(DiPrefillCorrection *c, double alpha) {
    if (!c) return di_errorf("prefill correction: NULL argument");
    if (!(alpha > 0.0 && alpha <= 1.0)) return di_errorf("prefill correction: alpha must be in (0, 1], got %g", alpha);
    c->factor = 1.0;
    c->alpha = alpha;
    c->steps = 0;
    return 0;
}

void di_prefill_correction_update(DiPrefillCorrection *c, double predicted_ns, double measured_ns) {
    if (!c || !(predicted_ns > 0.0) || !(measured_ns > 0.0) || !isfinite(predicted_ns) || !isfinite(measured_ns))
        return;
    c->factor = (1.0 - c->alpha) * c->factor + c->alpha * (measured_ns / predicted_ns);
    c->steps++;
}
