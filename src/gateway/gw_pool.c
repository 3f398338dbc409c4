/* gw_pool.c — workers, health and the routing decisions of the gateway (see gw_pool.h). */
#include "gateway/gw_pool.h"

#include "base/error.h"
#include "base/log.h"
#include "base/mem.h"

#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void di_gw_pool_config_defaults(DiGwPoolConfig *cfg) {
    if (!cfg) return;
    memset(cfg, 0, sizeof *cfg);
    cfg->max_requests = 1024;
    cfg->max_kv_tokens = (int64_t)1 << 32;
    cfg->lookahead_steps = 16;
    cfg->policy = DI_DECODE_LB_BALANCED;
    cfg->quota_alpha = 0.3;
    cfg->quota_horizon_s = 1.0;
    cfg->cache_slack = 4;
}

/* Prefill workers take tiers in index order: tier 0 the first quota[0], then tier 1... */
static void assign_tiers(DiGwPool *p) {
    int t = 0, left = p->have_quota ? p->quota.quota[0] : 0;
    for (int i = 0; i < p->n; i++) {
        p->w[i].tier = -1;
        if (p->w[i].role != DI_GW_PREFILL || !p->have_quota) continue;
        while (left == 0 && t + 1 < DI_PREFILL_TIERS) left = p->quota.quota[++t];
        p->w[i].tier = t;
        if (left > 0) left--;
    }
}

int di_gw_pool_init(DiGwPool *p, const DiGwPoolConfig *cfg, const char *const *urls, const DiGwRole *roles, int n,
                    const char *model) {
    if (!p || !cfg || !urls || !roles || !model) return di_errorf("gateway pool: NULL argument");
    memset(p, 0, sizeof *p);
    if (n <= 0 || n > 4096) return di_errorf("gateway: 1..4096 workers are needed, got %d", n);
    if (strlen(model) >= sizeof p->model) return di_errorf("gateway: model name longer than %zu bytes", sizeof p->model - 1);
    if (cfg->max_requests <= 0 || cfg->max_kv_tokens <= 0 || cfg->lookahead_steps < 0)
        return di_errorf("gateway: decode balancer capacities must be positive");
    p->w = di_calloc((size_t)n, sizeof *p->w, "gateway workers");
    p->last_samples_total = di_calloc((size_t)n, sizeof *p->last_samples_total, "gateway samples");
    p->last_prefill_tokens = di_calloc((size_t)n, sizeof *p->last_prefill_tokens, "gateway counters");
    p->last_prefill_seconds = di_calloc((size_t)n, sizeof *p->last_prefill_seconds, "gateway counters");
    if (!p->w || !p->last_samples_total || !p->last_prefill_tokens || !p->last_prefill_seconds) {
        di_gw_pool_free(p);
        return -1;
    }
    p->n = n;
    p->cfg = *cfg;
    snprintf(p->model, sizeof p->model, "%s", model);
    for (int i = 0; i < n; i++) {
        if (!urls[i] || strlen(urls[i]) >= sizeof p->w[i].url || (unsigned)roles[i] > DI_GW_BOTH) {
            di_gw_pool_free(p);
            return di_errorf("gateway: worker %d: bad URL or role", i);
        }
        snprintf(p->w[i].url, sizeof p->w[i].url, "%s", urls[i]);
        p->w[i].role = roles[i];
        p->w[i].missed = DI_GW_MISSES_OUT; /* out until its first heartbeat answers */
        snprintf(p->w[i].why, sizeof p->w[i].why, "no heartbeat answered yet");
        p->n_prefill += roles[i] == DI_GW_PREFILL;
    }
    if (p->n_prefill > 0) {
        DiPrefillQuotaConfig qc = {.num_instances = p->n_prefill, .ewma_alpha = cfg->quota_alpha,
                                   .horizon_s = cfg->quota_horizon_s};
        if (di_prefill_quota_init(&p->quota, &qc) != 0) {
            di_gw_pool_free(p);
            return di_error_wrap("gateway: prefill quotas");
        }
        p->have_quota = true;
    }
    assign_tiers(p);
    pthread_mutex_init(&p->lock, NULL);
    return 0;
}

void di_gw_pool_free(DiGwPool *p) {
    if (!p) return;
    if (p->w && p->n > 0) pthread_mutex_destroy(&p->lock);
    free(p->w);
    free(p->last_samples_total);
    free(p->last_prefill_tokens);
    free(p->last_prefill_seconds);
    memset(p, 0, sizeof *p);
}

