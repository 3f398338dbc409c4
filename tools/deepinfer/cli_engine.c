/* cli_engine.c — see cli_engine.h.  The CLI is the top of the stack: it may use the recipe
 * layer (tokenizer, renderer, output parser, Engram map) and hand their results down to the
 * engine through its public options and text hooks; nothing below learns about the CLI. */
#include "cli_engine.h"

#include "base/env.h"
#include "base/error.h"
#include "base/file.h"
#include "base/json.h"
#include "base/mem.h"
#include "engine/engine.h"
#include "model/config.h"
#include "recipe/parse.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double cli_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- model directory and tokenizer ------------------------------------------------------ */

static int resolve_dir(CliModel *m, const char *opt) {
    const char *dir = opt && *opt ? opt : di_env_hf_model_dir();
    if (dir && *dir) {
        if (strlen(dir) >= sizeof m->dir) return di_errorf("model directory path too long: %s", dir);
        if (!di_file_exists(dir)) return di_errorf("%s: no such model directory", dir);
        strcpy(m->dir, dir);
        return 0;
    }
    m->builtin = true;
    if (di_builtin_model_dir(m->dir, sizeof m->dir) != 0) return di_error_wrap("built-in model");
    return 0;
}

/* The file's own added tokens when it has the V4 control tokens (a V4.1 checkpoint, the tiny
 * model), else the V4.1 table on top (a V3 tokenizer.json), as python/deepinfer/text.py does. */
static int load_tokenizer(CliModel *m) {
    char *path = di_path_join(m->dir, "tokenizer.json");
    if (!path) return -1;
    if (!di_file_exists(path)) {
        free(path);
        return 0;
    }
    DiTokenizer *tok = di_tokenizer_load_table(path, DI_ADDED_TABLE_AUTO);
    free(path);
    m->tok = tok;
    return tok ? 0 : -1;
}

/* ---- Engram map ------------------------------------------------------------------------- */

/* A map file: a bare JSON array of ids, or make-tiny's object {"token_map": [...]}. */
static int read_map_file(CliModel *m, const char *path) {
    json_t *root = di_json_load_file(path), *arr = root;
    if (!root) return di_error_wrap("--engram-map");
    int rc = 0;
    if (json_is_object(root)) rc = di_json_array(root, path, "token_map", true, &arr);
    size_t n = rc == 0 ? json_array_size(arr) : 0;
    if (rc == 0 && (!json_is_array(arr) || n == 0))
        rc = di_errorf("%s: expected a non-empty JSON array of compressed ids (or an object with \"token_map\")", path);
    if (rc == 0 && !(m->engram_map = di_malloc(n * sizeof *m->engram_map, "engram map"))) rc = -1;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            rc = di_errorf("%s: entry %zu is not a compressed id (a non-negative 32-bit integer)", path, i);
        else
            m->engram_map[i] = (int32_t)json_integer_value(v);
    }
    m->engram_map_len = (int64_t)n;
    json_decref(root);
    return rc;
}

/* Built from the tokenizer; the key count is the reference's checksum (it asserts it). */
static int map_from_tokenizer(CliModel *m, int64_t compressed_vocab) {
    int64_t keys = 0;
    if (di_tokenizer_engram_map(m->tok, &m->engram_map, &m->engram_map_len, &keys) != 0)
        return di_error_wrap("%s/tokenizer.json", m->dir);
    if (keys != compressed_vocab)
        return di_errorf("%s/tokenizer.json: %lld distinct Engram keys, config engram_compressed_vocab_size is %lld",
                         m->dir, (long long)keys, (long long)compressed_vocab);
    return 0;
}

/* §9.3 synthetic map cid[t] = t mod C, for synthetic checkpoints */
static int synthetic_map(CliModel *m, int64_t C, int64_t V) {
    if (C <= 0 || V <= 0) return di_errorf("%s: config has no engram_compressed_vocab_size", m->dir);
    if (!(m->engram_map = di_malloc((size_t)V * sizeof *m->engram_map, "engram map"))) return -1;
    for (int64_t t = 0; t < V; t++) m->engram_map[t] = (int32_t)(t % C);
    m->engram_map_len = V;
    return 0;
}

