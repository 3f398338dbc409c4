/* moe_load.c — drifting log-normal expert popularity, per-step routed loads, and three EPLB
 * placements scored side by side (see moe_load.h). */
#include "cluster/sim/moe_load.h"

#include "base/error.h"
#include "base/mem.h"
#include "cluster/rng.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { NORMAL_TABLE = 1 << 16 };

struct DiSimMoe {
    DiSimMoeConfig cfg;
    DiEplbPolicy *eplb, *rearrange, *fixed;
    float *z;       /* [L][E] log-popularity */
    double *p;      /* [L][E] popularity, sums to 1 per layer */
    float *load;    /* [L][E] this step's load */
    float *expect;  /* [L][E] its expectation */
    double *per_layer, exp_max, exp_mean;
    double floor_max, floor_mean; /* a perfectly balanced placement under the same sampling noise */
    float *normals; /* a table of N(0,1) draws: per-step noise costs one table read */
    DiRng rng;
    double drift_at; /* time of the last drift update */
    int64_t calls;   /* steps offered, of which every sample_every-th is scored */
    double *trace;  /* per scored step: time, eplb max, eplb mean, static max, static mean */
    size_t n_trace, cap_trace;
};

static void normalise(DiSimMoe *m) {
    int L = m->cfg.layers, E = m->cfg.experts;
    for (int l = 0; l < L; l++) {
        double sum = 0.0;
        for (int e = 0; e < E; e++) sum += m->p[l * E + e] = exp(m->z[l * E + e]);
        for (int e = 0; e < E; e++) m->p[l * E + e] /= sum;
    }
}

static int check(const DiSimMoeConfig *c) {
    if (c->layers <= 0 || c->layers > 256 || c->experts <= 0 || c->top_k <= 0 || c->top_k > c->experts)
        return di_errorf("MoE load model: bad shape (%d layers, %d experts, top-%d)", c->layers, c->experts, c->top_k);
    if (!(c->skew >= 0.0 && c->skew <= 5.0)) return di_errorf("MoE load model: skew must be in 0..5, got %g", c->skew);
    if (c->sample_every <= 0 || 100 % c->sample_every != 0)
        return di_errorf("MoE load model: sample_every must divide the 100-step prefill window, got %d", c->sample_every);
    if (!(c->drift_tau_s > 0.0)) return di_errorf("MoE load model: drift time must be positive");
    return 0;
}

static DiEplbPolicy *make_policy(const DiSimMoeConfig *c, int redundant, int fixed) {
    DiEplbPolicyConfig pc =
        di_eplb_policy_preset(c->phase, c->layers, c->experts, c->num_groups, c->num_nodes, c->num_gpus);
    pc.redundant_per_gpu = redundant;
    pc.window_steps /= c->sample_every;
    pc.period_steps /= c->sample_every;
    pc.warmup_steps /= c->sample_every;
    if (fixed) { /* never replans: the plan for uniform load stays.  (A 1-step window would make
                  * the first plan after one step, from that step's loads: a placement informed by
                  * the popularity, not the no-EPLB baseline; it scored 1.29 where the uniform
                  * placement scores 1.89 on the same decode loads.) */
        pc.window_steps = INT_MAX;
        pc.period_steps = INT_MAX;
        pc.warmup_steps = 0;
    }
    return di_eplb_policy_create(&pc);
}

