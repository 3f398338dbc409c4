/* server.c — the HTTP API server over libmicrohttpd (see server.h).
 *
 * Request life cycle (one Exchange per HTTP request):
 *   1. MHD calls on_request with the headers: route, authenticate, allocate the Exchange.
 *   2. Body chunks are appended (past max_body_bytes they are dropped and 413 follows).
 *   3. On the last call the body is parsed into a DiApiRequest and submitted to the backend.
 *      - streaming: a callback response is queued at once; its reader hands out the SSE bytes
 *        the backend thread appended, and suspends the connection when there are none yet;
 *      - non-streaming: the connection is suspended until FINISH, then the JSON is queued.
 *   4. The backend thread calls on_event: encode, append, resume the connection.
 *   5. MHD's completion callback (normal end or client gone) aborts an unfinished request.
 *      A parked non-streaming connection is not watched by MHD, so the watchdog peeks at its
 *      socket and aborts the request as soon as the client has closed it.
 * An Exchange is reference-counted by its holders: MHD's connection, the backend (until
 * FINISH) and, when streaming, the response object. */
#include "serve/server.h"

#include "base/error.h"
#include "base/log.h"
#include "base/mem.h"
#include "serve/metrics.h"
#include "serve/openapi.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct Exchange Exchange;

struct DiServer {
    DiServerConfig cfg;
    DiBackend backend;
    struct MHD_Daemon *daemon;
    int port;
    DiMetrics *metrics;
    pthread_mutex_t lock;          /* guards the list of live exchanges */
    Exchange *live;                /* submitted, not yet finished */
    pthread_t watchdog;
    atomic_bool stopping;
    _Atomic uint64_t next_id;
};

typedef enum { ROUTE_NONE = 0, ROUTE_GENERATE } RouteKind;

struct Exchange {
    DiServer *srv;
    struct MHD_Connection *conn;
    const char *endpoint;
    DiApiProtocol protocol;
    DiApiBuf body;
    bool body_too_large;
    bool handled;                  /* the request was parsed and answered or submitted */
    DiApiRequest req;
    bool have_req;
    DiApiStream *stream;
    pthread_mutex_t lock;
    DiApiBuf out;                  /* SSE bytes not yet handed to MHD */
    bool finished, suspended, submitted, timed_out, counted;
    bool seen_event, seen_ready, stream_started;
    int error_status;              /* HTTP status of a FINISH(ERROR) that came before READY */
    int refs;
    uint64_t backend_id;
    double t_submit, t_last;
    bool got_first;
    double deadline;
    int fd;                        /* the client's socket (peeked while parked), -1 unknown */
    bool client_gone;              /* the watchdog saw the client close while parked */
    Exchange *prev, *next;         /* in srv->live */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- exchange references -------------------------------------------------------------- */

static void exchange_release(Exchange *x) {
    pthread_mutex_lock(&x->lock);
    int left = --x->refs;
    pthread_mutex_unlock(&x->lock);
    if (left) return;
    di_api_stream_free(x->stream);
    if (x->have_req) di_api_request_free(&x->req);
    di_api_buf_free(&x->body);
    di_api_buf_free(&x->out);
    pthread_mutex_destroy(&x->lock);
    free(x);
}

static void live_add(DiServer *srv, Exchange *x) {
    pthread_mutex_lock(&srv->lock);
    x->next = srv->live;
    if (srv->live) srv->live->prev = x;
    srv->live = x;
    pthread_mutex_unlock(&srv->lock);
}

static void live_remove(DiServer *srv, Exchange *x) {
    pthread_mutex_lock(&srv->lock);
    if (x->prev) x->prev->next = x->next;
    else if (srv->live == x) srv->live = x->next;
    if (x->next) x->next->prev = x->prev;
    x->prev = x->next = NULL;
    pthread_mutex_unlock(&srv->lock);
}

/* ---- plain responses ------------------------------------------------------------------ */

static enum MHD_Result send_bytes(struct MHD_Connection *conn, int status, const char *type, const char *data,
                                  size_t len, int retry_after) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (retry_after > 0) {
        char v[16];
        snprintf(v, sizeof v, "%d", retry_after);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, v);
    }
    enum MHD_Result rc = MHD_queue_response(conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result send_json(DiServer *srv, struct MHD_Connection *conn, const char *endpoint, int status,
                                 json_t *body, int retry_after) {
    di_metrics_request(srv->metrics, endpoint, status);
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text) return send_bytes(conn, 500, "application/json", "{\"error\":{\"message\":\"out of memory\"}}", 38, 0);
    enum MHD_Result rc = send_bytes(conn, status, "application/json", text, strlen(text), retry_after);
    free(text);
    return rc;
}

