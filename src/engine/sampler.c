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
    const DiKernelBackend *be; /* its expf_row: the probabilities' exp */
    float *work;        /* penalised logits */
    float *prob;        /* unnormalised probabilities exp((x - max) / T), in (0, 1] */
    int32_t *cand;      /* surviving token ids */
    int32_t *counts;    /* occurrences of each token in the output (zeroed after use) */
    uint8_t *seen;      /* token occurs in prompt or output (zeroed after use) */
    int32_t *kept;      /* nucleus: candidates of the octaves kept, then of the boundary octave */
    uint8_t *octaves;   /* nucleus: octave of each candidate */
};

DiSampler *di_sampler_create(int32_t vocab_size, const DiKernelBackend *be) {
    if (vocab_size <= 0) {
        di_errorf("sampler: vocabulary size must be positive, got %d", vocab_size);
        return NULL;
    }
    if (!be || !be->expf_row) {
        di_errorf("sampler: no kernel backend given");
        return NULL;
    }
    DiSampler *s = di_calloc(1, sizeof *s, "sampler");
    if (!s) return NULL;
    s->vocab = vocab_size;
    s->be = be;
    s->work = di_calloc((size_t)vocab_size, sizeof *s->work, "sampler logits");
    s->prob = di_calloc((size_t)vocab_size, sizeof *s->prob, "sampler probabilities");
    s->cand = di_calloc((size_t)vocab_size, sizeof *s->cand, "sampler candidates");
    s->counts = di_calloc((size_t)vocab_size, sizeof *s->counts, "sampler counts");
    s->seen = di_calloc((size_t)vocab_size, sizeof *s->seen, "sampler seen set");
    s->kept = di_calloc((size_t)vocab_size, sizeof *s->kept, "sampler nucleus");
    s->octaves = di_calloc((size_t)vocab_size, sizeof *s->octaves, "sampler octaves");
    if (!s->work || !s->prob || !s->cand || !s->counts || !s->seen || !s->kept || !s->octaves) {
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
    free(s->kept);
    free(s->octaves);
    free(s);
}

/* The structured-output fields (compiled later, at admission: here only their shape). */
static int check_constraint(const DiSamplingParams *p, int32_t vocab) {
    int t = p->constraint_type;
    if (t < DI_CONSTRAINT_NONE || t > DI_CONSTRAINT_DSML_TOOLS)
        return di_errorf("sampling parameters: constraint_type must be in [0, 5], got %d", t);
    bool wants_text = t == DI_CONSTRAINT_REGEX || t == DI_CONSTRAINT_JSON_SCHEMA || t == DI_CONSTRAINT_EBNF ||
                      t == DI_CONSTRAINT_DSML_TOOLS;
    if (wants_text && !p->constraint)
        return di_errorf("sampling parameters: constraint_type %d needs the constraint text", t);
    if (!wants_text && p->constraint)
        return di_errorf("sampling parameters: constraint text given with constraint_type %d, which takes none", t);
    if (t == DI_CONSTRAINT_NONE && p->constraint_after_think)
        return di_errorf("sampling parameters: constraint_after_think without a constraint");
    if (t != DI_CONSTRAINT_NONE && p->ignore_eos)
        return di_errorf("sampling parameters: ignore_eos cannot be combined with a structured-output constraint "
                         "(the output ends where the grammar does)");
    if (t != DI_CONSTRAINT_NONE && p->has_thinking_budget && !p->constraint_after_think)
        return di_errorf("sampling parameters: a thinking budget with a constraint needs constraint_after_think "
                         "(the forced end of thinking is not grammar text)");
    if (p->constraint_after_think && (p->think_end_id < 0 || p->think_end_id >= vocab))
        return di_errorf("sampling parameters: constraint_after_think needs think_end_id in the vocabulary, got %d",
                         p->think_end_id);
    return 0;
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
    if (p->n_logit_bias < 0 || (p->n_logit_bias > 0 && !p->logit_bias))
        return di_errorf("sampling parameters: logit_bias: %d entries but no array", p->n_logit_bias);
    for (int i = 0; i < p->n_logit_bias; i++) {
        const DiLogitBias *b = &p->logit_bias[i];
        if (b->token < 0 || b->token >= vocab)
            return di_errorf("sampling parameters: logit_bias token %d is outside the vocabulary [0, %d)", b->token,
                             vocab);
        if (!(b->bias >= -100.0f && b->bias <= 100.0f))
            return di_errorf("sampling parameters: logit_bias[%d] must be in [-100, 100], got %g", b->token, b->bias);
    }
    if (p->has_thinking_budget && (p->thinking_budget < 0 || p->think_end_id < 0 || p->think_end_id >= vocab))
        return di_errorf("sampling parameters: thinking budget %d needs a budget >= 0 and an end-of-thinking token "
                         "in the vocabulary (got %d)", p->thinking_budget, p->think_end_id);
    if (check_constraint(p, vocab) != 0) return -1;
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

static void apply_logit_bias(DiSampler *s, const DiSamplingParams *p) {
    for (int i = 0; i < p->n_logit_bias; i++)
        if (p->logit_bias[i].token >= 0 && p->logit_bias[i].token < s->vocab)
            s->work[p->logit_bias[i].token] += p->logit_bias[i].bias;
}

/* The reasoning budget is spent and the end of thinking was not generated yet: force it. */
static bool thinking_budget_spent(const DiSamplingParams *p, const DiSampleContext *c) {
    if (!p->has_thinking_budget || c->n_output < (size_t)p->thinking_budget) return false;
    for (size_t i = 0; i < c->n_output; i++)
        if (c->output[i] == p->think_end_id) return false;
    return true;
}

static void mask_stop_tokens(DiSampler *s, const DiSamplingParams *p, const DiSampleContext *c) {
    if (c->n_output >= (size_t)p->min_tokens) return;
    if (!p->ignore_eos)
        for (int i = 0; i < c->n_eos_ids; i++)
            if (c->eos_ids[i] >= 0 && c->eos_ids[i] < s->vocab) s->work[c->eos_ids[i]] = -INFINITY;
    for (int i = 0; i < p->n_stop_token_ids; i++) s->work[p->stop_token_ids[i]] = -INFINITY;
}

/* A structured output whose grammar allows nothing but EOS / stop tokens here (its logits row
 * arrives masked, constraint.h) cannot be extended to min_tokens: its end wins, rather than a
 * fully masked row failing the whole step. */
static bool only_stops_left(const DiSampler *s, const DiSamplingParams *p, const DiSampleContext *c,
                            const float *logits) {
    for (int32_t v = 0; v < s->vocab; v++) {
        if (logits[v] == -INFINITY) continue;
        bool stop = false;
        for (int i = 0; i < c->n_eos_ids && !stop; i++) stop = c->eos_ids[i] == v;
        for (int i = 0; i < p->n_stop_token_ids && !stop; i++) stop = p->stop_token_ids[i] == v;
        if (!stop) return false;
    }
    return true;
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

static bool ranks_before(const float *prob, int32_t a, int32_t b) {
    return prob[a] > prob[b] || (prob[a] == prob[b] && a < b);
}

/* Partition ids[lo, hi) around the rank of its middle element: afterwards [lo, *before_end) rank
 * before the pivot, the pivot sits at *before_end, the rest after it. */
static void partition_by_rank(const float *prob, int32_t *ids, size_t lo, size_t hi, size_t *before_end) {
    int32_t pivot = ids[lo + (hi - lo) / 2];
    size_t lt = lo, j = hi;
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
    /* the pivot is the only element left in [lt, j) */
    *before_end = lt;
}

/* Move the k best of ids[0, n) to the front (any order): quickselect on the strict rank order. */
static void select_best(const float *prob, int32_t *ids, size_t n, size_t k) {
    size_t lo = 0, hi = n; /* the boundary after the k-th best lies in [lo, hi) */
    while (hi - lo > 1) {
        size_t lt;
        partition_by_rank(prob, ids, lo, hi, &lt);
        if (k <= lt) hi = lt;
        else if (k > lt + 1) lo = lt + 1;
        else return;
    }
}

/* Octave of a probability in (0, 1]: 0 for [1, 2), 1 for [0.5, 1), ... capped at 63 (from the
 * float's exponent bits: no log, no branch). */
static int octave(float p) {
    uint32_t bits;
    memcpy(&bits, &p, sizeof bits);
    int o = 127 - (int)(bits >> 23);
    return o < 0 ? 0 : o > 63 ? 63 : o;
}

/* Top-p without sorting: the smallest k such that the k best carry at least `limit` of mass,
 * found by quickselect on cumulative mass (expected O(n)); the k best end up in ids[0, k). */
static size_t nucleus_size(const float *prob, int32_t *ids, size_t n, double limit) {
    size_t lo = 0, hi = n; /* ids[0, lo) are the lo best, with mass acc < limit; lo < k <= hi */
    double acc = 0;
    while (hi - lo > 1) {
        size_t lt;
        partition_by_rank(prob, ids, lo, hi, &lt);
        double before = 0;
        for (size_t i = lo; i < lt; i++) before += prob[ids[i]];
        if (acc + before >= limit) {
            hi = lt;
        } else if (acc + before + prob[ids[lt]] >= limit) {
            return lt + 1;
        } else {
            acc += before + prob[ids[lt]];
            lo = lt + 1;
        }
    }
    return hi;
}

/* The nucleus in two stages: a histogram of mass per octave of probability finds the octave
 * where the mass reaches the limit; every token of a higher octave is in, and only the boundary
 * octave's tokens go through the exact quickselect (few, for a peaked distribution).  The k kept
 * end up in ids[0, k).  The octaves are computed once and the kept ids copied without branches
 * (a branch per token mispredicts on every other token of a flat distribution). */
static size_t nucleus_by_octaves(DiSampler *s, int32_t *ids, size_t n, double limit) {
    const float *prob = s->prob;
    uint8_t *oct = s->octaves;
    double mass[64] = {0};
    for (size_t i = 0; i < n; i++) {
        float p = prob[ids[i]];
        oct[i] = (uint8_t)octave(p);
        mass[oct[i]] += p;
    }
    int boundary = 0;
    double above = 0;
    while (boundary < 63 && above + mass[boundary] < limit) above += mass[boundary++];
    size_t k = 0; /* kept[0, k): octaves above the boundary */
    for (size_t i = 0; i < n; i++) {
        s->kept[k] = ids[i];
        k += oct[i] < boundary;
    }
    size_t m = k; /* kept[k, m): the boundary octave */
    for (size_t i = 0; i < n; i++) {
        s->kept[m] = ids[i];
        m += oct[i] == boundary;
    }
    memcpy(ids, s->kept, m * sizeof *ids);
    if (m == k) return k > 0 ? k : 1; /* rounding: the mass ran out above the boundary */
    return k + nucleus_size(prob, ids + k, m - k, limit - above);
}

/* Truncate the candidates by min-p, top-k, top-p; returns how many survive (>= 1).  *reordered
 * tells whether cand is still in id order. */
static size_t filter_candidates(DiSampler *s, const DiSamplingParams *p, size_t n, bool *reordered) {
    float *prob = s->prob;
    int32_t *cand = s->cand;
    if (p->min_p > 0.0f) {
        float floor_p = p->min_p; /* the best token has probability 1 here (exp(0)) */
        size_t kept = 0;
        for (size_t i = 0; i < n; i++)
            if (prob[cand[i]] >= floor_p) cand[kept++] = cand[i];
        n = kept;
    }
    if (p->top_k > 0 && (size_t)p->top_k < n) {
        select_best(prob, cand, n, (size_t)p->top_k);
        n = (size_t)p->top_k;
        *reordered = true;
    }
    if (p->top_p < 1.0f && n > 1) {
        double total = 0;
        for (size_t i = 0; i < n; i++) total += prob[cand[i]];
        /* keep the shortest prefix whose mass reaches top_p (a token is kept when the mass ranked
         * strictly above it is below top_p) */
        n = nucleus_by_octaves(s, cand, n, (double)p->top_p * total);
        *reordered = true;
    }
    return n;
}

static int compare_id(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int32_t draw_token(DiSampler *s, size_t n, bool reordered, uint64_t seed, int64_t position) {
    /* Walk the survivors in id order so the draw depends only on the set, not on how it was found:
     * a few are sorted, many are put back in order through a mark per token. */
    if (reordered && n * 16 < (size_t)s->vocab) {
        qsort(s->cand, n, sizeof *s->cand, compare_id);
    } else if (reordered) {
        uint8_t *seen = s->seen;
        int32_t *cand = s->cand;
        for (size_t i = 0; i < n; i++) seen[cand[i]] = 1;
        size_t m = 0;
        for (int32_t v = 0; v < s->vocab; v++) { /* without branches: see nucleus_by_octaves */
            cand[m] = v;
            m += seen[v];
            seen[v] = 0;
        }
    }
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

static bool needs_masking(const DiSamplingParams *p, const DiSampleContext *c) {
    return c->n_output < (size_t)p->min_tokens && (c->n_eos_ids > 0 || p->n_stop_token_ids > 0);
}

static bool needs_penalties(const DiSamplingParams *p) {
    return p->repetition_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
}

/* The pipeline up to the draw.  Returns 0 when the token is decided (*token: the forced
 * end-of-thinking or the processed argmax), 1 when the request samples (s->cand[0, *n) are the
 * survivors, weights s->prob, *reordered whether cand left id order), -1 on bad logits. */
static int prepare(DiSampler *s, const DiSamplingParams *p, const DiSampleContext *c, const float *logits,
                   int32_t *token, size_t *n, bool *reordered) {
    const int32_t V = s->vocab;
    if (thinking_budget_spent(p, c)) {
        *token = p->think_end_id;
        return 0;
    }
    const float *x = logits;
    if (p->n_logit_bias > 0 || needs_masking(p, c) || needs_penalties(p)) {
        memcpy(s->work, logits, (size_t)V * sizeof *s->work);
        apply_logit_bias(s, p);
        bool grammar_ends =
            p->constraint_type != DI_CONSTRAINT_NONE && needs_masking(p, c) && only_stops_left(s, p, c, logits);
        if (!grammar_ends) mask_stop_tokens(s, p, c);
        apply_penalties(s, p, c);
        x = s->work;
    }
    /* reject NaN / +inf and find the maximum without a branch per token, then its first id */
    float max = -INFINITY;
    bool bad = false;
    for (int32_t v = 0; v < V; v++) {
        float f = x[v];
        bad |= isnan(f) | (f == INFINITY);
        max = f > max ? f : max;
    }
    if (bad)
        for (int32_t v = 0; v < V; v++)
            if (isnan(x[v]) || x[v] == INFINITY)
                return di_errorf("sampler: logits row has %s at token %d", isnan(x[v]) ? "NaN" : "+inf", v);
    if (max == -INFINITY) return di_errorf("sampler: every token is masked");
    int32_t argmax = 0; /* ties stay with the lower id */
    while (x[argmax] != max) argmax++;
    *token = argmax;
    if (p->temperature < DI_SAMPLER_GREEDY_EPS) return 0;
    size_t m = 0;
    s->be->expf_row(x, (size_t)V, max, 1.0f / p->temperature, s->prob);
    for (int32_t v = 0; v < V; v++) { /* masked tokens (-inf) are no candidates */
        s->cand[m] = v;
        m += x[v] != -INFINITY;
    }
    *reordered = false;
    *n = filter_candidates(s, p, m, reordered);
    return 1;
}

int di_sampler_sample(DiSampler *s, const DiSamplingParams *p, const DiSampleContext *c, const float *logits,
                      int32_t *out_token, DiTokenLogprobs *logprobs) {
    if (!s || !p || !c || !logits || !out_token) return di_errorf("sampler: NULL argument");
    int32_t token;
    size_t n;
    bool reordered;
    int how = prepare(s, p, c, logits, &token, &n, &reordered);
    if (how < 0) return -1;
    if (how == 1) token = draw_token(s, n, reordered, c->seed, c->position);
    *out_token = token;
    if (logprobs && p->logprobs >= 0) fill_logprobs(logits, s->vocab, token, p->logprobs, logprobs);
    return 0;
}

int di_sampler_probs(DiSampler *s, const DiSamplingParams *p, const DiSampleContext *c, const float *logits,
                     float *probs) {
    if (!s || !p || !c || !logits || !probs) return di_errorf("sampler: NULL argument");
    int32_t token;
    size_t n;
    bool reordered;
    int how = prepare(s, p, c, logits, &token, &n, &reordered);
    if (how < 0) return -1;
    memset(probs, 0, (size_t)s->vocab * sizeof *probs);
    if (how == 0) {
        probs[token] = 1.0f;
        return 0;
    }
    double total = 0;
    for (size_t i = 0; i < n; i++) total += s->prob[s->cand[i]];
    for (size_t i = 0; i < n; i++) probs[s->cand[i]] = (float)(s->prob[s->cand[i]] / total);
    return 0;
}

void di_sampler_logprobs(const float *logits, int32_t vocab_size, int32_t token, int n_best,
                         DiTokenLogprobs *out) {
    fill_logprobs(logits, vocab_size, token, n_best, out);
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
