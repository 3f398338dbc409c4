/* tokenizer.c — loading a DeepSeek tokenizer.json, id/spelling lookups, plain and parallel
 * encoding, the prompt-segment hand-off, and whole-sequence decoding (recipe.md §1, §5).
 *
 * Loading checks that the file is the byte-level BPE with the DeepSeek three-stage Split
 * pre-tokenizer this code implements; anything else (another pre-tokenizer, a normalizer,
 * BPE dropout, byte fallback, lstrip/rstrip added tokens) is refused with the field named,
 * because encoding it differently from Hugging Face would be a silent wrong answer. */
#include "recipe/tokenizer.h"

#include "base/error.h"
#include "base/file.h"
#include "base/json.h"
#include "base/mem.h"
#include "base/threadpool.h"
#include "recipe/pretok.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* The pre-tokenizer patterns this code implements, as regex text (recipe.md §1.1). */
static const char *const PATTERN_A = "\\p{N}{1,3}";
static const char *const PATTERN_B = "[\xE4\xB8\x80-\xE9\xBE\xA5\xE3\x81\x80-\xE3\x82\x9F\xE3\x82\xA0-\xE3\x83\xBF]+";
static const char *const PATTERN_C =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";

/* Texts below this size are not worth cutting for the thread pool. */
#define PARALLEL_MIN_BYTES (64 * 1024)
/* Texts below this size encode without the piece cache (clearing it would cost more). */
#define CACHE_MIN_BYTES 4096

/* ---- GPT-2 byte <-> char mapping (recipe.md §1.2 step 2) ----------------------------- */

/* Bytes 0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF stand for themselves; the other 68 take U+0100..
 * U+0143 in increasing byte order. */
static void byte_level_tables(uint32_t byte_to_cp[256], int16_t cp_to_byte[0x144]) {
    for (int i = 0; i < 0x144; i++) cp_to_byte[i] = -1;
    uint32_t next = 0x100;
    for (int b = 0; b < 256; b++) {
        bool self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        byte_to_cp[b] = self ? (uint32_t)b : next++;
        cp_to_byte[byte_to_cp[b]] = (int16_t)b;
    }
}

static size_t put_utf8(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6)); /* the table only has code points below U+0800 */
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* Bytes of a vocab string: each char through the inverse table; a string with a char
 * outside the table is taken as its own UTF-8 (only ids 0-2 in DeepSeek files). */
static size_t vocab_string_bytes(const char *s, size_t n, const int16_t cp_to_byte[0x144], uint8_t *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = di_utf8_seq_len((const uint8_t *)s + i, n - i);
        uint32_t cp = 0;
        if (k == 2) cp = ((uint32_t)(s[i] & 0x1F) << 6) | (s[i + 1] & 0x3F);
        else if (k == 1) cp = (uint8_t)s[i];
        if (k == 0 || k > 2 || cp >= 0x144 || cp_to_byte[cp] < 0) {
            memcpy(out, s, n);
            return n;
        }
        out[o++] = (uint8_t)cp_to_byte[cp];
        i += k;
    }
    return o;
}

/* ---- spelling -> id map ------------------------------------------------------------- */

static const char *spelling_of(const DiTokenizer *tok, int32_t id, size_t *len) {
    uint32_t a = tok->spell_off[id], b = tok->spell_off[id + 1];
    *len = b - a - 1; /* minus the NUL */
    return tok->spell + a;
}

/* The slot holding `spelling`, or the empty slot where it would go. */
static size_t map_find(const DiTokenizer *tok, const char *s, size_t n) {
    size_t i = (size_t)XXH3_64bits(s, n) & tok->map_mask;
    for (;;) {
        uint32_t v = tok->map[i];
        if (v == 0) return i;
        size_t len;
        const char *t = spelling_of(tok, (int32_t)(v - 1), &len);
        if (len == n && memcmp(t, s, n) == 0) return i;
        i = (i + 1) & tok->map_mask;
    }
}

static int32_t lookup_spelling(const DiTokenizer *tok, const char *s, size_t n) {
    uint32_t v = tok->map[map_find(tok, s, n)];
    return v ? (int32_t)(v - 1) : -1;
}

/* ---- loading: checks of the pipeline ------------------------------------------------ */

static int expect_string(const json_t *obj, const char *ctx, const char *key, const char *want) {
    const char *got = NULL;
    if (di_json_string(obj, ctx, key, true, &got) != 0) return -1;
    if (strcmp(got, want) != 0)
        return di_errorf("%s.%s: \"%s\" is not supported (expected \"%s\")", ctx, key, got, want);
    return 0;
}

