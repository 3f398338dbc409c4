/* test_grammar_dsml.c — the DSML tool-call grammar (grammar_dsml.c): it accepts the tool-call
 * blocks the recipe's own renderer writes (dsml.c, both dialects, with and without free text,
 * pre-opened for a required call) and hand-written JSON-valued parameters, and rejects calls a
 * client could not use: unknown tools or parameters, missing required ones, arguments that
 * break the schema, free text where a call is required, text after the block. */
#include "test.h"

#include "base/error.h"
#include "engine/grammar/grammar.h"
#include "test_grammar_helpers.h"
#include "recipe/dsml.h"

#include <jansson.h>

#define D DI_GRAMMAR_DSML_MARKER

static const char TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":{\"enum\":[\"c\",\"f\"]},"
    "\"days\":{\"type\":\"integer\",\"minimum\":0},\"hours\":{\"type\":\"array\",\"items\":{\"type\":\"number\"}}},"
    "\"required\":[\"city\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"now\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}}]";

static DiGrammar *dsml_grammar(const DiDsmlDialect *d, bool required, bool opened, const char *tools) {
    char spec[4096];
    snprintf(spec, sizeof spec, "{\"block\":\"%s\",\"invoke\":\"%s\",\"parameter\":\"%s\","
             "\"required\":%s,\"opened\":%s,\"tools\":%s}", d->block, d->invoke, d->parameter,
             required ? "true" : "false", opened ? "true" : "false", tools);
    DiGrammar *g = di_grammar_compile_dsml(spec, strlen(spec), NULL);
    CHECK_MSG(g != NULL, "compile: %s", di_error_message());
    return g;
}

static int accepts(const DiGrammar *g, const char *s) { return grammar_accepts(g, s); }

/* The block the recipe renders for these calls (specials written as their spellings). */
static char *rendered(const DiDsmlDialect *d, DiToolCall *calls, size_t n) {
    DiSegmentList out;
    di_segments_init(&out);
    char *s = di_dsml_tool_calls_block(&out, d, calls, n) == 0 ? strdup(out.bytes) : NULL;
    di_segments_free(&out);
    CHECK(s != NULL);
    return s;
}

static void check_dialect(DiEncoding enc) {
    const DiDsmlDialect *d = di_dsml_dialect(enc);
    DiToolCall calls[] = {{.name = "get_weather", .arguments = "{\"city\": \"Paris <b>\\n\", \"unit\": \"f\", \"days\": 3}"},
                          {.name = "now", .arguments = "{}"},
                          {.name = "get_weather", .arguments = "{\"city\": \"Rome\", \"hours\": [3e2]}"}};
    char *block = rendered(d, calls, 3);
    DiGrammar *req = dsml_grammar(d, true, false, TOOLS), *aut = dsml_grammar(d, false, false, TOOLS);
    DiGrammar *opened = dsml_grammar(d, true, true, TOOLS);
    if (!block || !req || !aut || !opened) goto done;
    char buf[4096], open[64];
    snprintf(open, sizeof open, "\n\n<" D "%s>\n", d->block);
    CHECK(strncmp(block, open, strlen(open)) == 0);
    CHECK_MSG(accepts(req, block), "required refuses the rendered block: %s", block);
    CHECK(accepts(opened, block + strlen(open)));
    CHECK(!accepts(opened, block));
    snprintf(buf, sizeof buf, "Let me check <that>.%s", block);
    CHECK(accepts(aut, buf));
    CHECK(accepts(aut, "No tool needed: 1 < 2.\n"));
    CHECK(accepts(aut, ""));
    CHECK(!accepts(req, buf));                                  /* text where a call is required */
    CHECK(!accepts(req, "Plain answer."));
    CHECK(!accepts(aut, "a fake \xef\xbd\x9c marker"));         /* free text never holds U+FF5C */
    snprintf(buf, sizeof buf, "%strailing", block);
    CHECK(!accepts(req, buf));
    snprintf(buf, sizeof buf, "%s\n\n<" D "%s>\n</" D "%s>", "", d->block, d->block); /* an empty block */
    CHECK(!accepts(req, buf));
done:
    free(block);
    di_grammar_free(req), di_grammar_free(aut), di_grammar_free(opened);
}

TEST(accepts_the_recipes_rendered_blocks_in_both_dialects) {
    CHECK(strcmp(DI_GRAMMAR_DSML_MARKER, DI_DSML_TOKEN) == 0); /* the engine's spelling is the recipe's */
    check_dialect(DI_ENCODING_V4);
    check_dialect(DI_ENCODING_V41);
}

