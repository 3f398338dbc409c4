/* step.c — building a step record and executing it: one forward over the mixed batch, then one
 * sample per row that asked for logits, written straight into the requests' token arrays. */
#include "engine/step.h"

#include "base/mem.h"
#include "engine/constraint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double di_now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int di_step_init(DiStep *step, int max_seqs, int32_t vocab) {
    memset(step, 0, sizeof *step);
    step->cap_seqs = max_seqs;
    step->vocab = vocab;
    step->seqs = di_calloc((size_t)max_seqs, sizeof *step->seqs, "step sequences");
    step->runner_seqs = di_calloc((size_t)max_seqs, sizeof *step->runner_seqs, "step runner sequences");
    step->logits = di_aligned_calloc((size_t)max_seqs * (size_t)vocab, sizeof *step->logits, "step logits");
    step->sample_seq = di_calloc((size_t)max_seqs, sizeof *step->sample_seq, "step sample rows");
    step->row_status = di_calloc((size_t)max_seqs, sizeof *step->row_status, "step row status");
    step->masks = di_calloc((size_t)max_seqs * di_constraint_mask_words(vocab), sizeof *step->masks, "step masks");
    if (!step->seqs || !step->runner_seqs || !step->logits || !step->sample_seq || !step->row_status || !step->masks) {
        di_step_free(step);
        return -1;
    }
    return 0;
}

void di_step_free(DiStep *step) {
    free(step->seqs);
    free(step->runner_seqs);
    free(step->page_ptrs);
    free(step->sample_seq);
    free(step->row_status);
    free(step->masks);
    di_aligned_free(step->logits);
    memset(step, 0, sizeof *step);
}

void di_step_reset(DiStep *step) {
    step->n_seqs = 0;
    step->n_page_ptrs = 0;
    step->n_prefill_tokens = step->n_decode_tokens = 0;
    step->status = 0;
    step->error[0] = '\0';
    step->time_forward_s = step->time_sample_s = 0;
}

int di_step_add(DiStep *step, DiRequest *req, int64_t start_pos, int32_t n_tokens, bool sample) {
    if (step->n_seqs >= step->cap_seqs) return di_errorf("step: more than %d sequences", step->cap_seqs);
    size_t need = step->n_page_ptrs + req->pages.n;
    if (di_grow(&step->page_ptrs, &step->cap_page_ptrs, need, 256, sizeof *step->page_ptrs, "step page list") != 0) return -1;
    DiStepSeq *s = &step->seqs[step->n_seqs++];
    s->req = req;
    s->start_pos = start_pos;
    s->n_tokens = n_tokens;
    s->sample = sample;
    s->page_offset = step->n_page_ptrs;
    s->n_pages = req->pages.n;
    s->snapshot = (DiPageTable){0};
    s->replay_start = req->replay_start;
    s->replay_end = req->replay_end;
    memcpy(step->page_ptrs + step->n_page_ptrs, req->pages.pages, req->pages.n * sizeof *req->pages.pages);
    step->n_page_ptrs = need;
    if (start_pos + n_tokens > req->n_prompt) {
        /* tokens at positions >= n_prompt are generated ones being fed back: decode work */
        int64_t first_generated = start_pos > req->n_prompt ? start_pos : req->n_prompt;
        step->n_decode_tokens += start_pos + n_tokens - first_generated;
        step->n_prefill_tokens += first_generated - start_pos;
    } else {
        step->n_prefill_tokens += n_tokens;
    }
    return 0;
}

static void fail(DiStep *step, const char *what) {
    step->status = -1;
    snprintf(step->error, sizeof step->error, "%s: %s", what, di_error_message());
}

/* Sample logits row `row`: the token goes straight into the request's token array.  A
 * constrained request's row is masked in place first (so logprobs see the mask, as vLLM's do)
 * and its matcher follows the token drawn. */
