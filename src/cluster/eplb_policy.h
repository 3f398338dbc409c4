/* eplb_policy.h — the dynamic EPLB policy around the planner (serving.md §8.2, §8.3).
 *
 * Expert loads are recorded every step; every `period_steps` steps a new plan is computed from
 * the loads of the last `window_steps` steps, and all ranks switch to it at that step (§8.2
 * "Applying a new plan").  The very first plan comes after a warm-up (the first window unless
 * warmup_steps is set), since the start plan assumes uniform load.  The deployments of §2.1 are presets: prefill 4 redundant experts per
 * GPU, 100-step window, every 1,000 steps; decode 1 redundant per GPU, 1,000-step window, every
 * 10,000 steps.  Each recorded step is scored with moe_lb = max/mean per-GPU load under the plan
 * in force (§8.3), aggregated as sum(max)/sum(mean). */
#ifndef DI_CLUSTER_EPLB_POLICY_H
#define DI_CLUSTER_EPLB_POLICY_H

#include "deepinfer_cluster.h"

#include <stdint.h>

typedef struct {
    int num_layers, num_logical; /* L, E */
    int num_groups, num_nodes, num_gpus;
    int redundant_per_gpu; /* R = E + redundant_per_gpu * num_gpus */
    int window_steps;      /* loads summed over this many steps before each replan */
    int period_steps;      /* replan every this many steps; must be >= window_steps */
    int warmup_steps;      /* the first plan (replacing the uniform start plan) comes after this
                              many steps, from their loads, and a second one after window_steps
                              (from the steps since); 0 = only the plan after window_steps */
} DiEplbPolicyConfig;

typedef enum { DI_EPLB_PREFILL = 0, DI_EPLB_DECODE = 1 } DiEplbPhase;

/* The §2.1 window/period/redundancy for a phase, on a given model and cluster shape. */
DiEplbPolicyConfig di_eplb_policy_preset(DiEplbPhase phase, int num_layers, int num_logical, int num_groups,
                                         int num_nodes, int num_gpus);

typedef struct {
    int64_t steps;        /* recorded steps */
    int64_t replans;      /* plans computed after the initial one */
    int64_t moved_slots;  /* slots whose expert changed, summed over replans (weight migrations) */
    double sum_max, sum_mean; /* per (step, layer) per-GPU load, for the aggregate moe_lb */
    double last_step_moe_lb;  /* of the latest recorded step (1.0 when it had no load) */
} DiEplbPolicyStats;

typedef struct DiEplbPolicy DiEplbPolicy;

/* Starts with the plan for uniform load.  NULL (with error) on a bad config. */
DiEplbPolicy *di_eplb_policy_create(const DiEplbPolicyConfig *cfg);
void di_eplb_policy_destroy(DiEplbPolicy *policy);

/* Record one step's load[L][E] (tokens routed to each logical expert, >= 0): scores it under the
 * current plan, adds it to the window when the window is open, and replans at period ends.
 * *replanned (may be NULL) says whether this step produced a new plan. */
int di_eplb_policy_record(DiEplbPolicy *policy, const float *load, int *replanned);

const DiEplbPlan *di_eplb_policy_plan(const DiEplbPolicy *policy);
DiEplbPolicyStats di_eplb_policy_stats(const DiEplbPolicy *policy);
/* The latest recorded step's per-layer max and mean per-GPU load under the plan it was scored
 * with (the two terms of its moe_lb, §8.3): [num_layers] arrays owned by the policy, valid until
 * the next record; all zero before any.  -1 on a NULL argument. */
int di_eplb_policy_last_step(const DiEplbPolicy *policy, const double **max, const double **mean);
/* Aggregate moe_lb so far: sum(max) / sum(mean) over recorded (step, layer); 1.0 before any load. */
double di_eplb_policy_moe_lb(const DiEplbPolicy *policy);

#endif