/* --engram-map FILE or synthetic, else DIR/engram_token_map.json (the engine reads it), else
 * built from DIR/tokenizer.json for a real checkpoint, else the engine's rule (synthetic for the
 * built-in model, an error naming the missing map otherwise).  Without the engine (the model
 * API, for_engine false) the file and the synthetic map are materialised here. */
static int setup_engram_map(CliModel *m, const char *opt, bool for_engine) {
    if (opt && strcmp(opt, "synthetic") != 0) return read_map_file(m, opt);
    DiModelConfig cfg;
    if (di_config_load(m->dir, &cfg) != 0) return -1; /* its message names the file */
    int64_t C = cfg.engram_compressed_vocab_size, V = cfg.vocab_size;
    bool engram = cfg.n_engram_layers > 0;
    di_config_free(&cfg);
    if (!engram) return 0;
    if (opt) return synthetic_map(m, C, V);
    char *file = di_path_join(m->dir, "engram_token_map.json");
    if (!file) return -1;
    bool has_file = di_file_exists(file);
    free(file);
    if (has_file && !for_engine) { /* the model API reads no file: read it here */
        char *path = di_path_join(m->dir, "engram_token_map.json");
        int rc = path ? read_map_file(m, path) : -1;
        free(path);
        return rc;
    }
    if (has_file) return 0; /* the engine reads it */
    if (m->builtin && !for_engine) return synthetic_map(m, C, V);
    if (m->builtin || !m->tok) return 0;
    return map_from_tokenizer(m, C);
}

/* ---- the engine with the tokenizer as its text hooks ------------------------------------ */

static int hook_encode(const void *ctx, const char *text, size_t len, int32_t **ids, size_t *n_ids) {
    return di_tokenizer_encode(ctx, text, len, ids, n_ids);
}

static const char *hook_token_bytes(const void *ctx, int32_t id, size_t *len) {
    return di_tokenizer_token_bytes(ctx, id, len);
}

static int hook_is_special(const void *ctx, int32_t id) { return di_tokenizer_is_added(ctx, id) == 1; }

/* cli_set_model_hook's hook for the next engine (expert parallelism, generate and serve). */
static DiModelHook model_hook;
static void *model_hook_ctx;

void cli_set_model_hook(DiModelHook hook, void *ctx) {
    model_hook = hook;
    model_hook_ctx = ctx;
}

static int open_engine(CliModel *m, const CliDraft *draft) {
    DiEngineOptions opts;
    di_engine_options_init(&opts);
    if (draft) {
        opts.draft_max = draft->max;
        opts.draft_schedule = draft->schedule;
    }
    opts.max_num_seqs = 1;           /* one conversation at a time */
    opts.enable_prefix_caching = 1; /* chat: a turn that extends the last one starts from its state */
    opts.engram_token_map = m->engram_map;
    opts.engram_token_map_len = m->engram_map_len;
    if (!(m->engine = di_engine_create_hooked(m->dir, &opts, model_hook, model_hook_ctx))) return -1;
    if (!m->tok) return 0; /* ids only (e.g. a golden checkpoint without tokenizer.json) */
    int32_t bos = di_tokenizer_special_id(m->tok, "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
    if (bos < 0) di_error_clear();
    DiTextHooks hooks = {.encode = hook_encode,
                         .token_bytes = hook_token_bytes,
                         .is_special = hook_is_special,
                         .ctx = m->tok,
                         .bos_id = bos};
    return di_engine_set_text_hooks(m->engine, &hooks);
}

int cli_model_open(CliModel *m, const char *model_opt, const char *engram_opt, bool want_engine, const CliDraft *draft) {
    memset(m, 0, sizeof *m);
    if (resolve_dir(m, model_opt) != 0 || load_tokenizer(m) != 0 || setup_engram_map(m, engram_opt, want_engine) != 0 ||
        (want_engine && open_engine(m, draft) != 0)) {
        cli_model_close(m);
        return -1;
    }
    return 0;
}

void cli_model_close(CliModel *m) {
    if (!m) return;
    di_engine_destroy(m->engine); /* before the tokenizer: its hooks point at it */
    di_tokenizer_free(m->tok);
    free(m->engram_map);
    memset(m, 0, sizeof *m);
}

int cli_print_engram_map(const char *path) {
    DiTokenizer *tok = di_tokenizer_load(path);
    int32_t *map = NULL;
    int64_t n = 0, keys = 0;
    if (!tok || di_tokenizer_engram_map(tok, &map, &n, &keys) != 0) {
        di_tokenizer_free(tok);
        return -1;
    }
    printf("{\"ids\": %lld, \"keys\": %lld, \"map\": [", (long long)n, (long long)keys);
    for (int64_t i = 0; i < n; i++) printf("%s%d", i ? "," : "", map[i]);
    printf("]}\n");
    free(map);
    di_tokenizer_free(tok);
    return 0;
}

/* ---- sampling flags --------------------------------------------------------------------- */

const char cli_sampling_help[] =
    "  --max-tokens N      tokens to generate at most\n"
    "  --temperature T     0 = greedy (default); > 0 samples from softmax(logits / T)\n"
    "  --top-k K           keep the K most likely tokens (0 = all, default)\n"
    "  --top-p P           keep the smallest set with probability >= P (default 1)\n"
    "  --min-p P           drop tokens below P times the top probability (default 0)\n"
    "  --seed S            sampler seed (default 0): same seed, same output\n"
    "  --ignore-eos 0|1    1: keep generating after the end-of-sentence token (default 0)\n";

int cli_parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_float(const char *s, double lo, double hi, float *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) return -1;
    *out = (float)v;
    return 0;
}

