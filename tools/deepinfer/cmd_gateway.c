/* cmd_gateway.c — `deepinfer gateway`: the HTTP front that routes requests over `deepinfer
 * serve` workers with the cluster balancers (src/gateway/gateway.h).
 *
 * Options come from the command line and, with --config FILE, a JSON object of the same
 * settings (command-line flags win; worker lists add up); the model directory gives the
 * tokenizer the gateway measures prompts with (--model, else $DEEPINFER_HF_MODEL_DIR, else the
 * built-in tiny model, as `serve`).  Serves until SIGTERM / SIGINT. */
#include "cli_engine.h"
#include "commands.h"

#include "base/env.h"
#include "base/error.h"
#include "gateway/gateway.h"
#include "serve/kv_msg.h"
#include "model/tiny.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_WORKERS 256

static void usage(FILE *out) {
    fprintf(out,
            "usage: deepinfer gateway --both URL... | --prefill URL... --decode URL... [--both URL...] [options]\n\n"
            "The OpenAI / Anthropic HTTP front of a set of `deepinfer serve` workers: same endpoints and SSE\n"
            "as serve (bodies and streams pass through unchanged); /v1/models, /health and /metrics are the\n"
            "gateway's own.  Each prompt is tokenized once to route it: with prefill and decode workers, the\n"
            "decode balancer picks the decode worker and the prefill balancer (context-length tiers, quotas,\n"
            "the cost model fitted from the workers' measured prefill times) the prefill worker, which gets\n"
            "POST /internal/prefill while the decode worker gets the request with X-DI-Room; with only\n"
            "--both workers (or one pool empty) whole requests go to the worker the decode balancer picks.\n"
            "A worker missing 2 heartbeats in a row (or refusing a connection) leaves rotation until it\n"
            "answers again; a request whose worker fails before any byte is retried once on another.\n\n"
            "  --prefill URL...         prefill workers (http://HOST:PORT, `serve --role prefill`)\n"
            "  --decode URL...          decode workers (`serve --role decode`)\n"
            "  --both URL...            whole-request workers (`serve`, role both)\n"
            "  --model DIR              the model's directory, for its tokenizer (default: $DEEPINFER_HF_MODEL_DIR,\n"
            "                           else the built-in tiny model)\n"
            "  --served-model-name NAME the model workers must serve and /v1/models lists (default DeepSeek-V4.1-Flash)\n"
            "  --host ADDR              IPv4 address to listen on (default 127.0.0.1)\n"
            "  --port N                 TCP port, 0 = any free one (default 8000)\n"
            "  --heartbeat-ms N         GET /internal/load period of every worker, 50..60000 (default 500)\n"
            "  --connect-timeout S      connecting to a worker (default 2)\n"
            "  --idle-timeout S         most seconds between two bytes of a worker's answer (default 120)\n"
            "  --request-timeout S      a whole proxied exchange, 0 = none (default 600)\n"
            "  --room-deadline-ms N     how long a PD prefill may go without progress (default 30000)\n"
            "  --decode-policy P        decode balancer: balanced, round-robin, count, kv (default balanced)\n"
            "  --api-key KEY            require 'Authorization: Bearer KEY' or 'x-api-key: KEY' from clients (all but\n"
            "                           /health) and send it on heartbeats: the workers' key (default:\n"
            "                           $DEEPINFER_API_KEY; none: no authentication)\n"
            "  --cluster-key FILE       the secret the PD workers share (default: $DEEPINFER_CLUSTER_KEY): its token\n"
            "                           goes with /internal/prefill and the decode request (serve --cluster-key)\n"
            "  --config FILE            JSON object with any of: prefill, decode, both (arrays of URLs), model,\n"
            "                           served_model_name, host, port, heartbeat_ms, decode_policy\n"
            "  -h, --help               this help\n");
}

typedef struct {
    const char *urls[MAX_WORKERS];
    DiGwRole roles[MAX_WORKERS];
    int n;
    const char *model, *host, *name, *policy, *cluster_key;
    long port, heartbeat_ms;
    bool port_set, hb_set;
} Opts;

static int add_worker(Opts *o, DiGwRole role, const char *url) {
    if (o->n >= MAX_WORKERS) return di_errorf("at most %d workers", MAX_WORKERS);
    if (strncmp(url, "http://", 7) != 0) return di_errorf("worker URL '%s' must start with http://", url);
    size_t len = strlen(url);
    char *copy = strdup(url);
    if (!copy) return di_errorf("out of memory");
    if (len > 7 && copy[len - 1] == '/') copy[len - 1] = 0; /* paths are appended */
    o->urls[o->n] = copy;
    o->roles[o->n++] = role;
    return 0;
}

