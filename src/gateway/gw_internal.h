/* gw_internal.h — what the gateway's modules share (not its interface):
 *   gw_server.c     life cycle, the HTTP front, the proxying of requests
 *   gw_heartbeat.c  the heartbeat thread (GET /internal/load of every worker, the period)
 *   gw_metrics.c    GET /metrics
 *   gw_pool.c       workers, health, routing;  gw_upstream.c  one exchange with a worker */
#ifndef DI_GATEWAY_GW_INTERNAL_H
#define DI_GATEWAY_GW_INTERNAL_H

#include "gateway/gateway.h"
#include "gateway/gw_upstream.h"
#include "recipe/api_buf.h"
#include "serve/backend_text.h"

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>

struct DiGateway {
    DiGatewayConfig cfg;
    DiGwPool pool;
    DiServeText *text;
    struct MHD_Daemon *daemon;
    int port;
    pthread_t heartbeat;
    bool heartbeat_started;
    atomic_bool quit;
    pthread_mutex_t quit_lock;
    pthread_cond_t quit_cond;
    /* counters for /metrics */
    _Atomic uint64_t requests, responses_2xx, responses_4xx, responses_5xx;
    _Atomic uint64_t retries, stream_errors, client_aborts, no_worker;
    _Atomic uint64_t pd_requests, prefill_ok, prefill_failed;
    _Atomic uint64_t tier_requests[DI_PREFILL_TIERS];
};

DiGwUpstreamLimits di_gw_limits(const DiGateway *g);

/* gw_heartbeat.c: one round over every worker (blocking, bounded by the heartbeat period). */
void di_gw_heartbeat_round(DiGateway *g);
void *di_gw_heartbeat_main(void *arg);

/* gw_metrics.c: the Prometheus text. */
int di_gw_metrics_render(DiGateway *g, DiApiBuf *out);

#endif
