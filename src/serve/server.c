/* server.c — the HTTP API server over libmicrohttpd (see server.h): life cycle, routing,
 * replies, and the read deadline of connections.
 *
 * Every routed request gets an Exchange (server_internal.h) on MHD's first call and is
 * dispatched only once its body is in, refusals included: a response queued before the body
 * was read makes MHD close the connection, and a pipelined request behind it would get no
 * answer.
 *
 * Read deadline: MHD's idle timeout restarts with every byte, so a client sending one header
 * byte every few seconds would hold its connection (and a slot of max_connections) forever.
 * Each connection therefore has a record (Conn) with the time its current request started
 * arriving (the connection's accept for its first request, the request line for the next
 * ones); the watchdog shuts down the socket of one that has not delivered headers and body
 * within read_timeout_s, and MHD then closes it.  Counted as 408 under endpoint "other". */
#include "serve/server_internal.h"

#include "base/error.h"
#include "base/log.h"
#include "base/mem.h"
#include "serve/openapi.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct Conn {
    int fd;
    double since;                  /* when the request being read started arriving */
    bool reading;                  /* a request is arriving (false: idle, or being answered) */
    bool cut;                      /* the watchdog shut it down */
    Conn *prev, *next;             /* in srv->conns */
};

double di_srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- replies -------------------------------------------------------------------------- */

enum MHD_Result di_srv_send_bytes(Exchange *x, int status, const char *type, const char *data, size_t len) {
    DiServer *srv = x->srv;
    di_metrics_request(srv->metrics, x->endpoint, status);
    x->counted = true;
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == 429 && srv->cfg.retry_after_s > 0) {
        char v[16];
        snprintf(v, sizeof v, "%d", srv->cfg.retry_after_s);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, v);
    }
    if (status == 405 && x->allow) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, x->allow);
    if (atomic_load(&srv->stopping)) MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result rc = MHD_queue_response(x->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return rc;
}

enum MHD_Result di_srv_send_json(Exchange *x, int status, json_t *body) {
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\"}}";
        return di_srv_send_bytes(x, 500, "application/json", oom, sizeof oom - 1);
    }
    enum MHD_Result rc = di_srv_send_bytes(x, status, "application/json", text, strlen(text));
    free(text);
    return rc;
}

enum MHD_Result di_srv_send_error(Exchange *x, int status, const char *message) {
    if (status >= 500) DI_WARN("%s: %d %s", x->endpoint, status, message);
    return di_srv_send_json(x, status, di_api_error_body(x->protocol, status, message));
}

/* ---- routing -------------------------------------------------------------------------- */

static const Route k_routes[] = {
    {"/v1/chat/completions", "POST", DI_API_CHAT, NULL, false},
    {"/v1/completions", "POST", DI_API_COMPLETIONS, NULL, false},
    {"/v1/responses", "POST", DI_API_RESPONSES, NULL, false},
    {"/v1/messages", "POST", DI_API_MESSAGES, NULL, false},
    {"/v1/models", "GET", DI_API_CHAT, di_srv_get_models, false},
    {"/v1/models/", "GET", DI_API_CHAT, di_srv_get_model, false},
    {"/tokenize", "POST", DI_API_CHAT, di_srv_tokenize, false},
    {"/detokenize", "POST", DI_API_CHAT, di_srv_detokenize, false},
    {"/health", "GET", DI_API_CHAT, di_srv_get_health, true},
    {"/internal/load", "GET", DI_API_CHAT, di_srv_get_load, false},
    {"/metrics", "GET", DI_API_CHAT, di_srv_get_metrics, false},
    {"/openapi.json", "GET", DI_API_CHAT, di_srv_get_openapi, true},
    {"/version", "GET", DI_API_CHAT, di_srv_get_version, true},
    {"/internal/prefill", "POST", DI_API_CHAT, di_srv_pd_prefill, false},
};

static bool path_matches(const char *url, const char *path) {
    size_t n = strlen(path);
    if (path[n - 1] == '/') return strncmp(url, path, n) == 0 && url[n] && !strchr(url + n, '/');
    return strcmp(url, path) == 0;
}

static bool authorized(const DiServer *srv, struct MHD_Connection *conn) {
    const char *key = srv->cfg.api_key;
    if (!key || !*key) return true;
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (auth && strncasecmp(auth, "Bearer ", 7) == 0 && strcmp(auth + 7, key) == 0) return true;
    const char *x_api_key = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "x-api-key");
    return x_api_key && strcmp(x_api_key, key) == 0;
}

/* Route a new request: its handler, or the refusal (404, 405 with Allow, 401) to send once
 * its body is in. */
