/* cmd_serve.c — `deepinfer serve`: the HTTP API (serve/server.h) over the engine.
 *
 * Parses and validates the options, creates the engine on the model and its backend
 * (serve/backend_engine.h), starts the server, serves until SIGTERM / SIGINT, then stops
 * gracefully (stop accepting, let in-flight requests finish within --shutdown-grace, abort the
 * rest).  The model's text (its tokenizer.json and the chat template, serve/backend_text.h) is
 * opened on the directory the engine resolved, so the built-in tiny model serves text too.  A
 * model that cannot load exits 1 with the cause, after the options were checked. */
#include "cli_engine.h"
#include "cli_eplb.h"
#include "cli_ep.h"
#include "ep/ep.h"
#include "commands.h"

#include "base/env.h"
#include "base/error.h"
#include "serve/backend_engine.h"
#include "serve/kv_msg.h"
#include "serve/server.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out) {
    fprintf(out,
            "usage: deepinfer serve [options]\n\n"
            "HTTP API server: OpenAI Chat Completions, Completions and Responses, Anthropic Messages,\n"
            "plus GET /v1/models[/ID], /health, /metrics (Prometheus), /openapi.json, /version and\n"
            "POST /tokenize, /detokenize (vLLM's shapes), and GET /internal/load (the load a gateway routes on).\n\n"
            "  --model DIR              model directory (default: $DEEPINFER_HF_MODEL_DIR, else the built-in tiny model)\n"
            "  --served-model-name NAME the model name clients send and /v1/models lists (default DeepSeek-V4.1-Flash)\n"
            "  --context-limit N        prompt + output tokens of one request (default 1048576)\n"
            "  --host ADDR              IPv4 address to listen on (default 127.0.0.1)\n"
            "  --prefix-cache on|off    keep finished requests' states so a request extending one (the next\n"
            "                           turn of a chat) starts from it; usage reports the cached tokens (default on)\n"
            "  --state-memory-mb N      memory for requests' state and the prefix cache (default 256)\n"
            "  --kv-cache-dir DIR       KV block cache: whole blocks of any shared prefix (a system prompt) are\n"
            "                           kept in RAM and in segment files in DIR, which several servers may share\n"
            "                           (a local SSD or a shared mount); replaces --prefix-cache\n"
            "  --kv-cache-ram GB        the block cache's host-RAM pool (default 1 with --kv-cache-dir; alone:\n"
            "                           a RAM-only block cache)\n"
            "  --kv-cache-disk GB       size cap of DIR, oldest segments dropped first (default: none)\n"
            "  --kv-cache-ttl DURATION  retention in DIR: N[s|m|h|d], at least 1h: segment files hold an hour\n"
            "                           of blocks and go whole, so a block stays the TTL to the TTL + 1h (default: none)\n"
            "  --kv-block-tokens B      tokens per cached block, a multiple of 128 (default 256)\n"
            "  --kv-cache-replay MODE   exact (default): a block hit replays the positions the window state\n"
            "                           depends on, so outputs equal a cold prefill's bit for bit; approx: only\n"
            "                           the last window (the official design; cheaper, outputs may differ)\n"
            "  --max-num-seqs N         requests batched in one step (default 64)\n"
            "  --max-batch-tokens N     tokens of one step, decodes + prefill chunks (default 512); decodes\n"
            "                           go first, then prefill: the oldest prompt gets an equal share, the\n"
            "                           shortest prompts the rest, so a short prompt is not stuck behind a long one\n"
            "  --max-prefill-chunk N    most prompt tokens of one request in one step, 0 = the budget (default 0)\n"
            "  --draft-max N            speculative decoding: drafts per step and request at most, 0..16, 0 = off\n"
            "                           (default $DEEPINFER_USE_NEXTN_DECODE, else 5, for a model with a drafter)\n"
            "  --draft-schedule S       fixed or confidence (default $DEEPINFER_ENABLE_MTP_VARLEN, else confidence)\n"
            "  --expert-parallel        under `mpirun -n N`: rank 0 serves, ranks 1..N-1 hold and run the routed\n"
            "                           experts (EPLB placement; the same outputs as one process)\n"
            "  --ep-timeout S           seconds rank 0 waits for an expert rank before it names it and ends the\n"
            "                           job (default 120)\n"
            "  --ep-dispatch F          fp8 (default, bit-exact under the ref numerics: E4M3 + a scale per 32\n"
            "                           values) or f32: how rank 0 sends the experts' input rows\n"
            "  --ep-prefault            make each rank's experts resident when it gets them, not on first use\n"
            "  --port N                 TCP port (default 8000)\n"
            "  --api-key KEY            require 'Authorization: Bearer KEY' or 'x-api-key: KEY'\n"
            "                           (default: $DEEPINFER_API_KEY; none: no authentication)\n"
            "  --cluster-key FILE       prefill/decode roles: the secret in FILE (default: $DEEPINFER_CLUSTER_KEY)\n"
            "                           that the gateway and every worker share: a KV transfer registers only with\n"
            "                           its proof, /internal/prefill and X-DI-Room need its token\n"
            "  --max-queue N            queued requests before new ones get 429 (default 256)\n"
            "  --max-body-bytes N       larger request bodies get 413 (default 8388608)\n"
            "  --request-timeout S      whole-request deadline in seconds, 0 = none (default 600)\n"
            "  --idle-timeout S         close idle connections after S seconds (default 60)\n"
            "  --read-timeout S         a request's headers and body must arrive within S seconds of its\n"
            "                           first byte, else the connection is closed; 0 = no limit (default 30)\n"
            "  --workers N              threads that parse and tokenize requests off the HTTP and engine\n"
            "                           threads (default 2; 16 with --role prefill or decode, where a worker\n"
            "                           waits for a room's transfer or runs a prefill and its transfer)\n"
            "  --role R                 prefill/decode disaggregation: both (default, a whole server), prefill\n"
            "                           (also serves POST /internal/prefill: prefill a request, send its exact\n"
            "                           state to a decode worker over UCX) or decode (also listens for transfers\n"
            "                           and honours X-DI-Room, continuing from the received state: outputs equal\n"
            "                           a single server's); prefill and decode need the KV block cache in RAM,\n"
            "                           1 GB when no --kv-cache-* flag sizes it, and keep exact states in the\n"
            "                           state memory (--state-memory-mb) for PD requests\n"
            "  --transfer-host ADDR     decode: IPv4 address of the KV transfer listener (default: --host)\n"
            "  --transfer-port N        decode: its port, 0 = any free one (default 0; /internal/load reports it)\n"
            "  --max-connections N      concurrent connections (default 2048)\n"
            "  --shutdown-grace S       on SIGTERM, wait S seconds for in-flight requests (default 10)\n"
            "%s"
            "  -h, --help               this help\n",
            cli_eplb_help);
}

