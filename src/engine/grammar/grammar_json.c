/* grammar_json.c — the JSON Schema front-end: a schema becomes EBNF text (kept for debugging
 * and for the compile cache key) plus AST rules for `pattern`, compiled like any grammar.
 *
 * Policy (fixed, as vLLM's any_whitespace=False): compact JSON, no whitespace anywhere, ","
 * and ":" as separators.  Objects list properties in declared order; optional ones may be
 * left out.  Like xgrammar's strict mode, an object with `properties` admits no other keys
 * (the outputs stay valid for any additionalProperties); additionalProperties true / a schema
 * applies to objects without `properties` (maps).  `pattern` must match the whole string (a
 * full match is also a search match, so outputs stay valid) and its classes never produce
 * '"', '\' or control characters (they would need escapes the pattern does not describe).
 * oneOf compiles as anyOf (outputs matching two branches are possible).  Integer and number
 * bounds: only minimum 0 / exclusiveMinimum 0 on integers.  Any other keyword is an error
 * naming it: silently dropping a constraint would let invalid output through. */
#include "engine/grammar/grammar.h"
#include "engine/grammar/grammar_json.h"

#include "base/error.h"
#include "base/json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *buf;
    size_t len, cap;
    bool oom;
} Str;

static void sputf(Str *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sputf(Str *s, const char *fmt, ...) {
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(s->buf ? s->buf + s->len : NULL, s->buf ? s->cap - s->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) return;
        if (s->buf && s->len + (size_t)n < s->cap) {
            s->len += (size_t)n;
            return;
        }
        size_t cap = (s->cap ? s->cap : 256) * 2 + (size_t)n;
        char *b = realloc(s->buf, cap);
        if (!b) {
            s->oom = true;
            return;
        }
        s->buf = b;
        s->cap = cap;
    }
}

/* Append bytes as an EBNF "literal". */
static void put_literal(Str *s, const char *p, size_t n) {
    sputf(s, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '"' || c == '\\') sputf(s, "\\%c", c);
        else if (c < 0x20) sputf(s, "\\x%02x", c);
        else sputf(s, "%c", c);
    }
    sputf(s, "\"");
}

typedef struct {
    Str out;           /* the generated rules */
    int n_rules;
    json_t *root;
    json_t *refs;      /* ref string -> rule name (json string) */
    DiGRules pattern_rules;
    int depth;
} Gen;

static const char *const BASE_RULES =
    "json_value ::= json_object | json_array | json_string | json_number | \"true\" | \"false\" | \"null\"\n"
    "json_object ::= \"{\" (json_string \":\" json_value (\",\" json_string \":\" json_value)*)? \"}\"\n"
    "json_array ::= \"[\" (json_value (\",\" json_value)*)? \"]\"\n"
    "json_string ::= \"\\\"\" json_char* \"\\\"\"\n"
    "json_integer ::= \"-\"? json_uint\n"
    "json_uint ::= \"0\" | [1-9] [0-9]*\n"
    "json_number ::= json_integer (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)?\n";

/* The unescaped characters of a JSON string (the %s: more code points to leave out). */
static const char *const CHAR_RULE = "json_char ::= [^\"\\\\\\x00-\\x1f%s] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n";

static int gen_schema(Gen *g, const json_t *sch, const char *path, Str *expr);

/* A fresh rule name into name[32]. */
static void new_rule(Gen *g, char *name) { snprintf(name, 32, "s%d", g->n_rules++); }

static bool is_annotation(const char *k) {
    static const char *const ok[] = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
                                     "deprecated", "readOnly", "writeOnly", "$defs", "definitions", NULL};
    for (int i = 0; ok[i]; i++)
        if (!strcmp(k, ok[i])) return true;
    return false;
}

