/* test_dspark_runner.c — DSpark speculation in the V4.1 runner (engine-features.md §1.7), on a
 * make-tiny checkpoint with random weights (drafts nearly always rejected) and on a planted one
 * (make-tiny --planted: drafts agree with the target, so they are accepted):
 *   - several logits rows per sequence, each bit-identical to the row plain decoding gives;
 *   - rollback: after a speculative forward cut back by commit(keep), every state row a later
 *     forward or draft reads, and the next logits, equal plain decoding's over the committed tokens;
 *   - draft() leaves the request state untouched, honours the pick callback, and drafts several
 *     requests in one call exactly as one by one;
 *   - greedy draft -> verify -> commit loops give plain greedy decoding's tokens and logits, for
 *     every fixed draft length 0..5;
 *   - planted: the target follows the planted map and greedy drafts are its continuation;
 *   - weights plumbing (§1.7 item 7): main_proj reads 3 taps of hidden width, each tap the
 *     stream mean of the input of its layer.
 * The reference is a direct model_forward loop, one token at a time, on an owned RunState. */
#include "test.h"

#include "base/error.h"
#include "base/file.h"
#include "base/log.h"
#include "engine/runner_v41.h"
#include "model/attention.h"
#include "model/dspark.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/state.h"
#include "model/tiny.h"
#include "model/tiny_planted.h"

#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

#define PAGE 4096 /* small pages: states cross page boundaries */
#define MAX_TOK 64
#define PROMPT 9 /* longer than the window (8), odd: every ring slot and pending row in play */
#define GEN 24

static Model *model;
static DiRunner *runner;
static int64_t V;

/* ------------------------------------------------------------------ helpers */

typedef struct {
    uint8_t *pages[256];
    size_t n;
    uint8_t fill; /* fresh pages hold garbage: the runner must write before it reads */
} Pages;

static int pages_cover(Pages *p, int64_t n_tokens) {
    size_t need = runner->ops->pages_for_tokens(runner, n_tokens);
    if (need > 256) return -1;
    while (p->n < need) {
        uint8_t *pg = aligned_alloc(64, runner->page_bytes);
        if (!pg) return -1;
        memset(pg, p->fill, runner->page_bytes);
        p->pages[p->n++] = pg;
    }
    return 0;
}

static void pages_free(Pages *p) {
    for (size_t i = 0; i < p->n; i++) free(p->pages[i]);
    p->n = 0;
}

static DiRunnerSeq seq_of(Pages *p, const int32_t *toks, int n, int64_t start, int n_logits, bool spec) {
    return (DiRunnerSeq){p->pages, p->n, toks, n, start, n_logits, spec, 0, 0};
}

/* One sequence through the runner (pages grown to cover it). */
static int run1(Pages *p, const int32_t *toks, int n, int64_t start, int n_logits, bool spec, float *logits) {
    if (pages_cover(p, start + n) != 0) return -1;
    DiRunnerSeq s = seq_of(p, toks, n, start, n_logits, spec);
    DiRunnerBatch b = {&s, 1, true, logits};
    return runner->ops->forward(runner, &b);
}

static int commit1(Pages *p, const int32_t *toks, int n, int64_t start, int32_t keep) {
    DiRunnerSeq s = seq_of(p, toks, n, start, 0, true);
    DiRunnerBatch b = {&s, 1, true, NULL};
    return runner->ops->commit(runner, &b, &keep);
}

static int32_t argmax(const float *x) {
    int32_t best = 0;
    for (int64_t v = 1; v < V; v++)
        if (x[v] > x[best]) best = (int32_t)v;
    return best;
}

/* Plain greedy decoding straight through model_forward, one token at a time after the prompt:
 * seq[PROMPT + k] is the k-th generated token, rows[k] the logits row it came from. */
static int reference(const int32_t *prompt, int32_t *seq, float *rows) {
    RunState *st = state_create(&model->d);
    if (!st) return -1;
    memcpy(seq, prompt, sizeof(int32_t) * PROMPT);
    int rc = model_forward(model, st, seq, PROMPT, 0, rows, false, NULL);
    for (int k = 0; rc == 0 && k < GEN; k++) {
        seq[PROMPT + k] = argmax(rows + (size_t)k * (size_t)V);
        if (k + 1 < GEN) rc = model_forward(model, st, &seq[PROMPT + k], 1, PROMPT + k, rows + (size_t)(k + 1) * (size_t)V, false, NULL);
    }
    state_free(st);
    return rc;
}

