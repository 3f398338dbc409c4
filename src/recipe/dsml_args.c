/* dsml_args.c — tool-call arguments read as the official renderer reads them (see
 * dsml_args.h).  A small recursive-descent JSON reader that writes each non-string value
 * straight back out in the Python style of render_json.c, so numbers keep the text the
 * official reader keeps instead of passing through a jansson value. */
#include "recipe/dsml_args.h"

#include "base/error.h"
#include "base/json.h"
#include "base/mem.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 127 /* nested levels the official reader takes, the top-level object included */

/* Status of every reader step: OK, NOT_JSON (the text is refused), or -1 (out of memory). */
enum { OK = 0, NOT_JSON = 1 };

typedef struct {
    const char *p, *end;
    DiFloatStyle floats;
    int depth;
} Reader;

static int mem(int rc) { return rc == 0 ? OK : -1; }

static void skip_ws(Reader *r) {
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r')) r->p++;
}

static bool take(Reader *r, char c) {
    skip_ws(r);
    if (r->p < r->end && *r->p == c) {
        r->p++;
        return true;
    }
    return false;
}

static bool literal(Reader *r, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n) != 0) return false;
    r->p += n;
    return true;
}

static int hex4(Reader *r, unsigned *out) {
    if (r->end - r->p < 4) return NOT_JSON;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = *r->p++;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return NOT_JSON;
        v = v * 16 + (unsigned)d;
    }
    *out = v;
    return OK;
}

static int append_utf8(DiStr *out, unsigned cp) {
    char b[4];
    size_t n;
    if (cp < 0x80) b[0] = (char)cp, n = 1;
    else if (cp < 0x800) b[0] = (char)(0xC0 | cp >> 6), b[1] = (char)(0x80 | (cp & 0x3F)), n = 2;
    else if (cp < 0x10000)
        b[0] = (char)(0xE0 | cp >> 12), b[1] = (char)(0x80 | ((cp >> 6) & 0x3F)), b[2] = (char)(0x80 | (cp & 0x3F)), n = 3;
    else
        b[0] = (char)(0xF0 | cp >> 18), b[1] = (char)(0x80 | ((cp >> 12) & 0x3F)), b[2] = (char)(0x80 | ((cp >> 6) & 0x3F)),
        b[3] = (char)(0x80 | (cp & 0x3F)), n = 4;
    return mem(di_str_append(out, b, n));
}

/* \uXXXX (the backslash and u consumed): a pair of surrogates joins, a lone one is refused. */
static int unicode_escape(Reader *r, DiStr *out) {
    unsigned cp, low;
    if (hex4(r, &cp) != OK) return NOT_JSON;
    if (cp >= 0xDC00 && cp <= 0xDFFF) return NOT_JSON;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (!literal(r, "\\u") || hex4(r, &low) != OK || low < 0xDC00 || low > 0xDFFF) return NOT_JSON;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    /* the output is marked text (base/json.h): NUL and the mark itself are written marked */
    if (cp == 0) return mem(di_str_appends(out, DI_NUL_MARK "0"));
    if (cp == 0x10FFFF) return mem(di_str_appends(out, DI_NUL_MARK DI_NUL_MARK));
    return append_utf8(out, cp);
}

