/* deepinfer_cluster.h — the public C API of deepinfer's cluster planners: EPLB, the prefill
 * cost model, chunk solver and tier quotas, and the decode load balancer (serving.md §6-§8).
 *
 * They plan for a cluster of engines rather than run one, so they live in their own library,
 * build/libdeepinfer_cluster.a (src/cluster), which the tools that plan (`deepinfer sim`,
 * `deepinfer eplb`), their tests and benchmarks link beside build/libdeepinfer.a; the engine
 * library (libdeepinfer.{a,so}, include/deepinfer.h) does not depend on it.  Conventions are
 * deepinfer.h's: 0 or a value on success, -1 with di_last_error() naming the cause. */
#ifndef DEEPINFER_CLUSTER_H
#define DEEPINFER_CLUSTER_H

#include "deepinfer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* EPLB (serving.md §8.1, a port of deepseek-ai/EPLB eplb.py): a replication and placement plan
 * for the routed experts of every MoE layer.  Physical slot s of a layer lives on GPU
 * s / (num_replicas / num_gpus). */
typedef struct {
    int num_layers;    /* L */
    int num_logical;   /* E: logical (routed) experts per layer */
    int num_replicas;  /* R: physical expert slots per layer, a multiple of num_gpus */
    int num_gpus;      /* P */
    int max_replicas;  /* X: the largest replica count of any expert in any layer */
    int hierarchical;  /* 1: hierarchical policy (num_groups % num_nodes == 0), 0: global */
    int32_t *phy2log;  /* [L][R] logical expert held by each slot */
    int32_t *phy_rank; /* [L][R] which replica of its expert the slot holds (0-based) */
    int32_t *log2phy;  /* [L][E][X] the slots of each expert, -1 padded */
    int32_t *logcnt;   /* [L][E] replica count of each expert (>= 1) */
} DiEplbPlan;

/* Plan from weight[L][E] (estimated load of each expert, finite and >= 0).  Requires
 * E % num_groups == 0, num_gpus % num_nodes == 0, num_replicas % num_gpus == 0, R >= E, and for
 * the hierarchical policy num_groups % num_nodes == 0 (else the global policy is used).  On
 * success *out owns fresh arrays (free with di_eplb_plan_free); on failure *out is zeroed. */
int di_eplb_rebalance(const float *weight, int num_layers, int num_logical, int num_replicas,
                      int num_groups, int num_nodes, int num_gpus, DiEplbPlan *out);
void di_eplb_plan_free(DiEplbPlan *plan);

/* moe_lb (serving.md §8.3) of a plan under a load weight[L][E], each expert's load split evenly
 * over its replicas: per layer max/mean of the per-GPU load (1.0 for an all-zero layer) into
 * per_layer[L] (may be NULL), and the aggregate sum(max)/sum(mean) over layers into *aggregate. */
int di_eplb_moe_lb(const DiEplbPlan *plan, const float *weight, double *per_layer, double *aggregate);

/* Prefill step-cost model and chunk solver (serving.md §6.3), see src/cluster/prefill_cost.h:
 * cost(q, c) = a·q² + b·q·c + d·q + e·c + f ns for q new tokens on a c-token prefix. */
typedef struct {
    double a, b, d, e, f; /* ns, ns/token², ns/token, ns/token, ns */
} DiPrefillCost;

/* A request's share of a step, without the step's fixed overhead f (NaN for a NULL model). */
double di_prefill_cost_request_ns(const DiPrefillCost *m, int64_t q, int64_t c);
/* A whole step that runs only this request: f + request share. */
double di_prefill_cost_ns(const DiPrefillCost *m, int64_t q, int64_t c);

/* Least-squares fit of the five coefficients to n >= 5 samples (q[i], c[i], ns[i]).  With
 * relative = 1 the residuals are divided by the measurement (minimises relative error, so short
 * steps count as much as long ones).  Columns are scaled before the 5x5 normal equations are
 * solved, and a grid that cannot determine all five (e.g. c always 0) is an error. */
int di_prefill_cost_fit(const int64_t *q, const int64_t *c, const double *ns, size_t n, int relative,
                        DiPrefillCost *out);

/* The chunk rules of §6.3. */
typedef struct {
    int64_t block;     /* chunks are rounded down to a multiple of this (KV block, e.g. 512) */
    int64_t min_chunk; /* a chunk smaller than this is not run, unless it finishes the request */
} DiChunkRules;

/* Largest q in [0, remaining] with request cost(q, c) <= budget_ns, a multiple of rules->block
 * unless q == remaining, and 0 instead of a chunk below rules->min_chunk that does not finish the
 * request.  Guarantees cost(q) <= budget_ns and, when 0 < q < remaining,
 * cost(q + block) > budget_ns.  Returns -1 (with error) on bad arguments. */
