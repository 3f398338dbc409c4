/* json.c — jansson wrappers with field-naming errors (see json.h). */
#include "base/json.h"

#include "base/error.h"
#include "base/mem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

json_t *di_json_load_file(const char *path) {
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) di_errorf("%s:%d:%d: invalid JSON: %s", path, jerr.line, jerr.column, jerr.text);
    return root;
}

static json_t *load_buffer(const char *data, size_t size, const char *what, size_t flags) {
    if (!data) {
        di_errorf("%s: no JSON given", what ? what : "input");
        return NULL;
    }
    json_error_t jerr;
    json_t *root = json_loadb(data, size, flags, &jerr);
    if (!root) di_errorf("%s:%d:%d: invalid JSON: %s", what ? what : "input", jerr.line, jerr.column, jerr.text);
    return root;
}

json_t *di_json_load_buffer(const char *data, size_t size, const char *what) {
    return load_buffer(data, size, what, JSON_REJECT_DUPLICATES);
}

static bool has_mark(const char *s, size_t len) {
    return len >= DI_NUL_MARK_LEN && memmem(s, len, DI_NUL_MARK, DI_NUL_MARK_LEN) != NULL;
}

/* A string value's text marked (a fresh copy), or NULL when it needs no marks. */
static char *marked_copy(const char *s, size_t len, size_t *out_len, bool *oom) {
    *oom = false;
    if (strlen(s) == len && !has_mark(s, len)) return NULL;
    char *out = di_malloc(len * (DI_NUL_MARK_LEN + 1) + 1, "marked text");
    if (!out) {
        *oom = true;
        return NULL;
    }
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        bool mark = len - i >= DI_NUL_MARK_LEN && memcmp(s + i, DI_NUL_MARK, DI_NUL_MARK_LEN) == 0;
        if (s[i] == '\0' || mark) {
            memcpy(out + o, DI_NUL_MARK, DI_NUL_MARK_LEN);
            o += DI_NUL_MARK_LEN;
        }
        if (mark) {
            memcpy(out + o, DI_NUL_MARK, DI_NUL_MARK_LEN);
            o += DI_NUL_MARK_LEN;
            i += DI_NUL_MARK_LEN - 1;
        } else {
            out[o++] = s[i] == '\0' ? '0' : s[i];
        }
    }
    out[o] = '\0';
    *out_len = o;
    return out;
}

size_t di_text_unmark(char *s, size_t len) {
    if (!s || !has_mark(s, len)) return len;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        bool mark = len - i > DI_NUL_MARK_LEN && memcmp(s + i, DI_NUL_MARK, DI_NUL_MARK_LEN) == 0;
        if (mark && s[i + DI_NUL_MARK_LEN] == '0') {
            s[o++] = '\0';
            i += DI_NUL_MARK_LEN + 1;
        } else if (mark && len - i >= 2 * DI_NUL_MARK_LEN &&
                   memcmp(s + i + DI_NUL_MARK_LEN, DI_NUL_MARK, DI_NUL_MARK_LEN) == 0) {
            memmove(s + o, s + i, DI_NUL_MARK_LEN);
            o += DI_NUL_MARK_LEN;
            i += 2 * DI_NUL_MARK_LEN;
        } else {
            s[o++] = s[i++];
        }
    }
    return o;
}

/* Object keys cannot hold NUL (jansson), so marking a key only doubles its marks and
 * unmarking undoes that; the object is rebuilt to keep its key order. */
static int rewrite_keys(json_t *obj, bool mark) {
    json_t *copy = json_object();
    const char *key;
    json_t *item;
    int rc = copy ? 0 : di_errorf("JSON: out of memory");
    json_object_foreach(obj, key, item) {
        size_t n = strlen(key);
        bool oom = false;
        char *k = mark ? marked_copy(key, n, &n, &oom) : di_malloc(n + 1, "JSON key");
        if (!mark && k) {
            memcpy(k, key, n + 1);
            k[di_text_unmark(k, n)] = '\0';
        }
        if (oom || (!mark && !k)) rc = -1;
        if (rc == 0 && json_object_set(copy, k ? k : key, item) != 0) rc = di_errorf("JSON: cannot store a key");
        free(k);
        if (rc != 0) break;
    }
    if (rc == 0 && (json_object_clear(obj) != 0 || json_object_update(obj, copy) != 0)) rc = di_errorf("JSON: out of memory");
    json_decref(copy);
    return rc;
}

