/* kv_transfer.c — the UCX side of KV transfers (see kv_transfer.h; the room logic is kv_rooms.c).
 *
 * UCX (libucx, ucp): one context per process, created on first use, shared by the receiver's
 * worker and every sender's worker (each worker has one owner thread, so none needs UCX's
 * locking).  Connections are UCX client-server endpoints over a socket address; messages are
 * active messages (ucp_am_send_nbx) with a fixed header (the message's struct) and, for BLOCK,
 * the chunk's bytes as the payload.  Every send asks for the eager protocol and a reply
 * endpoint: the receiver then gets each chunk whole inside its callback (no rendezvous
 * descriptors to chase) and knows which connection it came from.
 *
 * Transports: UCX's own choice (it reads UCX_TLS and the other UCX_* variables itself).  Its
 * defaults work in this project's containers (TCP for the connection manager, shared memory and
 * TCP for the data); a cluster with RDMA gets it without a change here.  A deployment whose UCX
 * probes a transport that fails sets UCX_TLS=tcp,sm,self for the workers.
 *
 * Waits: the receiver's thread sleeps on the worker's event fd (20 ms slices, so stop and the
 * lease reaper run); a sender progresses its own worker until its operation completes or the
 * caller's deadline passes, sleeping on the event fd between progress calls. */
#include "serve/kv_transfer.h"

#include "base/error.h"
#include "base/log.h"
#include "base/mem.h"
#include "serve/kv_rooms.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>

#define MAGIC 0x44494b56u /* "DIKV" */
#define PROTO_VERSION 2u /* 2: STATE, page_bytes in the registration, state_bytes in DONE */
#define MAX_CONNS 256

enum { AM_REGISTER = 1, AM_REG_REPLY, AM_BLOCK, AM_DONE, AM_ABORT, AM_BEGIN, AM_STATE };

typedef struct {
    uint32_t magic, version;
    uint64_t fp_lo, fp_hi;
    int32_t block_tokens;
    uint32_t pad;
    uint64_t block_bytes;
    uint64_t page_bytes;
} RegMsg;

typedef struct {
    int32_t ok;
    char message[400];
} RegReply;

/* A chunk of a BLOCK (key = the block's) or of a STATE (key zero). */
typedef struct {
    uint64_t room, key_lo, key_hi, total, offset;
} BlockHdr;

typedef struct {
    uint64_t room;
    uint32_t n_blocks, pad;
    uint64_t state_bytes;
} DoneMsg;

/* ---- the process's UCX context ------------------------------------------------------------ */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static ucp_context_h g_ctx;
static char g_ctx_error[300];

static void context_init(void) {
    ucp_config_t *cfg;
    ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
    if (st != UCS_OK) {
        snprintf(g_ctx_error, sizeof g_ctx_error, "reading the UCX configuration: %s", ucs_status_string(st));
        return;
    }
    /* A peer killed with -9 leaves a shared-memory path silent; UCX notices it by keepalive, 20 s
     * apart by default.  1 s lets the decode side abort a dead sender's rooms and prefill
     * locally well within a request's deadline. */
    st = ucp_config_modify(cfg, "KEEPALIVE_INTERVAL", "1s");
    if (st != UCS_OK) DI_WARN("kv transfer: UCX keepalive interval not set: %s", ucs_status_string(st));
    ucp_params_t p = {
        .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED,
        .features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
        .mt_workers_shared = 1,
    };
    st = ucp_init(&p, cfg, &g_ctx);
    ucp_config_release(cfg);
    if (st != UCS_OK) {
        g_ctx = NULL;
        snprintf(g_ctx_error, sizeof g_ctx_error, "initialising UCX: %s", ucs_status_string(st));
    }
}

static ucp_context_h context(void) {
    pthread_once(&g_once, context_init);
    if (!g_ctx) di_errorf("kv transfer: %s", g_ctx_error);
    return g_ctx;
}

static ucp_worker_h worker_create(void) {
    ucp_context_h ctx = context();
    if (!ctx) return NULL;
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE, .thread_mode = UCS_THREAD_MODE_SINGLE};
    ucp_worker_h w;
    ucs_status_t st = ucp_worker_create(ctx, &wp, &w);
    if (st != UCS_OK) {
        di_errorf("kv transfer: creating a UCX worker: %s", ucs_status_string(st));
        return NULL;
    }
    return w;
}

