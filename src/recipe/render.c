/* render.c — the V4 / V4-0731 / V4.1 prompt templates (see render.h).
 *
 * Shape of a prompt (§2.2, §2.5, measured against deepseek-recipe 0.2.0):
 *   BOS, the head (effort text, system text, TOOLS_BLOCK, response-format block; V4.1 under
 *   <｜System｜>), then the messages in order, then the generation header
 *   <｜Assistant｜><think> (thinking) or <｜Assistant｜></think> (chat) unless the last message
 *   is an assistant prefix.  <｜Assistant｜> is written only right before an assistant message
 *   and at the end: a user turn followed by a reminder or a V4.1 system message opens no
 *   header.  V4 hoists every system message into the head (joined "\n\n"); V4.1 keeps later
 *   system messages in place as <｜System｜> turns.
 * Historical reasoning is kept only when tools are active (or drop_thinking is false): every
 * earlier assistant turn then reads <think>reasoning</think>, otherwise </think>.
 * Before rendering, tool results are put in the order of the calls they answer
 * (order_tool_results).  Where the official package and recipe.md §2 disagree, the package is
 * followed; the differences are listed in tests/unit/test_render.c and the branch report. */
#include "recipe/render.h"

#include "base/error.h"
#include "base/mem.h"
#include "recipe/dsml.h"
#include "recipe/render_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* §2.4, byte-exact: V4-April "max" = V4-0731 "high" (476 bytes). */
static const char effort_absolute_max[] =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";

/* §2.4, byte-exact: V4-0731 "max" (528 bytes, U+2014 after "maximum "). */
static const char effort_beyond_max[] =
    "Reasoning Effort: Beyond maximum — exhaustive, relentless, and uncompromising.\n"
    "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: exhaustively decompose the problem into its most fundamental components, trace every causal chain to its root, and resolve the underlying cause rather than any surface symptom.\n"
    "Do not stop reasoning until you have independently verified the solution from multiple angles and are certain that no assumption remains unchecked and no error remains undiscovered.\n\n";

/* Response-format blocks after the system text (deepseek-recipe 0.2.0; the V4 wording differs
 * from the one in recipe.md §2.2, which matches only V4.1). */
static const char response_format_v4[] =
    "\n\nYou are a helpful assistant designed to output JSON.\n## Response Format:\n\nReply with JSON object ONLY.";
static const char response_format_v41[] =
    "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n{\"type\": \"json_object\"}";
/* json_schema (every encoding): the V4.1 wording with the request's schema in place of
 * {"type": "json_object"}, written as the encoding writes JSON (deepseek-recipe 0.2.0). */
static const char response_schema_intro[] =
    "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

const char *di_render_effort_text(const DiConversation *conv, char *buf, size_t buf_size) {
    if (!conv || !conv->thinking) return "";
    if (conv->encoding == DI_ENCODING_V41) {
        /* §2.4: low/high/max = 50/75/100, default and xhigh = 75. */
        int n = 75;
        if (conv->effort == DI_EFFORT_LOW) n = 50;
        else if (conv->effort == DI_EFFORT_MAX) n = 100;
        else if (conv->effort == DI_EFFORT_NUMERIC) n = conv->effort_value;
        if (!buf || buf_size < 128) return "";
        snprintf(buf, buf_size,
                 "Reasoning Effort: %d (range 1-100, the higher the value, the more thorough the reasoning)\n\n", n);
        return buf;
    }
    if (conv->encoding == DI_ENCODING_V4) /* April: only max has a prefix */
        return conv->effort == DI_EFFORT_MAX ? effort_absolute_max : "";
    /* 0731: low -> none, default/high/xhigh -> Absolute maximum, max -> Beyond maximum. */
    if (conv->effort == DI_EFFORT_LOW) return "";
    return conv->effort == DI_EFFORT_MAX ? effort_beyond_max : effort_absolute_max;
}

typedef struct {
    const DiConversation *conv;
    const DiDsmlDialect *dsml;
    DiSegmentList *out;
    bool tools_active; /* tools given and tool_choice != none */
    bool keep_reasoning; /* history keeps reasoning: tools present or drop_thinking=false */
} Renderer;

static int text(Renderer *r, const char *s) { return di_segments_text(r->out, s, strlen(s)); }
static int special(Renderer *r, const char *tok) { return di_segments_special(r->out, tok); }

