/* api_request_internal.h — validation helpers shared by the protocol request parsers
 * (api_request.c: common rules + Chat Completions + Completions; api_request_responses.c;
 * api_request_messages.c).  Not a public header.  Each helper returns 0 / -1 with an error
 * message naming the field, as the official conversion words it (recipe.md §4). */
#ifndef DI_RECIPE_API_REQUEST_INTERNAL_H
#define DI_RECIPE_API_REQUEST_INTERNAL_H

#include "recipe/api_request.h"

/* The JSON type of a value for messages; "nothing (the field is missing)" for NULL. */
const char *di_api_type_name(const json_t *value);

/* Read an optional number field within [lo, hi] (open bounds when lo_open / hi_open). */
int di_api_number_in(const json_t *body, const char *key, double lo, bool lo_open, double hi, double *out,
                     bool *present);
/* max_tokens-style field: integer in [1, DI_API_MAX_TOKENS_UPPER_BOUND] (clamp instead of reject when clamp). */
int di_api_max_tokens(const json_t *body, const char *key, bool clamp, int64_t *out);
/* A stop field: string or array of strings, at most 16; non_empty rejects "" (Messages). */
int di_api_stop(const json_t *value, const char *key, bool non_empty, DiApiRequest *req);
/* Map an effort name (none/minimal/low/medium/high/xhigh/ultra/max) to the recipe's levels;
 * "none" returns 1 (thinking off). */
int di_api_effort(const char *name, const char *field, char out[8]);
/* Tool name rule of the official API: ^[a-zA-Z0-9_-]+$, 1..64 characters. */
int di_api_check_tool_name(const char *name, const char *field);
/* Append {"type":"function","function":{name,description,parameters}} to conv.tools, names unique;
 * `parameters` is a checked schema (di_api_tool_schema), copied. */
int di_api_add_tool(json_t *tools, const char *name, const json_t *description, const json_t *parameters,
                    const char *field);
/* The schema the prompt shows for a tool's `parameters` (NULL or null: none), checked as the
 * official conversion does; strict schemas normalised (api_tool_schema.c).  *out is new. */
int di_api_tool_schema(const char *tool, const json_t *parameters, bool strict, json_t **out);
/* A tool's optional "strict" flag (a boolean or null) of `obj`; `field` names obj in errors. */
int di_api_tool_strict(const json_t *obj, const char *field, bool *strict);
/* Strict and non-strict tools may not be mixed in one request. */
int di_api_tools_strict_agree(size_t n_strict, size_t n_tools);
/* Apply tool_choice: none drops tools, a named choice keeps only that tool; Required + thinking -> 400. */
int di_api_apply_tool_choice(DiApiRequest *req, json_t *tools, const char *named, const char *field);
/* Resolve temperature / top_p for the mode (thinking: temperature 1.0, top_p in [0.95, 1]). */
void di_api_resolve_sampling(DiApiRequest *req, bool has_temperature, double temperature, bool has_top_p,
                             double top_p);
/* The schema of a json_schema response format: holder's "schema" (an object or a boolean),
 * borrowed; missing or of another type is an error naming `field`. */
int di_api_response_schema(const json_t *holder, const char *field, json_t **schema);
/* Put a json_schema response format (schema: NULL for none) into req->conversation: the
 * prompt shows the schema (no JSON-mode parsing, as in the official conversion). */
int di_api_set_response_schema(DiApiRequest *req, const json_t *schema);
/* Derive req's output constraint from the (unmarked) body once the protocol parse is done:
 * the official conversion's output_constraint, then vLLM's structured_outputs extra. */
int di_api_derive_constraint(const json_t *body, DiApiRequest *req);
/* Build req->conversation from messages and tools (steals both). */
int di_api_set_conversation(DiApiRequest *req, json_t *messages, json_t *tools);
/* A message object {"role": role, "content": text} (text NULL -> ""). */
json_t *di_api_message(const char *role, const char *text);
/* Whether the conversation text mentions "json" (any case), the json_object precondition. */
bool di_api_mentions_json(const json_t *messages, const char *extra);
/* Join the texts of a content value: a string, or an array of parts {type, text} whose type is
 * one of `text_types` (NULL-terminated); other part types are rejected, with `field` naming it. */
int di_api_join_text(const json_t *content, const char *const *text_types, const char *sep, const char *field,
                     char **out);

/* api_request_fields.c: refuse a top-level field the protocol does not list, or a listed one
 * at a value this server does not support; the message names the field. */
int di_api_check_fields(const json_t *body, DiApiProtocol protocol);
/* api_request_nested.c: the same inside the nested objects; the message names the full path.
 * Called by di_api_check_fields. */
int di_api_check_nested(const json_t *body, DiApiProtocol protocol);
/* vLLM's extra sampling fields and logit_bias (after max_tokens is known); top_k_only: Messages. */
int di_api_sampling_extras(const json_t *body, DiApiRequest *req, bool top_k_only);
/* logprobs / top_logprobs / include, in the protocol's spelling. */
int di_api_logprobs(const json_t *body, DiApiRequest *req);
/* thinking.budget_tokens of a thinking object (Messages, Chat). */
int di_api_thinking_budget(const json_t *thinking, DiApiRequest *req);

int di_api_parse_chat(json_t *body, DiApiRequest *req);
int di_api_parse_completions(json_t *body, DiApiRequest *req);
int di_api_parse_responses(json_t *body, DiApiRequest *req);
int di_api_parse_messages(json_t *body, DiApiRequest *req);

#endif