DiSimMoe *di_sim_moe_create(const DiSimMoeConfig *cfg) {
    if (!cfg) {
        di_errorf("MoE load model: NULL config");
        return NULL;
    }
    if (check(cfg) != 0) return NULL;
    DiSimMoe *m = di_calloc(1, sizeof *m, "MoE load model");
    if (!m) return NULL;
    m->cfg = *cfg;
    size_t n = (size_t)cfg->layers * (size_t)cfg->experts;
    DiEplbPolicyConfig preset =
        di_eplb_policy_preset(cfg->phase, cfg->layers, cfg->experts, cfg->num_groups, cfg->num_nodes, cfg->num_gpus);
    m->z = di_calloc(n, sizeof(float), "expert popularity");
    m->p = di_calloc(n, sizeof(double), "expert popularity");
    m->load = di_calloc(n, sizeof(float), "expert loads");
    m->expect = di_calloc(n, sizeof(float), "expected expert loads");
    m->per_layer = di_calloc((size_t)cfg->layers, sizeof(double), "per-layer moe_lb");
    m->normals = di_calloc(NORMAL_TABLE, sizeof(float), "normal table");
    if (!m->z || !m->p || !m->load || !m->expect || !m->per_layer || !m->normals) goto fail;
    m->eplb = make_policy(cfg, preset.redundant_per_gpu, 0);
    m->rearrange = m->eplb ? make_policy(cfg, 0, 0) : NULL;
    m->fixed = m->rearrange ? make_policy(cfg, 0, 1) : NULL;
    if (!m->fixed) goto fail;
    m->rng = di_rng_seed(cfg->seed);
    for (int i = 0; i < NORMAL_TABLE; i++) m->normals[i] = (float)di_rng_normal(&m->rng);
    for (size_t i = 0; i < n; i++) m->z[i] = (float)(cfg->skew * di_rng_normal(&m->rng));
    normalise(m);
    return m;
fail:
    di_error_wrap("MoE load model");
    di_sim_moe_destroy(m);
    return NULL;
}

void di_sim_moe_destroy(DiSimMoe *m) {
    if (!m) return;
    di_eplb_policy_destroy(m->eplb);
    di_eplb_policy_destroy(m->rearrange);
    di_eplb_policy_destroy(m->fixed);
    free(m->z);
    free(m->p);
    free(m->load);
    free(m->expect);
    free(m->per_layer);
    free(m->normals);
    free(m->trace);
    free(m);
}

/* Ornstein-Uhlenbeck update of the log-popularity over dt seconds (exact discretisation). */
static void drift(DiSimMoe *m, double dt) {
    double keep = exp(-dt / m->cfg.drift_tau_s), kick = m->cfg.skew * sqrt(1.0 - keep * keep);
    size_t n = (size_t)m->cfg.layers * (size_t)m->cfg.experts;
    for (size_t i = 0; i < n; i++) m->z[i] = (float)(keep * m->z[i] + kick * di_rng_normal(&m->rng));
    normalise(m);
}

static float table_normal(DiSimMoe *m, uint64_t *bits, int *left) {
    if (*left == 0) {
        *bits = di_rng_next(&m->rng);
        *left = 4;
    }
    float v = m->normals[*bits & (NORMAL_TABLE - 1)];
    *bits >>= 16;
    (*left)--;
    return v;
}

/* Keep the step's per-layer sums of max and mean GPU load for the over-time buckets. */
static int trace_add(DiSimMoe *m, double now_s, DiEplbPolicyStats e0, DiEplbPolicyStats e1, DiEplbPolicyStats f0,
                     DiEplbPolicyStats f1) {
    if (di_grow(&m->trace, &m->cap_trace, m->n_trace + 5, 5 * 4096, sizeof *m->trace, "moe_lb over time") != 0) return -1;
    double *row = m->trace + m->n_trace;
    row[0] = now_s;
    row[1] = e1.sum_max - e0.sum_max;
    row[2] = e1.sum_mean - e0.sum_mean;
    row[3] = f1.sum_max - f0.sum_max;
    row[4] = f1.sum_mean - f0.sum_mean;
    m->n_trace += 5;
    return 0;
}

