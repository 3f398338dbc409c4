/* runner_mock.c — the deterministic mock runner (see runner_mock.h): its forward over pages,
 * several logits rows per sequence, and, when a drafter is set, draft() and commit(). */
#include "engine/runner_mock.h"

#include "base/error.h"
#include "base/mem.h"
#include "model/page_layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

enum { MOCK_RING, MOCK_ROWS }; /* state components */

typedef struct {
    DiRunner base;
    DiStateLayout layout;
    uint64_t seed;
    int32_t eos[1];
    /* drafter (di_mock_runner_set_drafter) */
    double agree_rate;
    float *draft_scratch;           /* [2][vocab]: target row, draft row */
    /* the window ring of each speculative sequence of the last forward, as it was before */
    int32_t (*saved_rings)[DI_MOCK_WINDOW];
    size_t cap_saved;
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
    return di_state_layout_pages(&((const MockRunner *)r)->layout, n_tokens);
}

static void mock_final_pages(const DiRunner *r, int64_t n_tokens, size_t *first, size_t *end) {
    const DiStateLayout *l = &((const MockRunner *)r)->layout;
    *first = l->fixed_pages;
    *end = di_state_layout_final_pages(l, n_tokens);
}

static uint64_t *row_at(const MockRunner *m, const DiRunnerSeq *seq, int64_t pos) {
    return (uint64_t *)di_state_row(&m->layout, seq->pages, seq->n_pages, MOCK_ROWS, pos);
}

static int32_t *ring_at(const MockRunner *m, const DiRunnerSeq *seq, int64_t pos) {
    return (int32_t *)di_state_row(&m->layout, seq->pages, seq->n_pages, MOCK_RING, pos % DI_MOCK_WINDOW);
}

/* The window of the last (up to 8) tokens ending at position last, in position order. */
static int read_window(const MockRunner *m, const DiRunnerSeq *seq, int64_t last, int32_t *window) {
    int n = 0;
    for (int64_t q = last + 1 > DI_MOCK_WINDOW ? last + 1 - DI_MOCK_WINDOW : 0; q <= last; q++)
        window[n++] = *ring_at(m, seq, q);
    return n;
}

static int check_seq(const DiRunner *r, const DiRunnerSeq *seq, int i) {
    int64_t end = seq->start_pos + seq->n_tokens;
    if (seq->n_tokens < 1 || seq->n_pages < mock_pages_for_tokens(r, end))
        return di_errorf("mock runner: sequence %d has %zu pages for %lld tokens", i, seq->n_pages, (long long)end);
    if (seq->n_logits < 0 || seq->n_logits > seq->n_tokens)
        return di_errorf("mock runner: sequence %d asks for %d logits rows of %d tokens", i, seq->n_logits,
                         seq->n_tokens);
    if (seq->replay_end > 0 && seq->n_logits > 0 && end - DI_MOCK_WINDOW < seq->replay_start)
        return di_errorf("mock runner: sequence %d: its window [%lld, %lld) reaches before the replay start %lld", i,
                         (long long)(end - DI_MOCK_WINDOW), (long long)end, (long long)seq->replay_start);
    return 0;
}

/* Keep the rings of the speculative sequences as they were, for commit(). */
static int save_rings(MockRunner *m, const DiRunnerBatch *batch) {
    if (di_grow(&m->saved_rings, &m->cap_saved, (size_t)batch->n_seqs, 16, sizeof *m->saved_rings, "mock saved rings") != 0)
        return -1;
    for (int i = 0; i < batch->n_seqs; i++) {
        const DiRunnerSeq *seq = &batch->seqs[i];
        if (!seq->speculative) continue;
        for (int k = 0; k < DI_MOCK_WINDOW; k++) m->saved_rings[i][k] = *ring_at(m, seq, k);
    }
    return 0;
}

