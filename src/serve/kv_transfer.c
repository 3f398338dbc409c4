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
#include "serve/kv_msg.h"
#include "serve/kv_rooms.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <ucp/api/ucp.h>

#define MAX_CONNS 256
#define REGISTER_TIMEOUT_S 5.0 /* default: a connection that has not registered by then is dropped */
#define NONCES 1024            /* recent registration nonces remembered (a replayed one is refused) */

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
    double accepted_at;  /* di_kv_now() when the connection came in */
    double close_at;     /* a refused connection: closed then (its answer has gone out); 0: never */
    DiKvRegReply reply;
} Conn;

struct DiKvRecv {
    DiKvRecvOptions o;
    DiKvRooms *rooms;
    DiKvMsgLimits limits;
    double register_timeout_s;
    ucp_worker_h worker;
    ucp_listener_h listener;
    int efd;
    pthread_t thread;
    volatile int quit;
    char address[80];
    int port;
    pthread_mutex_t mu; /* guards refused, dropped and connections (stats) */
    uint64_t refused, dropped;
    int connections;
    Conn conns[MAX_CONNS]; /* progress thread only */
    uint8_t nonces[NONCES][16]; /* recent registrations' nonces (progress thread only) */
    int n_nonces, next_nonce;
};

/* The record of a connection's endpoint; with ep NULL, a free record. */
static Conn *conn_of(DiKvRecv *r, ucp_ep_h ep) {
    for (int i = 0; i < MAX_CONNS; i++)
        if (r->conns[i].ep == ep) return &r->conns[i];
    return NULL;
}

/* A peer that sent what no honest sender sends: its rooms are aborted now and its connection is
 * closed by the progress loop; every other connection's rooms go on. */
static void drop_peer(DiKvRecv *r, Conn *c, const char *why) {
    if (c->lost) return;
    c->lost = true;
    di_kv_rooms_conn_lost(r->rooms, c->ep);
    pthread_mutex_lock(&r->mu);
    r->dropped++;
    pthread_mutex_unlock(&r->mu);
    DI_WARN("kv transfer: dropped a sender: %s", why);
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
    c->accepted_at = di_kv_now();
    ucs_status_t st = ucp_ep_create(r->worker, &ep, &c->ep);
    if (st != UCS_OK) {
        /* No ucp_listener_reject here: a failed ucp_ep_create has already rejected and freed
         * the request (UCX 1.13 ucp_ep_cm_server_create_connected frees it on every path), so
         * rejecting it again would touch freed memory; the sender's error handler fires. */
        c->ep = NULL;
        DI_WARN("kv transfer: accepting a sender: %s", ucs_status_string(st));
    }
}

/* Remember a registration's nonce; false when it was seen before (a replayed registration). */
static bool fresh_nonce(DiKvRecv *r, const uint8_t nonce[16]) {
    for (int i = 0; i < r->n_nonces; i++)
        if (memcmp(r->nonces[i], nonce, 16) == 0) return false;
    memcpy(r->nonces[r->next_nonce], nonce, 16);
    r->next_nonce = (r->next_nonce + 1) % NONCES;
    if (r->n_nonces < NONCES) r->n_nonces++;
    return true;
}

