/* test_kv_v41.c — the V4.1 runner's KV block cache (runner.h, engine-features.md §2.4) on the
 * golden tiny-a checkpoint: a block is every KV source's compressed-KV and index-key entries in
 * slot order (checked entry by entry against a private, owned RunState), export -> import is
 * bit-exact, a bounded replay never rewrites the imported entries, a replay from position 0
 * equals the cold forward bit for bit, and a hit (import + replay of the last W positions)
 * equals an oracle that computed its entries itself and then lost every fixed row, with the
 * decoder's compact replay off and on. */
#include "test.h"
#include "test_golden_model.h"

#include "base/error.h"
#include "deepinfer.h"
#include "engine/runner_v41.h"
#include "model/forward.h"
#include "model/replay.h"
#include "model/state.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define PAGE 4096
#define B 128
#define H (2 * B)     /* the hit: two cached blocks */
#define SUFFIX 21     /* new tokens after the hit */
#define N_TOK (H + SUFFIX)
#define MAX_PAGES 256

static Model *model;
static DiRunner *runner;
static int32_t toks[N_TOK];

typedef struct {
    uint8_t *p[MAX_PAGES];
    size_t n;
} Pages;

/* Pages for n_tok positions, every byte `fill` (garbage the runner must never read). */
static int pages_new(Pages *pg, int64_t n_tok, int fill) {
    pg->n = runner->ops->pages_for_tokens(runner, n_tok);
    if (pg->n > MAX_PAGES) return -1;
    for (size_t i = 0; i < pg->n; i++) {
        pg->p[i] = aligned_alloc(64, runner->page_bytes);
        if (!pg->p[i]) return -1;
        memset(pg->p[i], fill, runner->page_bytes);
    }
    return 0;
}

static void pages_free(Pages *pg) {
    for (size_t i = 0; i < pg->n; i++) free(pg->p[i]);
    pg->n = 0;
}

/* One chunk through the runner: tokens [start, start + n), the last row's logits. */
static int run(Pages *pg, int64_t start, int64_t n, int64_t replay_start, int64_t replay_end, float *logits) {
    DiRunnerSeq seq = {pg->p, pg->n, toks + start, (int32_t)n, start, 1, false, replay_start, replay_end};
    DiRunnerBatch batch = {&seq, 1, false, logits};
    return runner->ops->forward(runner, &batch);
}

static size_t block_bytes(void) { return runner->ops->block_bytes(runner, B); }

static int export_all(Pages *pg, uint8_t *out) {
    for (int64_t first = 0; first < H; first += B)
        if (runner->ops->export_block(runner, pg->p, pg->n, first, B, out + (first / B) * block_bytes()) != 0) return -1;
    return 0;
}

static int import_all(Pages *pg, const uint8_t *in) {
    for (int64_t first = 0; first < H; first += B)
        if (runner->ops->import_block(runner, pg->p, pg->n, first, B, in + (first / B) * block_bytes()) != 0) return -1;
    return 0;
}

/* The cold prefix [0, H) in one chunk, exported. */
static int cold_blocks(uint8_t *out) {
    Pages pg;
    float *lg = malloc(sizeof(float) * (size_t)model->d.vocab);
    int rc = lg && pages_new(&pg, N_TOK, 0) == 0 && run(&pg, 0, H, 0, 0, lg) == 0 && export_all(&pg, out) == 0 ? 0 : -1;
    pages_free(&pg);
    free(lg);
    return rc;
}

