/* sim.h — discrete-event simulation of a prefill/decode-disaggregated cluster (serving.md §5.5,
 * §6.4, §7.3, §8.4, §11 layer 2), replaying a request trace through the control plane:
 *
 *   arrival -> prefix-cache lookup (prefix_cache.h) -> prefill queue (per tier with instance
 *   quotas, prefill_lb.h; or a single FIFO; or round robin) -> chunked prefill on EP instances
 *   whose ranks step together, chunks from the cost model (prefill_cost.h) -> decode rank chosen
 *   (decode_lb.h) -> KV transfer -> decode in one wide EP group
 *   stepping at the pace of its slowest rank -> done.
 *
 * Step times come from the cost models, not from running a model; expert loads from
 * moe_load.h.  Everything random is drawn from the seeded generator (rng.h), so a run is a pure
 * function of (trace, config).  Times are simulated seconds. */
#ifndef DI_CLUSTER_SIM_SIM_H
#define DI_CLUSTER_SIM_SIM_H

#include "cluster/decode_lb.h"
#include "cluster/prefill_cost.h"
#include "cluster/prefill_lb.h"
#include "cluster/sim/moe_load.h"
#include "cluster/sim/trace.h"

#include <stddef.h>
#include <stdint.h>

typedef enum {
    DI_SIM_PREFILL_TIERED = 0, /* four tiers, instance quotas, cost-model chunks (§6.2-6.3) */
    DI_SIM_PREFILL_FIFO,       /* one FIFO queue for all instances, same chunk solver */
    DI_SIM_PREFILL_ROUND_ROBIN /* requests dealt to ranks in turn, fixed-size chunks */
} DiSimPrefillPolicy;

typedef struct {
    int prefill_instances, prefill_ranks; /* EP groups x ranks per group */
    int decode_ranks;                     /* one wide EP group */
    double speedup;                       /* trace time is divided by this (load multiplier) */
    size_t cache_blocks;                  /* prefix-cache capacity, 512-token blocks */
    DiPrefillCost prefill_cost;           /* per rank, ns: the "hardware"; the scheduler fits its own
                                             model from profiled step times (§6.3 "Fit") */
    double profile_noise;                 /* relative jitter of the profiled step times */
    DiDecodeCost decode_cost;             /* per rank, ns */
    double tier_budget_ms[DI_PREFILL_TIERS]; /* step budget T of an instance serving tier t */
    double fifo_budget_ms;                /* T of the single-FIFO baseline */
    double tier_slo_ms[DI_PREFILL_TIERS]; /* TTFT objective per tier: instances pull from the queue
                                             whose head is latest relative to it (sim.c pick_tier) */
    double jump_slowdown;                 /* tiered: shorter work overtakes a longer request on its rank
                                             only up to this fraction of the longer one's cost */
    int64_t rr_chunk_tokens;              /* fixed chunk of the round-robin baseline */
    int64_t token_cap;                    /* per rank per step */
    DiChunkRules chunk;
    int quota_min[DI_PREFILL_TIERS];
    double quota_period_s;
    double kv_bytes_per_token, transfer_gb_per_s; /* P -> D KV shipping */
    int decode_lookahead, decode_max_requests;
    int64_t decode_max_kv_tokens;
    int moe_layers;                       /* 0 disables the expert-load model */
    int moe_experts, moe_top_k;
    double moe_skew, moe_drift_tau_s;
    uint64_t seed;
    DiSimPrefillPolicy prefill_policy;
    DiDecodeLbPolicy decode_policy;
} DiSimConfig;

/* The deployment of serving.md §2.1 (64 prefill GPUs as 8 EP8 instances, 64 decode GPUs as one
 * EP64 group) with assumed, documented cost coefficients (see sim.c). */
void di_sim_config_default(DiSimConfig *cfg);

typedef struct {
    double p50, p90, p99, mean;
    size_t n;
} DiSimPercentiles;

typedef struct {
    size_t completed, rejected;
    DiSimPercentiles ttft_s[DI_PREFILL_TIERS], ttft_all_s, tpot_s;
    double tier_hit_rate[DI_PREFILL_TIERS], hit_rate; /* cached / input tokens */
    double prefill_imbalance;            /* sum over instance steps of max / sum of mean rank cost */
    double decode_imbalance;             /* sum over steps of max / sum of mean t_g */
    DiSimPercentiles decode_step_imbalance; /* per-step max/mean distribution */
    double makespan_s, input_tokens_per_s, output_tokens_per_s;
    int64_t prefill_steps, decode_steps, quota_moves, prefill_tokens_computed;
    int has_moe;
    DiSimMoeReport moe_prefill, moe_decode;
    DiPrefillCost fitted_prefill_cost;   /* what the scheduler planned with */
    double prefill_correction;           /* final measured / predicted step-time factor */
} DiSimResult;

int di_sim_run(const DiSimTrace *trace, const DiSimConfig *cfg, DiSimResult *out);

const char *di_sim_prefill_policy_name(DiSimPrefillPolicy p);

#endif
