/* grammar_json.h — the JSON Schema front-end's generator as a library, for grammars that embed
 * JSON values of several schemas (the DSML tool-call grammar, grammar_dsml.c): each schema
 * becomes an EBNF expression over shared rules (rule names never collide, the JSON base rules
 * are written once), and the whole is built with the caller's own rules around it.  The same
 * policy as di_grammar_compile_json_schema (grammar_json.c's header). */
#ifndef DI_ENGINE_GRAMMAR_JSON_H
#define DI_ENGINE_GRAMMAR_JSON_H

#include "engine/grammar/grammar.h"

#include <jansson.h>

typedef struct DiJsonGen DiJsonGen;

DiJsonGen *di_json_gen_new(void);
void di_json_gen_free(DiJsonGen *jg);
/* The expression of a value matching schema (root: the document its $refs resolve in; path
 * names the schema in errors); *expr is malloc'd.  -1 naming an unsupported keyword. */
int di_json_gen_value(DiJsonGen *jg, const json_t *root, const json_t *schema, const char *path, char **expr);
/* Leave more code points out of unescaped string characters (EBNF class text, e.g. "\\uff5c";
 * such characters are still written as \u escapes). */
int di_json_gen_exclude(DiJsonGen *jg, const char *class_text);
/* Append EBNF rules of the caller (which may use the expressions and the json_* base rules). */
int di_json_gen_rules(DiJsonGen *jg, const char *ebnf);
/* Compile everything with the given root rule; *ebnf_out (optional) receives the EBNF text. */
DiGrammar *di_json_gen_build(DiJsonGen *jg, const char *root, char **ebnf_out);

#endif
