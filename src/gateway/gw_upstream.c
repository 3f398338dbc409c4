/* gw_upstream.c — one gateway -> worker HTTP exchange on its own thread (see gw_upstream.h). */
#include "gateway/gw_upstream.h"

#include "base/error.h"
#include "base/mem.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Bytes buffered ahead of a slow client before the exchange is abandoned. */
#define UPSTREAM_MAX_BUFFER ((size_t)64 << 20)

struct DiGwUpstream {
    CURL *curl;
    struct curl_slist *headers;
    char *body;
    DiGwUpstreamLimits lim;
    pthread_t thread;
    bool started;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    char *buf;            /* received, not yet read */
    size_t len, cap, off;
    bool head_done, done;
    int status;
    char ctype[128];
    char error[CURL_ERROR_SIZE];  /* libcurl's message */
    char why[256];                /* ours (a limit, the buffer), which libcurl's would hide */
    CURLcode rc;
    atomic_bool abort;
    double t_start, t_last;
    bool leader_was_running; /* lim.follow was in flight at the last progress call */
};

/* Idle libcurl handles, each keeping its connection to a worker open (HTTP keep-alive), so a
 * request does not pay a TCP connect; taken by the next exchange, whatever its worker. */
#define IDLE_HANDLES 128
static pthread_mutex_t idle_lock = PTHREAD_MUTEX_INITIALIZER;
static CURL *idle_handles[IDLE_HANDLES];
static int n_idle;

static CURL *handle_get(void) {
    pthread_mutex_lock(&idle_lock);
    CURL *h = n_idle > 0 ? idle_handles[--n_idle] : NULL;
    pthread_mutex_unlock(&idle_lock);
    return h ? h : curl_easy_init();
}

static void handle_put(CURL *h) {
    if (!h) return;
    curl_easy_reset(h); /* options cleared; the connection cache stays */
    pthread_mutex_lock(&idle_lock);
    if (n_idle < IDLE_HANDLES) idle_handles[n_idle++] = h, h = NULL;
    pthread_mutex_unlock(&idle_lock);
    if (h) curl_easy_cleanup(h);
}

void di_gw_upstream_global_cleanup(void) {
    pthread_mutex_lock(&idle_lock);
    while (n_idle > 0) curl_easy_cleanup(idle_handles[--n_idle]);
    pthread_mutex_unlock(&idle_lock);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int di_gw_upstream_global_init(void) {
    CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT);
    return rc == CURLE_OK ? 0 : di_errorf("libcurl: %s", curl_easy_strerror(rc));
}

static void mark_head(DiGwUpstream *u) {
    if (u->head_done) return;
    long code = 0;
    curl_easy_getinfo(u->curl, CURLINFO_RESPONSE_CODE, &code);
    if (code < 100) return; /* an interim 1xx is still to be followed by the real head */
    u->status = (int)code;
    u->head_done = true;
    pthread_cond_broadcast(&u->cond);
}

static size_t on_header(char *data, size_t size, size_t n, void *arg) {
    DiGwUpstream *u = arg;
    size_t len = size * n;
    pthread_mutex_lock(&u->lock);
    u->t_last = now_s();
    if (len >= 13 && strncasecmp(data, "content-type:", 13) == 0) {
        size_t a = 13, b = len;
        while (a < b && (data[a] == ' ' || data[a] == '\t')) a++;
        while (b > a && (data[b - 1] == '\r' || data[b - 1] == '\n' || data[b - 1] == ' ')) b--;
        size_t m = b - a < sizeof u->ctype - 1 ? b - a : sizeof u->ctype - 1;
        memcpy(u->ctype, data + a, m);
        u->ctype[m] = 0;
    }
    long code = 0;
    if ((len == 2 && data[0] == '\r') || len == 1) { /* the blank line ending a head */
        curl_easy_getinfo(u->curl, CURLINFO_RESPONSE_CODE, &code);
        if (code >= 200) mark_head(u);
    }
    pthread_mutex_unlock(&u->lock);
    return len;
}

