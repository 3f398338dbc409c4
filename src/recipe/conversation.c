/* conversation.c — JSON -> DiConversation (see conversation.h).  Owns validation of the
 * conversation shape: every error names the field it is about, so a bad request is explained
 * to the client rather than rendered into a wrong prompt. */
#include "recipe/conversation.h"

#include "base/error.h"
#include "base/json.h"
#include "base/mem.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CTX_MAX 160

/* Format a field path for error messages (truncation is harmless: it only shortens a message). */
__attribute__((format(printf, 3, 4))) static void ctxf(char *buf, size_t size, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, size, fmt, ap);
    va_end(ap);
}

void di_conversation_init(DiConversation *conv) {
    if (!conv) return;
    memset(conv, 0, sizeof *conv);
    conv->encoding = DI_ENCODING_V41;
    conv->thinking = true; /* recipe Conversation default: thinking on */
    conv->drop_thinking = true;
}

static void free_message(DiMessage *m) {
    free(m->content);
    free(m->reasoning_content);
    free(m->tool_call_id);
    for (size_t i = 0; i < m->n_tool_calls; i++) {
        free(m->tool_calls[i].id);
        free(m->tool_calls[i].name);
        free(m->tool_calls[i].arguments);
    }
    free(m->tool_calls);
}

void di_conversation_free(DiConversation *conv) {
    if (!conv) return;
    for (size_t i = 0; i < conv->n_messages; i++) free_message(&conv->messages[i]);
    free(conv->messages);
    for (size_t i = 0; i < conv->n_tools; i++) {
        free(conv->tools[i].name);
        free(conv->tools[i].description);
        if (conv->tools[i].parameters) json_decref(conv->tools[i].parameters);
    }
    free(conv->tools);
    if (conv->response_schema) json_decref(conv->response_schema);
    di_conversation_init(conv);
}

const char *di_role_name(DiRole role) {
    switch (role) {
    case DI_ROLE_SYSTEM: return "system";
    case DI_ROLE_USER: return "user";
    case DI_ROLE_ASSISTANT: return "assistant";
    case DI_ROLE_TOOL: return "tool";
    case DI_ROLE_LATEST_REMINDER: return "latest_reminder";
    case DI_ROLE_DEVELOPER: return "developer";
    }
    return "?";
}

int di_encoding_parse(const char *name, DiEncoding *out) {
    if (!name || !out) return di_errorf("encoding: missing");
    if (strcmp(name, "v4") == 0) *out = DI_ENCODING_V4;
    else if (strcmp(name, "v4_0731") == 0 || strcmp(name, "v4-0731") == 0) *out = DI_ENCODING_V4_0731;
    else if (strcmp(name, "v41") == 0 || strcmp(name, "v4.1") == 0) *out = DI_ENCODING_V41;
    else return di_errorf("encoding: unknown value \"%s\" (expected v4, v4-0731 or v41)", name);
    return 0;
}

/* A copy of an optional string field; NULL stays NULL (status 1). */
static int dup_string(const json_t *obj, const char *ctx, const char *key, bool required, char **out) {
    const char *s = NULL;
    int rc = di_json_string(obj, ctx, key, required, &s);
    if (rc != 0) return rc;
    *out = di_strdup(s);
    return *out ? 0 : -1;
}

/* "content": a string, null, or an array of {"type":"text","text":...} parts joined "\n\n"
 * (the join the protocol converters use for multi-part text, §4). */