/* Apply `mark` (true) or unmark to every string below v. */
static int walk_strings(json_t *v, bool mark) {
    if (json_is_string(v)) {
        size_t len = json_string_length(v), n = 0;
        bool oom;
        char *text = mark ? marked_copy(json_string_value(v), len, &n, &oom) : NULL;
        if (mark && !text) return oom ? -1 : 0;
        if (!mark) {
            if (!has_mark(json_string_value(v), len)) return 0;
            if (!(text = di_malloc(len + 1, "unmarked text"))) return -1;
            memcpy(text, json_string_value(v), len + 1);
            n = di_text_unmark(text, len);
        }
        int rc = json_string_setn(v, text, n) == 0 ? 0 : di_errorf("JSON: cannot store marked text");
        free(text);
        return rc;
    }
    size_t i;
    json_t *item;
    if (json_is_array(v))
        json_array_foreach(v, i, item) if (walk_strings(item, mark) != 0) return -1;
    const char *key;
    if (!json_is_object(v)) return 0;
    bool keys = false; /* a key holding the mark itself: the keys are rewritten too (rare) */
    json_object_foreach(v, key, item) {
        if (walk_strings(item, mark) != 0) return -1;
        keys = keys || has_mark(key, strlen(key));
    }
    return keys ? rewrite_keys(v, mark) : 0;
}

int di_json_mark_nul(json_t *root) { return walk_strings(root, true); }
int di_json_unmark(json_t *root) { return walk_strings(root, false); }

bool di_json_needs_marks(const json_t *v) {
    if (json_is_string(v))
        return strlen(json_string_value(v)) != json_string_length(v) ||
               has_mark(json_string_value(v), json_string_length(v));
    size_t i;
    const char *key;
    json_t *item;
    if (json_is_array(v))
        json_array_foreach(v, i, item) if (di_json_needs_marks(item)) return true;
    if (json_is_object(v))
        json_object_foreach((json_t *)v, key, item) if (has_mark(key, strlen(key)) || di_json_needs_marks(item)) return true;
    return false;
}

json_t *di_json_load_with_nul(const char *data, size_t size, const char *what) {
    return load_buffer(data, size, what, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL);
}

/* End of the number literal at s[i] (a '-' or a digit); *integer: no fraction or exponent. */
static size_t number_end(const char *s, size_t size, size_t i, bool *integer) {
    *integer = true;
    if (i < size && s[i] == '-') i++;
    while (i < size && ((s[i] >= '0' && s[i] <= '9') || s[i] == '.' || s[i] == 'e' || s[i] == 'E' ||
                        ((s[i] == '+' || s[i] == '-') && (s[i - 1] == 'e' || s[i - 1] == 'E')))) {
        if (s[i] == '.' || s[i] == 'e' || s[i] == 'E') *integer = false;
        i++;
    }
    return i;
}

/* Whether the integer literal s[0..n) lies outside both int64 and uint64. */
static bool beyond_64_bits(const char *s, size_t n) {
    bool neg = s[0] == '-';
    const char *digits = s + neg;
    size_t nd = n - neg;
    const char *limit = neg ? "9223372036854775808" : "18446744073709551615";
    size_t nl = strlen(limit);
    if (nd != nl) return nd > nl;
    return memcmp(digits, limit, nl) > 0;
}

int di_json_widen_integers(const char *data, size_t size, char **out, size_t *out_len) {
    if (!out || !out_len || (!data && size)) return di_errorf("JSON: invalid argument");
    *out = NULL;
    *out_len = 0;
    size_t extra = 0;
    for (int pass = 0; pass < 2; pass++) { /* count, then copy */
        char *dst = *out;
        size_t o = 0;
        bool in_string = false;
        for (size_t i = 0; i < size;) {
            char c = data[i];
            if (in_string || c == '"' || !(c == '-' || (c >= '0' && c <= '9'))) {
                if (in_string && c == '\\' && i + 1 < size) { /* an escape: two bytes */
                    if (dst) dst[o] = c, dst[o + 1] = data[i + 1];
                    o += 2, i += 2;
                    continue;
                }
                if (c == '"') in_string = !in_string;
                if (dst) dst[o] = c;
                o++, i++;
                continue;
            }
            bool integer;
            size_t end = number_end(data, size, i, &integer);
            bool widen = integer && beyond_64_bits(data + i, end - i);
            if (dst) memcpy(dst + o, data + i, end - i);
            o += end - i;
            if (widen) {
                if (dst) memcpy(dst + o, "e0", 2);
                o += 2;
                extra += pass == 0 ? 2 : 0;
            }
            i = end;
        }
        if (pass == 0) {
            if (extra == 0) return 0;
            if (!(*out = di_malloc(size + extra + 1, "JSON text"))) return -1;
        } else {
            (*out)[o] = '\0';
            *out_len = o;
        }
    }
    return 1;
}

