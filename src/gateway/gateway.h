/* gateway.h — `deepinfer gateway`: the OpenAI / Anthropic HTTP front of a set of workers
 * (`deepinfer serve`), routing each request with the cluster balancers (serving.md §5.2, §6,
 * §7; pd-protocol.md).
 *
 * A reverse proxy: the client's body is parsed once (recipe/api_request.h) and tokenized with
 * the model's tokenizer to know the prompt length (the prefill tier, the decode balancer's p),
 * then forwarded unchanged, and the worker's answer is streamed back unchanged (the SSE is
 * byte for byte the worker's).  With both prefill and decode workers, a request goes to a
 * decode worker chosen by the decode balancer with `X-DI-Room`, and concurrently
 * POST /internal/prefill to a prefill worker chosen by the prefill balancer; otherwise (only
 * `both` workers, or one pool empty) whole requests go to one worker (plain data parallel).
 * /v1/models, /health and /metrics are the gateway's own.  Heartbeats (GET /internal/load)
 * keep the load and the health of every worker (gw_pool.h).  Failures: a worker that fails
 * before sending a byte is left out and the request retried once on another; after bytes were
 * streamed the client gets an error event and the stream ends; a client that leaves aborts the
 * worker's request (the worker frees its state).
 *
 * Threads: libmicrohttpd with a thread per connection (a proxied request blocks on its
 * worker's bytes), one libcurl thread per upstream exchange, one heartbeat thread. */
#ifndef DI_GATEWAY_GATEWAY_H
#define DI_GATEWAY_GATEWAY_H

#include "gateway/gw_pool.h"

typedef struct {
    const char *host;               /* listen address, default 127.0.0.1 */
    int port;                       /* 0: any free port */
    const char *model_dir;          /* the model's tokenizer.json (required) */
    const char *model_name;         /* served name workers must report */
    const char *const *urls;        /* workers: base URLs http://HOST:PORT */
    const DiGwRole *roles;
    int n_workers;
    int heartbeat_ms;               /* GET /internal/load period */
    double connect_timeout_s, idle_timeout_s, request_timeout_s;
    int room_deadline_ms;           /* PD: how long a decode worker waits for the KV */
    const char *api_key;            /* NULL/"": none; else clients must send it (all but /health), and
                                     * the gateway sends it on its heartbeats (workers share the key) */
    size_t max_body_bytes;
    unsigned max_connections;
    DiGwPoolConfig pool;
    /* PD: the token of the cluster key the workers share (kv_msg.h di_kv_cluster_token: 64 hex
     * digits), sent as X-DI-Cluster-Key with /internal/prefill and the decode request; NULL: none. */
    const char *cluster_token;
} DiGatewayConfig;

typedef struct DiGateway DiGateway;

void di_gateway_config_defaults(DiGatewayConfig *cfg);
/* Start: one heartbeat round, then listen.  NULL with the cause. */
DiGateway *di_gateway_start(const DiGatewayConfig *cfg);
int di_gateway_port(const DiGateway *g);
void di_gateway_stop(DiGateway *g);

#endif
