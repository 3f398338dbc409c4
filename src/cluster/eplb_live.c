/* eplb_live.c — the live EPLB driver (see eplb_live.h).
 *
 * Window moe_lb: a ring of the last window_steps steps' per-layer max and mean per-rank load
 * (the policy's terms of each step, under the plan in force then) and the identity placement's
 * per-step sums; a scrape sums the ring (window x layers additions, ~43k for the decode preset
 * on V4.1, against a full step of the model), so recording stays O(layers x slots). */
#include "cluster/eplb_live.h"

#include "base/error.h"
#include "base/log.h"
#include "base/mem.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct DiEplbLive {
    DiEplbLiveConfig cfg;
    DiEplbPolicy *policy;
    pthread_mutex_t lock;
    float *load;               /* [L][E] this step's counts as the policy takes them */
    double *win_max, *win_mean; /* [W][L] ring: the policy's per-layer terms of each step */
    double *id_max, *id_mean;   /* [W] ring: identity placement, summed over layers */
    double *per_layer, *sorted; /* [L] scratch of the metrics */
    int64_t steps, apply_failures;
};

DiEplbLive *di_eplb_live_create(const DiEplbLiveConfig *cfg) {
    if (!cfg) {
        di_errorf("EPLB driver: NULL config");
        return NULL;
    }
    DiEplbLive *lv = di_calloc(1, sizeof *lv, "EPLB driver");
    if (!lv) return NULL;
    lv->cfg = *cfg;
    pthread_mutex_init(&lv->lock, NULL);
    if (!(lv->policy = di_eplb_policy_create(&cfg->policy))) goto fail;
    size_t L = (size_t)cfg->policy.num_layers, E = (size_t)cfg->policy.num_logical, W = (size_t)cfg->policy.window_steps;
    lv->load = di_calloc(L * E, sizeof *lv->load, "EPLB step load");
    lv->win_max = di_calloc(W * L, sizeof *lv->win_max, "EPLB window");
    lv->win_mean = di_calloc(W * L, sizeof *lv->win_mean, "EPLB window");
    lv->id_max = di_calloc(W, sizeof *lv->id_max, "EPLB identity window");
    lv->id_mean = di_calloc(W, sizeof *lv->id_mean, "EPLB identity window");
    lv->per_layer = di_calloc(L, sizeof *lv->per_layer, "EPLB per-layer moe_lb");
    lv->sorted = di_calloc(L, sizeof *lv->sorted, "EPLB per-layer moe_lb");
    if (!lv->load || !lv->win_max || !lv->win_mean || !lv->id_max || !lv->id_mean || !lv->per_layer || !lv->sorted) goto fail;
    return lv;
fail:
    di_error_wrap("EPLB driver");
    di_eplb_live_destroy(lv);
    return NULL;
}

void di_eplb_live_destroy(DiEplbLive *lv) {
    if (!lv) return;
    di_eplb_policy_destroy(lv->policy);
    pthread_mutex_destroy(&lv->lock);
    free(lv->load);
    free(lv->win_max);
    free(lv->win_mean);
    free(lv->id_max);
    free(lv->id_mean);
    free(lv->per_layer);
    free(lv->sorted);
    free(lv);
}

/* The step on the identity placement: rank g holds experts [g E/P, (g+1) E/P), one replica each. */
static void score_identity(DiEplbLive *lv, size_t slot) {
    const DiEplbPolicyConfig *c = &lv->cfg.policy;
    int E = c->num_logical, P = c->num_gpus, per = E / P;
    double sum_max = 0.0, sum_mean = 0.0;
    for (int l = 0; l < c->num_layers; l++) {
        const float *w = lv->load + (size_t)l * (size_t)E;
        double max = 0.0, total = 0.0;
        for (int g = 0; g < P; g++) {
            double rank = 0.0;
            for (int e = g * per; e < (g + 1) * per; e++) rank += (double)w[e];
            if (rank > max) max = rank;
            total += rank;
        }
        sum_max += max;
        sum_mean += total / P;
    }
    lv->id_max[slot] = sum_max;
    lv->id_mean[slot] = sum_mean;
}

