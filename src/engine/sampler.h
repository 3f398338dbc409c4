/* sampler.h — turning one logits row into one token, deterministically.
 *
 * Every random draw is a pure function of (request seed, position, draw index): a counter-based
 * generator (XXH3-64 of the position and draw index, keyed by the seed), no global RNG
 * (engine-features.md §4.3).  So a seeded request samples the same tokens whatever else shares
 * the batch, in any order, in sync or async mode and after preemption by recompute.
 *
 * Pipeline (vLLM's order): a spent reasoning budget forces the end-of-thinking token; logit_bias;
 * min_tokens masking of EOS/stop tokens; repetition penalty (prompt and
 * generated tokens), presence and frequency penalties (generated tokens); then greedy argmax when
 * temperature is 0, else softmax(logits / T), min-p, top-k, top-p over the survivors (ranked by
 * probability, ties by lower id), and one inverse-CDF draw over the survivors in id order.
 * Logprobs are those of the raw logits (vLLM's default "raw_logprobs"). */
#ifndef DI_ENGINE_SAMPLER_H
#define DI_ENGINE_SAMPLER_H

#include "deepinfer.h"
#include "kernels/backend.h"

#include <stddef.h>
#include <stdint.h>

/* Below this temperature sampling is greedy (vLLM's _SAMPLING_EPS). */
#define DI_SAMPLER_GREEDY_EPS 1e-5f

typedef struct DiSampler DiSampler;

/* Everything about the request the sampler needs besides its parameters. */
typedef struct {
    const int32_t *prompt;   /* prompt tokens (repetition penalty) */
    size_t n_prompt;
    const int32_t *output;   /* generated tokens so far */
    size_t n_output;
    int64_t position;        /* position of the token being sampled */
    uint64_t seed;
    const int32_t *eos_ids;  /* masked during min_tokens unless ignore_eos */
    int n_eos_ids;
} DiSampleContext;

/* be: the kernels the engine chose once (the model's, kernels/backend.h); the sampler's exp row
 * goes through be->expf_row, so it follows the model's kernel choice with no per-call knob read.
 * NULL with an error for a vocabulary size below 1 or no backend. */
DiSampler *di_sampler_create(int32_t vocab_size, const DiKernelBackend *be);
void di_sampler_destroy(DiSampler *sampler);

/* Check parameters against the vocabulary; -1 with an error naming the bad field. */
int di_sampling_params_check(const DiSamplingParams *params, int32_t vocab_size);

/* Sample one token from `logits` (vocab_size values, not modified).  logprobs may be NULL; when
 * params->logprobs >= 0 it receives the sampled token's raw logprob and the n best. */
int di_sampler_sample(DiSampler *sampler, const DiSamplingParams *params, const DiSampleContext *ctx,
                      const float *logits, int32_t *out_token, DiTokenLogprobs *logprobs);

/* The distribution di_sampler_sample draws from for the same arguments: probs (vocab_size
 * values) gets the survivors' normalised probabilities and 0 elsewhere; a one-hot vector when
 * the parameters are greedy or the thinking budget forces its end.  Speculative verification
 * compares these (spec_verify.h).  -1 with the cause on bad logits. */
int di_sampler_probs(DiSampler *sampler, const DiSamplingParams *params, const DiSampleContext *ctx,
                     const float *logits, float *probs);

/* The logprobs report di_sampler_sample gives for `token` of a raw logits row (n_best <= DI_MAX_LOGPROBS). */
void di_sampler_logprobs(const float *logits, int32_t vocab_size, int32_t token, int n_best,
                         DiTokenLogprobs *out);

/* The counter-based uniform in (0, 1) for (seed, position, draw). */
double di_sampler_uniform(uint64_t seed, int64_t position, uint32_t draw);

#endif