bool di_gw_pool_pd(const DiGwPool *p) {
    bool pre = false, dec = false;
    for (int i = 0; p && i < p->n; i++) {
        pre |= p->w[i].role == DI_GW_PREFILL;
        dec |= p->w[i].role == DI_GW_DECODE;
    }
    return pre && dec;
}

static void set_out(DiGwPool *p, int i, const char *why) {
    DiGwWorker *w = &p->w[i];
    if (w->healthy) DI_WARN("gateway: worker %s leaves rotation: %s", w->url, why);
    w->healthy = false;
    w->pending = w->pending_kv = 0;
    snprintf(w->why, sizeof w->why, "%s", why);
}

/* The new prefill samples of a load answer into the fit's ring, and its counter deltas. */
/* One (q, c, ns) into the fit's ring (the newest DI_GW_FIT_SAMPLES are kept). */
static void add_sample(DiGwPool *p, int64_t q, int64_t c, double ns) {
    size_t slot = (size_t)(p->fit_total % DI_GW_FIT_SAMPLES);
    p->fit_q[slot] = q;
    p->fit_c[slot] = c;
    p->fit_ns[slot] = ns;
    p->fit_total++;
}

static void take_samples(DiGwPool *p, int i, const DiGwLoad *l) {
    int64_t fresh = l->samples_total - p->last_samples_total[i];
    if (fresh < 0 || !p->w[i].seen) fresh = l->samples_total; /* a restarted worker counts anew */
    if (fresh > l->n_samples) fresh = l->n_samples;
    if (p->w[i].reply_samples && strcmp(l->role, "prefill") == 0) fresh = 0; /* its replies gave them */
    for (int k = l->n_samples - (int)fresh; k < l->n_samples; k++) add_sample(p, l->sample_q[k], l->sample_c[k], l->sample_s[k] * 1e9);
    p->last_samples_total[i] = l->samples_total;
    int64_t dt = l->prefill_tokens - p->last_prefill_tokens[i];
    double ds = l->prefill_seconds - p->last_prefill_seconds[i];
    if (p->w[i].seen && dt > 0 && ds > 0) {
        p->delta_tokens += (double)dt;
        p->delta_seconds += ds;
    }
    p->last_prefill_tokens[i] = l->prefill_tokens;
    p->last_prefill_seconds[i] = l->prefill_seconds;
}

static bool role_fits(DiGwRole want, const char *got) {
    if (strcmp(got, "both") == 0) return true; /* a both worker serves every endpoint */
    return (want == DI_GW_PREFILL && strcmp(got, "prefill") == 0) || (want == DI_GW_DECODE && strcmp(got, "decode") == 0);
}

void di_gw_pool_heartbeat(DiGwPool *p, int i, const DiGwLoad *load, const char *why) {
    if (!p || i < 0 || i >= p->n) return;
    pthread_mutex_lock(&p->lock);
    DiGwWorker *w = &p->w[i];
    char msg[256];
    if (!load) {
        if (++w->missed >= DI_GW_MISSES_OUT) set_out(p, i, why ? why : "heartbeat failed");
    } else if (strcmp(load->model, p->model) != 0) {
        snprintf(msg, sizeof msg, "serves model '%.100s', not '%.100s'", load->model, p->model);
        set_out(p, i, msg);
    } else if (!role_fits(w->role, load->role)) {
        snprintf(msg, sizeof msg, "reports role '%s', configured as another", load->role);
        set_out(p, i, msg);
    } else {
        take_samples(p, i, load);
        if (!w->healthy) DI_INFO("gateway: worker %s joins rotation", w->url);
        w->load = *load;
        w->healthy = w->seen = true;
        w->missed = 0;
        w->pending = w->pending_kv = 0;
        w->why[0] = 0;
    }
    pthread_mutex_unlock(&p->lock);
}

void di_gw_pool_refused(DiGwPool *p, int i, const char *why) {
    if (!p || i < 0 || i >= p->n) return;
    pthread_mutex_lock(&p->lock);
    p->w[i].failures++;
    p->w[i].missed = DI_GW_MISSES_OUT;
    set_out(p, i, why ? why : "refused");
    pthread_mutex_unlock(&p->lock);
}

