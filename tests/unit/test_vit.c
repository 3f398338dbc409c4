/* test_vit.c — the vision tower (vit.h) against the golden image set golden-v41/tiny-v: every
 * image's ViT layers, final norm, aligner input and aligner rows within the float32 tolerance
 * (README §5), on the reference kernels and on the loaded backend with threads; plus the config
 * checks of vision-v41.md §2.2 and bad-input errors. */
#include "test.h"

#include "base/error.h"
#include "base/threadpool.h"
#include "golden/golden_vision.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/vit.h"

static char set_dir[512], ck_dir[600];

static void run_set(const DiKernelBackend *be, DiThreadPool *pool) {
    GoldenSet g;
    DiModelConfig cfg = {0};
    DiCheckpoint *ck = NULL;
    VisionModel *vm = NULL;
    CHECK_MSG(golden_open(set_dir, &g) == 0, "%s", di_error_message());
    CHECK_MSG(di_config_load(ck_dir, &cfg) == 0, "%s", di_error_message());
    ck = di_checkpoint_open(ck_dir, &cfg);
    CHECK_MSG(ck != NULL, "%s", di_error_message());
    if (ck) vm = vit_load(ck, &cfg, be, pool);
    CHECK_MSG(vm != NULL, "%s", di_error_message());
    if (vm) {
        CHECK(golden_n_images(&g) > 0);
        for (size_t k = 0; k < golden_n_images(&g); k++) {
            GoldenResult r;
            CHECK_MSG(golden_run_image(&g, vm, k, &r) == 0, "%s", di_error_message());
            CHECK_MSG(r.ok, "image %zu: %s", k, r.why);
            fprintf(stderr, "  %s %s: max_abs %.3g mean_abs %.3g\n", be->name, r.name, r.max_abs, r.mean_abs);
        }
        GoldenResult r;
        CHECK_MSG(golden_run_prompt(&g, vm, cfg.image_token_id, &r) == 0, "%s", di_error_message());
        CHECK_MSG(r.ok, "prompt: %s", r.why);
    }
    vit_free(vm);
    di_checkpoint_close(ck);
    di_config_free(&cfg);
    golden_close(&g);
}

TEST(golden_reference_kernels) { run_set(di_backend_cpu_ref(), NULL); }

TEST(golden_backend_threads) {
    const DiKernelBackend *be;
    CHECK(di_backend_cpu_from_env(&be) == 0);
    DiThreadPool *pool = di_pool_create(2);
    CHECK(pool != NULL);
    run_set(be, pool);
    di_pool_destroy(pool);
}

TEST(config_checks) {
    DiVisionConfig vc = {.present = true, .num_hidden_layers = 2, .hidden_size = 64, .num_attention_heads = 4,
                         .intermediate_size = 96, .patch_size = 14, .rope_theta = 10000, .downsample_ratio = 3};
    VitDims d;
    CHECK(vit_dims_from_config(&vc, 128, &d) == 0);
    CHECK_EQ_INT(d.head_dim, 16);
    CHECK_EQ_INT(d.patch_in, 588);
    CHECK_EQ_INT(d.cell_in, 576);
    DiVisionConfig bad = vc;
    bad.num_attention_heads = 3; /* 64 % 3 */
    CHECK(vit_dims_from_config(&bad, 128, &d) != 0);
    CHECK(strstr(di_error_message(), "num_attention_heads") != NULL);
    bad = vc;
    bad.num_attention_heads = 8; /* head dim 8: fine; 32 heads -> head dim 2, not a multiple of 4 */
    CHECK(vit_dims_from_config(&bad, 128, &d) == 0);
    bad.num_attention_heads = 32;
    CHECK(vit_dims_from_config(&bad, 128, &d) != 0);
    bad = vc;
    bad.num_hidden_layers = 0;
    CHECK(vit_dims_from_config(&bad, 128, &d) != 0);
    CHECK(strstr(di_error_message(), "no vision tower") != NULL);
    bad = vc;
    bad.rope_theta = -1;
    CHECK(vit_dims_from_config(&bad, 128, &d) != 0);
}

/* The official bf16-native rounding points (§5.2): near the float32 golden values (README §5:
 * ~1% relative, test at 3e-2 of the largest value), and not equal to them (rounding applied). */