static int set_handler(ucp_worker_h w, unsigned id, ucp_am_recv_callback_t cb, void *arg) {
    ucp_am_handler_param_t hp = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG |
                      UCP_AM_HANDLER_PARAM_FIELD_FLAGS,
        .id = id, .flags = UCP_AM_FLAG_WHOLE_MSG, .cb = cb, .arg = arg};
    ucs_status_t st = ucp_worker_set_am_recv_handler(w, &hp);
    return st == UCS_OK ? 0 : di_errorf("kv transfer: registering a message handler: %s", ucs_status_string(st));
}

/* Progress until nothing moves, then sleep on the worker's event fd for at most ms. */
static void progress_or_sleep(ucp_worker_h w, int efd, int ms) {
    if (ucp_worker_progress(w)) return;
    if (ucp_worker_arm(w) == UCS_ERR_BUSY) return;
    struct pollfd pfd = {.fd = efd, .events = POLLIN};
    poll(&pfd, 1, ms);
}

static int event_fd(ucp_worker_h w, int *efd) {
    ucs_status_t st = ucp_worker_get_efd(w, efd);
    return st == UCS_OK ? 0 : di_errorf("kv transfer: the UCX worker's event fd: %s", ucs_status_string(st));
}

/* "HOST:PORT" -> an IPv4 socket address. */
static int parse_address(const char *address, struct sockaddr_in *sa) {
    const char *colon = address ? strrchr(address, ':') : NULL;
    char host[64];
    if (!colon || colon == address || (size_t)(colon - address) >= sizeof host)
        return di_errorf("kv transfer: address '%s' is not HOST:PORT", address ? address : "(null)");
    memcpy(host, address, (size_t)(colon - address));
    host[colon - address] = 0;
    char *end;
    long port = strtol(colon + 1, &end, 10);
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    if (*end || end == colon + 1 || port < 1 || port > 65535 || inet_pton(AF_INET, host, &sa->sin_addr) != 1)
        return di_errorf("kv transfer: address '%s' is not an IPv4 HOST:PORT", address);
    sa->sin_port = htons((uint16_t)port);
    return 0;
}

int di_kv_check_address(const char *address) {
    struct sockaddr_in sa;
    return parse_address(address, &sa);
}

void di_kv_identity_hex(const DiKvIdentity *id, char out[33]) { di_kv_key_hex(id->fingerprint, out); }

static void describe(char *out, size_t cap, uint64_t lo, uint64_t hi, int b, uint64_t bytes, uint64_t page) {
    char hex[33];
    di_kv_key_hex((DiKvKey){lo, hi}, hex);
    snprintf(out, cap, "fingerprint %s, %d tokens/block, %llu bytes/block, %llu bytes/state page", hex, b,
             (unsigned long long)bytes, (unsigned long long)page);
}

/* ---- the receiver ------------------------------------------------------------------------- */

typedef struct {
    ucp_ep_h ep;
    bool registered, refused, lost;
    bool reply_pending;
    RegReply reply;
} Conn;

struct DiKvRecv {
    DiKvRecvOptions o;
    DiKvRooms *rooms;
    ucp_worker_h worker;
    ucp_listener_h listener;
    int efd;
    pthread_t thread;
    volatile int quit;
    char address[80];
    int port;
    pthread_mutex_t mu; /* guards refused and connections (stats) */
    uint64_t refused;
    int connections;
    Conn conns[MAX_CONNS]; /* progress thread only */
};

/* The record of a connection's endpoint; with ep NULL, a free record. */
static Conn *conn_of(DiKvRecv *r, ucp_ep_h ep) {
    for (int i = 0; i < MAX_CONNS; i++)
        if (r->conns[i].ep == ep) return &r->conns[i];
    return NULL;
}

static void on_conn_error(void *arg, ucp_ep_h ep, ucs_status_t status) {
    DiKvRecv *r = arg;
    Conn *c = ep ? conn_of(r, ep) : NULL;
    if (!c) return;
    c->lost = true; /* closed by the progress loop */
    di_kv_rooms_conn_lost(r->rooms, ep);
    if (status != UCS_ERR_CONNECTION_RESET && status != UCS_ERR_ENDPOINT_TIMEOUT)
        DI_INFO("kv transfer: a sender's connection ended: %s", ucs_status_string(status));
}

