/* gw_upstream.h — one HTTP request from the gateway to a worker, on its own thread (libcurl),
 * with the answer's bytes handed over as they arrive.
 *
 * The proxy needs to know, before it answers its client, whether the worker answered at all
 * (a request whose worker died before any byte is retried on another), then to stream the body
 * through unchanged.  So the request runs on a thread of its own (curl_easy_perform) and
 * fills a buffer; the proxy waits for the status line and headers (bounded), then drains the
 * buffer (bounded waits).  Aborting (client gone, the proxy gave up) makes libcurl close the
 * connection within its progress interval, which the worker sees as its client leaving (it
 * aborts the request and frees its state).  Every wait is bounded: connect timeout, a deadline
 * for the headers, an idle limit between bytes, a total deadline. */
#ifndef DI_GATEWAY_GW_UPSTREAM_H
#define DI_GATEWAY_GW_UPSTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct DiGwUpstream DiGwUpstream;

typedef struct {
    double connect_timeout_s;  /* TCP connect */
    double idle_timeout_s;     /* most seconds between two received bytes */
    double total_timeout_s;    /* the whole exchange; 0 = none */
    /* PD: the prefill half of the same request, or NULL.  While it is in flight the idle clock
     * (and the deadline for the headers) does not run: the decode worker answers only once the
     * prefill ends, however long that takes, and the prefill exchange is bounded by its worker's
     * own idle deadline.  It must outlive this exchange. */
    DiGwUpstream *follow;
} DiGwUpstreamLimits;

/* Start `method` (GET or POST) url+path with body (POST only; copied) and extra header lines
 * ("Name: value", NULL-terminated list; copied).  NULL with the cause. */
DiGwUpstream *di_gw_upstream_start(const char *method, const char *url, const char *path, const char *body,
                                   size_t body_len, const char *const *headers, const DiGwUpstreamLimits *lim);

/* Wait until the response's headers are in: 0 with the HTTP status and Content-Type (may be
 * "", truncated to ctype_size); -1 with the cause when the exchange failed before (connection
 * refused, reset, timeout).  Bounded by the limits. */
int di_gw_upstream_head(DiGwUpstream *u, int *status, char *ctype, size_t ctype_size);

/* Up to max body bytes: > 0 bytes copied, 0 at the end of a complete body, -1 with the cause
 * when the exchange failed (the connection broke, a timeout), -2 when nothing arrived within
 * wait_s (call again). */
ssize_t di_gw_upstream_read(DiGwUpstream *u, char *buf, size_t max, double wait_s);

/* Read the whole body (at most max_bytes); a fresh NUL-terminated buffer.  -1 with the cause. */
int di_gw_upstream_body(DiGwUpstream *u, size_t max_bytes, char **body, size_t *len);

/* Whether the exchange is over; *status (may be NULL) its HTTP status, 0 when it failed. */
bool di_gw_upstream_done(DiGwUpstream *u, int *status);

/* Abort (if still running), join the thread and free. */
void di_gw_upstream_free(DiGwUpstream *u);

/* The process-wide libcurl set-up; once, before any thread starts a request.  The cleanup frees
 * the idle connections kept for reuse (after the last exchange). */
int di_gw_upstream_global_init(void);
void di_gw_upstream_global_cleanup(void);

#endif
