/* gw_server.c — the gateway's HTTP front and its proxying of requests (see gateway.h). */
#include "gateway/gw_internal.h"

#include "base/error.h"
#include "base/log.h"
#include "base/mem.h"
#include "engine/kvcache/block_key.h"
#include "recipe/api_request.h"
#include "recipe/api_stream.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>

void di_gateway_config_defaults(DiGatewayConfig *cfg) {
    if (!cfg) return;
    memset(cfg, 0, sizeof *cfg);
    cfg->host = "127.0.0.1";
    cfg->port = 8000;
    cfg->model_name = "DeepSeek-V4.1-Flash";
    cfg->heartbeat_ms = 500;
    cfg->connect_timeout_s = 2;
    cfg->idle_timeout_s = 120;
    cfg->request_timeout_s = 600;
    cfg->room_deadline_ms = 30000;
    cfg->max_body_bytes = (size_t)8 << 20;
    cfg->max_connections = 1024;
    di_gw_pool_config_defaults(&cfg->pool);
}

DiGwUpstreamLimits di_gw_limits(const DiGateway *g) {
    return (DiGwUpstreamLimits){.connect_timeout_s = g->cfg.connect_timeout_s, .idle_timeout_s = g->cfg.idle_timeout_s,
                                .total_timeout_s = g->cfg.request_timeout_s};
}

/* ---- replies of the gateway itself ----------------------------------------------------------- */

static void count_status(DiGateway *g, int status) {
    atomic_fetch_add(status < 300 ? &g->responses_2xx : status < 500 ? &g->responses_4xx : &g->responses_5xx, 1);
}

static enum MHD_Result send_bytes(DiGateway *g, struct MHD_Connection *c, int status, const char *type,
                                  const char *data, size_t len) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    count_status(g, status);
    return rc;
}

static enum MHD_Result send_json(DiGateway *g, struct MHD_Connection *c, int status, json_t *body) {
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text) return send_bytes(g, c, 500, "text/plain", "out of memory\n", 14);
    enum MHD_Result rc = send_bytes(g, c, status, "application/json", text, strlen(text));
    free(text);
    return rc;
}

static enum MHD_Result send_error(DiGateway *g, struct MHD_Connection *c, DiApiProtocol protocol, int status,
                                  const char *message) {
    return send_json(g, c, status, di_api_error_body(protocol, status, message));
}

/* ---- one proxied request ------------------------------------------------------------------- */

typedef struct {
    DiGateway *g;
    DiApiProtocol protocol;
    DiGwUpstream *up, *prefill;  /* the worker answering; the prefill half (PD) */
    int worker, prefill_worker, tier;
    double prefill_cost;
    int64_t prompt_tokens;
    uint64_t keys[DI_GW_PREFIX_BLOCKS]; /* the first 64 bits of its leading blocks' keys */
    int n_keys;
    bool sse, ended, prefill_counted;
    DiApiBuf tail;               /* an error event still to send */
    size_t tail_off;
    int fd;                      /* the client's socket, to notice it leaving */
} Proxy;

/* A 200 /internal/prefill reply's measured sample into the cost fit: the worker prefilled the
 * prompt less its last token (state_tokens), cached_tokens of them reused, in prefill_s. */
static void take_prefill_sample(Proxy *x) {
    char *body = NULL;
    size_t len = 0;
    if (di_gw_upstream_body(x->prefill, 4096, &body, &len) != 0) {
        DI_DEBUG("gateway: prefill reply: %s", di_error_message());
        return;
    }
    json_t *r = json_loadb(body, len, 0, NULL), *n = json_object_get(r, "state_tokens"),
           *c = json_object_get(r, "cached_tokens"), *s = json_object_get(r, "prefill_s");
    /* c <= n checked first: the worker's integers are any int64, n - c must not overflow */
    if (!json_is_integer(n) || !json_is_integer(c) || !json_is_number(s) || json_integer_value(c) < 0 ||
        json_integer_value(n) < json_integer_value(c) ||
        di_gw_pool_prefill_sample(&x->g->pool, x->prefill_worker, json_integer_value(n) - json_integer_value(c),
                                  json_integer_value(c), json_number_value(s)) != 0)
        DI_DEBUG("gateway: a prefill reply without a usable sample (state_tokens, cached_tokens, prefill_s): %.200s", body);
    json_decref(r);
    free(body);
}