static void on_conn_request(ucp_conn_request_h req, void *arg) {
    DiKvRecv *r = arg;
    Conn *c = conn_of(r, NULL);
    if (!c) {
        DI_WARN("kv transfer: %d sender connections are open; a new one is rejected", MAX_CONNS);
        ucp_listener_reject(r->listener, req);
        return;
    }
    ucp_ep_params_t ep = {
        .field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
        .conn_request = req,
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = on_conn_error, .arg = r},
    };
    memset(c, 0, sizeof *c);
    ucs_status_t st = ucp_ep_create(r->worker, &ep, &c->ep);
    if (st != UCS_OK) {
        /* No ucp_listener_reject here: a failed ucp_ep_create has already rejected and freed
         * the request (UCX 1.13 ucp_ep_cm_server_create_connected frees it on every path), so
         * rejecting it again would touch freed memory; the sender's error handler fires. */
        c->ep = NULL;
        DI_WARN("kv transfer: accepting a sender: %s", ucs_status_string(st));
    }
}

static ucs_status_t on_register(void *arg, const void *header, size_t header_length, void *data, size_t length,
                                const ucp_am_recv_param_t *param) {
    (void)data;
    (void)length;
    DiKvRecv *r = arg;
    Conn *c = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) && param->reply_ep ? conn_of(r, param->reply_ep) : NULL;
    if (!c) return UCS_OK;
    if (c->registered || c->refused) { /* a connection registers once: the first answer stands */
        DI_WARN("kv transfer: a sender registered twice on one connection; it gets its first answer again");
        c->reply_pending = true;
        return UCS_OK;
    }
    RegMsg msg = {0}; /* UCX's header bytes need not be aligned */
    if (header_length == sizeof msg) memcpy(&msg, header, sizeof msg);
    const RegMsg *m = &msg;
    const DiKvIdentity *id = &r->o.identity;
    char mine[160], theirs[160];
    describe(mine, sizeof mine, id->fingerprint.lo, id->fingerprint.hi, id->block_tokens, id->block_bytes, id->page_bytes);
    memset(&c->reply, 0, sizeof c->reply);
    if (header_length != sizeof *m || m->magic != MAGIC || m->version != PROTO_VERSION) {
        snprintf(c->reply.message, sizeof c->reply.message,
                 "not a deepinfer KV transfer registration (protocol version %u expected)", PROTO_VERSION);
    } else if (m->fp_lo != id->fingerprint.lo || m->fp_hi != id->fingerprint.hi || m->block_tokens != id->block_tokens ||
               m->block_bytes != id->block_bytes || m->page_bytes != id->page_bytes) {
        describe(theirs, sizeof theirs, m->fp_lo, m->fp_hi, m->block_tokens, m->block_bytes, m->page_bytes);
        snprintf(c->reply.message, sizeof c->reply.message,
                 "KV identity mismatch: the sender has %s, this decode worker %s", theirs, mine);
    } else {
        c->reply.ok = 1;
    }
    c->registered = c->reply.ok;
    c->refused = !c->reply.ok;
    c->reply_pending = true;
    pthread_mutex_lock(&r->mu);
    if (c->refused) r->refused++;
    else r->connections++;
    pthread_mutex_unlock(&r->mu);
    if (c->refused) DI_WARN("kv transfer: refused a sender: %s", c->reply.message);
    return UCS_OK;
}

/* A message of a registered connection: its Conn, else NULL (ignored). */
static Conn *registered_conn(DiKvRecv *r, const ucp_am_recv_param_t *param) {
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) return NULL; /* senders force eager */
    Conn *c = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) && param->reply_ep ? conn_of(r, param->reply_ep) : NULL;
    return c && c->registered ? c : NULL;
}

/* A chunk of a BLOCK or of a STATE: into its room (a malformed one aborts the room). */
static ucs_status_t on_chunk(void *arg, const void *header, size_t header_length, void *data, size_t length,
                             const ucp_am_recv_param_t *param, bool state) {
    DiKvRecv *r = arg;
    Conn *c = registered_conn(r, param);
    if (!c || header_length != sizeof(BlockHdr)) return UCS_OK;
    BlockHdr h;
    memcpy(&h, header, sizeof h);
    int rc = state ? di_kv_rooms_state_chunk(r->rooms, c->ep, h.room, h.total, h.offset, data, length)
                   : di_kv_rooms_chunk(r->rooms, c->ep, h.room, (DiKvKey){h.key_lo, h.key_hi}, h.total, h.offset, data, length);
    if (rc != 0) {
        DI_WARN("%s; the room is aborted", di_error_message());
        di_kv_rooms_abort(r->rooms, h.room);
    }
    return UCS_OK;
}

static ucs_status_t on_block(void *arg, const void *header, size_t header_length, void *data, size_t length,
                             const ucp_am_recv_param_t *param) {
    return on_chunk(arg, header, header_length, data, length, param, false);
}