/* The grounding markers the model writes in its answers.  deepseek-recipe 0.2.0 encodes them
 * as their control tokens in assistant content and reasoning (measured), so a history reads
 * as the model produced it; in every other client string they stay text. */
static const char *const grounding_tokens[] = {"<｜ref｜>",   "<｜/ref｜>",   "<｜box｜>",     "<｜/box｜>",
                                               "<｜point｜>", "<｜/point｜>", "<｜polygon｜>", "<｜/polygon｜>"};

/* Assistant-authored text: grounding markers as control tokens, the rest as text. */
static int assistant_text(Renderer *r, const char *s) {
    for (;;) {
        const char *hit = NULL, *tok = NULL;
        for (size_t g = 0; g < sizeof grounding_tokens / sizeof grounding_tokens[0]; g++) {
            const char *q = strstr(s, grounding_tokens[g]);
            if (q && (!hit || q < hit)) {
                hit = q;
                tok = grounding_tokens[g];
            }
        }
        if (!hit) return text(r, s);
        if (di_segments_text(r->out, s, (size_t)(hit - s)) != 0 || di_segments_marker(r->out, tok) != 0) return -1;
        s = hit + strlen(tok);
    }
}

static const char *task_token(DiTask task) {
    switch (task) {
    case DI_TASK_ACTION: return "<｜action｜>";
    case DI_TASK_QUERY: return "<｜query｜>";
    case DI_TASK_AUTHORITY: return "<｜authority｜>";
    case DI_TASK_DOMAIN: return "<｜domain｜>";
    case DI_TASK_TITLE: return "<｜title｜>";
    case DI_TASK_READ_URL: return "<｜read_url｜>";
    case DI_TASK_NONE: break;
    }
    return NULL;
}

/* Tools block and response-format block that follow the system text. */
static int emit_system_extras(Renderer *r) {
    if (r->tools_active) {
        if (text(r, "\n\n") != 0) return -1;
        if (di_dsml_tools_block(r->out, r->dsml, r->conv->tools, r->conv->n_tools) != 0) return -1;
    }
    if (r->conv->response_format == DI_FORMAT_JSON_OBJECT)
        return text(r, r->conv->encoding == DI_ENCODING_V41 ? response_format_v41 : response_format_v4);
    if (r->conv->response_format == DI_FORMAT_JSON_SCHEMA) {
        DiStr schema;
        di_str_init(&schema);
        int rc = di_pyjson_append(&schema, r->conv->response_schema, r->dsml->floats);
        if (rc == 0) rc = text(r, response_schema_intro) || text(r, schema.data) ? -1 : 0;
        di_str_free(&schema);
        return rc;
    }
    return 0;
}

/* V4: effort text, then every non-empty system message joined "\n\n", then the extras. */
static int emit_head_v4(Renderer *r) {
    char buf[160];
    if (text(r, di_render_effort_text(r->conv, buf, sizeof buf)) != 0) return -1;
    bool first = true;
    for (size_t i = 0; i < r->conv->n_messages; i++) {
        const DiMessage *m = &r->conv->messages[i];
        if (m->role != DI_ROLE_SYSTEM || m->content[0] == '\0') continue;
        if (!first && text(r, "\n\n") != 0) return -1;
        if (text(r, m->content) != 0) return -1;
        first = false;
    }
    return emit_system_extras(r);
}

/* V4.1: <｜System｜> + effort + message 0's system text + extras, when any of them exists. */
static int emit_head_v41(Renderer *r) {
    const DiConversation *c = r->conv;
    bool has_system = c->n_messages > 0 && c->messages[0].role == DI_ROLE_SYSTEM;
    bool effort = c->thinking && c->n_messages > 0; /* the effort text belongs to message 0 */
    if (!has_system && !effort && !r->tools_active && c->response_format == DI_FORMAT_TEXT) return 0;
    char buf[160];
    if (special(r, DI_SPELL_SYSTEM) != 0 || text(r, di_render_effort_text(c, buf, sizeof buf)) != 0) return -1;
    if (has_system && text(r, c->messages[0].content) != 0) return -1;
    return emit_system_extras(r);
}

/* The header that opens an assistant turn (before an assistant message or at the end).
 * After a task message the task token replaces it (§2.2 transition rule). */