static int expect_bool(const json_t *obj, const char *ctx, const char *key, bool want) {
    bool got = want;
    if (di_json_bool(obj, ctx, key, false, &got) < 0) return -1;
    if (got != want) return di_errorf("%s.%s: %s is not supported", ctx, key, got ? "true" : "false");
    return 0;
}

/* A field that must be absent, null or "" (options this BPE does not implement). */
static int expect_unset(const json_t *obj, const char *ctx, const char *key) {
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v) || (json_is_string(v) && json_string_length(v) == 0)) return 0;
    return di_errorf("%s.%s: must be null (%s is not supported)", ctx, key, di_json_type_name(v));
}

static int check_split(const json_t *arr, size_t i, const char *pattern) {
    char ctx[64];
    snprintf(ctx, sizeof ctx, "pre_tokenizer.pretokenizers[%zu]", i);
    const json_t *split = json_array_get(arr, i);
    json_t *pat = NULL;
    const char *regex = NULL;
    if (expect_string(split, ctx, "type", "Split") != 0 || expect_string(split, ctx, "behavior", "Isolated") != 0 ||
        expect_bool(split, ctx, "invert", false) != 0 || di_json_object(split, ctx, "pattern", true, &pat) != 0)
        return -1;
    strncat(ctx, ".pattern", sizeof ctx - strlen(ctx) - 1);
    if (di_json_string(pat, ctx, "Regex", true, &regex) != 0) return -1;
    if (strcmp(regex, pattern) != 0)
        return di_errorf("%s.Regex: not the DeepSeek V3/V4 pattern (only that pre-tokenizer is implemented)", ctx);
    return 0;
}

static int check_pipeline(const json_t *root) {
    json_t *norm = json_object_get(root, "normalizer");
    if (norm && !json_is_null(norm)) {
        json_t *list = NULL;
        if (expect_string(norm, "normalizer", "type", "Sequence") != 0 ||
            di_json_array(norm, "normalizer", "normalizers", true, &list) != 0)
            return -1;
        if (json_array_size(list) != 0) return di_errorf("normalizer.normalizers: normalizers are not supported");
    }
    json_t *pre = NULL, *list = NULL;
    if (di_json_object(root, "", "pre_tokenizer", true, &pre) != 0 ||
        expect_string(pre, "pre_tokenizer", "type", "Sequence") != 0 ||
        di_json_array(pre, "pre_tokenizer", "pretokenizers", true, &list) != 0)
        return -1;
    if (json_array_size(list) != 4)
        return di_errorf("pre_tokenizer.pretokenizers: expected the 4 stages of the DeepSeek V3/V4 "
                         "pre-tokenizer, got %zu", json_array_size(list));
    if (check_split(list, 0, PATTERN_A) != 0 || check_split(list, 1, PATTERN_B) != 0 ||
        check_split(list, 2, PATTERN_C) != 0)
        return -1;
    const json_t *bl = json_array_get(list, 3);
    const char *ctx = "pre_tokenizer.pretokenizers[3]";
    if (expect_string(bl, ctx, "type", "ByteLevel") != 0 || expect_bool(bl, ctx, "add_prefix_space", false) != 0 ||
        expect_bool(bl, ctx, "use_regex", false) != 0)
        return -1;
    json_t *dec = json_object_get(root, "decoder");
    if (dec && !json_is_null(dec) && expect_string(dec, "decoder", "type", "ByteLevel") != 0) return -1;
    /* post_processor is ignored on purpose: BOS is never added implicitly (recipe.md §1.1). */
    return 0;
}

static int check_model(const json_t *model) {
    const char *type = NULL;
    if (di_json_string(model, "model", "type", false, &type) < 0) return -1;
    if (type && strcmp(type, "BPE") != 0) return di_errorf("model.type: \"%s\" is not supported (expected \"BPE\")", type);
    if (expect_unset(model, "model", "dropout") != 0 || expect_unset(model, "model", "continuing_subword_prefix") != 0 ||
        expect_unset(model, "model", "end_of_word_suffix") != 0 || expect_bool(model, "model", "byte_fallback", false) != 0 ||
        expect_bool(model, "model", "ignore_merges", false) != 0)
        return -1;
    return 0;
}

