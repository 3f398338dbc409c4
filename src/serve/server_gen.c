/* server_gen.c — generation requests (chat, completions, responses, messages) of the server.
 *
 * Life cycle of one request (see server_internal.h for the Exchange):
 *   1. server.c collects the body, then calls di_srv_generate: the connection is parked and a
 *      worker parses the body, checks model / draining / queue, and submits it to the backend
 *      (which tokenizes the prompt there too), then resumes the connection.  The HTTP thread
 *      never parses or tokenizes, so a client sending 8 MB bodies cannot stall other streams.
 *   2. MHD hands the request back (di_srv_generate_again): a refusal is answered; otherwise
 *      - streaming: at the backend's first event a callback response is queued; its reader
 *        hands out the SSE bytes the backend thread appended, and parks the connection when
 *        there are none yet;
 *      - non-streaming: the connection stays parked until FINISH, then the JSON is queued.
 *   3. The backend thread calls on_event: encode, append, resume the connection.
 *   4. A parked connection is not watched by MHD, so the watchdog peeks at its socket and
 *      aborts the request as soon as the client has closed it (queued streams included); MHD's
 *      completion callback (server.c) aborts a request whose connection ended otherwise.
 * A request whose client left is counted as status 499 (nginx's "client closed request"),
 * neither a success nor a server error. */
#include "serve/server_internal.h"

#include "base/error.h"
#include "base/log.h"
#include "base/mem.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define STATUS_CLIENT_CLOSED 499

/* ---- exchange references and the live list ---------------------------------------------- */

void di_srv_exchange_release(Exchange *x) {
    pthread_mutex_lock(&x->lock);
    int left = --x->refs;
    pthread_mutex_unlock(&x->lock);
    if (left) return;
    di_api_stream_free(x->stream);
    if (x->have_req) di_api_request_free(&x->req);
    di_api_buf_free(&x->body);
    di_api_buf_free(&x->out);
    free(x->prep_error);
    free(x->reply);
    free(x->pd_state);
    pthread_mutex_destroy(&x->lock);
    free(x);
}

