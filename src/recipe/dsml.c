/* dsml.c — DSML rendering (see dsml.h). */
#include "recipe/dsml.h"

#include "recipe/dsml_args.h"

#include "base/error.h"

#include <string.h>

static const DiDsmlDialect dialect_v4 = {"tool_calls", "invoke", "parameter", DI_FLOAT_STYLE_V4, false};
static const DiDsmlDialect dialect_v41 = {" calls", " invoke", " parameter", DI_FLOAT_STYLE_PYTHON, true};

const DiDsmlDialect *di_dsml_dialect(DiEncoding encoding) {
    return encoding == DI_ENCODING_V41 ? &dialect_v41 : &dialect_v4;
}

/* Control-token spellings that may appear in template text. */
static const char *const template_specials[] = {DI_DSML_TOKEN, "</think>", "<think>"};

int di_dsml_emit_template(DiSegmentList *out, const char *tmpl) {
    const char *p = tmpl;
    while (*p) {
        const char *best = NULL, *best_tok = NULL;
        for (size_t i = 0; i < sizeof template_specials / sizeof template_specials[0]; i++) {
            const char *hit = strstr(p, template_specials[i]);
            if (hit && (!best || hit < best)) { best = hit; best_tok = template_specials[i]; }
        }
        if (!best) return di_segments_text(out, p, strlen(p));
        if (di_segments_text(out, p, (size_t)(best - p)) != 0) return -1;
        if (di_segments_special(out, best_tok) != 0) return -1;
        p = best + strlen(best_tok);
    }
    return 0;
}

/* Template text with the dialect's tag names substituted for @B, @I and @P. */
static int emit_dialect_template(DiSegmentList *out, const DiDsmlDialect *d, const char *tmpl) {
    DiStr s;
    di_str_init(&s);
    int rc = 0;
    for (const char *p = tmpl; *p && rc == 0; p++) {
        if (p[0] == '@' && (p[1] == 'B' || p[1] == 'I' || p[1] == 'P')) {
            rc = di_str_appends(&s, p[1] == 'B' ? d->block : p[1] == 'I' ? d->invoke : d->parameter);
            p++;
        } else
            rc = di_str_append(&s, p, 1);
    }
    if (rc == 0) rc = di_dsml_emit_template(out, s.data ? s.data : "");
    di_str_free(&s);
    return rc;
}

/* §2.6, byte-exact; "<｜DSML｜@B>" is the block tag of the dialect. */
static const char tools_block_head[] =
    "## Tools\n\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools by "
    "writing a \"<" DI_DSML_TOKEN "@B>\" block like the following:\n\n"
    "<" DI_DSML_TOKEN "@B>\n"
    "<" DI_DSML_TOKEN "@I name=\"$TOOL_NAME\">\n"
    "<" DI_DSML_TOKEN "@P name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" DI_DSML_TOKEN "@P>\n"
    "...\n"
    "</" DI_DSML_TOKEN "@I>\n"
    "<" DI_DSML_TOKEN "@I name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</" DI_DSML_TOKEN "@I>\n"
    "</" DI_DSML_TOKEN "@B>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types "
    "(numbers, booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning "
    "inside <think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n";

static const char tools_block_tail[] =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";

/* One schema line: exactly name, description ("" when absent), parameters (recipe 0.2). */
static int append_tool_schema(DiStr *s, const DiToolDef *t, DiFloatStyle style) {
    const char *desc = t->description ? t->description : "";
    if (di_str_appends(s, "{\"name\": ") != 0 || di_pyjson_append_string(s, t->name, strlen(t->name)) != 0) return -1;
    if (di_str_appends(s, ", \"description\": ") != 0 || di_pyjson_append_string(s, desc, strlen(desc)) != 0) return -1;
    if (di_str_appends(s, ", \"parameters\": ") != 0) return -1;
    if (t->parameters ? di_pyjson_append(s, t->parameters, style) != 0 : di_str_appends(s, "null") != 0) {
        return di_error_wrap("tool \"%s\" parameters", t->name);
    }
    return di_str_append(s, "}", 1);
}

