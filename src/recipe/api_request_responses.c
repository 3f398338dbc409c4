/* api_request_responses.c — the OpenAI Responses request (recipe.md §4.2): `instructions` and
 * `input` (a string or typed items: message, function_call, function_call_output, reasoning,
 * custom tool calls) into the normalized conversation, with the settings the response echoes. */
#include "recipe/api_request_internal.h"

#include "base/error.h"
#include "base/json.h"
#include "base/mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_parts[] = {"input_text", "output_text", "text", NULL};

/* The assistant turn being built from consecutive assistant items. */
typedef struct {
    json_t *msg;      /* {"role":"assistant",...} or NULL */
    json_t *calls;    /* its tool calls */
    json_t *results;  /* call_id -> tool message, awaiting flush */
    char *reasoning;  /* reasoning text for the next assistant turn */
} Turn;

static int by_call_id(const void *a, const void *b) {
    const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
    return strcmp(json_string_value(json_object_get(x, "id")), json_string_value(json_object_get(y, "id")));
}

/* Append the assistant turn; its calls sorted by call_id and the results in that order (§4.2). */
static int flush_turn(Turn *t, json_t *out) {
    if (!t->msg) return 0;
    size_t n = json_array_size(t->calls);
    if (n) {
        size_t i;
        json_t *c;
        json_array_foreach(t->calls, i, c) {
            const char *id = json_string_value(json_object_get(c, "id"));
            if (!json_object_get(t->results, id)) return di_errorf("No tool output found for function call %s.", id);
        }
        json_t **sorted = di_calloc(n, sizeof *sorted, "tool calls");
        if (!sorted) return -1;
        for (size_t i = 0; i < n; i++) sorted[i] = json_array_get(t->calls, i);
        qsort(sorted, n, sizeof *sorted, by_call_id);
        json_t *calls = json_array();
        for (size_t i = 0; i < n; i++) json_array_append(calls, sorted[i]);
        json_object_set_new(t->msg, "tool_calls", calls);
        json_array_append(out, t->msg);
        for (size_t i = 0; i < n; i++)
            json_array_append(out, json_object_get(t->results, json_string_value(json_object_get(sorted[i], "id"))));
        free(sorted);
    } else {
        json_array_append(out, t->msg);
    }
    json_decref(t->msg);
    json_decref(t->calls);
    json_object_clear(t->results);
    t->msg = NULL;
    t->calls = NULL;
    return 0;
}

static json_t *assistant(Turn *t) {
    if (!t->msg) {
        t->msg = di_api_message("assistant", "");
        t->calls = json_array();
        if (t->reasoning) {
            json_object_set_new(t->msg, "reasoning_content", json_string(t->reasoning));
            free(t->reasoning);
            t->reasoning = NULL;
        }
    }
    return t->msg;
}

static int append_assistant_text(Turn *t, const char *text) {
    json_t *msg = assistant(t);
    if (json_array_size(t->calls)) return di_errorf("Invalid input: assistant text after a function_call in the same turn");
    const char *old = json_string_value(json_object_get(msg, "content"));
    size_t n = strlen(old) + strlen(text) + 3;
    char *joined = di_malloc(n, "assistant text");
    if (!joined) return -1;
    snprintf(joined, n, "%s%s%s", old, *old ? "\n\n" : "", text); /* consecutive texts joined "\n\n" */
    json_object_set_new(msg, "content", json_string(joined));
    free(joined);
    return 0;
}

