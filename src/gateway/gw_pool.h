/* gw_pool.h — the gateway's view of its workers and its routing decisions (serving.md §5.2,
 * §6, §7; pd-protocol.md).
 *
 * Owns, for every worker: its URL and role, its health (heartbeats: two missed in a row, or a
 * refused connection, take it out of rotation; the next answer puts it back, so no failure is
 * sticky), its last reported load, and what the gateway sent it since (pending requests and
 * their prompt tokens, the predicted cost of prefills in flight).  Decisions call the cluster
 * library's balancers, the same code `deepinfer sim` runs:
 *   - decode / whole-request choice: di_decode_lb_pick over the healthy candidates, ranks from
 *     (running + queued, kv_tokens) of the last heartbeat, its requests waiting for a room's KV
 *     and the gateway's admissions since (vLLM's optimistic local increment between refreshes)
 *     as pending; cache-aware first: among the candidates holding the longest run of the
 *     request's leading blocks (their reported prefix_keys) and loaded at most cache_slack
 *     requests above the least loaded candidate, the same balancer picks (counted in
 *     cache_picks); otherwise, or when none of them has capacity, over every candidate;
 *   - prefill choice (only workers reporting role prefill): the request's tier (di_prefill_tier of its context), the tier's instances
 *     from the quota controller (di_prefill_quota_update every period, demand = predicted cost
 *     in flight + arrivals), the least predicted finish time (cost in flight + own cost) among
 *     them; a tier with no healthy instance borrows from the others (work-conserving);
 *   - the prefill cost model: fitted from the workers' measured per-request samples
 *     (di_prefill_cost_fit on (q, c, ns)): from heartbeats, and from each /internal/prefill
 *     reply (di_gw_pool_prefill_sample; once a prefill worker's replies feed the fit, its
 *     heartbeat samples, the same prefills, are no longer taken); when the samples cannot determine the five
 *     coefficients (e.g. no request had a cached prefix), the per-token rate d from the deltas of
 *     the workers' prefill_tokens / prefill_seconds counters (the other coefficients 0).
 * No network here: the heartbeat thread and the proxy feed it, so tests script a cluster.
 * Thread-safe: every entry point takes the pool's lock. */
#ifndef DI_GATEWAY_GW_POOL_H
#define DI_GATEWAY_GW_POOL_H

#include "deepinfer_cluster.h"
#include "gateway/gw_load.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum { DI_GW_PREFILL = 0, DI_GW_DECODE = 1, DI_GW_BOTH = 2 } DiGwRole;

#define DI_GW_MISSES_OUT 2     /* heartbeats missed in a row that take a worker out */
#define DI_GW_FIT_SAMPLES 256  /* the prefill samples the fit keeps (newest) */
#define DI_GW_PREFIX_BLOCKS 64 /* a request's leading blocks the cache-aware choice matches */

typedef enum { DI_GW_FIT_NONE = 0, DI_GW_FIT_LINEAR, DI_GW_FIT_FULL } DiGwFitKind;

typedef struct {
    char url[256];
    DiGwRole role;
    bool healthy;            /* in rotation */
    bool seen;               /* answered at least once */
    int missed;              /* heartbeats missed in a row */
    char why[256];           /* the last failure, for the log and /metrics */
    DiGwLoad load;           /* the last answer */
    int64_t pending, pending_kv;     /* admitted by the gateway since that answer */
    double prefill_inflight_ns;      /* predicted cost of the prefills in flight on it */
    uint64_t routed, failures;       /* requests sent to it; upstream failures seen */
    uint64_t routed_tier[DI_PREFILL_TIERS];
    int tier;                /* the tier the quota assigns it (prefill workers), else -1 */
    bool reply_samples;      /* its prefill samples come from its /internal/prefill replies */
} DiGwWorker;

typedef struct {
    int max_requests;        /* decode LB N_max per worker */
    int64_t max_kv_tokens;   /* decode LB KV budget per worker */
    int lookahead_steps;     /* decode LB H */
    DiDecodeLbPolicy policy;
    double quota_alpha, quota_horizon_s;
    int cache_slack;         /* cache-aware choice: requests above the least loaded a hit may take */
} DiGwPoolConfig;

