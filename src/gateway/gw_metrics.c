/* gw_metrics.c — the gateway's GET /metrics (Prometheus text 0.0.4): its requests, retries and
 * failures, each worker's health, load and routed requests, the requests of each prefill tier,
 * the tiers' quotas, and the prefill cost model the gateway fitted from the workers'
 * measurements (its coefficients, how it was fitted, the samples behind it). */
#include "gateway/gw_internal.h"

#include "base/error.h"

#include <stdio.h>

static const char *const role_names[] = {"prefill", "decode", "both"};
static const char *const fit_names[] = {"none", "linear", "full"};

static int counters(DiGateway *g, DiApiBuf *o) {
    struct {
        const char *name, *help;
        uint64_t v;
    } c[] = {
        {"requests_total", "HTTP requests received", atomic_load(&g->requests)},
        {"retries_total", "requests retried on another worker after the first gave no answer", atomic_load(&g->retries)},
        {"stream_errors_total", "answers cut by a worker failing after bytes were sent", atomic_load(&g->stream_errors)},
        {"client_aborts_total", "answers whose client left before the end (the worker's request aborted)",
         atomic_load(&g->client_aborts)},
        {"no_worker_total", "requests refused because no worker could take them", atomic_load(&g->no_worker)},
        {"pd_requests_total", "requests split into a prefill and a decode half", atomic_load(&g->pd_requests)},
        {"pd_prefill_ok_total", "prefill halves answered 200", atomic_load(&g->prefill_ok)},
        {"pd_prefill_failed_total", "prefill halves that failed (the decode worker prefilled itself)",
         atomic_load(&g->prefill_failed)},
    };
    int rc = 0;
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        rc |= di_api_buf_printf(o, "# HELP deepinfer_gateway_%s %s\n# TYPE deepinfer_gateway_%s counter\n"
                                   "deepinfer_gateway_%s %llu\n",
                                c[i].name, c[i].help, c[i].name, c[i].name, (unsigned long long)c[i].v);
    rc |= di_api_buf_printf(o, "# HELP deepinfer_gateway_responses_total answers by status class\n"
                               "# TYPE deepinfer_gateway_responses_total counter\n"
                               "deepinfer_gateway_responses_total{class=\"2xx\"} %llu\n"
                               "deepinfer_gateway_responses_total{class=\"4xx\"} %llu\n"
                               "deepinfer_gateway_responses_total{class=\"5xx\"} %llu\n",
                            (unsigned long long)atomic_load(&g->responses_2xx),
                            (unsigned long long)atomic_load(&g->responses_4xx),
                            (unsigned long long)atomic_load(&g->responses_5xx));
    rc |= di_api_buf_puts(o, "# HELP deepinfer_gateway_tier_requests_total generation requests by prefill tier of their prompt\n"
                             "# TYPE deepinfer_gateway_tier_requests_total counter\n");
    for (int t = 0; t < DI_PREFILL_TIERS; t++)
        rc |= di_api_buf_printf(o, "deepinfer_gateway_tier_requests_total{tier=\"%d\"} %llu\n", t,
                                (unsigned long long)atomic_load(&g->tier_requests[t]));
    return rc;
}

static int workers(const DiGwPool *p, DiApiBuf *o) {
    static const struct {
        const char *name, *type, *help;
    } m[] = {{"worker_healthy", "gauge", "1 while the worker is in rotation"},
             {"worker_routed_total", "counter", "requests (or prefill halves) sent to the worker"},
             {"worker_failures_total", "counter", "exchanges with the worker that failed"},
             {"worker_running", "gauge", "running requests the worker reported"},
             {"worker_queued", "gauge", "queued requests the worker reported"},
             {"worker_kv_tokens", "gauge", "context tokens of the worker's running requests"},
             {"worker_tier", "gauge", "the prefill tier the quota gives the worker (-1: not a prefill worker)"}};
    int rc = 0;
    for (size_t k = 0; k < sizeof m / sizeof m[0]; k++) {
        rc |= di_api_buf_printf(o, "# HELP deepinfer_gateway_%s %s\n# TYPE deepinfer_gateway_%s %s\n", m[k].name,
                                m[k].help, m[k].name, m[k].type);
        for (int i = 0; i < p->n; i++) {
            const DiGwWorker *w = &p->w[i];
            long long v = k == 0 ? w->healthy : k == 1 ? (long long)w->routed : k == 2 ? (long long)w->failures
                        : k == 3 ? w->load.running : k == 4 ? w->load.queued : k == 5 ? w->load.kv_tokens : w->tier;
            rc |= di_api_buf_printf(o, "deepinfer_gateway_%s{worker=\"%s\",role=\"%s\"} %lld\n", m[k].name, w->url,
                                    role_names[w->role], v);
        }
    }
    rc |= di_api_buf_puts(o, "# HELP deepinfer_gateway_worker_tier_routed_total prefill halves by worker and tier\n"
                             "# TYPE deepinfer_gateway_worker_tier_routed_total counter\n");
    for (int i = 0; i < p->n; i++)
        for (int t = 0; p->w[i].role == DI_GW_PREFILL && t < DI_PREFILL_TIERS; t++)
            rc |= di_api_buf_printf(o, "deepinfer_gateway_worker_tier_routed_total{worker=\"%s\",tier=\"%d\"} %llu\n",
                                    p->w[i].url, t, (unsigned long long)p->w[i].routed_tier[t]);
    return rc;
}

