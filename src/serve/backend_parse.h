/* backend_parse.h — model output text -> the parsed output events of a request.
 *
 * A backend produces decoded text; the protocols want reasoning / answer / tool-call events
 * (recipe/api_stream.h).  This module runs the recipe's streaming output parser
 * (recipe/parse.h, recipe.md §3) with the options the request implies (thinking start, tool
 * parsing, JSON mode, stop sequences) and emits what each piece of text adds: new reasoning,
 * new answer text, a tool call once its name is complete, then its argument text.  A raw-prompt
 * completion is not parsed: all text is answer.  Tokens are attached to the next event, so the
 * usage the protocols report adds up to what the backend generated. */
#ifndef DI_SERVE_BACKEND_PARSE_H
#define DI_SERVE_BACKEND_PARSE_H

#include "serve/backend.h"

#include <stdbool.h>

typedef struct DiOutputEvents DiOutputEvents;

/* `req` is read only here (options are copied). */
DiOutputEvents *di_output_events_new(const DiApiRequest *req, DiBackendEmit emit, void *user);
void di_output_events_free(DiOutputEvents *o);

/* More output: `text` (any split, UTF-8 complete or not) that accounts for `tokens` tokens.
 * Returns 1 when a stop sequence ended the answer (the FINISH event has been emitted and the
 * backend should stop generating), 0 to go on, -1 on error (FINISH with the error emitted). */
int di_output_events_text(DiOutputEvents *o, const char *text, size_t len, int64_t tokens);

/* The logprobs of the tokens the next di_output_events_text call accounts for (copied; the
 * token bytes they point to must outlive the request).  They travel with the event that
 * carries those tokens. */
int di_output_events_logprobs(DiOutputEvents *o, const DiApiLogprob *lp, size_t n);

/* The backend finished (`finish`: STOP for EOS, LENGTH, ABORT, ERROR with `error` and the
 * HTTP status for a refusal before any output).  Flushes the parser, emits the rest and the
 * FINISH.  No-op once FINISH was emitted. */
void di_output_events_finish(DiOutputEvents *o, DiApiFinish finish, const char *stop, const char *error, int status);

/* Emit READY (prompt accepted). */
void di_output_events_ready(DiOutputEvents *o, int64_t prompt_tokens, int64_t cache_hit_tokens);

/* The prompt tokens the engine restored from its prefix cache.  Known only once the engine has
 * admitted the request, after READY, so it travels with FINISH and the final usage reports it. */
void di_output_events_cache_hits(DiOutputEvents *o, int64_t cache_hit_tokens);

bool di_output_events_done(const DiOutputEvents *o);

#endif
