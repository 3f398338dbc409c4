/* api_request_nested.c — the fields each protocol accepts inside the request's nested objects
 * (stream_options, messages and their content parts, tools, tool_choice, response_format,
 * text, reasoning, thinking, metadata, ...).
 *
 * Why: the top-level list (api_request_fields.c) stops a dropped parameter only at the top; a
 * client that sets text.verbosity or a tool's strict flag wants its effect just as much.  So
 * every nested object the converters read has a shape here: each field is honoured, accepted
 * only at the value that asks for nothing (null always passes), or refused with a 400 naming
 * its full path (OpenAI "messages[0].name", Anthropic "messages.0.content.1.citations").
 * Objects whose discriminator (type / role) no shape names are left to the converter, which
 * refuses unknown types by name. */
#include "recipe/api_request_internal.h"

#include "base/error.h"
#include "base/json.h"

#include <stdio.h>
#include <string.h>

/* One field of a nested object.  only: NULL = any value (honoured, or a label); otherwise the
 * JSON values accepted, separated by '|'.  why: what the refusal says. */
typedef struct {
    const char *key;
    const char *only;
    const char *why;
} Field;

/* The objects at `at` ("a.b[].c": [] walks every element of an array) whose `kind`
 * ("type=text|": discriminator field = one of the values, an empty value matching a missing
 * field; NULL: every object there) have exactly these fields. */
typedef struct {
    const char *at;
    const char *kind;
    const Field *fields;
} Shape;

#define END {NULL, NULL, NULL}
#define NO_NAME {"name", "null", "participant names have no place in the model's template"}
/* "prefix": true continues the last assistant message (api_request.c); elsewhere only false */
#define NO_PREFIX {"prefix", "false", "only the last assistant message can be a prefix"}
/* json_schema's strict asks for enforced output: the schema is only shown, as the official
 * conversion does (tools' strict is honoured: their schemas are normalised, api_tool_schema.c) */
#define SCHEMA_FORMAT {"name", NULL, NULL}, {"description", NULL, NULL}, {"schema", NULL, NULL}, {"strict", NULL, NULL}
#define CACHE {"cache_control", NULL, NULL} /* a label: the prefix cache needs no breakpoints */
#define TEXT_BLOCK {"type", NULL, NULL}, {"text", NULL, NULL}, CACHE, {"citations", "[]", "citations are not supported"}

static const Field f_stream_options[] = {{"include_usage", NULL, NULL},
                                         {"include_obfuscation", "false", "stream events carry no obfuscation"},
                                         END};

static const Shape k_chat[] = {
    {"stream_options", NULL, f_stream_options},
    {"messages[]", "role=system|user",
     (const Field[]){{"role", NULL, NULL}, {"content", NULL, NULL}, NO_NAME, NO_PREFIX, END}},
    {"messages[]", "role=latest_reminder", (const Field[]){{"role", NULL, NULL}, {"content", NULL, NULL}, NO_PREFIX, END}},
    {"messages[]", "role=assistant",
     (const Field[]){{"role", NULL, NULL},
                     {"content", NULL, NULL},
                     {"reasoning_content", NULL, NULL},
                     {"tool_calls", NULL, NULL},
                     NO_NAME,
                     {"prefix", NULL, NULL},
                     {"refusal", "null", "a refusal has no place in the model's template"},
                     {"annotations", "[]", "annotations have no place in the model's template"},
                     {"audio", "null", "audio is not supported"},
                     {"function_call", "null", "function_call is deprecated: use tool_calls"},
                     END}},
    {"messages[]", "role=tool",
     (const Field[]){{"role", NULL, NULL}, {"content", NULL, NULL}, {"tool_call_id", NULL, NULL}, NO_NAME, NO_PREFIX,
                     END}},
    {"messages[].content[]", "type=text", (const Field[]){{"type", NULL, NULL}, {"text", NULL, NULL}, END}},
    {"messages[].tool_calls[]", NULL,
     (const Field[]){{"id", NULL, NULL}, {"type", "\"function\"", "only function tool calls are supported"},
                     {"function", NULL, NULL}, END}},
    {"messages[].tool_calls[].function", NULL, (const Field[]){{"name", NULL, NULL}, {"arguments", NULL, NULL}, END}},
    {"tools[]", NULL, (const Field[]){{"type", NULL, NULL}, {"function", NULL, NULL}, END}},
    {"tools[].function", NULL,
     (const Field[]){{"name", NULL, NULL}, {"description", NULL, NULL}, {"parameters", NULL, NULL}, {"strict", NULL, NULL},
                     END}},
    {"tool_choice", NULL,
     (const Field[]){{"type", "\"function\"", "only a named function choice is supported"}, {"function", NULL, NULL},
                     END}},
    {"tool_choice.function", NULL, (const Field[]){{"name", NULL, NULL}, END}},
    {"response_format", NULL,
     (const Field[]){{"type", "\"text\"|\"json_object\"|\"json_schema\"|\"regex\"",
                      "only text, json_object, json_schema and regex are supported"},
                     {"json_schema", NULL, NULL}, {"regex", NULL, NULL},
                     END}},
    {"response_format.json_schema", NULL, (const Field[]){SCHEMA_FORMAT, END}},
    {"thinking", NULL, (const Field[]){{"type", NULL, NULL}, {"budget_tokens", NULL, NULL}, END}},
    {NULL, NULL, NULL}};

