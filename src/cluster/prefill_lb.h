/* prefill_lb.h — prefill load balancer: context-length tiers and their instance quotas
 * (serving.md §6.2).
 *
 * A request's tier is set by its total context n = cached + new tokens: T0 < 16K <= T1 < 64K <=
 * T2 < 256K <= T3 (K = 1024).  Requests of one tier have similar attention cost per token, so the
 * ranks of one prefill instance can be equalised to one step budget (prefill_cost.h), and long
 * requests cannot starve short ones.  Each tier owns a quota of prefill instances; every period
 * the quota controller moves instances toward the tiers' demand:
 *   D_t  = queued predicted cost of tier t + EWMA arrival rate x mean cost x horizon,
 *   Q*_t = max(Qmin_t, R x D_t / sum D), rescaled above the floors so that sum Q*_t = R,
 * moving each tier by at most one instance per period (hysteresis).  Which queued request an
 * instance takes each step (its own tier first, lending when idle, rescuing requests late for
 * their tier's TTFT objective) is decided per step by the scheduler: see src/cluster/sim/sim.c.
 *
 * The tier function and the quota controller are public (include/deepinfer_cluster.h);
 * this header adds the target computation, exposed for tests. */
#ifndef DI_CLUSTER_PREFILL_LB_H
#define DI_CLUSTER_PREFILL_LB_H

#include "deepinfer_cluster.h"

/* Integer targets: Q*_t from demands (exposed for tests).  All-zero demand keeps the floors and
 * gives the rest to tier 0. */
int di_prefill_quota_targets(const DiPrefillQuotaConfig *cfg, const double demand[DI_PREFILL_TIERS],
                             int target[DI_PREFILL_TIERS]);

#endif
