/* test_engine_state_layout.c — the one paged-state layout engine (model/page_layout.h), which the
 * model's state and the engine's mock runner both use: the V4.1 release shapes of model-v41.md
 * §6.1 (packed formats: 2,918,412 fixed bytes per request and 890 bytes per token) with page
 * counts derived by hand, the chunk-page order on a hand-worked case, every row's address (inside
 * a page, never straddling one, never overlapping another row) and the prefix property. */
#include "test.h"

#include "base/error.h"
#include "model/page_layout.h"

#include <stdint.h>

/* model-v41.md §6.1, packed: 40 window rings (128 rows x 528 B), pending rows at KV sources 2, 8,
 * 14 (one 4 KiB row each), the Engram history (12 B), 3 DSpark rings (128 x 528 B); entries of a
 * compressed KV row (288 B) and its index key (68 B), per 2 tokens at layers 2, 8, 14 and per
 * token at layer 20. */
static int v41_components(DiStateComponent *c) {
    int n = 0;
    for (int layer = 0; layer < 40; layer++) c[n++] = (DiStateComponent){"window ring", 528, 128, 0};
    for (int k = 0; k < 3; k++) c[n++] = (DiStateComponent){"compressor pending", 4096, 1, 0};
    c[n++] = (DiStateComponent){"engram history", 12, 1, 0};
    for (int s = 0; s < 3; s++) c[n++] = (DiStateComponent){"dspark ring", 528, 128, 0};
    for (int k = 0; k < 3; k++) c[n++] = (DiStateComponent){"kv entries m=2", 288 + 68, 0, 2};
    c[n++] = (DiStateComponent){"kv entries m=1", 288 + 68, 0, 1};
    return n;
}

TEST(v41_release_shapes_match_the_spec_totals) {
    DiStateComponent c[64];
    int n = v41_components(c);
    DiStateLayout l;
    CHECK_EQ_INT(di_state_layout_init(&l, 65536, c, n), 0);
    CHECK_EQ_INT(l.fixed_bytes, 2703360 + 12288 + 202752 + 12);
    CHECK_NEAR(l.bytes_per_token, 890.0, 1e-9);
    /* fixed rows: 2,918,412 bytes in 64 KiB pages with no row straddling: 45 pages */
    CHECK_EQ_INT(l.fixed_pages, 45);
    /* 65536 / 356 = 184 entries per chunk page; pages(n) = 45 + 3 ceil(floor(n/2) / 184) + ceil(n / 184) */
    CHECK_EQ_INT(l.rows_per_page[n - 1], 184);
    CHECK_EQ_INT(di_state_layout_pages(&l, 0), 45);
    CHECK_EQ_INT(di_state_layout_pages(&l, 1), 46);      /* the m=1 source's first entry */
    CHECK_EQ_INT(di_state_layout_pages(&l, 2), 49);      /* + one page per m=2 source */
    CHECK_EQ_INT(di_state_layout_pages(&l, 184), 49);
    CHECK_EQ_INT(di_state_layout_pages(&l, 185), 50);    /* m=1 entry 184 opens its second page */
    CHECK_EQ_INT(di_state_layout_pages(&l, 369), 51);
    CHECK_EQ_INT(di_state_layout_pages(&l, 370), 54);    /* m=2 entry 184 (positions 368-369) */
    CHECK_EQ_INT(di_state_layout_pages(&l, 1000000), 45 + 3 * 2718 + 5435);
}

/* A: 128-byte rows, one per position (2 per 256-byte page); B: 64-byte rows, one per 2 positions
 * (4 per page).  Chunk thresholds: A c -> 2c + 1, B c -> (4c + 1) * 2.  Page order by threshold:
 * A0 (1), B0 (2), A1 (3), A2 (5), A3 (7), A4 (9), B1 (10), A5 (11). */
