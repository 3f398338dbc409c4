/* eplb_policy.c — windows, periods and moe_lb around the EPLB planner (see eplb_policy.h).
 *
 * Memory: a sliding window of W steps would need W x L x E loads (1,000 x 40 x 384 floats =
 * 61 MB for decode).  Because a plan is only ever computed at a period end and the window never
 * exceeds the period, it is enough to start summing W steps before each period end: the sum at
 * the replan step is exactly the sliding-window sum, with one L x E accumulator. */
#include "cluster/eplb_policy.h"

#include "base/error.h"
#include "base/mem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct DiEplbPolicy {
    DiEplbPolicyConfig cfg;
    int num_replicas;
    DiEplbPlan plan;
    float *window; /* [L][E] sum of loads over the open window */
    double *share; /* [L][R] 1 / replica count of each slot's expert: a slot's part of its load */
    double *layer_max, *layer_mean; /* [L] of the latest recorded step */
    DiEplbPolicyStats stats;
};

DiEplbPolicyConfig di_eplb_policy_preset(DiEplbPhase phase, int num_layers, int num_logical, int num_groups,
                                         int num_nodes, int num_gpus) {
    DiEplbPolicyConfig c = {num_layers, num_logical, num_groups, num_nodes, num_gpus, 0, 0, 0, 0};
    if (phase == DI_EPLB_PREFILL) { /* serving.md §2.1 / §8.2: 4 per GPU, 100-step window, every 1,000 */
        c.redundant_per_gpu = 4;
        c.window_steps = 100;
        c.period_steps = 1000;
    } else { /* decode: 1 per GPU, 1,000-step window, every 10,000 */
        c.redundant_per_gpu = 1;
        c.window_steps = 1000;
        c.period_steps = 10000;
        /* The start plan (uniform load) puts both replicas of an expert on one GPU and is blind
         * to popularity: measured 1.83 moe_lb on skewed decode loads, like no EPLB.  100 steps of
         * a decode batch (thousands of tokens each) already rank the experts well, so the first
         * plan comes after 100 steps instead of the full window (vLLM likewise plans early: its
         * counter starts at 3/4 of the interval). */
        c.warmup_steps = 100;
    }
    return c;
}

static int check_config(const DiEplbPolicyConfig *c) {
    if (c->window_steps <= 0 || c->period_steps <= 0)
        return di_errorf("EPLB policy: window_steps and period_steps must be positive (got %d, %d)",
                         c->window_steps, c->period_steps);
    if (c->warmup_steps < 0 || c->warmup_steps > c->period_steps)
        return di_errorf("EPLB policy: warmup_steps must be in 0..period_steps (got %d)", c->warmup_steps);
    if (c->window_steps > c->period_steps)
        return di_errorf("EPLB policy: the window (%d steps) must not exceed the period (%d steps)",
                         c->window_steps, c->period_steps);
    if (c->redundant_per_gpu < 0 || c->num_gpus <= 0 || c->redundant_per_gpu > (1 << 16) / c->num_gpus)
        return di_errorf("EPLB policy: bad redundant_per_gpu %d for %d GPUs", c->redundant_per_gpu, c->num_gpus);
    if (c->num_logical <= 0 || c->num_logical > (1 << 16) || c->num_layers <= 0 || c->num_layers > 4096)
        return di_errorf("EPLB policy: bad model shape: %d layers x %d experts", c->num_layers, c->num_logical);
    return 0;
}

/* Replica count R: each GPU holds E/P experts plus its redundant ones, so E must split evenly. */
static int replica_count(const DiEplbPolicyConfig *c, int *out) {
    if (c->num_logical % c->num_gpus != 0)
        return di_errorf("%d experts do not spread evenly over %d GPUs", c->num_logical, c->num_gpus);
    *out = c->num_logical + c->redundant_per_gpu * c->num_gpus;
    return 0;
}

static void compute_shares(DiEplbPolicy *p) {
    const DiEplbPlan *plan = &p->plan;
    size_t R = (size_t)plan->num_replicas, E = (size_t)plan->num_logical;
    for (size_t l = 0; l < (size_t)plan->num_layers; l++)
        for (size_t s = 0; s < R; s++) p->share[l * R + s] = 1.0 / plan->logcnt[l * E + (size_t)plan->phy2log[l * R + s]];
}

DiEplbPolicy *di_eplb_policy_create(const DiEplbPolicyConfig *cfg) {
    if (!cfg) {
        di_errorf("EPLB policy: NULL config");
        return NULL;
    }
    if (check_config(cfg) != 0) return NULL;
    DiEplbPolicy *p = di_calloc(1, sizeof *p, "EPLB policy");
    if (!p) return NULL;
    p->cfg = *cfg;
    size_t n = (size_t)cfg->num_layers * (size_t)cfg->num_logical;
    p->window = di_calloc(n, sizeof(float), "EPLB load window");
    if (!p->window || replica_count(cfg, &p->num_replicas) != 0) goto fail;
    for (size_t i = 0; i < n; i++) p->window[i] = 1.0f; /* uniform load for the first plan */
    if (di_eplb_rebalance(p->window, cfg->num_layers, cfg->num_logical, p->num_replicas, cfg->num_groups,
                          cfg->num_nodes, cfg->num_gpus, &p->plan) != 0)
        goto fail;
    memset(p->window, 0, n * sizeof(float));
    p->share = di_calloc((size_t)cfg->num_layers * (size_t)p->num_replicas, sizeof(double), "EPLB slot shares");
    p->layer_max = di_calloc((size_t)cfg->num_layers, sizeof(double), "EPLB per-layer max load");
    p->layer_mean = di_calloc((size_t)cfg->num_layers, sizeof(double), "EPLB per-layer mean load");
    if (!p->share || !p->layer_max || !p->layer_mean) goto fail;
    compute_shares(p);
    return p;
fail:
    di_error_wrap("EPLB policy");
    di_eplb_policy_destroy(p);
    return NULL;
}

