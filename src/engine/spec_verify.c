/* spec_verify.c — the greedy and the rejection-sampling verification of spec_verify.h.  Logits
 * processing and randomness are the sampler's (sampler.h); this file only decides acceptance. */
#include "engine/spec_verify.h"

#include "base/error.h"
#include "base/mem.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Draw indices of the counter uniform at a verified position (the sampler's own draw is 0). */
#define DRAW_ACCEPT 1u
#define DRAW_RESIDUAL 2u

struct DiSpecVerifier {
    int32_t vocab;
    DiSampler *sampler;
    float *target;      /* p_t of the row being verified */
    float *draft;       /* q of the draft being verified */
    int32_t *output;    /* the base output followed by the drafts */
    size_t cap_output;
};

DiSpecVerifier *di_spec_verifier_create(int32_t vocab_size, const DiKernelBackend *be) {
    if (vocab_size <= 0) {
        di_errorf("spec verifier: vocabulary size must be positive, got %d", vocab_size);
        return NULL;
    }
    DiSpecVerifier *v = di_calloc(1, sizeof *v, "spec verifier");
    if (!v) return NULL;
    v->vocab = vocab_size;
    v->sampler = di_sampler_create(vocab_size, be);
    v->target = di_calloc((size_t)vocab_size, sizeof *v->target, "spec verifier target distribution");
    v->draft = di_calloc((size_t)vocab_size, sizeof *v->draft, "spec verifier draft distribution");
    if (!v->sampler || !v->target || !v->draft) {
        di_spec_verifier_destroy(v);
        return NULL;
    }
    return v;
}

void di_spec_verifier_destroy(DiSpecVerifier *v) {
    if (!v) return;
    di_sampler_destroy(v->sampler);
    free(v->target);
    free(v->draft);
    free(v->output);
    free(v);
}

static int check_tokens(const DiSpecVerifier *v, const int32_t *drafts, int32_t n) {
    if (n < 0) return di_errorf("spec verifier: draft count must be >= 0, got %d", n);
    if (n > 0 && !drafts) return di_errorf("spec verifier: %d drafts but no array", n);
    for (int32_t j = 0; j < n; j++)
        if (drafts[j] < 0 || drafts[j] >= v->vocab)
            return di_errorf("spec verifier: draft %d = %d is outside the vocabulary [0, %d)", j, drafts[j], v->vocab);
    return 0;
}

/* v->output = base output + drafts[0, n); *ctx = base reading it, still at base's position. */
static int extend_context(DiSpecVerifier *v, const DiSampleContext *base, const int32_t *drafts, int32_t n,
                          DiSampleContext *ctx) {
    if (base->n_output > 0 && !base->output)
        return di_errorf("spec verifier: %zu output tokens but no array", base->n_output);
    if (base->position < 0)
        return di_errorf("spec verifier: position must be >= 0, got %lld", (long long)base->position);
    size_t need = base->n_output + (size_t)n;
    if (di_grow(&v->output, &v->cap_output, need, 256, sizeof *v->output, "spec verifier context") != 0) return -1;
    if (base->n_output > 0) memcpy(v->output, base->output, base->n_output * sizeof *v->output);
    if (n > 0) memcpy(v->output + base->n_output, drafts, (size_t)n * sizeof *v->output);
    *ctx = *base;
    ctx->output = v->output;
    return 0;
}

/* The context of row j: the drafts before it are output, the position advanced by j. */
static DiSampleContext row_context(const DiSampleContext *extended, const DiSampleContext *base, int32_t j) {
    DiSampleContext c = *extended;
    c.n_output = base->n_output + (size_t)j;
    c.position = base->position + j;
    return c;
}

int di_spec_draft_pick(DiSpecVerifier *v, const DiSamplingParams *params, const DiSampleContext *base,
                       const int32_t *drafts, int32_t k, const float *draft_logits, int32_t *out_token) {
    if (!v || !params || !base || !draft_logits || !out_token) return di_errorf("spec draft pick: NULL argument");
    if (check_tokens(v, drafts, k) != 0) return -1;
    DiSampleContext ext;
    if (extend_context(v, base, drafts, k, &ext) != 0) return -1;
    DiSampleContext c = row_context(&ext, base, k);
    c.position += DI_SPEC_DRAFT_SALT; /* the proposal's noise is never the verifier's */
    return di_sampler_sample(v->sampler, params, &c, draft_logits, out_token, NULL);
}

/* Inverse CDF over the weights w[0, vocab) (total mass > 0) in id order at uniform u. */
static int32_t draw_dense(const float *w, int32_t vocab, double total, double u) {
    double target = u * total, cum = 0;
    int32_t last = 0;
    for (int32_t t = 0; t < vocab; t++) {
        if (w[t] <= 0) continue;
        cum += w[t];
        last = t;
        if (cum > target) return t;
    }
    return last; /* rounding left target at the very top */
}

/* The token after a rejection in row context c: from normalize(max(p_t - q, 0)) (v->target and
 * v->draft; the residual overwrites v->draft). */