static void prefill_finished(Proxy *x) {
    int status = 0;
    if (!x->prefill || x->prefill_counted || !di_gw_upstream_done(x->prefill, &status)) return;
    x->prefill_counted = true;
    atomic_fetch_add(status == 200 ? &x->g->prefill_ok : &x->g->prefill_failed, 1);
    if (status == 200) take_prefill_sample(x);
    di_gw_pool_prefill_done(&x->g->pool, x->prefill_worker, x->tier, x->prefill_cost);
}

static void proxy_free(void *cls) {
    Proxy *x = cls;
    if (!x) return;
    if (!x->ended && x->up) atomic_fetch_add(&x->g->client_aborts, 1);
    prefill_finished(x);
    di_gw_upstream_free(x->up); /* aborts a live exchange: the worker frees the request */
    if (x->prefill && !x->prefill_counted) {
        di_gw_upstream_free(x->prefill); /* the prefill worker aborts and sends ABORT(room) */
        x->prefill = NULL;
        di_gw_pool_prefill_done(&x->g->pool, x->prefill_worker, x->tier, x->prefill_cost);
    }
    di_gw_upstream_free(x->prefill);
    if (x->worker >= 0) di_gw_pool_decode_done(&x->g->pool, x->worker, x->prompt_tokens);
    di_api_buf_free(&x->tail);
    free(x);
}

static bool client_left(int fd) {
    char b;
    return fd >= 0 && recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

static ssize_t proxy_read(void *cls, uint64_t pos, char *buf, size_t max) {
    Proxy *x = cls;
    if (x->tail_off < x->tail.len) {
        size_t n = x->tail.len - x->tail_off < max ? x->tail.len - x->tail_off : max;
        memcpy(buf, x->tail.data + x->tail_off, n);
        x->tail_off += n;
        return (ssize_t)n;
    }
    if (x->ended) return MHD_CONTENT_READER_END_OF_STREAM;
    for (;;) { /* bounded by the exchange's idle and total limits */
        prefill_finished(x);
        ssize_t got = di_gw_upstream_read(x->up, buf, max, 0.5);
        if (got > 0) return got;
        if (got == 0) {
            x->ended = true;
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (got == -2) {
            if (client_left(x->fd)) return MHD_CONTENT_READER_END_WITH_ERROR;
            continue;
        }
        char msg[600];
        snprintf(msg, sizeof msg, "the worker failed in the middle of the answer: %s", di_error_message());
        DI_WARN("gateway: %s", msg);
        atomic_fetch_add(&x->g->stream_errors, 1);
        di_gw_pool_refused(&x->g->pool, x->worker, msg);
        x->ended = true;
        if (!x->sse || di_api_error_sse(x->protocol, msg, &x->tail) != 0) return MHD_CONTENT_READER_END_WITH_ERROR;
        return proxy_read(cls, pos, buf, max);
    }
}

/* The client's headers the worker needs (authentication, Anthropic's version), as lines. */
static int client_headers(struct MHD_Connection *c, char lines[][512], const char **list, int max) {
    static const char *const names[] = {"Content-Type", "Authorization", "x-api-key", "anthropic-version",
                                        "anthropic-beta", "Accept"};
    int n = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && n < max - 1; i++) {
        const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, names[i]);
        if (!v || strlen(v) > 400 || strpbrk(v, "\r\n")) continue;
        snprintf(lines[n], 512, "%s: %s", names[i], v);
        list[n] = lines[n];
        n++;
    }
    list[n] = NULL;
    return n;
}

/* The leading blocks' keys of the prompt ids (block_key.h, with the KV identity the workers
 * report and the request's cache_salt), for the cache-aware choice; none without an identity. */
