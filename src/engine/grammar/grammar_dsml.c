/* grammar_dsml.c — the grammar of DSML tool-call output (recipe.md §2.2): what a request with
 * strict tools or a required / named tool_choice may generate, so that every response parses
 * into calls of the declared tools whose arguments match their JSON schemas.
 *
 * The spec is JSON: {"block"/"invoke"/"parameter": the dialect's tag names (the marker is
 * DI_GRAMMAR_DSML_MARKER), "required": at least one call, "opened": the prompt already ends
 * with the block opening (the renderer pre-fills it for a required call), "tools": Chat
 * Completions function tools}.
 * A parameter is string="false" with a JSON value (the parsers copy it into the arguments
 * verbatim), so the JSON Schema front-end decides the values, or string="true" with raw text
 * where any raw text is valid (plain strings; string enums: their literals), as the recipe
 * renders strings.  Parameters come in the schema's property order, required ones always,
 * optional ones when the model chooses.  JSON values are compact (that front-end's policy), and
 * their strings write U+FF5C only as \uff5c, so no value holds the closing tag.
 * Free text (tool_choice auto) never contains U+FF5C, so it cannot start a block the grammar
 * does not describe; a block, when written, is the last thing before EOS. */
#include "engine/grammar/grammar.h"
#include "engine/grammar/grammar_json.h"

#include "base/error.h"
#include "base/json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *data;
    size_t len, cap;
} Buf;

/* printf onto b; -1 when out of memory. */
static int bput(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bput(Buf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->data ? b->data + b->len : NULL, b->data ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) return di_errorf("DSML grammar: format error");
        if (b->data && b->len + (size_t)n < b->cap) return b->len += (size_t)n, 0;
        size_t cap = (b->cap ? b->cap : 256) * 2 + (size_t)n;
        char *d = realloc(b->data, cap);
        if (!d) return di_errorf("out of memory generating a grammar");
        b->data = d, b->cap = cap;
    }
}

typedef struct {
    const char *dsml, *block, *invoke, *parameter;
} Tags;

/* Append bytes as an EBNF "literal". */
static int literal(Buf *s, const char *p) {
    int rc = bput(s, "\"");
    for (; *p && rc == 0; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\') rc = bput(s, "\\%c", c);
        else if (c < 0x20 || c == 0x7F) rc = bput(s, "\\x%02x", c);
        else rc = bput(s, "%c", c);
    }
    return rc == 0 ? bput(s, "\"") : -1;
}

/* `"<" D NAME` (open) or `"</" D NAME` as one literal. */
static int tag(Buf *s, const Tags *t, bool closing, const char *name) {
    char buf[256];
    int n = snprintf(buf, sizeof buf, "%s%s%s", closing ? "</" : "<", t->dsml, name);
    if (n < 0 || (size_t)n >= sizeof buf) return di_errorf("DSML grammar: tag name too long");
    return literal(s, buf);
}

static const char *const params_keywords[] = {"type", "properties", "required", "additionalProperties", "title",
                                              "description", "$defs", "definitions", "$schema", "$id", "$comment", NULL};

/* The keys of a tool's parameters schema and which are required; -1 naming what is not served. */
static int tool_params(const json_t *params, const char *name, const char ***keys, bool **req, size_t *n) {
    *keys = NULL, *req = NULL, *n = 0;
    if (!params || json_is_null(params)) return 0;
    if (!json_is_object(params)) return di_errorf("tool '%s': parameters must be an object schema", name);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)params, k, v) {
        size_t i = 0;
        while (params_keywords[i] && strcmp(params_keywords[i], k)) i++;
        if (!params_keywords[i]) return di_errorf("tool '%s': unsupported keyword '%s' in parameters", name, k);
    }
    const json_t *type = json_object_get(params, "type"), *props = json_object_get(params, "properties");
    const json_t *required = json_object_get(params, "required");
    if (type && !(json_is_string(type) && !strcmp(json_string_value(type), "object")))
        return di_errorf("tool '%s': parameters must have type 'object'", name);
    if (props && !json_is_object(props)) return di_errorf("tool '%s': properties must be an object", name);
    if (required && !json_is_array(required)) return di_errorf("tool '%s': required must be an array", name);
    *n = json_object_size(props);
    *keys = calloc(*n ? *n : 1, sizeof **keys);
    *req = calloc(*n ? *n : 1, sizeof **req);
    if (!*keys || !*req) return di_errorf("out of memory");
    size_t i = 0;
    json_object_foreach((json_t *)props, k, v) (*keys)[i++] = k;
    for (size_t r = 0; r < json_array_size(required); r++) {
        const char *rk = json_string_value(json_array_get(required, r));
        size_t j = 0;
        while (rk && j < *n && strcmp((*keys)[j], rk)) j++;
        if (!rk || j == *n) return di_errorf("tool '%s': required parameter '%s' is not in properties", name, rk ? rk : "(not a string)");
        (*req)[j] = true;
    }
    return 0;
}

