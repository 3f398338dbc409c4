/* dsml_args.h — a tool call's arguments text read the way the official renderer reads it,
 * ready for the DSML parameters of a tool-call block (dsml.c).
 *
 * Why not jansson: deepseek-recipe 0.2.0 reads arguments with serde_json, and the prompt shows
 * what that reader kept: integers exact across the whole i64 and u64 range (jansson stops at
 * 2^63), larger ones and all fractions as doubles, "-0" as -0.0 (jansson: 0), "\u0000" inside
 * strings (jansson refuses it), the last of duplicate keys in the place of the first, and at
 * most 127 nested levels.  Text it refuses (not JSON, not an object, out-of-range numbers,
 * lone surrogates) becomes the single string parameter "arguments" in the caller. */
#ifndef DI_RECIPE_DSML_ARGS_H
#define DI_RECIPE_DSML_ARGS_H

#include "recipe/render_json.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    DiStr key;       /* the parameter name (may hold NUL bytes) */
    DiStr value;     /* a string's own bytes, else the value as Python-style JSON */
    bool is_string;
} DiDsmlArg;

/* Read `text` (len bytes) as a JSON object.  0: *args / *n_args hold its members in order
 * (free with di_dsml_args_free); 1: the text is not an object the official reader takes;
 * -1: out of memory (error set). */
int di_dsml_args_read(const char *text, size_t len, DiFloatStyle floats, DiDsmlArg **args, size_t *n_args);
void di_dsml_args_free(DiDsmlArg *args, size_t n_args);

#endif