static int read_added_tokens(const json_t *root, DiAddedToken **out, size_t *n_out) {
    json_t *arr = NULL;
    *out = NULL;
    *n_out = 0;
    if (di_json_array(root, "", "added_tokens", false, &arr) < 0) return -1;
    size_t n = arr ? json_array_size(arr) : 0;
    if (n == 0) return 0;
    DiAddedToken *list = di_calloc(n, sizeof *list, "added tokens");
    if (!list) return -1;
    for (size_t i = 0; i < n; i++) {
        char ctx[48];
        snprintf(ctx, sizeof ctx, "added_tokens[%zu]", i);
        const json_t *t = json_array_get(arr, i);
        int64_t id = 0;
        const char *content = NULL;
        bool special = false, normalized = false;
        if (di_json_int(t, ctx, "id", true, &id) != 0 || di_json_string(t, ctx, "content", true, &content) != 0 ||
            di_json_bool(t, ctx, "special", false, &special) < 0 || di_json_bool(t, ctx, "normalized", false, &normalized) < 0 ||
            expect_bool(t, ctx, "lstrip", false) != 0 || expect_bool(t, ctx, "rstrip", false) != 0 ||
            expect_bool(t, ctx, "single_word", false) != 0)
            goto fail;
        if (id < 0 || id >= INT32_MAX) {
            di_errorf("%s.id: %lld is out of range", ctx, (long long)id);
            goto fail;
        }
        if (content[0] == '\0') {
            di_errorf("%s.content: empty", ctx);
            goto fail;
        }
        list[i] = (DiAddedToken){(int32_t)id, di_strdup(content), special, normalized};
        *n_out = i + 1;
        if (!list[i].content) goto fail;
    }
    *out = list;
    return 0;
fail:
    di_added_list_free(list, *n_out);
    *n_out = 0;
    return -1;
}

/* ---- loading: building the tables --------------------------------------------------- */

typedef struct {
    const char *s; /* borrowed from the JSON or the added-token list */
    size_t len;
    uint8_t kind;
} IdEntry;

static int collect_ids(const json_t *vocab, const DiAddedToken *added, size_t n_added, IdEntry **out, size_t *n_ids) {
    int64_t max_id = -1;
    const char *key;
    const json_t *value;
    json_object_foreach((json_t *)vocab, key, value) {
        if (!json_is_integer(value))
            return di_errorf("model.vocab[\"%s\"]: expected an integer, got %s", key, di_json_type_name(value));
        json_int_t id = json_integer_value(value);
        if (id < 0 || id >= INT32_MAX) return di_errorf("model.vocab[\"%s\"]: id %lld is out of range", key, (long long)id);
        if (id > max_id) max_id = id;
    }
    for (size_t i = 0; i < n_added; i++)
        if (added[i].id > max_id) max_id = added[i].id;
    if (max_id < 0) return di_errorf("model.vocab: empty");
    IdEntry *e = di_calloc((size_t)max_id + 1, sizeof *e, "token table");
    if (!e) return -1;
    json_object_foreach((json_t *)vocab, key, value) {
        json_int_t id = json_integer_value(value);
        if (e[id].s) {
            di_errorf("model.vocab: id %lld is used by \"%s\" and \"%s\"", (long long)id, e[id].s, key);
            free(e);
            return -1;
        }
        e[id] = (IdEntry){key, strlen(key), DI_TOK_VOCAB};
    }
    for (size_t i = 0; i < n_added; i++) { /* an added token wins its id, as in HF id_to_token */
        const DiAddedToken *t = &added[i];
        e[t->id] = (IdEntry){t->content, strlen(t->content), DI_TOK_ADDED};
    }
    *out = e;
    *n_ids = (size_t)max_id + 1;
    return 0;
}

static int build_strings(DiTokenizer *tok, const IdEntry *e) {
    uint32_t byte_to_cp[256];
    int16_t cp_to_byte[0x144];
    byte_level_tables(byte_to_cp, cp_to_byte);
    size_t total = 0;
    for (size_t id = 0; id < tok->n_ids; id++) total += e[id].len + 1;
    if (total >= UINT32_MAX) return di_errorf("token table too large");
    tok->spell_off = di_calloc(tok->n_ids + 1, sizeof *tok->spell_off, "token spellings");
    tok->bytes_off = di_calloc(tok->n_ids + 1, sizeof *tok->bytes_off, "token bytes");
    tok->kind = di_calloc(tok->n_ids, 1, "token kinds");
    tok->spell = di_malloc(total, "token spellings");
    tok->bytes = di_malloc(total, "token bytes"); /* decoded bytes are never longer */
    if (!tok->spell_off || !tok->bytes_off || !tok->kind || !tok->spell || !tok->bytes) return -1;
    size_t so = 0, bo = 0;
    for (size_t id = 0; id < tok->n_ids; id++) {
        tok->spell_off[id] = (uint32_t)so;
        tok->bytes_off[id] = (uint32_t)bo;
        tok->kind[id] = e[id].kind;
        if (e[id].len) memcpy(tok->spell + so, e[id].s, e[id].len);
        so += e[id].len;
        tok->spell[so++] = '\0';
        if (e[id].kind == DI_TOK_VOCAB) {
            bo += vocab_string_bytes(e[id].s, e[id].len, cp_to_byte, tok->bytes + bo);
        } else if (e[id].kind == DI_TOK_ADDED) {
            memcpy(tok->bytes + bo, e[id].s, e[id].len);
            bo += e[id].len;
        }
    }
    tok->spell_off[tok->n_ids] = (uint32_t)so;
    tok->bytes_off[tok->n_ids] = (uint32_t)bo;
    return 0;
}