void di_eplb_policy_destroy(DiEplbPolicy *p) {
    if (!p) return;
    free(p->share);
    free(p->layer_max);
    free(p->layer_mean);
    di_eplb_plan_free(&p->plan);
    free(p->window);
    free(p);
}

/* Add this step's per-layer max and mean per-GPU load under the current plan. */
static void score_step(DiEplbPolicy *p, const float *load) {
    const DiEplbPlan *plan = &p->plan;
    int L = plan->num_layers, E = plan->num_logical, R = plan->num_replicas, P = plan->num_gpus, per = R / P;
    double step_max = 0.0, step_mean = 0.0;
    for (int l = 0; l < L; l++) {
        const int32_t *p2l = plan->phy2log + (size_t)l * R;
        const double *share = p->share + (size_t)l * R;
        const float *w = load + (size_t)l * E;
        double max = 0.0, total = 0.0;
        for (int g = 0; g < P; g++) {
            double gpu = 0.0;
            for (int s = g * per; s < (g + 1) * per; s++) gpu += (double)w[p2l[s]] * share[s];
            if (gpu > max) max = gpu;
            total += gpu;
        }
        step_max += max;
        step_mean += total / P;
        p->layer_max[l] = max;
        p->layer_mean[l] = total / P;
    }
    p->stats.sum_max += step_max;
    p->stats.sum_mean += step_mean;
    p->stats.last_step_moe_lb = step_mean > 0.0 ? step_max / step_mean : 1.0;
}

static int replan(DiEplbPolicy *p) {
    DiEplbPlan next;
    const DiEplbPolicyConfig *c = &p->cfg;
    if (di_eplb_rebalance(p->window, c->num_layers, c->num_logical, p->num_replicas, c->num_groups, c->num_nodes,
                          c->num_gpus, &next) != 0)
        return di_error_wrap("EPLB policy: replanning at step %lld", (long long)p->stats.steps);
    size_t slots = (size_t)c->num_layers * (size_t)p->num_replicas;
    for (size_t i = 0; i < slots; i++) p->stats.moved_slots += next.phy2log[i] != p->plan.phy2log[i];
    di_eplb_plan_free(&p->plan);
    p->plan = next;
    compute_shares(p);
    p->stats.replans++;
    memset(p->window, 0, (size_t)c->num_layers * (size_t)c->num_logical * sizeof(float));
    return 0;
}

int di_eplb_policy_record(DiEplbPolicy *p, const float *load, int *replanned) {
    if (replanned) *replanned = 0;
    if (!p || !load) return di_errorf("EPLB policy: NULL argument");
    size_t n = (size_t)p->cfg.num_layers * (size_t)p->cfg.num_logical;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(load[i]) || load[i] < 0.0f)
            return di_errorf("EPLB policy: load[%zu][%zu] = %g must be finite and >= 0", i / (size_t)p->cfg.num_logical,
                             i % (size_t)p->cfg.num_logical, (double)load[i]);
    score_step(p, load);
    int64_t step = ++p->stats.steps, phase = step % p->cfg.period_steps;
    /* Cold start: the first plan is made as soon as the warm-up (one window by default) has
     * been seen (the start plan knows nothing of the load; vLLM likewise starts its counter at
     * 3/4 of the interval).
     * After that, the window is open for the last window_steps steps of each period. */
    int64_t warm = p->cfg.warmup_steps > 0 ? p->cfg.warmup_steps : p->cfg.window_steps;
    /* A short warm-up plans from few tokens; the plan after the first full window (from the
     * steps since the warm-up) replaces it rather than leaving it in force for a whole period. */
    int first = step <= p->cfg.window_steps,
        replan_now = phase == 0 || step == warm || step == p->cfg.window_steps;
    if (first || phase == 0 || phase > p->cfg.period_steps - p->cfg.window_steps)
        for (size_t i = 0; i < n; i++) p->window[i] += load[i];
    if (!replan_now) return 0;
    if (replan(p) != 0) return -1;
    if (replanned) *replanned = 1;
    return 0;
}

const DiEplbPlan *di_eplb_policy_plan(const DiEplbPolicy *p) { return p ? &p->plan : NULL; }

DiEplbPolicyStats di_eplb_policy_stats(const DiEplbPolicy *p) {
    DiEplbPolicyStats s = {0, 0, 0, 0.0, 0.0, 1.0};
    return p ? p->stats : s;
}

int di_eplb_policy_last_step(const DiEplbPolicy *p, const double **max, const double **mean) {
    if (!p || !max || !mean) return di_errorf("EPLB policy: NULL argument");
    *max = p->layer_max;
    *mean = p->layer_mean;
    return 0;
}

double di_eplb_policy_moe_lb(const DiEplbPolicy *p) {
    return (p && p->stats.sum_mean > 0.0) ? p->stats.sum_max / p->stats.sum_mean : 1.0;
}
