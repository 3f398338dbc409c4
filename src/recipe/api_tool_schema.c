/* api_tool_schema.c — the parameters schema of a declared tool, as the official conversion
 * (deepseek-recipe 0.2.0, measured) takes it before the renderer writes it into the prompt.
 *
 * A tool without "strict" keeps its schema as given once it is an object schema ("type":
 * "object"); no schema at all is written as {}.  A strict tool's schema is rebuilt from a
 * closed subset of JSON Schema, because the model was taught that subset: each node is one
 * of a typed schema, an anyOf of nodes or a $ref; only the keywords of its type survive, in a
 * fixed order; every object closes (additionalProperties false) and requires all of its
 * properties.  A schema outside the subset is refused rather than silently narrowed. */
#include "recipe/api_request_internal.h"

#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How a JSON value reads in a type error ("integer `5`", "a sequence", ...). */
static void describe(const json_t *v, char *buf, size_t size) {
    switch (json_typeof(v)) {
    case JSON_INTEGER: snprintf(buf, size, "integer `%lld`", (long long)json_integer_value(v)); break;
    case JSON_REAL: snprintf(buf, size, "floating point `%g`", json_real_value(v)); break;
    case JSON_STRING: snprintf(buf, size, "string \"%.60s\"", json_string_value(v)); break;
    case JSON_TRUE: snprintf(buf, size, "boolean `true`"); break;
    case JSON_FALSE: snprintf(buf, size, "boolean `false`"); break;
    case JSON_ARRAY: snprintf(buf, size, "sequence"); break;
    case JSON_OBJECT: snprintf(buf, size, "map"); break;
    default: snprintf(buf, size, "null"); break;
    }
}

/* ---- strict schemas ------------------------------------------------------------------ */

typedef struct {
    const char *tool; /* the function's name, for errors */
} Strict;

static int bad(const Strict *st, const char *detail) {
    return di_errorf("Invalid tool parameters schema of strict function '%s': %s", st->tool, detail);
}

static int bad_type(const Strict *st, const char *key, const json_t *v, const char *expected) {
    char what[96], detail[192];
    describe(v, what, sizeof what);
    snprintf(detail, sizeof detail, "field `%s`: invalid type: %s, expected %s", key, what, expected);
    return bad(st, detail);
}

/* Present and not null (the official parser reads a null keyword as absent). */
static const json_t *field(const json_t *s, const char *key) {
    const json_t *v = json_object_get(s, key);
    return v && !json_is_null(v) ? v : NULL;
}

typedef enum { KIND_STRING, KIND_I64, KIND_NUMBER } Kind;

/* Copy keyword `key` of `s` into `out` when present, after checking its kind. */
static int copy_keyword(const Strict *st, const json_t *s, const char *key, Kind kind, json_t *out) {
    const json_t *v = field(s, key);
    if (!v) return 0;
    if (kind == KIND_STRING && !json_is_string(v)) return bad_type(st, key, v, "a string");
    if (kind == KIND_I64 && !json_is_integer(v)) return bad_type(st, key, v, "i64");
    if (kind == KIND_NUMBER && !json_is_number(v)) return bad_type(st, key, v, "a JSON number");
    return json_object_set_new(out, key, json_deep_copy(v)) == 0 ? 0 : di_errorf("tools: out of memory");
}

static json_t *strict_node(const Strict *st, const json_t *s, bool top);

static int string_keywords(const Strict *st, const json_t *s, json_t *out) {
    static const char *const formats[] = {"email", "hostname", "ipv4", "ipv6", "uuid"};
    if (copy_keyword(st, s, "pattern", KIND_STRING, out) != 0) return -1;
    const json_t *format = field(s, "format");
    if (format) {
        if (!json_is_string(format)) return bad_type(st, "format", format, "a string");
        bool known = false;
        for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) known = known || !strcmp(json_string_value(format), formats[i]);
        if (!known) return bad(st, "field `format`: unknown variant, expected one of `email`, `hostname`, `ipv4`, `ipv6`, `uuid`");
        json_object_set(out, "format", (json_t *)format);
    }
    const json_t *values = field(s, "enum");
    if (!values) return 0;
    if (!json_is_array(values)) return bad_type(st, "enum", values, "a sequence");
    size_t i;
    const json_t *v;
    json_array_foreach(values, i, v) if (!json_is_string(v)) return bad_type(st, "enum", v, "a string");
    return json_object_set_new(out, "enum", json_deep_copy(values));
}