/* The raw (string="true") form of a value, into raw: any text for a string schema with nothing
 * else to check, the literals of an enum / const of strings; 0 when there is none. */
static int raw_value(const json_t *sch, Buf *raw) {
    const json_t *type = json_object_get(sch, "type"), *en = json_object_get(sch, "enum"), *c = json_object_get(sch, "const");
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)sch, k, v) if (strcmp(k, "type") && strcmp(k, "description") && strcmp(k, "title") &&
                                                 strcmp(k, "enum") && strcmp(k, "const")) return 0;
    if (type && (!json_is_string(type) || strcmp(json_string_value(type), "string"))) return 0;
    if (!en && !c) return type ? bput(raw, "%s", "dsml_raw") == 0 ? 1 : -1 : 0;
    if (en && c) return 0;
    json_t *list = c ? json_pack("[O]", c) : json_incref((json_t *)en);
    size_t i;
    int rc = json_is_array(list) && json_array_size(list) ? 1 : 0;
    json_array_foreach(list, i, v) if (!json_is_string(v) || strstr(json_string_value(v), "\xef\xbd\x9c")) rc = 0;
    json_array_foreach(list, i, v) if (rc == 1 && (bput(raw, "%s", i ? " | " : "") != 0 || literal(raw, json_string_value(v)) != 0)) rc = -1;
    json_decref(list);
    return rc;
}

/* t<i>_p<j> ::= ("<D PAR name=\"KEY\" string=\"false\">" (JSON VALUE) | ... string=\"true\">" RAW)
 * "</D PAR>\n"; RAW where raw_value has a form (the parsers JSON-escape raw values). */
static int param_rule(DiJsonGen *jg, Buf *out, const Tags *t, const json_t *params, const char *tool, size_t ti,
                      const char *key, size_t pj) {
    char *expr = NULL, path[512], head[512];
    snprintf(path, sizeof path, "tool '%s' parameter '%s'", tool, key);
    if (strchr(key, '"') || strchr(key, '<')) return di_errorf("%s: the name cannot be written in DSML", path);
    if (di_json_gen_value(jg, params, json_object_get(json_object_get(params, "properties"), key), path, &expr) != 0) return -1;
    snprintf(head, sizeof head, "%s name=\"%s\" string=\"false\">", t->parameter, key);
    int rc = bput(out, "t%zu_p%zu ::= (", ti, pj);
    if (rc == 0) rc = tag(out, t, false, head);
    if (rc == 0) rc = bput(out, " (%s)", expr);
    Buf raw = {0};
    int has_raw = rc == 0 ? raw_value(json_object_get(json_object_get(params, "properties"), key), &raw) : 0;
    if (has_raw < 0) rc = -1;
    if (has_raw > 0) {
        snprintf(head, sizeof head, "%s name=\"%s\" string=\"true\">", t->parameter, key);
        if (bput(out, " | ") != 0 || tag(out, t, false, head) != 0 || bput(out, " (%s)", raw.data) != 0) rc = -1;
    }
    free(raw.data);
    if (rc == 0) rc = bput(out, ") ");
    if (rc == 0) rc = tag(out, t, true, t->parameter);
    if (rc == 0) rc = bput(out, "%s", " \">\\n\"\n");
    free(expr);
    return rc;
}

/* t<i>_args: the parameter lines in order (see the header); with no required parameter, a run
 * starting at any parameter or none at all (V4 writes nothing, V4.1 a blank line). */
static int args_rule(Buf *out, size_t ti, const bool *req, size_t n) {
    size_t first_req = 0;
    while (first_req < n && !req[first_req]) first_req++;
    int rc = bput(out, "t%zu_args ::= ", ti);
    size_t starts = first_req < n ? 1 : n;
    for (size_t s = 0; s < starts && rc == 0; s++) {
        rc = bput(out, "%s", s ? " | (" : "(");
        for (size_t j = first_req < n ? 0 : s; j < n && rc == 0; j++)
            rc = bput(out, " t%zu_p%zu%s", ti, j, req[j] || (first_req == n && j == s) ? "" : "?");
        if (rc == 0) rc = bput(out, "%s", ")");
    }
    if (rc == 0 && first_req == n) rc = bput(out, "%s", n ? " | \"\\n\" | \"\"" : "\"\\n\" | \"\"");
    return rc == 0 ? bput(out, "%s", "\n") : -1;
}