int di_dsml_tools_block(DiSegmentList *out, const DiDsmlDialect *d, const DiToolDef *tools, size_t n_tools) {
    if (!out || !d || (!tools && n_tools)) return di_errorf("tools block: invalid argument");
    if (emit_dialect_template(out, d, tools_block_head) != 0) return -1;
    DiStr s;
    di_str_init(&s);
    int rc = 0;
    for (size_t i = 0; i < n_tools && rc == 0; i++) {
        if (i > 0) rc = di_str_append(&s, "\n", 1);
        if (rc == 0) rc = append_tool_schema(&s, &tools[i], d->floats);
    }
    if (rc == 0) rc = di_segments_text(out, s.data ? s.data : "", s.len); /* client text: TEXT */
    di_str_free(&s);
    if (rc != 0) return -1;
    return di_segments_text(out, tools_block_tail, strlen(tools_block_tail));
}

/* `<｜DSML｜parameter name="KEY" string="true|false">VALUE</｜DSML｜parameter>\n` */
static int emit_parameter(DiSegmentList *out, const DiDsmlDialect *d, const char *key, size_t key_len,
                          const char *value, size_t value_len, bool is_string) {
    if (di_segments_text(out, "<", 1) != 0 || di_segments_special(out, DI_DSML_TOKEN) != 0) return -1;
    if (di_segments_text(out, d->parameter, strlen(d->parameter)) != 0) return -1;
    if (di_segments_text(out, " name=\"", 7) != 0 || di_segments_text(out, key, key_len) != 0) return -1;
    const char *type = is_string ? "\" string=\"true\">" : "\" string=\"false\">";
    if (di_segments_text(out, type, strlen(type)) != 0) return -1;
    if (di_segments_text(out, value, value_len) != 0) return -1;
    if (di_segments_text(out, "</", 2) != 0 || di_segments_special(out, DI_DSML_TOKEN) != 0) return -1;
    if (di_segments_text(out, d->parameter, strlen(d->parameter)) != 0) return -1;
    return di_segments_text(out, ">\n", 2);
}

/* Parameters of one call, from the arguments as the official renderer reads them
 * (dsml_args.h).  Arguments it refuses (not a JSON object) become the single string parameter
 * "arguments" (deepseek-recipe 0.2.0 does this for both V4 and V4.1). */
static int emit_parameters(DiSegmentList *out, const DiDsmlDialect *d, const DiToolCall *call) {
    DiDsmlArg *args = NULL;
    size_t n = 0, len = strlen(call->arguments);
    int rc = di_dsml_args_read(call->arguments, len, d->floats, &args, &n);
    if (rc < 0) return di_error_wrap("tool call \"%s\" arguments", call->name);
    if (rc > 0) return emit_parameter(out, d, "arguments", 9, call->arguments, len, true);
    if (n == 0 && d->blank_line_when_no_parameters) rc = di_segments_text(out, "\n", 1);
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = emit_parameter(out, d, args[i].key.data ? args[i].key.data : "", args[i].key.len,
                            args[i].value.data ? args[i].value.data : "", args[i].value.len, args[i].is_string);
    di_dsml_args_free(args, n);
    return rc;
}

static int emit_tag(DiSegmentList *out, const char *open, const char *name, const char *close) {
    if (di_segments_text(out, open, strlen(open)) != 0 || di_segments_special(out, DI_DSML_TOKEN) != 0) return -1;
    if (di_segments_text(out, name, strlen(name)) != 0) return -1;
    return di_segments_text(out, close, strlen(close));
}

int di_dsml_tool_calls_block(DiSegmentList *out, const DiDsmlDialect *d, const DiToolCall *calls, size_t n_calls) {
    if (!out || !d || (!calls && n_calls)) return di_errorf("tool-call block: invalid argument");
    if (emit_tag(out, "\n\n<", d->block, ">\n") != 0) return -1;
    for (size_t i = 0; i < n_calls; i++) {
        if (emit_tag(out, "<", d->invoke, " name=\"") != 0) return -1;
        if (di_segments_text(out, calls[i].name, strlen(calls[i].name)) != 0) return -1;
        if (di_segments_text(out, "\">\n", 3) != 0) return -1;
        if (emit_parameters(out, d, &calls[i]) != 0) return -1;
        if (emit_tag(out, "</", d->invoke, ">\n") != 0) return -1;
    }
    return emit_tag(out, "</", d->block, ">");
}

int di_dsml_block_opening(DiSegmentList *out, const DiDsmlDialect *d) {
    if (!out || !d) return di_errorf("tool-call block: invalid argument");
    return emit_tag(out, "\n\n<", d->block, ">\n");
}
