/* api_constraint.c — the output constraint of a request (what constrained decoding enforces),
 * derived as the official conversion's InferenceOptions.output_constraint: declared tools give
 * "tool_call" (any text or well-formed tool calls; "tool_call_required" when a call is
 * required or named) with the tool list as Chat Completions function tools; else a JSON
 * response format gives "json" (the schema as compact JSON, normalised when strict; "" for any
 * JSON value); else a regex response format gives "regex".  Plus vLLM's `structured_outputs`
 * extra (json, regex, grammar, choice), which the official conversion does not know.
 *
 * Why here: the derivation is the protocol layer's (recipe.md §4); the engine backend only
 * decides what it enforces (serve/backend_engine.c). */
#include "recipe/api_request.h"
#include "recipe/api_request_internal.h"
#include "recipe/dsml.h"

#include "base/error.h"
#include "base/json.h"
#include "base/mem.h"
#include "deepinfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int set(DiApiRequest *req, const char *kind, const char *text) {
    snprintf(req->constraint_kind, sizeof req->constraint_kind, "%s", kind);
    free(req->constraint);
    req->constraint = di_strdup(text);
    return req->constraint ? 0 : -1;
}

static int set_json(DiApiRequest *req, const char *kind, const json_t *value) {
    char *text = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text) return di_errorf("output constraint: out of memory");
    int rc = set(req, kind, text);
    free(text);
    return rc;
}

/* A tool's "strict" as the client wrote it (null when absent; Anthropic tools have none). */
static json_t *tool_strict(const json_t *body, DiApiProtocol protocol, const char *name) {
    if (protocol == DI_API_MESSAGES) return json_null();
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(body, "tools"), i, t) {
        const json_t *holder = protocol == DI_API_CHAT ? json_object_get(t, "function") : t;
        const char *n = json_string_value(json_object_get(holder, "name"));
        json_t *strict = json_object_get(holder, "strict");
        if (n && strcmp(n, name) == 0 && json_is_boolean(strict)) return json_incref(strict);
    }
    return json_null();
}

/* The tools as Chat Completions function tools, description and strict null when unset. */
static int tool_constraint(DiApiRequest *req, const json_t *tools, const json_t *body) {
    json_t *list = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function"), *desc = json_object_get(fn, "description");
        const char *name = json_string_value(json_object_get(fn, "name"));
        json_t *item = json_pack("{s:s, s:{s:O, s:O, s:O, s:o}}", "type", "function", "function", "name",
                                 json_object_get(fn, "name"), "description", desc ? desc : json_null(), "parameters",
                                 json_object_get(fn, "parameters"), "strict", tool_strict(body, req->protocol, name ? name : ""));
        if (!item || json_array_append_new(list, item) != 0) {
            json_decref(list);
            return di_errorf("output constraint: out of memory");
        }
    }
    int rc = set_json(req, req->tool_choice == DI_TOOL_CHOICE_REQUIRED ? "tool_call_required" : "tool_call", list);
    json_decref(list);
    return rc;
}

/* A json_schema format: its schema, normalised as a strict tool schema when strict. */
static int schema_constraint(DiApiRequest *req, const json_t *holder, const json_t *schema) {
    bool strict = false;
    if (di_api_tool_strict(holder, "json_schema", &strict) != 0) return -1;
    if (!strict || !json_is_object(schema)) return set_json(req, "json", schema);
    const char *name = json_string_value(json_object_get(holder, "name"));
    if (json_object_size(json_object_get(schema, "properties")) == 0) /* unlike a strict tool's top level */
        return di_errorf("An object with no properties is not allowed (strict json_schema '%s')", name ? name : "");
    json_t *norm = NULL;
    if (di_api_tool_schema(name ? name : "response_format", schema, true, &norm) != 0) return -1;
    int rc = set_json(req, "json", norm);
    json_decref(norm);
    return rc;
}

static int format_constraint(DiApiRequest *req, const json_t *body) {
    const json_t *rf = req->protocol == DI_API_CHAT ? json_object_get(body, "response_format")
                       : req->protocol == DI_API_RESPONSES ? json_object_get(json_object_get(body, "text"), "format")
                                                         : NULL;
    const char *type = json_string_value(json_object_get(rf, "type"));
    if (!type) return 0;
    if (strcmp(type, "json_object") == 0) return set(req, "json", "");
    if (strcmp(type, "json_schema") == 0) {
        const json_t *holder = req->protocol == DI_API_CHAT ? json_object_get(rf, "json_schema") : rf;
        return schema_constraint(req, holder, json_object_get(holder, "schema"));
    }
    if (strcmp(type, "regex") == 0) {
        const char *re = json_string_value(json_object_get(rf, "regex"));
        if (!re) return di_errorf("Invalid response_format: type 'regex' needs a string field `regex`");
        return set(req, "regex", re);
    }
    return 0;
}

/* vLLM's `choice`: the output is exactly one of the strings, as an EBNF alternation of
 * literals (backslash and quote escaped, control bytes as \xHH). */