static void prefix_keys(DiGateway *g, const DiApiRequest *req, const int32_t *ids, size_t n, Proxy *x) {
    DiKvKeyCtx ctx;
    DiKvKey fp, keys[DI_GW_PREFIX_BLOCKS];
    int b = 0;
    const char *salt = req->cache_salt ? req->cache_salt : "";
    x->n_keys = 0;
    if (!di_gw_pool_kv_identity(&g->pool, &fp.lo, &fp.hi, &b) || di_kv_key_ctx_init(&ctx, fp, b, salt, strlen(salt)) != 0)
        return;
    int m = di_kv_keys_for_tokens(&ctx, ids, (int64_t)n, keys, DI_GW_PREFIX_BLOCKS);
    for (int i = 0; i < m; i++) x->keys[i] = keys[i].lo;
    x->n_keys = m > 0 ? m : 0;
}

/* Prompt tokens of a generation body into x->prompt_tokens (0 when it does not parse: the worker
 * answers the error), and its leading blocks' keys (tokenized once for both). */
static void prompt_of(DiGateway *g, DiApiProtocol protocol, const char *body, size_t len, Proxy *x) {
    DiApiRequest req;
    int status = 0;
    x->prompt_tokens = 0;
    if (di_api_request_parse(protocol, body, len, &req, &status) != 0) return;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = req.conversation ? di_serve_text_render(g->text, req.conversation, &ids, &n)
             : req.prompt     ? di_serve_text_encode_prompt(g->text, req.prompt, &ids, &n)
                              : -1;
    if (rc == 0) {
        x->prompt_tokens = (int64_t)n;
        prefix_keys(g, &req, ids, n, x);
    }
    di_api_request_free(&req);
    free(ids);
}

/* PD: start POST /internal/prefill for the request on a prefill worker (the decode worker's KV
 * transfer address: `transfer`), and add the X-DI-Room lines to the decode request's headers.
 * Without a prefill worker in rotation nothing is added: the decode worker prefills itself. */
static void start_prefill(Proxy *x, const char *path, const char *body, size_t len, const char *transfer,
                          const char **hdr, int *nh, char room_lines[3][128]) {
    DiGateway *g = x->g;
    x->prefill_worker = di_gw_pool_pick_prefill(&g->pool, x->prompt_tokens, 0, -1, &x->tier, &x->prefill_cost);
    json_t *client = json_loadb(body, len, 0, NULL);
    if (x->prefill_worker < 0 || !json_is_object(client)) {
        if (x->prefill_worker >= 0) di_gw_pool_prefill_done(&g->pool, x->prefill_worker, x->tier, x->prefill_cost);
        x->prefill_worker = -1;
        json_decref(client);
        return;
    }
    uint64_t room = 0;
    if (getrandom(&room, sizeof room, 0) != (ssize_t)sizeof room) room = (uint64_t)atomic_fetch_add(&g->requests, 0) * 2654435761u;
    char room_s[32];
    snprintf(room_s, sizeof room_s, "%" PRIu64, room);
    json_t *req = json_pack("{s:s, s:s?, s:s, s:o, s:i}", "room", room_s, "decode", transfer[0] ? transfer : NULL,
                            "path", path, "body", client, "deadline_ms", g->cfg.room_deadline_ms);
    char *text = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    char token_line[128] = "";
    if (g->cfg.cluster_token) snprintf(token_line, sizeof token_line, "X-DI-Cluster-Key: %s", g->cfg.cluster_token);
    const char *ph[] = {"Content-Type: application/json", token_line[0] ? token_line : NULL, NULL};
    /* The reply comes when the prefill ends, however long the prompt: the worker's own idle
     * deadline (deadline_ms with no progress) bounds it, and so does the decode request, whose
     * end frees this exchange (the worker then aborts). */
    DiGwUpstreamLimits lim = di_gw_limits(g);
    lim.idle_timeout_s = 0;
    x->prefill = text ? di_gw_upstream_start("POST", g->pool.w[x->prefill_worker].url, "/internal/prefill", text,
                                             strlen(text), ph, &lim)
                      : NULL;
    free(text);
    if (!x->prefill) {
        DI_WARN("gateway: prefill request not sent: %s", di_error_message());
        di_gw_pool_prefill_done(&g->pool, x->prefill_worker, x->tier, x->prefill_cost);
        x->prefill_worker = -1;
        return;
    }
    atomic_fetch_add(&g->pd_requests, 1);
    snprintf(room_lines[0], 128, "X-DI-Room: %s", room_s);
    snprintf(room_lines[1], 128, "X-DI-Room-Deadline-Ms: %d", g->cfg.room_deadline_ms);
    hdr[(*nh)++] = room_lines[0];
    hdr[(*nh)++] = room_lines[1];
    if (token_line[0]) {
        snprintf(room_lines[2], 128, "%s", token_line);
        hdr[(*nh)++] = room_lines[2];
    }
    hdr[*nh] = NULL;
}