static int parse_long(const char *flag, const char *v, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || *end || end == v || n < lo || n > hi)
        return di_errorf("%s: expected an integer in [%ld, %ld], got '%s'", flag, lo, hi, v);
    *out = n;
    return 0;
}

static int parse_seconds(const char *flag, const char *v, double *out) {
    char *end;
    double s = strtod(v, &end);
    if (*end || end == v || !(s >= 0) || s > 1e6) return di_errorf("%s: expected seconds >= 0, got '%s'", flag, v);
    *out = s;
    return 0;
}

/* Gigabytes (fractions allowed), > 0. */
static int parse_gb(const char *flag, const char *v, double *out) {
    char *end;
    double g = strtod(v, &end);
    if (*end || end == v || !(g > 0) || g > 1e6) return di_errorf("%s: expected gigabytes > 0, got '%s'", flag, v);
    *out = g;
    return 0;
}

/* A duration: a number with an optional unit s, m, h or d (seconds without one), > 0. */
static int parse_duration(const char *flag, const char *v, double *out) {
    char *end;
    double n = strtod(v, &end);
    double unit = !*end ? 1 : !strcmp(end, "s") ? 1 : !strcmp(end, "m") ? 60 : !strcmp(end, "h") ? 3600
                  : !strcmp(end, "d") ? 86400 : 0;
    if (end == v || unit == 0 || !(n > 0) || n * unit > 1e9)
        return di_errorf("%s: expected a duration such as 3600, 90m, 24h or 7d, got '%s'", flag, v);
    *out = n * unit;
    return 0;
}

