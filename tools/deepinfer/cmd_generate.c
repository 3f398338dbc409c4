/* cmd_generate.c — `deepinfer generate`: token-id generation with the V4.1 forward pass.
 *
 *   deepinfer generate [--model DIR] --prompt-ids 1,2,3 [--max-tokens N] [--temperature T]
 *                      [--top-k K] [--top-p P] [--seed S] [--mode ref|kvq|exact]
 *                      [--engram-map FILE|synthetic]
 *
 * Prefills the prompt in one forward, then decodes one token per forward with the request state
 * (model/state.h), printing each id to stdout as it is produced and a summary to stderr.  The
 * sampler is a simple local one (temperature, top-k, top-p, seeded); the engine's sampler
 * replaces it for serving.  Text prompts (--prompt) need the tokenizer and are not handled here.
 *
 * Engram compressed-token map (§5.2 a): derived from the tokenizer, so it comes from outside the
 * model: --engram-map FILE (a JSON array of ids, one per token), else DIR/engram_token_map.json,
 * else built from DIR/tokenizer.json (its key count must equal engram_compressed_vocab_size), else
 * — only for the built-in synthetic tiny model or with --engram-map synthetic — the §9.3
 * synthetic map cid[t] = t mod engram_compressed_vocab_size.  A real checkpoint without a map is
 * an error rather than a silently wrong Engram. */
#include "commands.h"

#include "base/error.h"
#include "base/file.h"
#include "base/json.h"
#include "base/mem.h"
#include "base/threadpool.h"
#include "deepinfer.h"
#include "model/forward.h"
#include "model/engram_map_file.h"
#include "model/model.h"
#include "model/state.h"

#include <errno.h>
#include <utf8proc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    const char *model_dir, *prompt_ids, *engram_map, *mode, *print_map;
    long max_tokens, top_k;
    double temperature, top_p;
    unsigned long long seed;
} GenerateArgs;

static void usage(FILE *out) {
    fprintf(out,
            "usage: deepinfer generate [--model DIR] --prompt-ids 1,2,3 [options]\n"
            "  --model DIR         checkpoint directory (default: $DEEPINFER_HF_MODEL_DIR, else the built-in\n"
            "                      tiny model, generated on first use)\n"
            "  --prompt-ids LIST   comma-separated prompt token ids\n"
            "  --max-tokens N      tokens to generate (default 16; stops early at eos_token_id)\n"
            "  --temperature T     0 = greedy (default); > 0 samples from softmax(logits / T)\n"
            "  --top-k K           keep the K most likely tokens (0 = all, default)\n"
            "  --top-p P           keep the smallest set with probability >= P (default 1)\n"
            "  --seed S            sampler seed (default 0)\n"
            "  --mode M            numerics: ref (default, the reference's quantisation points), kvq, exact\n"
            "  --engram-map F      Engram compressed-token map: JSON array file, or 'synthetic' (t mod C);\n"
            "                      default DIR/engram_token_map.json, else built from DIR/tokenizer.json\n"
            "  --print-engram-map TOKENIZER_JSON   print the map built from a tokenizer as JSON and exit\n"
            "Token ids go to stdout as they are produced; a summary (tokens, tokens/s) to stderr.\n");
}

static int parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_double(const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) return -1;
    *out = v;
    return 0;
}

