/* test_wo_a.c — the grouped output projection (§5.6.8) multiplies by attn.wo_a as the checkpoint
 * stores it (FP8, in the memory map), not by a BF16 copy on the heap, and gets the bits of the BF16
 * dequantisation that the reference multiplies by (e4m3 x 2^k is exact in both; matmul.h: every
 * format decodes exactly and sums in one order).  Checked with attn_wo_a on the golden tiny-a
 * weights (32-row groups) and on random FP8 matrices (every finite code, subnormals included,
 * with and without the subnormal map; 48-row groups, where a 32-row scale block straddles two
 * groups, and 64-row ones) against the same matrix re-encoded as BF16 here, for 1 to 24 tokens
 * (the GEMV tiles and the GEMM), on the scalar and the SIMD kernels, one and two threads; memcmp,
 * no tolerance. */
#include "test.h"

#include "base/error.h"
#include "base/file.h"
#include "base/threadpool.h"
#include "kernels/numformats.h"
#include "model/attention.h"
#include "model/checkpoint.h"
#include "model/model.h"
#include "model/workspace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static Model *model;

static const int64_t token_counts[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 24};

/* w re-encoded as BF16, value by value; every value must be exact (else the test is void). */
static uint16_t *to_bf16(const DiMatrix *w) {
    uint16_t *bf = malloc((size_t)(w->rows * w->cols) * sizeof *bf);
    float *row = malloc((size_t)w->cols * sizeof *row);
    for (int64_t r = 0; r < w->rows; r++) {
        CHECK(di_matrix_row(w, r, row) == 0);
        for (int64_t c = 0; c < w->cols; c++) {
            bf[r * w->cols + c] = di_f32_to_bf16(row[c]);
            if (di_bf16_to_f32(bf[r * w->cols + c]) != row[c]) {
                CHECK_MSG(0, "element [%lld, %lld] = %g not exact in BF16", (long long)r, (long long)c, (double)row[c]);
                r = w->rows;
                break;
            }
        }
    }
    free(row);
    return bf;
}

static uint64_t rng_state = 88172645463325252ULL;
static uint32_t next_u32(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

/* o[n][H·Dh]: values of many magnitudes and both signs. */
static void fill_inputs(float *o, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        float v = (float)((int32_t)(next_u32() % 2000001) - 1000000) / 1e6f;
        o[i] = v * (float)(1 << (next_u32() % 12)) / 64.0f;
    }
}

/* attn_wo_a with wo_a as given against the same values as BF16, every token count, kernels and
 * thread count. */
static void check_same_bits(const Model *m, const DiMatrix *w, const char *what) {
    const ModelDims *d = &m->d;
    int64_t in = (int64_t)d->n_heads * d->head_dim, outw = (int64_t)d->o_groups * d->o_rank;
    uint16_t *bf = to_bf16(w);
    DiMatrix wb = {.format = DI_MAT_BF16, .rows = w->rows, .cols = w->cols, .data = bf};
    int64_t nmax = token_counts[sizeof token_counts / sizeof *token_counts - 1];
    float *o = malloc((size_t)(nmax * in) * sizeof *o), *za = malloc((size_t)(nmax * outw) * sizeof *za),
          *zb = malloc((size_t)(nmax * outw) * sizeof *zb);
    DiThreadPool *pool = di_pool_create(2);
    Model mm = *m;
    for (int k = 0; k < 2; k++)
        for (int threads = 1; threads <= 2; threads++)
            for (size_t t = 0; t < sizeof token_counts / sizeof *token_counts; t++) {
                int64_t n = token_counts[t];
                mm.be = k == 0 ? di_backend_cpu_ref() : m->be; /* the reference needs no scratch */
                mm.pool = threads == 2 ? pool : NULL;
                CHECK_MSG(workspace_acquire(&mm) == 0, "%s", di_error_message()); /* sized for this pool, as in a forward */
                fill_inputs(o, n * in);
                CHECK_MSG(attn_wo_a(&mm, w, o, n, za) == 0, "%s", di_error_message());
                CHECK_MSG(attn_wo_a(&mm, &wb, o, n, zb) == 0, "%s", di_error_message());
                CHECK_MSG(memcmp(za, zb, (size_t)(n * outw) * sizeof *za) == 0, "%s: %s kernels, %d thread(s), %lld tokens",
                          what, k == 0 ? "scalar" : "SIMD", threads, (long long)n);
                workspace_release(&mm);
            }
    di_pool_destroy(pool);
    free(o);
    free(za);
    free(zb);
    free(bf);
}

TEST(wo_a_is_the_mapped_fp8_matrix) {
    int total = model->d.n_layers + model->d.n_mtp;
    for (int L = 0; L < total; L++) {
        char name[96];
        if (L < model->d.n_layers) snprintf(name, sizeof name, "layers.%d.attn.wo_a.weight", L);
        else snprintf(name, sizeof name, "mtp.%d.attn.wo_a.weight", L - model->d.n_layers);
        const DiTensorInfo *t = di_checkpoint_lookup(model->ck, name);
        const DiMatrix *w = &model->w.layers[L].wo_a;
        CHECK(t != NULL);
        CHECK_MSG(t && w->format == DI_MAT_FP8_BLOCK && w->data == t->data, "%s: bound as format %d, not the mapped FP8",
                  name, (int)w->format);
    }
}