static ucs_status_t on_state(void *arg, const void *header, size_t header_length, void *data, size_t length,
                             const ucp_am_recv_param_t *param) {
    return on_chunk(arg, header, header_length, data, length, param, true);
}

/* BEGIN, DONE and ABORT: the room (and DONE's block count) from the header. */
static ucs_status_t on_control(void *arg, const void *header, size_t header_length, const ucp_am_recv_param_t *param,
                               unsigned kind) {
    DiKvRecv *r = arg;
    Conn *c = registered_conn(r, param);
    DoneMsg m = {0};
    if (!c || header_length != (kind == AM_DONE ? sizeof m : sizeof m.room)) return UCS_OK;
    memcpy(&m, header, header_length);
    if (kind == AM_DONE) di_kv_rooms_done(r->rooms, c->ep, m.room, m.n_blocks, m.state_bytes);
    else if (kind == AM_BEGIN) di_kv_rooms_begin(r->rooms, c->ep, m.room);
    else di_kv_rooms_abort(r->rooms, m.room);
    return UCS_OK;
}

static ucs_status_t on_begin(void *arg, const void *header, size_t header_length, void *data, size_t length,
                             const ucp_am_recv_param_t *param) {
    (void)data;
    (void)length;
    return on_control(arg, header, header_length, param, AM_BEGIN);
}

static ucs_status_t on_done(void *arg, const void *header, size_t header_length, void *data, size_t length,
                            const ucp_am_recv_param_t *param) {
    (void)data;
    (void)length;
    return on_control(arg, header, header_length, param, AM_DONE);
}

static ucs_status_t on_abort(void *arg, const void *header, size_t header_length, void *data, size_t length,
                             const ucp_am_recv_param_t *param) {
    (void)data;
    (void)length;
    return on_control(arg, header, header_length, param, AM_ABORT);
}

static void free_request(void *request, ucs_status_t status, void *user) {
    (void)status;
    (void)user;
    ucp_request_free(request);
}

static void close_ep(ucp_ep_h ep, bool force) {
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0};
    ucs_status_ptr_t q = ucp_ep_close_nbx(ep, &p);
    if (UCS_PTR_IS_PTR(q)) ucp_request_free(q); /* completes in the background */
}

/* Registration replies, and closing broken connections: outside the UCX callbacks. */
static void service_conns(DiKvRecv *r) {
    for (int i = 0; i < MAX_CONNS; i++) {
        Conn *c = &r->conns[i];
        if (!c->ep) continue;
        if (c->lost) {
            pthread_mutex_lock(&r->mu);
            r->connections -= c->registered;
            pthread_mutex_unlock(&r->mu);
            close_ep(c->ep, true);
            memset(c, 0, sizeof *c);
            continue;
        }
        if (!c->reply_pending) continue;
        c->reply_pending = false;
        ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_FLAGS,
                                 .cb.send = free_request, .flags = UCP_AM_SEND_FLAG_EAGER};
        ucs_status_ptr_t q = ucp_am_send_nbx(c->ep, AM_REG_REPLY, &c->reply, sizeof c->reply, NULL, 0, &p);
        if (UCS_PTR_IS_ERR(q)) c->lost = true;
    }
}

static void *recv_main(void *arg) {
    DiKvRecv *r = arg;
    double next_reap = 0;
    while (!r->quit) {
        progress_or_sleep(r->worker, r->efd, 20);
        service_conns(r);
        double now = di_kv_now();
        if (now >= next_reap) {
            di_kv_rooms_reap(r->rooms, now);
            next_reap = now + 0.1;
        }
    }
    return NULL;
}

static int listen_on(DiKvRecv *r) {
    struct sockaddr_in sa;
    char addr[80];
    snprintf(addr, sizeof addr, "%s:%d", r->o.host ? r->o.host : "127.0.0.1", r->o.port ? r->o.port : 1);
    if (parse_address(addr, &sa) != 0) return -1;
    sa.sin_port = htons((uint16_t)r->o.port);
    ucp_listener_params_t lp = {
        .field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
        .sockaddr = {.addr = (const struct sockaddr *)&sa, .addrlen = sizeof sa},
        .conn_handler = {.cb = on_conn_request, .arg = r},
    };
    ucs_status_t st = ucp_listener_create(r->worker, &lp, &r->listener);
    if (st != UCS_OK) {
        r->listener = NULL;
        return di_errorf("kv transfer: cannot listen on %s:%d: %s", r->o.host ? r->o.host : "127.0.0.1", r->o.port,
                         ucs_status_string(st));
    }
    ucp_listener_attr_t la = {.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR};
    if (ucp_listener_query(r->listener, &la) != UCS_OK) return di_errorf("kv transfer: querying the listener's port");
    r->port = ntohs(((const struct sockaddr_in *)&la.sockaddr)->sin_port);
    snprintf(r->address, sizeof r->address, "%s:%d", r->o.host ? r->o.host : "127.0.0.1", r->port);
    return 0;
}