/* Score and record one step under the lock; *replanned when the policy made a new plan. */
static int record_locked(DiEplbLive *lv, int *replanned) {
    const DiEplbPolicyConfig *c = &lv->cfg.policy;
    if (di_eplb_policy_record(lv->policy, lv->load, replanned) != 0) return di_error_wrap("EPLB driver");
    const double *max, *mean;
    di_eplb_policy_last_step(lv->policy, &max, &mean);
    size_t L = (size_t)c->num_layers, slot = (size_t)(lv->steps % c->window_steps);
    memcpy(lv->win_max + slot * L, max, L * sizeof *max);
    memcpy(lv->win_mean + slot * L, mean, L * sizeof *mean);
    score_identity(lv, slot);
    lv->steps++;
    return 0;
}

int di_eplb_live_record(DiEplbLive *lv, const int64_t *tokens, int layers, int experts) {
    if (!lv || !tokens) return di_errorf("EPLB driver: NULL argument");
    const DiEplbPolicyConfig *c = &lv->cfg.policy;
    if (layers != c->num_layers || experts != c->num_logical)
        return di_errorf("EPLB driver: a step's load of %d layers x %d experts, planned for %d x %d", layers, experts,
                         c->num_layers, c->num_logical);
    size_t n = (size_t)layers * (size_t)experts;
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0) return di_errorf("EPLB driver: negative count %lld at layer %zu, expert %zu", (long long)tokens[i],
                                            i / (size_t)experts, i % (size_t)experts);
    int replanned = 0;
    pthread_mutex_lock(&lv->lock);
    for (size_t i = 0; i < n; i++) lv->load[i] = (float)tokens[i];
    int rc = record_locked(lv, &replanned);
    pthread_mutex_unlock(&lv->lock);
    if (rc != 0 || !replanned || !lv->cfg.apply) return rc;
    /* outside the lock (a scrape need not wait for experts to move): the plan changes only in
     * record, on this same thread */
    if (lv->cfg.apply(lv->cfg.apply_user, di_eplb_policy_plan(lv->policy)) == 0) return 0;
    pthread_mutex_lock(&lv->lock);
    lv->apply_failures++;
    pthread_mutex_unlock(&lv->lock);
    DI_WARN("EPLB: applying the plan of step %lld failed: %s", (long long)lv->steps, di_error_message());
    return di_error_wrap("EPLB driver: applying the plan of step %lld", (long long)lv->steps);
}

static double ratio(double max, double mean) { return mean > 0.0 ? max / mean : 1.0; }

static void stats_locked(DiEplbLive *lv, DiEplbLiveStats *out, double *per_layer) {
    const DiEplbPolicyConfig *c = &lv->cfg.policy;
    size_t L = (size_t)c->num_layers, filled = (size_t)(lv->steps < c->window_steps ? lv->steps : c->window_steps);
    double all_max = 0.0, all_mean = 0.0, id_max = 0.0, id_mean = 0.0;
    for (size_t l = 0; l < L; l++) {
        double mx = 0.0, mn = 0.0;
        for (size_t s = 0; s < filled; s++) {
            mx += lv->win_max[s * L + l];
            mn += lv->win_mean[s * L + l];
        }
        if (per_layer) per_layer[l] = ratio(mx, mn);
        all_max += mx;
        all_mean += mn;
    }
    for (size_t s = 0; s < filled; s++) {
        id_max += lv->id_max[s];
        id_mean += lv->id_mean[s];
    }
    DiEplbPolicyStats ps = di_eplb_policy_stats(lv->policy);
    *out = (DiEplbLiveStats){lv->steps, ps.replans, ps.moved_slots, lv->apply_failures, ratio(all_max, all_mean),
                             ratio(id_max, id_mean), di_eplb_policy_moe_lb(lv->policy)};
}

int di_eplb_live_stats(DiEplbLive *lv, DiEplbLiveStats *out, double *per_layer) {
    if (!lv || !out) return di_errorf("EPLB driver: NULL argument");
    pthread_mutex_lock(&lv->lock);
    stats_locked(lv, out, per_layer);
    pthread_mutex_unlock(&lv->lock);
    return 0;
}

static int compare_double(const void *pa, const void *pb) {
    double a = *(const double *)pa, b = *(const double *)pb;
    return (a > b) - (a < b);
}