static enum MHD_Result send_error(DiServer *srv, struct MHD_Connection *conn, const char *endpoint,
                                  DiApiProtocol protocol, int status, const char *message) {
    if (status >= 500) DI_WARN("%s: %d %s", endpoint, status, message);
    return send_json(srv, conn, endpoint, status, di_api_error_body(protocol, status, message),
                     status == 429 ? srv->cfg.retry_after_s : 0);
}

/* ---- backend events ------------------------------------------------------------------- */

static int64_t event_tokens(const DiApiEvent *ev) {
    return ev->kind == DI_API_EV_REASONING || ev->kind == DI_API_EV_CONTENT || ev->kind == DI_API_EV_TOOL_ARGS ||
                   ev->kind == DI_API_EV_TOOL_BEGIN
               ? ev->tokens
               : 0;
}

static void on_event(void *user, const DiApiEvent *ev) {
    Exchange *x = user;
    DiServer *srv = x->srv;
    double t = now_s();
    if (event_tokens(ev) > 0) {
        if (!x->got_first) di_metrics_ttft(srv->metrics, t - x->t_submit);
        else di_metrics_inter_token(srv->metrics, t - x->t_last);
        x->got_first = true;
        x->t_last = t;
    }
    pthread_mutex_lock(&x->lock);
    DiApiEvent e = *ev;
    if (ev->kind == DI_API_EV_FINISH && x->timed_out && ev->finish == DI_API_FINISH_ABORT) e.finish = DI_API_FINISH_LENGTH;
    if (di_api_stream_event(x->stream, &e, x->req.stream ? &x->out : NULL) != 0) {
        DI_WARN("%s: encoding output: %s", x->endpoint, di_error_message());
        if (ev->kind == DI_API_EV_FINISH) x->finished = true; /* never leave the client hanging */
    }
    bool finish = ev->kind == DI_API_EV_FINISH;
    if (finish) {
        x->finished = true;
        /* Counted before the connection resumes: once the client has its answer, /metrics
         * includes it (counted after the unlock, a client reading /metrics right after its
         * response could miss the request's tokens). */
        const DiApiOutput *o = di_api_stream_output(x->stream);
        di_metrics_tokens(srv->metrics, o->prompt_tokens, o->cache_hit_tokens, o->completion_tokens);
        if (ev->finish == DI_API_FINISH_ABORT) di_metrics_aborted(srv->metrics);
        di_metrics_in_flight(srv->metrics, -1);
    }
    if (ev->kind == DI_API_EV_READY) x->seen_ready = true;
    if (finish && ev->finish == DI_API_FINISH_ERROR) x->error_status = ev->http_status ? ev->http_status : 500;
    x->seen_event = true;
    if (x->suspended) {
        x->suspended = false;
        MHD_resume_connection(x->conn);
    }
    pthread_mutex_unlock(&x->lock);
    if (finish) {
        live_remove(srv, x);
        exchange_release(x); /* the backend's reference */
    }
}