static void random_prompt(int32_t *prompt) {
    for (int i = 0; i < PROMPT; i++) prompt[i] = (int32_t)(test_rand32() % (uint32_t)V);
}

/* ------------------------------------------------------------------ state comparison */

/* Every row a later forward or draft reads from a state of n positions: the last W-1 window
 * rows of each layer, the last W rows of each DSpark ring, the open group's pending rows, the
 * Engram history, every emitted compressed-KV and index-key entry. */
static int state_rows_differ(Pages *a, Pages *b, int64_t n) {
    const ModelDims *d = &model->d;
    RunState *sa = state_create_paged(d), *sb = state_create_paged(d);
    StateLayout l;
    int diff = -1;
    if (!sa || !sb || state_layout(d, runner->page_bytes, &l) != 0 || state_attach_pages(sa, &l, a->pages, a->n, n) != 0 ||
        state_attach_pages(sb, &l, b->pages, b->n, n) != 0)
        goto done;
    diff = 0;
    size_t row = (size_t)d->head_dim * sizeof(float);
    for (int64_t p = n - d->window + 1 < 0 ? 0 : n - d->window + 1; p < n; p++)
        for (int L = 0; L < d->n_layers; L++) diff += memcmp(state_window_row(sa, L, p), state_window_row(sb, L, p), row) != 0;
    for (int64_t p = n - d->window < 0 ? 0 : n - d->window; p < n; p++)
        for (int s = 0; s < d->n_mtp; s++) diff += memcmp(state_dspark_row(sa, s, p), state_dspark_row(sb, s, p), row) != 0;
    for (int k = 0; k < sa->n_kv; k++) {
        for (int r = 0; r < sa->kv[k].n_pending; r++)
            for (int which = 0; which < 2; which++) diff += memcmp(state_pending_row(sa, k, which, r), state_pending_row(sb, k, which, r), row) != 0;
        for (int64_t g = 0; g < sa->kv[k].n_rows; g++) {
            diff += memcmp(state_comp_row(sa, k, g), state_comp_row(sb, k, g), row) != 0;
            diff += memcmp(state_ikey_row(sa, k, g), state_ikey_row(sb, k, g), (size_t)d->idx_head_dim * sizeof(float)) != 0;
        }
    }
    /* history entry k is position n-1-k: the ones before position 0 are never read */
    int64_t hist = sa->ngram_hist < n ? sa->ngram_hist : n;
    diff += memcmp(state_engram_history(sa), state_engram_history(sb), sizeof(int32_t) * (size_t)hist) != 0;
done:
    state_free(sa);
    state_free(sb);
    return diff;
}

/* ------------------------------------------------------------------ tests */

/* A prefill chunk asking for its last k rows, beside a decode sequence in the same batch: each
 * row equals the row plain decoding gives at that position, bit for bit. */
static void check_logit_rows(void) {
    int32_t prompt[PROMPT], seq[PROMPT + GEN];
    float *ref = malloc(sizeof(float) * GEN * (size_t)V), *out = malloc(sizeof(float) * (PROMPT + 8) * (size_t)V);
    float *each = malloc(sizeof(float) * (size_t)V);
    random_prompt(prompt);
    CHECK_MSG(reference(prompt, seq, ref) == 0, "%s", di_error_message());
    /* plain decoding's rows for positions 0..PROMPT+3, one token at a time */
    int total = PROMPT + 4;
    float *plain = malloc(sizeof(float) * (size_t)total * (size_t)V);
    Pages pp = {.fill = 0x5a};
    for (int i = 0; i < total; i++) CHECK(run1(&pp, &seq[i], 1, i, 1, false, plain + (size_t)i * (size_t)V) == 0);
    CHECK(memcmp(plain + (size_t)(PROMPT - 1) * (size_t)V, ref, sizeof(float) * (size_t)V) == 0);
    for (int k = 1; k <= total; k += 3) {
        Pages pa = {.fill = 0xa5}, pb = {.fill = 0x33};
        CHECK(pages_cover(&pa, total) == 0 && pages_cover(&pb, 3) == 0);
        CHECK(run1(&pb, seq, 2, 0, 1, false, each) == 0);
        DiRunnerSeq s[2] = {seq_of(&pb, &seq[2], 1, 2, 1, false), seq_of(&pa, seq, total, 0, k, false)};
        DiRunnerBatch b = {s, 2, true, out};
        CHECK_MSG(runner->ops->forward(runner, &b) == 0, "%s", di_error_message());
        CHECK(memcmp(out, plain + 2 * (size_t)V, sizeof(float) * (size_t)V) == 0);
        int bad = 0;
        for (int i = 0; i < k; i++) bad += memcmp(out + (size_t)(1 + i) * (size_t)V, plain + (size_t)(total - k + i) * (size_t)V, sizeof(float) * (size_t)V) != 0;
        CHECK_MSG(bad == 0, "%d of %d rows differ from plain decoding", bad, k);
        pages_free(&pa);
        pages_free(&pb);
    }
    /* n_logits beyond the chunk is refused */
    CHECK(run1(&pp, &seq[total], 1, total, 2, false, out) != 0);
    pages_free(&pp);
    free(plain);
    free(each);
    free(out);
    free(ref);
}

