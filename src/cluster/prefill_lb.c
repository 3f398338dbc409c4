/* prefill_lb.c — context tiers and the instance-quota controller (serving.md §6.2; see
 * prefill_lb.h). */
#include "cluster/prefill_lb.h"

#include "base/error.h"

#include <math.h>
#include <string.h>

int di_prefill_tier(int64_t n) {
    if (n < 0) return di_errorf("prefill tier: negative context length %lld", (long long)n);
    if (n < DI_PREFILL_TIER1_MIN) return 0;
    if (n < DI_PREFILL_TIER2_MIN) return 1;
    if (n < DI_PREFILL_TIER3_MIN) return 2;
    return 3;
}

static int check_config(const DiPrefillQuotaConfig *c) {
    if (c->num_instances <= 0) return di_errorf("prefill quota: num_instances must be positive, got %d", c->num_instances);
    int floors = 0;
    for (int t = 0; t < DI_PREFILL_TIERS; t++) {
        if (c->min_quota[t] < 0) return di_errorf("prefill quota: min_quota[%d] is negative", t);
        floors += c->min_quota[t];
    }
    if (floors > c->num_instances)
        return di_errorf("prefill quota: the floors (%d instances) exceed the %d instances", floors, c->num_instances);
    if (!(c->ewma_alpha > 0.0 && c->ewma_alpha <= 1.0))
        return di_errorf("prefill quota: ewma_alpha must be in (0, 1], got %g", c->ewma_alpha);
    if (!(c->horizon_s >= 0.0) || !isfinite(c->horizon_s))
        return di_errorf("prefill quota: horizon_s must be finite and >= 0, got %g", c->horizon_s);
    return 0;
}

/* Largest-remainder rounding of share[t] (summing to `total`) to integers summing to `total`. */
static void round_shares(const double share[DI_PREFILL_TIERS], int total, int out[DI_PREFILL_TIERS]) {
    int used = 0;
    double frac[DI_PREFILL_TIERS];
    for (int t = 0; t < DI_PREFILL_TIERS; t++) {
        out[t] = (int)floor(share[t]);
        frac[t] = share[t] - out[t];
        used += out[t];
    }
    while (used < total) { /* ties: the shorter tier first */
        int best = 0;
        for (int t = 1; t < DI_PREFILL_TIERS; t++)
            if (frac[t] > frac[best]) best = t;
        out[best]++;
        frac[best] = -1.0;
        used++;
    }
}

int di_prefill_quota_targets(const DiPrefillQuotaConfig *cfg, const double demand[DI_PREFILL_TIERS],
                             int target[DI_PREFILL_TIERS]) {
    if (!cfg || !demand || !target) return di_errorf("prefill quota: NULL argument");
    if (check_config(cfg) != 0) return -1;
    double total = 0.0;
    for (int t = 0; t < DI_PREFILL_TIERS; t++) {
        if (!(demand[t] >= 0.0) || !isfinite(demand[t]))
            return di_errorf("prefill quota: demand[%d] = %g must be finite and >= 0", t, demand[t]);
        total += demand[t];
    }
    int R = cfg->num_instances, floors = 0;
    for (int t = 0; t < DI_PREFILL_TIERS; t++) floors += cfg->min_quota[t];
    if (total == 0.0) {
        memcpy(target, cfg->min_quota, sizeof cfg->min_quota);
        target[0] += R - floors;
        return 0;
    }
    /* Tiers whose proportional share falls below their floor are pinned to it; the rest share
     * what is left in proportion to demand (iterate: pinning one can push another below). */
    int pinned[DI_PREFILL_TIERS] = {0};
    double share[DI_PREFILL_TIERS];
    for (int round = 0; round < DI_PREFILL_TIERS + 1; round++) {
        double free_demand = 0.0, free_instances = R;
        for (int t = 0; t < DI_PREFILL_TIERS; t++) {
            if (pinned[t]) free_instances -= cfg->min_quota[t];
            else free_demand += demand[t];
        }
        int changed = 0;
        for (int t = 0; t < DI_PREFILL_TIERS; t++) {
            if (pinned[t]) {
                share[t] = cfg->min_quota[t];
                continue;
            }
            share[t] = free_demand > 0.0 ? free_instances * demand[t] / free_demand : 0.0;
            if (share[t] < cfg->min_quota[t]) {
                pinned[t] = 1;
                changed = 1;
            }
        }
        if (!changed) break;
    }
    round_shares(share, R, target);
    return 0;
}

int di_prefill_quota_init(DiPrefillQuota *q, const DiPrefillQuotaConfig *cfg) {
    if (!q || !cfg) return di_errorf("prefill quota: NULL argument");
    memset(q, 0, sizeof *q);
    if (check_config(cfg) != 0) return -1;
    q->cfg = *cfg;
    const double start[DI_PREFILL_TIERS] = {4, 2, 1, 1};
    if (di_prefill_quota_targets(cfg, start, q->quota) != 0) return -1;
    memcpy(q->target, q->quota, sizeof q->quota);
    return 0;
}

int di_prefill_quota_update(DiPrefillQuota *q, const double queued_cost_ns[DI_PREFILL_TIERS],
                            const double arrivals[DI_PREFILL_TIERS], const double mean_cost_ns[DI_PREFILL_TIERS],
                            double dt_s) {
    if (!q || !queued_cost_ns || !arrivals || !mean_cost_ns) return di_errorf("prefill quota: NULL argument");
    if (!(dt_s > 0.0) || !isfinite(dt_s)) return di_errorf("prefill quota: period must be positive, got %g", dt_s);
    double demand[DI_PREFILL_TIERS];
    for (int t = 0; t < DI_PREFILL_TIERS; t++) {
        if (!(arrivals[t] >= 0.0) || !(mean_cost_ns[t] >= 0.0) || !(queued_cost_ns[t] >= 0.0))
            return di_errorf("prefill quota: tier %d statistics must be >= 0", t);
        double r = arrivals[t] / dt_s;
        q->rate[t] = q->started ? q->cfg.ewma_alpha * r + (1.0 - q->cfg.ewma_alpha) * q->rate[t] : r;
        demand[t] = queued_cost_ns[t] + q->rate[t] * mean_cost_ns[t] * q->cfg.horizon_s;
    }
    q->started = 1;
    if (di_prefill_quota_targets(&q->cfg, demand, q->target) != 0) return -1;
    /* Hysteresis: each tier gains or loses at most one instance per period.  Pair the largest
     * deficit with the largest surplus until none is left among the tiers not yet moved. */
    int moved[DI_PREFILL_TIERS] = {0};
    for (;;) {
        int need = -1, give = -1;
        for (int t = 0; t < DI_PREFILL_TIERS; t++) {
            if (moved[t]) continue;
            int diff = q->target[t] - q->quota[t];
            if (diff > 0 && (need < 0 || diff > q->target[need] - q->quota[need])) need = t;
            if (diff < 0 && (give < 0 || -diff > q->quota[give] - q->target[give])) give = t;
        }
        if (need < 0 || give < 0) break;
        q->quota[need]++;
        q->quota[give]--;
        moved[need] = moved[give] = 1;
        q->moves++;
    }
    return 0;
}
