/* dspark.h — the forward of the DSpark drafter (§5.11; engine-features.md §1.3 a-h): a block of
 * dspark_block_size rows [anchor, noise, ...] at the positions after the committed ones runs
 * through the draft stages (window-only mHC blocks whose keys are the stage's ring of context KV
 * plus the block's own rows, non-causal), then base logits from the shared head, the sequential
 * Markov head and the confidence head.
 *
 * The rings are filled by model_forward (every committed position), so a draft only reads the
 * request state.  Which drafts to verify and how is the engine's business (not here). */
#ifndef DI_MODEL_DSPARK_H
#define DI_MODEL_DSPARK_H

#include "model/model.h"
#include "model/state.h"

#define DSPARK_MAX_BLOCK 64

typedef struct {
    float *base_logits; /* [B][V]: head · RMSNorm(x_r) */
    float *logits;      /* [B][V]: base + markov_head · markov_embed[d_{r-1}] */
    float *confidence;  /* [B]: raw logit proj · [x_r ; markov_embed[d_{r-1}]] (no sigmoid) */
    int32_t *tokens;    /* [B]: the drafts d_0 .. d_{B-1} */
} DraftOutput;

/* Draft after st->n_pos committed positions with `anchor` at position st->n_pos.  given = NULL:
 * greedy Markov chain (argmax, ties to the lower id); else the B drafts are imposed
 * (teacher-forced chain) and echoed in tokens.  Every output array must be allocated by the
 * caller (B = dspark_block_size, V = vocab). */
int dspark_draft(const Model *m, RunState *st, int32_t anchor, const int32_t *given, DraftOutput *out);

/* The Markov chain with the caller's sampler (§5.11 step 6, d_{r+1} = sample(z_r, T)): pick
 * returns the draft of row r from that row's logits (the engine's temperature / top-k / top-p
 * sampler, so verification uses the same distribution); -1 aborts the draft with its error. */
typedef struct {
    int32_t (*pick)(void *ctx, const float *logits, int64_t vocab, int row);
    void *ctx;
} DraftSampler;
int dspark_draft_sampled(const Model *m, RunState *st, int32_t anchor, const DraftSampler *sampler, DraftOutput *out);

/* n_req requests in one call: every stage's projections and experts run over all their block
 * rows together (the drafter's weights read once, not once per request), attention and the
 * Markov chain per request; each request's outputs are bit-identical to its own dspark_draft.
 * given (NULL, or per request NULL / B drafts) as dspark_draft; samplers NULL (greedy) or one per
 * request. */
int dspark_draft_batch(const Model *m, RunState *const *st, const int32_t *anchors, const int32_t *const *given,
                       const DraftSampler *samplers, DraftOutput *outs, int n_req);

#endif