/* Forward a request (generation or not) to a worker chosen by the balancers, retrying once on
 * another when the first gives no answer; then stream the answer back. */
static enum MHD_Result proxy(DiGateway *g, struct MHD_Connection *c, const char *method, const char *path,
                             DiApiProtocol protocol, bool generation, const char *body, size_t len) {
    Proxy *x = di_calloc(1, sizeof *x, "proxy");
    if (!x) return send_error(g, c, protocol, 500, "out of memory");
    x->g = g;
    x->protocol = protocol;
    x->worker = x->prefill_worker = -1;
    if (generation) prompt_of(g, protocol, body, len, x);
    if (generation) {
        int t = di_prefill_tier(x->prompt_tokens);
        if (t >= 0) atomic_fetch_add(&g->tier_requests[t], 1);
    }
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    x->fd = ci ? ci->connect_fd : -1;
    char lines[8][512], room_lines[3][128], ctype[128] = "", why[600] = "";
    const char *hdr[12];
    int status = 0;
    for (int attempt = 0, exclude = -1; attempt < 2; attempt++) {
        int nh = client_headers(c, lines, hdr, 9);
        x->worker = di_gw_pool_pick_decode_cached(&g->pool, x->prompt_tokens, exclude, x->keys, x->n_keys);
        if (x->worker < 0) {
            snprintf(why, sizeof why, "%s", di_error_message());
            break;
        }
        char transfer[128];
        if (generation && di_gw_pool_decode_split(&g->pool, x->worker, transfer, sizeof transfer))
            start_prefill(x, path, body, len, transfer, hdr, &nh, room_lines);
        DiGwUpstreamLimits lim = di_gw_limits(g);
        lim.follow = x->prefill; /* the decode worker answers once the prefill ends */
        x->up = di_gw_upstream_start(method, g->pool.w[x->worker].url, path, body, len, hdr, &lim);
        if (x->up && di_gw_upstream_head(x->up, &status, ctype, sizeof ctype) == 0 && status != 503) break;
        snprintf(why, sizeof why, "worker %s: %s", g->pool.w[x->worker].url,
                 x->up ? (status == 503 ? "503 (draining)" : di_error_message()) : di_error_message());
        DI_WARN("gateway: %s%s", why, attempt == 0 ? "; retrying on another worker" : "");
        if (status != 503) di_gw_pool_refused(&g->pool, x->worker, why);
        di_gw_upstream_free(x->up);
        x->up = NULL;
        di_gw_upstream_free(x->prefill); /* aborts the prefill half */
        if (x->prefill) di_gw_pool_prefill_done(&g->pool, x->prefill_worker, x->tier, x->prefill_cost);
        x->prefill = NULL;
        di_gw_pool_decode_done(&g->pool, x->worker, x->prompt_tokens);
        exclude = x->worker;
        x->worker = -1;
        status = 0;
        if (attempt == 0) atomic_fetch_add(&g->retries, 1);
    }
    if (!x->up) {
        atomic_fetch_add(&g->no_worker, 1);
        proxy_free(x);
        char msg[700];
        snprintf(msg, sizeof msg, "No worker could take the request: %s", why);
        return send_error(g, c, protocol, 503, msg);
    }
    x->sse = strncmp(ctype, "text/event-stream", 17) == 0;
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, proxy_read, x, proxy_free);
    if (!r) {
        proxy_free(x);
        return MHD_NO;
    }
    if (ctype[0]) MHD_add_response_header(r, "Content-Type", ctype);
    if (x->sse) MHD_add_response_header(r, "Cache-Control", "no-cache");
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    count_status(g, status);
    return rc;
}

/* ---- routing ------------------------------------------------------------------------------- */

typedef struct {
    DiApiBuf body;
    bool too_large;
} Upload;

