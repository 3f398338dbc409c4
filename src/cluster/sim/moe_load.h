/* moe_load.h — the simulator's model of routed-expert load, and EPLB running on it.
 *
 * Expert popularity per layer is log-normal (log-popularity ~ N(0, skew²)), drifting as an
 * Ornstein-Uhlenbeck process with correlation time drift_tau_s, so a plan computed from a past
 * window slowly goes stale — the reason EPLB replans periodically (serving.md §8.2).  A step with
 * T tokens sends T·top_k (token, expert) pairs; expert e of a layer receives
 * max(0, mu + sqrt(mu)·N(0,1)) with mu = T·top_k·p_e (the normal approximation of its binomial
 * count).  Each step is scored by three placements side by side:
 *   eplb      — the dynamic policy (eplb_policy.h) with the phase's redundancy/window/period;
 *   rearrange — the same window/period with no redundant slots (placement only);
 *   static    — no redundancy, the uniform-load placement, never replanned (the no-EPLB baseline).
 * To keep long replays fast, only every sample_every-th step is drawn and scored; the policies'
 * window and period are divided by the same factor, so a replan still sees the same span of
 * steps, and moe_lb is an unbiased sample of the per-step values. */
#ifndef DI_CLUSTER_SIM_MOE_LOAD_H
#define DI_CLUSTER_SIM_MOE_LOAD_H

#include "cluster/eplb_policy.h"

#include <stdint.h>

#define DI_SIM_MOE_BUCKETS 10

typedef struct {
    int layers;          /* simulated MoE layers (a sample of the model's; plans are per layer) */
    int experts, top_k;  /* V4.1-Flash: 384 routed, top-6 (model-v41.md) */
    int num_gpus, num_nodes, num_groups;
    double skew;         /* sigma of the log-popularity */
    double drift_tau_s;  /* correlation time of the popularity drift */
    DiEplbPhase phase;   /* prefill or decode presets (window, period, redundancy) */
    int sample_every;    /* score one step in this many (window and period shrink to match) */
    uint64_t seed;
} DiSimMoeConfig;

typedef struct {
    double eplb, rearrange, fixed;             /* aggregate moe_lb, sum(max)/sum(mean) */
    double eplb_expected;                      /* eplb placement scored on the expected loads, without
                                                  the per-step sampling noise: the balancer's own share */
    double noise_floor;                        /* a perfectly balanced placement under the same per-step
                                                  sampling noise: the part no placement removes */
    double eplb_bucket[DI_SIM_MOE_BUCKETS];    /* eplb moe_lb in each tenth of [first, last] scored
                                                  step time (0 when a tenth had no step) */
    double fixed_bucket[DI_SIM_MOE_BUCKETS];
    double first_s, last_s;                    /* the span the buckets divide */
    int64_t steps, replans, moved_slots;
} DiSimMoeReport;

typedef struct DiSimMoe DiSimMoe;

DiSimMoe *di_sim_moe_create(const DiSimMoeConfig *cfg);
void di_sim_moe_destroy(DiSimMoe *m);
/* One EP step at time now_s (non-decreasing) carrying `tokens` tokens. */
int di_sim_moe_step(DiSimMoe *m, double now_s, int64_t tokens);
DiSimMoeReport di_sim_moe_report(const DiSimMoe *m);

#endif
