/* test_moe.c — the MoE sub-layer (moe.c, §5.7) on the golden tiny-a weights against a plain
 * re-derivation written here from the spec: router sqrt(softplus(logit / T)), top-k of the
 * biased scores (ties to the lower id), renormalised weights x route scale, each chosen expert
 * as whole-matrix matmuls (SwiGLU with the gate / up clamps; the sigmoid's exp is expf with the
 * reference kernels, the SIMD tables' vector expf otherwise), routed outputs summed in ascending
 * expert id and the shared expert last.  moe_forward groups rows by expert and splits every
 * expert into row slices run as thread-pool tasks; the kernel contract (matmul.h: each output
 * row bit-identical for any row split and token count) makes the two agree bit for bit
 * (memcmp), in ref mode (FP8 activation round trips) and exact mode, on 1 and 2 threads, and a
 * row's output must not depend on the other rows of the batch. */
#include "test.h"

#include "base/error.h"
#include "base/file.h"
#include "base/threadpool.h"
#include "kernels/activations.h"
#include "kernels/numformats.h"
#include "golden/golden.h"
#include "model/model.h"
#include "model/moe.h"
#include "model/workspace.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ROWS = 24 };

static GoldenSet golden;
static Model *model;

/* model_linear on whole matrices, no pool: the unsplit computation. */
static void linear(const DiMatrix *w, const float *x, int64_t n, float *y) {
    DiThreadPool *saved = model->pool;
    model->pool = NULL;
    CHECK(model_linear(model, w, x, n, y, model_act_quant(model)) == 0);
    model->pool = saved;
}

static void expert_ref(const ExpertWeights *ex, const float *x, float weight, float *out) {
    const ModelDims *d = &model->d;
    int64_t F = d->moe_inter;
    float *g = calloc((size_t)F, sizeof *g), *u = calloc((size_t)F, sizeof *u);
    linear(&ex->w1, x, 1, g);
    linear(&ex->w3, x, 1, u);
    for (int64_t i = 0; i < F; i++) {
        float gv = g[i], uv = u[i], lim = d->swiglu_limit;
        if (lim > 0) {
            gv = fminf(gv, lim);
            uv = fminf(fmaxf(uv, -lim), lim);
        }
        /* silu(g) = g / (1 + e^-g), one division as torch computes it (spec §4.2); the
         * optimised path's exp is the SIMD tables' expf_row (vector expf), taken value by value */
        float e = expf(-gv);
        model->be->expf_row(&gv, 1, 0.0f, -1.0f, &e); /* the reference backend's is expf */
        g[i] = gv / (1.0f + e) * uv * weight;
    }
    linear(&ex->w2, g, 1, out);
    free(g);
    free(u);
}

/* One row of §5.7, row by row and expert by expert. */
static void moe_ref(const LayerWeights *lw, int top_k, const float *x, float *y) {
    const ModelDims *d = &model->d;
    int E = lw->n_experts;
    int64_t D = d->dim;
    float *s = calloc((size_t)E, sizeof *s), *o = calloc((size_t)D, sizeof *o);
    int32_t ids[64];
    CHECK(model_matmul(model, &lw->gate, x, 1, s) == 0);
    for (int e = 0; e < E; e++) s[e] = sqrtf(di_softplus(s[e] / d->gate_temp));
    for (int j = 0; j < top_k; j++) { /* best biased score not yet taken, lower id on ties */
        int best = -1;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int i = 0; i < j; i++) taken |= ids[i] == e;
            if (!taken && (best < 0 || s[e] + lw->gate_bias[e] > s[best] + lw->gate_bias[best])) best = e;
        }
        ids[j] = best;
    }
    float sum = 0;
    for (int j = 0; j < top_k; j++) sum += s[ids[j]];
    memset(y, 0, (size_t)D * sizeof *y);
    for (int e = 0; e < E; e++)
        for (int j = 0; j < top_k; j++)
            if (ids[j] == e) {
                float w = s[e];
                if (d->norm_topk && top_k > 1) w /= sum + 1e-20f;
                expert_ref(&lw->experts[e], x, w * d->route_scale, o);
                for (int64_t c = 0; c < D; c++) y[c] += o[c];
            }
    if (lw->has_shared) {
        expert_ref(&lw->shared, x, 1.0f, o);
        for (int64_t c = 0; c < D; c++) y[c] += o[c];
    }
    free(s);
    free(o);
}

static void fill_rows(float *x, int64_t n) {
    uint64_t z = 12345;
    for (int64_t i = 0; i < n; i++) {
        z = z * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((int64_t)(z >> 40) - (1 << 23)) / (float)(1 << 22);
    }
}