const char *di_json_type_name(const json_t *v) {
    if (!v) return "nothing (the field is missing)";
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "an unknown value";
}

static const char *sep(const char *ctx) { return (ctx && *ctx) ? "." : ""; }

/* Look up key; returns the value, or NULL when absent (sets *status to 1 or -1). */
static json_t *lookup(const json_t *obj, const char *ctx, const char *key, bool required, int *status) {
    ctx = ctx ? ctx : "";
    if (!json_is_object(obj)) {
        *status = di_errorf("%s: expected an object", *ctx ? ctx : "JSON value");
        return NULL;
    }
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *status = required ? di_errorf("%s%s%s: required field is missing", ctx, sep(ctx), key) : 1;
        return NULL;
    }
    *status = 0;
    return v;
}

int di_json_int(const json_t *obj, const char *ctx, const char *key, bool required, int64_t *out) {
    int st;
    json_t *v = lookup(obj, ctx, key, required, &st);
    if (!v) return st;
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return 0;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d == floor(d) && fabs(d) < 9.0e15) {
            *out = (int64_t)d;
            return 0;
        }
    }
    return di_errorf("%s%s%s: expected an integer, got %s", ctx ? ctx : "", sep(ctx), key, di_json_type_name(v));
}

int di_json_number(const json_t *obj, const char *ctx, const char *key, bool required, double *out) {
    int st;
    json_t *v = lookup(obj, ctx, key, required, &st);
    if (!v) return st;
    if (!json_is_number(v))
        return di_errorf("%s%s%s: expected a number, got %s", ctx ? ctx : "", sep(ctx), key, di_json_type_name(v));
    *out = json_number_value(v);
    return 0;
}

int di_json_bool(const json_t *obj, const char *ctx, const char *key, bool required, bool *out) {
    int st;
    json_t *v = lookup(obj, ctx, key, required, &st);
    if (!v) return st;
    if (!json_is_boolean(v))
        return di_errorf("%s%s%s: expected a boolean, got %s", ctx ? ctx : "", sep(ctx), key, di_json_type_name(v));
    *out = json_is_true(v);
    return 0;
}

int di_json_string(const json_t *obj, const char *ctx, const char *key, bool required, const char **out) {
    int st;
    json_t *v = lookup(obj, ctx, key, required, &st);
    if (!v) return st;
    if (!json_is_string(v))
        return di_errorf("%s%s%s: expected a string, got %s", ctx ? ctx : "", sep(ctx), key, di_json_type_name(v));
    *out = json_string_value(v);
    return 0;
}

int di_json_object(const json_t *obj, const char *ctx, const char *key, bool required, json_t **out) {
    int st;
    json_t *v = lookup(obj, ctx, key, required, &st);
    if (!v) return st;
    if (!json_is_object(v))
        return di_errorf("%s%s%s: expected an object, got %s", ctx ? ctx : "", sep(ctx), key, di_json_type_name(v));
    *out = v;
    return 0;
}

int di_json_array(const json_t *obj, const char *ctx, const char *key, bool required, json_t **out) {
    int st;
    json_t *v = lookup(obj, ctx, key, required, &st);
    if (!v) return st;
    if (!json_is_array(v))
        return di_errorf("%s%s%s: expected an array, got %s", ctx ? ctx : "", sep(ctx), key, di_json_type_name(v));
    *out = v;
    return 0;
}

int di_json_int_array(const json_t *obj, const char *ctx, const char *key, bool required,
                      int64_t **out, size_t *out_len) {
    json_t *arr;
    int st = di_json_array(obj, ctx, key, required, &arr);
    if (st != 0) return st;
    size_t n = json_array_size(arr);
    int64_t *vals = di_calloc(n ? n : 1, sizeof *vals, key);
    if (!vals) return -1;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(arr, i);
        if (!json_is_integer(e)) {
            free(vals);
            return di_errorf("%s%s%s[%zu]: expected an integer, got %s", ctx ? ctx : "", sep(ctx), key, i,
                             di_json_type_name(e));
        }
        vals[i] = (int64_t)json_integer_value(e);
    }
    *out = vals;
    *out_len = n;
    return 0;
}