static void exchange_retain(Exchange *x) {
    pthread_mutex_lock(&x->lock);
    x->refs++;
    pthread_mutex_unlock(&x->lock);
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

/* ---- backend events --------------------------------------------------------------------- */

static int64_t event_tokens(const DiApiEvent *ev) {
    return ev->kind == DI_API_EV_REASONING || ev->kind == DI_API_EV_CONTENT || ev->kind == DI_API_EV_TOOL_ARGS ||
                   ev->kind == DI_API_EV_TOOL_BEGIN
               ? ev->tokens
               : 0;
}

/* The request metrics of a FINISH: tokens, finish reason, latencies. */
static void count_finish(Exchange *x, const DiApiEvent *ev, double t) {
    DiServer *srv = x->srv;
    const DiApiOutput *o = di_api_stream_output(x->stream);
    di_metrics_tokens(srv->metrics, o->prompt_tokens, o->cache_hit_tokens, o->completion_tokens);
    if (ev->finish == DI_API_FINISH_ABORT) di_metrics_aborted(srv->metrics);
    di_metrics_finished(srv->metrics, ev->finish, t - x->t_submit);
    DiBackendTimes times;
    if (srv->backend.times && srv->backend.times(srv->backend.self, x->backend_id, &times) == 0)
        di_metrics_phases(srv->metrics, times.queue_s, times.prefill_s, times.decode_s);
    di_metrics_in_flight(srv->metrics, -1);
}

static void on_event(void *user, const DiApiEvent *ev) {
    Exchange *x = user;
    DiServer *srv = x->srv;
    double t = di_srv_now();
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
        count_finish(x, &e, t);
    }
    if (ev->kind == DI_API_EV_READY) x->seen_ready = true;
    if (finish && ev->finish == DI_API_FINISH_ERROR) x->error_status = ev->http_status ? ev->http_status : 500;
    x->seen_event = true;
    if (x->suspended) {
        x->suspended = false;
        MHD_resume_connection(x->conn);
    }
    pthread_mutex_unlock(&x->lock);
    if (finish || event_tokens(ev) > 0) di_srv_pd_release(x); /* admitted (or over): unpin its room */
    if (finish) {
        live_remove(srv, x);
        di_srv_exchange_release(x); /* the backend's reference */
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

static void free_sse(void *cls) { di_srv_exchange_release(cls); }

/* ---- preparation (a worker thread) -------------------------------------------------------- */

static const char *id_prefix(DiApiProtocol p) {
    switch (p) {
    case DI_API_CHAT: return "chatcmpl-";
    case DI_API_COMPLETIONS: return "cmpl-";
    case DI_API_RESPONSES: return "resp_";
    case DI_API_MESSAGES: return "msg_";
    }
    return "req-";
}

/* Parse, check and submit; 0, or the refusal's HTTP status with the message in the error
 * buffer. */
static int prepare_and_submit(Exchange *x) {
    DiServer *srv = x->srv;
    int status = 400;
    if (di_api_request_parse(x->protocol, x->body.data, x->body.len, &x->req, &status) != 0) return status;
    x->have_req = true;
    const char *served = srv->backend.model_name;
    if (!x->req.model || strcmp(x->req.model, served) != 0) {
        di_errorf("The model '%.200s' does not exist; this server serves '%s'", x->req.model ? x->req.model : "",
                  served);
        return 404;
    }
    if (atomic_load(&srv->stopping)) {
        di_errorf("The server is shutting down");
        return 503;
    }
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(x->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    x->fd = ci ? ci->connect_fd : -1;
    if (x->has_room && di_srv_pd_wait_room(x) != 0) return STATUS_CLIENT_CLOSED;
    DiBackendStats st = {0};
    srv->backend.stats(srv->backend.self, &st);
    if (srv->cfg.max_queue > 0 && st.queued >= srv->cfg.max_queue) {
        di_errorf("The server is busy: %d requests are queued (limit %d); retry later", st.queued, srv->cfg.max_queue);
        return 429;
    }
    char id[80];
    snprintf(id, sizeof id, "%s%016llx%08llx", id_prefix(x->protocol), (unsigned long long)srv->id_salt,
             (unsigned long long)atomic_fetch_add(&srv->next_id, 1));
    if (!(x->stream = di_api_stream_create(&x->req, id, (int64_t)time(NULL)))) return 500;
    x->t_submit = di_srv_now();
    x->deadline = srv->cfg.request_timeout_s > 0 ? x->t_submit + srv->cfg.request_timeout_s : 0;
    exchange_retain(x); /* the backend's reference, released at FINISH */
    di_metrics_in_flight(srv->metrics, 1);
    live_add(srv, x);
    pthread_mutex_lock(&x->lock);
    x->submitted = true; /* before submit: a FINISH may come at once */
    pthread_mutex_unlock(&x->lock);
    status = 500;
    if (srv->backend.submit(srv->backend.self, &x->req, on_event, x, &x->backend_id, &status) != 0) {
        pthread_mutex_lock(&x->lock);
        x->submitted = false;
        pthread_mutex_unlock(&x->lock);
        live_remove(srv, x);
        di_metrics_in_flight(srv->metrics, -1);
        di_srv_exchange_release(x);
        return status;
    }
    return 0;
}

static Exchange *of_work(DiWork *w) { return (Exchange *)((char *)w - offsetof(Exchange, work)); }

/* The end of a worker's job: record the outcome (status, reply or the error message), resume
 * the connection, drop the worker's reference. */
static void worker_done(Exchange *x, int status, char *reply) {
    pthread_mutex_lock(&x->lock);
    x->prep_status = status;
    x->reply = reply;
    if (status && !reply) x->prep_error = di_strdup(di_error_message());
    x->preparing = false;
    MHD_resume_connection(x->conn);
    pthread_mutex_unlock(&x->lock);
    di_srv_exchange_release(x); /* the worker's reference */
}

static void prepare(DiWork *w) {
    Exchange *x = of_work(w);
    int status = prepare_and_submit(x);
    if (status) di_srv_pd_release(x); /* refused after its room's wait: nothing else will */
    worker_done(x, status, NULL);
}

static void run_deferred(DiWork *w) {
    Exchange *x = of_work(w);
    json_t *reply = NULL;
    int status = x->deferred(x, &reply);
    char *text = reply ? json_dumps(reply, JSON_COMPACT) : NULL;
    json_decref(reply);
    if (reply && !text) {
        di_errorf("out of memory serializing the answer");
        status = 500;
    }
    worker_done(x, status, text);
}

/* Park the connection and hand the request to a worker (inline when the workers stopped). */
static enum MHD_Result park_on_worker(Exchange *x, void (*run)(DiWork *w)) {
    pthread_mutex_lock(&x->lock);
    x->refs++; /* the worker's reference */
    x->preparing = true;
    MHD_suspend_connection(x->conn);
    pthread_mutex_unlock(&x->lock);
    x->work.run = run;
    if (di_work_submit(x->srv->work, &x->work) != 0) run(&x->work);
    return MHD_YES;
}

enum MHD_Result di_srv_generate(Exchange *x) {
    if (x->body_too_large) {
        char msg[160];
        snprintf(msg, sizeof msg, "Request body too large: the limit is %zu bytes", x->srv->cfg.max_body_bytes);
        return di_srv_send_error(x, 413, msg);
    }
    if (di_srv_pd_headers(x) != 0) return di_srv_send_error(x, 400, di_error_message());
    return park_on_worker(x, prepare);
}

enum MHD_Result di_srv_defer(Exchange *x, DeferredFn fn) {
    x->deferred = fn;
    return park_on_worker(x, run_deferred);
}

enum MHD_Result di_srv_deferred_again(Exchange *x) {
    if (x->preparing) return MHD_YES;
    if (x->reply) return di_srv_send_bytes(x, x->prep_status, "application/json", x->reply, strlen(x->reply));
    return di_srv_send_error(x, x->prep_status ? x->prep_status : 500, x->prep_error ? x->prep_error : "out of memory");
}

/* ---- answering -------------------------------------------------------------------------- */

/* A request whose client left: count it, say so at info level, and close the connection. */
static enum MHD_Result client_closed(Exchange *x) {
    if (!x->counted) di_metrics_request(x->srv->metrics, x->endpoint, STATUS_CLIENT_CLOSED);
    x->counted = true;
    DI_INFO("%s: the client closed the connection before its answer; request aborted", x->endpoint);
    return MHD_NO;
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

/* A non-streaming request resumed after FINISH: the whole response. */
static enum MHD_Result finish_generation(Exchange *x) {
    const DiApiOutput *o = di_api_stream_output(x->stream);
    if (x->client_gone) return client_closed(x);
    if (o->finish == DI_API_FINISH_ERROR)
        return di_srv_send_error(x, x->error_status ? x->error_status : 500, o->error ? o->error : "generation failed");
    if (o->finish == DI_API_FINISH_ABORT)
        return di_srv_send_error(x, 503, "The request was aborted (server shutting down)");
    return di_srv_send_json(x, 200, di_api_stream_response(x->stream));
}

/* A dispatched request, each time MHD hands it back: answer a refusal, or wait for the
 * backend, then answer.  A stream starts (status 200) only at the backend's first event, so a
 * request the backend refuses before READY (prompt too long for the context...) still gets its
 * 4xx status. */
enum MHD_Result di_srv_generate_again(Exchange *x) {
    if (x->preparing || x->stream_started) return MHD_YES;
    if (!x->submitted)
        return di_srv_send_error(x, x->prep_status ? x->prep_status : 500, x->prep_error ? x->prep_error : "out of memory");
    if (!x->req.stream) return wait_for_backend(x, true) == MHD_YES ? MHD_YES : finish_generation(x);
    if (wait_for_backend(x, false) == MHD_YES) return MHD_YES;
    pthread_mutex_lock(&x->lock);
    bool refused = x->finished && !x->seen_ready && x->error_status;
    bool gone = x->client_gone;
    pthread_mutex_unlock(&x->lock);
    if (gone) return client_closed(x);
    if (refused) return finish_generation(x);
    return start_stream(x);
}

/* ---- deadlines and clients gone (the watchdog) ------------------------------------------- */

bool di_srv_peer_closed(int fd) {
    if (fd < 0) return false; /* unknown: only a seen close counts */
    char c;
    ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* A parked request (queued or running, streaming or not) whose client has gone.  Under
 * x->lock the connection stays suspended (on_event resumes it under the same lock), so MHD
 * cannot have closed the socket. */
static bool client_left(Exchange *x) {
    pthread_mutex_lock(&x->lock);
    bool gone = x->suspended && !x->finished && !x->client_gone && x->fd >= 0 && di_srv_peer_closed(x->fd);
    if (gone) x->client_gone = true;
    pthread_mutex_unlock(&x->lock);
    return gone;
}

int di_srv_abort_live(DiServer *srv, bool all) {
    uint64_t ids[256];
    int n = 0, live = 0;
    double t = di_srv_now();
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