/* MHD content reader of a streaming response. */
static ssize_t read_sse(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    Exchange *x = cls;
    pthread_mutex_lock(&x->lock);
    if (x->out.len) {
        size_t n = x->out.len < max ? x->out.len : max;
        memcpy(buf, x->out.data, n);
        di_api_buf_consume(&x->out, n);
        pthread_mutex_unlock(&x->lock);
        return (ssize_t)n;
    }
    if (x->finished) {
        pthread_mutex_unlock(&x->lock);
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    /* Nothing yet: park the connection until the backend thread resumes it. */
    x->suspended = true;
    MHD_suspend_connection(x->conn);
    pthread_mutex_unlock(&x->lock);
    return 0;
}

static void free_sse(void *cls) { exchange_release(cls); }

static const char *id_prefix(DiApiProtocol p) {
    switch (p) {
    case DI_API_CHAT: return "chatcmpl-";
    case DI_API_COMPLETIONS: return "cmpl-";
    case DI_API_RESPONSES: return "resp_";
    case DI_API_MESSAGES: return "msg_";
    }
    return "req-";
}

static bool model_known(const DiServer *srv, const char *model) {
    return model && srv->backend.model_name && strcmp(model, srv->backend.model_name) == 0;
}

static enum MHD_Result continue_generation(Exchange *x);
static enum MHD_Result finish_generation(Exchange *x);

/* The last call of a generation request: parse, submit, answer or suspend. */
static enum MHD_Result start_generation(Exchange *x) {
    DiServer *srv = x->srv;
    x->handled = true;
    if (x->body_too_large) {
        char msg[160];
        snprintf(msg, sizeof msg, "Request body too large: the limit is %zu bytes", srv->cfg.max_body_bytes);
        return send_error(srv, x->conn, x->endpoint, x->protocol, 413, msg);
    }
    int status = 400;
    if (di_api_request_parse(x->protocol, x->body.data, x->body.len, &x->req, &status) != 0)
        return send_error(srv, x->conn, x->endpoint, x->protocol, status, di_error_message());
    x->have_req = true;
    if (!model_known(srv, x->req.model)) {
        char msg[512];
        snprintf(msg, sizeof msg, "The model '%.200s' does not exist; this server serves '%s'", x->req.model,
                 srv->backend.model_name);
        return send_error(srv, x->conn, x->endpoint, x->protocol, 404, msg);
    }
    if (atomic_load(&srv->stopping))
        return send_error(srv, x->conn, x->endpoint, x->protocol, 503, "The server is shutting down");
    DiBackendStats st = {0};
    srv->backend.stats(srv->backend.self, &st);
    if (srv->cfg.max_queue > 0 && st.queued >= srv->cfg.max_queue) {
        char msg[160];
        snprintf(msg, sizeof msg, "The server is busy: %d requests are queued (limit %d); retry later", st.queued,
                 srv->cfg.max_queue);
        return send_error(srv, x->conn, x->endpoint, x->protocol, 429, msg);
    }
    char id[64];
    snprintf(id, sizeof id, "%s%016llx%08x", id_prefix(x->protocol),
             (unsigned long long)atomic_fetch_add(&srv->next_id, 1), (unsigned)rand());
    if (!(x->stream = di_api_stream_create(&x->req, id, (int64_t)time(NULL))))
        return send_error(srv, x->conn, x->endpoint, x->protocol, 500, di_error_message());

    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(x->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    x->fd = ci ? ci->connect_fd : -1;
    x->t_submit = now_s();
    x->deadline = srv->cfg.request_timeout_s > 0 ? x->t_submit + srv->cfg.request_timeout_s : 0;
    x->refs++; /* the backend's reference, released at FINISH */
    di_metrics_in_flight(srv->metrics, 1);
    live_add(srv, x);
    status = 500;
    if (srv->backend.submit(srv->backend.self, &x->req, on_event, x, &x->backend_id, &status) != 0) {
        live_remove(srv, x);
        di_metrics_in_flight(srv->metrics, -1);
        x->refs--;
        return send_error(srv, x->conn, x->endpoint, x->protocol, status, di_error_message());
    }
    x->submitted = true;
    return continue_generation(x);
}

/* Park the connection until the backend's next event resumes it. */
static enum MHD_Result wait_for_backend(Exchange *x, bool until_finish) {
    pthread_mutex_lock(&x->lock);
    bool ready = until_finish ? x->finished : x->seen_event;
    if (!ready) {
        x->suspended = true;
        MHD_suspend_connection(x->conn);
    }
    pthread_mutex_unlock(&x->lock);
    return ready ? MHD_NO : MHD_YES; /* MHD_NO: not parked, the caller answers now */
}

/* Queue the SSE response: from here on the reader hands out what the backend appends. */
static enum MHD_Result start_stream(Exchange *x) {
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, read_sse, x, free_sse);
    if (!r) return MHD_NO;
    pthread_mutex_lock(&x->lock);
    x->refs++; /* the response's reference */
    x->stream_started = true;
    pthread_mutex_unlock(&x->lock);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    di_metrics_request(x->srv->metrics, x->endpoint, 200);
    x->counted = true;
    enum MHD_Result rc = MHD_queue_response(x->conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return rc;
}

/* A submitted request, each time MHD hands it back: wait for the backend, then answer.  A
 * stream starts (status 200) only at the backend's first event, so a request the backend
 * refuses before READY (prompt too long for the context...) still gets its 4xx status. */
static enum MHD_Result continue_generation(Exchange *x) {
    if (x->stream_started) return MHD_YES;
    if (!x->req.stream) return wait_for_backend(x, true) == MHD_YES ? MHD_YES : finish_generation(x);
    if (wait_for_backend(x, false) == MHD_YES) return MHD_YES;
    pthread_mutex_lock(&x->lock);
    bool refused = x->finished && !x->seen_ready && x->error_status;
    pthread_mutex_unlock(&x->lock);
    if (refused) return finish_generation(x);
    return start_stream(x);
}

/* A non-streaming request resumed after FINISH: the whole response. */
static enum MHD_Result finish_generation(Exchange *x) {
    DiServer *srv = x->srv;
    const DiApiOutput *o = di_api_stream_output(x->stream);
    if (o->finish == DI_API_FINISH_ERROR)
        return send_error(srv, x->conn, x->endpoint, x->protocol, x->error_status ? x->error_status : 500,
                          o->error ? o->error : "generation failed");
    if (o->finish == DI_API_FINISH_ABORT)
        return send_error(srv, x->conn, x->endpoint, x->protocol, 503, "The request was aborted (server shutting down)");
    return send_json(srv, x->conn, x->endpoint, 200, di_api_stream_response(x->stream), 0);
}

/* ---- GET endpoints -------------------------------------------------------------------- */

static enum MHD_Result get_models(DiServer *srv, struct MHD_Connection *conn) {
    json_t *body = json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:I}]}", "object", "list", "data", "id",
                             srv->backend.model_name, "object", "model", "created", (json_int_t)0, "owned_by",
                             "deepinfer", "context_length", (json_int_t)srv->backend.context_limit);
    return send_json(srv, conn, "/v1/models", 200, body, 0);
}