const char cli_draft_help[] =
    "  --draft-max N       speculative decoding: drafts per step and request at most, 0..16 (0 = off;\n"
    "                      default $DEEPINFER_USE_NEXTN_DECODE, else 5, for a model with a drafter)\n"
    "  --draft-schedule S  fixed (verify every draft) or confidence (the drafts the drafter is confident\n"
    "                      in; default $DEEPINFER_ENABLE_MTP_VARLEN, else confidence)\n";

int cli_draft_flag(const char *o, const char *v, CliDraft *d, int *bad) {
    long l = 0;
    if (strcmp(o, "--draft-max") == 0) {
        *bad = cli_parse_long(v, 0, DI_MAX_DRAFT, &l);
        d->max = (int)l;
    } else if (strcmp(o, "--draft-schedule") == 0) {
        *bad = strcmp(v, "fixed") != 0 && strcmp(v, "confidence") != 0;
        d->schedule = strcmp(v, "confidence") == 0;
    } else {
        return 0;
    }
    return 1;
}

int cli_sampling_flag(const char *o, const char *v, DiSamplingParams *p, int *bad) {
    long l = 0;
    if (strcmp(o, "--max-tokens") == 0) *bad = cli_parse_long(v, 1, 1L << 24, &l), p->max_tokens = (int)l;
    else if (strcmp(o, "--top-k") == 0) *bad = cli_parse_long(v, 0, 1L << 30, &l), p->top_k = (int)l;
    else if (strcmp(o, "--seed") == 0) *bad = cli_parse_long(v, 0, __LONG_MAX__, &l), p->seed = (uint64_t)l;
    else if (strcmp(o, "--ignore-eos") == 0) *bad = cli_parse_long(v, 0, 1, &l), p->ignore_eos = (int)l;
    else if (strcmp(o, "--temperature") == 0) *bad = parse_float(v, 0, 1e6, &p->temperature);
    else if (strcmp(o, "--top-p") == 0) *bad = parse_float(v, 1e-9, 1.0, &p->top_p);
    else if (strcmp(o, "--min-p") == 0) *bad = parse_float(v, 0, 1.0, &p->min_p);
    else return 0;
    return 1;
}

/* ---- rendering -------------------------------------------------------------------------- */

json_t *cli_message(const char *role, const char *content) {
    json_t *text = json_string(content);
    json_t *msg = text ? json_pack("{s:s,s:o}", "role", role, "content", text) : NULL;
    if (!text) di_errorf("%s text is not valid UTF-8", role);
    else if (!msg) di_errorf("out of memory");
    return msg;
}