static enum MHD_Result own_route(DiGateway *g, struct MHD_Connection *c, const char *url) {
    if (strcmp(url, "/health") == 0) {
        int n = di_gw_pool_healthy(&g->pool);
        return send_json(g, c, n ? 200 : 503, json_pack("{s:s, s:i}", "status", n ? "ok" : "no worker", "workers", n));
    }
    if (strcmp(url, "/v1/models") == 0)
        return send_json(g, c, 200, json_pack("{s:s, s:[{s:s, s:s, s:I, s:s}]}", "object", "list", "data", "id",
                                              g->pool.model, "object", "model", "created", (json_int_t)0,
                                              "owned_by", "deepinfer"));
    DiApiBuf text = {0};
    if (di_gw_metrics_render(g, &text) != 0) {
        di_api_buf_free(&text);
        return send_error(g, c, DI_API_CHAT, 500, di_error_message());
    }
    enum MHD_Result rc = send_bytes(g, c, 200, "text/plain; version=0.0.4", text.data ? text.data : "", text.len);
    di_api_buf_free(&text);
    return rc;
}

static bool generation_path(const char *url, DiApiProtocol *protocol) {
    static const struct {
        const char *path;
        DiApiProtocol protocol;
    } gen[] = {{"/v1/chat/completions", DI_API_CHAT}, {"/v1/completions", DI_API_COMPLETIONS},
               {"/v1/responses", DI_API_RESPONSES}, {"/v1/messages", DI_API_MESSAGES}};
    for (size_t i = 0; i < sizeof gen / sizeof gen[0]; i++)
        if (strcmp(url, gen[i].path) == 0) {
            *protocol = gen[i].protocol;
            return true;
        }
    *protocol = strncmp(url, "/v1/messages", 12) == 0 ? DI_API_MESSAGES : DI_API_CHAT;
    return false;
}

static bool authorized(const DiGateway *g, struct MHD_Connection *c) {
    const char *key = g->cfg.api_key;
    if (!key || !*key) return true;
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (auth && strncasecmp(auth, "Bearer ", 7) == 0 && strcmp(auth + 7, key) == 0) return true;
    const char *x_api_key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    return x_api_key && strcmp(x_api_key, key) == 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    DiGateway *g = cls;
    Upload *up = *con_cls;
    if (!up) {
        if (!(up = di_calloc(1, sizeof *up, "upload"))) return MHD_NO;
        *con_cls = up;
        return MHD_YES;
    }
    if (*upload_size) {
        if (up->body.len + *upload_size > g->cfg.max_body_bytes) up->too_large = true;
        else if (di_api_buf_append(&up->body, upload, *upload_size) != 0) return MHD_NO;
        *upload_size = 0;
        return MHD_YES;
    }
    atomic_fetch_add(&g->requests, 1);
    DiApiProtocol protocol;
    bool generation = generation_path(url, &protocol);
    bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
    if (up->too_large) return send_error(g, c, protocol, 413, "The request body is too large");
    if (strcmp(url, "/health") != 0 && !authorized(g, c))
        return send_error(g, c, protocol, 401, "Invalid or missing API key (send 'Authorization: Bearer <key>' or 'x-api-key')");
    if (get && (!strcmp(url, "/health") || !strcmp(url, "/v1/models") || !strcmp(url, "/metrics")))
        return own_route(g, c, url);
    if (!get && !post) return send_error(g, c, protocol, 405, "The gateway forwards only GET and POST");
    if (strncmp(url, "/internal/", 10) == 0) return send_error(g, c, protocol, 404, "Not found");
    return proxy(g, c, method, url, protocol, generation && post, up->body.data ? up->body.data : "", up->body.len);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    Upload *up = *con_cls;
    if (!up) return;
    di_api_buf_free(&up->body);
    free(up);
    *con_cls = NULL;
}

/* libmicrohttpd's messages (a client that left mid-answer...) are debug lines, as in serve. */
static void log_mhd(void *cls, const char *fmt, va_list ap) {
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    DI_DEBUG("gateway: libmicrohttpd: %s", msg);
}

/* ---- life cycle ---------------------------------------------------------------------------- */

