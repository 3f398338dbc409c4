/* server_pd.c — the server's prefill/decode worker roles (issue 24, the PD contract; serving.md
 * §5): the role's start-up checks, the decode side's room wait, and the PD metrics and load
 * fields.  The prefill side's POST /internal/prefill is server_prefill.c.
 *
 * Decode: a client request carrying `X-DI-Room: <u64>` waits (on its preparation worker,
 * bounded by `X-DI-Room-Deadline-Ms`, default 30000, and abandoned at once if its client leaves
 * or the server stops)
 * until the room's transfer is DONE, ABORTED or EXPIRED, then is submitted as usual with the
 * room's exact state (the prompt less its last token, STATE in kv_transfer.h): the backend
 * imports it into the engine's prefix cache just before adding the request, whose admission
 * then starts from it and computes only the last prompt position, so the output is bit-identical
 * to a cold single server's (deepinfer_pd_states_imported_total).  The request is exact_state,
 * so it never restores KV blocks with a bounded replay.  After anything but DONE, or when the
 * engine has no room for the state, the request prefills locally (counted in
 * deepinfer_pd_local_prefills_total / _state_import_failures_total); the output is the same,
 * only slower.  The room's pins (of BLOCKs, which the prefill worker no longer sends) are
 * released when the request's first token (or its end) shows it was admitted.
 *
 * Load (GET /internal/load): the PD fields, and the keys of the blocks the worker's RAM tier
 * holds (prefix_keys, any role with a block cache) for the gateway's cache-aware choice. */
#include "serve/server_internal.h"

#include "base/error.h"
#include "base/log.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_ROOM_DEADLINE_MS 30000
#define MAX_ROOM_DEADLINE_MS 3600000

const char *di_server_role_name(DiServerRole role) {
    switch (role) {
    case DI_ROLE_BOTH: return "both";
    case DI_ROLE_PREFILL: return "prefill";
    case DI_ROLE_DECODE: return "decode";
    }
    return "?";
}

int di_srv_pd_start(DiServer *srv) {
    const DiServerConfig *cfg = &srv->cfg;
    if (cfg->role != DI_ROLE_BOTH && cfg->role != DI_ROLE_PREFILL && cfg->role != DI_ROLE_DECODE)
        return di_errorf("server: role %d is not prefill, decode or both", (int)cfg->role);
    if (cfg->role != DI_ROLE_DECODE && (cfg->transfer_port || cfg->transfer_host))
        return di_errorf("server: --transfer-port and --transfer-host configure the decode role's KV transfer "
                         "listener; this worker's role is %s", di_server_role_name(cfg->role));
    if (cfg->transfer_port < 0 || cfg->transfer_port > 65535)
        return di_errorf("server: transfer port %d is out of range 0..65535", cfg->transfer_port);
    if (cfg->role == DI_ROLE_BOTH) { /* its block cache, when on, is reported for cache-aware routing */
        if (srv->backend.kv && srv->backend.kv(srv->backend.self, &srv->kv) != 0) memset(&srv->kv, 0, sizeof srv->kv);
        return 0;
    }
    if (!srv->backend.kv || srv->backend.kv(srv->backend.self, &srv->kv) != 0)
        return di_errorf("server: the %s role needs the KV block cache in RAM (--kv-cache-ram)",
                         di_server_role_name(cfg->role));
    if (cfg->role != DI_ROLE_DECODE) return 0;
    DiKvRecvOptions o = {
        .host = cfg->transfer_host ? cfg->transfer_host : cfg->host,
        .port = cfg->transfer_port,
        .identity = {.fingerprint = srv->kv.fingerprint, .block_tokens = srv->kv.block_tokens,
                     .block_bytes = srv->kv.block_bytes, .page_bytes = srv->kv.page_bytes,
                     .cluster_key = cfg->cluster_key, .cluster_key_len = cfg->cluster_key_len},
        .cache = srv->kv.cache,
    };
    if (!(srv->recv = di_kv_recv_start(&o))) return di_error_wrap("server: the decode role's KV transfer listener");
    DI_INFO("kv transfer: listening on %s", di_kv_recv_address(srv->recv));
    return 0;
}

void di_srv_pd_stop(DiServer *srv) {
    di_kv_recv_stop(srv->recv);
    srv->recv = NULL;
}

/* ---- decode: the room of a client request ------------------------------------------------- */

