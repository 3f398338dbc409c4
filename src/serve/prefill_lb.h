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
 * their tier's TTFT objective) is decided per step by the scheduler: see src/serve/sim/sim.c. */
#ifndef DI_SERVE_PREFILL_LB_H
#define DI_SERVE_PREFILL_LB_H

#include <stdint.h>

#define DI_PREFILL_TIERS 4

/* Tier bounds in tokens (§2.1 / §6.2: 16K, 64K, 256K). */
#define DI_PREFILL_TIER1_MIN (16 * 1024)
#define DI_PREFILL_TIER2_MIN (64 * 1024)
#define DI_PREFILL_TIER3_MIN (256 * 1024)

/* The tier (0..3) of a request with this total context; -1 (with error) when negative. */
int di_prefill_tier(int64_t context_tokens);

typedef struct {
    int num_instances;                 /* R */
    int min_quota[DI_PREFILL_TIERS];   /* Qmin_t; sum must be <= R */
    double ewma_alpha;                 /* weight of the newest period's arrival rate, (0, 1] */
    double horizon_s;                  /* look-ahead of the arrival term */
} DiPrefillQuotaConfig;

typedef struct {
    DiPrefillQuotaConfig cfg;
    int quota[DI_PREFILL_TIERS];       /* current instances per tier, sum = R */
    int target[DI_PREFILL_TIERS];      /* the last integer target Q*_t */
    double rate[DI_PREFILL_TIERS];     /* EWMA arrivals per second */
    int64_t moves;                     /* instances moved so far (quota oscillation metric) */
    int started;                       /* rate initialised from the first period */
} DiPrefillQuota;

/* Initial quotas: floors first, the rest spread in proportion 4:2:1:1 (short tiers first), an
 * arbitrary start the controller corrects within a few periods. */
int di_prefill_quota_init(DiPrefillQuota *q, const DiPrefillQuotaConfig *cfg);

/* One controller period of dt_s seconds: queued_cost_ns[t] = predicted remaining cost of tier t's
 * queue, arrivals[t] = requests that arrived in the period, mean_cost_ns[t] = mean predicted cost
 * of a tier-t request.  Updates rate, target and quota (at most +-1 per tier). */
int di_prefill_quota_update(DiPrefillQuota *q, const double queued_cost_ns[DI_PREFILL_TIERS],
                            const double arrivals[DI_PREFILL_TIERS], const double mean_cost_ns[DI_PREFILL_TIERS],
                            double dt_s);

/* Integer targets: Q*_t from demands (exposed for tests).  All-zero demand keeps the floors and
 * gives the rest to tier 0. */
int di_prefill_quota_targets(const DiPrefillQuotaConfig *cfg, const double demand[DI_PREFILL_TIERS],
                             int target[DI_PREFILL_TIERS]);

#endif