static int number_keywords(const Strict *st, const json_t *s, bool integer, json_t *out) {
    static const char *const keys[] = {"const", "default", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                       "multipleOf"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (copy_keyword(st, s, keys[i], integer ? KIND_I64 : KIND_NUMBER, out) != 0) return -1;
    return 0;
}

/* additionalProperties may only say false; required must name every property once. */
static int object_closure(const Strict *st, const json_t *s, const json_t *props, json_t *out) {
    const json_t *extra = field(s, "additionalProperties");
    if (extra && !json_is_boolean(extra)) return bad_type(st, "additionalProperties", extra, "a boolean");
    if (json_is_true(extra)) return bad(st, "additionalProperties should not be true");
    const json_t *required = field(s, "required");
    if (required) {
        if (!json_is_array(required)) return bad_type(st, "required", required, "a sequence");
        size_t i, j;
        const json_t *r;
        json_array_foreach(required, i, r) {
            if (!json_is_string(r)) return bad_type(st, "required", r, "a string");
            const char *name = json_string_value(r);
            for (j = 0; j < i; j++)
                if (!strcmp(json_string_value(json_array_get(required, j)), name))
                    return di_errorf("Duplicate required property '%s' (strict function '%s')", name, st->tool);
            if (!json_object_get(props, name))
                return di_errorf("Required property '%s' not found in object (strict function '%s')", name, st->tool);
        }
        if (json_array_size(required) != json_object_size(props))
            return di_errorf("Required properties must match all properties in the object (strict function '%s')", st->tool);
    }
    json_t *all = json_array();
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)props, key, v) json_array_append_new(all, json_string(key));
    json_object_set_new(out, "additionalProperties", json_false());
    return json_object_set_new(out, "required", all);
}

static int object_keywords(const Strict *st, const json_t *s, bool top, json_t *out) {
    const json_t *props = field(s, "properties");
    if (props && !json_is_object(props)) return bad_type(st, "properties", props, "a map");
    if (!top && json_object_size(props) == 0)
        return di_errorf("An object with no properties is not allowed (strict function '%s')", st->tool);
    json_t *copy = json_object();
    json_object_set_new(out, "properties", copy);
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)props, key, v) {
        json_t *n = strict_node(st, v, false);
        if (!n) return -1;
        json_object_set_new(copy, key, n);
    }
    return object_closure(st, s, copy, out);
}

/* A node with "type": its type's keywords in the official order, description last but for
 * the scalar types, where it follows the type. */
static int typed_node(const Strict *st, const json_t *s, const json_t *type, bool top, json_t *out) {
    static const char *const scalar[] = {"string", "number", "integer", "boolean", "null"};
    json_object_set(out, "type", (json_t *)type);
    if (json_is_array(type)) { /* a union of scalar types keeps only its description */
        size_t i;
        const json_t *t;
        json_array_foreach(type, i, t) {
            bool ok = false;
            for (size_t k = 0; k < 5; k++) ok = ok || (json_is_string(t) && !strcmp(json_string_value(t), scalar[k]));
            if (!ok) return bad(st, "field `type`: unknown variant, expected one of `string`, `number`, `integer`, `boolean`, `null`");
        }
        return copy_keyword(st, s, "description", KIND_STRING, out);
    }
    if (!json_is_string(type)) return bad_type(st, "type", type, "a string or a sequence");
    const char *t = json_string_value(type);
    bool composite = !strcmp(t, "array") || !strcmp(t, "object"); /* description after their parts */
    if (!composite && copy_keyword(st, s, "description", KIND_STRING, out) != 0) return -1;
    if (!strcmp(t, "string")) return string_keywords(st, s, out);
    if (!strcmp(t, "integer") || !strcmp(t, "number")) return number_keywords(st, s, t[0] == 'i', out);
    if (!strcmp(t, "boolean") || !strcmp(t, "null")) return 0;
    if (!strcmp(t, "array")) {
        if (!json_object_get(s, "items")) return bad(st, "missing field `items`");
        json_t *items = strict_node(st, json_object_get(s, "items"), false);
        if (!items) return -1;
        json_object_set_new(out, "items", items);
    } else if (!strcmp(t, "object")) {
        if (object_keywords(st, s, top, out) != 0) return -1;
    } else {
        return bad(st, "field `type`: unknown variant, expected one of `object`, `string`, `number`, `integer`, "
                       "`boolean`, `array`, `null`");
    }
    return copy_keyword(st, s, "description", KIND_STRING, out);
}