static int recv_setup(DiKvRecv *r) {
    if (!(r->rooms = di_kv_rooms_create(r->o.cache, r->o.identity.block_bytes, r->o.lease_s ? r->o.lease_s : 40.0,
                                        r->o.grace_s ? r->o.grace_s : 10.0,
                                        r->o.max_rooms ? r->o.max_rooms : 4096)))
        return -1;
    di_kv_rooms_set_max_state(r->rooms, r->o.max_state_bytes);
    if (!(r->worker = worker_create()) || event_fd(r->worker, &r->efd) != 0) return -1;
    if (set_handler(r->worker, AM_REGISTER, on_register, r) != 0 || set_handler(r->worker, AM_BLOCK, on_block, r) != 0 ||
        set_handler(r->worker, AM_DONE, on_done, r) != 0 || set_handler(r->worker, AM_ABORT, on_abort, r) != 0 ||
        set_handler(r->worker, AM_BEGIN, on_begin, r) != 0 || set_handler(r->worker, AM_STATE, on_state, r) != 0)
        return -1;
    if (listen_on(r) != 0) return -1;
    if (pthread_create(&r->thread, NULL, recv_main, r) != 0) return di_errorf("kv transfer: cannot start the receiver thread");
    return 0;
}

static void recv_teardown(DiKvRecv *r) {
    for (int i = 0; i < MAX_CONNS; i++)
        if (r->conns[i].ep) close_ep(r->conns[i].ep, true);
    if (r->listener) ucp_listener_destroy(r->listener);
    if (r->worker) {
        for (int i = 0; i < 100 && ucp_worker_progress(r->worker); i++) {
        }
        ucp_worker_destroy(r->worker);
    }
    di_kv_rooms_free(r->rooms);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

DiKvRecv *di_kv_recv_start(const DiKvRecvOptions *o) {
    if (!o || !o->cache || o->identity.block_tokens <= 0 || o->identity.block_bytes == 0 || o->port < 0 ||
        o->port > 65535 || o->lease_s < 0 || o->grace_s < 0 || o->max_rooms < 0) {
        di_errorf("kv transfer: the receiver needs a KV cache, an identity with a block size, a port in 0..65535, "
                  "a lease and a grace >= 0 and max_rooms >= 0");
        return NULL;
    }
    DiKvRecv *r = di_calloc(1, sizeof *r, "kv receiver");
    if (!r) return NULL;
    r->o = *o;
    r->efd = -1;
    pthread_mutex_init(&r->mu, NULL);
    if (recv_setup(r) != 0) {
        recv_teardown(r);
        return NULL;
    }
    return r;
}

int di_kv_recv_port(const DiKvRecv *r) { return r ? r->port : -1; }
const char *di_kv_recv_address(const DiKvRecv *r) { return r ? r->address : ""; }

void di_kv_recv_stop(DiKvRecv *r) {
    if (!r) return;
    r->quit = 1;
    pthread_join(r->thread, NULL);
    recv_teardown(r);
}

DiRoomState di_kv_recv_wait(DiKvRecv *r, uint64_t room, double deadline, bool (*cancel)(void *arg), void *arg) {
    if (!r) {
        di_errorf("kv transfer: no receiver");
        return DI_ROOM_NONE;
    }
    return di_kv_rooms_wait(r->rooms, room, deadline, cancel, arg);
}

void di_kv_recv_release(DiKvRecv *r, uint64_t room) {
    if (r) di_kv_rooms_release(r->rooms, room);
}

int di_kv_recv_take_state(DiKvRecv *r, uint64_t room, void **blob, size_t *len) {
    if (!r) return di_errorf("kv transfer: no receiver");
    return di_kv_rooms_take_state(r->rooms, room, blob, len);
}

void di_kv_recv_recycle_state(DiKvRecv *r, void *blob, size_t len) {
    if (r) di_kv_rooms_recycle_state(r->rooms, blob, len);
    else free(blob);
}

void di_kv_recv_set_state_pool(DiKvRecv *r, uint64_t bytes) {
    if (r) di_kv_rooms_set_state_pool(r->rooms, bytes);
}

void di_kv_recv_reap(DiKvRecv *r) {
    if (r) di_kv_rooms_reap(r->rooms, di_kv_now());
}

DiRoomState di_kv_recv_state(DiKvRecv *r, uint64_t room) { return r ? di_kv_rooms_state(r->rooms, room) : DI_ROOM_NONE; }

void di_kv_recv_stats(DiKvRecv *r, DiKvRecvStats *out) {
    if (!r || !out) return;
    memset(out, 0, sizeof *out);
    di_kv_rooms_stats(r->rooms, out);
    pthread_mutex_lock(&r->mu);
    out->refused = r->refused;
    out->connections = r->connections;
    pthread_mutex_unlock(&r->mu);
}

/* ---- the sender --------------------------------------------------------------------------- */

struct DiKvSend {
    ucp_worker_h worker;
    ucp_ep_h ep;
    int efd;
    ucs_status_t failed; /* the connection's error, UCS_OK while it lives */
    bool replied;
    RegReply reply;
    char address[80];
    DiEnvPdFaults faults; /* test-only (di_kv_send_set_faults) */
};

static void on_send_error(void *arg, ucp_ep_h ep, ucs_status_t status) {
    (void)ep;
    DiKvSend *s = arg;
    s->failed = status;
}

static ucs_status_t on_reg_reply(void *arg, const void *header, size_t header_length, void *data, size_t length,
                                 const ucp_am_recv_param_t *param) {
    (void)data;
    (void)length;
    (void)param;
    DiKvSend *s = arg;
    if (header_length == sizeof s->reply) memcpy(&s->reply, header, sizeof s->reply);
    else snprintf(s->reply.message, sizeof s->reply.message, "a malformed registration reply");
    s->reply.message[sizeof s->reply.message - 1] = 0;
    s->replied = true;
    return UCS_OK;
}

static int lost(DiKvSend *s, const char *what) {
    return di_errorf("kv transfer to %s: %s: the connection failed (%s)", s->address, what, ucs_status_string(s->failed));
}

/* Progress until the requests complete; -1 on a connection error or at the deadline (the
 * unfinished requests are cancelled). */
static int wait_requests(DiKvSend *s, void **reqs, int n, double deadline, const char *what) {
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (!reqs[i]) continue;
        while (ucp_request_check_status(reqs[i]) == UCS_INPROGRESS) {
            if (s->failed != UCS_OK || di_kv_now() > deadline) {
                ucp_request_cancel(s->worker, reqs[i]);
                for (int k = 0; k < 1000 && ucp_request_check_status(reqs[i]) == UCS_INPROGRESS; k++)
                    ucp_worker_progress(s->worker);
                if (rc == 0) rc = s->failed != UCS_OK ? lost(s, what) : di_errorf("kv transfer to %s: %s: deadline passed", s->address, what);
                break;
            }
            progress_or_sleep(s->worker, s->efd, 5);
        }
        ucs_status_t st = ucp_request_check_status(reqs[i]);
        if (rc == 0 && st != UCS_OK && st != UCS_INPROGRESS)
            rc = di_errorf("kv transfer to %s: %s: %s", s->address, what, ucs_status_string(st));
        if (st != UCS_INPROGRESS) ucp_request_free(reqs[i]);
        reqs[i] = NULL;
    }
    return rc;
}

