/* server_internal.h — what the server's modules share (not part of the server's interface):
 * the server object, one HTTP request's Exchange, and the reply helpers.
 *   server.c         life cycle, routing, connection read deadlines, the watchdog
 *   server_gen.c     generation requests: preparation on the workers, backend events, SSE
 *   server_routes.c  the other endpoints (models, health, metrics, openapi, version, tokenize)
 *   server_work.c    the preparation workers
 *   server_pd.c      the prefill/decode roles: start-up, the decode side's room wait, PD metrics
 *   server_prefill.c POST /internal/prefill (prefill role)
 * Threads: one libmicrohttpd thread owns the sockets; the workers parse and submit; the
 * backend's thread emits events; the watchdog enforces deadlines. */
#ifndef DI_SERVE_SERVER_INTERNAL_H
#define DI_SERVE_SERVER_INTERNAL_H

#include "serve/kv_transfer.h"
#include "serve/metrics.h"
#include "serve/server.h"
#include "serve/server_work.h"

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

typedef struct Exchange Exchange;
typedef struct Conn Conn;

struct DiServer {
    DiServerConfig cfg;
    DiBackend backend;
    struct MHD_Daemon *daemon;
    int port;
    DiMetrics *metrics;
    DiWorkQueue *work;             /* parse + tokenize + submit of generation requests */
    pthread_mutex_t lock;          /* guards the lists below */
    Exchange *live;                /* submitted, not yet finished */
    Conn *conns;                   /* open connections (read deadlines) */
    pthread_t watchdog;
    atomic_bool stopping;          /* draining: generation requests and /health get 503 */
    atomic_bool watchdog_quit;
    _Atomic uint64_t next_id;
    uint64_t id_salt;              /* random per process: response ids differ across restarts */
    DiBackendKv kv;                /* prefill / decode roles: the backend's KV block cache */
    DiKvRecv *recv;                /* decode role: the KV transfer listener */
    _Atomic uint64_t pd_local_prefills; /* room requests whose transfer failed or came late */
    _Atomic uint64_t pd_state_bytes_sent;     /* prefill role: exact-state bytes sent */
    _Atomic uint64_t pd_state_bytes_streamed; /*   of them, sent while their prefill ran */
};

typedef struct Route Route;
typedef enum MHD_Result (*RouteHandler)(Exchange *x);
/* A handler run on a worker: the HTTP status, with *reply the JSON body (NULL: an error whose
 * message is in the error buffer). */
typedef int (*DeferredFn)(Exchange *x, json_t **reply);

struct Route {
    const char *path;              /* exact, or a prefix when it ends with '/' */
    const char *method;
    DiApiProtocol protocol;        /* the error shape (and the protocol of generation routes) */
    RouteHandler handle;           /* NULL: a generation route */
    bool open;                     /* no API key needed */
};

/* One HTTP request.  Reference-counted by its holders: MHD's connection, a worker while it
 * prepares, the backend (until FINISH) and, when streaming, the response object. */
struct Exchange {
    DiServer *srv;
    struct MHD_Connection *conn;
    Conn *link;                    /* the connection's read-deadline record */
    const Route *route;            /* NULL: answered with `reject` */
    const char *endpoint;          /* metrics label */
    DiApiProtocol protocol;
    int reject;                    /* status of a routing refusal answered once the body is in */
    char reject_msg[300];
    const char *allow;             /* Allow header of a 405 */
    char path_arg[256];            /* what follows a prefix route's path (/v1/models/{id}) */
    DiApiBuf body;
    bool body_too_large;
    bool handled;                  /* the body is in and the request was dispatched */
    DiWork work;
    bool preparing;                /* a worker is parsing / submitting it (connection parked) */
    int prep_status;               /* the worker's refusal: status and message */
    char *prep_error;
    DeferredFn deferred;           /* a non-generation handler run on a worker ... */
    char *reply;                   /* ... and its JSON answer, serialized there too (a /tokenize
                                    * answer can be megabytes; status in prep_status) */
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
    bool has_room, room_held;      /* decode: X-DI-Room given; its blocks are pinned for us */
    uint64_t room;
    double room_deadline_ms;
    void *pd_state;                /* decode: the room's exact state (x->req.pd_state points here) */
    Exchange *prev, *next;         /* in srv->live */
};

double di_srv_now(void);

/* Replies (they count the request in the metrics under x->endpoint). */
enum MHD_Result di_srv_send_bytes(Exchange *x, int status, const char *type, const char *data, size_t len);
enum MHD_Result di_srv_send_json(Exchange *x, int status, json_t *body);
enum MHD_Result di_srv_send_error(Exchange *x, int status, const char *message);

/* server_gen.c */
enum MHD_Result di_srv_generate(Exchange *x);           /* the body is in: hand it to a worker */
enum MHD_Result di_srv_generate_again(Exchange *x);     /* MHD handed a dispatched request back */
void di_srv_exchange_release(Exchange *x);
/* Run fn on a worker (the connection parked meanwhile); its answer is sent when MHD hands the
 * request back (di_srv_deferred_again). */
enum MHD_Result di_srv_defer(Exchange *x, DeferredFn fn);
enum MHD_Result di_srv_deferred_again(Exchange *x);
/* Abort the live requests past their deadline or whose parked client left (all: every one).
 * Returns how many are live. */
int di_srv_abort_live(DiServer *srv, bool all);

/* 1 when the peer of a connected socket has closed it (EOF or an error), 0 while it is open
 * (or fd < 0: unknown). */
bool di_srv_peer_closed(int fd);

/* server_pd.c */
int di_srv_pd_start(DiServer *srv);
void di_srv_pd_stop(DiServer *srv);
/* Read X-DI-Room / X-DI-Room-Deadline-Ms (MHD's thread): -1 with the cause when malformed or
 * when this worker is not a decode worker. */
int di_srv_pd_headers(Exchange *x);
/* Whether the request carries this worker's cluster token (always true without a cluster key). */
bool di_srv_cluster_token_ok(Exchange *x);
/* A room id or count as PD sends it: a decimal u64, no sign or spaces, at most 2^64 - 1; -1 when
 * s is not one (both the X-DI-Room header and /internal/prefill's "room" read it). */
int di_srv_parse_u64(const char *s, uint64_t *out);
/* Wait for the room (a preparation worker); 0 to submit (locally prefilled when the transfer
 * failed), -1 when the client left meanwhile. */
int di_srv_pd_wait_room(Exchange *x);
/* The request was admitted (first token) or ended: unpin the room's blocks. */
void di_srv_pd_release(Exchange *x);
int di_srv_pd_metrics(DiServer *srv, DiApiBuf *out);
/* server_prefill.c: POST /internal/prefill */
enum MHD_Result di_srv_pd_prefill(Exchange *x);

/* server_routes.c */
enum MHD_Result di_srv_get_models(Exchange *x);
enum MHD_Result di_srv_get_model(Exchange *x);
enum MHD_Result di_srv_get_metrics(Exchange *x);
enum MHD_Result di_srv_get_health(Exchange *x);
enum MHD_Result di_srv_get_load(Exchange *x);
enum MHD_Result di_srv_get_openapi(Exchange *x);
enum MHD_Result di_srv_get_version(Exchange *x);
enum MHD_Result di_srv_tokenize(Exchange *x);
enum MHD_Result di_srv_detokenize(Exchange *x);

#endif