static enum MHD_Result get_metrics(DiServer *srv, struct MHD_Connection *conn) {
    DiBackendStats st = {0};
    srv->backend.stats(srv->backend.self, &st);
    DiApiBuf text = {0};
    if (di_metrics_render(srv->metrics, st.queued, st.running, st.steps, st.step_seconds, &text) != 0) {
        di_api_buf_free(&text);
        return send_error(srv, conn, "/metrics", DI_API_CHAT, 500, di_error_message());
    }
    di_metrics_request(srv->metrics, "/metrics", 200);
    enum MHD_Result rc = send_bytes(conn, 200, "text/plain; version=0.0.4", text.data ? text.data : "", text.len, 0);
    di_api_buf_free(&text);
    return rc;
}

/* ---- routing -------------------------------------------------------------------------- */

typedef struct {
    const char *path;
    const char *method;
    DiApiProtocol protocol; /* for POST generation routes */
    bool generate;
} Route;

static const Route k_routes[] = {
    {"/v1/chat/completions", "POST", DI_API_CHAT, true},
    {"/v1/completions", "POST", DI_API_COMPLETIONS, true},
    {"/v1/responses", "POST", DI_API_RESPONSES, true},
    {"/v1/messages", "POST", DI_API_MESSAGES, true},
    {"/v1/models", "GET", DI_API_CHAT, false},
    {"/health", "GET", DI_API_CHAT, false},
    {"/metrics", "GET", DI_API_CHAT, false},
    {"/openapi.json", "GET", DI_API_CHAT, false},
};

