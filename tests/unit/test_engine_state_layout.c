/* test_engine_state_layout.c — packing model state into pages, checked on the V4.1 release
 * shapes of model-v41.md §6.1 (packed formats): 2,918,412 fixed bytes per request and 890 bytes
 * per token, and on every row's address: inside a page, never straddling one, never overlapping
 * another row. */
#include "test.h"

#include "base/error.h"
#include "engine/state_layout.h"

#include <stdint.h>

/* model-v41.md §6.1, packed: 40 window rings (128 rows x 528 B), pending rows at KV sources 2, 8,
 * 14 (one 4 KiB row each), the Engram history (12 B), 3 DSpark rings (128 x 528 B); compressed KV
 * rows (288 B) and index keys (68 B), per 2 tokens at layers 2, 8, 14 and per token at layer 20. */
static int v41_components(DiStateComponent *c) {
    int n = 0;
    for (int layer = 0; layer < 40; layer++) c[n++] = (DiStateComponent){"window ring", 528, 128, 0};
    for (int k = 0; k < 3; k++) c[n++] = (DiStateComponent){"compressor pending", 4096, 1, 0};
    c[n++] = (DiStateComponent){"engram history", 12, 1, 0};
    for (int s = 0; s < 3; s++) c[n++] = (DiStateComponent){"dspark ring", 528, 128, 0};
    for (int k = 0; k < 3; k++) {
        c[n++] = (DiStateComponent){"compressed kv m=2", 288, 0, 2};
        c[n++] = (DiStateComponent){"index keys m=2", 68, 0, 2};
    }
    c[n++] = (DiStateComponent){"compressed kv m=1", 288, 0, 1};
    c[n++] = (DiStateComponent){"index keys m=1", 68, 0, 1};
    return n;
}

TEST(v41_release_shapes_match_the_spec_totals) {
    DiStateComponent c[64];
    int n = v41_components(c);
    DiStateLayout l;
    CHECK_EQ_INT(di_state_layout_init(&l, 65536, c, n), 0);
    CHECK_EQ_INT(l.fixed_bytes, 2703360 + 12288 + 202752 + 12);
    CHECK_NEAR(l.bytes_per_token, 890.0, 1e-9);
    /* 65536 / 1780 bytes per 2 positions = 36 pairs: 72 positions per block page */
    CHECK_EQ_INT(l.block_tokens, 72);
    /* fixed rows: 2,918,412 bytes in 64 KiB pages with no row straddling: 45 pages */
    CHECK_EQ_INT(l.fixed_pages, 45);
    CHECK_EQ_INT(di_state_layout_pages(&l, 0), 45);
    CHECK_EQ_INT(di_state_layout_pages(&l, 1), 46);
    CHECK_EQ_INT(di_state_layout_pages(&l, 72), 46);
    CHECK_EQ_INT(di_state_layout_pages(&l, 73), 47);
    CHECK_EQ_INT(di_state_layout_pages(&l, 1000000), 45 + 13889);
}

/* Fill every row of every component with its own tag, then read them all back. */
TEST(rows_never_overlap_or_straddle_pages) {
    DiStateComponent c[64];
    int n = v41_components(c);
    DiStateLayout l;
    size_t page = 16384;
    CHECK_EQ_INT(di_state_layout_init(&l, page, c, n), 0);
    int64_t tokens = 300;
    size_t n_pages = di_state_layout_pages(&l, tokens);
    uint8_t *slab = calloc(n_pages, page);
    uint8_t **pages = calloc(n_pages, sizeof *pages);
    for (size_t i = 0; i < n_pages; i++) pages[i] = slab + (n_pages - 1 - i) * page; /* not in address order */
    int ok = 1;
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < n; k++) {
            int64_t rows = c[k].fixed_rows ? c[k].fixed_rows : (tokens + c[k].tokens_per_row - 1) / c[k].tokens_per_row;
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
    CHECK(di_state_row(&l, pages, n_pages, 0, 128) == NULL);          /* past a ring */
    CHECK(di_state_row(&l, pages, n_pages, n - 1, 100000) == NULL);   /* past the pages */
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
    DiStateComponent grow[2] = {{"a", 40000, 0, 1}, {"b", 40000, 0, 1}};
    CHECK_EQ_INT(di_state_layout_init(&l, 65536, grow, 2), -1);
    CHECK(strstr(di_error_message(), "do not fit") != NULL);
}

int main(void) {
    RUN_TEST(v41_release_shapes_match_the_spec_totals);
    RUN_TEST(rows_never_overlap_or_straddle_pages);
    RUN_TEST(impossible_layouts_are_errors);
    return TEST_SUMMARY();
}