/* Why this registration is refused (into out), or "" when it is accepted. */
static void judge_registration(DiKvRecv *r, const DiKvMsg *msg, char *out, size_t cap) {
    const DiKvRegMsg *m = &msg->reg;
    const DiKvIdentity *id = &r->o.identity;
    char mine[160], theirs[160];
    out[0] = 0;
    describe(mine, sizeof mine, id->fingerprint.lo, id->fingerprint.hi, id->block_tokens, id->block_bytes, id->page_bytes);
    static const uint8_t zero[DI_KV_KEY_DIGEST];
    bool has_proof = memcmp(m->proof, zero, sizeof zero) != 0;
    double skew = (double)m->time_s - (double)time(NULL);
    if (m->fp_lo != id->fingerprint.lo || m->fp_hi != id->fingerprint.hi || m->block_tokens != id->block_tokens ||
        m->block_bytes != id->block_bytes || m->page_bytes != id->page_bytes) {
        describe(theirs, sizeof theirs, m->fp_lo, m->fp_hi, m->block_tokens, m->block_bytes, m->page_bytes);
        snprintf(out, cap, "KV identity mismatch: the sender has %s, this decode worker %s", theirs, mine);
    } else if (id->cluster_key_len == 0 && has_proof) {
        snprintf(out, cap, "the sender has a cluster key and this decode worker none (start both with --cluster-key)");
    } else if (id->cluster_key_len > 0 && !di_kv_msg_proof_ok(m, id->cluster_key, id->cluster_key_len)) {
        snprintf(out, cap, "cluster key mismatch: the sender %s (start every worker and the gateway with the same "
                           "--cluster-key)", has_proof ? "has another key" : "has none");
    } else if (id->cluster_key_len > 0 && (skew > DI_KV_PROOF_SKEW_S || skew < -DI_KV_PROOF_SKEW_S)) {
        snprintf(out, cap, "the registration's clock is %.0f s from this decode worker's (at most %d accepted: a replay, or "
                           "clocks out of sync)", skew, DI_KV_PROOF_SKEW_S);
    } else if (id->cluster_key_len > 0 && !fresh_nonce(r, m->nonce)) {
        snprintf(out, cap, "a replayed registration (its nonce was seen before)");
    }
}

static ucs_status_t on_register(void *arg, const void *header, size_t header_length, void *data, size_t length,
                                const ucp_am_recv_param_t *param) {
    (void)data;
    DiKvRecv *r = arg;
    Conn *c = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) && param->reply_ep ? conn_of(r, param->reply_ep) : NULL;
    if (!c || c->lost) return UCS_OK;
    if (c->registered || c->refused) { /* a connection registers once: the first answer stands */
        DI_WARN("kv transfer: a sender registered twice on one connection; it gets its first answer again");
        c->reply_pending = true;
        return UCS_OK;
    }
    DiKvMsg msg;
    memset(&c->reply, 0, sizeof c->reply);
    if (di_kv_msg_decode(DI_KV_AM_REGISTER, header, header_length, length, &r->limits, &msg) != 0)
        snprintf(c->reply.message, sizeof c->reply.message, "%s", di_error_message());
    else
        judge_registration(r, &msg, c->reply.message, sizeof c->reply.message);
    c->reply.ok = c->reply.message[0] == 0;
    c->registered = c->reply.ok;
    c->refused = !c->reply.ok;
    c->reply_pending = true;
    if (c->refused) c->close_at = di_kv_now() + 1.0; /* time for the answer to go out */
    pthread_mutex_lock(&r->mu);
    if (c->refused) r->refused++;
    else r->connections++;
    pthread_mutex_unlock(&r->mu);
    if (c->refused) DI_WARN("kv transfer: refused a sender: %s", c->reply.message);
    return UCS_OK;
}

/* The connection of a message other than REGISTER, when it is registered; a connection that
 * sends before registering (or after being refused) is dropped.  NULL: ignore the message. */
static Conn *registered_conn(DiKvRecv *r, const ucp_am_recv_param_t *param) {
    Conn *c = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) && param->reply_ep ? conn_of(r, param->reply_ep) : NULL;
    if (!c || c->lost) return NULL;
    if (!c->registered) {
        drop_peer(r, c, c->refused ? "a refused sender went on sending" : "a message before the registration");
        return NULL;
    }
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) { /* senders force eager */
        drop_peer(r, c, "a rendezvous message (senders send eager)");
        return NULL;
    }
    return c;
}

/* Decode a message of a registered connection; a malformed one drops the peer (false). */
static bool decode_from(DiKvRecv *r, Conn *c, unsigned am, const void *header, size_t header_length, size_t length,
                        DiKvMsg *m) {
    if (di_kv_msg_decode(am, header, header_length, length, &r->limits, m) == 0) return true;
    drop_peer(r, c, di_error_message());
    return false;
}

/* A chunk of a BLOCK or of a STATE: into its room (a malformed or out-of-order one drops the peer,
 * aborting its rooms only). */
