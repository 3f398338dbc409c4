/* api_request_messages.c — the Anthropic Messages request (recipe.md §4.3): system text,
 * user/assistant content blocks (text, thinking, tool_use, tool_result), tools with
 * input_schema, tool_choice, thinking / output_config.effort, stop_sequences. */
#include "recipe/api_request_internal.h"

#include "base/error.h"
#include "base/json.h"
#include "base/mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_text[] = {"text", NULL};

/* Append `add` to *acc with `sep` between (acc may be NULL). */
static int join(char **acc, const char *add, const char *sep) {
    size_t n = (*acc ? strlen(*acc) + strlen(sep) : 0) + strlen(add) + 1;
    char *s = di_malloc(n, "message text");
    if (!s) return -1;
    snprintf(s, n, "%s%s%s", *acc ? *acc : "", *acc ? sep : "", add);
    free(*acc);
    *acc = s;
    return 0;
}

/* A tool_result content: a string or text blocks joined "\n\n". */
static int result_text(const json_t *content, char **out, size_t mi, size_t bi) {
    char field[96];
    snprintf(field, sizeof field, "messages[%zu].content[%zu].content", mi, bi);
    return di_api_join_text(content, k_text, "\n\n", field, out);
}

static int user_message(const json_t *content, size_t mi, json_t *out, json_t *pending) {
    if (json_is_string(content)) {
        if (json_object_size(pending)) goto unresolved;
        json_array_append_new(out, di_api_message("user", json_string_value(content)));
        return 0;
    }
    if (!json_is_array(content)) return di_errorf("Invalid messages[%zu].content: expected a string or an array of blocks", mi);
    size_t i;
    json_t *b;
    json_array_foreach(content, i, b) {
        const char *type = json_string_value(json_object_get(b, "type"));
        if (!type) return di_errorf("Invalid messages[%zu].content[%zu]: missing 'type'", mi, i);
        if (strcmp(type, "text") == 0) {
            const char *t = json_string_value(json_object_get(b, "text"));
            if (!t) return di_errorf("Invalid messages[%zu].content[%zu].text: a string is required", mi, i);
            /* §4.3: each block is its own user part (the renderer merges adjacent user parts). */
            json_array_append_new(out, di_api_message("user", t));
        } else if (strcmp(type, "tool_result") == 0) {
            const char *id = json_string_value(json_object_get(b, "tool_use_id"));
            if (!id || !json_object_get(pending, id))
                return di_errorf("Invalid messages[%zu].content[%zu]: tool_result '%s' does not answer a tool_use of the "
                                 "previous assistant message (or answers it twice)", mi, i, id ? id : "(missing tool_use_id)");
            json_object_del(pending, id);
            char *r = NULL;
            if (result_text(json_object_get(b, "content"), &r, mi, i) != 0) return -1;
            json_array_append_new(out, json_pack("{s:s, s:s, s:s}", "role", "tool", "tool_call_id", id, "content", r));
            free(r);
        } else {
            return di_errorf("Invalid messages[%zu].content[%zu]: block type '%s' is not supported in a user message", mi, i, type);
        }
    }
    if (json_object_size(pending)) goto unresolved;
    return 0;
unresolved:
    return di_errorf("Invalid messages[%zu]: tool_use ids were found without tool_result blocks immediately after", mi);
}