static uint64_t fnv(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* The bytes of the documented layout, rebuilt from an owned state's accessors. */
TEST(a_block_is_every_sources_entries_in_slot_order) {
    const ModelDims *d = &model->d;
    size_t Dh = (size_t)d->head_dim, DI = (size_t)d->idx_head_dim, expect = 0;
    RunState *st = state_create(d);
    uint8_t *blocks = malloc(2 * block_bytes());
    CHECK(st && blocks && cold_blocks(blocks) == 0);
    CHECK(model_forward(model, st, toks, H, 0, NULL, false, NULL) == 0);
    for (int k = 0; k < st->n_kv; k++) expect += (size_t)(B / st->kv_ratio[k]) * (Dh + DI) * sizeof(float);
    CHECK_EQ_INT((long long)block_bytes(), (long long)expect);
    CHECK_EQ_INT((long long)runner->ops->block_bytes(runner, 64), 0);  /* not a multiple of 128 */
    int mismatches = 0;
    const float *f = (const float *)blocks;
    for (int64_t blk = 0; blk < H / B; blk++)
        for (int k = 0; k < st->n_kv; k++)
            for (int64_t g = blk * B / st->kv_ratio[k]; g < (blk + 1) * B / st->kv_ratio[k]; g++) {
                mismatches += memcmp(f, state_comp_row(st, k, g), Dh * sizeof *f) != 0;
                mismatches += memcmp(f + Dh, state_ikey_row(st, k, g), DI * sizeof *f) != 0;
                f += Dh + DI;
            }
    CHECK_EQ_INT(mismatches, 0);
    CHECK_EQ_INT((long long)((const uint8_t *)f - blocks), (long long)(2 * block_bytes()));
    state_free(st);
    free(blocks);
}

TEST(export_then_import_is_bit_exact) {
    size_t bb = block_bytes();
    uint8_t *a = malloc(2 * bb), *b = malloc(2 * bb);
    Pages pg;
    CHECK(a && b && cold_blocks(a) == 0);
    CHECK(pages_new(&pg, N_TOK, 0xA5) == 0 && import_all(&pg, a) == 0 && export_all(&pg, b) == 0);
    CHECK(memcmp(a, b, 2 * bb) == 0);
    /* refused: a block start off the grid, too few pages */
    CHECK(runner->ops->export_block(runner, pg.p, pg.n, 64, B, b) < 0);
    CHECK(runner->ops->import_block(runner, pg.p, 1, B, B, a) < 0);
    pages_free(&pg);
    free(a);
    free(b);
}

/* Imported entries slightly altered (last mantissa bit): a replay that rewrote them would restore
 * the cold values and change the checksum. */
TEST(a_bounded_replay_never_rewrites_the_imported_entries) {
    size_t bb = block_bytes();
    uint8_t *a = malloc(2 * bb), *after = malloc(2 * bb);
    float *lg = malloc(sizeof(float) * (size_t)model->d.vocab);
    Pages pg;
    CHECK(a && after && lg && cold_blocks(a) == 0);
    for (size_t i = 0; i < 2 * bb; i += sizeof(float)) a[i] ^= 1;
    CHECK(pages_new(&pg, N_TOK, 0xA5) == 0 && import_all(&pg, a) == 0);
    int64_t s = H - runner->replay_window;
    CHECK(run(&pg, s, N_TOK - s, s, H, lg) == 0);
    CHECK(export_all(&pg, after) == 0);
    CHECK(fnv(a, 2 * bb) == fnv(after, 2 * bb));
    pages_free(&pg);
    free(a);
    free(after);
    free(lg);
}

/* A replay from 0 truncates nothing: only the entries' source differs from a cold run. */
TEST(a_replay_from_position_zero_equals_the_cold_forward) {
    int64_t V = model->d.vocab;
    uint8_t *a = malloc(2 * block_bytes());
    float *cold = malloc(sizeof(float) * (size_t)V), *hit = malloc(sizeof(float) * (size_t)V);
    Pages pc, ph;
    CHECK(a && cold && hit && cold_blocks(a) == 0);
    CHECK(pages_new(&pc, N_TOK, 0) == 0 && run(&pc, 0, N_TOK, 0, 0, cold) == 0);
    CHECK(pages_new(&ph, N_TOK, 0xA5) == 0 && import_all(&ph, a) == 0 && run(&ph, 0, N_TOK, 0, H, hit) == 0);
    CHECK(memcmp(cold, hit, sizeof(float) * (size_t)V) == 0);
    pages_free(&pc);
    pages_free(&ph);
    free(a);
    free(cold);
    free(hit);
}

/* Every fixed row (window rings, DSpark rings, pending rows, Engram history) to NaN / -1. */
static void poison_fixed_rows(Pages *pg) {
    StateLayout l;
    if (state_layout(&model->d, runner->page_bytes, &l) != 0) return;
    for (size_t i = 0; i < l.pages.fixed_pages && i < pg->n; i++) memset(pg->p[i], 0xFF, runner->page_bytes);
}

/* The hit: imported blocks, then the last W prefix positions replayed with the suffix, in one
 * chunk and split in several.  The oracle computed its entries cold, then lost its fixed rows:
 * a replay that read anything below its start would turn it to NaN. */
TEST(a_hit_equals_the_oracle_replaying_the_same_window) {
    int64_t V = model->d.vocab, W = runner->replay_window, s = H - W;
    CHECK(W == model->d.window && W < B);
    uint8_t *a = malloc(2 * block_bytes());
    float *oracle = malloc(sizeof(float) * (size_t)V), *hit = malloc(sizeof(float) * (size_t)V);
    float *split = malloc(sizeof(float) * (size_t)V);
    Pages po, ph, ps;
    CHECK(a && oracle && hit && split && cold_blocks(a) == 0);
    CHECK(pages_new(&po, N_TOK, 0) == 0 && run(&po, 0, H, 0, 0, oracle) == 0);
    poison_fixed_rows(&po);
    CHECK(run(&po, s, N_TOK - s, s, H, oracle) == 0);
    CHECK(pages_new(&ph, N_TOK, 0xA5) == 0 && import_all(&ph, a) == 0 && run(&ph, s, N_TOK - s, s, H, hit) == 0);
    CHECK(memcmp(oracle, hit, sizeof(float) * (size_t)V) == 0);
    int finite = 1;
    for (int64_t v = 0; v < V; v++) finite &= hit[v] == hit[v] && hit[v] - hit[v] == 0;
    CHECK(finite);
    /* the same replay in three chunks: one inside the replay, one across its end, then the rest */
    CHECK(pages_new(&ps, N_TOK, 0x5A) == 0 && import_all(&ps, a) == 0);
    CHECK(run(&ps, s, W / 2, s, H, split) == 0 && run(&ps, s + W / 2, W / 2 + 5, s, H, split) == 0 &&
          run(&ps, H + 5, N_TOK - H - 5, s, H, split) == 0);
    CHECK(memcmp(split, hit, sizeof(float) * (size_t)V) == 0);
    /* a replay range the chunk does not start inside is refused */
    CHECK(run(&ps, 0, 4, 8, H, split) < 0);
    pages_free(&po);
    pages_free(&ph);
    pages_free(&ps);
    free(a);
    free(oracle);
    free(hit);
    free(split);
}

/* With the decoder's bounded replay on as well (replay.h: the decoder layers run on a chunk's last
 * K rows, their window floored at that start), the two floors combine: still nothing below the
 * encoder replay's start is read, and the imported entries stay untouched. */
TEST(a_hit_under_the_decoder_compact_replay_reads_nothing_below_its_start) {
    int64_t V = model->d.vocab, W = runner->replay_window, s = H - W;
    size_t bb = block_bytes();
    uint8_t *a = malloc(2 * bb), *after = malloc(2 * bb);
    float *oracle = malloc(sizeof(float) * (size_t)V), *hit = malloc(sizeof(float) * (size_t)V);
    Pages po, ph;
    CHECK(a && after && oracle && hit && cold_blocks(a) == 0);
    CHECK(model_set_prefill_replay(model, REPLAY_COMPACT, W) == 0);
    CHECK(pages_new(&po, N_TOK, 0) == 0 && import_all(&po, a) == 0);
    poison_fixed_rows(&po);
    CHECK(run(&po, s, N_TOK - s, s, H, oracle) == 0);
    CHECK(pages_new(&ph, N_TOK, 0xA5) == 0 && import_all(&ph, a) == 0 && run(&ph, s, N_TOK - s, s, H, hit) == 0);
    CHECK(memcmp(oracle, hit, sizeof(float) * (size_t)V) == 0);
    CHECK(export_all(&ph, after) == 0 && memcmp(a, after, 2 * bb) == 0);
    CHECK(model_set_prefill_replay(model, REPLAY_OFF, W) == 0);
    pages_free(&po);
    pages_free(&ph);
    free(a);
    free(after);
    free(oracle);
    free(hit);
}

/* Greedy decode of `steps` tokens after a prefill whose last logits are `lg`: every step's logits
 * appended to out ([steps + 1][V], the prefill's first). */
static int decode_after(Pages *pg, int64_t replay_start, int64_t replay_end, float *lg, int steps, float *out) {
    int64_t V = model->d.vocab;
    memcpy(out, lg, sizeof(float) * (size_t)V);
    for (int t = 0; t < steps; t++) {
        const float *last = out + (size_t)t * (size_t)V;
        int32_t best = 0;
        for (int64_t v = 1; v < V; v++)
            if (last[v] > last[best]) best = (int32_t)v;
        DiRunnerSeq seq = {pg->p, pg->n, &best, 1, N_TOK + t, 1, false, replay_start, replay_end};
        DiRunnerBatch batch = {&seq, 1, false, out + (size_t)(t + 1) * (size_t)V};
        if (runner->ops->forward(runner, &batch) != 0) return -1;
    }
    return 0;
}

/* The default hit (kv_cache_replay exact): the replay covers the dependency cone of every fixed
 * row (runner.h replay_exact_rows), so the suffix's logits and those of the decode steps after it
 * are the cold run's bit for bit, in one chunk or split; the official W-row replay is not. */
TEST(a_hit_replaying_the_exact_rows_equals_the_cold_run_bit_for_bit) {
    enum { STEPS = 12 };
    int64_t V = model->d.vocab, W = model->d.window, R = runner->replay_exact_rows, s = H - R;
    CHECK_EQ_INT(R, W + (model->d.n_layers + model->d.n_mtp) * (W - 1));
    CHECK(R > W && R < H); /* the fixture's hit is long enough for an exact replay */
    size_t all = sizeof(float) * (size_t)V * (STEPS + 1);
    uint8_t *a = malloc(2 * block_bytes());
    float *lg = malloc(sizeof(float) * (size_t)V), *cold = malloc(all), *hit = malloc(all), *split = malloc(all);
    float *approx = malloc(all);
    Pages pc, ph, ps, pa;
    CHECK(a && lg && cold && hit && split && approx && cold_blocks(a) == 0);
    CHECK(pages_new(&pc, N_TOK + STEPS, 0) == 0 && run(&pc, 0, N_TOK, 0, 0, lg) == 0 && decode_after(&pc, 0, 0, lg, STEPS, cold) == 0);
    CHECK(pages_new(&ph, N_TOK + STEPS, 0xA5) == 0 && import_all(&ph, a) == 0);
    poison_fixed_rows(&ph);
    CHECK(run(&ph, s, N_TOK - s, s, H, lg) == 0 && decode_after(&ph, s, H, lg, STEPS, hit) == 0);
    CHECK(memcmp(cold, hit, all) == 0);
    CHECK(pages_new(&ps, N_TOK + STEPS, 0x5A) == 0 && import_all(&ps, a) == 0);
    CHECK(run(&ps, s, R / 3, s, H, lg) == 0 && run(&ps, s + R / 3, H - s - R / 3 + 7, s, H, lg) == 0 &&
          run(&ps, H + 7, N_TOK - H - 7, s, H, lg) == 0 && decode_after(&ps, s, H, lg, STEPS, split) == 0);
    CHECK(memcmp(cold, split, all) == 0);
    /* the official replay of the last W positions: an approximation, visible in the logits */
    CHECK(pages_new(&pa, N_TOK + STEPS, 0xA5) == 0 && import_all(&pa, a) == 0);
    CHECK(run(&pa, H - W, N_TOK - H + W, H - W, H, lg) == 0 && decode_after(&pa, H - W, H, lg, STEPS, approx) == 0);
    CHECK(memcmp(cold, approx, all) != 0);
    pages_free(&pc);
    pages_free(&ph);
    pages_free(&ps);
    pages_free(&pa);
    free(a);
    free(lg);
    free(cold);
    free(hit);
    free(split);
    free(approx);
}

TEST(the_runner_names_its_model_and_window) {
    CHECK(runner->identity != NULL && runner->identity_len == 16);
    CHECK_EQ_INT(runner->replay_window, model->d.window);
    CHECK(runner->replay_exact_rows > runner->replay_window);
    uint64_t again[2];
    CHECK(model_identity(model, again) == 0 && memcmp(again, runner->identity, sizeof again) == 0);
}

static int load(void) {
    model = test_golden_tiny_a(MODE_REF);
    if (!model) return -1;
    runner = di_v41_runner_create(model, 0, PAGE);
    if (!runner) return -1;
    uint64_t x = 7;
    for (int i = 0; i < N_TOK; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        toks[i] = (int32_t)((x >> 33) % (uint64_t)model->d.vocab);
    }
    return 0;
}

int main(void) {
    if (load() != 0) {
        fprintf(stderr, "loading golden tiny-a: %s\n", di_last_error());
        printf("0 passed, 1 failed\n");
        return 1;
    }
    RUN_TEST(a_block_is_every_sources_entries_in_slot_order);
    RUN_TEST(export_then_import_is_bit_exact);
    RUN_TEST(a_bounded_replay_never_rewrites_the_imported_entries);
    RUN_TEST(a_replay_from_position_zero_equals_the_cold_forward);
    RUN_TEST(a_hit_equals_the_oracle_replaying_the_same_window);
    RUN_TEST(a_hit_under_the_decoder_compact_replay_reads_nothing_below_its_start);
    RUN_TEST(a_hit_replaying_the_exact_rows_equals_the_cold_run_bit_for_bit);
    RUN_TEST(the_runner_names_its_model_and_window);
    runner->ops->destroy(runner);
    model_free(model);
    return TEST_SUMMARY();
}