static int parse_role(const char *v, DiServerRole *out) {
    if (strcmp(v, "both") == 0) *out = DI_ROLE_BOTH;
    else if (strcmp(v, "prefill") == 0) *out = DI_ROLE_PREFILL;
    else if (strcmp(v, "decode") == 0) *out = DI_ROLE_DECODE;
    else return di_errorf("--role: expected prefill, decode or both, got '%s'", v);
    return 0;
}

static int parse_on_off(const char *flag, const char *v, bool *out) {
    if (strcmp(v, "on") == 0) *out = true;
    else if (strcmp(v, "off") == 0) *out = false;
    else return di_errorf("%s: expected on or off, got '%s'", flag, v);
    return 0;
}

static int parse_kv_replay(const char *flag, const char *v, int *out) {
    if (strcmp(v, "exact") == 0) *out = DI_KV_REPLAY_EXACT;
    else if (strcmp(v, "approx") == 0) *out = DI_KV_REPLAY_APPROX;
    else return di_errorf("%s: expected exact or approx, got '%s'", flag, v);
    return 0;
}

/* The engine behind the server: di_engine_create on the model directory (NULL: the default
 * model), the model's text on the directory it resolved, both wrapped in the engine backend.
 * *text must outlive the backend. */
/* What the engine is sized by (DiEngineOptions; 0 keeps the engine default). */
typedef struct {
    bool prefix_cache, prefix_cache_given;
    bool exact_states; /* a PD role: exact request states move between workers (the prefix cache) */
    long state_memory_mb, max_num_seqs, max_batch_tokens, max_prefill_chunk;
    const char *kv_dir;
    double kv_ram_gb, kv_disk_gb, kv_ttl_s;
    long kv_block_tokens;
    int kv_replay; /* DI_KV_REPLAY_EXACT or DI_KV_REPLAY_APPROX */
    CliDraft draft;
    CliEplb eplb; /* the live EPLB driver, started on the engine (cli_eplb.h) */
    CliEp ep; /* --expert-parallel: the job's rank 0 attaches its expert ranks to the engine */
} EngineFlags;

/* Whether a --kv-* flag asks for the KV block cache (then the linear prefix cache is off). */
static bool kv_cache_flags(const EngineFlags *ef) {
    return ef->kv_dir || ef->kv_ram_gb > 0 || ef->kv_disk_gb > 0 || ef->kv_ttl_s > 0 || ef->kv_block_tokens;
}

static void kv_cache_options(const EngineFlags *ef, DiEngineOptions *o) {
    o->kv_cache_dir = ef->kv_dir;
    o->kv_cache_ram_bytes = (size_t)(ef->kv_ram_gb * (double)(1 << 30));
    o->kv_cache_disk_bytes = (uint64_t)(ef->kv_disk_gb * (double)(1 << 30));
    o->kv_cache_ttl_s = (uint64_t)ef->kv_ttl_s;
    o->kv_block_tokens = (int)ef->kv_block_tokens;
    o->kv_cache_replay = ef->kv_replay;
    if (kv_cache_flags(ef)) o->enable_prefix_caching = ef->exact_states ? 1 : 0;
}