static int fit(const DiGwPool *p, DiApiBuf *o) {
    int rc = di_api_buf_printf(
        o, "# HELP deepinfer_gateway_prefill_cost_ns fitted prefill cost cost(q,c) = a q^2 + b q c + d q + e c + f ns\n"
           "# TYPE deepinfer_gateway_prefill_cost_ns gauge\n"
           "deepinfer_gateway_prefill_cost_ns{coef=\"a\"} %.9g\ndeepinfer_gateway_prefill_cost_ns{coef=\"b\"} %.9g\n"
           "deepinfer_gateway_prefill_cost_ns{coef=\"d\"} %.9g\ndeepinfer_gateway_prefill_cost_ns{coef=\"e\"} %.9g\n"
           "deepinfer_gateway_prefill_cost_ns{coef=\"f\"} %.9g\n"
           "# HELP deepinfer_gateway_prefill_cost_fit how the cost model was fitted (1 on the method in use)\n"
           "# TYPE deepinfer_gateway_prefill_cost_fit gauge\n",
        p->cost.a, p->cost.b, p->cost.d, p->cost.e, p->cost.f);
    for (int k = 0; k < 3; k++)
        rc |= di_api_buf_printf(o, "deepinfer_gateway_prefill_cost_fit{method=\"%s\"} %d\n", fit_names[k], (int)p->fit_kind == k);
    rc |= di_api_buf_printf(o, "# HELP deepinfer_gateway_prefill_cost_samples_total per-request prefill samples taken from workers\n"
                               "# TYPE deepinfer_gateway_prefill_cost_samples_total counter\n"
                               "deepinfer_gateway_prefill_cost_samples_total %llu\n"
                               "# HELP deepinfer_gateway_prefill_reply_samples_total of them, from /internal/prefill replies\n"
                               "# TYPE deepinfer_gateway_prefill_reply_samples_total counter\n"
                               "deepinfer_gateway_prefill_reply_samples_total %llu\n"
                               "# HELP deepinfer_gateway_prefill_measured_tokens_total prefill tokens in the counter deltas\n"
                               "# TYPE deepinfer_gateway_prefill_measured_tokens_total counter\n"
                               "deepinfer_gateway_prefill_measured_tokens_total %.0f\n",
                            (unsigned long long)p->fit_total, (unsigned long long)p->reply_samples_total, p->delta_tokens);
    if (p->have_quota) {
        rc |= di_api_buf_puts(o, "# HELP deepinfer_gateway_prefill_quota prefill workers given to each tier\n"
                                 "# TYPE deepinfer_gateway_prefill_quota gauge\n");
        for (int t = 0; t < DI_PREFILL_TIERS; t++)
            rc |= di_api_buf_printf(o, "deepinfer_gateway_prefill_quota{tier=\"%d\"} %d\n", t, p->quota.quota[t]);
    }
    return rc;
}

int di_gw_metrics_render(DiGateway *g, DiApiBuf *out) {
    if (!g || !out) return di_errorf("gateway metrics: NULL argument");
    int rc = counters(g, out);
    pthread_mutex_lock(&g->pool.lock);
    rc |= workers(&g->pool, out);
    rc |= fit(&g->pool, out);
    rc |= di_api_buf_printf(out, "# HELP deepinfer_gateway_cache_aware_picks_total decode / whole-request choices made for "
                                 "the longest prefix a worker holds\n# TYPE deepinfer_gateway_cache_aware_picks_total counter\n"
                                 "deepinfer_gateway_cache_aware_picks_total %llu\n",
                            (unsigned long long)g->pool.cache_picks);
    pthread_mutex_unlock(&g->pool.lock);
    return rc ? di_errorf("gateway metrics: out of memory") : 0;
}
