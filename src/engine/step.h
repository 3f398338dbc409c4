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
#include "engine/spec_control.h"
#include "engine/spec_verify.h"

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
    /* Speculative decoding (a decode sequence with draft_max > 0): the executor drafts, picks
     * n_drafts <= draft_max, verifies anchor + drafts in the forward, samples the rows in order
     * until one differs from its draft and commits the anchor and the n_accepted drafts; the
     * tokens at start_pos + 1 .. start_pos + 1 + n_accepted are then the request's. */
    int32_t draft_max, n_drafts, n_accepted;
    bool grammar_truncated; /* its grammar refused a draft, which ended the drafts there */
    int draft_index;    /* its record among the step's drafts, -1 when it did not draft */
    int first_row;      /* its first logits row */
    /* Sampling this sequence failed (every token masked, a grammar error): the step goes on for
     * the others, and the engine finishes this request alone with DI_FINISH_ERROR and error. */
    bool failed;
    char error[256];
} DiStepSeq;

/* What a sampled request's draft picks need (DiRunnerDraft.pick_ctx): di_spec_draft_pick's
 * arguments, the drafts so far being the record's own token array. */
typedef struct {
    DiSpecVerifier *verifier;
    const DiSamplingParams *params;
    DiSampleContext base;
    const int32_t *drafts;
} DiDraftPickCtx;

/* Called on the executing thread for each sampled row, before sampling (tests, invariance checks). */
typedef void (*DiLogitsObserver)(void *user, uint64_t request_id, int64_t position, const float *logits,
                                 int32_t vocab_size);

typedef struct {
    DiStepSeq *seqs;
    int n_seqs, cap_seqs;
    DiRunnerSeq *runner_seqs;
    uint8_t **page_ptrs;
    size_t n_page_ptrs, cap_page_ptrs;
    float *logits;      /* [cap_rows][vocab] */
    int cap_rows;
    int *sample_seq;    /* [cap_seqs]: the sequences that sample, in order */
    uint32_t *masks;    /* [cap_rows][mask words]: structured-output mask of each logits row */
    int n_sampled, n_rows;
    /* drafting: [cap_seqs][draft_block] tokens and confidence logits, one record per sequence,
     * the keep counts of commit */
    int32_t draft_block;
    int32_t *draft_tokens;
    float *draft_conf;
    DiRunnerDraft *drafts;
    int32_t *keep;
    int32_t *draft_caps, *draft_lengths; /* [cap_seqs]: the drafting sequences' */
    DiDraftPickCtx *picks;               /* [cap_seqs] */
    int32_t vocab;
    int64_t n_prefill_tokens, n_decode_tokens;
    /* results of execution */
    int status;
    char error[DI_ERROR_MAX];
    double time_forward_s, time_sample_s, time_draft_s;
} DiStep;

/* max_rows: logits rows one forward may return (>= max_seqs); draft_block: the runner's (0: no
 * speculation). */
int di_step_init(DiStep *step, int max_seqs, int max_rows, int32_t vocab, int32_t draft_block);
void di_step_free(DiStep *step);
void di_step_reset(DiStep *step);
/* Append a sequence (copies the request's current page addresses); draft_max as in DiStepSeq. */
int di_step_add(DiStep *step, DiRequest *req, int64_t start_pos, int32_t n_tokens, bool sample, int32_t draft_max);

/* Called on the executing thread at the end of each successful step with the step's expert load
 * (runner.h; the counts are cleared right after, so each call sees one step's). */
typedef void (*DiExpertLoadObserver)(void *user, const DiExpertLoad *load);

typedef struct {
    DiRunner *runner;
    DiSampler **samplers;   /* one per pool thread (scratch buffers are per thread) */
    DiThreadPool *pool;     /* samples rows in parallel; NULL: on the executing thread */
    bool batch_invariant;
    /* how many of its draft_max drafts a speculative sequence verifies (NULL: no speculation) */
    DiSpecControl *spec;
    /* sampled (T > 0) requests: one verifier per pool thread (rejection sampling, spec_verify.h)
     * and the draft distributions of a step, [max_seqs][draft_block][vocab] */
    DiSpecVerifier **verifiers;
    float *draft_logits;
    DiLogitsObserver observer;
    void *observer_user;
    DiExpertLoadObserver load_observer; /* NULL: the counts are only cleared */
    void *load_observer_user;
    bool fail_seed_set; /* DEEPINFER_TEST_FAIL_SEED: sampling fails for requests with this seed */
    uint64_t fail_seed;
} DiStepExecutor;

/* Forward and sample; sets step->status (and step->error) instead of returning.  Then the
 * runner's expert load goes to exec->load_observer (successful steps) and is cleared. */
void di_step_execute(const DiStepExecutor *exec, DiStep *step);

/* Zero the runner's expert load tables (no-op for a runner without them). */
void di_step_clear_expert_load(DiRunner *runner);

double di_now_seconds(void);

#endif
