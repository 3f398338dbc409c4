/* runner_mock.h — a deterministic stand-in for a model, for tests (not a language model).
 *
 * Its state lives in the engine's pages exactly like a real model's, laid out by model/page_layout.h:
 * page 0 holds a sliding-window ring of the last 8 tokens (like a window-KV ring), the following
 * pages one 8-byte "KV row" per position (like compressed KV rows, 32 per 256-byte page).  Row p = hash(row p-1, token p, p).
 * The logits of position p hash row p, an order-dependent fold of every row 0..p (like attention
 * over the whole context) and the window ring, so a wrong token, position, page, stale page or
 * ring entry changes them.  Each row is computed on its own: batch invariant by construction.
 * KV block cache: a block's cacheable rows are its KV rows; a replayed position rewrites only
 * the ring (the replay window is the ring's 8 positions), so a hit gives exactly the cold logits.
 * Text is byte level: ids 0..255 are bytes, 256 is EOS (empty text), ids above 256 are " w<id>".
 *
 * Speculative decoding: a forward gives logits rows for each of a sequence's last n_logits
 * tokens; commit() cuts a speculative sequence back (the ring is restored and the kept tokens
 * replayed into it; rows past the kept ones are rewritten before they are read).  With a drafter
 * set, draft() proposes the mock's own greedy continuation at a chosen agreement rate, so the
 * engine's accept and reject paths both run, with confidence logits that say which is which. */
#ifndef DI_ENGINE_RUNNER_MOCK_H
#define DI_ENGINE_RUNNER_MOCK_H

#include "deepinfer.h"
#include "engine/runner.h"

#define DI_MOCK_EOS 256
#define DI_MOCK_PAGE_BYTES 256
#define DI_MOCK_WINDOW 8

/* The mock's byte-level text (encode, token bytes, EOS special; no chat). */
void di_mock_text_hooks(DiTextHooks *out);

/* vocab_size >= 257. */
DiRunner *di_mock_runner_create(int32_t vocab_size, uint64_t model_seed);

/* Give the mock a drafter of draft_block (1..16) tokens per draft() whose drafts equal the mock's
 * greedy continuation of the drafted prefix with probability agree_rate (in [0, 1], keyed by the
 * context, so reproducible), with confidence logit +3 for such a draft and -3 otherwise. */
int di_mock_runner_set_drafter(DiRunner *runner, int32_t draft_block, double agree_rate);

/* The logits the mock gives after `tokens` (n >= 1), computed directly without pages: the
 * tests' independent reference. */
void di_mock_reference_logits(int32_t vocab_size, uint64_t model_seed, const int32_t *tokens, int64_t n,
                              float *logits);

#endif