static DiEngineBackend *open_backend(const char *model_dir, const char *served_name, long context_limit,
                                     EngineFlags *ef, DiServeText **text) {
    *text = NULL;
    /* a real checkpoint ships no engram_token_map.json: its map comes from its tokenizer */
    int32_t *engram_map = NULL;
    int64_t engram_len = 0;
    if (di_model_dir_engram_map(model_dir, &engram_map, &engram_len) != 0) return NULL;
    DiEngineOptions opts;
    di_engine_options_init(&opts);
    opts.engram_token_map = engram_map;
    opts.engram_token_map_len = engram_len;
    opts.enable_prefix_caching = ef->prefix_cache;
    kv_cache_options(ef, &opts);
    if (ef->state_memory_mb) opts.state_memory_bytes = (size_t)ef->state_memory_mb << 20;
    if (ef->max_num_seqs) opts.max_num_seqs = (int)ef->max_num_seqs;
    if (ef->max_batch_tokens) opts.max_batch_tokens = (int)ef->max_batch_tokens;
    opts.max_prefill_chunk = (int)ef->max_prefill_chunk;
    opts.draft_max = ef->draft.max;
    opts.draft_schedule = ef->draft.schedule;
    DiEngine *engine = di_engine_create_hooked(model_dir, &opts, ef->ep.ep ? ep_model_hook : NULL, ef->ep.ep);
    free(engram_map);
    if (!engine) return NULL;
    const char *dir = di_engine_model_dir(engine);
    if (cli_ep_eplb_start(&ef->ep, &ef->eplb, engine) != 0 || !(*text = di_serve_text_open(dir)) ||
        di_serve_text_install(*text, engine) != 0) {
        di_error_wrap("model %s", dir ? dir : "(none)");
        di_engine_destroy(engine);
        di_serve_text_close(*text);
        *text = NULL;
        return NULL;
    }
    DiEngineBackendConfig cfg = {.model_name = served_name, .context_limit = context_limit, .text = *text,
                                 .block_tokens = !kv_cache_flags(ef) ? 0 : ef->kv_block_tokens ? (int)ef->kv_block_tokens : 256};
    DiEngineBackend *b = di_engine_backend_create(engine, &cfg);
    if (!b) {
        di_engine_destroy(engine);
        di_serve_text_close(*text);
        *text = NULL;
    }
    return b;
}

