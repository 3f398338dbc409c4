/* server_prefill.c — POST /internal/prefill of a prefill worker (the PD contract of issue 24).
 *
 * Body: {"room": "<u64>", "decode": "HOST:PORT", "path": "/v1/chat/completions" | ...,
 *        "body": <the client's request>, "deadline_ms": n (default 30000)}.
 * On a preparation worker: parse the client's request as its own endpoint would and tokenize it,
 * connect to the decode worker's transfer listener (registration checks the KV identity and the
 * state page size before any work), run the prompt LESS ITS LAST TOKEN through the engine with
 * one output token as an exact_state request (prefilled from 0 or from an exact prefix-cache
 * state, never from KV blocks with a bounded replay), take that request's exact state at its
 * FINISH (engine.h di_engine_export_state: tokens + state pages) and send it as STATE, then DONE.
 * The decode worker imports it and computes the last prompt position itself, sampling the first
 * token exactly as a cold single server does, so PD outputs are bit-identical to `serve --role
 * both`.  (The finished request's own state would cover the whole prompt, which leaves the
 * decode side no logits row to sample the first token from; the prompt-less-one state does.)
 * A one-token prompt has no state to send: DONE alone, and the decode worker prefills it.
 * Any failure after connecting sends ABORT(room); so does a client that leaves (the prefill is
 * aborted too).  Reply: {"room", "prompt_tokens", "state_tokens", "blocks" (0), "bytes" (the
 * state's), "streamed_bytes" (of them, sent while the prefill ran), "cached_blocks", "cached_tokens" (of the prompt less its last token, reused from the
 * prefix cache), "prefill_s", "transfer_s"}, or an OpenAI-style error.  A gateway fits its
 * prefill cost model on (state_tokens - cached_tokens, cached_tokens, prefill_s).
 *
 * Streaming (serving.md §5.2): while the prefill runs, the pages of its state that no later chunk
 * writes (compressed KV and index-key pages whose rows are all computed, engine.h
 * di_engine_state_progress) are sent as parts of STATE, in whole DI_KV_CHUNK_BYTES chunks at
 * their offsets in the state the export will give; at FINISH only the rest is sent: the header,
 * tokens, fixed pages (window rings and the like change to the end) and the open pages.  Our
 * unit is the prefill chunk, not the official layer group: a chunk's rows are final for all
 * layers at once when its forward ends.  Each chunk's progress also resends BEGIN, and the
 * deadline is an idle one on both sides: a prefill is aborted, and a decode worker stops waiting
 * for its room, only after deadline_ms with no progress, so a long prompt is never cut off while
 * it advances (nor prefilled twice). */
#include "serve/server_internal.h"

#include "base/env.h"
#include "base/error.h"
#include "base/log.h"
#include "base/mem.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_DEADLINE_MS 30000
/* How long FINISH may take once a prefill is aborted (it comes within a step) before the handler
 * gives up on it with a 503. */
#define ABORT_WAIT_S 30.0

/* A chunk of the state streamed before FINISH: bytes [offset, offset + len) of it. */
typedef struct Part {
    size_t offset, len;
    struct Part *next;
    uint8_t data[];
} Part;

/* The engine's answer to the one-token run, shared with the backend's thread until FINISH. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    bool finished;
    DiApiFinish finish;
    int http_status;
    char error[512];
    int64_t cache_hit_tokens;
    void *state; /* the exact state handed over before FINISH (DiApiRequest.pd_export) */
    size_t state_len;
    char state_error[512];
    /* streaming (pd_progress): parts cut from the final pages, in offset order, from stream_lo */
    int64_t committed;          /* positions computed, as last reported */
    size_t stream_total;        /* the state's bytes (0 before the first report) */
    size_t stream_lo, stream_hi; /* parts cover [stream_lo, stream_hi) of it */
    Part *parts, **parts_tail;  /* cut, not yet sent */
} Run;

static void free_parts(Part *p) {
    while (p) {
        Part *next = p->next;
        free(p);
        p = next;
    }
}

