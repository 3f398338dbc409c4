/* render_json.h — JSON text exactly as the prompt templates write it (recipe.md §2.7), and the
 * growable string the renderers build it in.
 *
 * Tool schemas and non-string tool-call arguments are re-serialised "Python style": separators
 * ", " and ": ", key order preserved, non-ASCII raw, only `"` `\` and control characters
 * escaped.  Floats differ per encoding, as measured on deepseek-recipe 0.2.0: V4.1 prints them
 * like Python repr (1e-05, 2.5e-07), V4 switches to exponent form only below 1e-5 and prints the
 * exponent without padding (0.00001, 2.5e-7); both use 1e+16 from 1e16 up. */
#ifndef DI_RECIPE_RENDER_JSON_H
#define DI_RECIPE_RENDER_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char *data; /* NUL-terminated */
    size_t len, cap;
} DiStr;

void di_str_init(DiStr *s);
void di_str_free(DiStr *s);
int di_str_append(DiStr *s, const char *data, size_t len);
/* Make room for `extra` more bytes (plus the NUL) without changing the contents. */
int di_str_reserve(DiStr *s, size_t extra);
int di_str_appends(DiStr *s, const char *text);

typedef enum { DI_FLOAT_STYLE_PYTHON = 0, DI_FLOAT_STYLE_V4 } DiFloatStyle;

/* Append `value` as Python-style JSON; -1 (with error) for NaN/infinity. */
int di_pyjson_append(DiStr *out, const json_t *value, DiFloatStyle style);
/* Append a JSON string literal (quotes included) with Python json.dumps escaping. */
int di_pyjson_append_string(DiStr *out, const char *s, size_t len);
/* Append the shortest round-trip repr of a finite double in the given style. */
int di_pyjson_append_double(DiStr *out, double v, DiFloatStyle style);
/* Append bytes escaped as the inside of a JSON string (serde_json rules: `"` `\` and controls). */
int di_json_escape_append(DiStr *out, const char *s, size_t len);

#endif