static int read_content(const json_t *msg, const char *ctx, char **out) {
    json_t *v = json_object_get(msg, "content");
    if (!v || json_is_null(v)) {
        *out = di_strdup("");
        return *out ? 0 : -1;
    }
    if (json_is_string(v)) {
        *out = di_strdup(json_string_value(v));
        return *out ? 0 : -1;
    }
    if (!json_is_array(v))
        return di_errorf("%s.content: expected a string or an array of text parts, got %s", ctx,
                         di_json_type_name(v));
    size_t total = 1, idx;
    json_t *part;
    char pctx[CTX_MAX];
    json_array_foreach(v, idx, part) {
        ctxf(pctx, sizeof pctx, "%s.content[%zu]", ctx, idx);
        const char *type = NULL, *text = NULL;
        if (di_json_string(part, pctx, "type", true, &type) != 0) return -1;
        if (strcmp(type, "text") != 0)
            return di_errorf("%s.type: \"%s\" parts are not supported (only \"text\")", pctx, type);
        if (di_json_string(part, pctx, "text", true, &text) != 0) return -1;
        total += strlen(text) + 2;
    }
    char *buf = di_malloc(total, "message content");
    if (!buf) return -1;
    size_t len = 0;
    json_array_foreach(v, idx, part) {
        const char *text = json_string_value(json_object_get(part, "text"));
        if (idx > 0) { memcpy(buf + len, "\n\n", 2); len += 2; }
        size_t n = strlen(text);
        memcpy(buf + len, text, n);
        len += n;
    }
    buf[len] = '\0';
    *out = buf;
    return 0;
}

static int parse_role(const char *s, const char *ctx, DiRole *out) {
    static const struct { const char *name; DiRole role; } roles[] = {
        {"system", DI_ROLE_SYSTEM}, {"user", DI_ROLE_USER}, {"assistant", DI_ROLE_ASSISTANT},
        {"tool", DI_ROLE_TOOL}, {"latest_reminder", DI_ROLE_LATEST_REMINDER},
        {"developer", DI_ROLE_DEVELOPER},
    };
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
        if (strcmp(s, roles[i].name) == 0) { *out = roles[i].role; return 0; }
    return di_errorf("%s.role: unknown role \"%s\"", ctx, s);
}

static int parse_task(const char *s, const char *ctx, DiTask *out) {
    static const struct { const char *name; DiTask task; } tasks[] = {
        {"action", DI_TASK_ACTION}, {"query", DI_TASK_QUERY}, {"authority", DI_TASK_AUTHORITY},
        {"domain", DI_TASK_DOMAIN}, {"title", DI_TASK_TITLE}, {"read_url", DI_TASK_READ_URL},
    };
    for (size_t i = 0; i < sizeof tasks / sizeof tasks[0]; i++)
        if (strcmp(s, tasks[i].name) == 0) { *out = tasks[i].task; return 0; }
    return di_errorf("%s.task: unknown task \"%s\"", ctx, s);
}

/* Tool call arguments: JSON text as given, or an object serialised compactly. */
static int read_arguments(const json_t *fn, const char *ctx, char **out) {
    json_t *v = json_object_get(fn, "arguments");
    if (!v || json_is_null(v)) {
        *out = di_strdup("{}");
        return *out ? 0 : -1;
    }
    if (json_is_string(v)) {
        *out = di_strdup(json_string_value(v));
        return *out ? 0 : -1;
    }
    if (json_is_object(v)) {
        *out = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER);
        return *out ? 0 : di_errorf("%s.arguments: cannot serialise", ctx);
    }
    return di_errorf("%s.arguments: expected a JSON string or an object, got %s", ctx, di_json_type_name(v));
}

static int read_tool_calls(const json_t *msg, const char *ctx, DiMessage *m) {
    json_t *arr = NULL;
    int rc = di_json_array(msg, ctx, "tool_calls", false, &arr);
    if (rc < 0) return -1;
    if (rc == 1 || json_array_size(arr) == 0) return 0;
    m->tool_calls = di_calloc(json_array_size(arr), sizeof *m->tool_calls, "tool calls");
    if (!m->tool_calls) return -1;
    size_t idx;
    json_t *call;
    char cctx[CTX_MAX], fctx[CTX_MAX];
    json_array_foreach(arr, idx, call) {
        ctxf(cctx, sizeof cctx, "%s.tool_calls[%zu]", ctx, idx);
        DiToolCall *tc = &m->tool_calls[m->n_tool_calls++];
        if (dup_string(call, cctx, "id", false, &tc->id) < 0) return -1;
        if (!tc->id && !(tc->id = di_strdup(""))) return -1;
        json_t *fn = NULL;
        /* OpenAI shape {"function": {...}}, or the flat {"name", "arguments"}. */
        if (di_json_object(call, cctx, "function", false, &fn) < 0) return -1;
        const json_t *src = fn ? fn : call;
        ctxf(fctx, sizeof fctx, fn ? "%s.function" : "%s", cctx);
        if (dup_string(src, fctx, "name", true, &tc->name) != 0) return -1;
        if (read_arguments(src, fctx, &tc->arguments) != 0) return -1;
    }
    return 0;
}