static int tool_rules(DiJsonGen *jg, Buf *out, const Tags *t, const json_t *tool, size_t ti) {
    const json_t *fn = json_object_get(tool, "function");
    const char *name = json_string_value(json_object_get(fn, "name"));
    if (!name || !*name) return di_errorf("DSML grammar: tools[%zu] has no function name", ti);
    if (strchr(name, '"') || strchr(name, '<')) return di_errorf("tool '%s': the name cannot be written in DSML", name);
    const json_t *params = json_object_get(fn, "parameters");
    const char **keys = NULL;
    bool *req = NULL;
    size_t n = 0;
    int rc = tool_params(params, name, &keys, &req, &n);
    for (size_t j = 0; j < n && rc == 0; j++) rc = param_rule(jg, out, t, params, name, ti, keys[j], j);
    if (rc == 0) rc = args_rule(out, ti, req, n);
    char head[512];
    snprintf(head, sizeof head, "%s name=\"%s\">\n", t->invoke, name);
    if (rc == 0) rc = bput(out, "t%zu ::= ", ti);
    if (rc == 0) rc = tag(out, t, false, head);
    if (rc == 0) rc = bput(out, " t%zu_args ", ti);
    if (rc == 0) rc = tag(out, t, true, t->invoke);
    if (rc == 0) rc = bput(out, "%s", " \">\"\n");
    free(keys);
    free(req);
    return rc;
}

/* root, calls and (auto) text around the per-tool rules. */
static int frame_rules(Buf *out, const Tags *t, size_t n_tools, bool required, bool opened) {
    int rc = bput(out, "%s", "dsml_invoke ::= ");
    for (size_t i = 0; i < n_tools && rc == 0; i++) rc = bput(out, "%st%zu", i ? " | " : "", i);
    if (rc == 0) rc = bput(out, "%s", "\ndsml_calls ::= dsml_invoke (\"\\n\" dsml_invoke)* \"\\n\" ");
    if (rc == 0) rc = tag(out, t, true, t->block);
    if (rc == 0) rc = bput(out, "%s", " \">\"\ndsml_open ::= \"\\n\\n\" ");
    if (rc == 0) rc = tag(out, t, false, t->block);
    if (rc == 0) rc = bput(out, "%s", " \">\\n\"\ndsml_raw ::= [^\\uff5c]*\n");
    if (rc != 0) return -1;
    if (opened) return bput(out, "%s", "root ::= dsml_calls\n");
    if (required) return bput(out, "%s", "root ::= dsml_open dsml_calls\n");
    return bput(out, "%s", "root ::= dsml_raw (dsml_open dsml_calls)?\n");
}

static int spec_tags(const json_t *spec, Tags *t) {
    const char *const names[] = {"block", "invoke", "parameter"};
    const char **dst[] = {&t->block, &t->invoke, &t->parameter};
    t->dsml = DI_GRAMMAR_DSML_MARKER;
    for (size_t i = 0; i < 3; i++) {
        *dst[i] = json_string_value(json_object_get(spec, names[i]));
        if (!*dst[i] || !**dst[i] || strlen(*dst[i]) > 64) return di_errorf("DSML grammar: spec needs a short string '%s'", names[i]);
    }
    return 0;
}

DiGrammar *di_grammar_compile_dsml(const char *spec_text, size_t len, char **ebnf_out) {
    if (ebnf_out) *ebnf_out = NULL;
    if (!spec_text) return di_errorf("DSML grammar: NULL spec"), NULL;
    json_t *spec = di_json_load_buffer(spec_text, len, "DSML grammar spec");
    if (!spec) return NULL;
    Tags t;
    const json_t *tools = json_object_get(spec, "tools");
    const json_t *required = json_object_get(spec, "required"), *opened = json_object_get(spec, "opened");
    DiGrammar *g = NULL;
    DiJsonGen *jg = NULL;
    Buf out = {0};
    if (spec_tags(spec, &t) != 0) goto done;
    if (!json_is_array(tools) || json_array_size(tools) == 0 || !json_is_boolean(required) || !json_is_boolean(opened)) {
        di_errorf("DSML grammar: spec needs a non-empty 'tools' array and booleans 'required' and 'opened'");
        goto done;
    }
    if (json_is_true(opened) && !json_is_true(required)) {
        di_errorf("DSML grammar: 'opened' needs 'required' (only a required call pre-fills the block)");
        goto done;
    }
    jg = di_json_gen_new(); /* the marker's first character only escaped in strings: a value never closes early */
    if (!jg || di_json_gen_exclude(jg, "\\uff5c") != 0) goto done;
    int rc = 0;
    for (size_t i = 0; i < json_array_size(tools) && rc == 0; i++) rc = tool_rules(jg, &out, &t, json_array_get(tools, i), i);
    if (rc == 0) rc = frame_rules(&out, &t, json_array_size(tools), json_is_true(required), json_is_true(opened));
    if (rc == 0) rc = di_json_gen_rules(jg, out.data);
    if (rc == 0) g = di_json_gen_build(jg, "root", ebnf_out);
done:
    free(out.data);
    di_json_gen_free(jg);
    json_decref(spec);
    return g;
}