static const Shape k_completions[] = {{"stream_options", NULL, f_stream_options}, {NULL, NULL, NULL}};

#define ITEM_IDS {"type", NULL, NULL}, {"id", NULL, NULL}, {"status", NULL, NULL} /* labels of earlier output */
static const Shape k_responses[] = {
    {"reasoning", NULL,
     (const Field[]){{"effort", NULL, NULL},
                     /* "auto" leaves the choice to the server, whose choice is the full reasoning text in
                      * the reasoning item's content instead of a summary (Codex sends it by default) */
                     {"summary", "\"auto\"",
                      "reasoning summaries are not produced (reasoning items carry the full text)"},
                     {"generate_summary", "\"auto\"", "reasoning summaries are not produced"},
                     END}},
    {"text", NULL,
     (const Field[]){{"format", NULL, NULL}, {"verbosity", "\"medium\"", "only the default verbosity is supported"},
                     END}},
    {"text.format", NULL,
     (const Field[]){{"type", "\"text\"|\"json_object\"|\"json_schema\"", "only text, json_object and json_schema are supported"},
                     SCHEMA_FORMAT, END}},
    {"input[]", "type=message|",
     (const Field[]){ITEM_IDS, {"role", NULL, NULL}, {"content", NULL, NULL}, END}},
    {"input[]", "type=function_call",
     (const Field[]){ITEM_IDS, {"call_id", NULL, NULL}, {"name", NULL, NULL}, {"arguments", NULL, NULL}, END}},
    {"input[]", "type=custom_tool_call",
     (const Field[]){ITEM_IDS, {"call_id", NULL, NULL}, {"name", NULL, NULL}, {"input", NULL, NULL}, END}},
    {"input[]", "type=function_call_output|custom_tool_call_output",
     (const Field[]){ITEM_IDS, {"call_id", NULL, NULL}, {"output", NULL, NULL}, END}},
    {"input[]", "type=reasoning",
     (const Field[]){ITEM_IDS, {"summary", NULL, NULL}, {"content", NULL, NULL}, {"encrypted_content", NULL, NULL},
                     END}},
    {"input[].content[]", "type=input_text|text|reasoning_text",
     (const Field[]){{"type", NULL, NULL}, {"text", NULL, NULL}, END}},
    {"input[].content[]", "type=output_text", /* earlier output, with its annotations and logprobs */
     (const Field[]){{"type", NULL, NULL}, {"text", NULL, NULL}, {"annotations", NULL, NULL}, {"logprobs", NULL, NULL},
                     END}},
    {"tools[]", "type=function",
     (const Field[]){{"type", NULL, NULL}, {"name", NULL, NULL}, {"description", NULL, NULL},
                     {"parameters", NULL, NULL}, {"strict", NULL, NULL}, END}},
    {"tools[]", "type=custom",
     (const Field[]){{"type", NULL, NULL}, {"name", NULL, NULL}, {"description", NULL, NULL},
                     {"format", "{\"type\": \"text\"}", "only free-text custom tools are supported"}, END}},
    {"tool_choice", NULL, (const Field[]){{"type", NULL, NULL}, {"name", NULL, NULL}, END}},
    {NULL, NULL, NULL}};

static const Field f_text_block[] = {TEXT_BLOCK, END};
static const Shape k_messages[] = {
    {"thinking", NULL,
     (const Field[]){{"type", NULL, NULL}, {"budget_tokens", NULL, NULL},
                     {"display", "null", "the thinking text is always returned"}, END}},
    {"metadata", NULL, (const Field[]){{"user_id", NULL, NULL}, END}},
    {"output_config", NULL,
     (const Field[]){{"effort", NULL, NULL}, {"format", "null", "structured outputs are not supported"}, END}},
    {"system[]", "type=text", f_text_block},
    {"tools[]", "type=custom|",
     (const Field[]){{"type", NULL, NULL}, {"name", NULL, NULL}, {"description", NULL, NULL},
                     {"input_schema", NULL, NULL}, CACHE, END}},
    {"tool_choice", NULL,
     (const Field[]){{"type", NULL, NULL}, {"name", NULL, NULL}, {"disable_parallel_tool_use", NULL, NULL}, END}},
    {"messages[]", NULL, (const Field[]){{"role", NULL, NULL}, {"content", NULL, NULL}, END}},
    {"messages[].content[]", "type=text", f_text_block},
    {"messages[].content[]", "type=thinking",
     (const Field[]){{"type", NULL, NULL}, {"thinking", NULL, NULL}, {"signature", NULL, NULL}, END}},
    {"messages[].content[]", "type=tool_use",
     (const Field[]){{"type", NULL, NULL}, {"id", NULL, NULL}, {"name", NULL, NULL}, {"input", NULL, NULL}, CACHE,
                     END}},
    {"messages[].content[]", "type=tool_result",
     (const Field[]){{"type", NULL, NULL}, {"tool_use_id", NULL, NULL}, {"content", NULL, NULL}, CACHE,
                     {"is_error", "false", "tool errors are not marked in the model's template"}, END}},
    {"messages[].content[].content[]", "type=text", f_text_block},
    {NULL, NULL, NULL}};

