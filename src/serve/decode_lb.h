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
 * robin, request count only (vLLM-style), KV only. */
#ifndef DI_SERVE_DECODE_LB_H
#define DI_SERVE_DECODE_LB_H

#include <stddef.h>
#include <stdint.h>

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

/* Predicted step time of a rank (NaN for NULL arguments), and max/mean over ranks (1.0 when all
 * are idle or cost is NULL). */
double di_decode_step_ns(const DiDecodeCost *cost, const DiDecodeRank *rank);
double di_decode_lb_imbalance(const DiDecodeLb *lb, const DiDecodeCost *cost, double *max_ns);

#endif