/* A string literal: its bytes, escapes decoded ("\u0000" included). */
static int read_string(Reader *r, DiStr *out) {
    if (!take(r, '"')) return NOT_JSON;
    while (r->p < r->end) {
        unsigned char c = (unsigned char)*r->p++;
        if (c == '"') return OK;
        if (c < 0x20) return NOT_JSON;
        const char *at = r->p - 1;
        size_t left = (size_t)(r->end - at);
        if (c == 0xF4 && left > DI_NUL_MARK_LEN && memcmp(at, DI_NUL_MARK, DI_NUL_MARK_LEN) == 0) {
            /* a mark (base/json.h): a NUL is a control byte here; a doubled mark is kept whole */
            if (at[DI_NUL_MARK_LEN] == '0') return NOT_JSON;
            if (left >= 2 * DI_NUL_MARK_LEN && memcmp(at + DI_NUL_MARK_LEN, DI_NUL_MARK, DI_NUL_MARK_LEN) == 0) {
                if (di_str_append(out, at, 2 * DI_NUL_MARK_LEN) != 0) return -1;
                r->p = at + 2 * DI_NUL_MARK_LEN;
                continue;
            }
        }
        if (c != '\\') {
            if (di_str_append(out, (const char *)&c, 1) != 0) return -1;
            continue;
        }
        if (r->p >= r->end) return NOT_JSON;
        char e = *r->p++, plain = 0;
        switch (e) {
        case '"': case '\\': case '/': plain = e; break;
        case 'b': plain = '\b'; break;
        case 'f': plain = '\f'; break;
        case 'n': plain = '\n'; break;
        case 'r': plain = '\r'; break;
        case 't': plain = '\t'; break;
        case 'u': {
            int rc = unicode_escape(r, out);
            if (rc != OK) return rc;
            continue;
        }
        default: return NOT_JSON;
        }
        if (di_str_append(out, &plain, 1) != 0) return -1;
    }
    return NOT_JSON;
}

static bool digit(const Reader *r) { return r->p < r->end && *r->p >= '0' && *r->p <= '9'; }

/* Whether the integer literal s (optionally signed digits) fits i64 (negative) or u64. */
static bool fits_64(const char *s) {
    errno = 0;
    if (*s == '-') (void)strtoll(s, NULL, 10);
    else (void)strtoull(s, NULL, 10);
    return errno != ERANGE;
}

/* A number literal, written as the official renderer prints the value it reads. */
static int read_number(Reader *r, DiStr *out) {
    const char *start = r->p;
    if (r->p < r->end && *r->p == '-') r->p++;
    if (!digit(r)) return NOT_JSON;
    if (*r->p++ != '0')
        while (digit(r)) r->p++;
    bool integer = true;
    if (r->p < r->end && *r->p == '.') {
        r->p++, integer = false;
        if (!digit(r)) return NOT_JSON;
        while (digit(r)) r->p++;
    }
    if (r->p < r->end && (*r->p == 'e' || *r->p == 'E')) {
        r->p++, integer = false;
        if (r->p < r->end && (*r->p == '+' || *r->p == '-')) r->p++;
        if (!digit(r)) return NOT_JSON;
        while (digit(r)) r->p++;
    }
    DiStr lit;
    di_str_init(&lit);
    if (di_str_append(&lit, start, (size_t)(r->p - start)) != 0) return -1;
    int rc = OK;
    if (integer && strcmp(lit.data, "-0") != 0 && fits_64(lit.data)) {
        rc = mem(di_str_append(out, lit.data, lit.len));
    } else { /* a fraction, -0, or an integer past 64 bits: a double, infinity refused */
        double v = strtod(lit.data, NULL);
        rc = isinf(v) ? NOT_JSON : mem(di_pyjson_append_double(out, v, r->floats));
    }
    di_str_free(&lit);
    return rc;
}

static int read_members(Reader *r, DiDsmlArg **list, size_t *n);
static int read_value(Reader *r, DiStr *out);

/* An object as Python-style JSON: its members (duplicates already merged) in order. */
static int write_object(Reader *r, DiStr *out) {
    DiDsmlArg *members = NULL;
    size_t n = 0;
    int rc = read_members(r, &members, &n);
    if (rc == OK) rc = mem(di_str_append(out, "{", 1));
    for (size_t i = 0; i < n && rc == OK; i++) {
        if (i > 0) rc = mem(di_str_append(out, ", ", 2));
        if (rc == OK) rc = mem(di_pyjson_append_string(out, members[i].key.data, members[i].key.len));
        if (rc == OK) rc = mem(di_str_append(out, ": ", 2));
        if (rc == OK && members[i].is_string) rc = mem(di_pyjson_append_string(out, members[i].value.data, members[i].value.len));
        else if (rc == OK) rc = mem(di_str_append(out, members[i].value.data, members[i].value.len));
    }
    if (rc == OK) rc = mem(di_str_append(out, "}", 1));
    di_dsml_args_free(members, n);
    return rc;
}