TEST(chunk_pages_follow_their_thresholds) {
    DiStateComponent c[2] = {{"A", 128, 0, 1}, {"B", 64, 0, 2}};
    DiStateLayout l;
    CHECK_EQ_INT(di_state_layout_init(&l, 256, c, 2), 0);
    CHECK_EQ_INT(l.fixed_pages, 0);
    const struct {
        int comp;
        int64_t row;
        size_t page, offset;
    } want[] = {{0, 0, 0, 0},   {0, 1, 0, 128}, {1, 0, 1, 0},   {1, 3, 1, 192}, {0, 2, 2, 0},
                {0, 9, 5, 128}, {1, 4, 6, 0},   {1, 7, 6, 192}, {0, 10, 7, 0}};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        size_t page = 99, offset = 99;
        CHECK_EQ_INT(di_state_row_place(&l, want[i].comp, want[i].row, &page, &offset), 0);
        CHECK_MSG(page == want[i].page && offset == want[i].offset, "%s row %lld: page %zu offset %zu, want %zu %zu",
                  c[want[i].comp].name, (long long)want[i].row, page, offset, want[i].page, want[i].offset);
    }
    const size_t pages_at[] = {0, 1, 2, 3, 3, 4, 4, 5, 5, 6, 7, 8};
    for (int64_t t = 0; t < 12; t++) CHECK_MSG(di_state_layout_pages(&l, t) == pages_at[t], "pages(%lld)", (long long)t);
}

/* Fill every row of every component with its own tag, then read them all back; every row a
 * context holds lies below pages_for_tokens of that context. */
TEST(rows_never_overlap_or_straddle_pages) {
    DiStateComponent c[64];
    int n = v41_components(c);
    DiStateLayout l;
    size_t page = 16384;
    CHECK_EQ_INT(di_state_layout_init(&l, page, c, n), 0);
    int64_t tokens = 3001;
    size_t n_pages = di_state_layout_pages(&l, tokens);
    uint8_t *slab = calloc(n_pages, page);
    uint8_t **pages = calloc(n_pages, sizeof *pages);
    for (size_t i = 0; i < n_pages; i++) pages[i] = slab + (n_pages - 1 - i) * page; /* not in address order */
    int ok = 1;
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < n; k++) {
            int64_t rows = c[k].fixed_rows ? c[k].fixed_rows : tokens / c[k].tokens_per_row;
            for (int64_t r = 0; r < rows; r++) {
                uint8_t *row = di_state_row(&l, pages, n_pages, k, r);
                if (!row) {
                    ok = 0;
                    continue;
                }
                size_t at = (size_t)(row - slab);
                ok &= at / page == (at + c[k].row_bytes - 1) / page; /* inside one page */
                uint32_t tag = (uint32_t)(k * 100003 + r);
                for (size_t b = 0; b + 4 <= c[k].row_bytes; b += 4) {
                    if (pass == 0) memcpy(row + b, &tag, 4);
                    else {
                        uint32_t got;
                        memcpy(&got, row + b, 4);
                        ok &= got == tag;
                    }
                }
            }
        }
    CHECK(ok);
    /* prefix: the last row of each growing component at context t lies in a page < pages(t) */
    for (int64_t t = 1; t <= tokens; t++)
        for (int k = 0; k < n; k++) {
            int64_t rows = c[k].tokens_per_row ? t / c[k].tokens_per_row : 0;
            size_t pg, off;
            if (rows > 0 && (di_state_row_place(&l, k, rows - 1, &pg, &off) != 0 || pg >= di_state_layout_pages(&l, t)))
                ok = 0;
        }
    CHECK(ok);
    CHECK(di_state_row(&l, pages, n_pages, 0, 128) == NULL);        /* past a ring */
    CHECK(di_state_row(&l, pages, n_pages, n - 1, 100000) == NULL); /* past the pages */
    free(pages);
    free(slab);
}