static int assistant_message(const json_t *content, size_t mi, json_t *out, json_t *pending) {
    if (json_is_string(content)) {
        json_array_append_new(out, di_api_message("assistant", json_string_value(content)));
        return 0;
    }
    if (!json_is_array(content)) return di_errorf("Invalid messages[%zu].content: expected a string or an array of blocks", mi);
    char *text = NULL, *thinking = NULL;
    json_t *calls = json_array();
    int rc = 0;
    size_t i;
    json_t *b;
    json_array_foreach(content, i, b) {
        const char *type = json_string_value(json_object_get(b, "type"));
        if (!type) { rc = di_errorf("Invalid messages[%zu].content[%zu]: missing 'type'", mi, i); break; }
        if (strcmp(type, "text") == 0) {
            const char *t = json_string_value(json_object_get(b, "text"));
            if (!t) { rc = di_errorf("Invalid messages[%zu].content[%zu].text: a string is required", mi, i); break; }
            if (json_array_size(calls)) { rc = di_errorf("Invalid messages[%zu].content[%zu]: text after a tool_use block", mi, i); break; }
            if ((rc = join(&text, t, "\n\n")) != 0) break;
        } else if (strcmp(type, "thinking") == 0) {
            const char *t = json_string_value(json_object_get(b, "thinking"));
            if (!t) { rc = di_errorf("Invalid messages[%zu].content[%zu].thinking: a string is required", mi, i); break; }
            if ((rc = join(&thinking, t, "\n\n")) != 0) break;
        } else if (strcmp(type, "tool_use") == 0) {
            const char *id = json_string_value(json_object_get(b, "id"));
            const char *name = json_string_value(json_object_get(b, "name"));
            json_t *input = json_object_get(b, "input");
            if (!id || !*id || !name || !json_is_object(input)) {
                rc = di_errorf("Invalid messages[%zu].content[%zu]: tool_use needs string 'id', 'name' and an object 'input'", mi, i);
                break;
            }
            if (json_object_get(pending, id)) { rc = di_errorf("Duplicate tool_use id '%s'", id); break; }
            /* §4.3: arguments = Python-style JSON of input (", " and ": " separators). */
            char *args = json_dumps(input, JSON_PRESERVE_ORDER); /* UTF-8 kept, as the official conversion does */
            if (!args) { rc = di_errorf("tool_use: out of memory"); break; }
            json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function", "function",
                                                   "name", name, "arguments", args));
            free(args);
            json_object_set_new(pending, id, json_true());
        } else {
            rc = di_errorf("Invalid messages[%zu].content[%zu]: block type '%s' is not supported in an assistant message", mi, i, type);
            break;
        }
    }
    if (rc == 0) {
        json_t *msg = di_api_message("assistant", text);
        if (thinking) json_object_set_new(msg, "reasoning_content", json_string(thinking));
        if (json_array_size(calls)) json_object_set(msg, "tool_calls", calls);
        json_array_append_new(out, msg);
    }
    json_decref(calls);
    free(text);
    free(thinking);
    return rc;
}

static int messages_list(const json_t *body, json_t *out) {
    json_t *system = json_object_get(body, "system");
    if (system && !json_is_null(system)) {
        char *text = NULL;
        if (di_api_join_text(system, k_text, "\n\n", "system", &text) != 0) return -1;
        if (*text) json_array_append_new(out, di_api_message("system", text));
        free(text);
    }
    json_t *msgs = json_object_get(body, "messages");
    if (!json_is_array(msgs)) return di_errorf("Invalid messages: expected an array, got %s", di_api_type_name(msgs));
    if (!json_array_size(msgs)) return di_errorf("Empty input messages");
    json_t *pending = json_object();
    int rc = 0;
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *content = json_object_get(m, "content");
        if (!json_is_object(m) || !role) { rc = di_errorf("Invalid messages[%zu]: an object with a string 'role' is required", i); break; }
        if (strcmp(role, "user") == 0) {
            rc = user_message(content, i, out, pending);
        } else if (strcmp(role, "assistant") == 0) {
            if (json_object_size(pending)) { rc = di_errorf("Invalid messages[%zu]: tool_use ids were found without tool_result blocks immediately after", i); break; }
            rc = assistant_message(content, i, out, pending);
        } else if (strcmp(role, "system") == 0) {
            /* A system turn inside the conversation stays a system message, as in the official
             * conversion (recipe.md §4.3 describes a <system-reminder> user part instead). */
            char *text = NULL;
            if ((rc = di_api_join_text(content, k_text, "\n\n", "messages.content", &text)) == 0)
                json_array_append_new(out, di_api_message("system", text));
            free(text);
        } else {
            rc = di_errorf("Invalid messages[%zu].role: unknown role '%s', expected user or assistant", i, role);
        }
        if (rc) break;
    }
    if (rc == 0 && json_object_size(pending))
        rc = di_errorf("Invalid messages: tool_use ids were found without tool_result blocks immediately after");
    json_decref(pending);
    return rc;
}

