/* conversation.h — the internal conversation model that every prompt renderer consumes
 * (recipe.md §2.1), and its construction from JSON.
 *
 * Protocol converters (Chat Completions, Responses, Messages) and the `deepinfer render` CLI
 * produce this one shape; the renderers (render.h) never see protocol JSON.  Strings are owned
 * heap copies (UTF-8, validated); a string that was absent in the input is NULL, which matters
 * for `reasoning_content` (absent and "" render differently, §2.2 / recipe 0.2). */
#ifndef DI_RECIPE_CONVERSATION_H
#define DI_RECIPE_CONVERSATION_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef enum {
    DI_ROLE_SYSTEM = 0,
    DI_ROLE_USER,
    DI_ROLE_ASSISTANT,
    DI_ROLE_TOOL,
    DI_ROLE_LATEST_REMINDER,
    DI_ROLE_DEVELOPER, /* internal search-agent role; the public API rejects it (§2.2) */
} DiRole;

/* Quick-task tokens (§1.1 table, §2.2 transition rule). */
typedef enum {
    DI_TASK_NONE = 0,
    DI_TASK_ACTION,
    DI_TASK_QUERY,
    DI_TASK_AUTHORITY,
    DI_TASK_DOMAIN,
    DI_TASK_TITLE,
    DI_TASK_READ_URL,
} DiTask;

typedef enum {
    DI_ENCODING_V4 = 0,    /* April release: effort none/high -> no prefix, max -> "Absolute maximum" */
    DI_ENCODING_V4_0731,   /* revised V4: low -> none, high (default) -> "Absolute", max -> "Beyond" */
    DI_ENCODING_V41,       /* V4.1: <｜System｜>, numeric effort, " calls" DSML dialect */
} DiEncoding;

typedef enum {
    DI_EFFORT_DEFAULT = 0, /* not given: high when thinking (API docs, recipe 0.2) */
    DI_EFFORT_LOW,
    DI_EFFORT_HIGH,
    DI_EFFORT_XHIGH, /* renders like high (§2.4) */
    DI_EFFORT_MAX,
    DI_EFFORT_NUMERIC, /* V4.1 only: DiConversation.effort_value in 1..100 */
} DiEffort;

typedef enum { DI_TOOLS_AUTO = 0, DI_TOOLS_NONE, DI_TOOLS_REQUIRED } DiToolChoice;
typedef enum { DI_FORMAT_TEXT = 0, DI_FORMAT_JSON_OBJECT, DI_FORMAT_JSON_SCHEMA } DiResponseFormat;

typedef struct {
    char *id;        /* may be "" */
    char *name;
    char *arguments; /* JSON text of an object (not required to be valid: §2.2 fallback) */
} DiToolCall;

typedef struct {
    DiRole role;
    char *content;           /* never NULL ("" when absent) */
    char *reasoning_content; /* assistant only; NULL when absent */
    DiToolCall *tool_calls;  /* assistant only */
    size_t n_tool_calls;
    char *tool_call_id;      /* tool only; NULL when absent */
    DiTask task;
    bool prefix;             /* assistant only: continuation of this message (§2.9) */
} DiMessage;

typedef struct {
    char *name;
    char *description; /* NULL when absent (rendered as "") */
    json_t *parameters; /* NULL when absent (rendered as null); owned reference */
} DiToolDef;

typedef struct {
    DiEncoding encoding;
    DiMessage *messages;
    size_t n_messages;
    DiToolDef *tools;
    size_t n_tools;
    bool thinking;
    DiEffort effort;
    int effort_value; /* DI_EFFORT_NUMERIC only */
    DiToolChoice tool_choice;
    DiResponseFormat response_format;
    json_t *response_schema; /* DI_FORMAT_JSON_SCHEMA: the schema the prompt shows (owned) */
    bool drop_thinking; /* default true; false keeps every historical reasoning_content */
} DiConversation;

void di_conversation_init(DiConversation *conv);
void di_conversation_free(DiConversation *conv);

/* Build a conversation from the `render` JSON of architecture.md:
 *   {"encoding": "v4"|"v4_0731"|"v4-0731"|"v41", "messages": [...], "tools": [...],
 *    "thinking_mode": "chat"|"thinking", "reasoning_effort": null|"low"|"high"|...|1..100,
 *    "drop_thinking": bool, "tool_choice": "auto"|"none"|"required"|{"type":"function","function":{"name":N}},
 *    "response_format": "text"|"json_object"|{"type": ...}
 *                       |{"type": "json_schema", "json_schema": {"schema": S}}}
 * Messages follow the OpenAI shape (role, content, reasoning_content, tool_calls[].function,
 * tool_call_id) plus "task", "prefix"; "tools"/"response_format" on a system message are
 * accepted as conversation-level settings (the shape of rendered_vectors.json).
 * Errors name the field: "messages[2].tool_calls[0].function.name: expected a string". */
int di_conversation_from_json(const json_t *root, DiConversation *out);

/* Parse only the "encoding" spelling. */
int di_encoding_parse(const char *name, DiEncoding *out);
const char *di_role_name(DiRole role);

#endif
