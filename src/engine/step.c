/* step.c — building a step record and executing it: drafts for the speculative sequences, one
 * forward over the mixed batch (plain decodes, prefill chunks, anchor + drafts), then sampling
 * written straight into the requests' token arrays, and the commit of the accepted drafts; then
 * the step's expert load (runner.h DiExpertLoad) goes to the executor's observer and is cleared.
 *
 * Verification.  By exact match (greedy requests, constrained ones, and seeded sampled ones
 * with the confidence schedule): every verify row is sampled with the request's own sampler, in
 * position order, and a draft is accepted while it equals the token sampled at its position, so
 * the emitted tokens are exactly plain decoding's and a seed keeps its tokens whatever the load
 * and the measured step times.  By the rejection rule of engine-features.md §1.3 m (every other
 * sampled request: fixed lengths, or the confidence schedule without a caller's seed;
 * spec_verify.h): drafts are picked from the drafter's distribution with salted randomness and
 * accepted with the target's distribution, more often than by exact match; which token a seed
 * gives then depends on where drafts were verified, which fixed lengths keep independent of the
 * load. */
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

int di_step_init(DiStep *step, int max_seqs, int max_rows, int32_t vocab, int32_t draft_block) {
    memset(step, 0, sizeof *step);
    if (max_rows < max_seqs) max_rows = max_seqs;
    step->cap_seqs = max_seqs;
    step->cap_rows = max_rows;
    step->vocab = vocab;
    step->draft_block = draft_block;
    step->seqs = di_calloc((size_t)max_seqs, sizeof *step->seqs, "step sequences");
    step->runner_seqs = di_calloc((size_t)max_seqs, sizeof *step->runner_seqs, "step runner sequences");
    step->logits = di_aligned_calloc((size_t)max_rows * (size_t)vocab, sizeof *step->logits, "step logits");
    step->sample_seq = di_calloc((size_t)max_seqs, sizeof *step->sample_seq, "step sample rows");
    step->masks = di_calloc((size_t)max_rows * di_constraint_mask_words(vocab), sizeof *step->masks, "step masks");
    step->keep = di_calloc((size_t)max_seqs, sizeof *step->keep, "step keep counts");
    if (draft_block > 0) {
        size_t n = (size_t)max_seqs * (size_t)draft_block;
        step->draft_tokens = di_calloc(n, sizeof *step->draft_tokens, "step drafts");
        step->draft_conf = di_calloc(n, sizeof *step->draft_conf, "step draft confidences");
        step->drafts = di_calloc((size_t)max_seqs, sizeof *step->drafts, "step draft records");
        step->draft_caps = di_calloc((size_t)max_seqs, sizeof *step->draft_caps, "step draft caps");
        step->draft_lengths = di_calloc((size_t)max_seqs, sizeof *step->draft_lengths, "step draft lengths");
        step->picks = di_calloc((size_t)max_seqs, sizeof *step->picks, "step draft picks");
    }
    bool drafts_ok = draft_block == 0 || (step->draft_tokens && step->draft_conf && step->drafts && step->draft_caps &&
                                          step->draft_lengths && step->picks);
    if (!step->seqs || !step->runner_seqs || !step->logits || !step->sample_seq || !step->keep ||
        !step->masks || !drafts_ok) {
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
    free(step->masks);
    free(step->keep);
    free(step->draft_tokens);
    free(step->draft_conf);
    free(step->drafts);
    free(step->draft_caps);
    free(step->draft_lengths);
    free(step->picks);
    di_aligned_free(step->logits);
    memset(step, 0, sizeof *step);
}

void di_step_reset(DiStep *step) {
    step->n_seqs = 0;
    step->n_page_ptrs = 0;
    step->n_prefill_tokens = step->n_decode_tokens = 0;
    step->status = 0;
    step->error[0] = '\0';
    step->time_forward_s = step->time_sample_s = step->time_draft_s = 0;
}

int di_step_add(DiStep *step, DiRequest *req, int64_t start_pos, int32_t n_tokens, bool sample, int32_t draft_max) {
    if (draft_max < 0 || draft_max > step->draft_block || (draft_max > 0 && (n_tokens != 1 || !sample)))
        return di_errorf("step: %d drafts for a sequence of %d tokens (draft block %d)", draft_max, n_tokens,
                         step->draft_block);
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
    s->draft_max = draft_max;
    s->n_drafts = s->n_accepted = 0;
    s->grammar_truncated = false;
    s->draft_index = -1;
    s->first_row = 0;
    s->failed = false;
    s->error[0] = '\0';
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

/* The context plain decoding samples position pos in. */
static DiSampleContext sample_context(const DiStepExecutor *exec, const DiRequest *req, int64_t pos) {
    return (DiSampleContext){
        .prompt = req->tokens,
        .n_prompt = (size_t)req->n_prompt,
        .output = req->tokens + req->n_prompt,
        .n_output = (size_t)(pos - req->n_prompt),
        .position = pos,
        .seed = req->seed,
        .eos_ids = exec->runner->eos_ids,
        .n_eos_ids = exec->runner->n_eos_ids,
    };
}

/* Sample logits row `row` for position pos: the token goes straight into the request's token
 * array.  A constrained request's row is masked in place first (so logprobs see the mask, as
 * vLLM's do) and its matcher follows the token drawn.  Verify rows are sampled in order and
 * stop at the first token that is not the draft, so row j's mask is the matcher's state after
 * accepting d1..dj and the matcher ends on the emitted tokens: nothing to roll back. */
static int sample_row(const DiStepExecutor *exec, DiStep *step, DiSampler *sampler, DiRequest *req, int row, int64_t pos) {
    DiSampleContext ctx = sample_context(exec, req, pos);
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

/* Rejection sampling for this request (see the header comment): T > 0, and fixed lengths or no
 * caller's seed to keep.  A constrained request verifies by exact match: its drafts come from the
 * unmasked drafter and are truncated at the grammar's first refusal, which the rejection rule's
 * residual does not allow for (it would no longer give the masked target's distribution). */
static bool rejection(const DiStepExecutor *exec, const DiRequest *req) {
    if (req->params.temperature < DI_SAMPLER_GREEDY_EPS || req->matcher) return false;
    return !exec->spec->confidence || !req->reproducible;
}

/* A sampled request's drafts by the rejection rule; the emitted tokens replace the drafts. */
static int verify_sampled(const DiStepExecutor *exec, DiStep *step, DiSpecVerifier *verifier, DiStepSeq *s) {
    DiRequest *req = s->req;
    int64_t pos = s->start_pos + s->n_tokens;
    DiSampleContext base = sample_context(exec, req, pos);
    int32_t out[DI_MAX_DRAFT + 1], accepted = 0;
    size_t block_rows = (size_t)s->draft_index * (size_t)step->draft_block;
    if (di_spec_verify(verifier, &req->params, &base, step->logits + (size_t)s->first_row * (size_t)step->vocab,
                       req->tokens + pos, s->n_drafts, exec->draft_logits + block_rows * (size_t)step->vocab, out,
                       req->logprobs ? &req->logprobs[pos - req->n_prompt] : NULL, &accepted) != 0)
        return -1;
    memcpy(req->tokens + pos, out, (size_t)(accepted + 1) * sizeof *out);
    s->n_accepted = accepted;
    return 0;
}

/* Sample sequence k's rows: one, or a verify run (sets n_accepted): greedy stops at the first row
 * whose token is not the next draft, sampled requests go through the rejection rule. */
static int sample_seq(const DiStepExecutor *exec, DiStep *step, int thread, int k) {
    DiStepSeq *s = &step->seqs[step->sample_seq[k]];
    if (exec->fail_seed_set && s->req->seed == exec->fail_seed)
        return di_errorf("test fault: DEEPINFER_TEST_FAIL_SEED=%llu", (unsigned long long)exec->fail_seed);
    DiSampler *sampler = exec->samplers[thread];
    int64_t pos = s->start_pos + s->n_tokens;
    if (s->n_drafts == 0) return sample_row(exec, step, sampler, s->req, s->first_row, pos);
    if (rejection(exec, s->req)) return verify_sampled(exec, step, exec->verifiers[thread], s);
    int32_t *tokens = s->req->tokens;
    for (int32_t j = 0; j <= s->n_drafts; j++) {
        int32_t draft = j < s->n_drafts ? tokens[pos + j] : -1;
        if (sample_row(exec, step, sampler, s->req, s->first_row + j, pos + j) != 0) return -1;
        s->n_accepted = j;
        if (tokens[pos + j] != draft) break;
    }
    return 0;
}

typedef struct {
    const DiStepExecutor *exec;
    DiStep *step;
} SampleJob;

/* Sample sequence k; a failure is that sequence's alone: its cause is kept with it (on the thread
 * that failed, whose error buffer holds it) and the other sequences are sampled as if it were not
 * there, so their bits do not change. */
static void sample_one(const DiStepExecutor *exec, DiStep *step, int thread, int k) {
    if (sample_seq(exec, step, thread, k) == 0) return;
    DiStepSeq *s = &step->seqs[step->sample_seq[k]];
    s->failed = true;
    s->n_accepted = 0; /* commit keeps the anchor; the request ends here anyway */
    snprintf(s->error, sizeof s->error, "%s", di_error_message());
    di_error_clear();
}

static void sample_task(void *arg, int k, int thread) {
    SampleJob *job = arg;
    sample_one(job->exec, job->step, thread, k);
}

/* Below this many logits (rows x vocabulary) waking the pool costs more than it saves (measured
 * on the shared 2-core machine: 64 rows of 256 were 5x slower through the pool). */
#define PARALLEL_SAMPLING_MIN_LOGITS (1 << 20)

/* Sequences are independent (sampling is keyed by each request's seed and position), so they may
 * run on any thread in any order with the same result; one sequence's rows run in order. */
static void sample_rows(const DiStepExecutor *exec, DiStep *step) {
    if (!exec->pool || step->n_sampled < 2 || (size_t)step->n_rows * (size_t)step->vocab < PARALLEL_SAMPLING_MIN_LOGITS) {
        for (int k = 0; k < step->n_sampled; k++) sample_one(exec, step, 0, k);
        return;
    }
    SampleJob job = {exec, step};
    di_pool_run(exec->pool, step->n_sampled, sample_task, &job);
}

static int32_t pick_draft(void *ctx, int row, const float *logits, int32_t vocab_size) {
    DiDraftPickCtx *p = ctx;
    (void)vocab_size; /* the verifier's, checked when it was created */
    int32_t token = -1;
    if (di_spec_draft_pick(p->verifier, p->params, &p->base, p->drafts, row, logits, &token) != 0) return -1;
    return token;
}

/* A sampled request drafts from the drafter's distribution with the request's parameters, and
 * keeps those distributions for verification. */
static void set_pick(const DiStepExecutor *exec, DiStep *step, int n, const DiStepSeq *s) {
    DiRunnerDraft *d = &step->drafts[n];
    step->picks[n] = (DiDraftPickCtx){exec->verifiers[0], &s->req->params,
                                   sample_context(exec, s->req, s->start_pos + s->n_tokens), d->tokens};
    d->logits = exec->draft_logits + (size_t)n * (size_t)step->draft_block * (size_t)step->vocab;
    d->pick = pick_draft;
    d->pick_ctx = &step->picks[n];
}

/* Run a constrained request's drafts through its matcher: the first one the grammar refuses
 * ends the draft there (it could never equal a masked sample), then the matcher is rolled back
 * to the anchor; sampling accepts the verified tokens again. */
static int truncate_by_grammar(DiStepSeq *s, const int32_t *drafts) {
    DiGrammarMatcher *m = s->req->matcher;
    if (!m || s->n_drafts == 0) return 0;
    int32_t ok = 0;
    if (!di_grammar_matcher_is_terminated(m))
        while (ok < s->n_drafts && di_grammar_matcher_accept_token(m, drafts[ok]) == 0) ok++;
    if (ok < s->n_drafts) di_error_clear(); /* the refusal is the expected outcome, not an error */
    s->grammar_truncated = ok < s->n_drafts;
    s->n_drafts = ok;
    return di_constraint_rollback(m, (size_t)ok);
}

/* Draft for every speculative sequence in one call (unless the policy says drafting does not pay
 * this step), take the lengths from the policy (spec_control.h) and write the drafts after the
 * anchors (they are the verify rows' inputs; sampling overwrites the rejected ones).  Sets
 * *n_drafted to the sequences that drafted. */
static int draft_all(const DiStepExecutor *exec, DiStep *step, int32_t *n_drafted) {
    int n = 0, block = step->draft_block;
    int64_t rows = 0;
    *n_drafted = 0;
    for (int i = 0; i < step->n_seqs; i++) {
        const DiStepSeq *s = &step->seqs[i];
        rows += s->n_tokens;
        if (s->draft_max == 0) continue;
        step->draft_caps[n] = s->draft_max;
        step->drafts[n] = (DiRunnerDraft){
            .pages = step->page_ptrs + s->page_offset,
            .n_pages = s->n_pages,
            .start_pos = s->start_pos,
            .anchor = s->req->tokens[s->start_pos],
            .tokens = step->draft_tokens + (size_t)n * (size_t)block,
            .confidence = step->draft_conf + (size_t)n * (size_t)block,
        };
        if (rejection(exec, s->req)) set_pick(exec, step, n, s);
        n++;
    }
    if (n == 0 || !di_spec_control_want_drafts(exec->spec, n, rows)) return 0;
    if (exec->runner->ops->draft(exec->runner, step->drafts, n) != 0) return -1;
    *n_drafted = n;
    if (di_spec_control_lengths(exec->spec, n, step->draft_conf, step->draft_caps, step->draft_lengths) != 0)
        return -1;
    for (int i = 0, k = 0; i < step->n_seqs; i++) {
        DiStepSeq *s = &step->seqs[i];
        if (s->draft_max == 0) continue;
        const int32_t *drafts = step->draft_tokens + (size_t)k * (size_t)block;
        s->draft_index = k;
        s->n_drafts = step->draft_lengths[k++];
        if (truncate_by_grammar(s, drafts) != 0) return -1;
        memcpy(s->req->tokens + s->start_pos + 1, drafts, (size_t)s->n_drafts * sizeof(int32_t));
        step->n_decode_tokens += s->n_drafts;
    }
    return 0;
}

/* Cut every verified sequence back to its anchor and accepted drafts. */
static int commit_all(const DiStepExecutor *exec, DiStep *step, const DiRunnerBatch *batch) {
    bool any = false;
    for (int i = 0; i < step->n_seqs; i++) {
        step->keep[i] = step->runner_seqs[i].n_tokens;
        if (step->runner_seqs[i].speculative) {
            step->keep[i] = 1 + step->seqs[i].n_accepted;
            any = true;
        }
    }
    return any ? exec->runner->ops->commit(exec->runner, batch, step->keep) : 0;
}

static void observe_rows(const DiStepExecutor *exec, const DiStep *step) {
    for (int k = 0; k < step->n_sampled; k++) {
        const DiStepSeq *s = &step->seqs[step->sample_seq[k]];
        if (s->failed) continue;
        for (int32_t j = 0; j <= s->n_accepted; j++)
            exec->observer(exec->observer_user, s->req->id, s->start_pos + s->n_tokens + j,
                           step->logits + (size_t)(s->first_row + j) * (size_t)step->vocab, step->vocab);
    }
}

/* Tell the policy what the step cost and how its drafts fared. */
static void report_spec(const DiStepExecutor *exec, const DiStep *step, int32_t n_drafted, double draft_s,
                        double forward_s) {
    int64_t rows = 0;
    for (int i = 0; i < step->n_seqs; i++) rows += step->runner_seqs[i].n_tokens;
    di_spec_control_timing(exec->spec, rows, forward_s, n_drafted, draft_s);
    if (n_drafted == 0) return;
    for (int i = 0; i < step->n_seqs; i++) {
        const DiStepSeq *s = &step->seqs[i];
        if (s->draft_index >= 0 && !s->failed)
            di_spec_control_outcome(exec->spec, step->draft_conf + (size_t)s->draft_index * (size_t)step->draft_block,
                                    s->n_drafts, s->n_accepted);
    }
    di_spec_control_refit(exec->spec);
}

static void execute(const DiStepExecutor *exec, DiStep *step) {
    double t0 = di_now_seconds();
    int32_t n_drafted = 0;
    if (exec->spec && draft_all(exec, step, &n_drafted) != 0) {
        fail(step, exec->runner->name ? exec->runner->name : "drafting");
        return;
    }
    step->n_rows = step->n_sampled = 0;
    for (int i = 0; i < step->n_seqs; i++) {
        DiStepSeq *s = &step->seqs[i];
        DiRunnerSeq *r = &step->runner_seqs[i];
        r->pages = step->page_ptrs + s->page_offset;
        r->n_pages = s->n_pages;
        r->tokens = s->req->tokens + s->start_pos; /* written by the previous step when decoding */
        r->n_tokens = s->n_tokens + s->n_drafts;
        r->start_pos = s->start_pos;
        r->n_logits = s->sample ? 1 + s->n_drafts : 0;
        r->speculative = s->n_drafts > 0;
        r->replay_start = s->replay_start;
        r->replay_end = s->replay_end;
        s->first_row = step->n_rows;
        step->n_rows += r->n_logits;
        if (s->sample) step->sample_seq[step->n_sampled++] = i;
    }
    DiRunnerBatch batch = {step->runner_seqs, step->n_seqs, exec->batch_invariant, step->logits};
    double t1 = di_now_seconds();
    if (step->n_rows > step->cap_rows) {
        step->status = -1;
        snprintf(step->error, sizeof step->error, "step: %d logits rows, room for %d", step->n_rows, step->cap_rows);
        return;
    }
    if (exec->runner->ops->forward(exec->runner, &batch) != 0) {
        fail(step, exec->runner->name ? exec->runner->name : "model forward");
        return;
    }
    double t2 = di_now_seconds();
    sample_rows(exec, step);
    if (commit_all(exec, step, &batch) != 0) {
        fail(step, exec->runner->name ? exec->runner->name : "commit");
        return;
    }
    for (int i = 0; i < step->n_seqs; i++) { /* prefix-cache snapshots, before the next step writes */
        const DiStepSeq *s = &step->seqs[i];
        for (size_t p = 0; p < s->snapshot.n && p < s->n_pages; p++)
            memcpy(s->snapshot.pages[p], step->runner_seqs[i].pages[p], exec->runner->page_bytes);
    }
    if (exec->observer) observe_rows(exec, step);
    if (exec->spec) report_spec(exec, step, n_drafted, t1 - t0, t2 - t1);
    step->time_draft_s = t1 - t0;
    step->time_forward_s = t2 - t1;
    step->time_sample_s = di_now_seconds() - t2;
}

void di_step_clear_expert_load(DiRunner *runner) {
    DiExpertLoad load;
    if (!runner->ops->expert_load || runner->ops->expert_load(runner, &load) != 0) return;
    memset(load.tokens, 0, (size_t)load.layers * (size_t)load.experts * sizeof *load.tokens);
    if (load.draft_tokens)
        memset(load.draft_tokens, 0, (size_t)load.draft_layers * (size_t)load.draft_experts * sizeof *load.draft_tokens);
}

void di_step_execute(const DiStepExecutor *exec, DiStep *step) {
    execute(exec, step);
    DiExpertLoad load;
    if (exec->load_observer && step->status == 0 && exec->runner->ops->expert_load &&
        exec->runner->ops->expert_load(exec->runner, &load) == 0)
        exec->load_observer(exec->load_observer_user, &load);
    di_step_clear_expert_load(exec->runner);
}
