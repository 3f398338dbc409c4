/* api_buf.h — a growable byte buffer for building HTTP bodies and SSE event streams.
 *
 * The protocol encoders append JSON text and SSE framing here; the server hands the bytes to
 * the HTTP library.  Append functions return 0, or -1 with an error when memory runs out, and
 * leave the buffer valid (unchanged) on failure. */
#ifndef DI_RECIPE_API_BUF_H
#define DI_RECIPE_API_BUF_H

#include <jansson.h>
#include <stddef.h>

typedef struct {
    char *data; /* NUL-terminated when len > 0 */
    size_t len;
    size_t cap;
} DiApiBuf;

int di_api_buf_append(DiApiBuf *buf, const char *data, size_t len);
int di_api_buf_puts(DiApiBuf *buf, const char *s);
int di_api_buf_printf(DiApiBuf *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append compact JSON of `value` (ensure_ascii off: UTF-8 kept as is). */
int di_api_buf_json(DiApiBuf *buf, const json_t *value);
/* Remove the first n bytes (what the HTTP layer has sent). */
void di_api_buf_consume(DiApiBuf *buf, size_t n);
void di_api_buf_reset(DiApiBuf *buf);
void di_api_buf_free(DiApiBuf *buf);

#endif