static int build_map(DiTokenizer *tok) {
    size_t cap = 1024;
    while (cap < 2 * tok->n_ids) cap *= 2;
    tok->map = di_calloc(cap, sizeof *tok->map, "token map");
    if (!tok->map) return -1;
    tok->map_mask = cap - 1;
    /* Vocab first, then added tokens, which win a shared spelling (HF token_to_id). */
    for (int pass = DI_TOK_VOCAB; pass <= DI_TOK_ADDED; pass++)
        for (size_t id = 0; id < tok->n_ids; id++) {
            if (tok->kind[id] != pass) continue;
            size_t len;
            const char *s = spelling_of(tok, (int32_t)id, &len);
            tok->map[map_find(tok, s, len)] = (uint32_t)id + 1;
        }
    return 0;
}

/* A vocab id by byte-level spelling (merges and byte tokens are vocab entries).  The
 * tokenizer's own map is faster than jansson's; it answers with the added token where one
 * shares the spelling, and then the vocab object decides. */
static int32_t vocab_id(const DiTokenizer *tok, const json_t *vocab, const char *s) {
    int32_t id = lookup_spelling(tok, s, strlen(s));
    if (id >= 0 && tok->kind[id] == DI_TOK_VOCAB) return id;
    const json_t *v = json_object_get(vocab, s);
    return v ? (int32_t)json_integer_value(v) : -1;
}

static int merge_parts(const json_t *m, size_t i, const char **left, const char **right, char *buf, size_t cap) {
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *left = json_string_value(json_array_get(m, 0));
        *right = json_string_value(json_array_get(m, 1));
        return 0;
    }
    if (!json_is_string(m)) return di_errorf("model.merges[%zu]: expected \"A B\" or [A, B]", i);
    const char *s = json_string_value(m), *sp = strchr(s, ' ');
    size_t len = strlen(s);
    if (!sp || sp == s || !sp[1] || strchr(sp + 1, ' ') || len >= cap)
        return di_errorf("model.merges[%zu]: \"%s\" is not two tokens separated by one space", i, s);
    memcpy(buf, s, len + 1);
    buf[sp - s] = '\0';
    *left = buf;
    *right = buf + (sp - s) + 1;
    return 0;
}

static int build_bpe(DiTokenizer *tok, const json_t *vocab, const json_t *merges) {
    uint32_t byte_to_cp[256];
    int16_t cp_to_byte[0x144];
    byte_level_tables(byte_to_cp, cp_to_byte);
    size_t n = json_array_size(merges);
    if (di_bpe_init(&tok->bpe, n) != 0) return -1;
    for (int b = 0; b < 256; b++) {
        char s[3] = {0};
        put_utf8(byte_to_cp[b], s);
        int32_t id = vocab_id(tok, vocab, s);
        if (id < 0) return di_errorf("model.vocab: byte 0x%02X (\"%s\") has no token; not a byte-level vocab", b, s);
        tok->bpe.byte_id[b] = id;
    }
    char buf[1024], joined[1024];
    for (size_t i = 0; i < n; i++) {
        const char *left = NULL, *right = NULL;
        if (merge_parts(json_array_get(merges, i), i, &left, &right, buf, sizeof buf) != 0) return -1;
        int32_t a = vocab_id(tok, vocab, left), b = vocab_id(tok, vocab, right);
        if (a < 0 || b < 0) return di_errorf("model.merges[%zu]: \"%s\" is not in the vocab", i, a < 0 ? left : right);
        int w = snprintf(joined, sizeof joined, "%s%s", left, right);
        int32_t r = (w > 0 && (size_t)w < sizeof joined) ? vocab_id(tok, vocab, joined) : -1;
        if (r < 0) return di_errorf("model.merges[%zu]: the merge result \"%s%s\" is not in the vocab", i, left, right);
        if (di_bpe_add_merge(&tok->bpe, a, b, r, (uint32_t)i) != 0) return -1;
    }
    return 0;
}

