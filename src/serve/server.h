/* server.h — the HTTP API server: OpenAI Chat Completions / Completions / Responses and
 * Anthropic Messages over one backend (backend.h), plus /v1/models[/{id}], /health, /metrics,
 * /openapi.json, /version, /tokenize and /detokenize (vLLM's shapes).
 *
 * Built on GNU libmicrohttpd (Debian libmicrohttpd-dev): one internal polling thread (epoll)
 * owns every socket, so a slow reader only delays its own bytes; request bodies are parsed and
 * prompts tokenized on a few worker threads (server_work.h), never on the HTTP or the engine
 * thread; generation requests are handed to the backend, and a connection waiting for output
 * is *suspended* (it costs no polling) until the backend's thread appends output and resumes
 * it.  A client must send a request's headers and body within read_timeout_s (slow-loris
 * clients cannot hold connection slots).  See README for why libmicrohttpd. */
#ifndef DI_SERVE_SERVER_H
#define DI_SERVE_SERVER_H

#include "recipe/api_buf.h"
#include "serve/backend.h"

#include <jansson.h>
#include <stddef.h>

/* The worker's part in prefill/decode disaggregation (issue 24; server_pd.c): both = a whole
 * server; prefill also serves POST /internal/prefill; decode also listens for KV transfers and
 * honours X-DI-Room.  Every role serves every client endpoint. */
typedef enum { DI_ROLE_BOTH = 0, DI_ROLE_PREFILL, DI_ROLE_DECODE } DiServerRole;

typedef struct {
    const char *host;             /* default 127.0.0.1 */
    int port;                     /* 0: any free port (di_server_port tells which) */
    const char *api_key;          /* NULL/"": no authentication */
    size_t max_body_bytes;        /* larger bodies get 413 */
    int max_queue;                /* backend queue length at which new requests get 429 */
    double request_timeout_s;     /* whole-request deadline; 0 = none */
    unsigned idle_timeout_s;      /* idle connection timeout (any byte resets it) */
    double read_timeout_s;        /* headers + body of a request, from its first byte; 0 = none */
    int workers;                  /* threads that parse, tokenize and submit requests */
    unsigned max_connections;
    double shutdown_grace_s;      /* di_server_stop waits this long for in-flight requests */
    int retry_after_s;            /* Retry-After of a 429 */
    /* Optional: more Prometheus text for /metrics, appended after the server's own on an HTTP
     * thread (`deepinfer serve` installs the EPLB driver's, which lives outside this library);
     * 0, or -1 with the cause (the scrape then answers 500). */
    int (*extra_metrics)(void *user, DiApiBuf *out);
    void *extra_metrics_user;
    DiServerRole role;            /* prefill and decode need the backend's KV block cache */
    const char *transfer_host;    /* decode: the KV transfer listener's IPv4 address (NULL: host) */
    int transfer_port;            /* decode: its port, 0 = any free one */
    /* PD: the cluster key the gateway and the workers share (NULL: none).  With one, a KV
     * transfer registers only with its proof (kv_transfer.h) and /internal/prefill and X-DI-Room
     * requests need its token in X-DI-Cluster-Key (kv_msg.h); not copied: it must outlive the server. */
    const uint8_t *cluster_key;
    size_t cluster_key_len;
} DiServerConfig;

typedef struct DiServer DiServer;

void di_server_config_defaults(DiServerConfig *cfg);
/* Start serving (returns once the socket listens); NULL with an error naming the cause. */
DiServer *di_server_start(const DiServerConfig *cfg, const DiBackend *backend);
int di_server_port(const DiServer *srv);
const char *di_server_role_name(DiServerRole role);
/* The PD fields of GET /internal/load (the PD contract): role, block_tokens, kv_identity,
 * transfer ("HOST:PORT" of a decode worker's listener, else null), rooms_waiting and
 * rooms_pinned_blocks, set on `obj`.  0, or -1 with the cause. */
int di_server_pd_load(DiServer *srv, json_t *obj);
/* The most block keys a load answer lists (prefix_keys: the hottest of the RAM tier). */
#define DI_LOAD_PREFIX_KEYS 512
/* Graceful stop: refuse new generation requests (503; /health answers 503 too, the listener
 * stays open while draining), let in-flight requests finish for shutdown_grace_s, abort the
 * rest, stop accepting, close everything and free the server. */
void di_server_stop(DiServer *srv);

#endif