/* 0 ok, 1 --help, 2 usage error (message printed) */
static int parse_args(int argc, char **argv, GenerateArgs *a) {
    memset(a, 0, sizeof *a);
    a->max_tokens = 16;
    a->top_p = 1.0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long l;
        if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) return 1;
        if (!v || strncmp(o, "--", 2) != 0) {
            fprintf(stderr, "deepinfer generate: %s '%s'\n", v ? "unexpected argument" : "missing value for", o);
            return 2;
        }
        i++;
        int bad = 0;
        if (strcmp(o, "--model") == 0) a->model_dir = v;
        else if (strcmp(o, "--prompt-ids") == 0) a->prompt_ids = v;
        else if (strcmp(o, "--engram-map") == 0) a->engram_map = v;
        else if (strcmp(o, "--print-engram-map") == 0) a->print_map = v;
        else if (strcmp(o, "--mode") == 0) a->mode = v;
        else if (strcmp(o, "--max-tokens") == 0) bad = parse_long(v, 0, 1L << 20, &a->max_tokens);
        else if (strcmp(o, "--top-k") == 0) bad = parse_long(v, 0, 1L << 30, &a->top_k);
        else if (strcmp(o, "--temperature") == 0) bad = parse_double(v, 0, 1e6, &a->temperature);
        else if (strcmp(o, "--top-p") == 0) bad = parse_double(v, 1e-9, 1.0, &a->top_p);
        else if (strcmp(o, "--seed") == 0) bad = parse_long(v, 0, __LONG_MAX__, &l), a->seed = (unsigned long long)l;
        else if (strcmp(o, "--prompt") == 0 || strcmp(o, "--chat") == 0) {
            fprintf(stderr, "deepinfer generate: %s needs the tokenizer and is not available yet; use --prompt-ids\n", o);
            return 2;
        } else {
            fprintf(stderr, "deepinfer generate: unknown option '%s'\n", o);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "deepinfer generate: invalid value '%s' for %s\n", v, o);
            return 2;
        }
    }
    if (!a->prompt_ids && !a->print_map) {
        fprintf(stderr, "deepinfer generate: --prompt-ids is required\n");
        return 2;
    }
    return 0;
}

static int parse_ids(const char *s, int32_t **out, int64_t *n) {
    int64_t cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    int32_t *ids = di_malloc((size_t)cap * sizeof *ids, "prompt ids");
    if (!ids) return -1;
    int64_t k = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            free(ids);
            return di_errorf("--prompt-ids: '%s' is not a comma-separated list of token ids", s);
        }
        ids[k++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (k == 0) {
        free(ids);
        return di_errorf("--prompt-ids: empty prompt");
    }
    *out = ids;
    *n = k;
    return 0;
}

/* ---- Engram compressed-token map from the tokenizer (§5.2 a; REF-ENG build_compressed_token_map).
 * For every id in order: decode it alone (special tokens kept); text with U+FFFD or invalid UTF-8
 * (a partial byte token) keys by its raw token spelling; otherwise by the normalised text
 * NFKC -> NFD -> drop combining marks (Mn) -> lowercase -> runs of [ \t\r\n] to one space -> a
 * lone space is kept (sentinel) -> strip surrounding whitespace; empty -> the un-normalised text.
 * Keys get ids 0, 1, ... in order of first appearance.
 * This belongs in src/recipe (the engine and server need it too); it lives here until it moves. */

/* Python str.isspace() for the code points strip() removes */
static bool py_space(utf8proc_int32_t c) {
    if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) || c == 0x85 || c == 0xA0) return true;
    utf8proc_category_t cat = utf8proc_category(c);
    return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

