/* json.h — typed access to JSON through jansson (Debian libjansson-dev).
 *
 * Why jansson: it reports the line, column and cause of a syntax error, and its objects are
 * hash tables (a 128k-entry tokenizer vocabulary is looked up in O(1)).  These helpers add the
 * one thing jansson lacks for our inputs: an error that names the field ("text_config.head_dim:
 * expected an integer, got a string") so a bad config or request is explained, never guessed. */
#ifndef DI_BASE_JSON_H
#define DI_BASE_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Parse a file / buffer; NULL with an error "<what>:<line>:<column>: <cause>". */
json_t *di_json_load_file(const char *path);
json_t *di_json_load_buffer(const char *data, size_t size, const char *what);

/* Integers beyond the 64-bit range (below -2^63 or above 2^64-1) rewritten as floating-point
 * literals ("...e0"), as serde_json reads them (a double), where jansson refuses the whole
 * text.  Integers from 2^63 to 2^64-1 stay as they are (jansson refuses them: turning them
 * into doubles would change their digits, which serde_json keeps).  Strings are left alone.
 * Returns 1 with a fresh copy in *out / *out_len (free()), 0 when nothing needed a change
 * (*out NULL), -1 on error. */
int di_json_widen_integers(const char *data, size_t size, char **out, size_t *out_len);

/* NUL inside client text.  JSON strings may hold U+0000 ("\u0000"), but text travels from a
 * request to the renderer as C strings, which end at a NUL byte.  So inside the request
 * converter and the renderer text is "marked": each NUL is written as DI_NUL_MARK "0" and the
 * mark itself (U+10FFFF, a noncharacter) as DI_NUL_MARK DI_NUL_MARK.  The converter marks the
 * request and unmarks what it hands on (the conversation, the echo); di_conversation_from_json
 * marks its input; the prompt segments unmark the text again (segments.c).  Object keys cannot
 * hold NUL (jansson refuses them). */
#define DI_NUL_MARK "\xF4\x8F\xBF\xBF"
#define DI_NUL_MARK_LEN 4
/* Mark every string value of `root` in place; -1 on error. */
int di_json_mark_nul(json_t *root);
/* Undo the marking of every string value of `root` in place; -1 on error. */
int di_json_unmark(json_t *root);
/* Undo the marking of s[0..len) in place; returns the new length. */
size_t di_text_unmark(char *s, size_t len);
/* Whether some string below `root` holds a NUL or the mark (marking would change it). */
bool di_json_needs_marks(const json_t *root);
/* di_json_load_buffer that takes "\u0000" inside strings. */
json_t *di_json_load_with_nul(const char *data, size_t size, const char *what);

/* Field getters.  `ctx` names the enclosing object in errors (may be ""); with required=false
 * a missing (or null) field leaves *out untouched and returns 1; a present field of the wrong
 * type is always an error.  Return 0 when the value was read, 1 when absent, -1 on error. */
int di_json_int(const json_t *obj, const char *ctx, const char *key, bool required, int64_t *out);
int di_json_number(const json_t *obj, const char *ctx, const char *key, bool required, double *out);
int di_json_bool(const json_t *obj, const char *ctx, const char *key, bool required, bool *out);
int di_json_string(const json_t *obj, const char *ctx, const char *key, bool required, const char **out);
int di_json_object(const json_t *obj, const char *ctx, const char *key, bool required, json_t **out);
int di_json_array(const json_t *obj, const char *ctx, const char *key, bool required, json_t **out);
/* An array of integers into a fresh heap array (free with free()). */
int di_json_int_array(const json_t *obj, const char *ctx, const char *key, bool required,
                      int64_t **out, size_t *out_len);

const char *di_json_type_name(const json_t *value);

#endif