static void check_layer(int L, NumericsMode mode, int threads) {
    const ModelDims *d = &model->d;
    int64_t D = d->dim;
    int top_k = L >= d->n_layers ? d->dspark_top_k : d->top_k;
    model->mode = mode;
    DiThreadPool *pool = threads > 1 ? di_pool_create(threads) : NULL;
    model->pool = pool;
    /* sizes the workspace's per-thread scratch for this pool, as a forward does */
    CHECK_MSG(workspace_acquire(model) == 0, "%s", di_error_message());
    float *x = calloc((size_t)(ROWS * D), sizeof *x), *y = calloc((size_t)(ROWS * D), sizeof *y);
    float *one = calloc((size_t)D, sizeof *one), *want = calloc((size_t)D, sizeof *want);
    fill_rows(x, ROWS * D);
    CHECK_MSG(moe_forward(model, &model->w.layers[L], top_k, x, ROWS, y, NULL, NULL) == 0, "%s", di_error_message());
    for (int64_t r = 0; r < ROWS; r++) {
        moe_ref(&model->w.layers[L], top_k, x + r * D, want);
        CHECK_MSG(memcmp(y + r * D, want, (size_t)D * sizeof *y) == 0, "layer %d mode %d threads %d row %lld differs from §5.7", L,
                  (int)mode, threads, (long long)r);
        /* batch invariance: the row alone gives the same bits */
        CHECK(moe_forward(model, &model->w.layers[L], top_k, x + r * D, 1, one, NULL, NULL) == 0);
        CHECK(memcmp(one, y + r * D, (size_t)D * sizeof *one) == 0);
    }
    workspace_release(model);
    model->pool = NULL;
    if (pool) di_pool_destroy(pool);
    free(x);
    free(y);
    free(one);
    free(want);
}

TEST(grouped_experts_equal_row_by_row_spec_exact) {
    check_layer(0, MODE_EXACT, 1);
    check_layer(0, MODE_EXACT, 2);
}

TEST(grouped_experts_equal_row_by_row_spec_ref_mode) {
    check_layer(1, MODE_REF, 2);
    check_layer(model->d.n_layers - 1, MODE_REF, 1);
}

TEST(grouped_experts_equal_row_by_row_spec_ref_kernels) {
    const DiKernelBackend *loaded = model->be;
    CHECK(model_set_backend(model, di_backend_cpu_ref()) == 0); /* di_silu's scalar path in the hidden task */
    check_layer(0, MODE_EXACT, 1);
    check_layer(1, MODE_REF, 2);
    CHECK(model_set_backend(model, loaded) == 0);
}

/* The two ways of writing silu round differently: x·(1/(1+e)) rounds the reciprocal and then the
 * product, torch's x/(1+e) once (one division).  The sweep must find values where they differ
 * (else it proves nothing), and di_silu must give the division's bits on every one of them. */
TEST(silu_is_one_division) {
    int differ = 0, wrong = 0;
    float first = 0;
    for (float x = -24.0f; x < 24.0f; x += 0x1p-9f) {
        float e = expf(-x), one = x / (1.0f + e), two = x * (1.0f / (1.0f + e));
        if (memcmp(&one, &two, sizeof one) != 0 && differ++ == 0) first = x;
        float got = di_silu(x);
        wrong += memcmp(&got, &one, sizeof got) != 0;
    }
    CHECK_MSG(differ > 0, "no value where the two forms differ");
    CHECK_MSG(wrong == 0, "di_silu differs from x / (1 + expf(-x)) on %d of the values (forms differ on %d, first %a)",
              wrong, differ, (double)first);
}

TEST(dspark_stage_experts) {
    if (model->d.n_mtp > 0) check_layer(model->d.n_layers, MODE_REF, 2);
}

TEST(bad_top_k_is_an_error) {
    float x[1] = {0}, y[1];
    CHECK(moe_forward(model, &model->w.layers[0], 0, x, 1, y, NULL, NULL) == -1);
    CHECK(strstr(di_error_message(), "top-k") != NULL);
}

int main(void) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/golden-v41/tiny-a", test_shared_dir());
    if (golden_open(dir, &golden) != 0) {
        fprintf(stderr, "cannot open %s: %s\n", dir, di_error_message());
        return 1;
    }
    char *ck = di_path_join(dir, "checkpoint");
    model = model_load(ck, MODE_EXACT);
    free(ck);
    if (!model || golden_prepare_model(&golden, model) != 0) {
        fprintf(stderr, "cannot load model: %s\n", di_error_message());
        return 1;
    }
    RUN_TEST(grouped_experts_equal_row_by_row_spec_exact);
    RUN_TEST(grouped_experts_equal_row_by_row_spec_ref_mode);
    RUN_TEST(grouped_experts_equal_row_by_row_spec_ref_kernels);
    RUN_TEST(silu_is_one_division);
    RUN_TEST(dspark_stage_experts);
    RUN_TEST(bad_top_k_is_an_error);
    model_free(model);
    golden_close(&golden);
    return TEST_SUMMARY();
}