static int input_item(const json_t *item, size_t i, Turn *t, json_t *out) {
    const char *type = json_string_value(json_object_get(item, "type"));
    const char *role = json_string_value(json_object_get(item, "role"));
    if (!json_is_object(item)) return di_errorf("Invalid input[%zu]: expected an object", i);
    if (!type && role) type = "message";
    if (!type) return di_errorf("Invalid input[%zu]: missing 'type'", i);
    char field[96];
    snprintf(field, sizeof field, "input[%zu].content", i);
    if (strcmp(type, "message") == 0) {
        if (!role) return di_errorf("Invalid input[%zu].role: a string is required", i);
        char *text = NULL;
        if (di_api_join_text(json_object_get(item, "content"), k_parts, "\n\n", field, &text) != 0) return -1;
        int rc = 0;
        if (strcmp(role, "assistant") == 0) {
            rc = append_assistant_text(t, text);
        } else if (strcmp(role, "system") == 0 || strcmp(role, "user") == 0 || strcmp(role, "developer") == 0) {
            /* developer -> system, as the official conversion does (recipe.md §4.2 says user). */
            if ((rc = flush_turn(t, out)) == 0)
                json_array_append_new(out, di_api_message(strcmp(role, "developer") == 0 ? "system" : role, text));
        } else {
            rc = di_errorf("Invalid input[%zu].role: unknown role '%s'", i, role);
        }
        free(text);
        return rc;
    }
    if (strcmp(type, "function_call") == 0 || strcmp(type, "custom_tool_call") == 0) {
        const char *id = json_string_value(json_object_get(item, "call_id"));
        const char *name = json_string_value(json_object_get(item, "name"));
        if (!id || !*id) return di_errorf("Invalid input[%zu].call_id: a non-empty string is required", i);
        if (!name) return di_errorf("Invalid input[%zu].name: a string is required", i);
        char *args = NULL;
        if (strcmp(type, "function_call") == 0) {
            const char *a = json_string_value(json_object_get(item, "arguments"));
            if (!a) return di_errorf("Invalid input[%zu].arguments: a string is required", i);
            args = di_strdup(a);
        } else {
            json_t *input = json_object_get(item, "input");
            if (!json_is_string(input)) return di_errorf("Invalid input[%zu].input: a string is required", i);
            json_t *wrapped = json_pack("{s:O}", "input", input); /* §4.2: arguments {"input": input} */
            args = json_dumps(wrapped, JSON_COMPACT);
            json_decref(wrapped);
        }
        if (!args) return di_errorf("function call: out of memory");
        assistant(t);
        size_t k;
        json_t *c;
        json_array_foreach(t->calls, k, c) {
            if (strcmp(json_string_value(json_object_get(c, "id")), id) == 0) {
                free(args);
                return di_errorf("Duplicate function call id '%s' in input[%zu]", id, i);
            }
        }
        json_array_append_new(t->calls, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function", "function",
                                                  "name", name, "arguments", args));
        free(args);
        return 0;
    }
    if (strcmp(type, "function_call_output") == 0 || strcmp(type, "custom_tool_call_output") == 0) {
        const char *id = json_string_value(json_object_get(item, "call_id"));
        json_t *output = json_object_get(item, "output");
        if (!id) return di_errorf("Invalid input[%zu].call_id: a string is required", i);
        bool pending = false;
        size_t k;
        json_t *c;
        json_array_foreach(t->calls, k, c) pending = pending || strcmp(json_string_value(json_object_get(c, "id")), id) == 0;
        if (!pending || json_object_get(t->results, id))
            return di_errorf("Invalid input[%zu]: no pending function call with call_id '%s'", i, id);
        char *text = NULL;
        if (di_api_join_text(output, k_parts, "\n\n", "output", &text) != 0) return -1;
        json_object_set_new(t->results, id, json_pack("{s:s, s:s, s:s}", "role", "tool", "tool_call_id", id, "content", text));
        free(text);
        if (json_object_size(t->results) == json_array_size(t->calls)) return flush_turn(t, out);
        return 0;
    }
    if (strcmp(type, "reasoning") == 0) {
        json_t *content = json_object_get(item, "content");
        char *text = NULL;
        static const char *const reasoning_parts[] = {"reasoning_text", NULL};
        if (di_api_join_text(content, reasoning_parts, "\n", "reasoning.content", &text) != 0) return -1;
        if (t->msg && !json_array_size(t->calls) && !json_object_get(t->msg, "reasoning_content"))
            json_object_set_new(t->msg, "reasoning_content", json_string(text));
        else {
            free(t->reasoning);
            t->reasoning = di_strdup(text);
        }
        free(text);
        return 0;
    }
    return di_errorf("Invalid input[%zu].type: '%s' is not supported", i, type);
}

static int input_messages(const json_t *body, json_t *out) {
    const char *instructions = NULL;
    if (di_json_string(body, "request", "instructions", false, &instructions) < 0) return -1;
    if (instructions && *instructions) json_array_append_new(out, di_api_message("system", instructions));
    json_t *input = json_object_get(body, "input");
    if (json_is_string(input)) {
        json_array_append_new(out, di_api_message("user", json_string_value(input)));
        return 0;
    }
    if (!json_is_array(input)) return di_errorf("Invalid input: expected a string or an array, got %s", di_api_type_name(input));
    if (!json_array_size(input)) return di_errorf("Empty input messages");
    Turn t = {.results = json_object()};
    int rc = 0;
    size_t i;
    json_t *item;
    json_array_foreach(input, i, item) {
        if ((rc = input_item(item, i, &t, out)) != 0) break;
    }
    if (rc == 0) rc = flush_turn(&t, out);
    json_decref(t.msg);
    json_decref(t.calls);
    json_decref(t.results);
    free(t.reasoning);
    return rc;
}