/* The map key of one decoded token (heap string); NULL with an error. */
static char *engram_key(const char *text, size_t len) {
    utf8proc_uint8_t *nfkc = utf8proc_NFKC((const utf8proc_uint8_t *)text);
    utf8proc_uint8_t *nfd = nfkc ? utf8proc_NFD(nfkc) : NULL;
    free(nfkc);
    if (!nfd) {
        di_errorf("engram map: normalisation failed");
        return NULL;
    }
    size_t n = strlen((const char *)nfd);
    utf8proc_int32_t *cps = malloc((n + 1) * sizeof *cps);
    char *out = malloc(n * 4 + 8);
    if (!cps || !out) {
        free(nfd), free(cps), free(out);
        di_errorf("engram map: out of memory");
        return NULL;
    }
    size_t k = 0;
    bool in_ws = false;
    for (utf8proc_ssize_t i = 0; i < (utf8proc_ssize_t)n;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t step = utf8proc_iterate(nfd + i, (utf8proc_ssize_t)n - i, &c);
        if (step <= 0) break;
        i += step;
        if (utf8proc_category(c) == UTF8PROC_CATEGORY_MN) continue; /* strip accents */
        c = utf8proc_tolower(c);
        bool ws = c == ' ' || c == '\t' || c == '\r' || c == '\n';
        if (ws && in_ws) continue;
        cps[k++] = ws ? ' ' : c;
        in_ws = ws;
    }
    free(nfd);
    size_t lo = 0, hi = k;
    if (!(k == 1 && cps[0] == ' ')) { /* a lone space survives the strip (the U+E000 sentinel) */
        while (lo < hi && py_space(cps[lo])) lo++;
        while (hi > lo && py_space(cps[hi - 1])) hi--;
    }
    size_t o = 0;
    for (size_t i = lo; i < hi; i++) o += (size_t)utf8proc_encode_char(cps[i], (utf8proc_uint8_t *)out + o);
    if (o == 0) { /* empty after normalisation: the text itself */
        memcpy(out, text, len);
        o = len;
    }
    out[o] = 0;
    free(cps);
    return out;
}

static bool valid_utf8_without_fffd(const char *s, size_t len) {
    for (utf8proc_ssize_t i = 0; i < (utf8proc_ssize_t)len;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t step = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)len - i, &c);
        if (step <= 0 || c == 0xFFFD) return false;
        i += step;
    }
    return true;
}

typedef struct {
    char *key;
    int32_t id;
} KeyId;

static int by_key_then_id(const void *a, const void *b) {
    const KeyId *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->id > y->id) - (x->id < y->id);
}

/* cid[t] for every id of the tokenizer; *n_keys = number of distinct keys. */
static int build_engram_map(const DiTokenizer *tok, int32_t **out, int64_t *n_ids, int64_t *n_keys) {
    size_t V = di_tokenizer_vocab_size(tok);
    KeyId *kv = di_calloc(V, sizeof *kv, "engram map keys");
    int32_t *first = di_malloc(V * sizeof *first, "engram map"), *cid = di_malloc(V * sizeof *cid, "engram map");
    int rc = -1;
    if (!kv || !first || !cid) goto done;
    for (size_t t = 0; t < V; t++) {
        int32_t id = (int32_t)t;
        char *text = NULL;
        size_t len = 0;
        kv[t].id = id;
        if (di_tokenizer_decode(tok, &id, 1, &text, &len) != 0) {
            /* an id with no token decodes to nothing, like the reference's decode */
            di_error_clear();
            text = di_strdup("");
        }
        if (!text) goto done;
        if (!valid_utf8_without_fffd(text, len)) {
            const char *raw = di_tokenizer_id_to_token(tok, id);
            kv[t].key = di_strdup(raw ? raw : "");
        } else {
            kv[t].key = engram_key(text, len);
        }
        free(text);
        if (!kv[t].key) goto done;
    }
    /* group equal keys; each group's id is the rank of its first occurrence */
    qsort(kv, V, sizeof *kv, by_key_then_id);
    for (size_t i = 0; i < V; i++) first[kv[i].id] = (i > 0 && strcmp(kv[i].key, kv[i - 1].key) == 0) ? first[kv[i - 1].id] : kv[i].id;
    int64_t next = 0;
    for (size_t t = 0; t < V; t++) cid[t] = first[t] == (int32_t)t ? (int32_t)next++ : cid[first[t]];
    *out = cid;
    cid = NULL;
    *n_ids = (int64_t)V;
    *n_keys = next;
    rc = 0;
done:
    if (kv)
        for (size_t i = 0; i < V; i++) free(kv[i].key);
    free(kv);
    free(first);
    free(cid);
    return rc;
}