static int build_tries(DiTokenizer *tok, const DiAddedToken *added, size_t n_added) {
    for (size_t i = 0; i < n_added; i++) {
        DiTrie *trie = added[i].normalized ? &tok->trie_norm : &tok->trie_raw;
        if (di_trie_add(trie, added[i].content, strlen(added[i].content), added[i].id) != 0) return -1;
    }
    return 0;
}

static DiTokenizer *load_json(const json_t *root, DiAddedTable table) {
    json_t *model = NULL, *vocab = NULL, *merges = NULL;
    if (di_json_object(root, "", "model", true, &model) != 0 || check_model(model) != 0 ||
        di_json_object(model, "model", "vocab", true, &vocab) != 0 ||
        di_json_array(model, "model", "merges", true, &merges) != 0 || check_pipeline(root) != 0)
        return NULL;
    DiAddedToken *added = NULL;
    size_t n_added = 0;
    IdEntry *entries = NULL;
    DiTokenizer *tok = di_calloc(1, sizeof *tok, "tokenizer");
    if (!tok) return NULL;
    pthread_mutex_init(&tok->pool_lock, NULL);
    tok->parallel_min_bytes = PARALLEL_MIN_BYTES;
    if (read_added_tokens(root, &added, &n_added) != 0 || di_added_apply_table(&added, &n_added, table) != 0 ||
        collect_ids(vocab, added, n_added, &entries, &tok->n_ids) != 0 || build_strings(tok, entries) != 0 ||
        build_map(tok) != 0 || build_bpe(tok, vocab, merges) != 0 || build_tries(tok, added, n_added) != 0) {
        free(entries);
        di_added_list_free(added, n_added);
        di_tokenizer_free(tok);
        return NULL;
    }
    free(entries);
    di_added_list_free(added, n_added);
    return tok;
}

static int check_table(DiAddedTable table) {
    if (table != DI_ADDED_TABLE_FILE && table != DI_ADDED_TABLE_V4 && table != DI_ADDED_TABLE_V41 &&
        table != DI_ADDED_TABLE_AUTO)
        return di_errorf("tokenizer: unknown added-token table %d", (int)table);
    return 0;
}

DiTokenizer *di_tokenizer_load_table(const char *path, DiAddedTable table) {
    if (!path || !*path) {
        di_errorf("tokenizer: no path given");
        return NULL;
    }
    if (check_table(table) != 0) return NULL;
    /* One read and an in-memory parse: jansson's file reader goes a character at a time. */
    char *data = NULL;
    size_t size = 0;
    json_t *root = di_read_file(path, &data, &size) == 0 ? di_json_load_buffer(data, size, path) : NULL;
    free(data);
    if (!root) {
        di_error_wrap("loading tokenizer");
        return NULL;
    }
    DiTokenizer *tok = load_json(root, table);
    json_decref(root);
    if (!tok) di_error_wrap("loading tokenizer %s", path);
    return tok;
}

DiTokenizer *di_tokenizer_load(const char *path) { return di_tokenizer_load_table(path, DI_ADDED_TABLE_FILE); }

DiTokenizer *di_tokenizer_load_buffer(const char *json, size_t len, const char *what, DiAddedTable table) {
    if (check_table(table) != 0) return NULL;
    json_t *root = di_json_load_buffer(json, len, what ? what : "tokenizer.json");
    if (!root) return NULL;
    DiTokenizer *tok = load_json(root, table);
    json_decref(root);
    if (!tok) di_error_wrap("loading tokenizer %s", what ? what : "tokenizer.json");
    return tok;
}

void di_tokenizer_free(DiTokenizer *tok) {
    if (!tok) return;
    di_pool_destroy(tok->pool);
    pthread_mutex_destroy(&tok->pool_lock);
    free(tok->bytes_off);
    free(tok->bytes);
    free(tok->spell_off);
    free(tok->spell);
    free(tok->kind);
    free(tok->map);
    di_bpe_free(&tok->bpe);
    di_trie_free(&tok->trie_raw);
    di_trie_free(&tok->trie_norm);
    free(tok);
}

int di_tokenizer_set_threads(DiTokenizer *tok, int n_threads) {
    if (!tok) return di_errorf("tokenizer: NULL tokenizer");
    if (n_threads > 1024) return di_errorf("tokenizer: %d threads is too many", n_threads);
    DiThreadPool *pool = NULL;
    if (n_threads > 1 && !(pool = di_pool_create(n_threads))) return di_error_wrap("tokenizer thread pool");
    pthread_mutex_lock(&tok->pool_lock);
    DiThreadPool *old = tok->pool;
    tok->pool = pool;
    pthread_mutex_unlock(&tok->pool_lock);
    di_pool_destroy(old);
    return 0;
}