static int read_tool_def(const json_t *t, const char *ctx, DiToolDef *out) {
    json_t *fn = NULL;
    if (di_json_object(t, ctx, "function", false, &fn) < 0) return -1;
    const json_t *src = fn ? fn : t;
    char fctx[CTX_MAX];
    ctxf(fctx, sizeof fctx, fn ? "%s.function" : "%s", ctx);
    if (dup_string(src, fctx, "name", true, &out->name) != 0) return -1;
    if (out->name[0] == '\0') return di_errorf("%s.name: empty tool name", fctx);
    if (dup_string(src, fctx, "description", false, &out->description) < 0) return -1;
    json_t *params = json_object_get(src, "parameters");
    if (params && !json_is_null(params)) out->parameters = json_incref(params);
    return 0;
}

static int read_tools(const json_t *arr, const char *ctx, DiConversation *conv) {
    if (!json_is_array(arr)) return di_errorf("%s: expected an array, got %s", ctx, di_json_type_name(arr));
    size_t n = json_array_size(arr);
    if (n == 0) return 0;
    DiToolDef *grown = di_realloc_array(conv->tools, conv->n_tools + n, sizeof *grown, "tool definitions");
    if (!grown) return -1;
    conv->tools = grown;
    size_t idx;
    json_t *t;
    char tctx[CTX_MAX];
    json_array_foreach(arr, idx, t) {
        ctxf(tctx, sizeof tctx, "%s[%zu]", ctx, idx);
        DiToolDef *d = &conv->tools[conv->n_tools++];
        memset(d, 0, sizeof *d);
        if (read_tool_def(t, tctx, d) != 0) return -1;
    }
    return 0;
}

/* "text", "json_object", or {"type": ..., "json_schema": {"schema": S}} for json_schema, whose
 * schema (an object or a boolean, as JSON Schema allows) the prompt shows. */
static int read_response_format(const json_t *v, const char *ctx, DiConversation *conv) {
    const char *type = NULL;
    if (json_is_string(v)) type = json_string_value(v);
    else if (json_is_object(v)) {
        if (di_json_string(v, ctx, "type", true, &type) != 0) return -1;
    } else
        return di_errorf("%s: expected a string or an object, got %s", ctx, di_json_type_name(v));
    if (strcmp(type, "text") == 0) conv->response_format = DI_FORMAT_TEXT;
    else if (strcmp(type, "json_object") == 0) conv->response_format = DI_FORMAT_JSON_OBJECT;
    else if (strcmp(type, "json_schema") == 0) {
        json_t *schema = json_object_get(json_object_get(v, "json_schema"), "schema");
        if (!json_is_object(schema) && !json_is_boolean(schema))
            return di_errorf("%s.json_schema.schema: a JSON Schema (an object or a boolean) is required for json_schema", ctx);
        if (conv->response_schema) json_decref(conv->response_schema);
        conv->response_schema = json_deep_copy(schema);
        if (!conv->response_schema) return di_errorf("%s: out of memory", ctx);
        conv->response_format = DI_FORMAT_JSON_SCHEMA;
    } else
        return di_errorf("%s: unsupported response format \"%s\"", ctx, type);
    return 0;
}