/* One message; its request (NULL when it completed at once) goes to *req. */
static int post(DiKvSend *s, unsigned id, const void *hdr, size_t hdr_len, const void *data, size_t len, void **req,
                const char *what) {
    *req = NULL;
    if (s->failed != UCS_OK) return lost(s, what);
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_REPLY};
    ucs_status_ptr_t q = ucp_am_send_nbx(s->ep, id, hdr, hdr_len, data, len, &p);
    if (UCS_PTR_IS_ERR(q)) return di_errorf("kv transfer to %s: %s: %s", s->address, what, ucs_status_string(UCS_PTR_STATUS(q)));
    *req = q;
    return 0;
}

int di_kv_send_set_faults(DiKvSend *s, const DiEnvPdFaults *f) {
    if (!s) return di_errorf("kv transfer: set_faults needs a sender");
    if (f) s->faults = *f;
    else memset(&s->faults, 0, sizeof s->faults);
    return 0;
}

static int msg_of(unsigned am) {
    switch (am) {
    case AM_BEGIN: return DI_PD_MSG_BEGIN;
    case AM_STATE: return DI_PD_MSG_STATE;
    case AM_DONE: return DI_PD_MSG_DONE;
    case AM_ABORT: return DI_PD_MSG_ABORT;
    default: return -1;
    }
}