static json_t *strict_node(const Strict *st, const json_t *s, bool top) {
    const json_t *type = field(s, "type"), *any = field(s, "anyOf"), *ref = field(s, "$ref");
    if (!json_is_object(s) || (!type && !any && !ref)) {
        bad(st, "one of `type`, `anyOf`, `$ref` field is required");
        return NULL;
    }
    json_t *out = json_object();
    int rc = 0;
    if (type) {
        rc = typed_node(st, s, type, top, out);
    } else if (any) {
        json_t *list = json_array();
        json_object_set_new(out, "anyOf", list);
        if (!json_is_array(any)) rc = bad_type(st, "anyOf", any, "a sequence");
        size_t i;
        const json_t *a;
        json_array_foreach(any, i, a) {
            json_t *n = rc == 0 ? strict_node(st, a, false) : NULL;
            if (!n) { rc = -1; break; }
            json_array_append_new(list, n);
        }
        if (rc == 0) rc = copy_keyword(st, s, "description", KIND_STRING, out);
    } else {
        rc = json_is_string(ref) ? json_object_set(out, "$ref", (json_t *)ref) : bad_type(st, "$ref", ref, "a string");
    }
    if (rc != 0) {
        json_decref(out);
        return NULL;
    }
    return out;
}

/* ---- entry ----------------------------------------------------------------------------- */

/* A schema without strict: any JSON Schema of type object, kept as given. */
static int plain_schema(const char *tool, const json_t *parameters) {
    if (!json_is_object(parameters)) {
        char what[96];
        describe(parameters, what, sizeof what);
        return di_errorf("Invalid schema for function '%s': %s is not of types \"boolean\", \"object\"", tool, what);
    }
    const json_t *type = json_object_get(parameters, "type");
    if (!json_is_string(type) || strcmp(json_string_value(type), "object") != 0) {
        char *got = type ? json_dumps(type, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
        int rc = di_errorf("Invalid schema for function '%s': schema must be a JSON Schema of 'type: \"object\"', got "
                           "'type: %s'.", tool, got ? got : "null");
        free(got);
        return rc;
    }
    const json_t *props = json_object_get(parameters, "properties");
    if (props && !json_is_object(props))
        return di_errorf("Invalid schema for function '%s': properties is not of type \"object\"", tool);
    return 0;
}

int di_api_tool_schema(const char *tool, const json_t *parameters, bool strict, json_t **out) {
    *out = NULL;
    if (!tool) return di_errorf("tool schema: no tool name");
    if (parameters && json_is_null(parameters)) parameters = NULL;
    if (!strict) {
        if (parameters && plain_schema(tool, parameters) != 0) return -1;
        *out = parameters ? json_deep_copy(parameters) : json_object();
        return *out ? 0 : di_errorf("tools: out of memory");
    }
    json_t *empty = parameters ? NULL : json_pack("{s:s}", "type", "object");
    Strict st = {tool};
    *out = strict_node(&st, parameters ? parameters : empty, true);
    json_decref(empty);
    if (!*out) return -1;
    if (!json_is_string(json_object_get(*out, "type")) || strcmp(json_string_value(json_object_get(*out, "type")), "object")) {
        json_decref(*out);
        *out = NULL;
        return di_errorf("The top level of the function parameters schema must be an object (strict function '%s')", tool);
    }
    return 0;
}

int di_api_tool_strict(const json_t *obj, const char *field_name, bool *strict) {
    const json_t *v = json_object_get(obj, "strict");
    *strict = json_is_true(v);
    if (v && !json_is_null(v) && !json_is_boolean(v))
        return di_errorf("Invalid %s.strict: expected a boolean, got %s", field_name, di_api_type_name(v));
    return 0;
}

int di_api_tools_strict_agree(size_t n_strict, size_t n_tools) {
    if (n_strict > 0 && n_strict < n_tools) return di_errorf("Cannot use strict tool with non-strict tool in the same request");
    return 0;
}