TEST(bf16_numerics) {
    GoldenSet g;
    DiModelConfig cfg = {0};
    CHECK(golden_open(set_dir, &g) == 0);
    CHECK(di_config_load(ck_dir, &cfg) == 0);
    DiCheckpoint *ck = di_checkpoint_open(ck_dir, &cfg);
    VisionModel *vm = ck ? vit_load(ck, &cfg, di_backend_cpu_ref(), NULL) : NULL;
    CHECK(vm != NULL);
    if (vm) {
        vm->num = VIT_NUM_BF16;
        for (size_t k = 0; k < golden_n_images(&g); k++) {
            GoldenResult r;
            CHECK(golden_run_image(&g, vm, k, &r) == 0);
            fprintf(stderr, "  bf16 %s: max_abs %.3g max_rel %.3g\n", r.name, r.max_abs, r.max_rel);
            CHECK_MSG(r.max_rel <= 3e-2 && r.max_abs > 1e-3, "image %zu: bf16 max_abs %.3g max_rel %.3g", k, r.max_abs, r.max_rel);
        }
    }
    vit_free(vm);
    di_checkpoint_close(ck);
    di_config_free(&cfg);
    golden_close(&g);
}

TEST(bad_input) {
    DiModelConfig cfg = {0};
    CHECK(di_config_load(ck_dir, &cfg) == 0);
    DiCheckpoint *ck = di_checkpoint_open(ck_dir, &cfg);
    VisionModel *vm = ck ? vit_load(ck, &cfg, di_backend_cpu_ref(), NULL) : NULL;
    CHECK(vm != NULL);
    if (vm) {
        float p[588 * 2] = {0}, e[2 * 128];
        CHECK(vit_encode(vm, NULL, (VitGrid){1, 1}, e, NULL) != 0);
        CHECK(vit_encode(vm, p, (VitGrid){0, 1}, e, NULL) != 0);
        CHECK(strstr(di_error_message(), "patch grid") != NULL);
        p[5] = NAN;
        CHECK(vit_encode(vm, p, (VitGrid){1, 2}, e, NULL) != 0);
        CHECK(strstr(di_error_message(), "not finite") != NULL);
        p[5] = 0;
        CHECK(vit_encode(vm, p, (VitGrid){1, 2}, e, NULL) == 0); /* one cell, zero-padded */
        for (int i = 0; i < 128; i++) CHECK(isfinite(e[i]));
    }
    vit_free(vm);
    /* a text-only config has no tower */
    DiModelConfig text = cfg;
    text.vision.num_hidden_layers = 0;
    CHECK(ck == NULL || vit_load(ck, &text, di_backend_cpu_ref(), NULL) == NULL);
    di_checkpoint_close(ck);
    di_config_free(&cfg);
}

TEST(span_layout) {
    /* §7.1: START, (IMAGE x gw, NEWLINE) x gh, END; a newline after every row, the last too */
    int32_t t[16];
    CHECK_EQ_INT(vit_span_len(2, 3), 10);
    CHECK(vit_span(NULL, NULL, 2, 3, t, NULL) == 0);
    const int32_t want[10] = {0, 1, 1, 1, 2, 1, 1, 1, 2, 3};
    for (int i = 0; i < 10; i++) CHECK_EQ_INT(t[i], want[i]);
    CHECK_EQ_INT(vit_span_len(0, 3), -1);
    CHECK(vit_span(NULL, NULL, 0, 3, t, NULL) != 0);
    CHECK(vit_span(NULL, NULL, 1, 1, t, t == NULL ? NULL : (float *)t) != 0); /* rows without a model */
}

int main(void) {
    snprintf(set_dir, sizeof set_dir, "%s/golden-v41/tiny-v", test_shared_dir());
    snprintf(ck_dir, sizeof ck_dir, "%s/checkpoint", set_dir);
    RUN_TEST(config_checks);
    RUN_TEST(span_layout);
    RUN_TEST(golden_reference_kernels);
    RUN_TEST(golden_backend_threads);
    RUN_TEST(bf16_numerics);
    RUN_TEST(bad_input);
    return TEST_SUMMARY();
}
