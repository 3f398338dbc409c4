/* test_forward_paged.c — the request state in engine-owned fixed-size pages (state.h):
 * the page order is a prefix order (pages_for_tokens non-decreasing, every needed entry lands in
 * a page below it, no two entries share a place), a forward over pages appended chunk by chunk
 * gives bit-identical logits and drafts to the owned state, and too few pages is an error. */
#include "test.h"

#include "base/error.h"
#include "model/dspark.h"
#include "model/forward.h"
#include "golden/golden.h"
#include "model/state.h"

#include <stdio.h>
#include <string.h>

static GoldenSet golden;
static Model *model;

#define MAX_PAGES 4096

TEST(page_order_is_a_stable_prefix) {
    const ModelDims *d = &model->d;
    /* a small page: 4 slots, 2 entries per page, so the order interleaves the sources */
    size_t pb = 1024;
    StateLayout l;
    CHECK(state_layout(d, pb, &l) == 0);
    CHECK_EQ_INT(l.pages.rows_per_page[l.c_entries0], 2);
    static uint8_t *pages[MAX_PAGES];
    static uint8_t arena[MAX_PAGES][1024];
    for (int i = 0; i < MAX_PAGES; i++) pages[i] = arena[i];
    RunState *st = state_create(d);
    int64_t prev = 0;
    for (int64_t n = 1; n <= 150; n++) {
        int64_t need = state_pages_for_tokens(&l, n);
        CHECK(need >= prev && need <= MAX_PAGES);
        prev = need;
        CHECK(state_attach_pages(st, &l, pages, (size_t)need, n) == 0);
        static unsigned char used[MAX_PAGES][2];
        memset(used, 0, sizeof used);
        for (int k = 0; k < d->n_kv_sources; k++)
            for (int64_t g = 0; g < st->kv[k].n_rows; g++) {
                uint8_t *p = (uint8_t *)state_comp_row(st, k, g);
                int64_t page = -1;
                for (int64_t i = (int64_t)l.pages.fixed_pages; i < need; i++)
                    if (p >= arena[i] && p < arena[i] + pb) page = i;
                CHECK_MSG(page >= 0, "n=%lld source %d entry %lld outside the needed pages", (long long)n, k, (long long)g);
                if (page < 0) continue;
                int e = (int)((p - arena[page]) / (l.entry_floats * 4));
                CHECK(!used[page][e]);
                used[page][e] = 1;
                CHECK((uint8_t *)state_ikey_row(st, k, g) == p + d->head_dim * 4);
            }
    }
    CHECK(state_attach_pages(st, &l, pages, (size_t)state_pages_for_tokens(&l, 40) - 1, 40) == -1);
    CHECK(state_layout(d, 100, &l) == -1);
    CHECK(state_layout(d, 64, &l) == -1);
    state_free(st);
}

/* Run the golden sequence in chunks on owned and on paged state; logits must be identical. */
static void run_paged(size_t page_bytes) {
    model->mode = MODE_KVQ;
    const ModelDims *d = &model->d;
    const int64_t chunks[] = {9, 1, 1, 7, 5, 1};
    int64_t T = 24, V = d->vocab, B = d->dspark_block;
    GoldenArray ids;
    CHECK(golden_array(&golden, "input_ids", "i32", 1, NULL, &ids) == 0);
    float *a = calloc((size_t)(T * V), sizeof(float)), *b = calloc((size_t)(T * V), sizeof(float));
    StateLayout l;
    CHECK(state_layout(d, page_bytes, &l) == 0);
    uint8_t **pages = calloc(MAX_PAGES, sizeof *pages);
    size_t n_pages = 0;
    RunState *own = state_create(d), *pg = state_create(d);
    int64_t pos = 0;
    for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
        const int32_t *tok = (const int32_t *)ids.data + pos;
        CHECK(model_forward(model, own, tok, chunks[c], pos, a + pos * V, true, NULL) == 0);
        /* the engine appends pages (uninitialised memory) before the forward */
        int64_t need = state_pages_for_tokens(&l, pos + chunks[c]);
        while ((int64_t)n_pages < need) {
            pages[n_pages] = malloc(page_bytes);
            memset(pages[n_pages++], 0xA5, page_bytes);
        }
        CHECK(state_attach_pages(pg, &l, pages, n_pages, pos) == 0);
        int rc = model_forward(model, pg, tok, chunks[c], pos, b + pos * V, true, NULL);
        CHECK_MSG(rc == 0, "%s", di_error_message());
        pos += chunks[c];
    }
    CHECK(pos == T);
    CHECK(memcmp(a, b, (size_t)(T * V) * sizeof *a) == 0);
    /* drafts read the DSpark rings out of the pages */
    float *b1 = calloc((size_t)(4 * B * V), sizeof(float)), c1[64], c2[64];
    int32_t t1[64], t2[64];
    DraftOutput o1 = {b1, b1 + B * V, c1, t1}, o2 = {b1 + 2 * B * V, b1 + 3 * B * V, c2, t2};
    CHECK(state_attach_pages(pg, &l, pages, n_pages, T) == 0);
    CHECK(dspark_draft(model, own, 7, NULL, &o1) == 0);
    CHECK(dspark_draft(model, pg, 7, NULL, &o2) == 0);
    CHECK(memcmp(b1, b1 + 2 * B * V, (size_t)(2 * B * V) * sizeof(float)) == 0);
    CHECK(memcmp(t1, t2, (size_t)B * sizeof *t1) == 0);
    for (size_t i = 0; i < n_pages; i++) free(pages[i]);
    free(pages);
    free(a);
    free(b);
    free(b1);
    state_free(own);
    state_free(pg);
}

TEST(paged_forward_matches_owned_small_pages) { run_paged(1024); }
TEST(paged_forward_matches_owned_large_pages) { run_paged(64 * 1024); }

int main(void) {
    char dir[600], ck[700];
    snprintf(dir, sizeof dir, "%s/golden-v41/tiny-a", test_shared_dir());
    snprintf(ck, sizeof ck, "%s/checkpoint", dir);
    if (golden_open(dir, &golden) != 0 || !(model = model_load(ck, MODE_KVQ)) || golden_prepare_model(&golden, model) != 0) {
        fprintf(stderr, "cannot load golden tiny-a: %s\n", di_error_message());
        return 1;
    }
    RUN_TEST(page_order_is_a_stable_prefix);
    RUN_TEST(paged_forward_matches_owned_small_pages);
    RUN_TEST(paged_forward_matches_owned_large_pages);
    model_free(model);
    golden_close(&golden);
    return TEST_SUMMARY();
}