static bool authorized(const DiServer *srv, struct MHD_Connection *conn) {
    const char *key = srv->cfg.api_key;
    if (!key || !*key) return true;
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (auth && strncasecmp(auth, "Bearer ", 7) == 0 && strcmp(auth + 7, key) == 0) return true;
    const char *x_api_key = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "x-api-key");
    return x_api_key && strcmp(x_api_key, key) == 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    (void)version;
    DiServer *srv = cls;
    Exchange *x = *con_cls;
    if (x) {
        if (x->handled) return x->submitted ? continue_generation(x) : MHD_YES;
        if (*upload_data_size) {
            if (!x->body_too_large && x->body.len + *upload_data_size > srv->cfg.max_body_bytes) {
                x->body_too_large = true;
                di_api_buf_free(&x->body);
            }
            if (!x->body_too_large && di_api_buf_append(&x->body, upload_data, *upload_data_size) != 0)
                x->body_too_large = true;
            *upload_data_size = 0;
            return MHD_YES;
        }
        return start_generation(x);
    }
    const Route *route = NULL;
    bool path_known = false;
    for (size_t i = 0; i < sizeof k_routes / sizeof k_routes[0]; i++)
        if (strcmp(url, k_routes[i].path) == 0) {
            path_known = true;
            if (strcmp(method, k_routes[i].method) == 0) route = &k_routes[i];
        }
    DiApiProtocol proto = strcmp(url, "/v1/messages") == 0 ? DI_API_MESSAGES : DI_API_CHAT;
    if (!route) {
        char msg[300];
        snprintf(msg, sizeof msg, path_known ? "Method %s is not allowed on %.200s" : "Unknown path %.200s (method %s)",
                 path_known ? method : url, path_known ? url : method);
        return send_error(srv, conn, "other", proto, path_known ? 405 : 404, msg);
    }
    bool open = strcmp(url, "/health") == 0 || strcmp(url, "/openapi.json") == 0;
    if (!open && !authorized(srv, conn))
        return send_error(srv, conn, route->path, proto, 401, "Invalid or missing API key (send 'Authorization: Bearer <key>' or 'x-api-key')");
    if (!route->generate) {
        if (strcmp(url, "/v1/models") == 0) return get_models(srv, conn);
        if (strcmp(url, "/metrics") == 0) return get_metrics(srv, conn);
        if (strcmp(url, "/health") == 0)
            return send_json(srv, conn, "/health", atomic_load(&srv->stopping) ? 503 : 200,
                             json_pack("{s:s}", "status", atomic_load(&srv->stopping) ? "stopping" : "ok"), 0);
        di_metrics_request(srv->metrics, "/openapi.json", 200);
        const char *doc = di_openapi_document();
        return send_bytes(conn, 200, "application/json", doc, strlen(doc), 0);
    }
    x = di_calloc(1, sizeof *x, "HTTP exchange");
    if (!x) return MHD_NO;
    x->srv = srv;
    x->conn = conn;
    x->endpoint = route->path;
    x->protocol = route->protocol;
    x->refs = 1; /* MHD's reference, released at completion */
    pthread_mutex_init(&x->lock, NULL);
    *con_cls = x;
    return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode code) {
    (void)conn;
    (void)code;
    DiServer *srv = cls;
    Exchange *x = *con_cls;
    if (!x) return;
    *con_cls = NULL;
    pthread_mutex_lock(&x->lock);
    bool abort_it = x->submitted && !x->finished;
    pthread_mutex_unlock(&x->lock);
    if (abort_it) srv->backend.abort(srv->backend.self, x->backend_id); /* client gone mid-request */
    exchange_release(x);
}

/* ---- timeouts and life cycle ---------------------------------------------------------- */

