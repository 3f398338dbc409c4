/* runner_mock.c — the deterministic mock runner (see runner_mock.h). */
#include "engine/runner_mock.h"

#include "base/error.h"
#include "base/mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define ROWS_PER_PAGE (DI_MOCK_PAGE_BYTES / 8)

typedef struct {
    DiRunner base;
    uint64_t seed;
    int32_t eos[1];
    char words[64]; /* scratch for " w<id>" pieces; main thread only (output processing) */
} MockRunner;

static uint64_t row_hash(uint64_t previous, int32_t token, int64_t pos, uint64_t seed) {
    uint64_t key[3] = {previous, (uint64_t)(uint32_t)token, (uint64_t)pos};
    return XXH3_64bits_withSeed(key, sizeof key, seed);
}

static void fill_logits(int32_t vocab, uint64_t base, float *logits) {
    for (int32_t v = 0; v < vocab; v++) {
        uint64_t x = XXH3_64bits_withSeed(&v, sizeof v, base);
        logits[v] = ((float)(x >> 40) * (1.0f / 16777216.0f) - 0.5f) * 8.0f;
    }
}

static uint64_t logits_base(uint64_t last_row, uint64_t fold, const int32_t *window, int n_window, uint64_t seed) {
    uint64_t key[3] = {last_row, fold, XXH3_64bits(window, (size_t)n_window * sizeof *window)};
    return XXH3_64bits_withSeed(key, sizeof key, seed ^ 0x5bd1e995u);
}

static size_t mock_pages_for_tokens(const DiRunner *r, int64_t n_tokens) {
    (void)r;
    return 1 + (size_t)((n_tokens + ROWS_PER_PAGE - 1) / ROWS_PER_PAGE);
}

static uint64_t *row_at(const DiRunnerSeq *seq, int64_t pos) {
    return (uint64_t *)di_runner_page(seq, 1 + (size_t)(pos / ROWS_PER_PAGE)) + pos % ROWS_PER_PAGE;
}

static int mock_forward(DiRunner *r, const DiRunnerBatch *batch) {
    MockRunner *m = (MockRunner *)r;
    int row = 0;
    for (int i = 0; i < batch->n_seqs; i++) {
        const DiRunnerSeq *seq = &batch->seqs[i];
        int64_t end = seq->start_pos + seq->n_tokens;
        if (seq->n_tokens < 1 || seq->n_pages < mock_pages_for_tokens(r, end))
            return di_errorf("mock runner: sequence %d has %zu pages for %lld tokens", i, seq->n_pages,
                             (long long)end);
        int32_t *ring = (int32_t *)di_runner_page(seq, 0);
        for (int32_t t = 0; t < seq->n_tokens; t++) {
            int64_t pos = seq->start_pos + t;
            uint64_t previous = pos == 0 ? m->seed : *row_at(seq, pos - 1);
            *row_at(seq, pos) = row_hash(previous, seq->tokens[t], pos, m->seed);
            ring[pos % DI_MOCK_WINDOW] = seq->tokens[t];
        }
        if (!seq->want_logits) continue;
        uint64_t fold = 0;
        for (int64_t q = 0; q < end; q++) fold = fold * 1099511628211ULL + *row_at(seq, q);
        int32_t window[DI_MOCK_WINDOW];
        int n_window = 0;
        for (int64_t q = end > DI_MOCK_WINDOW ? end - DI_MOCK_WINDOW : 0; q < end; q++)
            window[n_window++] = ring[q % DI_MOCK_WINDOW];
        uint64_t base = logits_base(*row_at(seq, end - 1), fold, window, n_window, m->seed);
        fill_logits(r->vocab_size, base, batch->logits + (size_t)row++ * (size_t)r->vocab_size);
    }
    return 0;
}

void di_mock_reference_logits(int32_t vocab, uint64_t seed, const int32_t *tokens, int64_t n, float *logits) {
    uint64_t row = seed, fold = 0;
    for (int64_t q = 0; q < n; q++) {
        row = row_hash(row, tokens[q], q, seed);
        fold = fold * 1099511628211ULL + row;
    }
    int64_t first = n > DI_MOCK_WINDOW ? n - DI_MOCK_WINDOW : 0;
    fill_logits(vocab, logits_base(row, fold, tokens + first, (int)(n - first), seed), logits);
}

static void mock_destroy(DiRunner *r) { free(r); }

static int mock_encode(void *ctx, const char *text, size_t len, int32_t **out_ids, size_t *out_n) {
    (void)ctx;
    int32_t *ids = di_calloc(len ? len : 1, sizeof *ids, "token ids");
    if (!ids) return -1;
    for (size_t i = 0; i < len; i++) ids[i] = (uint8_t)text[i];
    *out_ids = ids;
    *out_n = len;
    return 0;
}

static void mock_piece(void *ctx, int32_t token, const char **out, size_t *out_len) {
    MockRunner *m = ctx;
    if (token >= 0 && token < 256) {
        m->words[0] = (char)token;
        *out = m->words;
        *out_len = 1;
    } else if (token == DI_MOCK_EOS) {
        *out = "";
        *out_len = 0;
    } else {
        int n = snprintf(m->words, sizeof m->words, " w%d", token);
        *out = m->words;
        *out_len = n > 0 ? (size_t)n : 0;
    }
}

static const DiRunnerOps mock_ops = {mock_pages_for_tokens, mock_forward, mock_destroy};

DiRunner *di_mock_runner_create(int32_t vocab_size, uint64_t model_seed) {
    if (vocab_size < 257) {
        di_errorf("mock runner: vocab_size must be >= 257 (256 bytes + EOS), got %d", vocab_size);
        return NULL;
    }
    MockRunner *m = di_calloc(1, sizeof *m, "mock runner");
    if (!m) return NULL;
    m->seed = model_seed;
    m->eos[0] = DI_MOCK_EOS;
    m->base.ops = &mock_ops;
    m->base.vocab_size = vocab_size;
    m->base.page_bytes = DI_MOCK_PAGE_BYTES;
    m->base.eos_ids = m->eos;
    m->base.n_eos_ids = 1;
    m->base.codec = (DiTextCodec){mock_encode, mock_piece, m};
    m->base.name = "mock runner";
    return &m->base;
}