static void route(Exchange *x, const char *url, const char *method) {
    const char *allow = NULL;
    for (size_t i = 0; i < sizeof k_routes / sizeof k_routes[0]; i++) {
        if (!path_matches(url, k_routes[i].path)) continue;
        allow = k_routes[i].method; /* one method per path */
        if (strcmp(method, k_routes[i].method) == 0) x->route = &k_routes[i];
    }
    x->protocol = x->route ? x->route->protocol : strcmp(url, "/v1/messages") == 0 ? DI_API_MESSAGES : DI_API_CHAT;
    x->endpoint = "other";
    if (!x->route) {
        x->allow = allow;
        x->reject = allow ? 405 : 404;
        snprintf(x->reject_msg, sizeof x->reject_msg,
                 allow ? "Method %s is not allowed on %.200s (allowed: %s)" : "Unknown path %.200s (method %s)",
                 allow ? method : url, allow ? url : method, allow);
        return;
    }
    size_t n = strlen(x->route->path);
    if (x->route->path[n - 1] == '/') snprintf(x->path_arg, sizeof x->path_arg, "%s", url + n);
    x->endpoint = strcmp(x->route->path, "/v1/models/") == 0 ? "/v1/models" : x->route->path;
    if (!x->route->open && !authorized(x->srv, x->conn)) {
        x->reject = 401;
        snprintf(x->reject_msg, sizeof x->reject_msg,
                 "Invalid or missing API key (send 'Authorization: Bearer <key>' or 'x-api-key')");
    }
}

static void reading_done(DiServer *srv, Conn *k) {
    if (!k) return;
    pthread_mutex_lock(&srv->lock);
    k->reading = false;
    pthread_mutex_unlock(&srv->lock);
}

static enum MHD_Result dispatch(Exchange *x) {
    x->handled = true;
    reading_done(x->srv, x->link);
    if (x->reject) return di_srv_send_error(x, x->reject, x->reject_msg);
    if (!x->route->handle) return di_srv_generate(x);
    if (x->body_too_large) {
        char msg[160];
        snprintf(msg, sizeof msg, "Request body too large: the limit is %zu bytes", x->srv->cfg.max_body_bytes);
        return di_srv_send_error(x, 413, msg);
    }
    return x->route->handle(x);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    (void)version;
    DiServer *srv = cls;
    Exchange *x = *con_cls;
    if (!x) {
        if (!(x = di_calloc(1, sizeof *x, "HTTP exchange"))) return MHD_NO;
        x->srv = srv;
        x->conn = conn;
        x->fd = -1;
        x->refs = 1; /* MHD's reference, released at completion */
        pthread_mutex_init(&x->lock, NULL);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        x->link = ci ? ci->socket_context : NULL;
        route(x, url, method);
        *con_cls = x;
        return MHD_YES;
    }
    if (x->handled) {
        if (x->route && !x->route->handle) return di_srv_generate_again(x);
        return x->deferred ? di_srv_deferred_again(x) : MHD_YES;
    }
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
    return dispatch(x);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode code) {
    (void)conn;
    (void)code;
    DiServer *srv = cls;
    Exchange *x = *con_cls;
    if (!x) return;
    *con_cls = NULL;
    reading_done(srv, x->link);
    pthread_mutex_lock(&x->lock);
    bool abort_it = x->submitted && !x->finished;
    pthread_mutex_unlock(&x->lock);
    if (abort_it) srv->backend.abort(srv->backend.self, x->backend_id); /* client gone mid-request */
    di_srv_exchange_release(x);
}

/* ---- connections and their read deadline ------------------------------------------------ */

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    DiServer *srv = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        Conn *k = di_calloc(1, sizeof *k, "connection record");
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!k || !ci) { /* no deadline for this one; the idle timeout still applies */
            free(k);
            *socket_context = NULL;
            return;
        }
        k->fd = ci->connect_fd;
        k->since = di_srv_now();
        k->reading = true;
        pthread_mutex_lock(&srv->lock);
        k->next = srv->conns;
        if (srv->conns) srv->conns->prev = k;
        srv->conns = k;
        pthread_mutex_unlock(&srv->lock);
        *socket_context = k;
        return;
    }
    Conn *k = *socket_context; /* MHD_CONNECTION_NOTIFY_CLOSED, before MHD closes the socket */
    if (!k) return;
    pthread_mutex_lock(&srv->lock);
    if (k->prev) k->prev->next = k->next;
    else srv->conns = k->next;
    if (k->next) k->next->prev = k->prev;
    pthread_mutex_unlock(&srv->lock);
    free(k);
    *socket_context = NULL;
}

/* MHD's URI log callback: the request line of a new request has arrived. */
static void *on_request_line(void *cls, const char *uri, struct MHD_Connection *conn) {
    (void)uri;
    DiServer *srv = cls;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    Conn *k = ci ? ci->socket_context : NULL;
    if (k) {
        pthread_mutex_lock(&srv->lock);
        if (!k->reading) { /* a later request of a kept-alive connection */
            k->reading = true;
            k->since = di_srv_now();
        }
        pthread_mutex_unlock(&srv->lock);
    }
    return NULL; /* the first on_request call then sees no Exchange */
}

/* Shut down connections that did not deliver a request within the read deadline.  Under
 * srv->lock a listed socket is still open: MHD removes the record before closing it. */
