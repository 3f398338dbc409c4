/* decode_lb.c — decode rank choice with look-ahead and the imbalance metric (serving.md §7.2;
 * see decode_lb.h). */
#include "cluster/decode_lb.h"

#include "base/error.h"
#include "base/mem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const policy_names[] = {"balanced", "round-robin", "count", "kv", "step-time"};

const char *di_decode_lb_policy_name(DiDecodeLbPolicy p) {
    return (unsigned)p < sizeof policy_names / sizeof policy_names[0] ? policy_names[p] : "unknown";
}

int di_decode_lb_policy_parse(const char *name, DiDecodeLbPolicy *out) {
    for (size_t i = 0; name && i < sizeof policy_names / sizeof policy_names[0]; i++)
        if (strcmp(name, policy_names[i]) == 0) {
            *out = (DiDecodeLbPolicy)i;
            return 0;
        }
    return di_errorf("unknown decode balancer '%s' (expected balanced, round-robin, count, kv or step-time)",
                     name ? name : "");
}

int di_decode_lb_init(DiDecodeLb *lb, const DiDecodeLbConfig *cfg) {
    if (!lb || !cfg) return di_errorf("decode LB: NULL argument");
    memset(lb, 0, sizeof *lb);
    if (cfg->num_ranks <= 0 || cfg->num_ranks > (1 << 20))
        return di_errorf("decode LB: num_ranks must be in 1..%d, got %d", 1 << 20, cfg->num_ranks);
    if (cfg->lookahead_steps < 0 || cfg->max_requests <= 0 || cfg->max_kv_tokens <= 0)
        return di_errorf("decode LB: lookahead must be >= 0 and the capacities positive");
    if ((unsigned)cfg->policy > DI_DECODE_LB_STEP_TIME) return di_errorf("decode LB: unknown policy %d", (int)cfg->policy);
    if (cfg->policy == DI_DECODE_LB_STEP_TIME && !(cfg->cost.beta >= 0.0 && cfg->cost.gamma >= 0.0 &&
                                                   cfg->cost.beta + cfg->cost.gamma > 0.0))
        return di_errorf("decode LB: the step-time policy needs beta, gamma >= 0, not both 0");
    lb->ranks = di_calloc((size_t)cfg->num_ranks, sizeof *lb->ranks, "decode ranks");
    if (!lb->ranks) return -1;
    lb->cfg = *cfg;
    return 0;
}

void di_decode_lb_free(DiDecodeLb *lb) {
    if (!lb) return;
    free(lb->ranks);
    memset(lb, 0, sizeof *lb);
}

/* Projected requests and KV of a rank H steps ahead with this request on it. */
static void project(const DiDecodeLb *lb, const DiDecodeRank *r, int64_t p, double *n, double *kv) {
    int64_t H = lb->cfg.lookahead_steps;
    *n = (double)(r->n + r->pending + 1);
    *kv = (double)(r->kv + r->pending_kv + (r->n + r->pending) * H + p + H);
}

static int feasible(const DiDecodeLb *lb, const DiDecodeRank *r, int64_t p) {
    double n, kv;
    project(lb, r, p, &n, &kv);
    return n <= lb->cfg.max_requests && kv <= (double)lb->cfg.max_kv_tokens;
}

/* The score of placing a p-token request on rank r (lower is better). */
static double score(const DiDecodeLb *lb, const DiDecodeRank *r, int64_t p, double mean_n, double mean_kv) {
    double n, kv;
    project(lb, r, p, &n, &kv);
    switch (lb->cfg.policy) {
    case DI_DECODE_LB_COUNT: return n;
    case DI_DECODE_LB_KV: return kv;
    case DI_DECODE_LB_STEP_TIME: return lb->cfg.cost.beta * n + lb->cfg.cost.gamma * kv;
    default: {
        double sn = n / mean_n, sk = kv / mean_kv;
        return sn > sk ? sn : sk;
    }
    }
}

int di_decode_lb_pick(const DiDecodeLb *lb, int64_t p) {
    if (!lb || !lb->ranks) return di_errorf("decode LB: not initialised");
    if (p < 0) return di_errorf("decode LB: negative prompt length %lld", (long long)p);
    int G = lb->cfg.num_ranks;
    if (lb->cfg.policy == DI_DECODE_LB_ROUND_ROBIN) {
        for (int k = 0; k < G; k++) {
            int g = (lb->next_rr + k) % G;
            if (feasible(lb, &lb->ranks[g], p)) return g;
        }
        return di_errorf("decode LB: no rank has capacity for a %lld-token request", (long long)p);
    }
    /* means after admission, over the projection the scores use */
    double sum_n = 1.0, sum_kv = (double)(p + lb->cfg.lookahead_steps);
    for (int g = 0; g < G; g++) {
        const DiDecodeRank *r = &lb->ranks[g];
        sum_n += (double)(r->n + r->pending);
        sum_kv += (double)(r->kv + r->pending_kv + (r->n + r->pending) * lb->cfg.lookahead_steps);
    }
    double mean_n = sum_n / G, mean_kv = sum_kv / G;
    if (mean_kv <= 0.0) mean_kv = 1.0;
    int best = -1;
    double best_score = 0.0;
    for (int g = 0; g < G; g++) {
        const DiDecodeRank *r = &lb->ranks[g];
        if (!feasible(lb, r, p)) continue;
        double s = score(lb, r, p, mean_n, mean_kv);
        if (best < 0 || s < best_score || (s == best_score && r->pending < lb->ranks[best].pending)) {
            best = g;
            best_score = s;
        }
    }
    if (best < 0) return di_errorf("decode LB: no rank has capacity for a %lld-token request", (long long)p);
    return best;
}

