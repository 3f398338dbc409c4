/* dsml.h — DSML, the tool-call markup of V4 and V4.1 (recipe.md §2.2 grammar, §2.6), on the
 * rendering side: the tag spellings of both dialects, the TOOLS_BLOCK instructions and the
 * tool-call block of an assistant turn in the history.  (Parsing DSML out of model output is
 * the streaming state machine's job, parse.h.)
 *
 * Every `｜DSML｜` marker and the literal <think>/</think> inside TOOLS_BLOCK are written as
 * SPECIAL segments (§5.2; deepseek-recipe 0.2.0 reports them in special_ranges); tool names,
 * keys and values are client strings and always TEXT. */
#ifndef DI_RECIPE_DSML_H
#define DI_RECIPE_DSML_H

#include "recipe/conversation.h"
#include "recipe/render_json.h"
#include "recipe/segments.h"

#define DI_DSML_TOKEN "｜DSML｜"

typedef struct {
    const char *block;     /* "tool_calls" (V4) or " calls" (V4.1) */
    const char *invoke;    /* "invoke" or " invoke" */
    const char *parameter; /* "parameter" or " parameter" */
    DiFloatStyle floats;
    bool blank_line_when_no_parameters; /* V4.1 writes "\n\n" between the tags of an empty invoke */
} DiDsmlDialect;

const DiDsmlDialect *di_dsml_dialect(DiEncoding encoding);

/* Append template text, writing every `｜DSML｜`, `<think>` and `</think>` in it as a SPECIAL
 * segment.  For template strings only — never for client text. */
int di_dsml_emit_template(DiSegmentList *out, const char *tmpl);

/* "## Tools ... invoke tool calls.\n" with one Python-style JSON line per tool (§2.6). */
int di_dsml_tools_block(DiSegmentList *out, const DiDsmlDialect *d, const DiToolDef *tools, size_t n_tools);

/* "\n\n<｜DSML｜tool_calls>\n" + invokes + "</｜DSML｜tool_calls>" for an assistant turn. */
int di_dsml_tool_calls_block(DiSegmentList *out, const DiDsmlDialect *d, const DiToolCall *calls, size_t n_calls);

/* The opening of a block the prompt pre-fills for tool_choice required (§2.8 example 13). */
int di_dsml_block_opening(DiSegmentList *out, const DiDsmlDialect *d);

#endif