int di_gw_pool_healthy(DiGwPool *p) {
    int n = 0;
    if (!p) return 0;
    pthread_mutex_lock(&p->lock);
    for (int i = 0; i < p->n; i++) n += p->w[i].healthy;
    pthread_mutex_unlock(&p->lock);
    return n;
}

bool di_gw_worker_splits(const DiGwWorker *w, DiGwRole half) {
    const char *want = half == DI_GW_PREFILL ? "prefill" : "decode";
    return w && w->healthy && w->role == half && strcmp(w->load.role, want) == 0;
}

bool di_gw_pool_decode_split(DiGwPool *p, int i, char *transfer, size_t size) {
    if (!p || i < 0 || i >= p->n || !transfer || !size) return false;
    pthread_mutex_lock(&p->lock);
    bool split = di_gw_pool_pd(p) && di_gw_worker_splits(&p->w[i], DI_GW_DECODE);
    snprintf(transfer, size, "%s", split ? p->w[i].load.transfer : "");
    pthread_mutex_unlock(&p->lock);
    return split;
}

/* ---- decode ------------------------------------------------------------------------------ */

static bool decode_candidate(const DiGwPool *p, int i, bool pd, int exclude) {
    const DiGwWorker *w = &p->w[i];
    return i != exclude && w->healthy && (!pd || w->role != DI_GW_PREFILL);
}

/* The decode balancer over the workers map[0, G): an index into map, or -1. */
static int lb_pick(DiGwPool *p, const int *map, int G, int64_t prompt_tokens) {
    DiDecodeLb lb;
    DiDecodeLbConfig dc = {.num_ranks = G, .lookahead_steps = p->cfg.lookahead_steps,
                           .max_requests = p->cfg.max_requests, .max_kv_tokens = p->cfg.max_kv_tokens,
                           .policy = p->cfg.policy};
    if (di_decode_lb_init(&lb, &dc) != 0) return -1;
    for (int g = 0; g < G; g++) {
        const DiGwWorker *w = &p->w[map[g]];
        /* requests waiting for their room's KV are the balancer's pending transfers */
        lb.ranks[g] = (DiDecodeRank){.n = w->load.running + w->load.queued, .kv = w->load.kv_tokens,
                                     .pending = w->pending + w->load.rooms_waiting, .pending_kv = w->pending_kv};
    }
    int g = di_decode_lb_pick(&lb, prompt_tokens);
    di_decode_lb_free(&lb);
    return g;
}

static int64_t load_of(const DiGwWorker *w) {
    return w->load.running + w->load.queued + w->pending + w->load.rooms_waiting;
}

/* Leading blocks of keys[0, n) the worker reported holding. */
static int prefix_match(const DiGwWorker *w, const uint64_t *keys, int n) {
    int m = 0;
    while (m < n && di_gw_load_has_key(&w->load, keys[m])) m++;
    return m;
}

/* The cache-aware choice among map[0, G) (see gw_pool.h): a worker index, or -1 when no candidate
 * holds a prefix or none of the holders within the slack has capacity.  Reorders map. */
static int cached_pick(DiGwPool *p, int *map, int G, int64_t prompt_tokens, const uint64_t *keys, int n_keys) {
    int best = 0, holders = 0;
    int64_t least = INT64_MAX;
    for (int g = 0; g < G; g++) {
        int m = prefix_match(&p->w[map[g]], keys, n_keys);
        best = m > best ? m : best;
        least = load_of(&p->w[map[g]]) < least ? load_of(&p->w[map[g]]) : least;
    }
    if (best == 0) return -1;
    for (int g = 0; g < G; g++) /* the holders within the slack to the front */
        if (prefix_match(&p->w[map[g]], keys, n_keys) == best && load_of(&p->w[map[g]]) <= least + p->cfg.cache_slack) {
            int t = map[holders];
            map[holders++] = map[g];
            map[g] = t;
        }
    int g = holders ? lb_pick(p, map, holders, prompt_tokens) : -1;
    return g >= 0 ? map[g] : -1;
}