int64_t di_prefill_chunk_solve(const DiPrefillCost *m, int64_t c, int64_t remaining, double budget_ns,
                               const DiChunkRules *rules);

/* One rank's step: requests in the given order (tier priority, then age) with prefix c[i] and
 * remaining[i] tokens; fills q[i] from the budget T (f paid once) until the budget or the token
 * cap is spent.  Returns the predicted step time (f + sum of request costs; 0 when nothing runs),
 * or -1 with error. */
double di_prefill_fill_step(const DiPrefillCost *m, const int64_t *c, const int64_t *remaining, size_t n,
                            double budget_ns, int64_t token_cap, const DiChunkRules *rules, int64_t *q);

/* Online correction (§6.3 "Refit online ... with an EWMA correction factor"): the ratio of
 * measured to predicted step time, smoothed; the scheduler divides its budget by it, so a model
 * that under-predicts makes chunks smaller until the two agree. */
typedef struct {
    double factor; /* measured / predicted, starts at 1 */
    double alpha;  /* weight of the newest step, (0, 1] */
    int64_t steps;
} DiPrefillCorrection;

int di_prefill_correction_init(DiPrefillCorrection *c, double alpha);
/* Fold in one step; ignores steps with a non-positive prediction or measurement. */
void di_prefill_correction_update(DiPrefillCorrection *c, double predicted_ns, double measured_ns);

/* Prefill tiers and their instance quotas (serving.md §6.2), see src/cluster/prefill_lb.h. */
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

/* Decode load balancer (serving.md §7.2), see src/cluster/decode_lb.h: which decode DP rank a
 * request joins, by a look-ahead score over request count and KV tokens. */
typedef struct {
    double alpha, beta, gamma; /* ns, ns per request, ns per KV token */
} DiDecodeCost;

typedef enum {
    DI_DECODE_LB_BALANCED = 0, /* the §7.2 score */
    DI_DECODE_LB_ROUND_ROBIN,
    DI_DECODE_LB_COUNT,        /* fewest running requests */
    DI_DECODE_LB_KV,           /* least KV */
    DI_DECODE_LB_STEP_TIME,    /* least predicted step time beta·n + gamma·K after admission, with
                                  the same look-ahead: count and KV weighed by the fitted cost model */
} DiDecodeLbPolicy;

typedef struct {
    int num_ranks;
    int lookahead_steps;   /* H */
    int max_requests;      /* N_max per rank (CUDA graph / DeepEP low-latency batch cap) */
    int64_t max_kv_tokens; /* per-rank KV budget in tokens (HBM / bytes per token) */
    DiDecodeLbPolicy policy;
    DiDecodeCost cost; /* the step-time model (used by DI_DECODE_LB_STEP_TIME) */
} DiDecodeLbConfig;

typedef struct {
    int64_t n;       /* running requests */
    int64_t kv;      /* their total KV tokens */
    int64_t pending;    /* admitted but not yet running (KV in transfer) */
    int64_t pending_kv; /* their prompt tokens, counted in projections before they start */
} DiDecodeRank;

typedef struct {
    DiDecodeLbConfig cfg;
    DiDecodeRank *ranks;
    int next_rr;
} DiDecodeLb;

/* Name <-> policy ("balanced", "round-robin", "count", "kv", "step-time"). */
const char *di_decode_lb_policy_name(DiDecodeLbPolicy p);
int di_decode_lb_policy_parse(const char *name, DiDecodeLbPolicy *out);

/* lb must be fresh or freed: init does not free a previous initialisation. */
int di_decode_lb_init(DiDecodeLb *lb, const DiDecodeLbConfig *cfg);
void di_decode_lb_free(DiDecodeLb *lb);

/* The rank for a request with a p-token prompt; -1 with error when no rank has capacity. */
int di_decode_lb_pick(const DiDecodeLb *lb, int64_t prompt_tokens);
/* pick + admit for several requests of one routing tick, longest prompt first; ranks[i] is the
 * rank of prompts[i] (-1 when none had capacity; returns the number placed). */
int di_decode_lb_assign_batch(DiDecodeLb *lb, const int64_t *prompts, size_t n, int *ranks);

/* Bookkeeping the scheduler reports. */
int di_decode_lb_admit(DiDecodeLb *lb, int rank, int64_t prompt_tokens);   /* pending++ */
int di_decode_lb_start(DiDecodeLb *lb, int rank, int64_t prompt_tokens);   /* pending--, n++, kv += p */
int di_decode_lb_finish(DiDecodeLb *lb, int rank, int64_t kv_tokens);      /* n--, kv -= its KV */
void di_decode_lb_step(DiDecodeLb *lb);                                     /* every running request +1 token */

#ifdef __cplusplus
}
#endif

#endif