static int write_array(Reader *r, DiStr *out) {
    if (!take(r, '[')) return NOT_JSON;
    if (++r->depth > MAX_DEPTH) return NOT_JSON;
    if (di_str_append(out, "[", 1) != 0) return -1;
    if (!take(r, ']')) {
        for (bool first = true;; first = false) {
            if (!first && di_str_append(out, ", ", 2) != 0) return -1;
            int rc = read_value(r, out);
            if (rc != OK) return rc;
            if (take(r, ']')) break;
            if (!take(r, ',')) return NOT_JSON;
        }
    }
    r->depth--;
    return mem(di_str_append(out, "]", 1));
}

static int read_value(Reader *r, DiStr *out) {
    skip_ws(r);
    if (r->p >= r->end) return NOT_JSON;
    switch (*r->p) {
    case '"': {
        DiStr s;
        di_str_init(&s);
        int rc = read_string(r, &s);
        if (rc == OK) rc = mem(di_pyjson_append_string(out, s.data ? s.data : "", s.len));
        di_str_free(&s);
        return rc;
    }
    case '{': return write_object(r, out);
    case '[': return write_array(r, out);
    case 't': return literal(r, "true") ? mem(di_str_appends(out, "true")) : NOT_JSON;
    case 'f': return literal(r, "false") ? mem(di_str_appends(out, "false")) : NOT_JSON;
    case 'n': return literal(r, "null") ? mem(di_str_appends(out, "null")) : NOT_JSON;
    default: return read_number(r, out);
    }
}

/* Store one member; a repeated key takes the new value in the old place. */
static int add_member(DiDsmlArg **list, size_t *n, DiDsmlArg *m) {
    for (size_t i = 0; i < *n; i++) {
        DiDsmlArg *o = &(*list)[i];
        if (o->key.len == m->key.len && memcmp(o->key.data ? o->key.data : "", m->key.data ? m->key.data : "", m->key.len) == 0) {
            di_str_free(&o->value);
            o->value = m->value;
            o->is_string = m->is_string;
            di_str_free(&m->key);
            return OK;
        }
    }
    DiDsmlArg *grown = di_realloc_array(*list, *n + 1, sizeof *grown, "tool-call arguments");
    if (!grown) return -1;
    *list = grown;
    grown[(*n)++] = *m;
    return OK;
}

static int read_members(Reader *r, DiDsmlArg **list, size_t *n) {
    if (!take(r, '{')) return NOT_JSON;
    if (++r->depth > MAX_DEPTH) return NOT_JSON;
    if (take(r, '}')) {
        r->depth--;
        return OK;
    }
    for (;;) {
        DiDsmlArg m = {.is_string = false};
        di_str_init(&m.key);
        di_str_init(&m.value);
        skip_ws(r);
        int rc = read_string(r, &m.key);
        if (rc == OK) rc = take(r, ':') ? OK : NOT_JSON;
        if (rc == OK) {
            skip_ws(r);
            m.is_string = r->p < r->end && *r->p == '"';
            rc = m.is_string ? read_string(r, &m.value) : read_value(r, &m.value);
        }
        if (rc == OK) rc = add_member(list, n, &m);
        if (rc != OK) {
            di_str_free(&m.key);
            di_str_free(&m.value);
            return rc;
        }
        if (take(r, '}')) break;
        if (!take(r, ',')) return NOT_JSON;
    }
    r->depth--;
    return OK;
}

int di_dsml_args_read(const char *text, size_t len, DiFloatStyle floats, DiDsmlArg **args, size_t *n_args) {
    if (!args || !n_args || (!text && len)) return di_errorf("tool-call arguments: invalid argument");
    *args = NULL;
    *n_args = 0;
    Reader r = {text, text + len, floats, 0};
    int rc = read_members(&r, args, n_args);
    skip_ws(&r);
    if (rc == OK && r.p != r.end) rc = NOT_JSON; /* text after the object */
    if (rc != OK) {
        di_dsml_args_free(*args, *n_args);
        *args = NULL;
        *n_args = 0;
    }
    return rc;
}

void di_dsml_args_free(DiDsmlArg *args, size_t n_args) {
    if (!args) return;
    for (size_t i = 0; i < n_args; i++) {
        di_str_free(&args[i].key);
        di_str_free(&args[i].value);
    }
    free(args);
}