static void cut_slow_readers(DiServer *srv) {
    if (!(srv->cfg.read_timeout_s > 0)) return;
    double t = di_srv_now();
    int cut = 0;
    pthread_mutex_lock(&srv->lock);
    for (Conn *k = srv->conns; k; k = k->next)
        if (k->reading && !k->cut && t - k->since > srv->cfg.read_timeout_s) {
            k->cut = true;
            shutdown(k->fd, SHUT_RDWR);
            cut++;
        }
    pthread_mutex_unlock(&srv->lock);
    for (int i = 0; i < cut; i++) di_metrics_request(srv->metrics, "other", 408);
    if (cut) DI_INFO("closed %d connection(s) that sent no complete request within %.1f s", cut, srv->cfg.read_timeout_s);
}

static void *watchdog_main(void *arg) {
    DiServer *srv = arg;
    while (!atomic_load(&srv->watchdog_quit)) {
        di_srv_abort_live(srv, false); /* deadlines and clients gone */
        cut_slow_readers(srv);
        usleep(50 * 1000);
    }
    return NULL;
}

/* ---- life cycle ------------------------------------------------------------------------- */

void di_server_config_defaults(DiServerConfig *cfg) {
    if (!cfg) return;
    memset(cfg, 0, sizeof *cfg);
    cfg->host = "127.0.0.1";
    cfg->port = 8000;
    cfg->max_body_bytes = 8u << 20;
    cfg->max_queue = 256;
    cfg->request_timeout_s = 600;
    cfg->idle_timeout_s = 60;
    cfg->read_timeout_s = 30;
    cfg->workers = 2;
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

/* A per-process random salt for response ids (the kernel's CSPRNG; the clock and the pid if
 * it cannot answer), so ids differ across restarts. */
static uint64_t id_salt(void) {
    uint64_t salt = 0;
    if (getrandom(&salt, sizeof salt, GRND_NONBLOCK) != (ssize_t)sizeof salt) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        salt = ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 16);
    }
    return salt;
}

static int check_config(const DiServerConfig *cfg, const DiBackend *backend) {
    if (!cfg || !backend || !backend->submit || !backend->abort || !backend->stats || !backend->model_name)
        return di_errorf("server: a configuration and a complete backend (submit, abort, stats, model name) are required");
    if (cfg->port < 0 || cfg->port > 65535) return di_errorf("server: port %d is out of range 0..65535", cfg->port);
    if (cfg->max_body_bytes == 0) return di_errorf("server: max_body_bytes must be positive");
    if (cfg->workers < 1 || cfg->workers > 64) return di_errorf("server: workers is %d, expected 1..64", cfg->workers);
    if (!(cfg->read_timeout_s >= 0)) return di_errorf("server: read_timeout_s must be >= 0");
    return 0;
}

DiServer *di_server_start(const DiServerConfig *cfg, const DiBackend *backend) {
    if (check_config(cfg, backend) != 0) return NULL;
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
    srv->id_salt = id_salt();
    pthread_mutex_init(&srv->lock, NULL);
    if (!(srv->metrics = di_metrics_create()) || !(srv->work = di_work_create(cfg->workers)) || di_srv_pd_start(srv) != 0)
        goto fail;
    srv->daemon = MHD_start_daemon(
        MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request, srv,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, srv, MHD_OPTION_URI_LOG_CALLBACK, on_request_line, srv,
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
    di_srv_pd_stop(srv);
    di_work_destroy(srv->work);
    di_metrics_free(srv->metrics);
    pthread_mutex_destroy(&srv->lock);
    free(srv);
    return NULL;
}

int di_server_port(const DiServer *srv) { return srv ? srv->port : -1; }

void di_server_stop(DiServer *srv) {
    if (!srv) return;
    /* Drain with the listener open: new generation requests and /health get 503, the
     * watchdog keeps enforcing deadlines and noticing clients that leave. */
    atomic_store(&srv->stopping, true);
    double give_up = di_srv_now() + srv->cfg.shutdown_grace_s;
    while (di_srv_abort_live(srv, false) > 0 && di_srv_now() < give_up) usleep(20 * 1000);
    di_work_stop(srv->work); /* requests still being prepared are refused (stopping) */
    double hard = di_srv_now() + 5; /* aborted requests finish within a backend step */
    while (di_srv_abort_live(srv, true) > 0 && di_srv_now() < hard) usleep(20 * 1000);
    atomic_store(&srv->watchdog_quit, true);
    pthread_join(srv->watchdog, NULL);
    MHD_socket listen_fd = MHD_quiesce_daemon(srv->daemon); /* stop accepting */
    if (listen_fd != MHD_INVALID_SOCKET) close(listen_fd);
    usleep(100 * 1000); /* let MHD flush the final bytes of resumed connections */
    MHD_stop_daemon(srv->daemon);
    di_srv_pd_stop(srv);
    di_work_destroy(srv->work);
    di_metrics_free(srv->metrics);
    pthread_mutex_destroy(&srv->lock);
    free(srv);
}
