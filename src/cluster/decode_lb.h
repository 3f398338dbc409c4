/* decode_lb.h — decode load balancer: which decode DP rank a request joins (serving.md §7.2).
 *
 * Decode runs as one wide EP group, so every step lasts as long as its slowest rank:
 * t_g = alpha + beta·n_g + gamma·K_g (n_g running requests, K_g their total KV tokens).  A
 * request is admitted to the rank minimising, with look-ahead H steps (no completions assumed,
 * the conservative start of §7.2):
 *   s_g = max( (n_g + 1) / N̄, (K_g + n_g·H + p + H) / K̄ )
 * with N̄, K̄ the per-rank means after admission, so the binding resource decides; ranks that
 * would exceed the request cap or the KV budget within H steps are not eligible; ties go to fewer
 * pending transfers, then the lower rank.  Batches are assigned longest prompt first (LPT).
 * A variant weighs the two resources by the fitted step-time model instead of by their means
 * (least predicted beta·n_g(H) + gamma·K_g(H) after admission).  Baselines for comparison: round
 * robin, request count only (vLLM-style), KV only.
 *
 * The balancer's types and entry points are public (include/deepinfer_cluster.h); this
 * header adds the step-time and imbalance metrics the simulator and tests use. */
#ifndef DI_CLUSTER_DECODE_LB_H
#define DI_CLUSTER_DECODE_LB_H

#include "deepinfer_cluster.h"

/* Predicted step time of a rank (NaN for NULL arguments), and max/mean over ranks (1.0 when all
 * are idle or cost is NULL). */
double di_decode_step_ns(const DiDecodeCost *cost, const DiDecodeRank *rank);
double di_decode_lb_imbalance(const DiDecodeLb *lb, const DiDecodeCost *cost, double *max_ns);

#endif
