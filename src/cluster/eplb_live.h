/* eplb_live.h — the live EPLB driver of a running engine (serving.md §8.2 wiring, §8.3 moe_lb).
 *
 * The engine counts the routed (token, expert) pairs of every step (engine.h
 * di_engine_set_expert_load_observer); the driver feeds each step's counts into a DiEplbPolicy,
 * which replans on its window/period schedule, and hands every new plan to an apply callback at
 * that step boundary: the expert-parallel runtime's di_ep_apply_plan (deepinfer_ep.h) when the
 * experts are spread over MPI ranks, none in a single process, where the plan is computed for
 * `num_gpus` virtual ranks so moe_lb is observable without MPI.
 *
 * It also keeps what /metrics reports: moe_lb per layer and in aggregate over the last
 * window_steps steps, under the plan in force at each step (sum of max / sum of mean per-rank
 * load, §8.3), the same for the identity placement (expert e on rank e / (E / P), no replicas:
 * what the ranks would see without EPLB), replans and moved slots.  The engine's thread records,
 * the server's threads read: one mutex.
 *
 * It lives in libdeepinfer_cluster.a beside the policy: the engine library never links it. */
#ifndef DI_CLUSTER_EPLB_LIVE_H
#define DI_CLUSTER_EPLB_LIVE_H

#include "cluster/eplb_policy.h"
#include "recipe/api_buf.h"

#include <stdint.h>

/* Switch the experts to `plan` (copied by the callee if kept); 0, or -1 with the cause. */
typedef int (*DiEplbApplyFn)(void *user, const DiEplbPlan *plan);

typedef struct {
    DiEplbPolicyConfig policy; /* its num_gpus: the expert ranks (virtual ones without EP) */
    DiEplbApplyFn apply;       /* NULL: plans are only scored (no expert parallelism) */
    void *apply_user;
} DiEplbLiveConfig;

typedef struct {
    int64_t steps, replans, moved_slots, apply_failures;
    double moe_lb;          /* aggregate over the window, plan in force (1.0 without load) */
    double moe_lb_identity; /* the same loads on the identity placement */
    double moe_lb_total;    /* aggregate since the start (di_eplb_policy_moe_lb) */
} DiEplbLiveStats;

typedef struct DiEplbLive DiEplbLive;

/* NULL with an error on a bad config (di_eplb_policy_create's checks). */
DiEplbLive *di_eplb_live_create(const DiEplbLiveConfig *cfg);
void di_eplb_live_destroy(DiEplbLive *live);

/* One engine step's routed pairs tokens[layers][experts] (the config's shape, each >= 0).  On a
 * new plan, apply is called before this returns.  -1 with the cause on bad input or a failed
 * replan; a failed apply is counted (apply_failures), logged and returned as -1 too. */
int di_eplb_live_record(DiEplbLive *live, const int64_t *tokens, int layers, int experts);

/* Counters and window aggregates; per_layer (may be NULL) receives [layers] window moe_lb. */
int di_eplb_live_stats(DiEplbLive *live, DiEplbLiveStats *out, double *per_layer);

/* The Prometheus text of the stats (deepinfer_moe_lb{layer="l"}, its p50 / p99 over the layers,
 * deepinfer_moe_lb_aggregate, deepinfer_moe_lb_identity, deepinfer_eplb_replans_total, ...),
 * appended to out. */
int di_eplb_live_metrics(DiEplbLive *live, DiApiBuf *out);

#endif