int di_gw_pool_pick_decode_cached(DiGwPool *p, int64_t prompt_tokens, int exclude, const uint64_t *keys, int n_keys) {
    if (!p || !p->w) return di_errorf("gateway pool: not initialised");
    if (prompt_tokens < 0) return di_errorf("gateway: negative prompt length");
    if (n_keys < 0 || (n_keys > 0 && !keys)) return di_errorf("gateway: bad prefix keys (%d)", n_keys);
    pthread_mutex_lock(&p->lock);
    bool pd = di_gw_pool_pd(p);
    int *map = malloc((size_t)p->n * sizeof *map), G = 0, pick = -1;
    for (int i = 0; map && i < p->n; i++)
        if (decode_candidate(p, i, pd, exclude)) map[G++] = i;
    if (!map) {
        di_errorf("gateway: out of memory");
    } else if (G == 0) {
        di_errorf("no %sworker is in rotation", pd ? "decode " : "");
    } else if ((pick = n_keys > 0 ? cached_pick(p, map, G, prompt_tokens, keys, n_keys) : -1) >= 0) {
        p->cache_picks++;
    } else {
        int g = lb_pick(p, map, G, prompt_tokens);
        pick = g >= 0 ? map[g] : -1;
    }
    if (pick >= 0) {
        p->w[pick].pending++;
        p->w[pick].pending_kv += prompt_tokens;
        p->w[pick].routed++;
    }
    free(map);
    pthread_mutex_unlock(&p->lock);
    return pick;
}

int di_gw_pool_pick_decode(DiGwPool *p, int64_t prompt_tokens, int exclude) {
    return di_gw_pool_pick_decode_cached(p, prompt_tokens, exclude, NULL, 0);
}

bool di_gw_pool_kv_identity(DiGwPool *p, uint64_t *fp_lo, uint64_t *fp_hi, int *block_tokens) {
    if (!p || !p->w || !fp_lo || !fp_hi || !block_tokens) return false;
    bool found = false;
    pthread_mutex_lock(&p->lock);
    for (int i = 0; i < p->n && !found; i++) {
        const DiGwLoad *l = &p->w[i].load;
        if (!p->w[i].healthy || !l->has_identity || l->block_tokens <= 0 || l->block_tokens > (1 << 20)) continue;
        *fp_lo = l->identity_lo;
        *fp_hi = l->identity_hi;
        *block_tokens = (int)l->block_tokens;
        found = true;
    }
    pthread_mutex_unlock(&p->lock);
    return found;
}

void di_gw_pool_decode_done(DiGwPool *p, int i, int64_t prompt_tokens) {
    if (!p || i < 0 || i >= p->n) return;
    pthread_mutex_lock(&p->lock);
    DiGwWorker *w = &p->w[i];
    if (w->pending > 0) { /* not yet folded into a heartbeat's load */
        w->pending--;
        w->pending_kv = w->pending_kv > prompt_tokens ? w->pending_kv - prompt_tokens : 0;
    }
    pthread_mutex_unlock(&p->lock);
}

/* ---- prefill ----------------------------------------------------------------------------- */

/* Predicted cost of a prefill: the fitted model, else (no fit yet) the token count as a
 * unit-less proxy that still orders the choices. */
static double prefill_cost(const DiGwPool *p, int64_t q, int64_t c) {
    if (p->fit_kind == DI_GW_FIT_NONE) return (double)q;
    double ns = di_prefill_cost_ns(&p->cost, q, c);
    return isfinite(ns) && ns > 0 ? ns : (double)q;
}

int di_gw_pool_pick_prefill(DiGwPool *p, int64_t q, int64_t c, int exclude, int *tier, double *cost_ns) {
    if (!p || !p->w || !tier || !cost_ns) return di_errorf("gateway pool: NULL argument");
    if (q < 0 || c < 0 || q > INT64_MAX - c) return di_errorf("gateway: bad prefill length");
    int t = di_prefill_tier(q + c);
    if (t < 0) return -1;
    pthread_mutex_lock(&p->lock);
    double cost = prefill_cost(p, q, c);
    int best = -1;
    for (int pass = 0; pass < 2 && best < 0; pass++) /* its tier's instances, then any (lending) */
        for (int i = 0; i < p->n; i++) {
            const DiGwWorker *w = &p->w[i];
            if (i == exclude || !di_gw_worker_splits(w, DI_GW_PREFILL) || (pass == 0 && w->tier != t)) continue;
            if (best < 0 || w->prefill_inflight_ns < p->w[best].prefill_inflight_ns ||
                (w->prefill_inflight_ns == p->w[best].prefill_inflight_ns &&
                 w->load.queued + w->load.running < p->w[best].load.queued + p->w[best].load.running))
                best = i;
        }
    if (best >= 0) {
        p->w[best].prefill_inflight_ns += cost;
        p->w[best].routed++;
        p->w[best].routed_tier[t]++;
        p->tier_inflight_ns[t] += cost;
        p->arrivals[t] += 1;
        p->tier_cost_sum[t] += cost;
        p->routed_tier[t]++;
        *tier = t;
        *cost_ns = cost;
    } else {
        di_errorf("no prefill worker is in rotation");
    }
    pthread_mutex_unlock(&p->lock);
    return best;
}