static int choice_grammar(DiApiRequest *req, const json_t *choices) {
    if (!json_is_array(choices) || json_array_size(choices) == 0)
        return di_errorf("Invalid structured_outputs.choice: expected a non-empty array of strings");
    size_t cap = 16, i;
    json_t *c;
    json_array_foreach(choices, i, c) {
        if (!json_is_string(c) || json_string_length(c) == 0)
            return di_errorf("Invalid structured_outputs.choice[%zu]: expected a non-empty string", i);
        cap += 4 * json_string_length(c) + 5;
    }
    char *g = di_malloc(cap, "choice grammar");
    if (!g) return -1;
    size_t n = (size_t)snprintf(g, cap, "root ::= ");
    json_array_foreach(choices, i, c) {
        const unsigned char *s = (const unsigned char *)json_string_value(c);
        size_t len = json_string_length(c);
        n += (size_t)snprintf(g + n, cap - n, "%s\"", i ? " | " : "");
        for (size_t k = 0; k < len; k++) {
            if (s[k] == '\\' || s[k] == '"') g[n++] = '\\', g[n++] = (char)s[k];
            else if (s[k] < 0x20 || s[k] == 0x7F) n += (size_t)snprintf(g + n, cap - n, "\\x%02x", s[k]);
            else g[n++] = (char)s[k];
        }
        g[n++] = '"';
    }
    g[n] = '\0';
    req->so_type = DI_CONSTRAINT_EBNF;
    req->so_text = g;
    return 0;
}

/* vLLM's extra: {"json": schema | text} | {"regex"} | {"grammar"} | {"choice": [...]}, one key. */
static int vllm_structured_outputs(DiApiRequest *req, const json_t *so) {
    if (!so || json_is_null(so)) return 0;
    if (!json_is_object(so)) return di_errorf("Invalid structured_outputs: expected an object");
    static const char *const keys[] = {"json", "regex", "grammar", "choice", NULL};
    const char *key = NULL, *k;
    json_t *v;
    json_object_foreach((json_t *)so, k, v) {
        int known = -1;
        for (int i = 0; keys[i]; i++)
            if (strcmp(k, keys[i]) == 0) known = i;
        if (known < 0) return di_errorf("Invalid structured_outputs: unsupported key '%s' (supported: json, regex, grammar, choice)", k);
        if (json_is_null(v)) continue;
        if (key) return di_errorf("Invalid structured_outputs: give exactly one of json, regex, grammar, choice");
        key = keys[known];
    }
    if (!key) return di_errorf("Invalid structured_outputs: give one of json, regex, grammar, choice");
    v = json_object_get(so, key);
    if (strcmp(key, "json") == 0 && (json_is_object(v) || json_is_string(v))) {
        req->so_type = DI_CONSTRAINT_JSON_SCHEMA;
        req->so_text = json_is_string(v) ? di_strdup(json_string_value(v)) : json_dumps(v, JSON_COMPACT);
    } else if (strcmp(key, "choice") == 0) {
        return choice_grammar(req, v);
    } else if (json_is_string(v) && *json_string_value(v)) {
        req->so_type = strcmp(key, "regex") == 0 ? DI_CONSTRAINT_REGEX : DI_CONSTRAINT_EBNF;
        req->so_text = di_strdup(json_string_value(v));
    } else {
        return di_errorf("Invalid structured_outputs.%s: expected a non-empty string%s", key,
                         strcmp(key, "json") == 0 ? " or a schema object" : "");
    }
    return req->so_text ? 0 : di_errorf("structured_outputs: out of memory");
}

int di_api_derive_constraint(const json_t *body, DiApiRequest *req) {
    const json_t *tools = json_object_get(req->conversation, "tools");
    int rc = json_array_size(tools) ? tool_constraint(req, tools, body)
                                    : format_constraint(req, body);
    if (rc == 0) rc = vllm_structured_outputs(req, json_object_get(body, "structured_outputs"));
    if (rc == 0 && req->so_type && req->constraint_kind[0])
        rc = di_errorf("Invalid structured_outputs: the request already constrains its output (%s); give one",
                       strcmp(req->constraint_kind, "json") == 0 ? "response_format" : req->constraint_kind);
    return rc;
}

char *di_api_dsml_spec(const DiApiRequest *req) {
    if (!req || !req->constraint || strncmp(req->constraint_kind, "tool_call", 9) != 0)
        return di_errorf("DSML spec: the request has no tool-call constraint"), NULL;
    DiEncoding enc = DI_ENCODING_V41;
    const char *name = json_string_value(json_object_get(req->conversation, "encoding"));
    if (name && di_encoding_parse(name, &enc) != 0) return NULL;
    const DiDsmlDialect *d = di_dsml_dialect(enc);
    json_t *tools = di_json_load_buffer(req->constraint, strlen(req->constraint), "tool constraint");
    if (!tools) return NULL;
    bool required = strcmp(req->constraint_kind, "tool_call_required") == 0;
    json_t *spec = json_pack("{s:s, s:s, s:s, s:b, s:b, s:o}", "block", d->block, "invoke", d->invoke, "parameter",
                             d->parameter, "required", required, "opened", required, "tools", tools);
    char *text = spec ? json_dumps(spec, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(spec);
    if (!text) di_errorf("DSML spec: out of memory");
    return text;
}