typedef struct {
    pthread_mutex_t lock;
    DiGwPoolConfig cfg;
    DiGwWorker *w;
    int n;
    char model[128];         /* the model every worker must serve */
    /* prefill tiers */
    int n_prefill;
    bool have_quota;
    DiPrefillQuota quota;
    double tier_inflight_ns[DI_PREFILL_TIERS];
    double arrivals[DI_PREFILL_TIERS], tier_cost_sum[DI_PREFILL_TIERS];
    uint64_t routed_tier[DI_PREFILL_TIERS];
    /* the cost model and its samples */
    DiPrefillCost cost;
    DiGwFitKind fit_kind;
    int64_t fit_q[DI_GW_FIT_SAMPLES], fit_c[DI_GW_FIT_SAMPLES];
    double fit_ns[DI_GW_FIT_SAMPLES];
    uint64_t fit_total;      /* samples ever taken */
    uint64_t reply_samples_total; /* of them, from /internal/prefill replies */
    double delta_tokens, delta_seconds; /* counter deltas summed over workers */
    int64_t *last_samples_total, *last_prefill_tokens; /* per worker */
    double *last_prefill_seconds;
    uint64_t cache_picks;    /* decode choices made by the cache-aware rule */
} DiGwPool;

void di_gw_pool_config_defaults(DiGwPoolConfig *cfg);
/* urls[i] with roles[i]; model = the served model name workers must report. */
int di_gw_pool_init(DiGwPool *p, const DiGwPoolConfig *cfg, const char *const *urls, const DiGwRole *roles, int n,
                    const char *model);
void di_gw_pool_free(DiGwPool *p);

/* A heartbeat answer of worker i (load), or its failure (load NULL, why names it).  A load of
 * another model or role than configured keeps the worker out, naming the mismatch. */
void di_gw_pool_heartbeat(DiGwPool *p, int i, const DiGwLoad *load, const char *why);
/* A request to worker i could not connect / failed before any byte: out of rotation now. */
void di_gw_pool_refused(DiGwPool *p, int i, const char *why);

/* True when both a prefill and a decode worker are configured (the PD flow). */
bool di_gw_pool_pd(const DiGwPool *p);

/* Whether worker w can take the `half` (DI_GW_PREFILL or DI_GW_DECODE) of a split request: in
 * rotation, configured for it and reporting that role.  A worker reporting `both` in a prefill or
 * decode pool (a plain `serve`) takes whole requests only: it has no /internal/prefill and
 * refuses X-DI-Room. */
bool di_gw_worker_splits(const DiGwWorker *w, DiGwRole half);
/* Whether a request picked for worker i is split (PD pools and i reports role decode), with its
 * KV transfer address ("" when it reported none) into transfer[size]. */
bool di_gw_pool_decode_split(DiGwPool *p, int i, char *transfer, size_t size);

/* The worker for a whole request or its decode half (roles decode and both in PD mode, every
 * worker otherwise), with a p-token prompt, never `exclude` (-1: none); admits it (pending).
 * -1 with an error when no healthy worker has capacity. */
int di_gw_pool_pick_decode(DiGwPool *p, int64_t prompt_tokens, int exclude);
/* The same, preferring the workers that hold the longest prefix of the request: keys[0, n_keys)
 * are the first 64 bits of its leading blocks' keys (block_key.h, hashed with the identity of
 * di_gw_pool_kv_identity); NULL / 0: no preference. */
int di_gw_pool_pick_decode_cached(DiGwPool *p, int64_t prompt_tokens, int exclude, const uint64_t *keys, int n_keys);
/* The KV identity to hash a request's blocks with: the fingerprint and block size of the first
 * worker in rotation that reports a block cache.  false when none does. */
bool di_gw_pool_kv_identity(DiGwPool *p, uint64_t *fp_lo, uint64_t *fp_hi, int *block_tokens);
/* The decode half is over (the worker's next heartbeat counts it). */
void di_gw_pool_decode_done(DiGwPool *p, int i, int64_t prompt_tokens);

/* The prefill worker for a request with `context` tokens (q new on c cached: context = q + c),
 * never `exclude`; *tier its tier, *cost_ns its predicted cost, both to pass to prefill_done.
 * -1 with an error when no prefill worker is healthy. */
int di_gw_pool_pick_prefill(DiGwPool *p, int64_t q, int64_t c, int exclude, int *tier, double *cost_ns);
void di_gw_pool_prefill_done(DiGwPool *p, int i, int tier, double cost_ns);
/* The measured sample of a prefill half from worker i's /internal/prefill reply: q new tokens on
 * c cached took `seconds` (the half's wall time on the worker).  Into the fit's samples; from now
 * on worker i's heartbeat samples are skipped while it reports role prefill (they are the same
 * prefills, counted twice otherwise).  -1 with the cause on a bad worker or sample. */
int di_gw_pool_prefill_sample(DiGwPool *p, int i, int64_t q, int64_t c, double seconds);

/* One quota-controller period of dt_s seconds (the heartbeat thread calls it), and a refit of the
 * cost model from the samples so far. */
void di_gw_pool_period(DiGwPool *p, double dt_s);

/* Healthy workers (any role). */
int di_gw_pool_healthy(DiGwPool *p);

#endif