TEST(golden_wo_a_same_bits_as_bf16) {
    for (int L = 0; L < model->d.n_layers + model->d.n_mtp; L += 2) {
        char what[32];
        snprintf(what, sizeof what, "layer %d", L);
        check_same_bits(model, &model->w.layers[L].wo_a, what);
    }
}

/* Random FP8 matrices with 48-row groups (group 1 starts inside a scale block, rows 32..63) and
 * with 64-row groups (whole scale blocks, as at release size), scales 2^-20 .. 2^20. */
TEST(random_fp8_same_bits_as_bf16) {
    for (int shape = 0; shape < 2; shape++) {
        Model mm = *model;
        mm.d.o_rank = shape ? 64 : 48;
        DiMatrix w = {.format = DI_MAT_FP8_BLOCK, .rows = (int64_t)mm.d.o_groups * mm.d.o_rank,
                      .cols = (int64_t)mm.d.n_heads * mm.d.head_dim / mm.d.o_groups};
        int64_t nscale = (w.rows + 31) / 32 * ((w.cols + 31) / 32);
        uint8_t *codes = malloc((size_t)(w.rows * w.cols)), *scales = malloc((size_t)nscale);
        for (int64_t i = 0; i < w.rows * w.cols; i++) {
            uint8_t c = (uint8_t)next_u32();
            codes[i] = (c & 0x7F) == 0x7F ? (uint8_t)(c - 1) : c; /* no NaN codes */
        }
        for (int64_t i = 0; i < nscale; i++) scales[i] = (uint8_t)(107 + next_u32() % 41);
        w.data = codes;
        w.scale = scales;
        check_same_bits(&mm, &w, shape ? "random FP8, 64-row groups" : "random FP8, 48-row groups");
        void *map = NULL;
        CHECK(di_matrix_prepare(&w, &map) == 0);
        check_same_bits(&mm, &w, "random FP8 after di_matrix_prepare");
        free(map);
        free(codes);
        free(scales);
    }
}

/* di_matrix_rows' slice of an FP8 matrix carries the subnormal map of its own rows: the map
 * di_matrix_fp8_subnormal_map makes for the slice alone (MoE tasks and wo_a groups multiply by
 * slices; a map of other rows would cost speed, never a bit, so no product can show it). */
TEST(row_slices_carry_their_map) {
    DiMatrix w = {.format = DI_MAT_FP8_BLOCK, .rows = 160, .cols = 72};
    int64_t kb = (w.cols + 31) / 32;
    uint8_t *codes = malloc((size_t)(w.rows * w.cols)), *scales = calloc((size_t)((w.rows + 31) / 32 * kb), 1);
    for (int64_t i = 0; i < w.rows * w.cols; i++) codes[i] = next_u32() % 97 == 0 ? (uint8_t)(1 + next_u32() % 7) : 0x38;
    w.data = codes;
    w.scale = scales;
    size_t map_bytes = (size_t)di_matrix_fp8_subnormal_map_bytes(&w);
    uint8_t *map = malloc(map_bytes), *own = malloc(map_bytes);
    di_matrix_fp8_subnormal_map(&w, map);
    w.fp8_subnormal_map = map;
    for (int64_t r0 = 0; r0 < w.rows; r0 += 32) {
        DiMatrix rows;
        CHECK(di_matrix_rows(&w, r0, w.rows - r0, &rows) == 0);
        di_matrix_fp8_subnormal_map(&rows, own);
        CHECK_MSG(memcmp(rows.fp8_subnormal_map, own, (size_t)di_matrix_fp8_subnormal_map_bytes(&rows)) == 0,
                  "rows from %lld", (long long)r0);
        CHECK(rows.scale == scales + r0 / 32 * kb && rows.data == codes + r0 * w.cols);
    }
    free(codes);
    free(scales);
    free(map);
    free(own);
}

TEST(bad_shapes_and_rows_are_errors) {
    const DiMatrix *w = &model->w.layers[0].wo_a;
    DiMatrix rows, wrong = *w;
    CHECK(di_matrix_rows(w, 16, 32, &rows) == -1);
    CHECK(strstr(di_error_message(), "32-row scale block") != NULL);
    CHECK(di_matrix_rows(w, 32, w->rows, &rows) == -1);
    CHECK(strstr(di_error_message(), "outside") != NULL);
    CHECK(di_matrix_rows(w, 32, w->rows - 32, &rows) == 0 && rows.rows == w->rows - 32);
    wrong.rows -= 1;
    float o[1] = {0}, z[1];
    CHECK(attn_wo_a(model, &wrong, o, 1, z) == -1);
    CHECK(strstr(di_error_message(), "wo_a is") != NULL);
}

int main(void) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/golden-v41/tiny-a/checkpoint", test_shared_dir());
    model = model_load(dir, MODE_EXACT);
    if (!model) {
        fprintf(stderr, "cannot load %s: %s\n", dir, di_error_message());
        return 1;
    }
    RUN_TEST(wo_a_is_the_mapped_fp8_matrix);
    RUN_TEST(golden_wo_a_same_bits_as_bf16);
    RUN_TEST(random_fp8_same_bits_as_bf16);
    RUN_TEST(row_slices_carry_their_map);
    RUN_TEST(bad_shapes_and_rows_are_errors);
    model_free(model);
    return TEST_SUMMARY();
}