/* Whether `alts` ("a|b|", '|'-separated, an empty alternative matching NULL) holds s. */
static bool one_of(const char *alts, const char *s) {
    for (const char *p = alts;;) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (s ? strlen(s) == n && strncmp(p, s, n) == 0 : n == 0) return true;
        if (!bar) return false;
        p = bar + 1;
    }
}

static bool kind_matches(const json_t *obj, const char *kind) {
    if (!kind) return true;
    const char *eq = strchr(kind, '=');
    char field[16];
    snprintf(field, sizeof field, "%.*s", (int)(eq - kind), kind);
    json_t *v = json_object_get(obj, field);
    if (v && !json_is_string(v)) return false; /* the converter names the bad discriminator */
    return one_of(eq + 1, json_string_value(v));
}

/* Whether v equals one of the JSON alternatives of `only`. */
static bool allowed_value(const json_t *v, const char *only) {
    if (json_is_null(v)) return true;
    char alt[96];
    for (const char *p = only;;) {
        const char *bar = strchr(p, '|');
        snprintf(alt, sizeof alt, "%.*s", (int)(bar ? (size_t)(bar - p) : strlen(p)), p);
        json_t *want = json_loads(alt, JSON_DECODE_ANY, NULL);
        bool same = want && json_equal((json_t *)v, want);
        json_decref(want);
        if (same) return true;
        if (!bar) return false;
        p = bar + 1;
    }
}

static int check_object(const json_t *obj, const Shape *s, const char *path, bool anthropic) {
    if (!json_is_object(obj) || !kind_matches(obj, s->kind)) return 0;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        const Field *f = s->fields;
        while (f->key && strcmp(f->key, key) != 0) f++;
        if (!f->key)
            return anthropic ? di_errorf("%s.%s: Extra inputs are not permitted", path, key)
                             : di_errorf("Unrecognized request argument supplied: %s.%s", path, key);
        if (f->only && !allowed_value(v, f->only))
            return di_errorf("Invalid %s.%s: %s (accepted: %s)", path, key, f->why, f->only);
    }
    return 0;
}

/* Walk `at` from v, `path` holding the way so far (as the protocol spells it). */
static int visit(const json_t *v, const char *at, char *path, size_t len, const Shape *s, bool anthropic) {
    if (!*at) return check_object(v, s, path, anthropic);
    const char *end = strchr(at, '.');
    size_t n = end ? (size_t)(end - at) : strlen(at);
    bool each = n > 2 && at[n - 2] == '[';
    size_t name_len = each ? n - 2 : n;
    const char *rest = end ? end + 1 : at + n;
    char name[48];
    snprintf(name, sizeof name, "%.*s", (int)name_len, at);
    json_t *child = json_object_get(v, name);
    if (!child) return 0;
    int w = snprintf(path + len, 256 - len, "%s%s", len ? "." : "", name);
    if (w < 0 || (size_t)w >= 256 - len) return di_errorf("request field path too long at %s", name);
    len += (size_t)w;
    if (!each) return visit(child, rest, path, len, s, anthropic);
    if (!json_is_array(child)) return 0; /* the converter names the bad type */
    size_t i;
    json_t *item;
    json_array_foreach(child, i, item) {
        int k = snprintf(path + len, 256 - len, anthropic ? ".%zu" : "[%zu]", i);
        if (k < 0 || (size_t)k >= 256 - len) return di_errorf("request field path too long at %s", name);
        if (visit(item, rest, path, len + (size_t)k, s, anthropic) != 0) return -1;
    }
    path[len] = '\0';
    return 0;
}

int di_api_check_nested(const json_t *body, DiApiProtocol protocol) {
    const Shape *shapes = protocol == DI_API_CHAT          ? k_chat
                          : protocol == DI_API_COMPLETIONS ? k_completions
                          : protocol == DI_API_RESPONSES   ? k_responses
                                                           : k_messages;
    for (const Shape *s = shapes; s->at; s++) {
        char path[256] = "";
        if (visit(body, s->at, path, 0, s, protocol == DI_API_MESSAGES) != 0) return -1;
    }
    return 0;
}