TEST(logit_rows_equal_plain_decoding) { check_logit_rows(); }

/* Random prefixes, verify chunks of 1..6 rows of which a random number is kept (the rejected
 * ones are random tokens): the state equals plain decoding's over the committed tokens, and so
 * does the next token's logits row. */
TEST(rollback_equals_plain_decoding) {
    float *la = malloc(sizeof(float) * 8 * (size_t)V), *lb = malloc(sizeof(float) * 8 * (size_t)V);
    int cases = 0, bad_state = 0, bad_logits = 0;
    for (int trial = 0; trial < 24; trial++) {
        int64_t start = 1 + test_rand32() % 20;
        int n = 1 + (int)(test_rand32() % 6), keep = 1 + (int)(test_rand32() % (uint32_t)n);
        int32_t toks[MAX_TOK];
        for (int i = 0; i < MAX_TOK; i++) toks[i] = (int32_t)(test_rand32() % (uint32_t)V);
        Pages plain = {.fill = 0x11}, spec = {.fill = 0x77};
        /* both prefill the prefix in random chunks, then: plain forwards the kept tokens, spec
         * the whole chunk speculatively and commits keep; rejected tokens differ from toks */
        int32_t chunk[8];
        memcpy(chunk, &toks[start], sizeof(int32_t) * (size_t)n);
        for (int i = keep; i < n; i++) chunk[i] = (int32_t)(test_rand32() % (uint32_t)V);
        int rc = run1(&plain, toks, (int)start, 0, 0, false, NULL);
        rc |= run1(&plain, &toks[start], keep, start, 0, false, NULL);
        rc |= run1(&spec, toks, (int)start, 0, 0, false, NULL);
        rc |= run1(&spec, chunk, n, start, n, true, lb);
        rc |= commit1(&spec, chunk, n, start, keep);
        CHECK_MSG(rc == 0, "%s", di_error_message());
        if (rc != 0) break;
        cases++;
        bad_state += state_rows_differ(&plain, &spec, start + keep) != 0;
        /* the verify rows of the kept tokens are plain decoding's rows */
        int64_t next = start + keep;
        rc = run1(&plain, &toks[next], 1, next, 1, false, la) | run1(&spec, &toks[next], 1, next, 1, false, lb);
        CHECK(rc == 0);
        bad_logits += memcmp(la, lb, sizeof(float) * (size_t)V) != 0;
        bad_state += state_rows_differ(&plain, &spec, next + 1) != 0;
        pages_free(&plain);
        pages_free(&spec);
    }
    CHECK_EQ_INT(cases, 24);
    CHECK_EQ_INT(bad_state, 0);
    CHECK_EQ_INT(bad_logits, 0);
    free(la);
    free(lb);
}

/* One forward carrying a plain decode and two speculative verifies (one cut back, one kept
 * whole), committed together: each request ends as plain decoding over its committed tokens. */