int di_sim_moe_step(DiSimMoe *m, double now_s, int64_t tokens) {
    if (!m) return di_errorf("MoE load model: NULL");
    if (tokens < 0 || !isfinite(now_s)) return di_errorf("MoE load model: bad step (%lld tokens)", (long long)tokens);
    if (tokens == 0 || m->calls++ % m->cfg.sample_every != 0) return 0;
    if (now_s - m->drift_at >= 1.0) { /* drift once per simulated second */
        drift(m, now_s - m->drift_at);
        m->drift_at = now_s;
    }
    size_t n = (size_t)m->cfg.layers * (size_t)m->cfg.experts;
    double pairs = (double)tokens * m->cfg.top_k;
    uint64_t bits = 0;
    int left = 0;
    for (size_t i = 0; i < n; i++) {
        double mu = pairs * m->p[i], v = mu + sqrt(mu) * table_normal(m, &bits, &left);
        m->load[i] = v > 0.0 ? (float)v : 0.0f;
        m->expect[i] = (float)mu;
    }
    /* the noise-free score of the plan in force: each layer's mean GPU load is pairs / P */
    double agg, layer_mean = pairs / m->cfg.num_gpus;
    if (di_eplb_moe_lb(di_eplb_policy_plan(m->eplb), m->expect, m->per_layer, &agg) != 0) return -1;
    for (int l = 0; l < m->cfg.layers; l++) {
        m->exp_max += m->per_layer[l] * layer_mean;
        m->exp_mean += layer_mean;
        /* The routing-noise floor: even a placement whose expected GPU loads are all exactly
         * layer_mean sees each GPU's load vary with variance layer_mean (a sum of independent
         * expert counts of variance mu each), so max/mean ~ 1 + z_max(P) / sqrt(layer_mean) with
         * z_max(64) ~ 2.4.  Drawn with the same noise model, it tells how much of moe_lb no
         * placement can remove at this step's batch size. */
        double max = 0.0;
        for (int g = 0; g < m->cfg.num_gpus; g++) {
            double v = layer_mean + sqrt(layer_mean) * table_normal(m, &bits, &left);
            if (v > max) max = v;
        }
        m->floor_max += max;
        m->floor_mean += layer_mean;
    }
    DiEplbPolicyStats e0 = di_eplb_policy_stats(m->eplb), f0 = di_eplb_policy_stats(m->fixed);
    if (di_eplb_policy_record(m->eplb, m->load, NULL) != 0 || di_eplb_policy_record(m->rearrange, m->load, NULL) != 0 ||
        di_eplb_policy_record(m->fixed, m->load, NULL) != 0)
        return -1;
    return trace_add(m, now_s, e0, di_eplb_policy_stats(m->eplb), f0, di_eplb_policy_stats(m->fixed));
}

DiSimMoeReport di_sim_moe_report(const DiSimMoe *m) {
    DiSimMoeReport r;
    memset(&r, 0, sizeof r);
    if (!m) return r;
    r.eplb = di_eplb_policy_moe_lb(m->eplb);
    r.rearrange = di_eplb_policy_moe_lb(m->rearrange);
    r.fixed = di_eplb_policy_moe_lb(m->fixed);
    r.eplb_expected = m->exp_mean > 0 ? m->exp_max / m->exp_mean : 0.0;
    r.noise_floor = m->floor_mean > 0 ? m->floor_max / m->floor_mean : 0.0;
    size_t rows = m->n_trace / 5;
    if (rows > 0) {
        double sums[4][DI_SIM_MOE_BUCKETS] = {{0}};
        r.first_s = m->trace[0];
        r.last_s = m->trace[(rows - 1) * 5];
        double width = (r.last_s - r.first_s) / DI_SIM_MOE_BUCKETS;
        for (size_t i = 0; i < rows; i++) {
            const double *row = m->trace + i * 5;
            int b = width > 0 ? (int)((row[0] - r.first_s) / width) : 0;
            if (b >= DI_SIM_MOE_BUCKETS) b = DI_SIM_MOE_BUCKETS - 1;
            for (int k = 0; k < 4; k++) sums[k][b] += row[1 + k];
        }
        for (int b = 0; b < DI_SIM_MOE_BUCKETS; b++) {
            r.eplb_bucket[b] = sums[1][b] > 0 ? sums[0][b] / sums[1][b] : 0.0;
            r.fixed_bucket[b] = sums[3][b] > 0 ? sums[2][b] / sums[3][b] : 0.0;
        }
    }
    DiEplbPolicyStats s = di_eplb_policy_stats(m->eplb);
    r.steps = s.steps;
    r.replans = s.replans;
    r.moved_slots = s.moved_slots;
    return r;
}
