/* server.h — the HTTP API server: OpenAI Chat Completions / Completions / Responses and
 * Anthropic Messages over one backend (backend.h), plus /v1/models, /health, /metrics and
 * /openapi.json.
 *
 * Built on GNU libmicrohttpd (Debian libmicrohttpd-dev): one internal polling thread (epoll)
 * owns every socket, so a slow reader only delays its own bytes; generation requests are
 * handed to the backend, and a connection waiting for output is *suspended* (it costs no
 * polling) until the backend's thread appends output and resumes it.  See README for why
 * libmicrohttpd. */
#ifndef DI_SERVE_SERVER_H
#define DI_SERVE_SERVER_H

#include "serve/backend.h"

#include <stddef.h>

typedef struct {
    const char *host;             /* default 127.0.0.1 */
    int port;                     /* 0: any free port (di_server_port tells which) */
    const char *api_key;          /* NULL/"": no authentication */
    size_t max_body_bytes;        /* larger bodies get 413 */
    int max_queue;                /* backend queue length at which new requests get 429 */
    double request_timeout_s;     /* whole-request deadline; 0 = none */
    unsigned idle_timeout_s;      /* idle connection timeout */
    unsigned max_connections;
    double shutdown_grace_s;      /* di_server_stop waits this long for in-flight requests */
    int retry_after_s;            /* Retry-After of a 429 */
} DiServerConfig;

typedef struct DiServer DiServer;

void di_server_config_defaults(DiServerConfig *cfg);
/* Start serving (returns once the socket listens); NULL with an error naming the cause. */
DiServer *di_server_start(const DiServerConfig *cfg, const DiBackend *backend);
int di_server_port(const DiServer *srv);
/* Graceful stop: stop accepting, let in-flight requests finish for shutdown_grace_s, abort
 * the rest, close everything and free the server. */
void di_server_stop(DiServer *srv);

#endif