static int responses_tools(const json_t *body, json_t *tools, DiApiRequest *req) {
    json_t *list = json_object_get(body, "tools");
    if (!list || json_is_null(list)) return 0;
    if (!json_is_array(list)) return di_errorf("Invalid tools: expected an array");
    size_t i, n_strict = 0;
    json_t *t;
    json_array_foreach(list, i, t) {
        const char *type = json_string_value(json_object_get(t, "type"));
        char field[96];
        snprintf(field, sizeof field, "tools[%zu].name", i);
        if (!type) return di_errorf("Invalid tools[%zu]: missing 'type'", i);
        if (strncmp(type, "web_search", 10) == 0) continue; /* §4.2: ignored by default */
        const char *name = json_string_value(json_object_get(t, "name"));
        if (strcmp(type, "function") == 0 || strcmp(type, "custom") == 0) {
            if (!name) return di_errorf("Invalid tools[%zu].name: a string is required", i);
            bool custom = strcmp(type, "custom") == 0, strict = false;
            json_t *params = custom ? json_pack("{s:s, s:{}}", "type", "object", "properties") : NULL;
            if (!custom && (di_api_tool_strict(t, "tools[]", &strict) != 0 ||
                            di_api_tool_schema(name, json_object_get(t, "parameters"), strict, &params) != 0))
                return -1;
            int rc = di_api_add_tool(tools, name, json_object_get(t, "description"), params, field);
            json_decref(params);
            if (rc != 0) return -1;
            n_strict += strict;
            if (strcmp(type, "custom") == 0) { /* its call carries free text: {"input": text} in the model's markup */
                if (!req->custom_tools && !(req->custom_tools = json_array())) return di_errorf("tools: out of memory");
                json_array_append_new(req->custom_tools, json_string(name));
            }
        } else {
            return di_errorf("Invalid tools[%zu].type: '%s' is not supported", i, type);
        }
    }
    return di_api_tools_strict_agree(n_strict, json_array_size(tools));
}

static int responses_tool_choice(const json_t *body, DiApiRequest *req, json_t *tools) {
    json_t *tc = json_object_get(body, "tool_choice");
    const char *named = NULL;
    if (json_is_string(tc)) {
        const char *v = json_string_value(tc);
        if (strcmp(v, "none") == 0) req->tool_choice = DI_TOOL_CHOICE_NONE;
        else if (strcmp(v, "required") == 0) req->tool_choice = DI_TOOL_CHOICE_REQUIRED;
        else if (strcmp(v, "auto") != 0) return di_errorf("Invalid tool_choice: unknown value '%s'", v);
    } else if (json_is_object(tc)) {
        named = json_string_value(json_object_get(tc, "name"));
        if (!named) return di_errorf("Invalid tool_choice: expected {\"type\":\"function\",\"name\":...}");
    } else if (tc && !json_is_null(tc)) {
        return di_errorf("Invalid tool_choice: expected a string or an object");
    }
    return di_api_apply_tool_choice(req, tools, named, "tool_choice");
}