int cmd_serve(int argc, char **argv) {
    DiServerConfig cfg;
    di_server_config_defaults(&cfg);
    int status = 0;
    const char *model = di_env_hf_model_dir();
    const char *served_name = "DeepSeek-V4.1-Flash";
    long context_limit = 1L << 20; /* V4.1-Flash contexts up to 1M tokens (serving.md §3) */
    EngineFlags ef = {.prefix_cache = true, .draft = CLI_DRAFT_DEFAULTS, .eplb = CLI_EPLB_DEFAULTS, .ep = CLI_EP_DEFAULTS};
    bool workers_given = false;
    const char *cluster_key_file = NULL;
    const char *env_key = di_env_api_key();
    if (env_key) cfg.api_key = env_key;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        int used = 1, bad = 0;
        if ((strcmp(a, "--expert-parallel") == 0 || strcmp(a, "--ep-prefault") == 0) && cli_ep_flag(a, NULL, &ef.ep, &used, &bad))
            continue;
        if (i + 1 >= argc || strncmp(a, "--", 2) != 0) {
            fprintf(stderr, "deepinfer serve: %s '%s'\n\n", strncmp(a, "--", 2) ? "unexpected argument" : "missing value for", a);
            usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        long n = 0;
        int rc = 0;
        if ((strcmp(a, "--ep-timeout") == 0 || strcmp(a, "--ep-dispatch") == 0) && cli_ep_flag(a, v, &ef.ep, &used, &bad))
            rc = bad ? di_errorf("%s: invalid value '%s'", a, v) : 0;
        else if (strcmp(a, "--model") == 0) model = v;
        else if (strcmp(a, "--served-model-name") == 0) served_name = v;
        else if (strcmp(a, "--context-limit") == 0) rc = parse_long(a, v, 16, 1L << 30, &context_limit);
        else if (strcmp(a, "--host") == 0) cfg.host = v;
        else if (strcmp(a, "--prefix-cache") == 0) rc = parse_on_off(a, v, &ef.prefix_cache), ef.prefix_cache_given = true;
        else if (strcmp(a, "--kv-cache-dir") == 0) ef.kv_dir = v;
        else if (strcmp(a, "--kv-cache-ram") == 0) rc = parse_gb(a, v, &ef.kv_ram_gb);
        else if (strcmp(a, "--kv-cache-disk") == 0) rc = parse_gb(a, v, &ef.kv_disk_gb);
        else if (strcmp(a, "--kv-cache-ttl") == 0) rc = parse_duration(a, v, &ef.kv_ttl_s);
        else if (strcmp(a, "--kv-block-tokens") == 0) rc = parse_long(a, v, 128, 1L << 20, &ef.kv_block_tokens);
        else if (strcmp(a, "--kv-cache-replay") == 0) rc = parse_kv_replay(a, v, &ef.kv_replay);
        else if (strcmp(a, "--state-memory-mb") == 0) rc = parse_long(a, v, 1, 1L << 24, &ef.state_memory_mb);
        else if (strcmp(a, "--max-num-seqs") == 0) rc = parse_long(a, v, 1, 65536, &ef.max_num_seqs);
        else if (strcmp(a, "--max-batch-tokens") == 0) rc = parse_long(a, v, 1, 1L << 20, &ef.max_batch_tokens);
        else if (strcmp(a, "--max-prefill-chunk") == 0) rc = parse_long(a, v, 0, 1L << 20, &ef.max_prefill_chunk);
        else if (strcmp(a, "--api-key") == 0) cfg.api_key = v;
        else if (strcmp(a, "--port") == 0) rc = parse_long(a, v, 0, 65535, &n), cfg.port = (int)n;
        else if (strcmp(a, "--max-queue") == 0) rc = parse_long(a, v, 1, 1000000, &n), cfg.max_queue = (int)n;
        else if (strcmp(a, "--max-body-bytes") == 0) rc = parse_long(a, v, 1024, 1L << 31, &n), cfg.max_body_bytes = (size_t)n;
        else if (strcmp(a, "--max-connections") == 0) rc = parse_long(a, v, 1, 1000000, &n), cfg.max_connections = (unsigned)n;
        else if (strcmp(a, "--request-timeout") == 0) rc = parse_seconds(a, v, &cfg.request_timeout_s);
        else if (strcmp(a, "--shutdown-grace") == 0) rc = parse_seconds(a, v, &cfg.shutdown_grace_s);
        else if (strcmp(a, "--idle-timeout") == 0) rc = parse_long(a, v, 0, 86400, &n), cfg.idle_timeout_s = (unsigned)n;
        else if (strcmp(a, "--read-timeout") == 0) rc = parse_seconds(a, v, &cfg.read_timeout_s);
        else if (strcmp(a, "--workers") == 0) rc = parse_long(a, v, 1, 64, &n), cfg.workers = (int)n, workers_given = true;
        else if (strcmp(a, "--role") == 0) rc = parse_role(v, &cfg.role);
        else if (strcmp(a, "--transfer-host") == 0) cfg.transfer_host = v;
        else if (strcmp(a, "--transfer-port") == 0) rc = parse_long(a, v, 0, 65535, &n), cfg.transfer_port = (int)n;
        else if (strcmp(a, "--cluster-key") == 0) cluster_key_file = v;
        else if (cli_draft_flag(a, v, &ef.draft, &bad) || cli_eplb_flag(a, v, &ef.eplb, &bad))
            rc = bad ? di_errorf("%s: invalid value '%s'", a, v) : 0;
        else {
            fprintf(stderr, "deepinfer serve: unknown option '%s'\n\n", a);
            usage(stderr);
            return 2;
        }
        if (rc != 0) {
            fprintf(stderr, "deepinfer serve: %s\n", di_error_message());
            return 2;
        }
    }
    if (cfg.role != DI_ROLE_DECODE && (cfg.transfer_host || cfg.transfer_port)) {
        fprintf(stderr, "deepinfer serve: --transfer-host and --transfer-port configure the KV transfer listener "
                        "of --role decode\n");
        return 2;
    }
    if (cfg.role == DI_ROLE_BOTH && cluster_key_file) {
        fprintf(stderr, "deepinfer serve: --cluster-key secures the KV transfer of --role prefill and decode\n");
        return 2;
    }
    uint8_t *cluster_key = NULL; /* freed at exit: the server reads it until it stops */
    if (cfg.role != DI_ROLE_BOTH && di_kv_cluster_key_load(cluster_key_file, &cluster_key, &cfg.cluster_key_len) != 0) {
        fprintf(stderr, "deepinfer serve: %s\n", di_error_message());
        return 2;
    }
    cfg.cluster_key = cluster_key;
    if (cfg.role != DI_ROLE_BOTH) { /* a PD worker moves KV through the block cache */
        if (!kv_cache_flags(&ef)) ef.kv_ram_gb = 1;
        if (!workers_given) cfg.workers = 16;
        ef.exact_states = true;
    }
    if (kv_cache_flags(&ef) && ef.prefix_cache_given && ef.prefix_cache) {
        fprintf(stderr, "deepinfer serve: --prefix-cache on and the --kv-cache-* block cache are two prompt caches; "
                        "choose one\n");
        return 2;
    }
    if (!*served_name) {
        fprintf(stderr, "deepinfer serve: --served-model-name must not be empty\n");
        return 2;
    }
    int started = cli_ep_start(&ef.ep, &status);
    if (started != 0) { /* an expert rank has served the job, or the start failed */
        if (started < 0) fprintf(stderr, "deepinfer serve: %s\n", di_error_message());
        return started < 0 ? 1 : status;
    }
    DiServeText *text = NULL;
    DiEngineBackend *eb = open_backend(model && *model ? model : NULL, served_name, context_limit, &ef, &text);
    if (!eb) {
        fprintf(stderr, "deepinfer serve: %s\n", di_error_message());
        cli_eplb_stop(&ef.eplb);
        cli_ep_finish(&ef.ep, 1);
        free(cluster_key);
        return 1;
    }
    if (ef.eplb.live) {
        cfg.extra_metrics = cli_eplb_metrics;
        cfg.extra_metrics_user = &ef.eplb;
    }
    DiBackend backend = di_engine_backend_interface(eb);
    sigset_t set;
    cli_block_stop_signals(&set); /* threads started below inherit the mask */
    DiServer *srv = di_server_start(&cfg, &backend);
    if (!srv) {
        fprintf(stderr, "deepinfer serve: %s\n", di_error_message());
        di_engine_backend_destroy(eb);
        di_serve_text_close(text);
        cli_eplb_stop(&ef.eplb);
        cli_ep_finish(&ef.ep, 1);
        free(cluster_key);
        return 1;
    }
    fprintf(stderr, "deepinfer serve: listening on http://%s:%d (model %s, role %s)\n", cfg.host, di_server_port(srv),
            backend.model_name, di_server_role_name(cfg.role));
    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "deepinfer serve: %s, shutting down (grace %.0f s)\n", sig == SIGTERM ? "SIGTERM" : "SIGINT",
            cfg.shutdown_grace_s);
    di_server_stop(srv);
    di_engine_backend_destroy(eb);
    di_serve_text_close(text);
    cli_eplb_stop(&ef.eplb); /* after the engine, whose steps feed it */
    cli_ep_finish(&ef.ep, 0);
    free(cluster_key);
    return 0;
}