/* Refuse keywords this front-end does not implement for the schema's type(s). */
static int check_keywords(const json_t *sch, const char *path, const char *const *handled) {
    const char *k;
    json_t *val;
    json_object_foreach((json_t *)sch, k, val) {
        (void)val;
        if (is_annotation(k)) continue;
        bool found = false;
        for (int i = 0; handled[i] && !found; i++) found = !strcmp(k, handled[i]);
        if (!found) return di_errorf("JSON Schema %s: unsupported keyword '%s'", path, k);
    }
    return 0;
}

static int json_literal(Str *expr, const json_t *v) {
    char *txt = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
    if (!txt) return di_errorf("JSON Schema: cannot serialize a const/enum value");
    put_literal(expr, txt, strlen(txt));
    free(txt);
    return 0;
}

static int get_count(const json_t *sch, const char *path, const char *key, int64_t *out) {
    int rc = di_json_int(sch, path, key, false, out);
    if (rc < 0) return -1;
    if (rc == 0 && (*out < 0 || *out > DI_GRAMMAR_MAX_REPEAT))
        return di_errorf("JSON Schema %s: %s = %lld outside [0, %d]", path, key, (long long)*out, DI_GRAMMAR_MAX_REPEAT);
    return rc;
}

/* Remove '"', '\' and control characters from every class of a pattern AST. */
static int strip_unsafe(DiGNode *n) {
    if (n->kind == DI_GN_CLASS) {
        if (di_gnode_class_negate(n) != 0 || di_gnode_class_add(n, 0, 0x1F) != 0 || di_gnode_class_add(n, '"', '"') != 0 ||
            di_gnode_class_add(n, '\\', '\\') != 0)
            return -1;
        return di_gnode_class_negate(n);
    }
    if (n->kind == DI_GN_BYTES)
        for (size_t i = 0; i < n->n_bytes; i++)
            if (n->bytes[i] < 0x20 || n->bytes[i] == '"' || n->bytes[i] == '\\')
                return di_errorf("pattern literal needs a JSON escape");
    for (size_t i = 0; i < n->n_kids; i++)
        if (strip_unsafe(n->kids[i]) != 0) return -1;
    return 0;
}