static int messages_tools(const json_t *body, DiApiRequest *req, json_t *tools) {
    json_t *list = json_object_get(body, "tools");
    if (list && !json_is_null(list)) {
        if (!json_is_array(list)) return di_errorf("Invalid tools: expected an array");
        size_t i;
        json_t *t;
        json_array_foreach(list, i, t) {
            const char *type = json_string_value(json_object_get(t, "type"));
            const char *name = json_string_value(json_object_get(t, "name"));
            char field[96];
            snprintf(field, sizeof field, "tools[%zu].name", i);
            if (type && strcmp(type, "custom") != 0)
                return di_errorf("Invalid tools[%zu]: server tool type '%s' is not supported", i, type);
            if (!name) return di_errorf("Invalid tools[%zu].name: a string is required", i);
            json_t *schema = json_object_get(t, "input_schema"), *params = NULL;
            if (!json_is_object(schema)) return di_errorf("Invalid tools[%zu].input_schema: an object is required", i);
            /* "strict" is not read here: the official conversion ignores it for Messages tools */
            if (di_api_tool_schema(name, schema, false, &params) != 0) return -1;
            int rc = di_api_add_tool(tools, name, json_object_get(t, "description"), params, field);
            json_decref(params);
            if (rc != 0) return -1;
        }
    }
    json_t *tc = json_object_get(body, "tool_choice");
    const char *named = NULL;
    if (tc && !json_is_null(tc)) {
        const char *type = json_string_value(json_object_get(tc, "type"));
        if (!json_is_object(tc) || !type) return di_errorf("Invalid tool_choice: expected {\"type\": ...}");
        bool disable = false;
        if (di_json_bool(tc, "tool_choice", "disable_parallel_tool_use", false, &disable) < 0) return -1;
        req->disable_parallel_tool_use = disable;
        if (disable) /* the model may emit several calls in one turn; nothing limits it to one */
            return di_errorf("Invalid tool_choice.disable_parallel_tool_use: true is not supported");
        if (strcmp(type, "none") == 0) req->tool_choice = DI_TOOL_CHOICE_NONE;
        else if (strcmp(type, "tool") == 0) {
            if (!(named = json_string_value(json_object_get(tc, "name")))) return di_errorf("Invalid tool_choice.name: a string is required");
        } else if (strcmp(type, "any") == 0) {
            req->tool_choice = DI_TOOL_CHOICE_REQUIRED; /* Anthropic's "any": some tool must be called */
        } else if (strcmp(type, "auto") != 0)
            return di_errorf("Invalid tool_choice.type: unknown value '%s'", type);
    }
    return di_api_apply_tool_choice(req, tools, named, "tool_choice");
}

static int messages_thinking(const json_t *body, DiApiRequest *req) {
    req->thinking = true;
    snprintf(req->reasoning_effort, sizeof req->reasoning_effort, "high");
    bool explicit_switch = false;
    json_t *th = json_object_get(body, "thinking");
    if (th && !json_is_null(th)) {
        const char *type = json_string_value(json_object_get(th, "type"));
        if (!json_is_object(th) || !type) return di_errorf("Invalid thinking: expected {\"type\": \"enabled\"|\"disabled\"}");
        if (strcmp(type, "enabled") == 0 || strcmp(type, "adaptive") == 0) req->thinking = true;
        else if (strcmp(type, "disabled") == 0) req->thinking = false;
        else return di_errorf("Invalid thinking.type: unknown value '%s'", type);
        explicit_switch = true;
        if (di_api_thinking_budget(th, req) != 0) return -1;
    }
    json_t *oc = json_object_get(body, "output_config");
    const char *effort = NULL;
    if (json_is_object(oc) && di_json_string(oc, "output_config", "effort", false, &effort) < 0) return -1;
    if (effort) {
        int off = di_api_effort(effort, "output_config.effort", req->reasoning_effort);
        if (off < 0) return -1;
        if (off == 1) snprintf(req->reasoning_effort, sizeof req->reasoning_effort, "high");
        if (!explicit_switch) req->thinking = off != 1;
    }
    return 0;
}

int di_api_parse_messages(json_t *body, DiApiRequest *req) {
    if (!json_object_get(body, "max_tokens")) return di_errorf("max_tokens: Field required");
    if (di_api_max_tokens(body, "max_tokens", true, &req->max_tokens) != 0) return -1;
    if (di_api_sampling_extras(body, req, true) != 0) return -1;
    if (messages_thinking(body, req) != 0) return -1;
    double temperature = 1, top_p = 1;
    bool has_t, has_p;
    if (di_api_number_in(body, "temperature", 0, false, 2, &temperature, &has_t) != 0) return -1;
    if (di_api_number_in(body, "top_p", 0, true, 1, &top_p, &has_p) != 0) return -1;
    di_api_resolve_sampling(req, has_t, temperature, has_p, top_p);
    if (di_api_stop(json_object_get(body, "stop_sequences"), "stop_sequences", true, req) != 0) return -1;
    json_t *messages = json_array(), *tools = json_array();
    if (messages_list(body, messages) != 0 || messages_tools(body, req, tools) != 0) {
        json_decref(messages);
        json_decref(tools);
        return -1;
    }
    return di_api_set_conversation(req, messages, tools);
}