static ucs_status_t on_chunk(void *arg, const void *header, size_t header_length, void *data, size_t length,
                             const ucp_am_recv_param_t *param, unsigned am) {
    DiKvRecv *r = arg;
    Conn *c = registered_conn(r, param);
    DiKvMsg m;
    if (!c || !decode_from(r, c, am, header, header_length, length, &m)) return UCS_OK;
    int rc = am == DI_KV_AM_STATE ? di_kv_rooms_state_chunk(r->rooms, c->ep, m.room, m.total, m.offset, data, length)
                                  : di_kv_rooms_chunk(r->rooms, c->ep, m.room, m.key, m.total, m.offset, data, length);
    if (rc != 0) drop_peer(r, c, di_error_message());
    return UCS_OK;
}

static ucs_status_t on_block(void *arg, const void *header, size_t header_length, void *data, size_t length,
                             const ucp_am_recv_param_t *param) {
    return on_chunk(arg, header, header_length, data, length, param, DI_KV_AM_BLOCK);
}

static ucs_status_t on_state(void *arg, const void *header, size_t header_length, void *data, size_t length,
                             const ucp_am_recv_param_t *param) {
    return on_chunk(arg, header, header_length, data, length, param, DI_KV_AM_STATE);
}

/* BEGIN, DONE and ABORT: the room (and DONE's counts) from the header. */
static ucs_status_t on_control(void *arg, const void *header, size_t header_length, size_t length,
                               const ucp_am_recv_param_t *param, unsigned am) {
    DiKvRecv *r = arg;
    Conn *c = registered_conn(r, param);
    DiKvMsg m;
    if (!c || !decode_from(r, c, am, header, header_length, length, &m)) return UCS_OK;
    int rc = am == DI_KV_AM_DONE    ? di_kv_rooms_done(r->rooms, c->ep, m.room, m.n_blocks, m.state_bytes)
             : am == DI_KV_AM_BEGIN ? di_kv_rooms_begin(r->rooms, c->ep, m.room)
                                    : di_kv_rooms_abort(r->rooms, c->ep, m.room);
    if (rc != 0) drop_peer(r, c, di_error_message());
    return UCS_OK;
}

static ucs_status_t on_begin(void *arg, const void *header, size_t header_length, void *data, size_t length,
                             const ucp_am_recv_param_t *param) {
    (void)data;
    return on_control(arg, header, header_length, length, param, DI_KV_AM_BEGIN);
}

static ucs_status_t on_done(void *arg, const void *header, size_t header_length, void *data, size_t length,
                            const ucp_am_recv_param_t *param) {
    (void)data;
    return on_control(arg, header, header_length, length, param, DI_KV_AM_DONE);
}

static ucs_status_t on_abort(void *arg, const void *header, size_t header_length, void *data, size_t length,
                             const ucp_am_recv_param_t *param) {
    (void)data;
    return on_control(arg, header, header_length, length, param, DI_KV_AM_ABORT);
}

/* Any other id below UNKNOWN_IDS (REG_REPLY included: receivers never get one): the peer is not
 * an honest sender.  UCX itself discards ids above, with a warning, before any handler. */