static int emit_assistant_header(Renderer *r, const DiMessage *prev, bool at_end) {
    DiTask task = prev ? prev->task : DI_TASK_NONE;
    const char *think = r->conv->thinking ? DI_SPELL_THINK : DI_SPELL_END_THINK;
    if (task == DI_TASK_ACTION)
        return special(r, DI_SPELL_ASSISTANT) || special(r, think) || special(r, task_token(task)) ? -1 : 0;
    if (task != DI_TASK_NONE) return special(r, task_token(task));
    if (special(r, DI_SPELL_ASSISTANT) != 0) return -1;
    if (!at_end) return 0;
    if (special(r, think) != 0) return -1;
    if (r->conv->tool_choice == DI_TOOLS_REQUIRED && r->tools_active)
        return di_dsml_block_opening(r->out, r->dsml);
    return 0;
}

/* Reasoning part of a finished assistant turn: kept as <think>r</think> only when the history
 * keeps reasoning (V4: and the message has reasoning; V4.1: and thinking mode), else </think>. */
static int emit_history_reasoning(Renderer *r, const DiMessage *m) {
    bool v41 = r->conv->encoding == DI_ENCODING_V41;
    bool keep = r->keep_reasoning && (v41 ? r->conv->thinking : m->reasoning_content != NULL);
    if (!keep) return special(r, DI_SPELL_END_THINK);
    if (special(r, DI_SPELL_THINK) != 0) return -1;
    if (m->reasoning_content && assistant_text(r, m->reasoning_content) != 0) return -1;
    return special(r, DI_SPELL_END_THINK);
}

/* Reasoning part of an assistant prefix the model continues (§2.9, as recipe 0.2.0 renders
 * it): an open <think> when the prefix ends inside reasoning. */
static int emit_prefix_reasoning(Renderer *r, const DiMessage *m, bool after_user) {
    bool has_content = m->content[0] != '\0';
    const char *rc = m->reasoning_content;
    if (r->conv->encoding == DI_ENCODING_V41) {
        /* V4.1 keeps the prefix's reasoning only after a user/system turn (measured). */
        if (!r->conv->thinking || !after_user) return special(r, DI_SPELL_END_THINK);
        if (special(r, DI_SPELL_THINK) != 0 || (rc && assistant_text(r, rc) != 0)) return -1;
        /* reasoning stays open only when nothing follows it: content or tool calls close it */
        return has_content || m->n_tool_calls > 0 ? special(r, DI_SPELL_END_THINK) : 0;
    }
    if (!rc) {
        if (r->conv->thinking && !has_content) return 0;
        return special(r, DI_SPELL_END_THINK);
    }
    if (special(r, DI_SPELL_THINK) != 0 || assistant_text(r, rc) != 0) return -1;
    if (r->conv->thinking && !has_content) return 0;
    return special(r, DI_SPELL_END_THINK);
}

/* The order an assistant turn's calls are written in (a fresh array of borrowed calls): V4 sorts
 * them by call id (stable), V4.1 keeps the given order (deepseek-recipe 0.2.0, measured). */
static DiToolCall *written_call_order(const Renderer *r, const DiMessage *m) {
    DiToolCall *calls = di_calloc(m->n_tool_calls, sizeof *calls, "tool calls");
    if (!calls) return NULL;
    bool sort = r->conv->encoding != DI_ENCODING_V41;
    for (size_t i = 0; i < m->n_tool_calls; i++) {
        size_t j = i;
        while (sort && j > 0 && strcmp(calls[j - 1].id, m->tool_calls[i].id) > 0) {
            calls[j] = calls[j - 1];
            j--;
        }
        calls[j] = m->tool_calls[i];
    }
    return calls;
}

static int emit_assistant(Renderer *r, const DiMessage *m, const DiMessage *prev, bool after_user) {
    if (emit_assistant_header(r, prev, false) != 0) return -1;
    bool after_task = prev && prev->task != DI_TASK_NONE;
    if (m->prefix) {
        if (emit_prefix_reasoning(r, m, after_user) != 0) return -1;
    } else if (!after_task && emit_history_reasoning(r, m) != 0)
        return -1;
    if (assistant_text(r, m->content) != 0) return -1;
    if (m->n_tool_calls > 0) {
        DiToolCall *calls = written_call_order(r, m);
        if (!calls) return -1;
        int rc = di_dsml_tool_calls_block(r->out, r->dsml, calls, m->n_tool_calls);
        free(calls);
        if (rc != 0) return -1;
    }
    return m->prefix ? 0 : special(r, DI_SPELL_EOS);
}

