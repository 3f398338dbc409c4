/* spec_verify.h — lossless verification of one request's drafts (engine-features.md §1.3 m, §4.3).
 *
 * A DSpark step forwards the anchor and n_draft drafts of a request: target row j (0 <= j <=
 * n_draft) predicts the token at position base->position + j, where base is the sampling context
 * plain decoding would use for the next token (its position, the committed output with the anchor
 * last, the seed).  Row j is processed with the request's sampling parameters in the context
 * "base plus drafts[0, j)" (penalties see the drafts before it), exactly as the sampler
 * (sampler.h) would process it had those drafts been generated one by one.
 *
 * Greedy (temperature 0): draft j is accepted iff the processed argmax of row j equals it; at
 * the first mismatch that argmax is emitted, and when all are accepted the argmax of the last row
 * is the bonus.  So greedy output never depends on the drafts.
 *
 * Sampling: p_t is row j's processed distribution and q the processed distribution of the draft
 * logits draft j was picked from (same parameters, same context).  Draft d is accepted iff
 * p_t(d) > u * q(d), u the counter uniform of (seed, position, draw 1); at the first rejection
 * the token is drawn from normalize(max(p_t - q, 0)) with the uniform (seed, position, draw 2);
 * when all are accepted the bonus row is sampled exactly as the sampler would (draw 0), so with
 * no drafts verification IS plain sampling.  Drafts are picked by di_spec_draft_pick with the
 * position salted by 2^30, so proposal and verification never share a random number.  Every
 * emitted token then has exactly the target's distribution whatever the drafts and their number
 * (the number must not depend on the drafts' values beyond what spec_sched.h allows).
 *
 * Stops: verification does not look at EOS or stop tokens; the caller cuts the emitted tokens
 * after the first one that ends the request.  One verifier per thread (it owns scratch). */
#ifndef DI_ENGINE_SPEC_VERIFY_H
#define DI_ENGINE_SPEC_VERIFY_H

#include "deepinfer.h"
#include "engine/sampler.h"

#include <stdint.h>

/* Draft randomness is keyed by position + this salt. */
#define DI_SPEC_DRAFT_SALT ((int64_t)1 << 30)

typedef struct DiSpecVerifier DiSpecVerifier;

/* be: the kernels its sampler uses (di_sampler_create). */
DiSpecVerifier *di_spec_verifier_create(int32_t vocab_size, const DiKernelBackend *be);
void di_spec_verifier_destroy(DiSpecVerifier *verifier);

/* Pick draft k (0-based) of a request from its draft logits (vocab_size values, before
 * temperature): the context is base plus drafts[0, k) at position base->position + k, the
 * randomness salted.  Greedy parameters pick the processed argmax.  -1 on error. */
int di_spec_draft_pick(DiSpecVerifier *verifier, const DiSamplingParams *params, const DiSampleContext *base,
                       const int32_t *drafts, int32_t k, const float *draft_logits, int32_t *out_token);

/* Verify a request's drafts.
 *   target_logits  [n_draft + 1][vocab_size], the forward's rows for anchor, drafts[0..n_draft)
 *   drafts         [n_draft], n_draft >= 0
 *   draft_logits   [n_draft][vocab_size], the rows the drafts were picked from: q at T > 0
 *                  (required there); greedy acceptance compares argmaxes only and does not
 *                  read them (NULL is fine)
 *   out_tokens     [n_draft + 1]: receives the accepted drafts then the correction or bonus
 *   out_logprobs   NULL or [n_draft + 1]: when params->logprobs >= 0, each emitted token's raw
 *                  logprob in its target row and the n best (as the sampler reports them)
 * *out_accepted = drafts accepted; accepted + 1 tokens are emitted.  0 on success, -1 on error. */
int di_spec_verify(DiSpecVerifier *verifier, const DiSamplingParams *params, const DiSampleContext *base,
                   const float *target_logits, const int32_t *drafts, int32_t n_draft, const float *draft_logits,
                   int32_t *out_tokens, DiTokenLogprobs *out_logprobs, int32_t *out_accepted);

#endif
