/* api_buf.c — growable byte buffer (see api_buf.h). */
#include "recipe/api_buf.h"

#include "base/error.h"
#include "base/mem.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int buf_reserve(DiApiBuf *buf, size_t extra) {
    if (!buf) return di_errorf("api buffer: NULL buffer");
    if (extra > SIZE_MAX - buf->len - 1) return di_errorf("api buffer: size overflow");
    size_t need = buf->len + extra + 1;
    return di_grow(&buf->data, &buf->cap, need, 256, 1, "api buffer");
}

int di_api_buf_append(DiApiBuf *buf, const char *data, size_t len) {
    if (!data && len) return di_errorf("api buffer: NULL data");
    if (buf_reserve(buf, len) != 0) return -1;
    if (len) memcpy(buf->data + buf->len, data, len);
    buf->len += len;
    buf->data[buf->len] = '\0';
    return 0;
}

int di_api_buf_puts(DiApiBuf *buf, const char *s) {
    if (!s) return di_errorf("api buffer: NULL string");
    return di_api_buf_append(buf, s, strlen(s));
}

int di_api_buf_printf(DiApiBuf *buf, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return di_errorf("api buffer: bad format");
    if (buf_reserve(buf, (size_t)n) != 0) return -1;
    va_start(ap, fmt);
    vsnprintf(buf->data + buf->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    buf->len += (size_t)n;
    return 0;
}

int di_api_buf_json(DiApiBuf *buf, const json_t *value) {
    if (!value) return di_errorf("api buffer: NULL JSON value");
    char *text = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text) return di_errorf("api buffer: cannot serialise JSON (out of memory)");
    int rc = di_api_buf_puts(buf, text);
    free(text);
    return rc;
}

void di_api_buf_consume(DiApiBuf *buf, size_t n) {
    if (!buf || !buf->len) return;
    if (n >= buf->len) {
        buf->len = 0;
        buf->data[0] = '\0';
        return;
    }
    memmove(buf->data, buf->data + n, buf->len - n);
    buf->len -= n;
    buf->data[buf->len] = '\0';
}

void di_api_buf_reset(DiApiBuf *buf) {
    if (!buf) return;
    buf->len = 0;
    if (buf->data) buf->data[0] = '\0';
}

void di_api_buf_free(DiApiBuf *buf) {
    if (!buf) return;
    free(buf->data);
    buf->data = NULL;
    buf->len = buf->cap = 0;
}