static const char *tool_id(const DiMessage *m) { return m->tool_call_id ? m->tool_call_id : ""; }

/* A user message joins the turn of the message before it when that is a user or tool message
 * without a task (the merge looks at the previous message's task only: §2.1 quirk). */
static bool joins_previous_turn(const DiMessage *prev) {
    return prev && (prev->role == DI_ROLE_USER || prev->role == DI_ROLE_TOOL) && prev->task == DI_TASK_NONE;
}

/* Position of `id` among the calls of `assistant` in written order, or -1. */
static long call_position(const Renderer *r, const DiMessage *assistant, const char *id) {
    DiToolCall *calls = written_call_order(r, assistant);
    if (!calls) return -1;
    long pos = -1;
    for (size_t k = 0; k < assistant->n_tool_calls && pos < 0; k++)
        if (strcmp(calls[k].id, id) == 0) pos = (long)k;
    free(calls);
    return pos;
}

/* Stable sort of the tool messages among msgs[0..n) by key[], each staying on a tool slot. */
static int sort_tool_slots(const DiMessage **msgs, size_t n, const long *key) {
    const DiMessage **tools = di_calloc(n, sizeof *tools, "tool results");
    long *keys = di_calloc(n, sizeof *keys, "tool result order");
    if (!tools || !keys) {
        free(tools);
        free(keys);
        return -1;
    }
    size_t t = 0;
    for (size_t i = 0; i < n; i++) {
        if (msgs[i]->role != DI_ROLE_TOOL) continue;
        size_t j = t++;
        while (j > 0 && keys[j - 1] > key[i]) {
            tools[j] = tools[j - 1];
            keys[j] = keys[j - 1];
            j--;
        }
        tools[j] = msgs[i];
        keys[j] = key[i];
    }
    t = 0;
    for (size_t i = 0; i < n; i++)
        if (msgs[i]->role == DI_ROLE_TOOL) msgs[i] = tools[t++];
    free(tools);
    free(keys);
    return 0;
}

/* Sort keys of the tool messages of msgs[0..n) answering `owner`: the position of their call
 * in written order; unknown ids get 0. */
static void call_keys(const Renderer *r, const DiMessage *owner, const DiMessage **msgs, size_t n, long *key) {
    for (size_t k = 0; k < n; k++) {
        long pos = msgs[k]->role == DI_ROLE_TOOL ? call_position(r, owner, tool_id(msgs[k])) : -1;
        key[k] = pos < 0 ? 0 : pos;
    }
}

/* V4.1 (deepseek-recipe 0.2.0, measured; recipe.md §2.1): the tool messages of every run of
 * user/tool messages are sorted by the position of their call in the latest assistant turn
 * with calls (unknown ids count as position 0), user messages keeping their places. */
static int order_results_v41(const Renderer *r, const DiMessage **msgs, size_t n, long *key) {
    const DiMessage *latest_calls = NULL;
    for (size_t i = 0; i < n;) {
        const DiMessage *m = msgs[i];
        if (m->role == DI_ROLE_ASSISTANT && m->n_tool_calls > 0) latest_calls = m;
        if (m->role != DI_ROLE_USER && m->role != DI_ROLE_TOOL) {
            i++;
            continue;
        }
        size_t end = i;
        while (end < n && (msgs[end]->role == DI_ROLE_USER || msgs[end]->role == DI_ROLE_TOOL)) end++;
        if (latest_calls) {
            call_keys(r, latest_calls, msgs + i, end - i, key + i);
            if (sort_tool_slots(msgs + i, end - i, key + i) != 0) return -1;
        }
        i = end;
    }
    return 0;
}

/* V4 (deepseek-recipe 0.2.0, measured): for each assistant turn with N calls, at its index i
 * in the original order, the N messages at i+1.. of the list as sorted so far (when there are
 * N) are sorted stably: tool results first, by tool_call_id, any other message after them.
 * With ids that answer the calls this is the call order (V4 writes calls sorted by id); the
 * rest reproduces what the package does with incomplete groups, unknown ids and overlaps. */