/* 1 when the peer of a connected socket has closed it (EOF or an error), 0 while it is open. */
static bool peer_closed(int fd) {
    char c;
    ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* A parked non-streaming request whose client has gone.  Under x->lock the connection stays
 * suspended (on_event resumes it under the same lock), so MHD cannot have closed the socket. */
static bool client_left(Exchange *x) {
    pthread_mutex_lock(&x->lock);
    bool gone = !x->req.stream && x->suspended && !x->finished && !x->client_gone && x->fd >= 0 && peer_closed(x->fd);
    if (gone) x->client_gone = true;
    pthread_mutex_unlock(&x->lock);
    return gone;
}

/* Abort every live request whose deadline passed or whose parked client left (or all, when
 * `all`). */
static int abort_live(DiServer *srv, bool all) {
    uint64_t ids[256];
    int n = 0, live = 0;
    double t = now_s();
    pthread_mutex_lock(&srv->lock);
    for (Exchange *x = srv->live; x; x = x->next) {
        live++;
        if (n >= 256) continue;
        if (all || (x->deadline > 0 && t > x->deadline)) {
            x->timed_out = !all;
            ids[n++] = x->backend_id;
        } else if (client_left(x)) {
            ids[n++] = x->backend_id;
        }
    }
    pthread_mutex_unlock(&srv->lock);
    for (int i = 0; i < n; i++) srv->backend.abort(srv->backend.self, ids[i]);
    return live;
}

static void *watchdog_main(void *arg) {
    DiServer *srv = arg;
    while (!atomic_load(&srv->stopping)) {
        abort_live(srv, false); /* deadlines and clients gone */
        usleep(50 * 1000);
    }
    return NULL;
}

void di_server_config_defaults(DiServerConfig *cfg) {
    if (!cfg) return;
    memset(cfg, 0, sizeof *cfg);
    cfg->host = "127.0.0.1";
    cfg->port = 8000;
    cfg->max_body_bytes = 8u << 20;
    cfg->max_queue = 256;
    cfg->request_timeout_s = 600;
    cfg->idle_timeout_s = 60;
    cfg->max_connections = 2048;
    cfg->shutdown_grace_s = 10;
    cfg->retry_after_s = 1;
}

static void log_mhd(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    DI_DEBUG("libmicrohttpd: %s", msg);
}

DiServer *di_server_start(const DiServerConfig *cfg, const DiBackend *backend) {
    if (!cfg || !backend || !backend->submit || !backend->abort || !backend->stats || !backend->model_name) {
        di_errorf("server: a configuration and a complete backend (submit, abort, stats, model name) are required");
        return NULL;
    }
    if (cfg->port < 0 || cfg->port > 65535) {
        di_errorf("server: port %d is out of range 0..65535", cfg->port);
        return NULL;
    }
    if (cfg->max_body_bytes == 0) {
        di_errorf("server: max_body_bytes must be positive");
        return NULL;
    }
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)cfg->port)};
    const char *host = cfg->host && *cfg->host ? cfg->host : "127.0.0.1";
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        di_errorf("server: --host '%s' is not an IPv4 address", host);
        return NULL;
    }
    DiServer *srv = di_calloc(1, sizeof *srv, "server");
    if (!srv) return NULL;
    srv->cfg = *cfg;
    srv->backend = *backend;
    pthread_mutex_init(&srv->lock, NULL);
    if (!(srv->metrics = di_metrics_create())) goto fail;
    srv->daemon = MHD_start_daemon(
        MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request, srv,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->idle_timeout_s, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)(cfg->max_connections ? cfg->max_connections : 2048), MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u,
        MHD_OPTION_EXTERNAL_LOGGER, log_mhd, NULL, MHD_OPTION_END);
    if (!srv->daemon) {
        di_errorf("server: cannot listen on %s:%d (address in use, or not permitted)", host, cfg->port);
        goto fail;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = info ? info->port : cfg->port;
    if (pthread_create(&srv->watchdog, NULL, watchdog_main, srv) != 0) {
        di_errorf("server: cannot start the timeout thread");
        MHD_stop_daemon(srv->daemon);
        goto fail;
    }
    return srv;
fail:
    di_metrics_free(srv->metrics);
    pthread_mutex_destroy(&srv->lock);
    free(srv);
    return NULL;
}

int di_server_port(const DiServer *srv) { return srv ? srv->port : -1; }

void di_server_stop(DiServer *srv) {
    if (!srv) return;
    atomic_store(&srv->stopping, true);
    pthread_join(srv->watchdog, NULL);
    MHD_socket listen_fd = MHD_quiesce_daemon(srv->daemon); /* stop accepting */
    if (listen_fd != MHD_INVALID_SOCKET) close(listen_fd);
    double give_up = now_s() + srv->cfg.shutdown_grace_s;
    while (abort_live(srv, false) > 0 && now_s() < give_up) usleep(20 * 1000);
    double hard = now_s() + 5; /* aborted requests finish within a backend step */
    while (abort_live(srv, true) > 0 && now_s() < hard) usleep(20 * 1000);
    usleep(100 * 1000); /* let MHD flush the final bytes of resumed connections */
    MHD_stop_daemon(srv->daemon);
    di_metrics_free(srv->metrics);
    pthread_mutex_destroy(&srv->lock);
    free(srv);
}