int di_srv_parse_u64(const char *s, uint64_t *out) {
    if (!s || *s < '0' || *s > '9') return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

bool di_srv_cluster_token_ok(Exchange *x) {
    const DiServerConfig *cfg = &x->srv->cfg;
    if (!cfg->cluster_key_len) return true;
    return di_kv_cluster_token_ok(cfg->cluster_key, cfg->cluster_key_len,
                                  MHD_lookup_connection_value(x->conn, MHD_HEADER_KIND, "X-DI-Cluster-Key"));
}

int di_srv_pd_headers(Exchange *x) {
    struct MHD_Connection *c = x->conn;
    const char *room = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-DI-Room");
    const char *deadline = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-DI-Room-Deadline-Ms");
    if (!room && !deadline) return 0;
    if (!room) return di_errorf("X-DI-Room-Deadline-Ms needs an X-DI-Room header");
    if (!x->srv->recv)
        return di_errorf("X-DI-Room: this worker's role is %s; rooms (a KV transfer from a prefill worker) are for "
                         "--role decode", di_server_role_name(x->srv->cfg.role));
    if (!di_srv_cluster_token_ok(x))
        return di_errorf("X-DI-Room: this decode worker has a cluster key; the request needs its token in X-DI-Cluster-Key "
                         "(the gateway sends it when started with the same --cluster-key)");
    uint64_t ms = DEFAULT_ROOM_DEADLINE_MS;
    if (di_srv_parse_u64(room, &x->room) != 0) return di_errorf("X-DI-Room: expected a decimal u64, got '%.40s'", room);
    if (deadline && (di_srv_parse_u64(deadline, &ms) != 0 || ms > MAX_ROOM_DEADLINE_MS))
        return di_errorf("X-DI-Room-Deadline-Ms: expected 0..%d milliseconds, got '%.40s'", MAX_ROOM_DEADLINE_MS, deadline);
    x->has_room = true;
    x->room_deadline_ms = (double)ms;
    return 0;
}

/* The wait ends early when the client leaves or the server stops. */
static bool give_up(void *arg) {
    Exchange *x = arg;
    return atomic_load(&x->srv->stopping) || di_srv_peer_closed(x->fd);
}

int di_srv_pd_wait_room(Exchange *x) {
    DiServer *srv = x->srv;
    DiRoomState s = di_kv_recv_wait(srv->recv, x->room, x->room_deadline_ms / 1000.0, give_up, x);
    x->req.pd_exact = true; /* from the received state or a local prefill, never a block replay */
    size_t len = 0;
    if (s == DI_ROOM_DONE && di_kv_recv_take_state(srv->recv, x->room, &x->pd_state, &len) == 0 && x->pd_state) {
        x->req.pd_state = x->pd_state;
        x->req.pd_state_len = len;
        x->room_held = true;
        return 0;
    }
    di_kv_recv_release(srv->recv, x->room); /* late blocks of this room are ignored */
    if (di_srv_peer_closed(x->fd)) return di_errorf("the client left while its KV transfer was awaited");
    atomic_fetch_add(&srv->pd_local_prefills, 1);
    DI_INFO("room %" PRIu64 ": the KV transfer ended %s; prefilling locally", x->room,
            s == DI_ROOM_NONE                                   ? "in an error"
            : s == DI_ROOM_NEW || s == DI_ROOM_TRANSFERRING     ? "unfinished (deadline or stop)"
            : s == DI_ROOM_DONE                                 ? "without a state (a one-token prompt)"
                                                                : di_room_state_name(s));
    return 0;
}

void di_srv_pd_release(Exchange *x) {
    if (!x->room_held) return;
    x->room_held = false;
    di_kv_recv_release(x->srv->recv, x->room);
}

/* ---- metrics and load ---------------------------------------------------------------------- */

int di_srv_pd_metrics(DiServer *srv, DiApiBuf *out) {
    if (srv->cfg.role == DI_ROLE_BOTH) return 0;
    DiKvRecvStats st = {0};
    di_kv_recv_stats(srv->recv, &st);
    DiBackendStats bs = {0};
    srv->backend.stats(srv->backend.self, &bs);
    int rc = di_api_buf_printf(out, "# HELP deepinfer_pd_rooms_total KV transfer rooms that reached each state "
                                    "(decode role).\n# TYPE deepinfer_pd_rooms_total counter\n");
    for (int s = 0; s < DI_ROOM_STATES && rc == 0; s++)
        rc = di_api_buf_printf(out, "deepinfer_pd_rooms_total{state=\"%s\"} %" PRIu64 "\n",
                               di_room_state_name((DiRoomState)s), st.rooms[s]);
    if (rc == 0)
        rc = di_api_buf_printf(
            out,
            "# HELP deepinfer_pd_local_prefills_total Room requests prefilled locally (transfer aborted or late).\n"
            "# TYPE deepinfer_pd_local_prefills_total counter\ndeepinfer_pd_local_prefills_total %" PRIu64 "\n"
            "# HELP deepinfer_pd_bytes_received_total KV block and state bytes received from prefill workers.\n"
            "# TYPE deepinfer_pd_bytes_received_total counter\ndeepinfer_pd_bytes_received_total %" PRIu64 "\n"
            "# HELP deepinfer_pd_states_received_total Exact request states received from prefill workers.\n"
            "# TYPE deepinfer_pd_states_received_total counter\ndeepinfer_pd_states_received_total %" PRIu64 "\n"
            "# HELP deepinfer_pd_states_imported_total Received states imported into the engine (the request "
            "continued from them).\n"
            "# TYPE deepinfer_pd_states_imported_total counter\ndeepinfer_pd_states_imported_total %" PRIu64 "\n"
            "# HELP deepinfer_pd_state_import_failures_total Received states the engine had no room for "
            "(prefilled locally).\n"
            "# TYPE deepinfer_pd_state_import_failures_total counter\ndeepinfer_pd_state_import_failures_total %" PRIu64 "\n"
            "# HELP deepinfer_pd_rooms_waiting Requests waiting for their room's transfer.\n"
            "# TYPE deepinfer_pd_rooms_waiting gauge\ndeepinfer_pd_rooms_waiting %d\n"
            "# HELP deepinfer_pd_pinned_blocks KV blocks pinned for rooms.\n"
            "# TYPE deepinfer_pd_pinned_blocks gauge\ndeepinfer_pd_pinned_blocks %d\n"
            "# HELP deepinfer_pd_transfer_connections Prefill workers connected to the KV transfer listener.\n"
            "# TYPE deepinfer_pd_transfer_connections gauge\ndeepinfer_pd_transfer_connections %d\n"
            "# HELP deepinfer_pd_registrations_refused_total Transfer registrations refused (another model or "
            "layout, no or another cluster key, a replayed or stale proof).\n"
            "# TYPE deepinfer_pd_registrations_refused_total counter\ndeepinfer_pd_registrations_refused_total %" PRIu64 "\n"
            "# HELP deepinfer_pd_peers_dropped_total Transfer connections closed for a malformed, oversized or "
            "out-of-order message.\n"
            "# TYPE deepinfer_pd_peers_dropped_total counter\ndeepinfer_pd_peers_dropped_total %" PRIu64 "\n",
            (uint64_t)atomic_load(&srv->pd_local_prefills), st.bytes_received + st.state_bytes_received, st.states_received,
            bs.pd_states_imported, bs.pd_state_import_failures, st.rooms_waiting, st.pinned_blocks,
            st.connections, st.refused, st.peers_dropped);
    if (rc == 0)
        rc = di_api_buf_printf(
            out,
            "# HELP deepinfer_pd_state_bytes_sent_total Exact-state bytes sent to decode workers (prefill role).\n"
            "# TYPE deepinfer_pd_state_bytes_sent_total counter\ndeepinfer_pd_state_bytes_sent_total %" PRIu64 "\n"
            "# HELP deepinfer_pd_state_bytes_streamed_total Of them, bytes sent while their prefill still ran.\n"
            "# TYPE deepinfer_pd_state_bytes_streamed_total counter\ndeepinfer_pd_state_bytes_streamed_total %" PRIu64 "\n",
            (uint64_t)atomic_load(&srv->pd_state_bytes_sent), (uint64_t)atomic_load(&srv->pd_state_bytes_streamed));
    return rc;
}

/* The first 64 bits of the keys of the blocks the RAM tier holds, hottest first, as 16 hex
 * digits each (at most DI_LOAD_PREFIX_KEYS: ~10 KB of JSON): a key names its whole prefix
 * (block_key.h), so a gateway that hashes a request's blocks the same way finds the longest
 * prefix this worker holds.  An empty array without a block cache. */
static json_t *prefix_keys(DiServer *srv) {
    static DiKvKey keys[DI_LOAD_PREFIX_KEYS]; /* one load answer at a time: under keys_mu */
    static pthread_mutex_t keys_mu = PTHREAD_MUTEX_INITIALIZER;
    json_t *arr = json_array();
    pthread_mutex_lock(&keys_mu);
    int n = srv->kv.cache ? di_kv_cache_ram_keys(srv->kv.cache, keys, DI_LOAD_PREFIX_KEYS) : 0;
    for (int i = 0; arr && i < n; i++) {
        char hex[17];
        snprintf(hex, sizeof hex, "%016" PRIx64, keys[i].lo);
        if (json_array_append_new(arr, json_string(hex)) != 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    pthread_mutex_unlock(&keys_mu);
    return arr;
}

int di_server_pd_load(DiServer *srv, json_t *obj) {
    if (!srv || !json_is_object(obj)) return di_errorf("server: pd load needs a server and a JSON object");
    DiKvRecvStats st = {0};
    di_kv_recv_stats(srv->recv, &st);
    char hex[33] = "";
    if (srv->kv.cache) di_kv_key_hex(srv->kv.fingerprint, hex);
    int rc = json_object_set_new(obj, "role", json_string(di_server_role_name(srv->cfg.role)));
    rc |= json_object_set_new(obj, "block_tokens", srv->kv.cache ? json_integer(srv->kv.block_tokens) : json_null());
    rc |= json_object_set_new(obj, "kv_identity", srv->kv.cache ? json_string(hex) : json_null());
    rc |= json_object_set_new(obj, "transfer", srv->recv ? json_string(di_kv_recv_address(srv->recv)) : json_null());
    rc |= json_object_set_new(obj, "rooms_waiting", json_integer(st.rooms_waiting));
    rc |= json_object_set_new(obj, "rooms_pinned_blocks", json_integer(st.pinned_blocks));
    rc |= json_object_set_new(obj, "prefix_keys", prefix_keys(srv));
    return rc ? di_errorf("server: out of memory building the load object") : 0;
}