static int order_results_v4(const DiMessage **msgs, size_t n) {
    const DiMessage **original = di_calloc(n ? n : 1, sizeof *original, "message order");
    if (!original) return -1;
    memcpy(original, msgs, n * sizeof *msgs);
    for (size_t i = 0; i < n; i++) {
        size_t calls = original[i]->role == DI_ROLE_ASSISTANT ? original[i]->n_tool_calls : 0;
        if (calls == 0 || n - i - 1 < calls) continue;
        const DiMessage **w = msgs + i + 1;
        for (size_t k = 1; k < calls; k++) { /* insertion sort: stable, windows are small */
            const DiMessage *m = w[k];
            size_t j = k;
            while (j > 0 && m->role == DI_ROLE_TOOL &&
                   (w[j - 1]->role != DI_ROLE_TOOL || strcmp(tool_id(w[j - 1]), tool_id(m)) > 0)) {
                w[j] = w[j - 1];
                j--;
            }
            w[j] = m;
        }
    }
    free(original);
    return 0;
}

/* Put tool results in the order the official renderers write them (see the two above). */
static int order_tool_results(const Renderer *r, const DiMessage **msgs, size_t n) {
    if (r->conv->encoding != DI_ENCODING_V41) return order_results_v4(msgs, n);
    long *key = di_calloc(n ? n : 1, sizeof *key, "tool result order");
    if (!key) return -1;
    int rc = order_results_v41(r, msgs, n, key);
    free(key);
    return rc;
}

/* A run of consecutive tool results (already ordered by order_tool_results): one user turn, or
 * in V4.1 the continuation of an open one.  Returns the messages consumed, or -1. */
static long emit_tool_run(Renderer *r, const DiMessage **msgs, size_t n, const DiMessage *prev) {
    size_t run = 0;
    while (run < n && msgs[run]->role == DI_ROLE_TOOL) run++;
    /* V4.1 continues an open user turn; V4 starts a new one (deepseek-recipe 0.2.0) */
    bool join = r->conv->encoding == DI_ENCODING_V41 && joins_previous_turn(prev);
    int rc = join ? text(r, "\n\n") : special(r, DI_SPELL_USER);
    for (size_t i = 0; i < run && rc == 0; i++) {
        if (i > 0) rc = text(r, "\n\n");
        if (rc == 0) rc = text(r, "<tool_result>");
        if (rc == 0) rc = text(r, msgs[i]->content);
        if (rc == 0) rc = text(r, "</tool_result>");
    }
    return rc == 0 ? (long)run : -1;
}

/* A user message merged into the open user turn (deepseek-recipe 0.2.0, measured):
 * V4.1 joins every part with "\n\n", empty ones included.  V4 joins the non-empty user texts
 * with "\n\n" and writes them after the turn's tool results with one "\n\n" (written even
 * when the texts are all empty). */
static int emit_joined_user_part(Renderer *r, const DiMessage *m, const DiMessage *prev, bool *block_has_text) {
    bool empty = m->content[0] == '\0';
    if (r->conv->encoding == DI_ENCODING_V41 || prev->role == DI_ROLE_TOOL) {
        *block_has_text = !empty;
        return text(r, "\n\n") || text(r, m->content) ? -1 : 0;
    }
    if (empty) return 0;
    if (*block_has_text && text(r, "\n\n") != 0) return -1;
    *block_has_text = true;
    return text(r, m->content);
}