TEST(rollback_in_a_mixed_batch) {
    enum { NS = 3 };
    static const int n_tok[NS] = {1, 5, 4}, keep[NS] = {1, 2, 4}, start[NS] = {6, 11, 3};
    static const bool spec[NS] = {false, true, true};
    int32_t toks[NS][32], chunk[NS][8];
    Pages plain[NS], mixed[NS];
    DiRunnerSeq seqs[NS];
    float *lg = malloc(sizeof(float) * 16 * (size_t)V), *la = malloc(sizeof(float) * (size_t)V), *lb = malloc(sizeof(float) * (size_t)V);
    int rc = 0;
    for (int i = 0; i < NS; i++) {
        plain[i] = (Pages){.fill = 0x21};
        mixed[i] = (Pages){.fill = 0x6b};
        for (int k = 0; k < 32; k++) toks[i][k] = (int32_t)(test_rand32() % (uint32_t)V);
        for (int k = 0; k < n_tok[i]; k++) chunk[i][k] = k < keep[i] ? toks[i][start[i] + k] : (int32_t)(test_rand32() % (uint32_t)V);
        rc |= run1(&plain[i], toks[i], start[i] + keep[i], 0, 0, false, NULL);
        rc |= run1(&mixed[i], toks[i], start[i], 0, 0, false, NULL);
        rc |= pages_cover(&mixed[i], start[i] + n_tok[i]);
        seqs[i] = seq_of(&mixed[i], chunk[i], n_tok[i], start[i], n_tok[i], spec[i]);
    }
    DiRunnerBatch b = {seqs, NS, true, lg};
    int32_t keep32[NS] = {keep[0], keep[1], keep[2]};
    CHECK_MSG(rc == 0 && runner->ops->forward(runner, &b) == 0 && runner->ops->commit(runner, &b, keep32) == 0, "%s", di_error_message());
    for (int i = 0; i < NS; i++) {
        int64_t n = start[i] + keep[i];
        CHECK_EQ_INT(state_rows_differ(&plain[i], &mixed[i], n), 0);
        CHECK(run1(&plain[i], &toks[i][n], 1, n, 1, false, la) == 0 && run1(&mixed[i], &toks[i][n], 1, n, 1, false, lb) == 0);
        CHECK(memcmp(la, lb, sizeof(float) * (size_t)V) == 0);
        pages_free(&plain[i]);
        pages_free(&mixed[i]);
    }
    free(lg);
    free(la);
    free(lb);
}

/* Misuse is refused with an error: forward or draft before commit, keep out of range, a
 * speculative chunk longer than the window. */
TEST(commit_contract_is_enforced) {
    int32_t toks[16] = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    Pages p = {.fill = 0};
    CHECK(run1(&p, toks, 4, 0, 0, false, NULL) == 0);
    CHECK(run1(&p, &toks[4], 3, 4, 0, true, NULL) == 0);
    CHECK(run1(&p, &toks[4], 1, 4, 0, false, NULL) != 0);
    float conf[DSPARK_MAX_BLOCK];
    int32_t dt[DSPARK_MAX_BLOCK];
    DiRunnerDraft dr = {p.pages, p.n, 4, 3, dt, conf, NULL, NULL, NULL};
    CHECK(runner->ops->draft(runner, &dr, 1) != 0);
    CHECK(commit1(&p, &toks[4], 3, 4, 4) != 0); /* keep > n_tokens: refused, and the batch is dropped */
    CHECK(run1(&p, toks, 4, 0, 0, false, NULL) == 0);
    CHECK(commit1(&p, toks, 4, 0, 1) != 0); /* nothing speculative to commit */
    CHECK(run1(&p, &toks[4], model->d.window + 1, 4, 0, true, NULL) != 0);
    pages_free(&p);
}

/* ------------------------------------------------------------------ drafting */

typedef struct {
    int next_row, out_of_order, fail_at;
} PickLog;

/* The argmax pick, logging the rows it is called for (fail_at: return -1 there). */
static int32_t pick_argmax(void *ctx, int row, const float *logits, int32_t vocab) {
    PickLog *lg = ctx;
    lg->out_of_order += row != lg->next_row++ || vocab != V;
    return row == lg->fail_at ? -1 : argmax(logits);
}

static size_t page_bytes_total(const Pages *p) { return p->n * runner->page_bytes; }

static int pages_equal(const Pages *p, const uint8_t *copy) {
    for (size_t i = 0; i < p->n; i++)
        if (memcmp(p->pages[i], copy + i * runner->page_bytes, runner->page_bytes) != 0) return 0;
    return 1;
}