int di_gw_pool_prefill_sample(DiGwPool *p, int i, int64_t q, int64_t c, double seconds) {
    if (!p || !p->w || i < 0 || i >= p->n) return di_errorf("gateway pool: no worker %d for a prefill sample", i);
    if (q <= 0 || c < 0 || !(seconds > 0 && seconds < 86400))
        return di_errorf("gateway: a prefill sample needs q > 0, c >= 0 and 0 < seconds < 86400 (got %lld, %lld, %g)",
                         (long long)q, (long long)c, seconds);
    pthread_mutex_lock(&p->lock);
    add_sample(p, q, c, seconds * 1e9);
    p->reply_samples_total++;
    p->w[i].reply_samples = true;
    pthread_mutex_unlock(&p->lock);
    return 0;
}

void di_gw_pool_prefill_done(DiGwPool *p, int i, int tier, double cost_ns) {
    if (!p || i < 0 || i >= p->n || tier < 0 || tier >= DI_PREFILL_TIERS) return;
    pthread_mutex_lock(&p->lock);
    p->w[i].prefill_inflight_ns = fmax(0.0, p->w[i].prefill_inflight_ns - cost_ns);
    p->tier_inflight_ns[tier] = fmax(0.0, p->tier_inflight_ns[tier] - cost_ns);
    pthread_mutex_unlock(&p->lock);
}

/* ---- the period: quotas and the fit -------------------------------------------------------- */

/* The full fit when the samples determine it with no negative coefficient (a negative one would
 * make the chunk solver refuse the model); the reason otherwise, at debug level. */
static bool fit_full(DiGwPool *p, size_t n) {
    DiPrefillCost m;
    if (n < 5) return false;
    if (di_prefill_cost_fit(p->fit_q, p->fit_c, p->fit_ns, n, 1, &m) != 0) {
        DI_DEBUG("gateway: full prefill cost fit on %zu samples: %s", n, di_error_message());
        return false;
    }
    if (!(m.a >= 0 && m.b >= 0 && m.d >= 0 && m.e >= 0 && m.f >= 0 && m.a + m.b + m.d + m.e > 0)) {
        DI_DEBUG("gateway: full prefill cost fit on %zu samples has a negative coefficient (a %g, b %g, d %g, "
                 "e %g, f %g)", n, m.a, m.b, m.d, m.e, m.f);
        return false;
    }
    p->cost = m;
    p->fit_kind = DI_GW_FIT_FULL;
    return true;
}

static void refit(DiGwPool *p) {
    size_t n = p->fit_total < DI_GW_FIT_SAMPLES ? (size_t)p->fit_total : DI_GW_FIT_SAMPLES;
    if (fit_full(p, n)) {
    } else if (p->delta_tokens > 0 && p->delta_seconds > 0) {
        p->cost = (DiPrefillCost){.d = p->delta_seconds * 1e9 / p->delta_tokens};
        p->fit_kind = DI_GW_FIT_LINEAR;
    }
}

void di_gw_pool_period(DiGwPool *p, double dt_s) {
    if (!p || !p->w || !(dt_s > 0)) return;
    pthread_mutex_lock(&p->lock);
    refit(p);
    if (p->have_quota) {
        double mean[DI_PREFILL_TIERS];
        for (int t = 0; t < DI_PREFILL_TIERS; t++) mean[t] = p->arrivals[t] > 0 ? p->tier_cost_sum[t] / p->arrivals[t] : 0;
        if (di_prefill_quota_update(&p->quota, p->tier_inflight_ns, p->arrivals, mean, dt_s) == 0) assign_tiers(p);
        memset(p->arrivals, 0, sizeof p->arrivals);
        memset(p->tier_cost_sum, 0, sizeof p->tier_cost_sum);
    }
    pthread_mutex_unlock(&p->lock);
}
