/* engram_map.c — the Engram compressed-token map built from a tokenizer (model-v41.md §5.2 a;
 * the reference's build_compressed_token_map).
 *
 * For every id in order: decode it alone (special tokens kept); a text with U+FFFD or invalid
 * UTF-8 (a partial byte token) keys by its raw token spelling, any other by its normalised text
 * (di_engram_key).  Keys get compressed ids 0, 1, ... in order of first appearance.  The number
 * of distinct keys is the reference's checksum: it must equal the config's
 * engram_compressed_vocab_size (the caller checks, it knows the config). */
#include "recipe/engram_map.h"

#include "base/file.h"

#include "base/env.h"
#include "base/error.h"
#include "base/mem.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* Python str.isspace() for the code points str.strip() removes */
static bool py_space(utf8proc_int32_t c) {
    if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) || c == 0x85 || c == 0xA0) return true;
    utf8proc_category_t cat = utf8proc_category(c);
    return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

/* NFKC then NFD of a NUL-terminated string (heap); NULL with an error. */
static utf8proc_uint8_t *nfkc_nfd(const char *text) {
    utf8proc_uint8_t *nfkc = utf8proc_NFKC((const utf8proc_uint8_t *)text);
    utf8proc_uint8_t *nfd = nfkc ? utf8proc_NFD(nfkc) : NULL;
    free(nfkc);
    if (!nfd) di_errorf("engram map: Unicode normalisation failed");
    return nfd;
}

/* Code points of `s` with marks dropped, lowercased, [ \t\r\n] runs folded to one space. */
static size_t fold_code_points(const utf8proc_uint8_t *s, size_t n, utf8proc_int32_t *cps) {
    size_t k = 0;
    bool in_ws = false;
    for (utf8proc_ssize_t i = 0; i < (utf8proc_ssize_t)n;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t step = utf8proc_iterate(s + i, (utf8proc_ssize_t)n - i, &c);
        if (step <= 0) break;
        i += step;
        if (utf8proc_category(c) == UTF8PROC_CATEGORY_MN) continue; /* strip accents */
        c = utf8proc_tolower(c);
        bool ws = c == ' ' || c == '\t' || c == '\r' || c == '\n';
        if (ws && in_ws) continue;
        cps[k++] = ws ? ' ' : c;
        in_ws = ws;
    }
    return k;
}

char *di_engram_key(const char *text, size_t len) {
    if (!text) {
        di_errorf("di_engram_key: text is NULL");
        return NULL;
    }
    utf8proc_uint8_t *nfd = nfkc_nfd(text);
    if (!nfd) return NULL;
    size_t n = strlen((const char *)nfd);
    utf8proc_int32_t *cps = di_malloc((n + 1) * sizeof *cps, "engram key");
    char *out = di_malloc((n > len ? n : len) * 4 + 8, "engram key");
    if (!cps || !out) {
        free(nfd), free(cps), free(out);
        return NULL;
    }
    size_t k = fold_code_points(nfd, n, cps);
    free(nfd);
    size_t lo = 0, hi = k;
    if (!(k == 1 && cps[0] == ' ')) { /* a lone space survives the strip (the reference's U+E000 sentinel) */
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

/* The key of token `id`: its normalised text, or its raw spelling when the text is not whole
 * UTF-8.  An id with no token decodes to nothing, like the reference's decode. */
static char *token_key(const DiTokenizer *tok, int32_t id) {
    char *text = NULL;
    size_t len = 0;
    if (di_tokenizer_decode(tok, &id, 1, &text, &len) != 0) {
        di_error_clear();
        text = di_strdup("");
    }
    if (!text) return NULL;
    char *key;
    if (!valid_utf8_without_fffd(text, len)) {
        const char *raw = di_tokenizer_id_to_token(tok, id);
        if (!raw) di_error_clear();
        key = di_strdup(raw ? raw : "");
    } else {
        key = di_engram_key(text, len);
    }
    free(text);
    if (!key) di_error_wrap("engram map: token %d", id);
    return key;
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

/* cid[t] from the keys: equal keys form a group (sorted by key, then id), and groups are
 * numbered in the order of their first id.  Returns the number of groups. */
static int64_t number_groups(KeyId *kv, size_t V, int32_t *first, int32_t *cid) {
    qsort(kv, V, sizeof *kv, by_key_then_id);
    for (size_t i = 0; i < V; i++)
        first[kv[i].id] = (i > 0 && strcmp(kv[i].key, kv[i - 1].key) == 0) ? first[kv[i - 1].id] : kv[i].id;
    int64_t next = 0;
    for (size_t t = 0; t < V; t++) cid[t] = first[t] == (int32_t)t ? (int32_t)next++ : cid[first[t]];
    return next;
}

int di_tokenizer_engram_map(const DiTokenizer *tok, int32_t **cid_out, int64_t *n_ids, int64_t *n_keys) {
    if (!tok || !cid_out || !n_ids || !n_keys) return di_errorf("di_tokenizer_engram_map: NULL argument");
    size_t V = di_tokenizer_vocab_size(tok);
    if (V == 0 || V > INT32_MAX) return di_errorf("di_tokenizer_engram_map: tokenizer has %zu ids", V);
    KeyId *kv = di_calloc(V, sizeof *kv, "engram map keys");
    int32_t *first = di_malloc(V * sizeof *first, "engram map"), *cid = di_malloc(V * sizeof *cid, "engram map");
    int rc = -1;
    if (!kv || !first || !cid) goto done;
    for (size_t t = 0; t < V; t++) {
        kv[t].id = (int32_t)t;
        if (!(kv[t].key = token_key(tok, (int32_t)t))) goto done;
    }
    *n_keys = number_groups(kv, V, first, cid);
    *n_ids = (int64_t)V;
    *cid_out = cid;
    cid = NULL;
    rc = 0;
done:
    if (kv)
        for (size_t i = 0; i < V; i++) free(kv[i].key);
    free(kv);
    free(first);
    free(cid);
    return rc;
}

int di_model_dir_engram_map(const char *model_dir, int32_t **cid, int64_t *n_ids) {
    if (!cid || !n_ids) return di_errorf("engram map: no output");
    *cid = NULL;
    *n_ids = 0;
    if (!model_dir || !*model_dir) model_dir = di_env_hf_model_dir();
    if (!model_dir || !*model_dir) return 0; /* the built-in model ships its map file */
    char *map_file = di_path_join(model_dir, "engram_token_map.json");
    char *tok_file = di_path_join(model_dir, "tokenizer.json");
    int rc = (map_file && tok_file) ? 0 : -1;
    if (rc == 0 && !di_file_exists(map_file) && di_file_exists(tok_file)) {
        DiTokenizer *tok = di_tokenizer_load(tok_file);
        int64_t n_keys = 0;
        rc = tok ? di_tokenizer_engram_map(tok, cid, n_ids, &n_keys) : -1;
        if (rc != 0) di_error_wrap("building the Engram token map from %s", tok_file);
        di_tokenizer_free(tok);
    }
    free(map_file);
    free(tok_file);
    return rc;
}