static size_t on_body(char *data, size_t size, size_t n, void *arg) {
    DiGwUpstream *u = arg;
    size_t len = size * n;
    pthread_mutex_lock(&u->lock);
    mark_head(u);
    u->t_last = now_s();
    if (u->off > 0 && u->off == u->len) u->off = u->len = 0;
    if (u->len + len > u->cap) {
        if (u->len - u->off + len > UPSTREAM_MAX_BUFFER) {
            snprintf(u->why, sizeof u->why, "the client reads too slowly (%zu bytes buffered)", u->len - u->off);
            pthread_mutex_unlock(&u->lock);
            return 0; /* curl fails the transfer: CURLE_WRITE_ERROR */
        }
        if (u->off > 0) { /* compact first */
            memmove(u->buf, u->buf + u->off, u->len - u->off);
            u->len -= u->off;
            u->off = 0;
        }
        size_t cap = u->cap ? u->cap : 16384;
        while (cap < u->len + len) cap *= 2;
        char *nb = cap != u->cap ? realloc(u->buf, cap) : u->buf;
        if (!nb) {
            snprintf(u->why, sizeof u->why, "out of memory buffering the answer");
            pthread_mutex_unlock(&u->lock);
            return 0;
        }
        u->buf = nb;
        u->cap = cap;
    }
    if (len) memcpy(u->buf + u->len, data, len); /* u->buf is NULL before the first byte */
    u->len += len;
    pthread_cond_broadcast(&u->cond);
    pthread_mutex_unlock(&u->lock);
    return len;
}

/* Whether the exchange u follows (lim.follow) is still in flight; under u->lock (the leader's
 * lock is taken inside it, never the other way round). */
static bool leader_running(DiGwUpstream *u) {
    return u->lim.follow && !di_gw_upstream_done(u->lim.follow, NULL);
}

/* Called by libcurl at least once a second: abort on request or when a limit passed. */
static int on_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
    DiGwUpstream *u = arg;
    if (atomic_load(&u->abort)) return 1;
    pthread_mutex_lock(&u->lock);
    double t = now_s();
    bool leads = leader_running(u);
    if (leads || u->leader_was_running) u->t_last = t; /* the idle clock starts when the leader ends */
    u->leader_was_running = leads;
    double idle = t - u->t_last, total = t - u->t_start;
    int stop = 0;
    if (u->lim.idle_timeout_s > 0 && idle > u->lim.idle_timeout_s) {
        snprintf(u->why, sizeof u->why, "no byte from the worker for %.0f s", idle);
        stop = 1;
    } else if (u->lim.total_timeout_s > 0 && total > u->lim.total_timeout_s) {
        snprintf(u->why, sizeof u->why, "the exchange passed its %.0f s deadline", u->lim.total_timeout_s);
        stop = 1;
    }
    pthread_mutex_unlock(&u->lock);
    return stop;
}

static void *run(void *arg) {
    DiGwUpstream *u = arg;
    CURLcode rc = curl_easy_perform(u->curl);
    pthread_mutex_lock(&u->lock);
    u->rc = rc;
    if (rc == CURLE_OK) mark_head(u);
    u->done = true;
    pthread_cond_broadcast(&u->cond);
    pthread_mutex_unlock(&u->lock);
    return NULL;
}

DiGwUpstream *di_gw_upstream_start(const char *method, const char *url, const char *path, const char *body,
                                   size_t body_len, const char *const *headers, const DiGwUpstreamLimits *lim) {
    if (!method || !url || !path || !lim || (body_len && !body)) return di_errorf("upstream: NULL argument"), NULL;
    bool post = strcmp(method, "POST") == 0;
    if (!post && strcmp(method, "GET") != 0) return di_errorf("upstream: method %s is not proxied", method), NULL;
    DiGwUpstream *u = di_calloc(1, sizeof *u, "upstream");
    if (!u) return NULL;
    pthread_mutex_init(&u->lock, NULL);
    pthread_cond_init(&u->cond, NULL);
    u->lim = *lim;
    u->t_start = u->t_last = now_s();
    size_t ulen = strlen(url) + strlen(path) + 1;
    char *full = malloc(ulen);
    u->curl = handle_get();
    u->body = malloc(body_len + 1);
    if (!full || !u->curl || !u->body) {
        free(full);
        di_gw_upstream_free(u);
        return di_errorf("upstream: out of memory"), NULL;
    }
    snprintf(full, ulen, "%s%s", url, path);
    if (body_len) memcpy(u->body, body, body_len);
    u->body[body_len] = 0;
    u->headers = curl_slist_append(NULL, "Expect:"); /* no 100-continue round trip */
    for (size_t i = 0; headers && headers[i]; i++) u->headers = curl_slist_append(u->headers, headers[i]);
    CURL *c = u->curl;
    curl_easy_setopt(c, CURLOPT_URL, full);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, u->headers);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)(lim->connect_timeout_s * 1000 + 1));
    if (lim->total_timeout_s > 0) curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(lim->total_timeout_s * 1000 + 1));
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, u);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, u);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, u);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, u->error);
    curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
    if (post) {
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, u->body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
    }
    free(full); /* libcurl copies the URL */
    if (pthread_create(&u->thread, NULL, run, u) != 0) {
        di_gw_upstream_free(u);
        return di_errorf("upstream: cannot start a thread: %s", strerror(errno)), NULL;
    }
    u->started = true;
    return u;
}