static int32_t draw_residual(DiSpecVerifier *v, const DiSampleContext *c) {
    double total = 0;
    for (int32_t t = 0; t < v->vocab; t++) {
        float r = v->target[t] - v->draft[t];
        v->draft[t] = r > 0 ? r : 0;
        total += v->draft[t];
    }
    const float *w = v->draft;
    if (!(total > 0)) { /* p_t == q to float precision: nothing is left over, p_t itself is exact */
        w = v->target;
        total = 0;
        for (int32_t t = 0; t < v->vocab; t++) total += w[t];
    }
    return draw_dense(w, v->vocab, total, di_sampler_uniform(c->seed, c->position, DRAW_RESIDUAL));
}

/* Row j at T > 0: 1 when draft j is accepted, 0 when rejected (*token: the residual draw). */
static int verify_sampled_row(DiSpecVerifier *v, const DiSamplingParams *p, const DiSampleContext *c,
                              const float *target_row, const float *draft_row, int32_t draft, int32_t j,
                              int32_t *token) {
    if (di_sampler_probs(v->sampler, p, c, target_row, v->target) != 0) return di_error_wrap("target row %d", j);
    if (di_sampler_probs(v->sampler, p, c, draft_row, v->draft) != 0) return di_error_wrap("draft row %d", j);
    double q = v->draft[draft], pt = v->target[draft];
    if (!(q > 0))
        return di_errorf("spec verifier: draft %d (token %d) has probability 0 under its own draft distribution "
                         "(drafts must come from di_spec_draft_pick with the same parameters)", j, draft);
    if (pt > di_sampler_uniform(c->seed, c->position, DRAW_ACCEPT) * q) {
        *token = draft;
        return 1;
    }
    *token = draw_residual(v, c);
    return 0;
}

static int verify_sampled(DiSpecVerifier *v, const DiSamplingParams *p, const DiSampleContext *base,
                          const DiSampleContext *ext, const float *target_logits, const int32_t *drafts,
                          int32_t n_draft, const float *draft_logits, int32_t *out, DiTokenLogprobs *logprobs,
                          int32_t *accepted) {
    size_t V = (size_t)v->vocab;
    for (int32_t j = 0; j <= n_draft; j++) {
        DiSampleContext c = row_context(ext, base, j);
        const float *row = target_logits + (size_t)j * V;
        if (j == n_draft) { /* every draft accepted: the bonus is plain sampling of the last row */
            *accepted = n_draft;
            return di_sampler_sample(v->sampler, p, &c, row, &out[j], logprobs ? &logprobs[j] : NULL);
        }
        int kept = verify_sampled_row(v, p, &c, row, draft_logits + (size_t)j * V, drafts[j], j, &out[j]);
        if (kept < 0) return -1;
        if (logprobs && p->logprobs >= 0) di_sampler_logprobs(row, v->vocab, out[j], p->logprobs, &logprobs[j]);
        if (!kept) {
            *accepted = j;
            return 0;
        }
    }
    return 0; /* not reached: row n_draft returns */
}

static int verify_greedy(DiSpecVerifier *v, const DiSamplingParams *p, const DiSampleContext *base,
                         const DiSampleContext *ext, const float *target_logits, const int32_t *drafts,
                         int32_t n_draft, int32_t *out, DiTokenLogprobs *logprobs, int32_t *accepted) {
    for (int32_t j = 0; j <= n_draft; j++) {
        DiSampleContext c = row_context(ext, base, j);
        const float *row = target_logits + (size_t)j * (size_t)v->vocab;
        if (di_sampler_sample(v->sampler, p, &c, row, &out[j], logprobs ? &logprobs[j] : NULL) != 0)
            return di_error_wrap("target row %d", j);
        if (j == n_draft || out[j] != drafts[j]) {
            *accepted = j;
            return 0;
        }
    }
    return 0; /* not reached: row n_draft returns */
}

int di_spec_verify(DiSpecVerifier *v, const DiSamplingParams *params, const DiSampleContext *base,
                   const float *target_logits, const int32_t *drafts, int32_t n_draft, const float *draft_logits,
                   int32_t *out_tokens, DiTokenLogprobs *out_logprobs, int32_t *out_accepted) {
    if (!v || !params || !base || !target_logits || !out_tokens || !out_accepted)
        return di_errorf("spec verify: NULL argument");
    if (check_tokens(v, drafts, n_draft) != 0) return -1;
    bool greedy = params->temperature < DI_SAMPLER_GREEDY_EPS;
    if (!greedy && n_draft > 0 && !draft_logits)
        return di_errorf("spec verify: sampling at temperature %g needs the draft logits", params->temperature);
    DiSampleContext ext;
    if (extend_context(v, base, drafts, n_draft, &ext) != 0) return -1;
    if (greedy)
        return verify_greedy(v, params, base, &ext, target_logits, drafts, n_draft, out_tokens, out_logprobs,
                             out_accepted);
    return verify_sampled(v, params, base, &ext, target_logits, drafts, n_draft, draft_logits, out_tokens,
                          out_logprobs, out_accepted);
}