static int sample_row(const DiStepExecutor *exec, DiStep *step, DiSampler *sampler, int row) {
    const DiStepSeq *s = &step->seqs[step->sample_seq[row]];
    DiRequest *req = s->req;
    int64_t pos = s->start_pos + s->n_tokens;
    DiSampleContext ctx = {
        .prompt = req->tokens,
        .n_prompt = (size_t)req->n_prompt,
        .output = req->tokens + req->n_prompt,
        .n_output = (size_t)(pos - req->n_prompt),
        .position = pos,
        .seed = req->seed,
        .eos_ids = exec->runner->eos_ids,
        .n_eos_ids = exec->runner->n_eos_ids,
    };
    DiTokenLogprobs *lp = req->logprobs ? &req->logprobs[pos - req->n_prompt] : NULL;
    float *logits = step->logits + (size_t)row * (size_t)step->vocab;
    /* Past the grammar's EOS (a row async mode planned before the EOS was processed) the token
     * is dropped unseen: sample it unconstrained. */
    bool constrained = req->matcher && !di_grammar_matcher_is_terminated(req->matcher);
    if (constrained) {
        uint32_t *mask = step->masks + (size_t)row * di_constraint_mask_words(step->vocab);
        if (di_constraint_mask_row(req->matcher, logits, step->vocab, mask) != 0) return -1;
    }
    if (di_sampler_sample(sampler, &req->params, &ctx, logits, &req->tokens[pos], lp) != 0) return -1;
    return constrained ? di_constraint_accept(req->matcher, req->tokens[pos]) : 0;
}

typedef struct {
    const DiStepExecutor *exec;
    DiStep *step;
} SampleJob;

static void sample_task(void *arg, int row, int thread) {
    SampleJob *job = arg;
    job->step->row_status[row] = sample_row(job->exec, job->step, job->exec->samplers[thread], row);
}

/* Below this many logits (rows x vocabulary) waking the pool costs more than it saves (measured
 * on the shared 2-core machine: 64 rows of 256 were 5x slower through the pool). */
#define PARALLEL_SAMPLING_MIN_LOGITS (1 << 20)

/* Rows are independent (sampling is keyed by each request's seed and position), so they may run
 * on any thread in any order with the same result. */
static int sample_rows(const DiStepExecutor *exec, DiStep *step) {
    if (!exec->pool || step->n_rows < 2 || (size_t)step->n_rows * (size_t)step->vocab < PARALLEL_SAMPLING_MIN_LOGITS) {
        for (int row = 0; row < step->n_rows; row++)
            if (sample_row(exec, step, exec->samplers[0], row) != 0) return -1;
        return 0;
    }
    SampleJob job = {exec, step};
    di_pool_run(exec->pool, step->n_rows, sample_task, &job);
    for (int row = 0; row < step->n_rows; row++)
        if (step->row_status[row] != 0) return sample_row(exec, step, exec->samplers[0], row); /* again, for its message */
    return 0;
}

void di_step_execute(const DiStepExecutor *exec, DiStep *step) {
    step->n_rows = 0;
    for (int i = 0; i < step->n_seqs; i++) {
        const DiStepSeq *s = &step->seqs[i];
        DiRunnerSeq *r = &step->runner_seqs[i];
        r->pages = step->page_ptrs + s->page_offset;
        r->n_pages = s->n_pages;
        r->tokens = s->req->tokens + s->start_pos; /* written by the previous step when decoding */
        r->n_tokens = s->n_tokens;
        r->start_pos = s->start_pos;
        r->n_logits = s->sample ? 1 : 0;
        r->speculative = false;
        r->replay_start = s->replay_start;
        r->replay_end = s->replay_end;
        if (s->sample) step->sample_seq[step->n_rows++] = i;
    }
    DiRunnerBatch batch = {step->runner_seqs, step->n_seqs, exec->batch_invariant, step->logits};
    double t0 = di_now_seconds();
    if (exec->runner->ops->forward(exec->runner, &batch) != 0) {
        fail(step, exec->runner->name ? exec->runner->name : "model forward");
        return;
    }
    for (int i = 0; i < step->n_seqs; i++) { /* prefix-cache snapshots, before the next step writes */
        const DiStepSeq *s = &step->seqs[i];
        for (size_t p = 0; p < s->snapshot.n && p < s->n_pages; p++)
            memcpy(s->snapshot.pages[p], step->runner_seqs[i].pages[p], exec->runner->page_bytes);
    }
    double t1 = di_now_seconds();
    if (exec->observer)
        for (int row = 0; row < step->n_rows; row++) {
            const DiStepSeq *s = &step->seqs[step->sample_seq[row]];
            exec->observer(exec->observer_user, s->req->id, s->start_pos + s->n_tokens,
                           step->logits + (size_t)row * (size_t)step->vocab, step->vocab);
        }
    if (sample_rows(exec, step) != 0) {
        fail(step, "sampling");
        return;
    }
    step->time_forward_s = t1 - t0;
    step->time_sample_s = di_now_seconds() - t1;
}
