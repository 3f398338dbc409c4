/* spec_sts.c — the online STS calibration of spec_sts.h: histograms, grid fit, pooled shrinkage. */
#include "engine/spec_sts.h"

#include "base/error.h"

#include <math.h>
#include <string.h>

#define LOGIT_LO (-8.0)
#define LOGIT_HI 8.0
#define BIN_WIDTH ((LOGIT_HI - LOGIT_LO) / DI_SPEC_STS_BINS)

double di_spec_sts_grid(int i) {
    return pow(8.0, (double)(i - (DI_SPEC_STS_GRID - 1) / 2) / ((DI_SPEC_STS_GRID - 1) / 2));
}

int di_spec_sts_init(DiSpecSts *sts, int32_t n_positions) {
    if (!sts) return di_errorf("spec sts: NULL state");
    if (n_positions < 1 || n_positions > DI_SPEC_STS_MAX_POSITIONS)
        return di_errorf("spec sts: positions must be in [1, %d], got %d", DI_SPEC_STS_MAX_POSITIONS, n_positions);
    memset(sts, 0, sizeof *sts);
    sts->n_positions = n_positions;
    for (int k = 0; k < DI_SPEC_STS_MAX_POSITIONS; k++) sts->temps[k] = 1.0f;
    for (int i = 0; i < DI_SPEC_STS_GRID; i++) {
        double temp = di_spec_sts_grid(i);
        for (int b = 0; b < DI_SPEC_STS_BINS; b++) {
            double mid = LOGIT_LO + (b + 0.5) * BIN_WIDTH;
            sts->curve[i][b] = 1.0 / (1.0 + exp(-mid / temp));
        }
    }
    return 0;
}

static int bin_of(float z) {
    double b = floor(((double)z - LOGIT_LO) / BIN_WIDTH);
    return b < 0 ? 0 : b >= DI_SPEC_STS_BINS ? DI_SPEC_STS_BINS - 1 : (int)b;
}

int di_spec_sts_observe(DiSpecSts *sts, const float *logits, int32_t n_drafted, int32_t verified, int32_t accepted) {
    if (!sts || (!logits && n_drafted > 0)) return di_errorf("spec sts: NULL argument");
    if (n_drafted < 0 || n_drafted > sts->n_positions)
        return di_errorf("spec sts: n_drafted must be in [0, %d], got %d", sts->n_positions, n_drafted);
    if (verified < 0 || verified > n_drafted)
        return di_errorf("spec sts: verified must be in [0, n_drafted = %d], got %d", n_drafted, verified);
    if (accepted < 0 || accepted > verified)
        return di_errorf("spec sts: accepted must be in [0, verified = %d], got %d", verified, accepted);
    int32_t trials = accepted + 1 < verified ? accepted + 1 : verified;
    for (int32_t k = 0; k < trials; k++)
        if (isnan(logits[k])) return di_errorf("spec sts: confidence logit %d is NaN", k);
    for (int32_t k = 0; k < trials; k++) {
        double *t = sts->trials[k], *h = sts->hits[k];
        for (int b = 0; b < DI_SPEC_STS_BINS; b++) {
            t[b] *= DI_SPEC_STS_DECAY;
            h[b] *= DI_SPEC_STS_DECAY;
        }
        int b = bin_of(logits[k]);
        t[b] += 1.0;
        h[b] += k < accepted ? 1.0 : 0.0;
    }
    return 0;
}


/* The grid index minimising sum_b |trials_b * sigmoid(mid_b / T) - hits_b| (the trial-weighted
 * calibration error), ties to the lower T; -1 without trials. */
static int fit(const DiSpecSts *sts, const double *trials, const double *hits) {
    double n = 0;
    for (int b = 0; b < DI_SPEC_STS_BINS; b++) n += trials[b];
    if (!(n > 0)) return -1;
    int best = 0;
    double best_err = INFINITY;
    for (int i = 0; i < DI_SPEC_STS_GRID; i++) {
        double err = 0;
        for (int b = 0; b < DI_SPEC_STS_BINS; b++) err += fabs(trials[b] * sts->curve[i][b] - hits[b]);
        if (err < best_err) {
            best_err = err;
            best = i;
        }
    }
    return best;
}

int di_spec_sts_refit(DiSpecSts *sts) {
    if (!sts) return di_errorf("spec sts: NULL state");
    if (sts->n_positions < 1 || sts->n_positions > DI_SPEC_STS_MAX_POSITIONS)
        return di_errorf("spec sts: state not initialised (%d positions)", sts->n_positions);
    double pool_t[DI_SPEC_STS_BINS] = {0}, pool_h[DI_SPEC_STS_BINS] = {0};
    for (int k = 0; k < sts->n_positions; k++)
        for (int b = 0; b < DI_SPEC_STS_BINS; b++) {
            pool_t[b] += sts->trials[k][b];
            pool_h[b] += sts->hits[k][b];
        }
    int pooled = fit(sts, pool_t, pool_h);
    double log_pool = pooled < 0 ? 0.0 : log(di_spec_sts_grid(pooled));
    for (int k = 0; k < sts->n_positions; k++) {
        double n = 0;
        for (int b = 0; b < DI_SPEC_STS_BINS; b++) n += sts->trials[k][b];
        int own = fit(sts, sts->trials[k], sts->hits[k]);
        double w = own < 0 ? 0.0 : n / (n + DI_SPEC_STS_SHRINK);
        double log_own = own < 0 ? 0.0 : log(di_spec_sts_grid(own));
        sts->temps[k] = (float)exp(w * log_own + (1.0 - w) * log_pool);
    }
    return 0;
}