/* ---- lookups ------------------------------------------------------------------------ */

size_t di_tokenizer_vocab_size(const DiTokenizer *tok) { return tok ? tok->n_ids : 0; }

static int check_id(const DiTokenizer *tok, int32_t id) {
    if (id < 0 || (size_t)id >= tok->n_ids)
        return di_errorf("token id %d is out of range (vocab size %zu)", id, tok->n_ids);
    if (tok->kind[id] == DI_TOK_NONE) return di_errorf("token id %d has no token", id);
    return 0;
}

const char *di_tokenizer_token_bytes(const DiTokenizer *tok, int32_t id, size_t *len) {
    if (!tok || !len) {
        di_errorf("tokenizer: invalid argument");
        return NULL;
    }
    if (check_id(tok, id) != 0) return NULL;
    *len = tok->bytes_off[id + 1] - tok->bytes_off[id];
    return (const char *)tok->bytes + tok->bytes_off[id];
}

const char *di_tokenizer_id_to_token(const DiTokenizer *tok, int32_t id) {
    if (!tok) {
        di_errorf("tokenizer: NULL tokenizer");
        return NULL;
    }
    if (check_id(tok, id) != 0) return NULL;
    return tok->spell + tok->spell_off[id];
}

int32_t di_tokenizer_token_to_id(const DiTokenizer *tok, const char *spelling) {
    if (!tok || !spelling) return di_errorf("tokenizer: invalid argument");
    int32_t id = lookup_spelling(tok, spelling, strlen(spelling));
    if (id < 0) return di_errorf("no token is spelled \"%s\"", spelling);
    return id;
}

static int32_t special_id_n(const DiTokenizer *tok, const char *s, size_t n) {
    int32_t id = lookup_spelling(tok, s, n);
    if (id < 0 || tok->kind[id] != DI_TOK_ADDED)
        return di_errorf("\"%.*s\" is not an added token of this tokenizer", (int)(n > 200 ? 200 : n), s);
    return id;
}

int32_t di_tokenizer_special_id(const DiTokenizer *tok, const char *spelling) {
    if (!tok || !spelling) return di_errorf("tokenizer: invalid argument");
    return special_id_n(tok, spelling, strlen(spelling));
}

int di_tokenizer_is_added(const DiTokenizer *tok, int32_t id) {
    if (!tok) return di_errorf("tokenizer: NULL tokenizer");
    if (check_id(tok, id) != 0) return -1;
    return tok->kind[id] == DI_TOK_ADDED;
}

/* ---- encoding ----------------------------------------------------------------------- */

typedef struct {
    const DiBpe *bpe;
    DiIdVec *out;
    DiBpeScratch scratch;
    DiBpeCache cache;
} PieceSink;

static int on_piece(void *ctx, const uint8_t *piece, size_t len) {
    PieceSink *sink = ctx;
    return di_bpe_encode_cached(sink->bpe, piece, len, sink->out, &sink->scratch,
                                sink->cache.slots ? &sink->cache : NULL);
}

/* Pre-tokenize and merge one part (valid UTF-8) on the calling thread. */
static int encode_part(const DiTokenizer *tok, const uint8_t *text, size_t len, DiIdVec *out) {
    PieceSink sink = {&tok->bpe, out, {0}, {0}};
    if (len >= CACHE_MIN_BYTES && di_bpe_cache_init(&sink.cache, len) != 0) return -1;
    int rc = di_pretok_split(text, len, on_piece, &sink);
    di_bpe_scratch_free(&sink.scratch);
    di_bpe_cache_free(&sink.cache);
    return rc;
}

typedef struct {
    const DiTokenizer *tok;
    const uint8_t *text;
    const size_t *cuts; /* n_parts + 1 offsets */
    DiIdVec *parts;
    int *failed;
    char (*errors)[DI_ERROR_MAX];
} PartJob;

static void part_task(void *ctx, int task, int thread) {
    (void)thread;
    PartJob *job = ctx;
    size_t a = job->cuts[task], b = job->cuts[task + 1];
    if (encode_part(job->tok, job->text + a, b - a, &job->parts[task]) != 0) {
        /* The error message is thread-local: carry it back to the calling thread. */
        job->failed[task] = 1;
        snprintf(job->errors[task], DI_ERROR_MAX, "%s", di_error_message());
    }
}