/* The test faults for message `am`: how many copies to send (0 dropped, 2 duplicated), after
 * holding it for its delay (progressing the worker meanwhile); -1 when the delay ran past the
 * deadline. */
static int fault_copies(DiKvSend *s, unsigned am, double deadline, const char *what) {
    int m = msg_of(am);
    if (m < 0 || !s->faults.any) return 1;
    if (s->faults.delay_ms[m] > 0) {
        double until = di_kv_now() + s->faults.delay_ms[m] * 1e-3;
        while (di_kv_now() < until && di_kv_now() <= deadline) progress_or_sleep(s->worker, s->efd, 5);
        if (di_kv_now() > deadline)
            return di_errorf("kv transfer to %s: %s: deadline passed (a test fault delayed it %d ms)", s->address, what,
                             s->faults.delay_ms[m]);
    }
    if (s->faults.drop[m]) {
        DI_DEBUG("kv transfer to %s: %s: dropped (test fault)", s->address, what);
        return 0;
    }
    return s->faults.dup[m] ? 2 : 1;
}

static int send_one(DiKvSend *s, unsigned id, const void *hdr, size_t hdr_len, double deadline, const char *what) {
    int copies = fault_copies(s, id, deadline, what);
    if (copies < 0) return -1;
    for (int k = 0; k < copies; k++) {
        void *req;
        if (post(s, id, hdr, hdr_len, NULL, 0, &req, what) != 0 || wait_requests(s, &req, 1, deadline, what) != 0) return -1;
    }
    return 0;
}

static int connect_ep(DiKvSend *s, const struct sockaddr_in *sa) {
    ucp_ep_params_t ep = {
        .field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
        .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
        .sockaddr = {.addr = (const struct sockaddr *)sa, .addrlen = sizeof *sa},
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = on_send_error, .arg = s},
    };
    ucs_status_t st = ucp_ep_create(s->worker, &ep, &s->ep);
    if (st != UCS_OK) {
        s->ep = NULL;
        return di_errorf("kv transfer: cannot connect to %s: %s", s->address, ucs_status_string(st));
    }
    return 0;
}

static int do_register(DiKvSend *s, const DiKvIdentity *id, double deadline) {
    RegMsg m = {.magic = MAGIC, .version = PROTO_VERSION, .fp_lo = id->fingerprint.lo, .fp_hi = id->fingerprint.hi,
                .block_tokens = id->block_tokens, .block_bytes = id->block_bytes, .page_bytes = id->page_bytes};
    if (send_one(s, AM_REGISTER, &m, sizeof m, deadline, "registering") != 0) return -1;
    while (!s->replied && s->failed == UCS_OK && di_kv_now() < deadline) progress_or_sleep(s->worker, s->efd, 5);
    if (s->replied && !s->reply.ok)
        return di_errorf("kv transfer to %s: registration refused: %s", s->address, s->reply.message);
    if (s->replied) return 0;
    if (s->failed != UCS_OK) return lost(s, "registering");
    return di_errorf("kv transfer to %s: no answer to the registration before the deadline", s->address);
}

/* 0 when deadline is finite and within a day (every wait is bounded; NaN and +inf fail). */
static int bounded(double deadline, const char *what) {
    return deadline <= di_kv_now() + 86400 ? 0 : di_errorf("kv transfer: %s needs a finite deadline within a day", what);
}

int di_kv_send_register_again(DiKvSend *s, const DiKvIdentity *id, double deadline) {
    if (!s || !id) return di_errorf("kv transfer: register_again needs a sender and an identity");
    if (bounded(deadline, "register_again") != 0) return -1;
    s->replied = false;
    return do_register(s, id, deadline);
}

DiKvSend *di_kv_send_connect(const char *address, const DiKvIdentity *id, double deadline) {
    struct sockaddr_in sa;
    if (!id || id->block_tokens <= 0 || id->block_bytes == 0) {
        di_errorf("kv transfer: connect needs an identity with a block size");
        return NULL;
    }
    if (bounded(deadline, "connect") != 0) return NULL;
    if (parse_address(address, &sa) != 0) return NULL;
    DiKvSend *s = di_calloc(1, sizeof *s, "kv sender");
    if (!s) return NULL;
    snprintf(s->address, sizeof s->address, "%s", address);
    s->failed = UCS_OK;
    s->efd = -1;
    if (!(s->worker = worker_create()) || event_fd(s->worker, &s->efd) != 0 ||
        set_handler(s->worker, AM_REG_REPLY, on_reg_reply, s) != 0 || connect_ep(s, &sa) != 0 ||
        do_register(s, id, deadline) != 0) {
        char msg[DI_ERROR_MAX];
        snprintf(msg, sizeof msg, "%s", di_error_message());
        di_kv_send_close(s);
        di_errorf("%s", msg);
        return NULL;
    }
    return s;
}