/* draft() leaves the pages as they were; a pick callback sees rows 0..B-1 in order, and the
 * argmax pick gives the NULL pick's drafts; the logits out-rows are what each draft was picked
 * from; a failing pick fails the draft. */
TEST(draft_reads_state_only_and_honours_pick) {
    int B = runner->draft_block;
    CHECK_EQ_INT(B, model->d.dspark_block);
    CHECK(B >= 1 && B <= DSPARK_MAX_BLOCK);
    int32_t prompt[PROMPT], t1[DSPARK_MAX_BLOCK], t2[DSPARK_MAX_BLOCK];
    float c1[DSPARK_MAX_BLOCK], c2[DSPARK_MAX_BLOCK];
    float *zl = malloc(sizeof(float) * (size_t)B * (size_t)V), *row = malloc(sizeof(float) * (size_t)V);
    random_prompt(prompt);
    Pages p = {.fill = 0x42};
    CHECK(run1(&p, prompt, PROMPT, 0, 1, false, row) == 0);
    uint8_t *copy = malloc(page_bytes_total(&p));
    for (size_t i = 0; i < p.n; i++) memcpy(copy + i * runner->page_bytes, p.pages[i], runner->page_bytes);
    int32_t anchor = argmax(row);
    DiRunnerDraft d1 = {p.pages, p.n, PROMPT, anchor, t1, c1, NULL, NULL, NULL};
    CHECK_MSG(runner->ops->draft(runner, &d1, 1) == 0, "%s", di_error_message());
    CHECK(pages_equal(&p, copy));
    PickLog lg = {0, 0, -1};
    DiRunnerDraft d2 = {p.pages, p.n, PROMPT, anchor, t2, c2, zl, pick_argmax, &lg};
    CHECK_MSG(runner->ops->draft(runner, &d2, 1) == 0, "%s", di_error_message());
    CHECK(pages_equal(&p, copy));
    CHECK_EQ_INT(lg.next_row, B);
    CHECK_EQ_INT(lg.out_of_order, 0);
    for (int k = 0; k < B; k++) {
        CHECK_EQ_INT(t1[k], t2[k]);
        CHECK(memcmp(&c1[k], &c2[k], sizeof(float)) == 0 && isfinite(c1[k]));
        CHECK_EQ_INT(argmax(zl + (size_t)k * (size_t)V), t2[k]);
    }
    /* two requests in one call: each as if alone */
    DiRunnerDraft two[2] = {d1, d1};
    int32_t t3[DSPARK_MAX_BLOCK];
    float c3[DSPARK_MAX_BLOCK];
    two[1].tokens = t3;
    two[1].confidence = c3;
    CHECK(runner->ops->draft(runner, two, 2) == 0);
    CHECK(memcmp(t3, t1, sizeof(int32_t) * (size_t)B) == 0 && memcmp(c3, c1, sizeof(float) * (size_t)B) == 0);
    lg = (PickLog){0, 0, 2};
    CHECK(runner->ops->draft(runner, &d2, 1) != 0);
    CHECK_EQ_INT(lg.next_row, 3);
    free(copy);
    pages_free(&p);
    free(zl);
    free(row);
}

/* Requests of different lengths (one shorter than the window) drafted in one call, some with a
 * pick and some without: each request's drafts, confidences and draft logits are bit-identical to
 * drafting it alone. */