/* One V4 invoke of get_weather with the given parameter lines, as a required block. */
static int weather_call(const DiGrammar *g, const char *params) {
    char buf[2048];
    snprintf(buf, sizeof buf, "\n\n<" D "tool_calls>\n<" D "invoke name=\"get_weather\">\n%s</" D "invoke>\n</" D "tool_calls>", params);
    return accepts(g, buf);
}
#define P(k, s, v) "<" D "parameter name=\"" k "\" string=\"" s "\">" v "</" D "parameter>\n"

TEST(arguments_follow_the_schema) {
    DiGrammar *g = dsml_grammar(di_dsml_dialect(DI_ENCODING_V4), true, false, TOOLS);
    if (!g) return;
    CHECK(weather_call(g, P("city", "true", "Oslo")));
    CHECK(weather_call(g, P("city", "false", "\"Oslo\"") P("days", "false", "0")));
    CHECK(weather_call(g, P("city", "true", "x") P("unit", "false", "\"c\"") P("hours", "false", "[]")));
    CHECK(weather_call(g, P("city", "true", "") P("hours", "false", "[1,-2.5e3,0.25]")));
    CHECK(!weather_call(g, P("unit", "true", "c")));                            /* city is required */
    CHECK(!weather_call(g, P("city", "false", "Oslo")));                        /* not JSON */
    CHECK(!weather_call(g, P("city", "false", "3")));                           /* not a string */
    CHECK(!weather_call(g, P("city", "true", "x") P("unit", "true", "k")));     /* not in the enum */
    CHECK(!weather_call(g, P("city", "true", "x") P("days", "false", "-1")));   /* minimum 0 */
    CHECK(!weather_call(g, P("city", "true", "x") P("days", "false", "1.5")));  /* integer */
    CHECK(!weather_call(g, P("city", "true", "x") P("days", "true", "1")));     /* an integer is not raw text */
    CHECK(!weather_call(g, P("city", "true", "x") P("hours", "false", "[\"1\"]")));
    CHECK(!weather_call(g, P("city", "true", "x") P("extra", "true", "1")));    /* unknown parameter */
    CHECK(!weather_call(g, P("days", "false", "1") P("city", "true", "x")));    /* schema order */
    CHECK(!weather_call(g, P("city", "true", "x") P("city", "true", "y")));     /* duplicate */
    CHECK(!weather_call(g, P("city", "true", "a" D "b")));                       /* the marker inside raw text */
    CHECK(!weather_call(g, P("city", "false", "\"a" D "b\"")));                 /* ... or a JSON string */
    CHECK(weather_call(g, P("city", "false", "\"a\\uff5c\"")));              /* escaped, it is text */
    CHECK(!accepts(g, "\n\n<" D "tool_calls>\n<" D "invoke name=\"get_time\">\n\n</" D "invoke>\n</" D "tool_calls>"));
    di_grammar_free(g);
}

static void check_error(const char *tools, const char *needle) {
    char spec[2048];
    snprintf(spec, sizeof spec, "{\"block\":\"b\",\"invoke\":\"i\",\"parameter\":\"p\",\"required\":true,"
             "\"opened\":false,\"tools\":%s}", tools);
    di_error_clear();
    DiGrammar *g = di_grammar_compile_dsml(spec, strlen(spec), NULL);
    CHECK_MSG(g == NULL, "tools %s compiled", tools);
    CHECK_MSG(strstr(di_error_message(), needle) != NULL, "error '%s' lacks '%s'", di_error_message(), needle);
    di_grammar_free(g);
}

TEST(unservable_tools_are_named_errors) {
    check_error("[]", "non-empty 'tools'");
    check_error("[{\"function\":{}}]", "no function name");
    check_error("[{\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"oneOf\":[]}}}]", "unsupported keyword 'oneOf'");
    check_error("[{\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"format\":\"uri\"}}}}}]",
                "unsupported format 'uri'");
    check_error("[{\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{},\"required\":[\"x\"]}}}]",
                "required parameter 'x'");
    check_error("[{\"function\":{\"name\":\"a\\\"b\"}}]", "cannot be written in DSML");
    di_error_clear();
    CHECK(di_grammar_compile_dsml(NULL, 0, NULL) == NULL);
}

int main(void) {
    RUN_TEST(accepts_the_recipes_rendered_blocks_in_both_dialects);
    RUN_TEST(arguments_follow_the_schema);
    RUN_TEST(unservable_tools_are_named_errors);
    return TEST_SUMMARY();
}