static int read_message(const json_t *msg, size_t idx, DiConversation *conv, DiMessage *m) {
    char ctx[CTX_MAX];
    ctxf(ctx, sizeof ctx, "messages[%zu]", idx);
    if (!json_is_object(msg)) return di_errorf("%s: expected an object, got %s", ctx, di_json_type_name(msg));
    const char *role = NULL, *task = NULL;
    if (di_json_string(msg, ctx, "role", true, &role) != 0) return -1;
    if (parse_role(role, ctx, &m->role) != 0) return -1;
    if (read_content(msg, ctx, &m->content) != 0) return -1;
    int rc = di_json_string(msg, ctx, "task", false, &task);
    if (rc < 0 || (rc == 0 && parse_task(task, ctx, &m->task) != 0)) return -1;
    if (m->role == DI_ROLE_ASSISTANT) {
        if (dup_string(msg, ctx, "reasoning_content", false, &m->reasoning_content) < 0) return -1;
        if (read_tool_calls(msg, ctx, m) != 0) return -1;
        if (di_json_bool(msg, ctx, "prefix", false, &m->prefix) < 0) return -1;
    }
    if (m->role == DI_ROLE_TOOL && dup_string(msg, ctx, "tool_call_id", false, &m->tool_call_id) < 0) return -1;
    if (m->role == DI_ROLE_SYSTEM) {
        char sub[CTX_MAX];
        json_t *tools = json_object_get(msg, "tools");
        ctxf(sub, sizeof sub, "%s.tools", ctx);
        if (tools && !json_is_null(tools) && read_tools(tools, sub, conv) != 0) return -1;
        json_t *rf = json_object_get(msg, "response_format");
        ctxf(sub, sizeof sub, "%s.response_format", ctx);
        if (rf && !json_is_null(rf) && read_response_format(rf, sub, conv) != 0) return -1;
    }
    return 0;
}

/* reasoning_effort: a protocol name (§2.4 mapping) or, for V4.1, an integer 1..100. */
static int read_effort(const json_t *root, DiConversation *conv) {
    json_t *v = json_object_get(root, "reasoning_effort");
    if (!v || json_is_null(v)) return 0;
    if (json_is_integer(v)) {
        json_int_t n = json_integer_value(v);
        if (conv->encoding != DI_ENCODING_V41)
            return di_errorf("reasoning_effort: a numeric effort needs the v41 encoding");
        if (n < 1 || n > 100) return di_errorf("reasoning_effort: %lld is outside 1..100", (long long)n);
        conv->effort = DI_EFFORT_NUMERIC;
        conv->effort_value = (int)n;
        return 0;
    }
    if (!json_is_string(v))
        return di_errorf("reasoning_effort: expected a string or an integer, got %s", di_json_type_name(v));
    const char *s = json_string_value(v);
    static const struct { const char *name; DiEffort effort; } names[] = {
        {"minimal", DI_EFFORT_LOW}, {"low", DI_EFFORT_LOW},   {"medium", DI_EFFORT_HIGH},
        {"high", DI_EFFORT_HIGH},   {"xhigh", DI_EFFORT_XHIGH}, {"max", DI_EFFORT_MAX},
        {"ultra", DI_EFFORT_MAX},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i].name) == 0) { conv->effort = names[i].effort; return 0; }
    return di_errorf("reasoning_effort: unknown value \"%s\" (expected low, medium, high, xhigh, max or 1..100)", s);
}

static int read_settings(const json_t *root, DiConversation *conv) {
    const char *s = NULL;
    int rc = di_json_string(root, "", "encoding", false, &s);
    if (rc < 0 || (rc == 0 && di_encoding_parse(s, &conv->encoding) != 0)) return -1;
    rc = di_json_string(root, "", "thinking_mode", false, &s);
    if (rc < 0) return -1;
    if (rc == 0) {
        if (strcmp(s, "thinking") == 0) conv->thinking = true;
        else if (strcmp(s, "chat") == 0) conv->thinking = false;
        else return di_errorf("thinking_mode: unknown value \"%s\" (expected chat or thinking)", s);
    }
    if (read_effort(root, conv) != 0) return -1;
    if (di_json_bool(root, "", "drop_thinking", false, &conv->drop_thinking) < 0) return -1;
    json_t *choice = json_object_get(root, "tool_choice");
    rc = json_is_object(choice) ? 1 : di_json_string(root, "", "tool_choice", false, &s); /* objects: below */
    if (rc < 0) return -1;
    if (rc == 0) {
        if (strcmp(s, "auto") == 0) conv->tool_choice = DI_TOOLS_AUTO;
        else if (strcmp(s, "none") == 0) conv->tool_choice = DI_TOOLS_NONE;
        else if (strcmp(s, "required") == 0) conv->tool_choice = DI_TOOLS_REQUIRED;
        else return di_errorf("tool_choice: unknown value \"%s\" (expected auto, none or required)", s);
    }
    json_t *rf = json_object_get(root, "response_format");
    if (rf && !json_is_null(rf) && read_response_format(rf, "response_format", conv) != 0)
        return -1;
    json_t *tools = json_object_get(root, "tools");
    if (tools && !json_is_null(tools) && read_tools(tools, "tools", conv) != 0) return -1;
    return 0;
}

