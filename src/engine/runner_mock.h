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
 * Text is byte level: ids 0..255 are bytes, 256 is EOS (empty text), ids above 256 are " w<id>". */
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

/* The logits the mock gives after `tokens` (n >= 1), computed directly without pages: the
 * tests' independent reference. */
void di_mock_reference_logits(int32_t vocab_size, uint64_t model_seed, const int32_t *tokens, int64_t n,
                              float *logits);

#endif