TEST(batched_drafts_equal_single_drafts) {
    enum { NR = 4 };
    static const int len[NR] = {3, 17, 9, 12};
    int B = runner->draft_block;
    Pages p[NR];
    DiRunnerDraft dr[NR];
    int32_t tok_b[NR][DSPARK_MAX_BLOCK], tok_1[NR][DSPARK_MAX_BLOCK], toks[32];
    float conf_b[NR][DSPARK_MAX_BLOCK], conf_1[NR][DSPARK_MAX_BLOCK];
    float *lg_b = malloc(sizeof(float) * NR * (size_t)B * (size_t)V), *lg_1 = malloc(sizeof(float) * NR * (size_t)B * (size_t)V);
    PickLog logs[NR];
    for (int i = 0; i < NR; i++) {
        p[i] = (Pages){.fill = (uint8_t)(0x10 + i)};
        for (int k = 0; k < 32; k++) toks[k] = (int32_t)(test_rand32() % (uint32_t)V);
        CHECK(run1(&p[i], toks, len[i], 0, 0, false, NULL) == 0);
        logs[i] = (PickLog){0, 0, -1};
        dr[i] = (DiRunnerDraft){p[i].pages, p[i].n, len[i], toks[len[i]], tok_b[i], conf_b[i], lg_b + (size_t)i * (size_t)B * (size_t)V,
                                i % 2 ? pick_argmax : NULL, &logs[i]};
    }
    CHECK_MSG(runner->ops->draft(runner, dr, NR) == 0, "%s", di_error_message());
    int differ = 0;
    for (int i = 0; i < NR; i++) {
        DiRunnerDraft one = dr[i];
        logs[i] = (PickLog){0, 0, -1};
        one.tokens = tok_1[i];
        one.confidence = conf_1[i];
        one.logits = lg_1 + (size_t)i * (size_t)B * (size_t)V;
        CHECK(runner->ops->draft(runner, &one, 1) == 0);
        differ += memcmp(tok_1[i], tok_b[i], sizeof(int32_t) * (size_t)B) != 0 || memcmp(conf_1[i], conf_b[i], sizeof(float) * (size_t)B) != 0;
        CHECK_EQ_INT(logs[i].next_row, i % 2 ? B : 0);
        pages_free(&p[i]);
    }
    differ += memcmp(lg_1, lg_b, sizeof(float) * NR * (size_t)B * (size_t)V) != 0;
    CHECK_EQ_INT(differ, 0);
    free(lg_b);
    free(lg_1);
}

typedef struct {
    int proposed, accepted, bad_tokens, bad_rows, steps, errors;
} LoopStats;

/* Greedy speculative decoding with drafts of fixed length ell: draft, verify anchor + ell drafts
 * in one speculative forward, accept the argmax matches, commit anchor + accepted, next anchor. */
static void greedy_loop(int ell, LoopStats *ls) {
    int32_t prompt[PROMPT], seq[PROMPT + GEN], out[GEN + DSPARK_MAX_BLOCK + 1];
    float *ref = malloc(sizeof(float) * GEN * (size_t)V), *rows = malloc(sizeof(float) * (DSPARK_MAX_BLOCK + 1) * (size_t)V);
    random_prompt(prompt);
    Pages p = {.fill = 0x9c};
    if (reference(prompt, seq, ref) != 0 || run1(&p, prompt, PROMPT, 0, 1, false, rows) != 0) {
        ls->errors++;
        goto done;
    }
    ls->bad_rows += memcmp(rows, ref, sizeof(float) * (size_t)V) != 0;
    out[0] = argmax(rows);
    int produced = 1;
    int64_t committed = PROMPT;
    while (produced < GEN) {
        int32_t dt[DSPARK_MAX_BLOCK], chunk[DSPARK_MAX_BLOCK + 1];
        float conf[DSPARK_MAX_BLOCK];
        int32_t anchor = out[produced - 1];
        DiRunnerDraft dr = {p.pages, p.n, committed, anchor, dt, conf, NULL, NULL, NULL};
        chunk[0] = anchor;
        if (runner->ops->draft(runner, &dr, 1) != 0) {
            ls->errors++;
            break;
        }
        memcpy(chunk + 1, dt, sizeof(int32_t) * (size_t)ell);
        if (run1(&p, chunk, ell + 1, committed, ell + 1, true, rows) != 0) {
            ls->errors++;
            break;
        }
        int j = 0;
        while (j < ell && argmax(rows + (size_t)j * (size_t)V) == dt[j]) j++;
        for (int i = 0; i <= j && produced + i < GEN; i++)
            ls->bad_rows += memcmp(rows + (size_t)i * (size_t)V, ref + (size_t)(produced + i) * (size_t)V, sizeof(float) * (size_t)V) != 0;
        memcpy(out + produced, dt, sizeof(int32_t) * (size_t)j);
        out[produced + j] = argmax(rows + (size_t)j * (size_t)V);
        if (commit1(&p, chunk, ell + 1, committed, j + 1) != 0) {
            ls->errors++;
            break;
        }
        produced += j + 1;
        committed += j + 1;
        ls->proposed += ell;
        ls->accepted += j;
        ls->steps++;
    }
    for (int k = 0; k < GEN; k++) ls->bad_tokens += out[k] != seq[PROMPT + k];
done:
    pages_free(&p);
    free(ref);
    free(rows);
}