/* tool_choice {"type": "function", "function": {"name": N}} (Chat Completions): keep only the
 * tool N and require a call (recipe.md §4.1); an unknown name is an error. */
static int apply_named_tool_choice(const json_t *root, DiConversation *conv) {
    json_t *choice = json_object_get(root, "tool_choice"), *fn = NULL;
    if (!json_is_object(choice)) return 0;
    const char *name = NULL;
    if (di_json_object(choice, "tool_choice", "function", true, &fn) != 0) return -1;
    if (di_json_string(fn, "tool_choice.function", "name", true, &name) != 0) return -1;
    size_t keep = conv->n_tools;
    for (size_t i = 0; i < conv->n_tools; i++)
        if (strcmp(conv->tools[i].name, name) == 0) keep = i;
    if (keep == conv->n_tools) return di_errorf("tool_choice.function.name: no tool named \"%s\"", name);
    for (size_t i = 0; i < conv->n_tools; i++) {
        if (i == keep) continue;
        free(conv->tools[i].name);
        free(conv->tools[i].description);
        if (conv->tools[i].parameters) json_decref(conv->tools[i].parameters);
    }
    conv->tools[0] = conv->tools[keep];
    conv->n_tools = 1;
    conv->tool_choice = DI_TOOLS_REQUIRED;
    return 0;
}

static int check_conversation(const DiConversation *conv) {
    for (size_t i = 0; i < conv->n_messages; i++) {
        const DiMessage *m = &conv->messages[i];
        if (m->prefix && i + 1 != conv->n_messages)
            return di_errorf("messages[%zu].prefix: only the last message may be a prefix", i);
    }
    for (size_t i = 0; i < conv->n_tools; i++)
        for (size_t j = 0; j < i; j++)
            if (strcmp(conv->tools[i].name, conv->tools[j].name) == 0)
                return di_errorf("tools[%zu].name: duplicate tool name \"%s\"", i, conv->tools[i].name);
    return 0;
}

static int conversation_from_marked(const json_t *root, DiConversation *out);

int di_conversation_from_json(const json_t *root, DiConversation *out) {
    if (!root || !out) return di_errorf("conversation: invalid argument");
    di_conversation_init(out);
    if (!json_is_object(root))
        return di_errorf("conversation: expected a JSON object, got %s", di_json_type_name(root));
    if (!di_json_needs_marks(root)) return conversation_from_marked(root, out);
    /* text with NUL: read a marked copy, the renderer's segments unmark it (base/json.h) */
    json_t *marked = json_deep_copy(root);
    int rc = marked && di_json_mark_nul(marked) == 0 ? conversation_from_marked(marked, out)
                                                    : di_errorf("conversation: out of memory");
    json_decref(marked);
    return rc;
}

static int conversation_from_marked(const json_t *root, DiConversation *out) {
    if (read_settings(root, out) != 0) goto fail;
    json_t *msgs = NULL;
    if (di_json_array(root, "", "messages", true, &msgs) != 0) goto fail;
    size_t n = json_array_size(msgs);
    if (n > 0) {
        out->messages = di_calloc(n, sizeof *out->messages, "messages");
        if (!out->messages) goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        out->n_messages++;
        if (read_message(json_array_get(msgs, i), i, out, &out->messages[i]) != 0) goto fail;
    }
    if (check_conversation(out) != 0 || apply_named_tool_choice(root, out) != 0) goto fail;
    return 0;
fail:
    di_conversation_free(out);
    return -1;
}
