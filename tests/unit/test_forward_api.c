/* test_forward_api.c — the public model API (deepinfer.h, model section): load, Engram map,
 * state, forward in two chunks against the golden exact-mode logits of tiny-a, a DSpark draft,
 * and argument errors (wrong mode name, state of another model, missing pointers). */
#include "test.h"

#include "deepinfer.h"
#include "golden/golden.h"

#include <stdio.h>
#include <string.h>

static GoldenSet golden;
static char ckdir[700];

TEST(forward_through_the_public_api) {
    DiModel *m = di_model_load(ckdir, "exact");
    CHECK_MSG(m != NULL, "%s", di_last_error());
    if (!m) return;
    GoldenArray map, ids, want;
    CHECK(golden_array(&golden, "engram.token_map", "i32", 1, NULL, &map) == 0);
    CHECK(golden_array(&golden, "input_ids", "i32", 1, NULL, &ids) == 0);
    CHECK(golden_array(&golden, "exact.prefill.logits", "f32", 2, NULL, &want) == 0);
    int32_t V = di_model_vocab_size(m);
    CHECK_EQ_INT(V, want.shape[1]);
    DiModelState *s = di_model_state_new(m);
    float *lg = calloc((size_t)V * 12, sizeof(float));
    CHECK(di_model_forward(m, s, ids.data, 4, 0, lg, 1) == -1); /* no Engram map yet */
    CHECK(di_model_set_engram_token_map(m, map.data, map.shape[0]) == 0);
    CHECK(di_model_set_threads(m, 2) == 0);
    CHECK(di_model_forward(m, s, ids.data, 7, 0, lg, 1) == 0);
    CHECK(di_model_forward(m, s, (const int32_t *)ids.data + 7, 5, 7, lg + 7 * V, 1) == 0);
    CHECK_EQ_INT(di_model_state_positions(s), 12);
    double e = 0;
    for (int64_t i = 0; i < 12 * V; i++) e = fmax(e, fabs(lg[i] - ((const float *)want.data)[i]));
    CHECK_MSG(e <= 1e-4, "max_abs %g", e);
    int B = di_model_draft_block_size(m);
    CHECK(B > 0);
    float *b1 = calloc((size_t)(B * V), sizeof(float)), *b2 = calloc((size_t)(B * V), sizeof(float)), conf[64];
    int32_t tok[64];
    CHECK(di_model_draft(m, s, 5, NULL, b1, b2, conf, tok) == 0);
    for (int r = 0; r < B; r++) CHECK(tok[r] >= 0 && tok[r] < V);
    /* a state belongs to its model */
    DiModel *other = di_model_load(ckdir, NULL);
    CHECK(other != NULL);
    CHECK(di_model_forward(other, s, ids.data, 1, 12, lg, 0) == -1);
    CHECK(strstr(di_last_error(), "another model") != NULL);
    di_model_free(other);
    di_model_state_free(s);
    di_model_free(m);
    free(lg);
    free(b1);
    free(b2);
}

TEST(bad_arguments) {
    CHECK(di_model_load(ckdir, "fp16") == NULL);
    CHECK(strstr(di_last_error(), "fp16") != NULL);
    CHECK(di_model_load(NULL, NULL) == NULL);
    CHECK(di_model_state_new(NULL) == NULL);
    CHECK(di_model_forward(NULL, NULL, NULL, 1, 0, NULL, 0) == -1);
    CHECK(di_model_vocab_size(NULL) == -1);
    di_model_free(NULL);
    di_model_state_free(NULL);
}

int main(void) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/golden-v41/tiny-a", test_shared_dir());
    snprintf(ckdir, sizeof ckdir, "%s/checkpoint", dir);
    if (golden_open(dir, &golden) != 0) return 1;
    RUN_TEST(forward_through_the_public_api);
    RUN_TEST(bad_arguments);
    golden_close(&golden);
    return TEST_SUMMARY();
}