TEST(impossible_layouts_are_errors) {
    DiStateComponent big = {"too big", 70000, 1, 0};
    DiStateLayout l;
    CHECK_EQ_INT(di_state_layout_init(&l, 65536, &big, 1), -1);
    CHECK(strstr(di_error_message(), "too big") != NULL);
    DiStateComponent both = {"both", 64, 1, 1};
    CHECK_EQ_INT(di_state_layout_init(&l, 65536, &both, 1), -1);
    CHECK(strstr(di_error_message(), "both") != NULL);
    DiStateComponent neither = {"neither", 64, 0, 0};
    CHECK_EQ_INT(di_state_layout_init(&l, 65536, &neither, 1), -1);
}

/* The hand-worked case above: A c is complete at n >= 2c + 2, B c at n >= 8c + 8. */
TEST(final_pages_end_at_the_first_incomplete_chunk) {
    DiStateComponent c[2] = {{"A", 128, 0, 1}, {"B", 64, 0, 2}};
    DiStateLayout l;
    CHECK_EQ_INT(di_state_layout_init(&l, 256, c, 2), 0);
    CHECK_EQ_INT(di_state_layout_final_pages(&l, 0), 0);
    CHECK_EQ_INT(di_state_layout_final_pages(&l, 1), 0);
    CHECK_EQ_INT(di_state_layout_final_pages(&l, 2), 1);  /* A0 complete, B0 (page 1) open */
    CHECK_EQ_INT(di_state_layout_final_pages(&l, 7), 1);
    CHECK_EQ_INT(di_state_layout_final_pages(&l, 8), 5);  /* A0 B0 A1 A2 A3; A4 open */
    CHECK_EQ_INT(di_state_layout_final_pages(&l, 12), 6); /* A5 (page 7) complete, B1 (page 6) open */
}

/* Against brute force on the release shapes: a page is final iff every row placed in it has all
 * its positions computed; the result is the first page that is not. */
TEST(final_pages_match_brute_force_on_release_shapes) {
    DiStateComponent c[64];
    int n = v41_components(c);
    DiStateLayout l;
    CHECK_EQ_INT(di_state_layout_init(&l, 65536, c, n), 0);
    enum { MAX_TOKENS = 2000 };
    size_t n_pages = di_state_layout_pages(&l, MAX_TOKENS);
    static int64_t complete_at[4096]; /* the context length at which each page is complete */
    CHECK(n_pages <= 4096);
    for (size_t p = 0; p < n_pages; p++) complete_at[p] = 0;
    for (int i = 0; i < n; i++) {
        if (c[i].tokens_per_row == 0) continue;
        for (int64_t row = 0; row < (int64_t)(MAX_TOKENS / c[i].tokens_per_row); row++) {
            size_t page = 0, offset = 0;
            CHECK_EQ_INT(di_state_row_place(&l, i, row, &page, &offset), 0);
            int64_t E = l.rows_per_page[i], last = (row / E + 1) * E; /* the chunk's rows end */
            if (last * c[i].tokens_per_row > complete_at[page]) complete_at[page] = last * c[i].tokens_per_row;
        }
    }
    for (int64_t t = 0; t <= MAX_TOKENS / 2; t += 7) {
        size_t want = l.fixed_pages;
        while (want < n_pages && complete_at[want] <= t) want++;
        CHECK_EQ_INT(di_state_layout_final_pages(&l, t), want);
        CHECK(di_state_layout_final_pages(&l, t) <= di_state_layout_pages(&l, t));
    }
}

int main(void) {
    RUN_TEST(v41_release_shapes_match_the_spec_totals);
    RUN_TEST(chunk_pages_follow_their_thresholds);
    RUN_TEST(final_pages_end_at_the_first_incomplete_chunk);
    RUN_TEST(final_pages_match_brute_force_on_release_shapes);
    RUN_TEST(rows_never_overlap_or_straddle_pages);
    RUN_TEST(impossible_layouts_are_errors);
    return TEST_SUMMARY();
}