static int check_config(const DiGatewayConfig *cfg) {
    if (!cfg || !cfg->model_dir || !cfg->model_name || !cfg->urls || !cfg->roles)
        return di_errorf("gateway: a model directory, a model name and workers are required");
    if (cfg->port < 0 || cfg->port > 65535) return di_errorf("gateway: port %d is out of range 0..65535", cfg->port);
    if (cfg->heartbeat_ms < 50 || cfg->heartbeat_ms > 60000)
        return di_errorf("gateway: heartbeat period %d ms is out of range 50..60000", cfg->heartbeat_ms);
    if (!(cfg->connect_timeout_s > 0) || !(cfg->idle_timeout_s > 0) || !(cfg->request_timeout_s >= 0))
        return di_errorf("gateway: timeouts must be positive");
    if (cfg->room_deadline_ms <= 0 || cfg->max_body_bytes == 0) return di_errorf("gateway: bad room deadline or body limit");
    if (cfg->api_key && (strlen(cfg->api_key) > 512 || strpbrk(cfg->api_key, "\r\n")))
        return di_errorf("gateway: the API key must be at most 512 bytes, on one line");
    for (int i = 0; i < cfg->n_workers; i++)
        if (!cfg->urls[i] || strncmp(cfg->urls[i], "http://", 7) != 0 || strlen(cfg->urls[i]) < 8)
            return di_errorf("gateway: worker URL '%s' must be http://HOST:PORT", cfg->urls[i] ? cfg->urls[i] : "");
    return 0;
}

DiGateway *di_gateway_start(const DiGatewayConfig *cfg) {
    if (check_config(cfg) != 0 || di_gw_upstream_global_init() != 0) return NULL;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)cfg->port)};
    const char *host = cfg->host && *cfg->host ? cfg->host : "127.0.0.1";
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) return di_errorf("gateway: --host '%s' is not an IPv4 address", host), NULL;
    DiGateway *g = di_calloc(1, sizeof *g, "gateway");
    if (!g) return NULL;
    g->cfg = *cfg;
    pthread_mutex_init(&g->quit_lock, NULL);
    pthread_cond_init(&g->quit_cond, NULL);
    if (di_gw_pool_init(&g->pool, &cfg->pool, cfg->urls, cfg->roles, cfg->n_workers, cfg->model_name) != 0 ||
        !(g->text = di_serve_text_open(cfg->model_dir))) {
        di_gateway_stop(g);
        return NULL;
    }
    di_gw_heartbeat_round(g); /* the workers that answer are in rotation from the first request */
    if (pthread_create(&g->heartbeat, NULL, di_gw_heartbeat_main, g) != 0) {
        di_gateway_stop(g);
        return di_errorf("gateway: cannot start the heartbeat thread"), NULL;
    }
    g->heartbeat_started = true;
    g->daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG,
                                 0, NULL, NULL, on_request, g, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, g, MHD_OPTION_CONNECTION_TIMEOUT,
                                 (unsigned)(cfg->idle_timeout_s + 1), MHD_OPTION_CONNECTION_LIMIT,
                                 cfg->max_connections ? cfg->max_connections : 1024u,
                                 MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u, MHD_OPTION_EXTERNAL_LOGGER, log_mhd, NULL,
                                 MHD_OPTION_END);
    const union MHD_DaemonInfo *info = g->daemon ? MHD_get_daemon_info(g->daemon, MHD_DAEMON_INFO_BIND_PORT) : NULL;
    if (!info) {
        di_gateway_stop(g);
        return di_errorf("gateway: cannot listen on %s:%d", host, cfg->port), NULL;
    }
    g->port = info->port;
    return g;
}

int di_gateway_port(const DiGateway *g) { return g ? g->port : -1; }

void di_gateway_stop(DiGateway *g) {
    if (!g) return;
    if (g->daemon) MHD_stop_daemon(g->daemon);
    pthread_mutex_lock(&g->quit_lock);
    atomic_store(&g->quit, true);
    pthread_cond_broadcast(&g->quit_cond);
    pthread_mutex_unlock(&g->quit_lock);
    if (g->heartbeat_started) pthread_join(g->heartbeat, NULL);
    di_serve_text_close(g->text);
    di_gw_pool_free(&g->pool);
    di_gw_upstream_global_cleanup();
    pthread_mutex_destroy(&g->quit_lock);
    pthread_cond_destroy(&g->quit_cond);
    free(g);
}
