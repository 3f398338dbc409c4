/* render_json.c — Python-style JSON for prompts (see render_json.h). */
#include "recipe/render_json.h"

#include "base/error.h"
#include "base/json.h"
#include "base/mem.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void di_str_init(DiStr *s) {
    if (s) memset(s, 0, sizeof *s);
}

void di_str_free(DiStr *s) {
    if (!s) return;
    free(s->data);
    memset(s, 0, sizeof *s);
}

int di_str_append(DiStr *s, const char *data, size_t len) {
    if (!s || (!data && len)) return di_errorf("string buffer: invalid argument");
    if (di_str_reserve(s, len) != 0) return -1;
    if (len) memcpy(s->data + s->len, data, len);
    s->len += len;
    s->data[s->len] = '\0';
    return 0;
}

int di_str_reserve(DiStr *s, size_t len) {
    if (!s) return di_errorf("string buffer: invalid argument");
    if (len > ((size_t)-1) / 2 - s->len) return di_errorf("string buffer: too large");
    return di_grow(&s->data, &s->cap, s->len + len + 1, 64, 1, "string buffer");
}

int di_str_appends(DiStr *s, const char *text) { return di_str_append(s, text, text ? strlen(text) : 0); }

int di_json_escape_append(DiStr *out, const char *s, size_t len) {
    if (!out || (!s && len)) return di_errorf("JSON escape: invalid argument");
    if (len == 0) return 0; /* s may be NULL: no pointer arithmetic on it */
    size_t start = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char buf[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(buf, sizeof buf, "\\u%04x", c);
                esc = buf;
            }
        }
        if (!esc) continue;
        if (di_str_append(out, s + start, i - start) != 0 || di_str_appends(out, esc) != 0) return -1;
        start = i + 1;
    }
    return di_str_append(out, s + start, len - start);
}

int di_pyjson_append_string(DiStr *out, const char *s, size_t len) {
    if (!out || (!s && len)) return di_errorf("JSON string: invalid argument");
    if (di_str_append(out, "\"", 1) != 0) return -1;
    if (len == 0) return di_str_append(out, "\"", 1); /* s may be NULL */
    /* marked text (base/json.h): a NUL shows as \u0000; a doubled mark stays for the segments */
    size_t start = 0;
    for (size_t i = 0; i + DI_NUL_MARK_LEN < len;) {
        if (memcmp(s + i, DI_NUL_MARK, DI_NUL_MARK_LEN) != 0) {
            i++;
        } else if (s[i + DI_NUL_MARK_LEN] == '0') {
            if (di_json_escape_append(out, s + start, i - start) != 0 || di_str_appends(out, "\\u0000") != 0) return -1;
            start = i += DI_NUL_MARK_LEN + 1;
        } else {
            i += 2 * DI_NUL_MARK_LEN;
        }
    }
    if (di_json_escape_append(out, s + start, len - start) != 0) return -1;
    return di_str_append(out, "\"", 1);
}

/* Shortest decimal digits that round-trip: digits (no dot) and the decimal exponent of the
 * first digit, as Python repr / ryu produce them. */
static void shortest_digits(double v, char *digits, int *exp10) {
    char buf[40];
    for (int prec = 0; prec < 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    /* buf = "d.ddde[+-]XX" (v > 0 here) */
    char *e = strchr(buf, 'e');
    *exp10 = atoi(e + 1);
    size_t n = 0;
    for (char *p = buf; p < e; p++)
        if (*p != '.') digits[n++] = *p;
    while (n > 1 && digits[n - 1] == '0') n--; /* trailing zeros carry no digits */
    digits[n] = '\0';
}

int di_pyjson_append_double(DiStr *out, double v, DiFloatStyle style) {
    if (!out) return di_errorf("JSON number: invalid argument");
    if (!isfinite(v)) return di_errorf("JSON: NaN and infinity cannot be rendered");
    if (signbit(v) && di_str_append(out, "-", 1) != 0) return -1;
    v = fabs(v);
    if (v == 0.0) return di_str_appends(out, "0.0");
    char digits[40];
    int exp10;
    shortest_digits(v, digits, &exp10);
    int n = (int)strlen(digits);
    /* Python repr: fixed notation for 1e-4 <= v < 1e16; the V4 renderer keeps 1e-5 fixed too. */
    int low = style == DI_FLOAT_STYLE_V4 ? -5 : -4;
    char buf[400];
    size_t len = 0;
    if (exp10 >= low && exp10 < 16) {
        if (exp10 < 0) {
            len += (size_t)snprintf(buf, sizeof buf, "0.");
            for (int i = 0; i < -exp10 - 1; i++) buf[len++] = '0';
            memcpy(buf + len, digits, (size_t)n);
            len += (size_t)n;
        } else {
            for (int i = 0; i <= exp10; i++) buf[len++] = i < n ? digits[i] : '0';
            buf[len++] = '.';
            if (n > exp10 + 1) {
                memcpy(buf + len, digits + exp10 + 1, (size_t)(n - exp10 - 1));
                len += (size_t)(n - exp10 - 1);
            } else
                buf[len++] = '0';
        }
    } else {
        buf[len++] = digits[0];
        if (n > 1) {
            buf[len++] = '.';
            memcpy(buf + len, digits + 1, (size_t)(n - 1));
            len += (size_t)(n - 1);
        }
        const char *fmt = style == DI_FLOAT_STYLE_V4 ? "e%c%d" : "e%c%02d";
        len += (size_t)snprintf(buf + len, sizeof buf - len, fmt, exp10 < 0 ? '-' : '+', abs(exp10));
    }
    return di_str_append(out, buf, len);
}

int di_pyjson_append(DiStr *out, const json_t *value, DiFloatStyle style) {
    if (!out || !value) return di_errorf("JSON value: invalid argument");
    char num[32];
    switch (json_typeof(value)) {
    case JSON_NULL: return di_str_appends(out, "null");
    case JSON_TRUE: return di_str_appends(out, "true");
    case JSON_FALSE: return di_str_appends(out, "false");
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%lld", (long long)json_integer_value(value));
        return di_str_appends(out, num);
    case JSON_REAL: return di_pyjson_append_double(out, json_real_value(value), style);
    case JSON_STRING: return di_pyjson_append_string(out, json_string_value(value), json_string_length(value));
    case JSON_ARRAY: {
        if (di_str_append(out, "[", 1) != 0) return -1;
        for (size_t i = 0; i < json_array_size(value); i++) {
            if (i > 0 && di_str_append(out, ", ", 2) != 0) return -1;
            if (di_pyjson_append(out, json_array_get(value, i), style) != 0) return -1;
        }
        return di_str_append(out, "]", 1);
    }
    case JSON_OBJECT: {
        if (di_str_append(out, "{", 1) != 0) return -1;
        const char *key;
        json_t *v;
        size_t i = 0;
        json_object_foreach((json_t *)value, key, v) { /* jansson >= 2.8 iterates in insertion order */
            if (i++ > 0 && di_str_append(out, ", ", 2) != 0) return -1;
            if (di_pyjson_append_string(out, key, strlen(key)) != 0 || di_str_append(out, ": ", 2) != 0) return -1;
            if (di_pyjson_append(out, v, style) != 0) return -1;
        }
        return di_str_append(out, "}", 1);
    }
    }
    return di_errorf("JSON: unknown value type");
}