static int mock_forward(DiRunner *r, const DiRunnerBatch *batch) {
    MockRunner *m = (MockRunner *)r;
    for (int i = 0; i < batch->n_seqs; i++)
        if (check_seq(r, &batch->seqs[i], i) != 0) return -1;
    if (save_rings(m, batch) != 0) return -1;
    int row = 0;
    for (int i = 0; i < batch->n_seqs; i++) {
        const DiRunnerSeq *seq = &batch->seqs[i];
        int64_t end = seq->start_pos + seq->n_tokens;
        uint64_t fold = 0;
        if (seq->n_logits > 0)
            for (int64_t q = 0; q < seq->start_pos; q++) fold = fold * 1099511628211ULL + *row_at(m, seq, q);
        for (int32_t t = 0; t < seq->n_tokens; t++) {
            int64_t pos = seq->start_pos + t;
            *ring_at(m, seq, pos) = seq->tokens[t];
            if (pos >= seq->replay_end) { /* a replayed position's row was restored */
                uint64_t previous = pos == 0 ? m->seed : *row_at(m, seq, pos - 1);
                *row_at(m, seq, pos) = row_hash(previous, seq->tokens[t], pos, m->seed);
            }
            fold = fold * 1099511628211ULL + *row_at(m, seq, pos);
            if (pos < end - seq->n_logits) continue;
            int32_t window[DI_MOCK_WINDOW];
            int n_window = read_window(m, seq, pos, window);
            uint64_t base = logits_base(*row_at(m, seq, pos), fold, window, n_window, m->seed);
            fill_logits(r->vocab_size, base, batch->logits + (size_t)row++ * (size_t)r->vocab_size);
        }
    }
    return 0;
}

/* Cut speculative sequences back: the rows past keep need no undo (a later forward writes a row
 * before anything reads it), the ring does: restore it and replay the kept tokens into it. */
static int mock_commit(DiRunner *r, const DiRunnerBatch *batch, const int32_t *keep) {
    MockRunner *m = (MockRunner *)r;
    if (!batch || !keep) return di_errorf("mock runner: commit without a batch or keep counts");
    for (int i = 0; i < batch->n_seqs; i++) {
        const DiRunnerSeq *seq = &batch->seqs[i];
        if (!seq->speculative) continue;
        if (keep[i] < 1 || keep[i] > seq->n_tokens)
            return di_errorf("mock runner: commit keeps %d of the %d rows of sequence %d", keep[i], seq->n_tokens, i);
        for (int k = 0; k < DI_MOCK_WINDOW; k++) *ring_at(m, seq, k) = m->saved_rings[i][k];
        for (int32_t t = 0; t < keep[i]; t++) *ring_at(m, seq, seq->start_pos + t) = seq->tokens[t];
    }
    return 0;
}

/* ---- the drafter -------------------------------------------------------------------------- */

static int32_t argmax_row(const float *row, int32_t vocab) {
    int32_t best = 0;
    for (int32_t v = 1; v < vocab; v++)
        if (row[v] > row[best]) best = v;
    return best;
}

/* The mock's own context after the committed positions [0, start_pos): last row, fold, window. */
typedef struct {
    uint64_t row, fold;
    int32_t window[DI_MOCK_WINDOW];
    int n_window;
} MockContext;

static void context_push(const MockRunner *m, MockContext *c, int32_t token, int64_t pos) {
    c->row = row_hash(pos == 0 ? m->seed : c->row, token, pos, m->seed);
    c->fold = c->fold * 1099511628211ULL + c->row;
    if (c->n_window == DI_MOCK_WINDOW) memmove(c->window, c->window + 1, (DI_MOCK_WINDOW - 1) * sizeof *c->window);
    else c->n_window++;
    c->window[c->n_window - 1] = token;
}

/* One draft: the mock's greedy continuation with probability agree_rate (keyed by the context
 * and the draft index, so it is reproducible), else another token boosted above it.  The
 * confidence logit says whether the draft is the greedy one: +3 when it is, -3 when not. */
