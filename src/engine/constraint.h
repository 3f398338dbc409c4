/* constraint.h — structured outputs inside the engine (engine-features.md §5): one engine's
 * grammar vocabulary and compiled-grammar store, and the per-request matcher that masks the
 * request's logits rows and follows its sampled tokens.
 *
 * Admission (main thread) compiles the request's constraint through the store (cached by text;
 * a server compiles it ahead on its request thread, di_constraints_prepare, so the step loop
 * does not) and gives the request a matcher; a bad schema, regex or grammar fails the request there with
 * the problem named.  Sampling (the thread executing the step) calls di_constraint_mask_row on
 * the row's logits before the sampler draws, then di_constraint_accept with the token drawn.
 * Speculative decoding (step.c) runs a request's drafts through its matcher when they are
 * drafted, cuts them at the first one the grammar refuses and rolls the matcher back with
 * di_constraint_rollback; the verify rows are then masked and accepted in order like plain rows,
 * so row k is masked by the state after d1..dk and sampling stops at the first rejected draft. */
#ifndef DI_ENGINE_CONSTRAINT_H
#define DI_ENGINE_CONSTRAINT_H

#include "deepinfer.h"
#include "engine/grammar/grammar.h"
#include "engine/request.h"
#include "engine/runner.h"

#include <stddef.h>
#include <stdint.h>

typedef struct DiConstraints DiConstraints;

/* Grammar state of one engine; the vocabulary is built from the text hooks at the first
 * constrained request (they may be installed after creation). */
DiConstraints *di_constraints_create(const DiRunner *runner);
void di_constraints_destroy(DiConstraints *c);

/* Compile req's constraint (params.constraint_type != NONE) and attach its matcher to req.
 * -1 with the problem named (bad schema, no token bytes to match against, ...). */
int di_constraints_attach(DiConstraints *c, const DiTextHooks *text, DiRequest *req);
/* Compile a constraint into the store now (any thread: a server's request thread), so that
 * the admission that follows finds it compiled; -1 naming the problem. */
int di_constraints_prepare(DiConstraints *c, const DiTextHooks *text, int type, const char *constraint);
/* Free req's matcher and release its grammar (before di_request_free). */
void di_constraints_detach(DiConstraints *c, DiRequest *req);

/* Mask words of a vocabulary. */
static inline size_t di_constraint_mask_words(int32_t vocab) { return ((size_t)vocab + 31) / 32; }

/* Set the logits of tokens the matcher forbids next to -inf (scratch: mask words). */
int di_constraint_mask_row(DiGrammarMatcher *m, float *logits, int32_t vocab, uint32_t *scratch);
/* Advance the matcher by the sampled token; -1 when the grammar forbids it. */
int di_constraint_accept(DiGrammarMatcher *m, int32_t token);
/* Undo the last k accepted tokens (rejected draft tokens). */
int di_constraint_rollback(DiGrammarMatcher *m, size_t k);

#endif
