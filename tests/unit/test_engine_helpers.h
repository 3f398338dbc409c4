/* test_engine_helpers.h — shared by the engine tests: an independent reference generator (the
 * mock's logits recomputed from the token list, no pages, no batching, then the sampler), and a
 * recorder of streamed deltas. */
#ifndef TEST_ENGINE_HELPERS_H
#define TEST_ENGINE_HELPERS_H

#include "deepinfer.h"
#include "engine/engine.h"
#include "engine/runner_mock.h"
#include "engine/sampler.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MOCK_VOCAB 300
#define MOCK_SEED 99

/* Generate as a request alone would: the reference of every engine test.  Stops on EOS (unless
 * ignore_eos), a stop token, or max_tokens (stop strings are not handled here).  Returns the
 * number of generated tokens written to out. */
static inline int reference_generate(const int32_t *prompt, int n_prompt, const DiSamplingParams *p, uint64_t seed,
                              int32_t *out, DiFinishReason *reason) {
    /* the kernels an engine over the mock runner (no model table) chooses: DEEPINFER_KERNELS */
    const DiKernelBackend *be = NULL;
    if (di_backend_cpu_from_env(&be) != 0) return -1;
    DiSampler *s = di_sampler_create(MOCK_VOCAB, be);
    int32_t *seq = malloc(sizeof *seq * (size_t)(n_prompt + p->max_tokens));
    float *logits = malloc(sizeof *logits * MOCK_VOCAB);
    memcpy(seq, prompt, sizeof *seq * (size_t)n_prompt);
    int n = 0;
    int32_t eos = DI_MOCK_EOS;
    *reason = DI_FINISH_LENGTH;
    while (n < p->max_tokens) {
        di_mock_reference_logits(MOCK_VOCAB, MOCK_SEED, seq, n_prompt + n, logits);
        DiSampleContext c = {seq, (size_t)n_prompt, seq + n_prompt, (size_t)n, n_prompt + n, seed, &eos, 1};
        int32_t t = -1;
        di_sampler_sample(s, p, &c, logits, &t, NULL);
        seq[n_prompt + n] = t;
        out[n++] = t;
        int stop = (!p->ignore_eos && t == DI_MOCK_EOS);
        for (int i = 0; i < p->n_stop_token_ids; i++) stop |= t == p->stop_token_ids[i];
        if (stop) {
            *reason = DI_FINISH_STOP;
            break;
        }
    }
    free(seq);
    free(logits);
    di_sampler_destroy(s);
    return n;
}

/* A mock engine whose freed pages are poisoned (a state read before it was written shows);
 * NULL (with the error) when the options are refused. */
static inline DiEngine *poisoned_mock_engine(const DiEngineOptions *o) {
    DiEngine *e = di_engine_create_mock(MOCK_VOCAB, MOCK_SEED, o);
    if (e && di_engine_set_page_poisoning(e, 1) != 0) {
        di_engine_destroy(e);
        return NULL;
    }
    return e;
}

/* Seeded sampling that ignores EOS, as the reference runs. */
static inline DiSamplingParams seeded(int max_tokens, uint64_t seed) {
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.max_tokens = max_tokens, p.has_seed = 1, p.seed = seed, p.ignore_eos = 1;
    return p;
}

/* Everything a stream delivered to one request. */
typedef struct {
    int32_t tokens[512];
    int n_tokens;
    char text[4096];
    size_t text_len;
    int n_final, n_after_final;
    DiFinishReason reason;
} StreamLog;

static inline void record_stream(void *user, const DiStreamDelta *d) {
    StreamLog *log = user;
    if (log->n_final) log->n_after_final++;
    for (int i = 0; i < d->n_new_tokens && log->n_tokens < 512; i++) log->tokens[log->n_tokens++] = d->new_token_ids[i];
    if (log->text_len + d->new_text_len < sizeof log->text) {
        memcpy(log->text + log->text_len, d->new_text, d->new_text_len);
        log->text_len += d->new_text_len;
        log->text[log->text_len] = '\0';
    }
    if (d->finish_reason != DI_FINISH_NONE) {
        log->n_final++;
        log->reason = d->finish_reason;
    }
}

static inline uint64_t rng_next(uint64_t *state) {
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    return *state >> 33;
}

#endif