static int draft_one(MockRunner *m, const DiRunnerDraft *d) {
    int32_t vocab = m->base.vocab_size;
    float *target = m->draft_scratch, *z = m->draft_scratch + vocab;
    DiRunnerSeq seq = {.pages = d->pages, .n_pages = d->n_pages};
    MockContext c = {.row = m->seed};
    for (int64_t q = 0; q < d->start_pos; q++) {
        c.row = *row_at(m, &seq, q);
        c.fold = c.fold * 1099511628211ULL + c.row;
    }
    if (d->start_pos > 0) c.n_window = read_window(m, &seq, d->start_pos - 1, c.window);
    int32_t token = d->anchor;
    for (int32_t k = 0; k < m->base.draft_block; k++) {
        context_push(m, &c, token, d->start_pos + k);
        fill_logits(vocab, logits_base(c.row, c.fold, c.window, c.n_window, m->seed), target);
        int32_t greedy = argmax_row(target, vocab);
        uint64_t key[2] = {c.row, (uint64_t)k};
        uint64_t h = XXH3_64bits_withSeed(key, sizeof key, m->seed ^ 0xd4af7ULL);
        bool agree = (double)(h >> 11) * (1.0 / 9007199254740992.0) < m->agree_rate;
        memcpy(z, target, (size_t)vocab * sizeof *z);
        if (!agree) z[(greedy + 1 + (int32_t)(h % (uint64_t)(vocab - 1))) % vocab] = target[greedy] + 1.0f;
        token = d->pick ? d->pick(d->pick_ctx, k, z, vocab) : argmax_row(z, vocab);
        if (token < 0 || token >= vocab) return di_errorf("mock runner: the draft pick returned token %d", token);
        d->tokens[k] = token;
        d->confidence[k] = token == greedy ? 3.0f : -3.0f;
        if (d->logits) memcpy(d->logits + (size_t)k * (size_t)vocab, z, (size_t)vocab * sizeof *z);
    }
    return 0;
}

