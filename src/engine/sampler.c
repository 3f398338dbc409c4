/* sampler.c — the sampling pipeline of sampler.h, one row at a time. */
#include "engine/sampler.h"

#include "base/error.h"
#include "base/mem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

struct DiSampler {
    int32_t vocab;
    float *work;        /* penalised logits */
    double *prob;       /* unnormalised probabilities exp((x - max) / T) */
    int32_t *cand;      /* surviving token ids */
    int32_t *counts;    /* occurrences of each token in the output (zeroed after use) */
    uint8_t *seen;      /* token occurs in prompt or output (zeroed after use) */
};

DiSampler *di_sampler_create(int32_t vocab_size) {
    if (vocab_size <= 0) {
        di_errorf("sampler: vocabulary size must be positive, got %d", vocab_size);
        return NULL;
    }
    DiSampler *s = di_calloc(1, sizeof *s, "sampler");
    if (!s) return NULL;
    s->vocab = vocab_size;
    s->work = di_calloc((size_t)vocab_size, sizeof *s->work, "sampler logits");
    s->prob = di_calloc((size_t)vocab_size, sizeof *s->prob, "sampler probabilities");
    s->cand = di_calloc((size_t)vocab_size, sizeof *s->cand, "sampler candidates");
    s->counts = di_calloc((size_t)vocab_size, sizeof *s->counts, "sampler counts");
    s->seen = di_calloc((size_t)vocab_size, sizeof *s->seen, "sampler seen set");
    if (!s->work || !s->prob || !s->cand || !s->counts || !s->seen) {
        di_sampler_destroy(s);
        return NULL;
    }
    return s;
}

void di_sampler_destroy(DiSampler *s) {
    if (!s) return;
    free(s->work);
    free(s->prob);
    free(s->cand);
    free(s->counts);
    free(s->seen);
    free(s);
}

