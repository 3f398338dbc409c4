/* tiny_planted.h — the weights of `make-tiny --planted` (engine-features.md §1.7 item 2): a
 * synthetic checkpoint whose DSpark drafter agrees with its target, so speculative decoding's
 * accept path (and its speed-up) can be shown without real weights.
 *
 * The target: every block's contribution to the residual streams is scaled down by 2^-16 (the
 * block scales of the attention output, expert down projections and Engram projection), so the
 * final hidden state is the input token's embedding up to a positive factor, and
 * head[v] = u_{f^-1(v)} / sqrt(D) (u_t = embed[t]) makes the greedy next token f(t), a fixed
 * permutation of the non-special tokens (specials 0..2 map to 3..5 and are never produced).
 * The drafter: Markov W2 rows are unit directions w_v (last coordinate 0), W1[t] = M w_{f(t)} + e_last
 * with M large enough that the bias outvotes the base logits of the noise rows, so every draft
 * is f of the previous one; the confidence head reads only e_last, so its logit is 1 > 0. */
#ifndef DI_MODEL_TINY_PLANTED_H
#define DI_MODEL_TINY_PLANTED_H

#include "model/checkpoint_inventory.h"
#include "model/config.h"

#include <stdint.h>

/* The planted map: the greedy next token after t. */
int32_t di_tiny_planted_next(int32_t t, int64_t vocab);

/* Rewrite the generated tensors data[i] (inventory order) into the planted model. */
int di_tiny_plant(const DiModelConfig *cfg, const DiInventory *inv, uint8_t **data);

#endif