static int mock_draft(DiRunner *r, const DiRunnerDraft *drafts, int n) {
    MockRunner *m = (MockRunner *)r;
    if (n < 0 || (n > 0 && !drafts)) return di_errorf("mock runner: draft of %d requests without their records", n);
    for (int i = 0; i < n; i++) {
        const DiRunnerDraft *d = &drafts[i];
        if (!d->tokens || !d->confidence || d->start_pos < 1 || d->anchor < 0 || d->anchor >= r->vocab_size ||
            d->n_pages < mock_pages_for_tokens(r, d->start_pos))
            return di_errorf("mock runner: draft %d: bad record (start_pos %lld, anchor %d, %zu pages)", i,
                             (long long)d->start_pos, d->anchor, d->n_pages);
        if (draft_one(m, d) != 0) return -1;
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

/* The block cache's rows: the KV rows of the block's positions (the ring is not cached). */
static size_t mock_block_bytes(const DiRunner *r, int block_tokens) {
    (void)r;
    return block_tokens > 0 && block_tokens % 128 == 0 ? (size_t)block_tokens * sizeof(uint64_t) : 0;
}

/* Copy a block's rows into buf (export) or out of it (import). */
static int mock_block_copy(const DiRunner *r, uint8_t *const *pages, size_t n_pages, int64_t first, int block_tokens,
                           uint8_t *buf, bool export) {
    const MockRunner *m = (const MockRunner *)r;
    if (!pages || !buf || first < 0 || mock_block_bytes(r, block_tokens) == 0 || first % block_tokens != 0 ||
        n_pages < mock_pages_for_tokens(r, first + block_tokens))
        return di_errorf("mock runner: the block at %lld of %d tokens does not fit %zu pages", (long long)first,
                         block_tokens, n_pages);
    DiRunnerSeq seq = {.pages = pages, .n_pages = n_pages};
    for (int t = 0; t < block_tokens; t++) {
        uint8_t *row = (uint8_t *)row_at(m, &seq, first + t), *cell = buf + (size_t)t * sizeof(uint64_t);
        if (export) memcpy(cell, row, sizeof(uint64_t));
        else memcpy(row, cell, sizeof(uint64_t));
    }
    return 0;
}

static int mock_export_block(const DiRunner *r, uint8_t *const *pages, size_t n_pages, int64_t first,
                             int block_tokens, void *out) {
    return mock_block_copy(r, pages, n_pages, first, block_tokens, out, true);
}

static int mock_import_block(const DiRunner *r, uint8_t *const *pages, size_t n_pages, int64_t first,
                             int block_tokens, const void *in) {
    return mock_block_copy(r, pages, n_pages, first, block_tokens, (uint8_t *)(uintptr_t)in, false);
}

static void mock_destroy(DiRunner *r) {
    MockRunner *m = (MockRunner *)r;
    free(m->draft_scratch);
    free(m->saved_rings);
    free(m);
}

static int mock_encode(const void *ctx, const char *text, size_t len, int32_t **out_ids, size_t *out_n) {
    (void)ctx;
    int32_t *ids = di_calloc(len ? len : 1, sizeof *ids, "token ids");
    if (!ids) return -1;
    for (size_t i = 0; i < len; i++) ids[i] = (uint8_t)text[i];
    *out_ids = ids;
    *out_n = len;
    return 0;
}

static const char *mock_token_bytes(const void *ctx, int32_t token, size_t *len) {
    (void)ctx;
    static _Thread_local char piece[32];
    if (token >= 0 && token < 256) {
        piece[0] = (char)token;
        *len = 1;
    } else if (token == DI_MOCK_EOS) {
        *len = 0;
    } else {
        int n = snprintf(piece, sizeof piece, " w%d", token);
        *len = n > 0 ? (size_t)n : 0;
    }
    return piece;
}

static int mock_is_special(const void *ctx, int32_t token) {
    (void)ctx;
    return token == DI_MOCK_EOS;
}

void di_mock_text_hooks(DiTextHooks *out) {
    *out = (DiTextHooks){mock_encode, mock_token_bytes, mock_is_special, NULL, NULL, -1};
}

static const DiRunnerOps mock_ops = {
    .pages_for_tokens = mock_pages_for_tokens,
    .forward = mock_forward,
    .destroy = mock_destroy,
    .commit = mock_commit,
    .block_bytes = mock_block_bytes,
    .export_block = mock_export_block,
    .import_block = mock_import_block,
    .final_pages = mock_final_pages,
};
static const DiRunnerOps mock_drafting_ops = {
    .pages_for_tokens = mock_pages_for_tokens,
    .forward = mock_forward,
    .destroy = mock_destroy,
    .draft = mock_draft,
    .commit = mock_commit,
    .block_bytes = mock_block_bytes,
    .export_block = mock_export_block,
    .import_block = mock_import_block,
    .final_pages = mock_final_pages,
};

int di_mock_runner_set_drafter(DiRunner *r, int32_t draft_block, double agree_rate) {
    if (!r || (r->ops != &mock_ops && r->ops != &mock_drafting_ops))
        return di_errorf("mock drafter: the runner is not a mock runner");
    if (draft_block < 1 || draft_block > 16)
        return di_errorf("mock drafter: draft_block must be in [1, 16], got %d", draft_block);
    if (!(agree_rate >= 0.0 && agree_rate <= 1.0))
        return di_errorf("mock drafter: agree_rate must be in [0, 1], got %g", agree_rate);
    MockRunner *m = (MockRunner *)r;
    if (!m->draft_scratch && !(m->draft_scratch = di_calloc(2 * (size_t)r->vocab_size, sizeof(float), "mock draft rows")))
        return -1;
    m->agree_rate = agree_rate;
    r->draft_block = draft_block;
    r->ops = &mock_drafting_ops;
    return 0;
}

DiRunner *di_mock_runner_create(int32_t vocab_size, uint64_t model_seed) {
    if (vocab_size < 257) {
        di_errorf("mock runner: vocab_size must be >= 257 (256 bytes + EOS), got %d", vocab_size);
        return NULL;
    }
    MockRunner *m = di_calloc(1, sizeof *m, "mock runner");
    if (!m) return NULL;
    /* page 0: the window ring (8 token ids); then 32 rows of 8 bytes per 256-byte page */
    const DiStateComponent state[2] = {{"window ring", sizeof(int32_t), DI_MOCK_WINDOW, 0},
                                       {"kv rows", sizeof(uint64_t), 0, 1}};
    if (di_state_layout_init(&m->layout, DI_MOCK_PAGE_BYTES, state, 2) != 0) {
        free(m);
        return NULL;
    }
    m->seed = model_seed;
    m->eos[0] = DI_MOCK_EOS;
    m->base.ops = &mock_ops;
    m->base.vocab_size = vocab_size;
    m->base.page_bytes = DI_MOCK_PAGE_BYTES;
    m->base.eos_ids = m->eos;
    m->base.n_eos_ids = 1;
    m->base.name = "mock runner";
    m->base.replay_window = DI_MOCK_WINDOW;
    m->base.replay_exact_rows = DI_MOCK_WINDOW; /* one window of tokens is the whole fixed state */
    m->base.identity = &m->seed;
    m->base.identity_len = sizeof m->seed;
    return &m->base;
}