/* Every fixed draft length 0..5, a few prompts each: the same tokens and logits rows as plain
 * greedy decoding. */
static void check_lossless(const char *what, bool expect_accepted) {
    for (int ell = 0; ell <= 5; ell++) {
        LoopStats ls = {0};
        for (int r = 0; r < 3; r++) greedy_loop(ell, &ls);
        CHECK_MSG(ls.errors == 0, "%s: %s", what, di_error_message());
        CHECK_MSG(ls.bad_tokens == 0 && ls.bad_rows == 0, "%s, length %d: %d tokens and %d rows differ", what, ell, ls.bad_tokens, ls.bad_rows);
        if (expect_accepted) CHECK_MSG(ls.accepted == ls.proposed, "%s, length %d: %d of %d drafts accepted", what, ell, ls.accepted, ls.proposed);
        if (ell == 5) printf("  %s: length 5 accepted %d of %d drafts in %d steps\n", what, ls.accepted, ls.proposed, ls.steps);
    }
}

TEST(greedy_speculation_is_lossless) { check_lossless("random tiny", false); }

/* §1.7 item 7: main_proj maps 3 taps of hidden width; the DSpark ring rows are
 * RMSNorm(main_proj · taps) through each stage's window KV, the taps being the stream means of the
 * inputs of the tap layers (here: the outputs of the layers before them, none of them Engram). */
TEST(taps_are_stream_means_of_tap_layer_inputs) {
    const ModelDims *d = &model->d;
    int hc = d->hc_mult;
    int64_t D = d->dim, W = d->window, n = PROMPT;
    CHECK_EQ_INT(d->n_taps, 3);
    CHECK_EQ_INT(model->w.main_proj.cols, 3 * D);
    CHECK_EQ_INT(model->w.main_proj.rows, D);
    int32_t prompt[PROMPT];
    random_prompt(prompt);
    RunState *st = state_create(d);
    float *lo = malloc(sizeof(float) * (size_t)(d->n_layers * n * hc * D)), *taps = calloc((size_t)(n * 3 * D), sizeof(float));
    float *mx = malloc(sizeof(float) * (size_t)(n * D)), *kv = malloc(sizeof(float) * (size_t)(n * d->head_dim));
    ForwardTrace tr = {.layer_out = lo};
    CHECK_MSG(model_forward(model, st, prompt, n, 0, NULL, false, &tr) == 0, "%s", di_error_message());
    for (int t = 0; t < 3; t++) {
        int L = d->taps[t];
        CHECK(L >= 1 && model_dims_engram_slot(d, L) < 0);
        for (int64_t i = 0; i < n; i++)
            for (int64_t c = 0; c < D; c++) {
                float acc = 0;
                for (int k = 0; k < hc; k++) acc += lo[(((int64_t)(L - 1) * n + i) * hc + k) * D + c];
                taps[(i * 3 + t) * D + c] = acc / (float)hc;
            }
    }
    int64_t pos[PROMPT];
    for (int64_t i = 0; i < n; i++) pos[i] = i;
    CHECK(model_linear(model, &model->w.main_proj, taps, n, mx, model_act_quant(model)) == 0);
    for (int64_t i = 0; i < n; i++) model->be->rmsnorm(mx + i * D, mx + i * D, model->w.main_norm, D, d->eps);
    int bad = 0;
    for (int s = 0; s < d->n_mtp; s++) {
        CHECK(attn_window_kv(model, &model->w.layers[d->n_layers + s], &model->rope_main, mx, n, pos, kv) == 0);
        for (int64_t i = n - W; i < n; i++) bad += memcmp(state_dspark_row(st, s, i), kv + i * d->head_dim, sizeof(float) * (size_t)d->head_dim) != 0;
    }
    CHECK_EQ_INT(bad, 0);
    state_free(st);
    free(lo);
    free(taps);
    free(mx);
    free(kv);
}

/* ------------------------------------------------------------------ planted checkpoint */

/* make-tiny --planted: the target's greedy next token is the planted map; the greedy drafts
 * from any state are the target's greedy continuation of the anchor, with positive confidence. */