static int parse_long(const char *flag, const char *v, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long n = v ? strtol(v, &end, 10) : 0;
    if (!v || errno || *end || end == v || n < lo || n > hi)
        return di_errorf("%s: expected an integer in [%ld, %ld], got '%s'", flag, lo, hi, v ? v : "");
    *out = n;
    return 0;
}

static int parse_seconds(const char *flag, const char *v, double *out) {
    char *end;
    double s = v ? strtod(v, &end) : -1;
    if (!v || *end || end == v || !(s >= 0) || s > 1e6) return di_errorf("%s: expected seconds >= 0, got '%s'", flag, v ? v : "");
    *out = s;
    return 0;
}

/* --config FILE: the JSON object's settings (strings kept alive in *keep). */
static int load_config(const char *path, Opts *o, json_t **keep) {
    json_error_t jerr;
    json_t *cfg = json_load_file(path, 0, &jerr);
    if (!json_is_object(cfg)) {
        json_decref(cfg);
        return di_errorf("--config %s: expected a JSON object (%s, line %d)", path, jerr.text, jerr.line);
    }
    *keep = cfg;
    const char *key;
    json_t *v;
    json_object_foreach(cfg, key, v) {
        DiGwRole role = !strcmp(key, "prefill") ? DI_GW_PREFILL : !strcmp(key, "decode") ? DI_GW_DECODE : DI_GW_BOTH;
        if (!strcmp(key, "prefill") || !strcmp(key, "decode") || !strcmp(key, "both")) {
            size_t i;
            json_t *u;
            if (!json_is_array(v)) return di_errorf("--config %s: '%s' must be an array of URLs", path, key);
            json_array_foreach(v, i, u) {
                if (!json_is_string(u) || add_worker(o, role, json_string_value(u)) != 0)
                    return di_error_wrap("--config %s: %s[%zu]", path, key, i);
            }
        } else if (!strcmp(key, "model") || !strcmp(key, "served_model_name") || !strcmp(key, "host") ||
                   !strcmp(key, "decode_policy")) {
            if (!json_is_string(v)) return di_errorf("--config %s: '%s' must be a string", path, key);
            const char **dst = !strcmp(key, "model") ? &o->model : !strcmp(key, "host") ? &o->host
                               : !strcmp(key, "decode_policy") ? &o->policy : &o->name;
            if (!*dst) *dst = json_string_value(v);
        } else if (!strcmp(key, "port") || !strcmp(key, "heartbeat_ms")) {
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 65535)
                return di_errorf("--config %s: '%s' must be an integer in 0..65535", path, key);
            if (!strcmp(key, "port") && !o->port_set) o->port = (long)json_integer_value(v), o->port_set = true;
            if (!strcmp(key, "heartbeat_ms") && !o->hb_set) o->heartbeat_ms = (long)json_integer_value(v), o->hb_set = true;
        } else {
            return di_errorf("--config %s: unknown setting '%s'", path, key);
        }
    }
    return 0;
}

