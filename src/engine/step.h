/* step.h — one engine step: the batch the scheduler planned, and its execution (the model's
 * forward, then sampling) which in async mode runs on the worker thread.
 *
 * A step record is self-contained for the worker: it copies the page addresses of every sequence
 * at planning time, so the main thread may grow page tables (and reallocate their arrays) while
 * the step runs.  Token ids are read from the requests at execution time: a decode sequence's
 * input is the token the previous step sampled (its "placeholder" at planning time). */
#ifndef DI_ENGINE_STEP_H
#define DI_ENGINE_STEP_H

#include "base/error.h"
#include "base/threadpool.h"
#include "engine/request.h"
#include "engine/runner.h"
#include "engine/sampler.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    DiRequest *req;
    int64_t start_pos;
    int32_t n_tokens;
    bool sample;        /* sample the token at start_pos + n_tokens */
    size_t page_offset; /* into DiStep.page_ptrs */
    size_t n_pages;
    /* When it holds pages: after the forward, the executor copies the sequence's state (its first
     * snapshot.n pages: the state at start_pos + n_tokens) into them, for the prefix cache.  The
     * engine hands them to the cache (or back to the pool) when it processes the step. */
    DiPageTable snapshot;
    int64_t replay_start, replay_end; /* the request's bounded replay (runner.h), copied at planning */
} DiStepSeq;

/* Called on the executing thread for each sampled row, before sampling (tests, invariance checks). */
typedef void (*DiLogitsObserver)(void *user, uint64_t request_id, int64_t position, const float *logits,
                                 int32_t vocab_size);

typedef struct {
    DiStepSeq *seqs;
    int n_seqs, cap_seqs;
    DiRunnerSeq *runner_seqs;
    uint8_t **page_ptrs;
    size_t n_page_ptrs, cap_page_ptrs;
    float *logits;      /* [cap_seqs][vocab] */
    int *sample_seq;    /* [cap_seqs]: the sequence of each logits row */
    int *row_status;    /* [cap_seqs]: sampling result of each row */
    uint32_t *masks;    /* [cap_seqs][mask words]: structured-output mask of each row */
    int n_rows;
    int32_t vocab;
    int64_t n_prefill_tokens, n_decode_tokens;
    /* results of execution */
    int status;
    char error[DI_ERROR_MAX];
    double time_forward_s, time_sample_s;
} DiStep;

int di_step_init(DiStep *step, int max_seqs, int32_t vocab);
void di_step_free(DiStep *step);
void di_step_reset(DiStep *step);
/* Append a sequence (copies the request's current page addresses). */
int di_step_add(DiStep *step, DiRequest *req, int64_t start_pos, int32_t n_tokens, bool sample);

typedef struct {
    DiRunner *runner;
    DiSampler **samplers;   /* one per pool thread (scratch buffers are per thread) */
    DiThreadPool *pool;     /* samples rows in parallel; NULL: on the executing thread */
    bool batch_invariant;
    DiLogitsObserver observer;
    void *observer_user;
} DiStepExecutor;

/* Forward and sample; sets step->status (and step->error) instead of returning. */
void di_step_execute(const DiStepExecutor *exec, DiStep *step);

double di_now_seconds(void);

#endif