static int gen_string(Gen *g, const json_t *sch, const char *path, Str *expr) {
    static const char *const handled[] = {"type", "minLength", "maxLength", "pattern", "format", NULL};
    if (check_keywords(sch, path, handled) != 0) return -1;
    const char *pattern = NULL, *format = NULL;
    if (di_json_string(sch, path, "pattern", false, &pattern) < 0 || di_json_string(sch, path, "format", false, &format) < 0)
        return -1;
    static const char *const formats[][2] = {
        {"date", "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"},
        {"time", "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"},
        {"date-time", "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
                      "(\\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"},
        {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
    };
    if (format) {
        size_t k = 0;
        while (k < sizeof formats / sizeof *formats && strcmp(format, formats[k][0])) k++;
        if (k == sizeof formats / sizeof *formats)
            return di_errorf("JSON Schema %s: unsupported format '%s' (supported: date, time, date-time, uuid)", path, format);
        if (pattern) return di_errorf("JSON Schema %s: pattern together with format is not supported", path);
        pattern = formats[k][1];
    }
    if (pattern) {
        if (json_object_get(sch, "minLength") || json_object_get(sch, "maxLength"))
            return di_errorf("JSON Schema %s: pattern together with minLength/maxLength is not supported", path);
        size_t plen = strlen(pattern);
        if (plen && pattern[0] == '^') pattern++, plen--;
        if (plen && pattern[plen - 1] == '$' && (plen < 2 || pattern[plen - 2] != '\\')) plen--;
        DiGNode *ast = di_grammar_parse_regex(pattern, plen);
        if (!ast || strip_unsafe(ast) != 0) {
            di_gnode_free(ast);
            return di_error_wrap("JSON Schema %s: pattern", path);
        }
        char name[32];
        new_rule(g, name);
        if (di_grules_add(&g->pattern_rules, name, strlen(name), ast) != 0) return -1;
        sputf(expr, "\"\\\"\" %s \"\\\"\"", name);
        return 0;
    }
    int64_t mn = 0, mx = -1;
    if (get_count(sch, path, "minLength", &mn) < 0 || get_count(sch, path, "maxLength", &mx) < 0) return -1;
    if (mx >= 0 && mx < mn) return di_errorf("JSON Schema %s: maxLength < minLength", path);
    if (mn == 0 && mx < 0) sputf(expr, "json_string");
    else if (mx < 0) sputf(expr, "\"\\\"\" json_char{%lld,} \"\\\"\"", (long long)mn);
    else sputf(expr, "\"\\\"\" json_char{%lld,%lld} \"\\\"\"", (long long)mn, (long long)mx);
    return 0;
}

static int gen_numeric(const json_t *sch, const char *path, bool integer, Str *expr) {
    static const char *const handled[] = {"type", "minimum", "exclusiveMinimum", NULL};
    if (check_keywords(sch, path, handled) != 0) return -1;
    const json_t *mn = json_object_get(sch, "minimum"), *xmn = json_object_get(sch, "exclusiveMinimum");
    if (mn || xmn) {
        if (!integer || (mn && xmn) || !json_is_number(mn ? mn : xmn) || json_number_value(mn ? mn : xmn) != 0)
            return di_errorf("JSON Schema %s: unsupported keyword '%s' (only 'minimum': 0 or 'exclusiveMinimum': 0 on "
                             "integers)", path, mn ? "minimum" : "exclusiveMinimum");
        sputf(expr, mn ? "json_uint" : "[1-9] [0-9]*");
        return 0;
    }
    sputf(expr, integer ? "json_integer" : "json_number");
    return 0;
}

/* Rules m<id>_<i>_<f> for the members properties[i..], f = 1 while none was written yet (no
 * comma before the next one); built from the end so each (i, f) is one rule. */
static int gen_members(Gen *g, json_t *props, const char **keys, const bool *req, size_t n, const char *path, int id) {
    for (size_t i = n + 1; i-- > 0;)
        for (int first = 0; first < 2; first++) {
            Str body = {0};
            if (i == n) sputf(&body, "\"\"");
            else {
                if (!first) { /* the member itself, once per property: p<id>_<i> */
                    json_t *key = json_string(keys[i]);
                    char *kt = key ? json_dumps(key, JSON_ENCODE_ANY) : NULL;
                    json_decref(key);
                    if (!kt) return free(body.buf), di_errorf("JSON Schema %s: bad property name", path);
                    Str val = {0};
                    char sub[512];
                    snprintf(sub, sizeof sub, "%s.properties.%s", path, keys[i]);
                    if (gen_schema(g, json_object_get(props, keys[i]), sub, &val) != 0)
                        return free(kt), free(body.buf), free(val.buf), -1;
                    sputf(&g->out, "p%d_%zu ::= ", id, i);
                    put_literal(&g->out, kt, strlen(kt));
                    sputf(&g->out, " \":\" (%s)\n", val.buf);
                    free(kt);
                    free(val.buf);
                }
                sputf(&body, "(%sp%d_%zu m%d_%zu_0)", first ? "" : "\",\" ", id, i, id, i + 1);
                if (!req[i]) sputf(&body, " | m%d_%zu_%d", id, i + 1, first);
            }
            sputf(&g->out, "m%d_%zu_%d ::= %s\n", id, i, first, body.buf ? body.buf : "\"\"");
            free(body.buf);
            if (body.oom) return di_errorf("out of memory generating a grammar");
        }
    return 0;
}

static int gen_object(Gen *g, const json_t *sch, const char *path, Str *expr) {
    static const char *const handled[] = {"type", "properties", "required", "additionalProperties", NULL};
    if (check_keywords(sch, path, handled) != 0) return -1;
    json_t *props = NULL, *required = NULL, *addl = json_object_get(sch, "additionalProperties");
    if (di_json_object(sch, path, "properties", false, &props) < 0 || di_json_array(sch, path, "required", false, &required) < 0)
        return -1;
    size_t n = props ? json_object_size(props) : 0;
    if (n == 0) { /* a map: additionalProperties decides the values */
        if (addl && json_is_false(addl)) return sputf(expr, "\"{\" \"}\""), 0;
        if (!addl || json_is_true(addl)) return sputf(expr, "json_object"), 0;
        if (!json_is_object(addl)) return di_errorf("JSON Schema %s: additionalProperties must be a boolean or a schema", path);
        Str val = {0};
        char sub[512];
        snprintf(sub, sizeof sub, "%s.additionalProperties", path);
        if (gen_schema(g, addl, sub, &val) != 0) return free(val.buf), -1;
        sputf(expr, "\"{\" (json_string \":\" (%s) (\",\" json_string \":\" (%s))*)? \"}\"", val.buf, val.buf);
        free(val.buf);
        return 0;
    }
    const char **keys = calloc(n, sizeof *keys);
    bool *req = calloc(n, sizeof *req);
    if (!keys || !req) return free(keys), free(req), di_errorf("out of memory");
    size_t i = 0;
    const char *k;
    json_t *v;
    json_object_foreach(props, k, v) keys[i++] = k;
    for (size_t r = 0; required && r < json_array_size(required); r++) {
        const char *rk = json_string_value(json_array_get(required, r));
        size_t j = 0;
        while (rk && j < n && strcmp(keys[j], rk)) j++;
        if (!rk || j == n) {
            free(keys), free(req);
            return di_errorf("JSON Schema %s: required property '%s' is not in properties", path, rk ? rk : "(not a string)");
        }
        req[j] = true;
    }
    int id = g->n_rules++;
    int rc = gen_members(g, props, keys, req, n, path, id);
    free(keys), free(req);
    if (rc == 0) sputf(expr, "\"{\" m%d_0_1 \"}\"", id);
    return rc;
}

static int gen_array(Gen *g, const json_t *sch, const char *path, Str *expr) {
    static const char *const handled[] = {"type", "items", "minItems", "maxItems", "prefixItems", NULL};
    if (check_keywords(sch, path, handled) != 0) return -1;
    if (json_object_get(sch, "prefixItems"))
        return di_errorf("JSON Schema %s: unsupported keyword 'prefixItems'", path);
    int64_t mn = 0, mx = -1;
    if (get_count(sch, path, "minItems", &mn) < 0 || get_count(sch, path, "maxItems", &mx) < 0) return -1;
    if (mx >= 0 && mx < mn) return di_errorf("JSON Schema %s: maxItems < minItems", path);
    json_t *items = json_object_get(sch, "items");
    Str it = {0};
    char sub[512];
    snprintf(sub, sizeof sub, "%s.items", path);
    if (!items || json_is_true(items)) sputf(&it, "json_value");
    else if (json_is_false(items)) mx = 0;
    else if (gen_schema(g, items, sub, &it) != 0) return free(it.buf), -1;
    if (mx == 0) {
        free(it.buf);
        if (mn > 0) return di_errorf("JSON Schema %s: minItems > 0 but no item is allowed", path);
        return sputf(expr, "\"[\" \"]\""), 0;
    }
    char name[32];
    new_rule(g, name);
    sputf(&g->out, "%s ::= %s\n", name, it.buf);
    free(it.buf);
    int64_t rest_min = mn > 0 ? mn - 1 : 0;
    char rest[64];
    if (mx < 0) snprintf(rest, sizeof rest, "{%lld,}", (long long)rest_min);
    else snprintf(rest, sizeof rest, "{%lld,%lld}", (long long)rest_min, (long long)mx - 1);
    sputf(expr, mn > 0 ? "\"[\" %s (\",\" %s)%s \"]\"" : "\"[\" (%s (\",\" %s)%s)? \"]\"", name, name, rest);
    return 0;
}

static int gen_ref(Gen *g, const char *ref, const char *path, Str *expr) {
    json_t *known = json_object_get(g->refs, ref);
    if (known) return sputf(expr, "%s", json_string_value(known)), 0;
    const json_t *target = NULL;
    if (!strcmp(ref, "#")) target = g->root;
    else if (!strncmp(ref, "#/$defs/", 8)) target = json_object_get(json_object_get(g->root, "$defs"), ref + 8);
    else if (!strncmp(ref, "#/definitions/", 14))
        target = json_object_get(json_object_get(g->root, "definitions"), ref + 14);
    else return di_errorf("JSON Schema %s: unsupported $ref '%s' (only #, #/$defs/... and #/definitions/...)", path, ref);
    if (!target) return di_errorf("JSON Schema %s: $ref '%s' points to nothing", path, ref);
    char name[32];
    new_rule(g, name);
    json_object_set_new(g->refs, ref, json_string(name)); /* before the body: recursion refers to it */
    Str body = {0};
    if (gen_schema(g, target, ref, &body) != 0) return free(body.buf), -1;
    sputf(&g->out, "%s ::= %s\n", name, body.buf);
    free(body.buf);
    sputf(expr, "%s", name);
    return 0;
}

/* A list of sub-schemas (anyOf / oneOf / type lists) as an alternation. */
static int gen_alternatives(Gen *g, const json_t *list, const char *path, const char *key, Str *expr) {
    if (!json_is_array(list) || json_array_size(list) == 0)
        return di_errorf("JSON Schema %s: %s must be a non-empty array", path, key);
    sputf(expr, "(");
    for (size_t i = 0; i < json_array_size(list); i++) {
        char sub[512];
        snprintf(sub, sizeof sub, "%s.%s[%zu]", path, key, i);
        Str e = {0};
        if (gen_schema(g, json_array_get(list, i), sub, &e) != 0) return free(e.buf), -1;
        sputf(expr, "%s(%s)", i ? " | " : "", e.buf);
        free(e.buf);
    }
    sputf(expr, ")");
    return 0;
}

static int gen_typed(Gen *g, const json_t *sch, const char *type, const char *path, Str *expr) {
    if (!strcmp(type, "string")) return gen_string(g, sch, path, expr);
    if (!strcmp(type, "integer") || !strcmp(type, "number")) return gen_numeric(sch, path, type[0] == 'i', expr);
    if (!strcmp(type, "object")) return gen_object(g, sch, path, expr);
    if (!strcmp(type, "array")) return gen_array(g, sch, path, expr);
    static const char *const handled[] = {"type", NULL};
    if (check_keywords(sch, path, handled) != 0) return -1;
    if (!strcmp(type, "boolean")) return sputf(expr, "(\"true\" | \"false\")"), 0;
    if (!strcmp(type, "null")) return sputf(expr, "\"null\""), 0;
    return di_errorf("JSON Schema %s: unknown type '%s'", path, type);
}

static int gen_schema(Gen *g, const json_t *sch, const char *path, Str *expr) {
    if (++g->depth > DI_GRAMMAR_MAX_DEPTH) return di_errorf("JSON Schema %s: nested too deeply", path);
    int rc = 0;
    if (json_is_true(sch)) sputf(expr, "json_value");
    else if (!json_is_object(sch)) rc = di_errorf("JSON Schema %s: a schema must be an object or true", path);
    else if (json_object_get(sch, "$ref")) {
        const char *ref = json_string_value(json_object_get(sch, "$ref"));
        static const char *const handled[] = {"$ref", NULL};
        rc = !ref ? di_errorf("JSON Schema %s: $ref must be a string", path) : check_keywords(sch, path, handled);
        if (rc == 0) rc = gen_ref(g, ref, path, expr);
    } else if (json_object_get(sch, "const")) {
        static const char *const handled[] = {"const", "type", NULL};
        rc = check_keywords(sch, path, handled);
        if (rc == 0) rc = json_literal(expr, json_object_get(sch, "const"));
    } else if (json_object_get(sch, "enum")) {
        static const char *const handled[] = {"enum", "type", NULL};
        const json_t *list = json_object_get(sch, "enum");
        rc = check_keywords(sch, path, handled);
        if (rc == 0 && (!json_is_array(list) || !json_array_size(list)))
            rc = di_errorf("JSON Schema %s: enum must be a non-empty array", path);
        sputf(expr, "(");
        for (size_t i = 0; rc == 0 && i < json_array_size(list); i++) {
            if (i) sputf(expr, " | ");
            rc = json_literal(expr, json_array_get(list, i));
        }
        sputf(expr, ")");
    } else if (json_object_get(sch, "anyOf") || json_object_get(sch, "oneOf")) {
        const char *key = json_object_get(sch, "anyOf") ? "anyOf" : "oneOf";
        static const char *const handled[] = {"anyOf", "oneOf", NULL};
        rc = check_keywords(sch, path, handled);
        if (rc == 0 && json_object_get(sch, "anyOf") && json_object_get(sch, "oneOf"))
            rc = di_errorf("JSON Schema %s: anyOf together with oneOf is not supported", path);
        if (rc == 0) rc = gen_alternatives(g, json_object_get(sch, key), path, key, expr);
    } else if (json_object_get(sch, "allOf")) {
        const json_t *all = json_object_get(sch, "allOf");
        static const char *const handled[] = {"allOf", NULL};
        rc = check_keywords(sch, path, handled);
        if (rc == 0 && (!json_is_array(all) || json_array_size(all) != 1))
            rc = di_errorf("JSON Schema %s: unsupported keyword 'allOf' (only with one schema)", path);
        if (rc == 0) rc = gen_schema(g, json_array_get(all, 0), path, expr);
    } else {
        const json_t *type = json_object_get(sch, "type");
        if (!type) {
            static const char *const handled[] = {NULL};
            rc = check_keywords(sch, path, handled);
            if (rc == 0) sputf(expr, "json_value");
        } else if (json_is_string(type)) rc = gen_typed(g, sch, json_string_value(type), path, expr);
        else if (json_is_array(type) && json_array_size(type) > 0) {
            sputf(expr, "(");
            for (size_t i = 0; rc == 0 && i < json_array_size(type); i++) {
                const char *t = json_string_value(json_array_get(type, i));
                if (!t) rc = di_errorf("JSON Schema %s: type list entries must be strings", path);
                else {
                    sputf(expr, "%s(", i ? " | " : "");
                    rc = gen_typed(g, sch, t, path, expr);
                    sputf(expr, ")");
                }
            }
            sputf(expr, ")");
        } else rc = di_errorf("JSON Schema %s: type must be a string or a non-empty array", path);
    }
    g->depth--;
    if (rc == 0 && (expr->oom || g->out.oom)) rc = di_errorf("out of memory generating a grammar");
    return rc;
}

/* ---- the generator as a library (grammar_json.h): several schemas into one grammar ---- */

struct DiJsonGen {
    Gen g;
    char excluded[64]; /* more code points json_char leaves out, as class text */
};

DiJsonGen *di_json_gen_new(void) {
    DiJsonGen *jg = calloc(1, sizeof *jg);
    if (!jg) return di_errorf("out of memory"), NULL;
    return jg;
}

void di_json_gen_free(DiJsonGen *jg) {
    if (!jg) return;
    di_grules_free(&jg->g.pattern_rules);
    free(jg->g.out.buf);
    json_decref(jg->g.refs);
    free(jg);
}

int di_json_gen_value(DiJsonGen *jg, const json_t *root, const json_t *schema, const char *path, char **expr) {
    if (!jg || !root || !schema || !path || !expr) return di_errorf("JSON Schema generator: invalid argument");
    *expr = NULL;
    json_decref(jg->g.refs); /* $ref names are per root document; the rules already written stay */
    jg->g.refs = json_object();
    jg->g.root = (json_t *)root;
    Str e = {0};
    int rc = jg->g.refs ? gen_schema(&jg->g, schema, path, &e) : di_errorf("out of memory");
    jg->g.root = NULL;
    if (rc == 0 && e.oom) rc = di_errorf("out of memory generating a grammar");
    if (rc != 0) return free(e.buf), -1;
    *expr = e.buf;
    return 0;
}

int di_json_gen_exclude(DiJsonGen *jg, const char *class_text) {
    if (!jg || !class_text || strlen(class_text) >= sizeof jg->excluded || strpbrk(class_text, "]\n"))
        return di_errorf("JSON Schema generator: invalid excluded characters");
    snprintf(jg->excluded, sizeof jg->excluded, "%s", class_text);
    return 0;
}

int di_json_gen_rules(DiJsonGen *jg, const char *ebnf) {
    if (!jg || !ebnf) return di_errorf("JSON Schema generator: invalid argument");
    sputf(&jg->g.out, "%s", ebnf);
    return jg->g.out.oom ? di_errorf("out of memory generating a grammar") : 0;
}

DiGrammar *di_json_gen_build(DiJsonGen *jg, const char *root, char **ebnf_out) {
    if (ebnf_out) *ebnf_out = NULL;
    if (!jg || !root) return di_errorf("JSON Schema generator: invalid argument"), NULL;
    Gen *g = &jg->g;
    sputf(&g->out, "%s", BASE_RULES);
    sputf(&g->out, CHAR_RULE, jg->excluded);
    if (g->out.oom) return di_errorf("out of memory generating a grammar"), NULL;
    DiGRules rules = {0};
    DiGrammar *out = NULL;
    if (di_grammar_parse_ebnf(g->out.buf, g->out.len, &rules) != 0) {
        di_error_wrap("JSON Schema: generated grammar");
        goto done;
    }
    for (size_t i = 0; i < g->pattern_rules.n; i++) { /* move the pattern ASTs over */
        int rc = di_grules_add(&rules, g->pattern_rules.names[i], strlen(g->pattern_rules.names[i]), g->pattern_rules.bodies[i]);
        g->pattern_rules.bodies[i] = NULL;
        if (rc != 0) goto done;
    }
    out = di_grammar_build(&rules, root);
    if (out && ebnf_out) *ebnf_out = g->out.buf, g->out.buf = NULL, g->out.len = g->out.cap = 0;
done:
    di_grules_free(&rules);
    return out;
}

DiGrammar *di_grammar_compile_json_schema(const char *schema, size_t len, char **ebnf_out) {
    if (ebnf_out) *ebnf_out = NULL;
    if (!schema) return di_errorf("JSON Schema: NULL text"), NULL;
    json_t *doc = di_json_load_buffer(schema, len, "JSON Schema");
    if (!doc) return NULL;
    DiJsonGen *jg = di_json_gen_new();
    char *root = NULL, *line = NULL;
    DiGrammar *out = NULL;
    if (jg && di_json_gen_value(jg, doc, doc, "#", &root) == 0) {
        Str l = {0};
        sputf(&l, "root ::= %s\n", root);
        line = l.buf;
        /* the root rule first, as before: the EBNF text is the compile cache's debugging aid */
        Str all = {0};
        sputf(&all, "%s%s", line ? line : "", jg->g.out.buf ? jg->g.out.buf : "");
        if (l.oom || all.oom) di_errorf("out of memory generating a grammar");
        else {
            free(jg->g.out.buf);
            jg->g.out = all;
            all.buf = NULL;
            out = di_json_gen_build(jg, "root", ebnf_out);
        }
        free(all.buf);
    }
    free(root);
    free(line);
    di_json_gen_free(jg);
    json_decref(doc);
    return out;
}