/* The options; 2 for bad usage (message printed), 0 to go on, -1 for --help. */
static int parse_args(int argc, char **argv, Opts *o, DiGatewayConfig *cfg, json_t **keep) {
    const char *config = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return -1;
        bool list = !strcmp(a, "--prefill") || !strcmp(a, "--decode") || !strcmp(a, "--both");
        if (list) {
            DiGwRole role = !strcmp(a, "--prefill") ? DI_GW_PREFILL : !strcmp(a, "--decode") ? DI_GW_DECODE : DI_GW_BOTH;
            int before = o->n;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
                if (add_worker(o, role, argv[++i]) != 0) goto bad;
            if (o->n == before) {
                di_errorf("%s: expected one or more worker URLs", a);
                goto bad;
            }
            continue;
        }
        const char *v = i + 1 < argc ? argv[++i] : NULL;
        long n = 0;
        int rc = v ? 0 : di_errorf("%s needs a value", a);
        if (rc) {
        } else if (!strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--served-model-name")) o->name = v;
        else if (!strcmp(a, "--host")) o->host = v;
        else if (!strcmp(a, "--config")) config = v;
        else if (!strcmp(a, "--decode-policy")) o->policy = v;
        else if (!strcmp(a, "--api-key")) cfg->api_key = v;
        else if (!strcmp(a, "--cluster-key")) o->cluster_key = v;
        else if (!strcmp(a, "--port")) rc = parse_long(a, v, 0, 65535, &o->port), o->port_set = true;
        else if (!strcmp(a, "--heartbeat-ms")) rc = parse_long(a, v, 50, 60000, &o->heartbeat_ms), o->hb_set = true;
        else if (!strcmp(a, "--connect-timeout")) rc = parse_seconds(a, v, &cfg->connect_timeout_s);
        else if (!strcmp(a, "--idle-timeout")) rc = parse_seconds(a, v, &cfg->idle_timeout_s);
        else if (!strcmp(a, "--request-timeout")) rc = parse_seconds(a, v, &cfg->request_timeout_s);
        else if (!strcmp(a, "--room-deadline-ms")) rc = parse_long(a, v, 1, 3600000, &n), cfg->room_deadline_ms = (int)n;
        else {
            fprintf(stderr, "deepinfer gateway: unknown option '%s'\n\n", a);
            usage(stderr);
            return 2;
        }
        if (rc) goto bad;
    }
    if (config && load_config(config, o, keep) != 0) goto bad;
    if (o->policy && di_decode_lb_policy_parse(o->policy, &cfg->pool.policy) != 0) goto bad;
    if (cfg->pool.policy == DI_DECODE_LB_STEP_TIME) {
        di_errorf("--decode-policy step-time needs a fitted decode step model, which the gateway does not have yet");
        goto bad;
    }
    if (o->n == 0) {
        di_errorf("no workers: give --both URL..., or --prefill URL... and --decode URL...");
        goto bad;
    }
    bool pre = false, dec = false;
    for (int i = 0; i < o->n; i++) pre |= o->roles[i] == DI_GW_PREFILL, dec |= o->roles[i] == DI_GW_DECODE;
    if (pre && !dec) {
        di_errorf("--prefill workers need --decode workers to hand their KV to");
        goto bad;
    }
    if (o->cluster_key && !pre) {
        di_errorf("--cluster-key secures the KV transfer between --prefill and --decode workers; there are none");
        goto bad;
    }
    if (!(cfg->connect_timeout_s > 0) || !(cfg->idle_timeout_s > 0)) {
        di_errorf("--connect-timeout and --idle-timeout must be > 0");
        goto bad;
    }
    return 0;
bad:
    fprintf(stderr, "deepinfer gateway: %s\n", di_error_message());
    return 2;
}

int cmd_gateway(int argc, char **argv) {
    Opts o = {.port = 8000, .heartbeat_ms = 500};
    DiGatewayConfig cfg;
    di_gateway_config_defaults(&cfg);
    json_t *keep = NULL;
    int rc = parse_args(argc, argv, &o, &cfg, &keep);
    if (rc != 0) {
        if (rc < 0) usage(stdout);
        json_decref(keep);
        for (int i = 0; i < o.n; i++) free((char *)o.urls[i]);
        return rc < 0 ? 0 : rc;
    }
    char tiny[PATH_MAX];
    const char *dir = o.model && *o.model ? o.model : di_env_hf_model_dir();
    if (!dir || !*dir) {
        if (di_tiny_default_dir(tiny, sizeof tiny) != 0 || di_tiny_ensure(tiny) != 0) {
            fprintf(stderr, "deepinfer gateway: the built-in tiny model: %s\n", di_error_message());
            rc = 1;
            goto done;
        }
        dir = tiny;
    }
    cfg.model_dir = dir;
    if (o.name) cfg.model_name = o.name;
    if (o.host) cfg.host = o.host;
    if (!cfg.api_key) cfg.api_key = di_env_api_key();
    static char token[65];
    bool has_pre = false;
    for (int i = 0; i < o.n; i++) has_pre |= o.roles[i] == DI_GW_PREFILL;
    uint8_t *key = NULL;
    size_t key_len = 0;
    if (has_pre && (di_kv_cluster_key_load(o.cluster_key, &key, &key_len) != 0 ||
                    (key && di_kv_cluster_token(key, key_len, token) != 0))) {
        fprintf(stderr, "deepinfer gateway: %s\n", di_error_message());
        free(key);
        rc = 2;
        goto done;
    }
    if (key) cfg.cluster_token = token;
    free(key);
    cfg.port = (int)o.port;
    cfg.heartbeat_ms = (int)o.heartbeat_ms;
    cfg.urls = o.urls;
    cfg.roles = o.roles;
    cfg.n_workers = o.n;
    sigset_t set;
    cli_block_stop_signals(&set); /* threads started below inherit the mask */
    DiGateway *g = di_gateway_start(&cfg);
    if (!g) {
        fprintf(stderr, "deepinfer gateway: %s\n", di_error_message());
        rc = 1;
        goto done;
    }
    fprintf(stderr, "deepinfer gateway: listening on http://%s:%d (%d workers, model %s)\n", cfg.host,
            di_gateway_port(g), o.n, cfg.model_name);
    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "deepinfer gateway: %s, shutting down\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    di_gateway_stop(g);
done:
    json_decref(keep);
    for (int i = 0; i < o.n; i++) free((char *)o.urls[i]);
    return rc;
}