/* The cause of a failed exchange (under the lock). */
static int failure(DiGwUpstream *u) {
    const char *what = u->why[0] ? u->why : u->error[0] ? u->error : curl_easy_strerror(u->rc);
    return di_errorf("%s", what);
}

/* Wait on the condition until `deadline` (monotonic seconds); false once it passed. */
static bool wait_until(DiGwUpstream *u, double deadline) {
    double left = deadline - now_s();
    if (left <= 0) return false;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double wake = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + (left < 0.5 ? left : 0.5);
    ts.tv_sec = (time_t)wake;
    ts.tv_nsec = (long)((wake - (double)ts.tv_sec) * 1e9);
    pthread_cond_timedwait(&u->cond, &u->lock, &ts);
    return true;
}

int di_gw_upstream_head(DiGwUpstream *u, int *status, char *ctype, size_t ctype_size) {
    if (!u || !status || !ctype || !ctype_size) return di_errorf("upstream: NULL argument");
    pthread_mutex_lock(&u->lock);
    /* libcurl's own limits end the exchange; this deadline only backs them up */
    double limit = u->lim.connect_timeout_s + u->lim.idle_timeout_s + 5;
    double deadline = u->t_start + (u->lim.total_timeout_s > 0 && u->lim.total_timeout_s < limit ? u->lim.total_timeout_s : limit);
    for (;;) {
        if (u->head_done || u->done) break;
        if (leader_running(u)) deadline = now_s() + limit;
        if (!wait_until(u, deadline)) break;
    }
    int rc = 0;
    if (u->head_done) {
        *status = u->status;
        snprintf(ctype, ctype_size, "%s", u->ctype);
    } else {
        rc = u->done ? failure(u) : di_errorf("no answer from the worker within %.0f s", deadline - u->t_start);
    }
    pthread_mutex_unlock(&u->lock);
    return rc;
}

ssize_t di_gw_upstream_read(DiGwUpstream *u, char *buf, size_t max, double wait_s) {
    if (!u || !buf || !max) return di_errorf("upstream: NULL argument");
    pthread_mutex_lock(&u->lock);
    double deadline = now_s() + wait_s;
    while (u->off == u->len && !u->done && wait_until(u, deadline)) {}
    ssize_t got;
    if (u->off < u->len) {
        size_t n = u->len - u->off < max ? u->len - u->off : max;
        memcpy(buf, u->buf + u->off, n);
        u->off += n;
        got = (ssize_t)n;
    } else if (u->done) {
        got = u->rc == CURLE_OK ? 0 : failure(u);
    } else {
        got = -2;
    }
    pthread_mutex_unlock(&u->lock);
    return got;
}

int di_gw_upstream_body(DiGwUpstream *u, size_t max_bytes, char **body, size_t *len) {
    if (!u || !body || !len) return di_errorf("upstream: NULL argument");
    *body = NULL;
    *len = 0;
    size_t cap = 4096, n = 0;
    char *out = malloc(cap);
    while (out) {
        if (cap - n < 2048) {
            char *nb = cap < max_bytes + 4096 ? realloc(out, cap * 2) : NULL;
            if (!nb) break;
            out = nb;
            cap *= 2;
        }
        ssize_t got = di_gw_upstream_read(u, out + n, cap - n - 1, 1.0);
        if (got == -2) continue; /* the exchange's own limits bound this loop */
        if (got < 0) {
            free(out);
            return -1;
        }
        if (got == 0) {
            out[n] = 0;
            *body = out;
            *len = n;
            return 0;
        }
        n += (size_t)got;
        if (n > max_bytes) break;
    }
    free(out);
    return di_errorf("upstream: the answer is larger than %zu bytes or memory ran out", max_bytes);
}

bool di_gw_upstream_done(DiGwUpstream *u, int *status) {
    if (!u) return false;
    pthread_mutex_lock(&u->lock);
    bool done = u->done;
    if (status) *status = done && u->rc == CURLE_OK ? u->status : 0;
    pthread_mutex_unlock(&u->lock);
    return done;
}

void di_gw_upstream_free(DiGwUpstream *u) {
    if (!u) return;
    atomic_store(&u->abort, true);
    if (u->started) pthread_join(u->thread, NULL);
    handle_put(u->curl);
    curl_slist_free_all(u->headers);
    pthread_mutex_destroy(&u->lock);
    pthread_cond_destroy(&u->cond);
    free(u->body);
    free(u->buf);
    free(u);
}