/* Settings the response object reports back (official ResponsesEcho). */
static json_t *echo(const json_t *body, const DiApiRequest *req) {
    json_t *e = json_pack("{s:b, s:n, s:n, s:f, s:n, s:n, s:b, s:f, s:n, s:n, s:n, s:n, s:s, s:b, s:s, s:i, s:s, s:n, s:o}",
                          "background", 0, "content_filters", "max_tool_calls", "frequency_penalty", 0.0, "moderation",
                          "previous_response_id", "parallel_tool_calls", 1, "presence_penalty", 0.0,
                          "prompt_cache_key", "prompt_cache_retention", "safety_identifier", "instructions",
                          "service_tier", "default", "store", 0, "truncation", "disabled", "top_logprobs", 0,
                          "tool_choice", "auto", "user", "metadata", json_object());
    if (!e) return NULL;
    const char *keys[] = {"instructions", "max_output_tokens", "user", "tool_choice", "metadata", "parallel_tool_calls",
                          "top_logprobs"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        json_t *v = json_object_get(body, keys[k]);
        if (v && !json_is_null(v)) json_object_set(e, keys[k], v);
    }
    if (!json_object_get(e, "max_output_tokens")) json_object_set_new(e, "max_output_tokens", json_null());
    json_t *t = json_object_get(body, "temperature"), *p = json_object_get(body, "top_p");
    json_object_set_new(e, "temperature", json_is_number(t) ? json_real(json_number_value(t)) : json_real(1.0));
    json_object_set_new(e, "top_p", json_is_number(p) ? json_real(json_number_value(p)) : json_real(1.0));
    json_t *effort = json_object_get(json_object_get(body, "reasoning"), "effort");
    json_object_set_new(e, "reasoning", json_pack("{s:O, s:n}", "effort", effort ? effort : json_null(), "summary"));
    json_t *format = json_object_get(json_object_get(body, "text"), "format");
    json_object_set_new(e, "text", json_pack("{s:O, s:n}", "format", format ? format : json_pack("{s:s}", "type", "text"),
                                             "verbosity"));
    if (!format) json_decref(json_object_get(json_object_get(e, "text"), "format"));
    /* Function tools are reported with every field (description / strict null when absent). */
    json_t *tools = json_object_get(body, "tools"), *echoed = json_array(), *tool;
    size_t i;
    json_array_foreach(tools, i, tool) {
        json_t *copy = json_deep_copy(tool);
        const char *type = json_string_value(json_object_get(tool, "type"));
        if (type && strcmp(type, "function") == 0) {
            if (!json_object_get(copy, "description")) json_object_set_new(copy, "description", json_null());
            if (!json_object_get(copy, "strict")) json_object_set_new(copy, "strict", json_null());
        }
        json_array_append_new(echoed, copy);
    }
    json_object_set_new(e, "tools", echoed);
    (void)req;
    return e;
}

int di_api_parse_responses(json_t *body, DiApiRequest *req) {
    const char *unsupported[] = {"previous_response_id", "conversation"};
    for (size_t i = 0; i < 2; i++) {
        json_t *v = json_object_get(body, unsupported[i]);
        if (v && !json_is_null(v)) return di_errorf("Invalid %s: not supported by this server", unsupported[i]);
    }
    req->thinking = true;
    snprintf(req->reasoning_effort, sizeof req->reasoning_effort, "high");
    json_t *reasoning = json_object_get(body, "reasoning");
    if (reasoning && !json_is_null(reasoning)) {
        const char *effort = NULL;
        if (!json_is_object(reasoning)) return di_errorf("Invalid reasoning: expected an object");
        if (di_json_string(reasoning, "reasoning", "effort", false, &effort) < 0) return -1;
        if (effort) {
            int off = di_api_effort(effort, "reasoning.effort", req->reasoning_effort);
            if (off < 0) return -1;
            if (off == 1) req->thinking = false;
        }
    }
    if (di_api_max_tokens(body, "max_output_tokens", false, &req->max_tokens) != 0) return -1;
    if (di_api_sampling_extras(body, req, false) != 0) return -1;
    double temperature = 1, top_p = 1;
    bool has_t, has_p;
    if (di_api_number_in(body, "temperature", 0, false, 2, &temperature, &has_t) != 0) return -1;
    if (di_api_number_in(body, "top_p", 0, true, 1, &top_p, &has_p) != 0) return -1;
    di_api_resolve_sampling(req, has_t, temperature, has_p, top_p);

    json_t *messages = json_array(), *tools = json_array();
    if (input_messages(body, messages) != 0 || responses_tools(body, tools, req) != 0 ||
        responses_tool_choice(body, req, tools) != 0) {
        json_decref(messages);
        json_decref(tools);
        return -1;
    }
    json_t *text_format = json_object_get(json_object_get(body, "text"), "format"), *schema = NULL;
    const char *format = json_string_value(json_object_get(text_format, "type"));
    if (format && strcmp(format, "json_schema") == 0 &&
        (!json_is_string(json_object_get(text_format, "name")) ? di_errorf("Invalid text.format: missing field `name`")
                                                              : di_api_response_schema(text_format, "text.format", &schema)) != 0) {
        json_decref(messages);
        json_decref(tools);
        return -1;
    }
    if (format && strcmp(format, "json_object") == 0) {
        req->json_mode = true;
        if (!di_api_mentions_json(messages, NULL)) {
            json_decref(messages);
            json_decref(tools);
            return di_errorf("Input must contain the word 'json' in some form to use 'text.format' of type 'json_object'.");
        }
    }
    if (!(req->echo = echo(body, req))) {
        json_decref(messages);
        json_decref(tools);
        return di_errorf("responses: out of memory");
    }
    if (di_api_set_conversation(req, messages, tools) != 0) return -1;
    return di_api_set_response_schema(req, schema);
}
