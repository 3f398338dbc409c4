/* bench_engine_synth.h — a synthetic dense model behind the engine's runner interface, for the
 * engine benchmarks until the V4.1 model core lands.  Not a language model: random weights.
 *
 * It costs what a dense transformer costs: per layer a compressed-KV projection whose rows are
 * stored in the engine's state pages (kv_dim floats per token and layer), attention of each token
 * over all earlier rows of its request (read back through the page table), an output projection
 * and a ReLU FFN, then a tied-embedding LM head.  The projections are OpenBLAS sgemm over all the
 * batch's tokens at once (one read of the weights per step), so batching pays as it does for a
 * real model: decode at batch 1 is bound by reading the weights, larger batches by compute.
 *   tiny   = the shape of model-v41.md §9's tiny config (8 layers, hidden 96, vocab 256)
 *   medium = hidden 1024, FFN 2048, 2 layers, vocab 8192 (70 MB of fp32 weights) */
#ifndef BENCH_ENGINE_SYNTH_H
#define BENCH_ENGINE_SYNTH_H

#include "engine/runner.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    int hidden, ffn, layers, vocab, kv_dim;
} SynthConfig;

static const SynthConfig SYNTH_TINY = {"tiny", 96, 256, 8, 256, 32};
static const SynthConfig SYNTH_MEDIUM = {"medium", 1024, 2048, 2, 8192, 128};

#define SYNTH_PAGE_BYTES 16384

typedef struct {
    DiRunner base;
    SynthConfig cfg;
    int32_t eos[1];
    float *embed;              /* [vocab][hidden], also the LM head */
    float **wk, **wo, **w1, **w2;
    float *x, *k, *o, *h, *rows; /* activations, sized for max_tokens */
    int max_tokens;
} SynthRunner;

static float synth_rand(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return ((float)(*s >> 40) / 16777216.0f - 0.5f);
}

static float *synth_matrix(int rows, int cols, float scale, uint64_t *s) {
    float *m = malloc(sizeof *m * (size_t)rows * (size_t)cols);
    for (size_t i = 0; i < (size_t)rows * (size_t)cols; i++) m[i] = synth_rand(s) * scale;
    return m;
}

static size_t synth_tokens_per_page(const SynthConfig *c) {
    return SYNTH_PAGE_BYTES / ((size_t)c->layers * (size_t)c->kv_dim * sizeof(float));
}

static size_t synth_pages_for_tokens(const DiRunner *r, int64_t n) {
    size_t per = synth_tokens_per_page(&((const SynthRunner *)r)->cfg);
    return (size_t)((n + (int64_t)per - 1) / (int64_t)per);
}

/* The kv row of (position, layer) inside the request's pages. */
static float *synth_row(const SynthConfig *c, const DiRunnerSeq *seq, int64_t pos, int layer) {
    size_t per = synth_tokens_per_page(c);
    float *page = (float *)di_runner_page(seq, (size_t)pos / per);
    return page + ((size_t)pos % per * (size_t)c->layers + (size_t)layer) * (size_t)c->kv_dim;
}

static void synth_rmsnorm(float *x, int n) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float inv = (float)(1.0 / sqrt(ss / n + 1e-6));
    for (int i = 0; i < n; i++) x[i] *= inv;
}

static void synth_attend(const SynthConfig *c, const DiRunnerSeq *seq, int64_t pos, int layer, const float *q,
                         float *out) {
    int d = c->kv_dim;
    float scale = 1.0f / sqrtf((float)d), max = -INFINITY;
    float *scores = malloc(sizeof *scores * (size_t)(pos + 1));
    for (int64_t j = 0; j <= pos; j++) {
        const float *kr = synth_row(c, seq, j, layer);
        float s = 0;
        for (int i = 0; i < d; i++) s += q[i] * kr[i];
        scores[j] = s * scale;
        if (scores[j] > max) max = scores[j];
    }
    float sum = 0;
    for (int64_t j = 0; j <= pos; j++) sum += scores[j] = expf(scores[j] - max);
    memset(out, 0, sizeof *out * (size_t)d);
    for (int64_t j = 0; j <= pos; j++) {
        const float *kr = synth_row(c, seq, j, layer);
        float w = scores[j] / sum;
        for (int i = 0; i < d; i++) out[i] += w * kr[i];
    }
    free(scores);
}