/* Cut points: about every chunk_bytes, moved forward to the next safe cut. */
static int plan_cuts(const uint8_t *text, size_t len, size_t chunk_bytes, size_t **cuts, size_t *n_parts) {
    size_t cap = len / chunk_bytes + 2;
    size_t *c = di_calloc(cap, sizeof *c, "text cuts");
    if (!c) return -1;
    size_t n = 0, pos = 0;
    c[n++] = 0;
    while (len - pos > chunk_bytes) {
        pos += chunk_bytes;
        while (pos < len && !di_pretok_safe_cut(text, len, pos)) pos++;
        if (pos >= len) break;
        c[n++] = pos;
    }
    c[n++] = len;
    *cuts = c;
    *n_parts = n - 1;
    return 0;
}

int di_tokenizer_encode_chunked(const DiTokenizer *tok, const uint8_t *text, size_t len, size_t chunk_bytes,
                                DiThreadPool *pool, DiIdVec *out) {
    if (chunk_bytes == 0 || len <= chunk_bytes) return encode_part(tok, text, len, out);
    size_t *cuts = NULL, n_parts = 0;
    if (plan_cuts(text, len, chunk_bytes, &cuts, &n_parts) != 0) return -1;
    if (n_parts > INT32_MAX) {
        free(cuts);
        return di_errorf("text cut into too many parts");
    }
    PartJob job = {tok, text, cuts, di_calloc(n_parts, sizeof(DiIdVec), "encoded parts"),
                   di_calloc(n_parts, sizeof(int), "part status"), di_calloc(n_parts, DI_ERROR_MAX, "part errors")};
    int rc = -1;
    if (job.parts && job.failed && job.errors) {
        di_pool_run(pool, (int)n_parts, part_task, &job);
        rc = 0;
        for (size_t i = 0; i < n_parts && rc == 0; i++)
            if (job.failed[i]) rc = di_errorf("%s", job.errors[i]);
        for (size_t i = 0; i < n_parts && rc == 0; i++) rc = di_idvec_append(out, job.parts[i].v, job.parts[i].n);
    }
    for (size_t i = 0; job.parts && i < n_parts; i++) di_idvec_free(&job.parts[i]);
    free(job.parts);
    free(job.failed);
    free(job.errors);
    free(cuts);
    return rc;
}

/* Plain encoding of valid UTF-8, on the tokenizer's pool when the text is long and the pool
 * is free (a concurrent caller encodes on its own thread instead of waiting). */
static int encode_valid(const DiTokenizer *tok, const uint8_t *text, size_t len, DiIdVec *out) {
    DiTokenizer *mut = (DiTokenizer *)tok; /* only the lock is touched */
    if (tok->pool && len >= tok->parallel_min_bytes && pthread_mutex_trylock(&mut->pool_lock) == 0) {
        int rc;
        if (tok->pool) {
            /* Four parts per thread evens out parts that pre-tokenize at different speeds. */
            size_t parts = 4 * (size_t)di_pool_threads(tok->pool);
            size_t chunk = len / parts + 1;
            if (chunk < 16 * 1024) chunk = 16 * 1024;
            rc = di_tokenizer_encode_chunked(tok, text, len, chunk, tok->pool, out);
        } else {
            rc = encode_part(tok, text, len, out);
        }
        pthread_mutex_unlock(&mut->pool_lock);
        return rc;
    }
    return encode_part(tok, text, len, out);
}

static int encode_text(const DiTokenizer *tok, const char *text, size_t len, DiIdVec *out) {
    if (di_utf8_check((const uint8_t *)text, len) != 0) return -1;
    return encode_valid(tok, (const uint8_t *)text, len, out);
}

static int finish_ids(int rc, DiIdVec *vec, int32_t **ids, size_t *n_ids) {
    if (rc != 0) {
        di_idvec_free(vec);
        return -1;
    }
    *ids = vec->v;
    *n_ids = vec->n;
    return 0;
}

int di_tokenizer_encode(const DiTokenizer *tok, const char *text, size_t len, int32_t **ids, size_t *n_ids) {
    if (!tok || (!text && len) || !ids || !n_ids) return di_errorf("tokenizer encode: invalid argument");
    *ids = NULL;
    *n_ids = 0;
    DiIdVec vec = {0};
    return finish_ids(len ? encode_text(tok, text, len, &vec) : 0, &vec, ids, n_ids);
}

/* HF order: non-normalized added tokens split the text first, then normalized ones split
 * each remaining gap (tokenizers' AddedVocabulary::extract_and_normalize). */