#define UNKNOWN_IDS 32
static ucs_status_t on_unknown(void *arg, const void *header, size_t header_length, void *data, size_t length,
                               const ucp_am_recv_param_t *param) {
    (void)header, (void)header_length, (void)data, (void)length;
    DiKvRecv *r = arg;
    Conn *c = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) && param->reply_ep ? conn_of(r, param->reply_ep) : NULL;
    if (c) drop_peer(r, c, "a message id no sender sends");
    return UCS_OK;
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
    double now = di_kv_now();
    for (int i = 0; i < MAX_CONNS; i++) {
        Conn *c = &r->conns[i];
        if (!c->ep) continue;
        if (!c->lost && !c->registered && !c->refused && now - c->accepted_at > r->register_timeout_s)
            drop_peer(r, c, "no registration in time after connecting");
        if (!c->lost && c->refused && !c->reply_pending && c->close_at > 0 && now >= c->close_at) c->lost = true;
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
        ucs_status_ptr_t q = ucp_am_send_nbx(c->ep, DI_KV_AM_REG_REPLY, &c->reply, sizeof c->reply, NULL, 0, &p);
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
    r->register_timeout_s = r->o.register_timeout_s > 0 ? r->o.register_timeout_s : REGISTER_TIMEOUT_S;
    r->limits = (DiKvMsgLimits){r->o.identity.block_bytes, r->o.max_state_bytes ? r->o.max_state_bytes : (uint64_t)4 << 30};
    if (!(r->worker = worker_create()) || event_fd(r->worker, &r->efd) != 0) return -1;
    if (set_handler(r->worker, DI_KV_AM_REGISTER, on_register, r) != 0 || set_handler(r->worker, DI_KV_AM_BLOCK, on_block, r) != 0 ||
        set_handler(r->worker, DI_KV_AM_DONE, on_done, r) != 0 || set_handler(r->worker, DI_KV_AM_ABORT, on_abort, r) != 0 ||
        set_handler(r->worker, DI_KV_AM_BEGIN, on_begin, r) != 0 || set_handler(r->worker, DI_KV_AM_STATE, on_state, r) != 0)
        return -1;
    for (unsigned id = 0; id < UNKNOWN_IDS; id++)
        if ((id == 0 || id == DI_KV_AM_REG_REPLY || id > DI_KV_AM_STATE) && set_handler(r->worker, id, on_unknown, r) != 0) return -1;
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

DiRoomState di_kv_recv_wait(DiKvRecv *r, uint64_t room, double idle_s, bool (*cancel)(void *arg), void *arg) {
    if (!r) {
        di_errorf("kv transfer: no receiver");
        return DI_ROOM_NONE;
    }
    return di_kv_rooms_wait(r->rooms, room, idle_s, cancel, arg);
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
    out->peers_dropped = r->dropped;
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
    DiKvRegReply reply;
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
    case DI_KV_AM_BEGIN: return DI_PD_MSG_BEGIN;
    case DI_KV_AM_STATE: return DI_PD_MSG_STATE;
    case DI_KV_AM_DONE: return DI_PD_MSG_DONE;
    case DI_KV_AM_ABORT: return DI_PD_MSG_ABORT;
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
    DiKvRegMsg m = {.magic = DI_KV_MSG_MAGIC, .version = DI_KV_PROTO_VERSION, .fp_lo = id->fingerprint.lo, .fp_hi = id->fingerprint.hi,
                .block_tokens = id->block_tokens, .block_bytes = id->block_bytes, .page_bytes = id->page_bytes,
                .time_s = (uint64_t)time(NULL)};
    if (getrandom(m.nonce, sizeof m.nonce, 0) != (ssize_t)sizeof m.nonce)
        return di_errorf("kv transfer to %s: no random bytes for the registration's nonce", s->address);
    if (di_kv_msg_prove(&m, id->cluster_key, id->cluster_key_len, m.proof) != 0) return -1;
    if (send_one(s, DI_KV_AM_REGISTER, &m, sizeof m, deadline, "registering") != 0) return -1;
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

/* Close s and return NULL, keeping the error that made the caller give up. */
static DiKvSend *give_up_sender(DiKvSend *s) {
    char msg[DI_ERROR_MAX];
    snprintf(msg, sizeof msg, "%s", di_error_message());
    di_kv_send_close(s);
    di_errorf("%s", msg);
    return NULL;
}

DiKvSend *di_kv_send_connect_unregistered(const char *address, double deadline) {
    struct sockaddr_in sa;
    if (bounded(deadline, "connect") != 0 || parse_address(address, &sa) != 0) return NULL;
    DiKvSend *s = di_calloc(1, sizeof *s, "kv sender");
    if (!s) return NULL;
    snprintf(s->address, sizeof s->address, "%s", address);
    s->failed = UCS_OK;
    s->efd = -1;
    if (!(s->worker = worker_create()) || event_fd(s->worker, &s->efd) != 0 ||
        set_handler(s->worker, DI_KV_AM_REG_REPLY, on_reg_reply, s) != 0 || connect_ep(s, &sa) != 0)
        return give_up_sender(s);
    return s;
}

DiKvSend *di_kv_send_connect(const char *address, const DiKvIdentity *id, double deadline) {
    if (!id || id->block_tokens <= 0 || id->block_bytes == 0) {
        di_errorf("kv transfer: connect needs an identity with a block size");
        return NULL;
    }
    DiKvSend *s = di_kv_send_connect_unregistered(address, deadline);
    return s && do_register(s, id, deadline) != 0 ? give_up_sender(s) : s;
}

#define WINDOW 16 /* chunks in flight */

/* BLOCK or STATE: the bytes cut into chunks, WINDOW of them in flight. */
/* Bytes [offset, offset + len) of a block or state of `total` bytes, in DI_KV_CHUNK_BYTES chunks
 * (offset on that grid). */
static int send_chunks(DiKvSend *s, unsigned am, uint64_t room, DiKvKey key, uint64_t total, uint64_t offset,
                       const void *data, size_t len, double deadline, const char *what) {
    DiKvChunkHdr hdr[WINDOW];
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
            hdr[n] = (DiKvChunkHdr){.room = room, .key_lo = key.lo, .key_hi = key.hi, .total = total, .offset = offset + off};
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
    return send_chunks(s, DI_KV_AM_BLOCK, room, key, len, 0, data, len, deadline, "sending a block");
}

int di_kv_send_state(DiKvSend *s, uint64_t room, const void *data, size_t len, double deadline) {
    if (!s || !data || len == 0) return di_errorf("kv transfer: send_state needs a sender and a non-empty state");
    if (bounded(deadline, "send_state") != 0) return -1;
    return send_chunks(s, DI_KV_AM_STATE, room, (DiKvKey){0, 0}, len, 0, data, len, deadline, "sending the state");
}

int di_kv_send_state_part(DiKvSend *s, uint64_t room, uint64_t total, uint64_t offset, const void *data, size_t len,
                          double deadline) {
    if (!s || !data || len == 0 || total == 0 || offset % DI_KV_CHUNK_BYTES != 0 || offset > total || len > total - offset ||
        (offset + len < total && len % DI_KV_CHUNK_BYTES != 0))
        return di_errorf("kv transfer: send_state_part needs a sender and whole chunks of the state's %" PRIu64
                         "-byte grid ([%" PRIu64 ", +%zu) given)", total, offset, len);
    if (bounded(deadline, "send_state_part") != 0) return -1;
    return send_chunks(s, DI_KV_AM_STATE, room, (DiKvKey){0, 0}, total, offset, data, len, deadline, "sending the state");
}

int di_kv_send_raw(DiKvSend *s, unsigned am, const void *hdr, size_t hdr_len, const void *data, size_t len, double deadline) {
    if (!s || (hdr_len && !hdr) || (len && !data)) return di_errorf("kv transfer: send_raw: bad arguments");
    if (bounded(deadline, "send_raw") != 0) return -1;
    void *req;
    if (post(s, am, hdr, hdr_len, data, len, &req, "sending a raw message") != 0) return -1;
    return wait_requests(s, &req, 1, deadline, "sending a raw message");
}

int di_kv_send_alive(DiKvSend *s, double for_s) {
    if (!s) return 0;
    double until = di_kv_now() + for_s;
    while (s->failed == UCS_OK && di_kv_now() < until) progress_or_sleep(s->worker, s->efd, 5);
    return s->failed == UCS_OK;
}

int di_kv_send_done(DiKvSend *s, uint64_t room, uint32_t n_blocks, uint64_t state_bytes, double deadline) {
    if (!s) return di_errorf("kv transfer: no sender");
    if (bounded(deadline, "send_done") != 0) return -1;
    DiKvDoneMsg m = {.room = room, .n_blocks = n_blocks, .state_bytes = state_bytes};
    return send_one(s, DI_KV_AM_DONE, &m, sizeof m, deadline, "sending DONE");
}

int di_kv_send_begin(DiKvSend *s, uint64_t room, double deadline) {
    if (!s) return di_errorf("kv transfer: no sender");
    if (bounded(deadline, "send_begin") != 0) return -1;
    return send_one(s, DI_KV_AM_BEGIN, &room, sizeof room, deadline, "sending BEGIN");
}

int di_kv_send_abort(DiKvSend *s, uint64_t room, double deadline) {
    if (!s) return di_errorf("kv transfer: no sender");
    if (bounded(deadline, "send_abort") != 0) return -1;
    return send_one(s, DI_KV_AM_ABORT, &room, sizeof room, deadline, "sending ABORT");
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
