/* gw_heartbeat.c — the gateway's heartbeats: GET /internal/load of every worker each period,
 * all in parallel, each bounded by the period; answers and failures go to the pool (gw_pool.h:
 * two missed in a row take a worker out, the next answer puts it back), then the pool's
 * period (quota controller, cost-model refit). */
#include "gateway/gw_internal.h"

#include "base/error.h"
#include "base/log.h"
#include "base/mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Worker i's answer to a started GET /internal/load, into the pool. */
static void collect(DiGateway *g, int i, DiGwUpstream *u) {
    char why[300];
    if (!u) {
        snprintf(why, sizeof why, "heartbeat: %s", di_error_message());
        di_gw_pool_heartbeat(&g->pool, i, NULL, why);
        return;
    }
    int status = 0;
    char ctype[64], *body = NULL;
    size_t len = 0;
    DiGwLoad load;
    if (di_gw_upstream_head(u, &status, ctype, sizeof ctype) != 0 || di_gw_upstream_body(u, 1 << 20, &body, &len) != 0)
        snprintf(why, sizeof why, "heartbeat: %s", di_error_message());
    else if (status != 200)
        snprintf(why, sizeof why, "heartbeat: GET /internal/load answered %d", status);
    else if (di_gw_load_parse(body, len, &load) != 0)
        snprintf(why, sizeof why, "heartbeat: %s", di_error_message());
    else
        why[0] = 0;
    free(body);
    di_gw_pool_heartbeat(&g->pool, i, why[0] ? NULL : &load, why);
}

void di_gw_heartbeat_round(DiGateway *g) {
    int n = g->pool.n;
    DiGwUpstream **up = di_calloc((size_t)n, sizeof *up, "heartbeats");
    if (!up) return;
    double period = g->cfg.heartbeat_ms / 1000.0;
    DiGwUpstreamLimits lim = {.connect_timeout_s = period, .idle_timeout_s = period, .total_timeout_s = period};
    char auth[600];
    const char *headers[] = {auth, NULL};
    bool key = g->cfg.api_key && *g->cfg.api_key;
    if (key) snprintf(auth, sizeof auth, "Authorization: Bearer %s", g->cfg.api_key);
    for (int i = 0; i < n; i++)
        up[i] = di_gw_upstream_start("GET", g->pool.w[i].url, "/internal/load", NULL, 0, key ? headers : NULL, &lim);
    for (int i = 0; i < n; i++) {
        collect(g, i, up[i]);
        di_gw_upstream_free(up[i]);
    }
    free(up);
}

void *di_gw_heartbeat_main(void *arg) {
    DiGateway *g = arg;
    double last = mono_now();
    while (!atomic_load(&g->quit)) {
        double next = last + g->cfg.heartbeat_ms / 1000.0;
        pthread_mutex_lock(&g->quit_lock);
        while (!atomic_load(&g->quit) && mono_now() < next) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            double left = next - mono_now(), wake = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + (left > 0 ? left : 0);
            ts.tv_sec = (time_t)wake;
            ts.tv_nsec = (long)((wake - (double)ts.tv_sec) * 1e9);
            pthread_cond_timedwait(&g->quit_cond, &g->quit_lock, &ts);
        }
        pthread_mutex_unlock(&g->quit_lock);
        if (atomic_load(&g->quit)) break;
        di_gw_heartbeat_round(g);
        double now = mono_now();
        di_gw_pool_period(&g->pool, now - last);
        last = now;
    }
    return NULL;
}