/* The distribution of the per-layer values (§8.3): nearest-rank quantiles q of lv->per_layer. */
static int render_quantiles(DiEplbLive *lv, DiApiBuf *out) {
    size_t L = (size_t)lv->cfg.policy.num_layers;
    memcpy(lv->sorted, lv->per_layer, L * sizeof *lv->sorted);
    qsort(lv->sorted, L, sizeof *lv->sorted, compare_double);
    const double q[] = {0.5, 0.99};
    int rc = di_api_buf_printf(out, "# HELP deepinfer_moe_lb_layers Quantiles of deepinfer_moe_lb over the layers.\n"
                                    "# TYPE deepinfer_moe_lb_layers gauge\n");
    for (size_t i = 0; rc == 0 && i < sizeof q / sizeof q[0]; i++) {
        size_t rank = (size_t)ceil(q[i] * (double)L); /* 1-based nearest rank, >= 1 since L >= 1 */
        rc = di_api_buf_printf(out, "deepinfer_moe_lb_layers{quantile=\"%g\"} %.6f\n", q[i], lv->sorted[rank - 1]);
    }
    return rc;
}

int di_eplb_live_metrics(DiEplbLive *lv, DiApiBuf *out) {
    if (!lv || !out) return di_errorf("EPLB driver metrics: NULL argument");
    DiEplbLiveStats st;
    pthread_mutex_lock(&lv->lock); /* per_layer is the driver's scratch: filled and printed under the lock */
    stats_locked(lv, &st, lv->per_layer);
    int rc = di_api_buf_printf(out,
                               "# HELP deepinfer_moe_lb MoE load balance of a layer: slowest expert rank's routed tokens / "
                               "the ranks' mean, over the EPLB window, under the plan in force.\n"
                               "# TYPE deepinfer_moe_lb gauge\n");
    for (int l = 0; rc == 0 && l < lv->cfg.policy.num_layers; l++)
        rc = di_api_buf_printf(out, "deepinfer_moe_lb{layer=\"%d\"} %.6f\n", l, lv->per_layer[l]);
    if (rc == 0) rc = render_quantiles(lv, out);
    pthread_mutex_unlock(&lv->lock);
    if (rc != 0) return rc;
    return di_api_buf_printf(
        out,
        "# HELP deepinfer_moe_lb_aggregate Sum over layers and window steps of the slowest rank's load / sum of the mean.\n"
        "# TYPE deepinfer_moe_lb_aggregate gauge\ndeepinfer_moe_lb_aggregate %.6f\n"
        "# HELP deepinfer_moe_lb_identity The same loads on the identity placement (no EPLB).\n"
        "# TYPE deepinfer_moe_lb_identity gauge\ndeepinfer_moe_lb_identity %.6f\n"
        "# HELP deepinfer_eplb_ranks Expert ranks EPLB plans for (virtual ones without expert parallelism).\n"
        "# TYPE deepinfer_eplb_ranks gauge\ndeepinfer_eplb_ranks %d\n"
        "# HELP deepinfer_eplb_steps_total Engine steps whose expert loads EPLB recorded.\n"
        "# TYPE deepinfer_eplb_steps_total counter\ndeepinfer_eplb_steps_total %lld\n"
        "# HELP deepinfer_eplb_replans_total New EPLB plans after the initial one.\n"
        "# TYPE deepinfer_eplb_replans_total counter\ndeepinfer_eplb_replans_total %lld\n"
        "# HELP deepinfer_eplb_moved_slots_total Expert slots whose expert changed, over all replans.\n"
        "# TYPE deepinfer_eplb_moved_slots_total counter\ndeepinfer_eplb_moved_slots_total %lld\n"
        "# HELP deepinfer_eplb_apply_failures_total New plans the expert ranks could not switch to.\n"
        "# TYPE deepinfer_eplb_apply_failures_total counter\ndeepinfer_eplb_apply_failures_total %lld\n",
        st.moe_lb, st.moe_lb_identity, lv->cfg.policy.num_gpus, (long long)st.steps, (long long)st.replans,
        (long long)st.moved_slots, (long long)st.apply_failures);
}