#define WINDOW 16 /* chunks in flight */

/* BLOCK or STATE: the bytes cut into chunks, WINDOW of them in flight. */
static int send_chunks(DiKvSend *s, unsigned am, uint64_t room, DiKvKey key, const void *data, size_t len, double deadline,
                       const char *what) {
    BlockHdr hdr[WINDOW];
    void *reqs[WINDOW] = {0};
    int n = 0, copies = fault_copies(s, am, deadline, what);
    if (copies < 0) return -1;
    for (size_t off = 0; off < len && copies > 0; off += DI_KV_CHUNK_BYTES) {
        size_t c = len - off < DI_KV_CHUNK_BYTES ? len - off : DI_KV_CHUNK_BYTES;
        for (int k = 0; k < copies; k++) {
            if (n == WINDOW) {
                if (wait_requests(s, reqs, n, deadline, what) != 0) return -1;
                n = 0;
            }
            hdr[n] = (BlockHdr){.room = room, .key_lo = key.lo, .key_hi = key.hi, .total = len, .offset = off};
            if (post(s, am, &hdr[n], sizeof hdr[n], (const uint8_t *)data + off, c, &reqs[n], what) != 0) {
                wait_requests(s, reqs, n, deadline, what);
                return -1;
            }
            n++;
        }
    }
    return wait_requests(s, reqs, n, deadline, what);
}

int di_kv_send_block(DiKvSend *s, uint64_t room, DiKvKey key, const void *data, size_t len, double deadline) {
    if (!s || !data || len == 0) return di_errorf("kv transfer: send_block needs a sender and a non-empty block");
    if (bounded(deadline, "send_block") != 0) return -1;
    return send_chunks(s, AM_BLOCK, room, key, data, len, deadline, "sending a block");
}

int di_kv_send_state(DiKvSend *s, uint64_t room, const void *data, size_t len, double deadline) {
    if (!s || !data || len == 0) return di_errorf("kv transfer: send_state needs a sender and a non-empty state");
    if (bounded(deadline, "send_state") != 0) return -1;
    return send_chunks(s, AM_STATE, room, (DiKvKey){0, 0}, data, len, deadline, "sending the state");
}

int di_kv_send_done(DiKvSend *s, uint64_t room, uint32_t n_blocks, uint64_t state_bytes, double deadline) {
    if (!s) return di_errorf("kv transfer: no sender");
    if (bounded(deadline, "send_done") != 0) return -1;
    DoneMsg m = {.room = room, .n_blocks = n_blocks, .state_bytes = state_bytes};
    return send_one(s, AM_DONE, &m, sizeof m, deadline, "sending DONE");
}

int di_kv_send_begin(DiKvSend *s, uint64_t room, double deadline) {
    if (!s) return di_errorf("kv transfer: no sender");
    if (bounded(deadline, "send_begin") != 0) return -1;
    return send_one(s, AM_BEGIN, &room, sizeof room, deadline, "sending BEGIN");
}

int di_kv_send_abort(DiKvSend *s, uint64_t room, double deadline) {
    if (!s) return di_errorf("kv transfer: no sender");
    if (bounded(deadline, "send_abort") != 0) return -1;
    return send_one(s, AM_ABORT, &room, sizeof room, deadline, "sending ABORT");
}

void di_kv_send_close(DiKvSend *s) {
    if (!s) return;
    if (s->ep) {
        /* Flush what is queued (a DONE or an ABORT), then close; bounded by 2 s. */
        ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = s->failed != UCS_OK ? UCP_EP_CLOSE_FLAG_FORCE : 0};
        ucs_status_ptr_t q = ucp_ep_close_nbx(s->ep, &p);
        if (UCS_PTR_IS_PTR(q)) {
            double until = di_kv_now() + 2;
            while (ucp_request_check_status(q) == UCS_INPROGRESS && di_kv_now() < until) progress_or_sleep(s->worker, s->efd, 5);
            if (ucp_request_check_status(q) == UCS_INPROGRESS) {
                ucp_request_cancel(s->worker, q);
                for (int k = 0; k < 1000 && ucp_request_check_status(q) == UCS_INPROGRESS; k++) ucp_worker_progress(s->worker);
            }
            ucp_request_free(q);
        }
    }
    if (s->worker) ucp_worker_destroy(s->worker);
    free(s);
}