/* --print-engram-map: the map of a tokenizer as one JSON line {"ids": n, "keys": k, "map": [...]} */
static int print_engram_map(const char *path) {
    DiTokenizer *tok = di_tokenizer_load(path);
    int32_t *map = NULL;
    int64_t n = 0, keys = 0;
    if (!tok || build_engram_map(tok, &map, &n, &keys) != 0) {
        fprintf(stderr, "deepinfer generate: %s\n", di_last_error());
        di_tokenizer_free(tok);
        return 1;
    }
    printf("{\"ids\": %lld, \"keys\": %lld, \"map\": [", (long long)n, (long long)keys);
    for (int64_t i = 0; i < n; i++) printf("%s%d", i ? "," : "", map[i]);
    printf("]}\n");
    free(map);
    di_tokenizer_free(tok);
    return 0;
}

static int map_from_tokenizer(Model *m, const char *path) {
    DiTokenizer *tok = di_tokenizer_load(path);
    if (!tok) return -1;
    int32_t *map = NULL;
    int64_t n = 0, keys = 0;
    int rc = build_engram_map(tok, &map, &n, &keys);
    di_tokenizer_free(tok);
    if (rc != 0) return -1;
    /* the key count is the reference's checksum (it asserts it) */
    if (keys != m->d.engram_compressed_vocab)
        rc = di_errorf("%s: %lld distinct Engram keys, config engram_compressed_vocab_size is %d", path, (long long)keys,
                       m->d.engram_compressed_vocab);
    else if (n < m->d.vocab)
        rc = di_errorf("%s: %lld token ids, vocabulary is %d", path, (long long)n, m->d.vocab);
    else
        rc = model_set_engram_token_map(m, map, n);
    free(map);
    return rc;
}

static int setup_engram_map(Model *m, const char *dir, const char *opt, bool builtin) {
    if (m->d.n_engram == 0) return 0;
    if (opt && strcmp(opt, "synthetic") != 0) return model_load_engram_token_map_file(m, opt);
    char *file = di_path_join(dir, "engram_token_map.json");
    if (!file) return -1;
    if (!opt && di_file_exists(file)) {
        int rc = model_load_engram_token_map_file(m, file);
        free(file);
        return rc;
    }
    free(file);
    char *tokjson = di_path_join(dir, "tokenizer.json");
    if (!tokjson) return -1;
    if (!opt && !builtin && di_file_exists(tokjson)) {
        int rc = map_from_tokenizer(m, tokjson);
        free(tokjson);
        return rc;
    }
    free(tokjson);
    if (!opt && !builtin)
        return di_errorf("%s: model has Engram layers but no compressed-token map (engram_token_map.json or --engram-map; "
                         "'--engram-map synthetic' for synthetic checkpoints)", dir);
    /* §9.3 synthetic map: cid[t] = t mod C */
    int32_t *map = di_malloc((size_t)m->d.vocab * sizeof *map, "engram map");
    if (!map) return -1;
    for (int t = 0; t < m->d.vocab; t++) map[t] = t % m->d.engram_compressed_vocab;
    int rc = model_set_engram_token_map(m, map, m->d.vocab);
    free(map);
    return rc;
}