static int synth_forward(DiRunner *r, const DiRunnerBatch *b) {
    SynthRunner *m = (SynthRunner *)r;
    const SynthConfig *c = &m->cfg;
    int T = 0;
    for (int s = 0; s < b->n_seqs; s++) T += b->seqs[s].n_tokens;
    if (T > m->max_tokens) return -1;
    const int H = c->hidden, D = c->kv_dim, F = c->ffn;
    for (int s = 0, t = 0; s < b->n_seqs; s++)
        for (int i = 0; i < b->seqs[s].n_tokens; i++, t++)
            memcpy(m->x + (size_t)t * H, m->embed + (size_t)b->seqs[s].tokens[i] * H, sizeof(float) * (size_t)H);
    for (int l = 0; l < c->layers; l++) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, D, H, 1.0f, m->x, H, m->wk[l], D, 0.0f, m->k, D);
        for (int s = 0, t = 0; s < b->n_seqs; s++)
            for (int i = 0; i < b->seqs[s].n_tokens; i++, t++)
                memcpy(synth_row(c, &b->seqs[s], b->seqs[s].start_pos + i, l), m->k + (size_t)t * D,
                       sizeof(float) * (size_t)D);
        for (int s = 0, t = 0; s < b->n_seqs; s++)
            for (int i = 0; i < b->seqs[s].n_tokens; i++, t++)
                synth_attend(c, &b->seqs[s], b->seqs[s].start_pos + i, l, m->k + (size_t)t * D, m->o + (size_t)t * D);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, H, D, 1.0f, m->o, D, m->wo[l], H, 1.0f, m->x, H);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, F, H, 1.0f, m->x, H, m->w1[l], F, 0.0f, m->h, F);
        for (size_t i = 0; i < (size_t)T * F; i++) m->h[i] = m->h[i] > 0 ? m->h[i] : 0;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, H, F, 1.0f, m->h, F, m->w2[l], H, 1.0f, m->x, H);
        for (int t = 0; t < T; t++) synth_rmsnorm(m->x + (size_t)t * H, H);
    }
    int R = 0;
    for (int s = 0, t = 0; s < b->n_seqs; s++) {
        t += b->seqs[s].n_tokens;
        if (b->seqs[s].n_logits > 0)
            memcpy(m->rows + (size_t)R++ * H, m->x + (size_t)(t - 1) * H, sizeof(float) * (size_t)H);
    }
    if (R > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, R, c->vocab, H, 1.0f, m->rows, H, m->embed, H, 0.0f,
                    b->logits, c->vocab);
    return 0;
}

static void synth_destroy(DiRunner *r) {
    SynthRunner *m = (SynthRunner *)r;
    for (int l = 0; l < m->cfg.layers; l++) {
        free(m->wk[l]);
        free(m->wo[l]);
        free(m->w1[l]);
        free(m->w2[l]);
    }
    free(m->wk);
    free(m->wo);
    free(m->w1);
    free(m->w2);
    free(m->embed);
    free(m->x);
    free(m->k);
    free(m->o);
    free(m->h);
    free(m->rows);
    free(m);
}

static char synth_piece_buf[2];
/* Text hooks for the engine: printable ASCII, so detokenising costs like text. */
static const char *synth_token_bytes(const void *ctx, int32_t token, size_t *len) {
    (void)ctx;
    synth_piece_buf[0] = (char)(32 + token % 95);
    *len = 1;
    return synth_piece_buf;
}

static const DiRunnerOps synth_ops = {synth_pages_for_tokens, synth_forward, synth_destroy, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};

/* max_tokens: the most tokens one step may hold (the engine's max_batch_tokens). */
static DiRunner *synth_runner_create(const SynthConfig *cfg, int max_tokens) {
    SynthRunner *m = calloc(1, sizeof *m);
    uint64_t s = 42;
    m->cfg = *cfg;
    m->max_tokens = max_tokens;
    int H = cfg->hidden, F = cfg->ffn, D = cfg->kv_dim, L = cfg->layers;
    m->embed = synth_matrix(cfg->vocab, H, 1.0f, &s);
    m->wk = calloc((size_t)L, sizeof *m->wk);
    m->wo = calloc((size_t)L, sizeof *m->wo);
    m->w1 = calloc((size_t)L, sizeof *m->w1);
    m->w2 = calloc((size_t)L, sizeof *m->w2);
    for (int l = 0; l < L; l++) {
        m->wk[l] = synth_matrix(H, D, 2.0f / sqrtf((float)H), &s);
        m->wo[l] = synth_matrix(D, H, 2.0f / sqrtf((float)D), &s);
        m->w1[l] = synth_matrix(H, F, 2.0f / sqrtf((float)H), &s);
        m->w2[l] = synth_matrix(F, H, 2.0f / sqrtf((float)F), &s);
    }
    m->x = malloc(sizeof(float) * (size_t)max_tokens * H);
    m->k = malloc(sizeof(float) * (size_t)max_tokens * D);
    m->o = malloc(sizeof(float) * (size_t)max_tokens * D);
    m->h = malloc(sizeof(float) * (size_t)max_tokens * F);
    m->rows = malloc(sizeof(float) * (size_t)max_tokens * H);
    m->eos[0] = -1; /* never stops early: every request generates max_tokens */
    m->base.ops = &synth_ops;
    m->base.vocab_size = cfg->vocab;
    m->base.page_bytes = SYNTH_PAGE_BYTES;
    m->base.eos_ids = m->eos;
    m->base.n_eos_ids = 0;
    m->base.name = cfg->name;
    return &m->base;
}

#endif