static int emit_messages(Renderer *r, const DiMessage **msgs, size_t n) {
    const DiMessage *prev = NULL;
    bool block_has_text = false; /* the open user turn's user texts so far are not all empty */
    /* a non-assistant message came before (V4.1: a system head with text counts) */
    bool after_user = (r->conv->n_messages > 0 && r->conv->messages[0].role == DI_ROLE_SYSTEM) ||
                      r->tools_active || r->conv->response_format != DI_FORMAT_TEXT;
    for (size_t i = 0; i < n;) {
        const DiMessage *m = msgs[i];
        int rc = 0;
        switch (m->role) {
        case DI_ROLE_USER:
            if (!joins_previous_turn(prev)) {
                rc = special(r, DI_SPELL_USER);
                if (rc == 0) rc = text(r, m->content);
                block_has_text = m->content[0] != '\0';
            } else
                rc = emit_joined_user_part(r, m, prev, &block_has_text);
            break;
        case DI_ROLE_DEVELOPER:
            rc = special(r, DI_SPELL_USER) || text(r, m->content) ? -1 : 0;
            break;
        case DI_ROLE_TOOL: {
            long used = emit_tool_run(r, msgs + i, n - i, prev);
            if (used < 0) return -1;
            after_user = true;
            prev = msgs[i + (size_t)used - 1];
            i += (size_t)used;
            continue;
        }
        case DI_ROLE_ASSISTANT: rc = emit_assistant(r, m, prev, after_user); break;
        case DI_ROLE_LATEST_REMINDER:
            /* V4.1 keeps only the first of consecutive reminders (deepseek-recipe 0.2.0) */
            if (r->conv->encoding == DI_ENCODING_V41 && prev && prev->role == DI_ROLE_LATEST_REMINDER) break;
            rc = special(r, DI_SPELL_LATEST_REMINDER) || text(r, m->content) ? -1 : 0;
            break;
        case DI_ROLE_SYSTEM: /* V4.1 only: a system message after the first position */
            rc = special(r, DI_SPELL_SYSTEM) || text(r, m->content) ? -1 : 0;
            break;
        }
        if (rc != 0) return di_error_wrap("rendering messages[%zu] (%s)", (size_t)(m - r->conv->messages),
                                          di_role_name(m->role));
        if (m->role != DI_ROLE_ASSISTANT) after_user = true;
        prev = m;
        i++;
    }
    if (n > 0 && msgs[n - 1]->role == DI_ROLE_ASSISTANT && msgs[n - 1]->prefix) {
        /* tool_choice required still opens the block after a prefix (recipe 0.2.0) */
        if (r->conv->tool_choice == DI_TOOLS_REQUIRED && r->tools_active)
            return di_dsml_block_opening(r->out, r->dsml);
        return 0;
    }
    return emit_assistant_header(r, prev, true);
}

/* The messages that render in the body: V4 drops system messages (hoisted into the head),
 * V4.1 drops only a system message at index 0. */
static size_t body_messages(const Renderer *r, const DiMessage **msgs) {
    const DiConversation *c = r->conv;
    /* Official encoder rule (recipe.md §2.3; the package has no developer role): when thinking
     * drops earlier reasoning, developer messages before the last user/developer turn go too. */
    size_t last_user = 0;
    bool drop_developers = c->thinking && !r->keep_reasoning;
    for (size_t i = 0; i < c->n_messages; i++)
        if (c->messages[i].role == DI_ROLE_USER || c->messages[i].role == DI_ROLE_DEVELOPER) last_user = i;
    size_t n = 0;
    for (size_t i = 0; i < c->n_messages; i++) {
        const DiMessage *m = &c->messages[i];
        if (m->role == DI_ROLE_SYSTEM && (c->encoding != DI_ENCODING_V41 || i == 0)) continue;
        if (m->role == DI_ROLE_DEVELOPER && drop_developers && i < last_user) continue;
        msgs[n++] = m;
    }
    return n;
}

int di_render_conversation(const DiConversation *conv, DiSegmentList *out) {
    if (!conv || !out) return di_errorf("render: invalid argument");
    if (conv->effort == DI_EFFORT_NUMERIC && conv->encoding != DI_ENCODING_V41)
        return di_errorf("render: a numeric reasoning effort needs the v41 encoding");
    di_segments_clear(out);
    Renderer r = {
        .conv = conv,
        .dsml = di_dsml_dialect(conv->encoding),
        .out = out,
        .tools_active = conv->n_tools > 0 && conv->tool_choice != DI_TOOLS_NONE,
    };
    r.keep_reasoning = r.tools_active || !conv->drop_thinking;
    const DiMessage **msgs = NULL;
    if (conv->n_messages > 0 && !(msgs = di_calloc(conv->n_messages, sizeof *msgs, "message order"))) return -1;
    size_t n = body_messages(&r, msgs);
    int rc = order_tool_results(&r, msgs, n);
    if (rc == 0) rc = special(&r, DI_SPELL_BOS);
    if (rc == 0) rc = conv->encoding == DI_ENCODING_V41 ? emit_head_v41(&r) : emit_head_v4(&r);
    if (rc == 0) rc = emit_messages(&r, msgs, n);
    free(msgs);
    return rc;
}
