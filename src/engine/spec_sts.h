/* spec_sts.h — online calibration of the DSpark confidence head (engine-features.md §1.3 j).
 *
 * The confidence head's raw logit z_k for draft position k is trained to predict the chance that
 * draft k survives verification given that drafts < k did, but a head is rarely calibrated on a
 * given workload: the scheduler (spec_sched.h) trades expected accepted tokens against step cost,
 * so miscalibration costs throughput.  STS (scaled temperature per position) fixes it with one
 * temperature T_k per position: c_k = sigmoid(z_k / T_k).
 *
 * Online, from the outcomes of verification: per position, decayed histograms (decay 0.999 per
 * observation of that position) over 16 bins of z spanning [-8, 8] (outside values go to the end
 * bins) of trials (position k was verified and every draft before it accepted:
 * k < min(accepted + 1, verified)) and hits (k < accepted).  A fit picks T from a 49-point log
 * grid over [1/8, 8] (8^((i - 24) / 24), so 1 and 2 are on it) minimising the trial-weighted
 * |sigmoid(bin_mid / T) - hits / trials|, ties to the lower T.  Each position's fit is shrunk
 * toward the fit of all positions pooled, in log T, with weight n / (n + 64) where n is the
 * position's decayed trial count; no data at all gives T = 1 (cold start).
 *
 * Pure host code; one instance for the engine, used from one thread. */
#ifndef DI_ENGINE_SPEC_STS_H
#define DI_ENGINE_SPEC_STS_H

#include <stdint.h>

#define DI_SPEC_STS_MAX_POSITIONS 16
#define DI_SPEC_STS_BINS 16
#define DI_SPEC_STS_GRID 49
#define DI_SPEC_STS_DECAY 0.999
#define DI_SPEC_STS_SHRINK 64.0

typedef struct {
    int32_t n_positions;
    double trials[DI_SPEC_STS_MAX_POSITIONS][DI_SPEC_STS_BINS];
    double hits[DI_SPEC_STS_MAX_POSITIONS][DI_SPEC_STS_BINS];
    float temps[DI_SPEC_STS_MAX_POSITIONS];   /* the current fit, read by the scheduler */
    double curve[DI_SPEC_STS_GRID][DI_SPEC_STS_BINS];  /* sigmoid(bin_mid / T_i), filled by init */
} DiSpecSts;

/* Empty histograms, every temperature 1; n_positions in [1, DI_SPEC_STS_MAX_POSITIONS] (the
 * draft block).  -1 on bad input. */
int di_spec_sts_init(DiSpecSts *sts, int32_t n_positions);

/* One request's outcome: logits[k] (k < n_drafted) were its drafts' raw confidence logits,
 * `verified` of them were verified (0 <= verified <= n_drafted <= n_positions) and `accepted`
 * (0 <= accepted <= verified) accepted.  Updates the histograms only; -1 on bad input (a NaN
 * logit included). */
int di_spec_sts_observe(DiSpecSts *sts, const float *logits, int32_t n_drafted, int32_t verified,
                        int32_t accepted);

/* Refit every temperature from the histograms (about 800 multiply-adds per position: once a
 * step is fine).  -1 on a NULL or uninitialised state. */
int di_spec_sts_refit(DiSpecSts *sts);

/* The grid value i (0 <= i < DI_SPEC_STS_GRID): 8^((i - 24) / 24). */
double di_spec_sts_grid(int i);

#endif