/* splitmix64 -> uniform [0, 1) */
static double next_uniform(unsigned long long *s) {
    unsigned long long z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

typedef struct {
    float p;
    int32_t id;
} Cand;

static int by_prob_desc(const void *a, const void *b) {
    const Cand *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int32_t sample(const float *logits, int64_t V, const GenerateArgs *a, Cand *buf, unsigned long long *rng) {
    int32_t best = 0;
    for (int64_t v = 1; v < V; v++)
        if (logits[v] > logits[best]) best = (int32_t)v;
    if (a->temperature <= 0) return best;
    double sum = 0;
    for (int64_t v = 0; v < V; v++) {
        buf[v] = (Cand){(float)exp((logits[v] - logits[best]) / a->temperature), (int32_t)v};
        sum += buf[v].p;
    }
    qsort(buf, (size_t)V, sizeof *buf, by_prob_desc);
    int64_t keep = a->top_k > 0 && a->top_k < V ? a->top_k : V;
    double acc = 0;
    for (int64_t i = 0; i < keep; i++) {
        acc += buf[i].p / sum;
        if (acc >= a->top_p) {
            keep = i + 1;
            break;
        }
    }
    double total = 0;
    for (int64_t i = 0; i < keep; i++) total += buf[i].p;
    double r = next_uniform(rng) * total;
    for (int64_t i = 0; i < keep; i++) {
        r -= buf[i].p;
        if (r < 0) return buf[i].id;
    }
    return buf[keep - 1].id;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int cmd_generate(int argc, char **argv) {
    GenerateArgs a;
    int pr = parse_args(argc, argv, &a);
    if (pr == 1) {
        usage(stdout);
        return 0;
    }
    if (pr) {
        usage(stderr);
        return 2;
    }
    if (a.print_map) return print_engram_map(a.print_map);
    NumericsMode mode = MODE_REF;
    if (a.mode && numerics_mode_parse(a.mode, &mode) != 0) {
        fprintf(stderr, "deepinfer generate: %s\n", di_error_message());
        return 2;
    }
    int32_t *prompt = NULL;
    int64_t n_prompt = 0;
    if (parse_ids(a.prompt_ids, &prompt, &n_prompt) != 0) {
        fprintf(stderr, "deepinfer generate: %s\n", di_error_message());
        return 2;
    }
    char builtin[4096];
    const char *dir = a.model_dir;
    bool is_builtin = false;
    if (!dir) dir = getenv("DEEPINFER_HF_MODEL_DIR");
    if (!dir || !*dir) {
        if (di_builtin_model_dir(builtin, sizeof builtin) != 0) {
            fprintf(stderr, "deepinfer generate: built-in model: %s\n", di_last_error());
            free(prompt);
            return 1;
        }
        dir = builtin;
        is_builtin = true;
    }
    int rc = 1;
    Model *m = model_load(dir, mode);
    RunState *st = NULL;
    float *logits = NULL;
    Cand *cand = NULL;
    if (!m || setup_engram_map(m, dir, a.engram_map, is_builtin) != 0) goto fail;
    m->pool = di_pool_create(0);
    st = state_create(&m->d);
    logits = di_malloc((size_t)m->d.vocab * sizeof *logits, "logits");
    cand = di_malloc((size_t)m->d.vocab * sizeof *cand, "sampler");
    if (!m->pool || !st || !logits || !cand) goto fail;
    for (int64_t i = 0; i < n_prompt; i++)
        if (prompt[i] >= m->d.vocab) {
            di_errorf("--prompt-ids: token %d outside the vocabulary [0, %d)", prompt[i], m->d.vocab);
            goto fail;
        }
    unsigned long long rng = a.seed;
    double t0 = now_s();
    if (model_forward(m, st, prompt, n_prompt, 0, logits, false, NULL) != 0) goto fail;
    double t1 = now_s();
    long produced = 0;
    for (long k = 0; k < a.max_tokens; k++) {
        int32_t tok = sample(logits, m->d.vocab, &a, cand, &rng);
        printf("%s%d", k ? " " : "", tok);
        fflush(stdout);
        produced++;
        if (tok == m->cfg.eos_token_id || k + 1 == a.max_tokens) break;
        if (model_forward(m, st, &tok, 1, st->n_pos, logits, false, NULL) != 0) goto fail;
    }
    double t2 = now_s();
    printf("\n");
    fprintf(stderr, "generate: prompt %lld tokens in %.3f s; generated %ld tokens in %.3f s (%.2f tokens/s); mode %s\n",
            (long long)n_prompt, t1 - t0, produced, t2 - t1, (t2 - t1) > 0 ? produced / (t2 - t1) : 0.0, numerics_mode_name(mode));
    rc = 0;
fail:
    if (rc) fprintf(stderr, "deepinfer generate: %s\n", di_error_message());
    if (m && m->pool) di_pool_destroy(m->pool);
    free(prompt);
    free(logits);
    free(cand);
    state_free(st);
    model_free(m);
    return rc;
}