static int check_rank(const DiDecodeLb *lb, int rank) {
    if (!lb || !lb->ranks) return di_errorf("decode LB: not initialised");
    if (rank < 0 || rank >= lb->cfg.num_ranks) return di_errorf("decode LB: rank %d out of range", rank);
    return 0;
}

int di_decode_lb_admit(DiDecodeLb *lb, int rank, int64_t p) {
    if (check_rank(lb, rank) != 0) return -1;
    if (p < 0) return di_errorf("decode LB: negative prompt length");
    lb->ranks[rank].pending++;
    lb->ranks[rank].pending_kv += p;
    if (lb->cfg.policy == DI_DECODE_LB_ROUND_ROBIN) lb->next_rr = (rank + 1) % lb->cfg.num_ranks;
    return 0;
}

int di_decode_lb_start(DiDecodeLb *lb, int rank, int64_t p) {
    if (check_rank(lb, rank) != 0) return -1;
    DiDecodeRank *r = &lb->ranks[rank];
    if (r->pending <= 0 || p < 0 || p > r->pending_kv)
        return di_errorf("decode LB: rank %d has no pending request of %lld tokens to start", rank, (long long)p);
    r->pending--;
    r->pending_kv -= p;
    r->n++;
    r->kv += p;
    return 0;
}

int di_decode_lb_finish(DiDecodeLb *lb, int rank, int64_t kv) {
    if (check_rank(lb, rank) != 0) return -1;
    DiDecodeRank *r = &lb->ranks[rank];
    if (r->n <= 0 || kv < 0 || kv > r->kv)
        return di_errorf("decode LB: rank %d cannot finish a request of %lld KV tokens (it runs %lld, KV %lld)", rank,
                         (long long)kv, (long long)r->n, (long long)r->kv);
    r->n--;
    r->kv -= kv;
    return 0;
}

void di_decode_lb_step(DiDecodeLb *lb) {
    if (!lb || !lb->ranks) return;
    for (int g = 0; g < lb->cfg.num_ranks; g++) lb->ranks[g].kv += lb->ranks[g].n;
}

/* LPT: indices by prompt length descending (ties: input order). */
static int by_prompt_desc(const void *a, const void *b, void *ctx) {
    const int64_t *prompts = ctx;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    if (prompts[i] != prompts[j]) return prompts[i] > prompts[j] ? -1 : 1;
    return (i > j) - (i < j);
}

int di_decode_lb_assign_batch(DiDecodeLb *lb, const int64_t *prompts, size_t n, int *ranks) {
    if (!lb || (n > 0 && (!prompts || !ranks))) return di_errorf("decode LB: NULL argument");
    size_t *order = di_calloc(n ? n : 1, sizeof *order, "decode LB batch order");
    if (!order) return -1;
    for (size_t i = 0; i < n; i++) order[i] = i;
    qsort_r(order, n, sizeof *order, by_prompt_desc, (void *)prompts);
    int placed = 0;
    for (size_t k = 0; k < n; k++) {
        size_t i = order[k];
        ranks[i] = di_decode_lb_pick(lb, prompts[i]);
        if (ranks[i] >= 0 && di_decode_lb_admit(lb, ranks[i], prompts[i]) == 0) placed++;
    }
    free(order);
    return placed;
}

double di_decode_step_ns(const DiDecodeCost *c, const DiDecodeRank *r) {
    if (!c || !r) return NAN;
    return c->alpha + c->beta * (double)r->n + c->gamma * (double)r->kv;
}

double di_decode_lb_imbalance(const DiDecodeLb *lb, const DiDecodeCost *cost, double *max_ns) {
    double max = 0.0, sum = 0.0;
    if (!cost) lb = NULL; /* nothing to measure with: report balanced, max 0 */
    int busy = 0;
    for (int g = 0; lb && lb->ranks && g < lb->cfg.num_ranks; g++) {
        double t = di_decode_step_ns(cost, &lb->ranks[g]);
        busy |= lb->ranks[g].n > 0;
        if (t > max) max = t;
        sum += t;
    }
    if (max_ns) *max_ns = max;
    return (busy && sum > 0.0) ? max / (sum / lb->cfg.num_ranks) : 1.0;
}