int di_sampling_params_check(const DiSamplingParams *p, int32_t vocab) {
    if (!p) return di_errorf("sampling parameters: NULL");
    if (!(p->temperature >= 0.0f) || !isfinite(p->temperature))
        return di_errorf("sampling parameters: temperature must be a finite number >= 0, got %g", p->temperature);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return di_errorf("sampling parameters: top_p must be in (0, 1], got %g", p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return di_errorf("sampling parameters: min_p must be in [0, 1], got %g", p->min_p);
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
        return di_errorf("sampling parameters: presence_penalty must be in [-2, 2], got %g", p->presence_penalty);
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
        return di_errorf("sampling parameters: frequency_penalty must be in [-2, 2], got %g", p->frequency_penalty);
    if (!(p->repetition_penalty > 0.0f) || !isfinite(p->repetition_penalty))
        return di_errorf("sampling parameters: repetition_penalty must be a finite number > 0, got %g",
                         p->repetition_penalty);
    if (p->max_tokens < 1) return di_errorf("sampling parameters: max_tokens must be >= 1, got %d", p->max_tokens);
    if (p->min_tokens < 0 || p->min_tokens > p->max_tokens)
        return di_errorf("sampling parameters: min_tokens must be in [0, max_tokens=%d], got %d", p->max_tokens,
                         p->min_tokens);
    if (p->logprobs < -1 || p->logprobs > DI_MAX_LOGPROBS)
        return di_errorf("sampling parameters: logprobs must be -1 (none) or in [0, %d], got %d", DI_MAX_LOGPROBS,
                         p->logprobs);
    if (p->n_stop_token_ids < 0 || (p->n_stop_token_ids > 0 && !p->stop_token_ids))
        return di_errorf("sampling parameters: stop_token_ids: %d ids but no array", p->n_stop_token_ids);
    for (int i = 0; i < p->n_stop_token_ids; i++)
        if (p->stop_token_ids[i] < 0 || p->stop_token_ids[i] >= vocab)
            return di_errorf("sampling parameters: stop_token_ids[%d] = %d is outside the vocabulary [0, %d)", i,
                             p->stop_token_ids[i], vocab);
    if (p->n_stop < 0 || (p->n_stop > 0 && !p->stop))
        return di_errorf("sampling parameters: stop: %d strings but no array", p->n_stop);
    for (int i = 0; i < p->n_stop; i++)
        if (!p->stop[i] || !p->stop[i][0])
            return di_errorf("sampling parameters: stop[%d] is %s", i, p->stop[i] ? "empty" : "NULL");
    return 0;
}

double di_sampler_uniform(uint64_t seed, int64_t position, uint32_t draw) {
    uint64_t key[2] = {(uint64_t)position, draw};
    uint64_t bits = XXH3_64bits_withSeed(key, sizeof key, seed);
    /* 53 random bits, centred in their interval: never exactly 0 or 1. */
    return ((double)(bits >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* ---- masking and penalties ------------------------------------------------------------------ */

static void mask_stop_tokens(DiSampler *s, const DiSamplingParams *p, const DiSampleContext *c) {
    if (c->n_output >= (size_t)p->min_tokens) return;
    if (!p->ignore_eos)
        for (int i = 0; i < c->n_eos_ids; i++)
            if (c->eos_ids[i] >= 0 && c->eos_ids[i] < s->vocab) s->work[c->eos_ids[i]] = -INFINITY;
    for (int i = 0; i < p->n_stop_token_ids; i++) s->work[p->stop_token_ids[i]] = -INFINITY;
}

/* vLLM semantics: repetition penalty divides positive logits and multiplies negative ones of every
 * token seen in prompt or output; presence subtracts once per generated token, frequency once per
 * occurrence. */
static void apply_penalties(DiSampler *s, const DiSamplingParams *p, const DiSampleContext *c) {
    bool repetition = p->repetition_penalty != 1.0f;
    bool additive = p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
    if (!repetition && !additive) return;
    for (size_t i = 0; i < c->n_output; i++) {
        int32_t t = c->output[i];
        if (t >= 0 && t < s->vocab) s->counts[t]++;
    }
    if (repetition) {
        for (size_t i = 0; i < c->n_prompt + c->n_output; i++) {
            int32_t t = i < c->n_prompt ? c->prompt[i] : c->output[i - c->n_prompt];
            if (t < 0 || t >= s->vocab || s->seen[t]) continue;
            s->seen[t] = 1;
            float x = s->work[t];
            s->work[t] = x > 0 ? x / p->repetition_penalty : x * p->repetition_penalty;
        }
    }
    for (size_t i = 0; i < c->n_output; i++) {
        int32_t t = c->output[i];
        if (t < 0 || t >= s->vocab || s->counts[t] == 0) continue;
        if (additive)
            s->work[t] -= p->frequency_penalty * (float)s->counts[t] + p->presence_penalty;
        s->counts[t] = 0; /* applied once per distinct token; also leaves the scratch clean */
    }
    for (size_t i = 0; i < c->n_prompt + c->n_output; i++) {
        int32_t t = i < c->n_prompt ? c->prompt[i] : c->output[i - c->n_prompt];
        if (t >= 0 && t < s->vocab) s->seen[t] = 0;
    }
}

/* ---- ranking (probability descending, ties by lower id) ----------------------------------- */

/* qsort has no context argument: the probabilities being ranked, per thread. */
static _Thread_local const double *rank_prob;

static bool ranks_before(const double *prob, int32_t a, int32_t b) {
    return prob[a] > prob[b] || (prob[a] == prob[b] && a < b);
}

static int compare_rank(const void *pa, const void *pb) {
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    if (a == b) return 0;
    return ranks_before(rank_prob, a, b) ? -1 : 1;
}

static void sort_by_rank(const double *prob, int32_t *ids, size_t n) {
    rank_prob = prob;
    qsort(ids, n, sizeof *ids, compare_rank);
}

/* Move the k best of ids[0..n) to the front (any order): quickselect on the strict rank order. */
static void select_best(const double *prob, int32_t *ids, size_t n, size_t k) {
    size_t lo = 0, hi = n; /* the k-th best lies in [lo, hi) */
    while (hi - lo > 1) {
        int32_t pivot = ids[lo + (hi - lo) / 2];
        size_t j = hi;
        /* three-way partition: before pivot | pivot | after pivot (ids are distinct) */
        size_t lt = lo;
        for (size_t m = lo; m < j;) {
            if (ids[m] == pivot) {
                m++;
            } else if (ranks_before(prob, ids[m], pivot)) {
                int32_t t = ids[m]; ids[m] = ids[lt]; ids[lt] = t;
                lt++; m++;
            } else {
                j--;
                int32_t t = ids[m]; ids[m] = ids[j]; ids[j] = t;
            }
        }
        /* now [lo, lt) before pivot, [lt, j) == pivot (one element), [j, hi) after */
        if (k <= lt) hi = lt;
        else if (k > j) lo = j;
        else return;
    }
}

/* ---- the pipeline ------------------------------------------------------------------------- */

static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t v = 1; v < n; v++)
        if (x[v] > x[best]) best = v; /* strict: ties stay with the lower id */
    return best;
}

/* Truncate the candidates by min-p, top-k, top-p; returns how many survive (>= 1). */
static size_t filter_candidates(DiSampler *s, const DiSamplingParams *p, size_t n, double pmax) {
    double *prob = s->prob;
    int32_t *cand = s->cand;
    if (p->min_p > 0.0f) {
        double floor_p = (double)p->min_p * pmax;
        size_t kept = 0;
        for (size_t i = 0; i < n; i++)
            if (prob[cand[i]] >= floor_p) cand[kept++] = cand[i];
        n = kept;
    }
    if (p->top_k > 0 && (size_t)p->top_k < n) {
        select_best(prob, cand, n, (size_t)p->top_k);
        n = (size_t)p->top_k;
    }
    if (p->top_p < 1.0f && n > 1) {
        sort_by_rank(prob, cand, n);
        double total = 0;
        for (size_t i = 0; i < n; i++) total += prob[cand[i]];
        /* keep the shortest prefix whose mass reaches top_p (a token is kept when the mass ranked
         * strictly above it is below top_p) */
        double limit = (double)p->top_p * total, above = 0;
        size_t kept = 0;
        while (kept < n && above < limit) above += prob[cand[kept++]];
        n = kept;
    }
    return n;
}

static int compare_id(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int32_t draw_token(DiSampler *s, size_t n, uint64_t seed, int64_t position) {
    /* Walk the survivors in id order so the draw depends only on the set, not on how it was found. */
    qsort(s->cand, n, sizeof *s->cand, compare_id);
    double total = 0;
    for (size_t i = 0; i < n; i++) total += s->prob[s->cand[i]];
    double target = di_sampler_uniform(seed, position, 0) * total, cum = 0;
    for (size_t i = 0; i < n; i++) {
        cum += s->prob[s->cand[i]];
        if (cum > target) return s->cand[i];
    }
    return s->cand[n - 1]; /* rounding left target at the very top */
}

static void fill_logprobs(const float *logits, int32_t vocab, int32_t token, int n_best, DiTokenLogprobs *out) {
    float max = -INFINITY;
    for (int32_t v = 0; v < vocab; v++)
        if (logits[v] > max) max = logits[v];
    double sum = 0;
    for (int32_t v = 0; v < vocab; v++) sum += exp((double)logits[v] - max);
    double log_z = (double)max + log(sum);
    memset(out, 0, sizeof *out);
    out->token = token;
    out->logprob = (float)((double)logits[token] - log_z);
    /* n best by insertion into a short sorted list (n <= DI_MAX_LOGPROBS) */
    int n = 0;
    for (int32_t v = 0; v < vocab && n_best > 0; v++) {
        if (n == n_best && !(logits[v] > logits[out->top_ids[n - 1]])) continue;
        int at = n < n_best ? n++ : n - 1;
        while (at > 0 && logits[v] > logits[out->top_ids[at - 1]]) {
            out->top_ids[at] = out->top_ids[at - 1];
            at--;
        }
        out->top_ids[at] = v;
    }
    out->n_top = n;
    for (int i = 0; i < n; i++) out->top_logprobs[i] = (float)((double)logits[out->top_ids[i]] - log_z);
}

int di_sampler_sample(DiSampler *s, const DiSamplingParams *p, const DiSampleContext *c, const float *logits,
                      int32_t *out_token, DiTokenLogprobs *logprobs) {
    if (!s || !p || !c || !logits || !out_token) return di_errorf("sampler: NULL argument");
    const int32_t V = s->vocab;
    for (int32_t v = 0; v < V; v++) {
        if (isnan(logits[v]) || logits[v] == INFINITY)
            return di_errorf("sampler: logits row has %s at token %d", isnan(logits[v]) ? "NaN" : "+inf", v);
    }
    memcpy(s->work, logits, (size_t)V * sizeof *s->work);
    mask_stop_tokens(s, p, c);
    apply_penalties(s, p, c);

    int32_t token;
    int32_t best = argmax(s->work, V);
    if (s->work[best] == -INFINITY) return di_errorf("sampler: every token is masked");
    if (p->temperature < DI_SAMPLER_GREEDY_EPS) {
        token = best;
    } else {
        double inv_t = 1.0 / (double)p->temperature, max = s->work[best];
        size_t n = 0;
        for (int32_t v = 0; v < V; v++) {
            if (s->work[v] == -INFINITY) continue;
            s->prob[v] = exp(((double)s->work[v] - max) * inv_t);
            s->cand[n++] = v;
        }
        n = filter_candidates(s, p, n, 1.0 /* exp(0): the best token */);
        token = draw_token(s, n, c->seed, c->position);
    }
    *out_token = token;
    if (logprobs && p->logprobs >= 0) fill_logprobs(logits, V, token, p->logprobs, logprobs);
    return 0;
}

void di_sampling_params_init(DiSamplingParams *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->temperature = 1.0f;
    p->top_p = 1.0f;
    p->repetition_penalty = 1.0f;
    p->max_tokens = 16;
    p->logprobs = -1;
}