TEST(planted_drafts_match_the_target) {
    int32_t prompt[PROMPT], seq[PROMPT + GEN];
    float *ref = malloc(sizeof(float) * GEN * (size_t)V), *row = malloc(sizeof(float) * (size_t)V);
    random_prompt(prompt);
    CHECK_MSG(reference(prompt, seq, ref) == 0, "%s", di_error_message());
    int off_map = 0, bad_drafts = 0, nonpositive = 0;
    for (int k = 0; k < GEN; k++) off_map += seq[PROMPT + k] != di_tiny_planted_next(seq[PROMPT + k - 1], V);
    CHECK_EQ_INT(off_map, 0);
    Pages p = {.fill = 0x3c};
    int B = runner->draft_block;
    for (int k = 0; k + B < GEN; k += 3) {
        int64_t committed = PROMPT + k; /* state over seq[0 .. committed), anchor seq[committed] */
        pages_free(&p);
        CHECK(run1(&p, seq, (int)committed, 0, 1, false, row) == 0);
        int32_t dt[DSPARK_MAX_BLOCK];
        float conf[DSPARK_MAX_BLOCK];
        DiRunnerDraft dr = {p.pages, p.n, committed, seq[committed], dt, conf, NULL, NULL, NULL};
        CHECK_MSG(runner->ops->draft(runner, &dr, 1) == 0, "%s", di_error_message());
        for (int j = 0; j < B; j++) {
            bad_drafts += dt[j] != seq[committed + 1 + j];
            nonpositive += !(conf[j] > 0);
        }
    }
    CHECK_EQ_INT(bad_drafts, 0);
    CHECK_EQ_INT(nonpositive, 0);
    pages_free(&p);
    free(ref);
    free(row);
}

TEST(planted_speculation_is_lossless_and_accepted) { check_lossless("planted tiny", true); }

/* ------------------------------------------------------------------ setup */

static int load(const char *dir) {
    model = model_load(dir, MODE_REF);
    if (!model) return -1;
    int64_t n_map;
    const int32_t *cid;
    V = model->d.vocab;
    if (di_tiny_engram_token_map(&cid, &n_map) != 0 || model_set_engram_token_map(model, cid, n_map) != 0 ||
        model_set_engram_multipliers(model, model->cfg.engram_multipliers, (int64_t)model->cfg.n_engram_layers, model->cfg.engram_max_ngram_size) != 0)
        return -1;
    runner = di_v41_runner_create(model, 0, PAGE);
    return runner && runner->ops->draft && runner->ops->commit ? 0 : -1;
}

static void unload(const char *dir) {
    if (runner) runner->ops->destroy(runner);
    model_free(model);
    runner = NULL;
    model = NULL;
    DIR *dh = opendir(dir); /* make-tiny wrote only plain files */
    for (struct dirent *e; dh && (e = readdir(dh));) {
        if (e->d_name[0] == '.') continue;
        char *p = di_path_join(dir, e->d_name);
        unlink(p);
        free(p);
    }
    if (dh) closedir(dh);
    rmdir(dir);
}

int main(void) {
    di_log_set_level(DI_LOG_ERROR);
    char dir[256];
    snprintf(dir, sizeof dir, "/tmp/di_test_dspark_runner_%d", (int)getpid());
    if (di_tiny_write(dir, "tiny", DI_TINY_DEFAULT_SEED, 0) < 0 || load(dir) != 0) {
        fprintf(stderr, "%s\n", di_error_message());
        return 1;
    }
    RUN_TEST(logit_rows_equal_plain_decoding);
    RUN_TEST(rollback_equals_plain_decoding);
    RUN_TEST(rollback_in_a_mixed_batch);
    RUN_TEST(commit_contract_is_enforced);
    RUN_TEST(draft_reads_state_only_and_honours_pick);
    RUN_TEST(batched_drafts_equal_single_drafts);
    RUN_TEST(greedy_speculation_is_lossless);
    RUN_TEST(taps_are_stream_means_of_tap_layer_inputs);
    unload(dir);
    if (di_tiny_write_planted(dir, "tiny", DI_TINY_DEFAULT_SEED, 0) < 0 || load(dir) != 0) {
        fprintf(stderr, "%s\n", di_error_message());
        return 1;
    }
    RUN_TEST(planted_drafts_match_the_target);
    RUN_TEST(planted_speculation_is_lossless_and_accepted);
    RUN_TEST(rollback_equals_plain_decoding);
    unload(dir);
    return TEST_SUMMARY();
}