static void run_unref(Run *r) {
    pthread_mutex_lock(&r->mu);
    int left = --r->refs;
    pthread_mutex_unlock(&r->mu);
    if (left) return;
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r->state);
    free_parts(r->parts);
    free(r);
}

/* Bytes [from, to) of the state out of its pages (all of them final). */
static void copy_out(const DiPdProgress *s, size_t from, size_t to, uint8_t *out) {
    while (from < to) {
        size_t in_pages = from - s->pages_at, page = in_pages / s->page_bytes, at = in_pages % s->page_bytes;
        size_t n = s->page_bytes - at < to - from ? s->page_bytes - at : to - from;
        memcpy(out, s->pages[page] + at, n);
        out += n;
        from += n;
    }
}

/* On the backend's thread after a step: cut every whole chunk the final pages now cover. */
static void on_run_progress(void *user, const DiPdProgress *s) {
    Run *r = user;
    const size_t C = DI_KV_CHUNK_BYTES;
    pthread_mutex_lock(&r->mu);
    r->committed = s->n_committed;
    if (r->stream_total == 0 && s->state_bytes > 0) { /* the first report: streaming starts at a chunk */
        size_t lo = s->pages_at + s->first_final * s->page_bytes;
        r->stream_total = s->state_bytes;
        r->stream_lo = r->stream_hi = (lo + C - 1) / C * C;
        if (r->stream_lo > s->state_bytes) r->stream_lo = r->stream_hi = s->state_bytes;
    }
    size_t final_end = s->pages_at + s->end_final * s->page_bytes;
    while (s->state_bytes == r->stream_total && r->stream_hi < r->stream_total) {
        size_t end = r->stream_hi + C < r->stream_total ? r->stream_hi + C : r->stream_total;
        if (end > final_end) break;
        Part *part = malloc(sizeof *part + (end - r->stream_hi));
        if (!part) break; /* not streamed: FINISH sends it with the rest */
        *part = (Part){r->stream_hi, end - r->stream_hi, NULL};
        copy_out(s, r->stream_hi, end, part->data);
        *r->parts_tail = part;
        r->parts_tail = &part->next;
        r->stream_hi = end;
    }
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void on_run_state(void *user, void *blob, size_t len, const char *error) {
    Run *r = user;
    pthread_mutex_lock(&r->mu);
    free(r->state);
    r->state = blob;
    r->state_len = len;
    snprintf(r->state_error, sizeof r->state_error, "%s", error ? error : "");
    pthread_mutex_unlock(&r->mu);
}

static void on_run_event(void *user, const DiApiEvent *ev) {
    Run *r = user;
    if (ev->kind != DI_API_EV_FINISH) return;
    pthread_mutex_lock(&r->mu);
    r->finished = true;
    r->finish = ev->finish;
    r->http_status = ev->http_status;
    r->cache_hit_tokens = ev->cache_hit_tokens;
    if (ev->finish == DI_API_FINISH_ERROR) snprintf(r->error, sizeof r->error, "%.*s", (int)ev->len, ev->text ? ev->text : "");
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    run_unref(r);
}

/* What one /internal/prefill call works on. */
typedef struct {
    uint64_t room;
    const char *decode;
    DiApiProtocol protocol;
    double deadline;      /* di_kv_now() clock: idle_s after the last progress */
    double idle_s;        /* deadline_ms */
    DiApiRequest req;
    bool have_req;
    int32_t *ids;
    size_t n_ids;
    DiKvSend *send;
    int64_t cache_hit_tokens;
    void *state;
    size_t state_len;
    size_t stream_lo, stream_hi; /* the bytes of the state already sent as parts */
    size_t streamed_bytes;
    int64_t progressed;          /* positions computed when the deadline was last moved */
    bool send_failed;
} Prefill;

static int refuse(int status, const char *msg) {
    di_errorf("%s", msg);
    return status;
}

static int protocol_of(const char *path, DiApiProtocol *p) {
    static const struct {
        const char *path;
        DiApiProtocol protocol;
    } k[] = {{"/v1/chat/completions", DI_API_CHAT},
             {"/v1/completions", DI_API_COMPLETIONS},
             {"/v1/messages", DI_API_MESSAGES},
             {"/v1/responses", DI_API_RESPONSES}};
    for (size_t i = 0; path && i < sizeof k / sizeof k[0]; i++)
        if (strcmp(path, k[i].path) == 0) {
            *p = k[i].protocol;
            return 0;
        }
    return -1;
}

/* The envelope's fields; the client's request parsed as its endpoint would.  0 or a status. */
static int parse_envelope(Exchange *x, json_t *env, Prefill *p) {
    static const char *const known[] = {"room", "decode", "path", "body", "deadline_ms", NULL};
    const char *key;
    json_t *v;
    json_object_foreach(env, key, v) {
        size_t i = 0;
        while (known[i] && strcmp(known[i], key) != 0) i++;
        if (!known[i]) return di_errorf("Unsupported field '%.100s' for /internal/prefill", key), 400;
    }
    const char *room = json_string_value(json_object_get(env, "room"));
    if (di_srv_parse_u64(room, &p->room) != 0)
        return refuse(400, "Invalid room: expected a u64 as a decimal string");
    if (!(p->decode = json_string_value(json_object_get(env, "decode"))) || di_kv_check_address(p->decode) != 0)
        return refuse(400, "Invalid decode: expected the decode worker's transfer address, an IPv4 HOST:PORT");
    if (protocol_of(json_string_value(json_object_get(env, "path")), &p->protocol) != 0)
        return refuse(400, "Invalid path: expected /v1/chat/completions, /v1/completions, /v1/messages or /v1/responses");
    json_t *dl = json_object_get(env, "deadline_ms");
    if (dl && (!json_is_integer(dl) || json_integer_value(dl) < 1 || json_integer_value(dl) > 3600000))
        return refuse(400, "Invalid deadline_ms: expected an integer in 1..3600000");
    p->idle_s = (dl ? (double)json_integer_value(dl) : DEFAULT_DEADLINE_MS) / 1000.0;
    p->deadline = di_kv_now() + p->idle_s;
    json_t *body = json_object_get(env, "body");
    if (!json_is_object(body)) return refuse(400, "Invalid body: expected the client's request object");
    char *text = json_dumps(body, JSON_COMPACT);
    if (!text) return refuse(500, "out of memory");
    int status = 400;
    int rc = di_api_request_parse(p->protocol, text, strlen(text), &p->req, &status);
    free(text);
    if (rc != 0) return status;
    p->have_req = true;
    const char *served = x->srv->backend.model_name;
    if (!p->req.model || strcmp(p->req.model, served) != 0)
        return di_errorf("The model '%.200s' does not exist; this server serves '%s'", p->req.model ? p->req.model : "",
                         served), 404;
    return 0;
}

/* Under r->mu, which it drops while sending: the parts cut since the last call go out, and
 * progress moves the idle deadline on and says so to the decode side (BEGIN again). */
static void stream_parts(Prefill *p, Run *r) {
    Part *parts = r->parts;
    r->parts = NULL;
    r->parts_tail = &r->parts;
    int64_t committed = r->committed;
    size_t total = r->stream_total;
    pthread_mutex_unlock(&r->mu);
    if (committed > p->progressed && !p->send_failed) {
        p->progressed = committed;
        p->deadline = di_kv_now() + p->idle_s;
        p->send_failed = di_kv_send_begin(p->send, p->room, p->deadline) != 0;
    }
    for (Part *q = parts; q && !p->send_failed; q = q->next) {
        p->send_failed = di_kv_send_state_part(p->send, p->room, total, q->offset, q->data, q->len, p->deadline) != 0;
        if (p->send_failed) break;
        if (p->stream_hi == p->stream_lo) p->stream_lo = q->offset; /* parts are contiguous, in order */
        p->stream_hi = q->offset + q->len;
        p->streamed_bytes += q->len;
    }
    free_parts(parts);
    pthread_mutex_lock(&r->mu);
}

/* Run the prefill: the prompt less its last token with one output token, its exact state kept in
 * p->state.  0, or a status with the cause. */
static int run_prefill(Exchange *x, Prefill *p) {
    DiServer *srv = x->srv;
    Run *r = di_calloc(1, sizeof *r, "prefill run");
    if (!r) return 500;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->refs = 2; /* this worker and the backend (until FINISH) */
    r->parts_tail = &r->parts;
    p->req.max_tokens = 1;
    p->req.stream = false;
    p->req.pd_export = on_run_state;
    p->req.pd_progress = on_run_progress;
    p->req.pd_user = r;
    uint64_t id = 0;
    int status = 500;
    if (srv->backend.submit(srv->backend.self, &p->req, on_run_event, r, &id, &status) != 0) {
        r->refs = 1;
        run_unref(r);
        return status;
    }
    bool aborted = false;
    double aborted_at = 0; /* when it was aborted */
    pthread_mutex_lock(&r->mu);
    while (!r->finished) {
        if (aborted && di_kv_now() > aborted_at + ABORT_WAIT_S) {
            /* The backend copied the request at submit and Run is refcounted, so returning
             * without FINISH is safe: the backend's reference keeps Run alive until it comes. */
            pthread_mutex_unlock(&r->mu);
            run_unref(r);
            DI_ERROR("room %" PRIu64 ": the engine sent no FINISH %g s after the prefill was aborted", p->room,
                     ABORT_WAIT_S);
            return refuse(503, "the prefill was aborted and the engine did not finish it in time");
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        if (!aborted) stream_parts(p, r); /* unlocks and relocks r->mu */
        if (!aborted && !r->finished &&
            (p->send_failed || di_kv_now() > p->deadline || di_srv_peer_closed(x->fd) || atomic_load(&srv->stopping))) {
            aborted = true; /* FINISH(ABORT) comes within a step */
            aborted_at = di_kv_now();
            pthread_mutex_unlock(&r->mu);
            srv->backend.abort(srv->backend.self, id);
            pthread_mutex_lock(&r->mu);
        }
    }
    DiApiFinish finish = r->finish;
    int http = r->http_status;
    p->cache_hit_tokens = r->cache_hit_tokens;
    char err[sizeof r->error + sizeof r->state_error];
    snprintf(err, sizeof err, "%s", r->error);
    p->state = r->state;
    p->state_len = r->state_len;
    r->state = NULL;
    if (finish != DI_API_FINISH_ERROR && finish != DI_API_FINISH_ABORT && !p->state)
        snprintf(err, sizeof err, "the prefill kept no exact state to send: %s", r->state_error);
    size_t stream_total = r->stream_total;
    pthread_mutex_unlock(&r->mu);
    run_unref(r);
    if (p->send_failed) return 502; /* the cause is set */
    if (finish == DI_API_FINISH_ERROR) return refuse(http ? http : 500, err);
    if (finish == DI_API_FINISH_ABORT)
        return refuse(di_srv_peer_closed(x->fd) ? 499 : atomic_load(&srv->stopping) ? 503 : 504,
                      "the prefill was aborted (deadline, client gone or server stopping)");
    if (!p->state) return refuse(500, err);
    if (p->stream_hi > p->stream_lo && p->state_len != stream_total)
        return refuse(500, "the exported state's size differs from the one streamed (an engine bug)");
    return 0;
}

/* What of the state was not streamed (all of it, or none for a one-token prompt), then DONE. */
static int send_state(Prefill *p) {
    if (p->state) {
        const uint8_t *s = p->state;
        size_t lo = p->stream_hi > p->stream_lo ? p->stream_lo : 0, hi = p->stream_hi > p->stream_lo ? p->stream_hi : 0;
        if (lo > 0 && di_kv_send_state_part(p->send, p->room, p->state_len, 0, s, lo, p->deadline) != 0) return 502;
        if (hi < p->state_len && di_kv_send_state_part(p->send, p->room, p->state_len, hi, s + hi, p->state_len - hi, p->deadline) != 0)
            return 502;
    }
    return di_kv_send_done(p->send, p->room, 0, p->state ? p->state_len : 0, p->deadline) != 0 ? 502 : 0;
}

static json_t *reply_of(const Prefill *p, double prefill_s, double transfer_s, int block_tokens) {
    char room[24];
    snprintf(room, sizeof room, "%" PRIu64, p->room);
    return json_pack("{s:s, s:I, s:I, s:i, s:I, s:I, s:I, s:I, s:f, s:f}", "room", room, "prompt_tokens", (json_int_t)p->n_ids,
                     "state_tokens", (json_int_t)(p->state ? p->n_ids - 1 : 0), "blocks", 0, "bytes",
                     (json_int_t)(p->state ? p->state_len : 0), "streamed_bytes", (json_int_t)p->streamed_bytes, "cached_blocks",
                     (json_int_t)(p->cache_hit_tokens / block_tokens), "cached_tokens", (json_int_t)p->cache_hit_tokens,
                     "prefill_s", prefill_s, "transfer_s", transfer_s);
}

static int prefill_handler(Exchange *x, json_t **reply) {
    DiServer *srv = x->srv;
    Prefill p = {0};
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(x->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    x->fd = ci ? ci->connect_fd : -1;
    json_error_t jerr;
    json_t *env = json_loadb(x->body.data ? x->body.data : "", x->body.len, 0, &jerr);
    int status = !di_srv_cluster_token_ok(x) ? refuse(403, "this prefill worker has a cluster key: /internal/prefill needs "
                                                          "its token in X-DI-Cluster-Key (the gateway's --cluster-key)")
                 : !json_is_object(env) ? refuse(400, "Invalid request body: expected a JSON object")
                                        : parse_envelope(x, env, &p);
    DiKvIdentity id = {.fingerprint = srv->kv.fingerprint, .block_tokens = srv->kv.block_tokens,
                       .block_bytes = srv->kv.block_bytes, .page_bytes = srv->kv.page_bytes,
                       .cluster_key = srv->cfg.cluster_key, .cluster_key_len = srv->cfg.cluster_key_len};
    double t0 = di_kv_now(), t1 = t0;
    int tokenize_status = 500;
    if (status == 0 && srv->backend.tokenize(srv->backend.self, &p.req, true, &p.ids, &p.n_ids, &tokenize_status) != 0)
        status = tokenize_status;
    DiEnvPdFaults faults; /* test-only (env.h); a malformed value was refused at startup */
    if (status == 0 && (di_env_pd_faults(&faults) != 0 || !(p.send = di_kv_send_connect(p.decode, &id, p.deadline)) ||
                        di_kv_send_set_faults(p.send, &faults) != 0 || di_kv_send_begin(p.send, p.room, p.deadline) != 0))
        status = 502;
    if (status == 0 && (p.n_ids < 2 || (status = run_prefill(x, &p)) == 0)) {
        t1 = di_kv_now();
        status = send_state(&p);
    }
    if (status == 0 && p.state) {
        atomic_fetch_add(&srv->pd_state_bytes_sent, p.state_len);
        atomic_fetch_add(&srv->pd_state_bytes_streamed, p.streamed_bytes);
    }
    if (status == 0 && !(*reply = reply_of(&p, t1 - t0, di_kv_now() - t1, srv->kv.block_tokens))) status = refuse(500, "out of memory");
    if (status != 0 && p.send) {
        char why[DI_ERROR_MAX];
        snprintf(why, sizeof why, "%s", di_error_message());
        if (di_kv_send_abort(p.send, p.room, di_kv_now() + 2) != 0) DI_WARN("room %" PRIu64 ": %s", p.room, di_error_message());
        di_errorf("%s", why);
    }
    di_kv_send_close(p.send);
    if (p.have_req) di_api_request_free(&p.req);
    free(p.ids);
    free(p.state);
    json_decref(env);
    return status ? status : 200;
}

enum MHD_Result di_srv_pd_prefill(Exchange *x) {
    if (x->srv->cfg.role != DI_ROLE_PREFILL)
        return di_srv_send_error(x, 404, x->srv->cfg.role == DI_ROLE_DECODE
                                             ? "/internal/prefill is served by --role prefill workers; this one is decode"
                                             : "/internal/prefill is served by --role prefill workers; this one is both");
    return di_srv_defer(x, prefill_handler);
}