static int encode_gaps(const DiTokenizer *tok, const uint8_t *s, size_t n, int pass, DiIdVec *out) {
    const DiTrie *trie = pass == 0 ? &tok->trie_raw : &tok->trie_norm;
    size_t p = 0, gap = 0;
    while (p < n) {
        int32_t id;
        size_t m = trie->n ? di_trie_match(trie, s + p, n - p, &id) : 0;
        if (m == 0) {
            p++;
            continue;
        }
        int rc = pass == 0 ? encode_gaps(tok, s + gap, p - gap, 1, out) : encode_valid(tok, s + gap, p - gap, out);
        if (rc != 0 || di_idvec_push(out, id) != 0) return -1;
        p += m;
        gap = p;
    }
    return pass == 0 ? encode_gaps(tok, s + gap, n - gap, 1, out) : encode_valid(tok, s + gap, n - gap, out);
}

int di_tokenizer_encode_with_added(const DiTokenizer *tok, const char *text, size_t len, int32_t **ids,
                                   size_t *n_ids) {
    if (!tok || (!text && len) || !ids || !n_ids) return di_errorf("tokenizer encode: invalid argument");
    *ids = NULL;
    *n_ids = 0;
    if (len && di_utf8_check((const uint8_t *)text, len) != 0) return -1;
    DiIdVec vec = {0};
    return finish_ids(len ? encode_gaps(tok, (const uint8_t *)text, len, 0, &vec) : 0, &vec, ids, n_ids);
}

int di_tokenizer_encode_segments(const DiTokenizer *tok, const DiSegmentList *segs, int32_t **ids, size_t *n_ids) {
    if (!tok || !segs || !ids || !n_ids || (segs->n_segs && (!segs->segs || !segs->bytes)))
        return di_errorf("tokenizer encode_segments: invalid argument");
    *ids = NULL;
    *n_ids = 0;
    DiIdVec vec = {0};
    int rc = 0;
    size_t run = 0, run_end = 0; /* the pending run of text bytes (segments lie back to back) */
    for (size_t i = 0; i < segs->n_segs && rc == 0; i++) {
        const DiSegment *seg = &segs->segs[i];
        if (seg->offset > segs->n_bytes || seg->len > segs->n_bytes - seg->offset) {
            rc = di_errorf("segment %zu: bytes %zu..%zu are outside the prompt (%zu bytes)", i, seg->offset,
                           seg->offset + seg->len, segs->n_bytes);
            break;
        }
        const char *s = segs->bytes + seg->offset;
        int32_t id = -1;
        if (seg->kind == DI_SEGMENT_SPECIAL) {
            id = lookup_spelling(tok, s, seg->len);
            if (id >= 0 && tok->kind[id] != DI_TOK_ADDED) id = -1;
            if (id < 0 && !seg->text_fallback) {
                special_id_n(tok, s, seg->len);
                rc = di_error_wrap("segment %zu", i);
                break;
            }
        } else if (seg->kind != DI_SEGMENT_TEXT) {
            rc = di_errorf("segment %zu: unknown kind %d", i, (int)seg->kind);
            break;
        }
        if (id < 0) { /* text, or a marker this tokenizer lacks: joins the run */
            if (run_end != seg->offset) run = seg->offset;
            run_end = seg->offset + seg->len;
            continue;
        }
        if (run_end > run && encode_text(tok, segs->bytes + run, run_end - run, &vec) != 0) rc = di_error_wrap("segment %zu", i);
        run = run_end = 0;
        if (rc == 0) rc = di_idvec_push(&vec, id);
    }
    if (rc == 0 && run_end > run && encode_text(tok, segs->bytes + run, run_end - run, &vec) != 0)
        rc = di_error_wrap("the prompt's last text");
    return finish_ids(rc, &vec, ids, n_ids);
}

/* ---- decoding ----------------------------------------------------------------------- */

int di_tokenizer_decode(const DiTokenizer *tok, const int32_t *ids, size_t n_ids, char **out, size_t *out_len) {
    if (!tok || (!ids && n_ids) || !out || !out_len) return di_errorf("tokenizer decode: invalid argument");
    *out = NULL;
    *out_len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n_ids; i++) {
        if (check_id(tok, ids[i]) != 0) return di_error_wrap("decoding ids[%zu]", i);
        total += tok->bytes_off[ids[i] + 1] - tok->bytes_off[ids[i]];
    }
    char *buf = di_malloc(total + 1, "decoded text");
    if (!buf) return -1;
    size_t o = 0;
    for (size_t i = 0; i < n_ids; i++) {
        uint32_t a = tok->bytes_off[ids[i]], b = tok->bytes_off[ids[i] + 1];
        memcpy(buf + o, tok->bytes + a, b - a);
        o += b - a;
    }
    buf[o] = '\0';
    *out = buf;
    *out_len = o;
    return 0;
}