int cli_render_ids(const DiTokenizer *tok, json_t *messages, bool thinking, int32_t **ids, size_t *n_ids) {
    if (!tok) return di_errorf("the model directory has no tokenizer.json: text and chat need it (use --prompt-ids)");
    json_t *req = json_pack("{s:s,s:O,s:s}", "encoding", "v41", "messages", messages, "thinking_mode",
                            thinking ? "thinking" : "chat");
    char *text = req ? json_dumps(req, JSON_COMPACT) : NULL, *result = NULL;
    json_decref(req);
    if (!text) return di_errorf("render: out of memory");
    int rc = di_render_json_ids(tok, text, strlen(text), 0, &result);
    free(text);
    json_t *root = rc == 0 ? di_json_load_buffer(result, strlen(result), "render result") : NULL;
    free(result);
    json_t *arr = NULL;
    rc = root ? di_json_array(root, "render result", "ids", true, &arr) : -1;
    size_t n = rc == 0 ? json_array_size(arr) : 0;
    if (rc == 0 && !(*ids = di_malloc((n ? n : 1) * sizeof **ids, "prompt ids"))) rc = -1;
    for (size_t i = 0; rc == 0 && i < n; i++) (*ids)[i] = (int32_t)json_integer_value(json_array_get(arr, i));
    if (rc == 0) *n_ids = n;
    json_decref(root);
    return rc == 0 ? 0 : di_error_wrap("rendering the conversation");
}

/* ---- output ----------------------------------------------------------------------------- */

static int print_event(void *ctx, DiParseEventKind kind, const char *text, size_t len) {
    (void)ctx;
    FILE *out = kind == DI_PARSE_EV_REASONING ? stderr : stdout;
    fwrite(text, 1, len, out);
    fflush(out);
    return 0;
}

int cli_printer_init(CliPrinter *p, bool ids, bool chat, bool thinking) {
    memset(p, 0, sizeof *p);
    p->ids = ids;
    p->chat = chat;
    if (!chat) return 0;
    DiParseOptions po;
    di_parse_options_default(&po);
    po.parse_tool_calls = false; /* no tools are offered */
    po.start = thinking ? DI_PARSE_START_REASONING : DI_PARSE_START_CONTENT;
    if (!(p->parser = di_stream_parser_new(&po))) return -1;
    return di_stream_parser_set_sink(p->parser, print_event, NULL);
}

void cli_printer_on_delta(void *user, const DiStreamDelta *d) {
    CliPrinter *p = user;
    if (p->ids) {
        for (int i = 0; i < d->n_new_tokens; i++) printf("%s%d", p->n_ids++ ? " " : "", d->new_token_ids[i]);
    } else if (p->parser) {
        if (d->new_text_len && di_stream_parser_feed(p->parser, d->new_text, d->new_text_len) != 0)
            fprintf(stderr, "deepinfer: output parser: %s\n", di_last_error());
    } else {
        fwrite(d->new_text, 1, d->new_text_len, stdout);
    }
    fflush(stdout);
}

int cli_printer_finish(CliPrinter *p, const char **reasoning, const char **content) {
    if (reasoning) *reasoning = NULL;
    if (content) *content = NULL;
    if (p->parser) {
        if (di_stream_parser_finish(p->parser) != 0) return di_error_wrap("output parser");
        const DiParsedMessage *msg = di_stream_parser_message(p->parser);
        if (reasoning) *reasoning = msg->reasoning.data ? msg->reasoning.data : "";
        if (content) *content = msg->content.data ? msg->content.data : "";
        if (msg->reasoning.len) fputc('\n', stderr);
    }
    putchar('\n');
    fflush(stdout);
    return 0;
}

void cli_printer_free(CliPrinter *p) {
    if (p && p->parser) di_stream_parser_free(p->parser);
    if (p) p->parser = NULL;
}

void cli_sampling_defaults(DiSamplingParams *p, int max_tokens) {
    di_sampling_params_init(p);
    p->temperature = 0;
    p->max_tokens = max_tokens;
    p->has_seed = 1;
}

void cli_block_stop_signals(sigset_t *set) {
    sigemptyset(set);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGINT);
    pthread_sigmask(SIG_BLOCK, set, NULL);
    signal(SIGPIPE, SIG_IGN);
}
