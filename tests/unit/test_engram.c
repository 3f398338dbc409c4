/* test_engram.c — Engram hashing (§5.2): the numpy-compatible multiplier generator against the
 * values of the spec (release layers 1 and 14, §5.2 d; §9.3 tiny) and of golden tiny-a, numpy's
 * 32-bit bounded path against numpy output, and the row ids of the whole golden sequence —
 * hashed in one chunk and token by token through the request state's look-back history. */
#include "test.h"

#include "base/error.h"
#include "model/engram.h"
#include "model/engram_rng.h"
#include "golden/golden.h"
#include "model/state.h"

#include <stdio.h>
#include <string.h>

TEST(multipliers_match_the_release_table) {
    /* model-v41.md §5.2 (d), C = 99092 */
    const int64_t l1[4] = {76632096046245, 4839876093313, 35959672319349, 73987337458391};
    const int64_t l14[4] = {67716810739261, 51510806800915, 30921347202721, 82619226485591};
    int64_t m[4];
    CHECK(engram_multipliers(1, 99092, 4, m) == 0);
    for (int i = 0; i < 4; i++) CHECK_EQ_INT(m[i], l1[i]);
    CHECK(engram_multipliers(14, 99092, 4, m) == 0);
    for (int i = 0; i < 4; i++) CHECK_EQ_INT(m[i], l14[i]);
}

TEST(multipliers_match_the_tiny_spec) {
    /* §9.3: layer 1, C = 128 */
    const int64_t want[4] = {59325216104801821, 3746820326864245, 27838405073976279, 57277759714273633};
    int64_t m[4];
    CHECK(engram_multipliers(1, 128, 4, m) == 0);
    for (int i = 0; i < 4; i++) CHECK_EQ_INT(m[i], want[i]);
}

TEST(numpy_32bit_bounded_path) {
    /* numpy 1.x/2.x: np.random.default_rng(5).integers(0, 1000, size=6, dtype=np.int64) */
    const int64_t want[6] = {670, 805, 22, 807, 468, 515};
    int64_t v[6];
    CHECK(engram_numpy_integers(5, 1000, 6, v) == 0);
    for (int i = 0; i < 6; i++) CHECK_EQ_INT(v[i], want[i]);
    CHECK(engram_numpy_integers(5, 0, 6, v) == -1);
    CHECK(engram_multipliers(1, 0, 4, v) == -1);
}

static GoldenSet golden;
static Model *model;

TEST(golden_multipliers_primes_and_offsets) {
    GoldenArray mult, primes, offs;
    const ModelDims *d = &model->d;
    int cols = engram_columns(d);
    CHECK(golden_array(&golden, "engram.hash_multipliers", "i64", 2, NULL, &mult) == 0);
    CHECK(golden_array(&golden, "engram.hash_primes", "i64", 2, NULL, &primes) == 0);
    CHECK(golden_array(&golden, "engram.hash_offsets", "i64", 2, NULL, &offs) == 0);
    if (!mult.data || !primes.data || !offs.data) return;
    CHECK_EQ_INT(mult.shape[0], d->n_engram);
    CHECK_EQ_INT(primes.shape[1], cols);
    for (int l = 0; l < d->n_engram; l++) {
        for (int k = 0; k < d->engram_max_ngram; k++)
            CHECK_EQ_INT(model->engram[l].mult[k], ((const int64_t *)mult.data)[l * d->engram_max_ngram + k]);
        for (int c = 0; c < cols; c++) {
            CHECK_EQ_INT(model->engram[l].prime[c], ((const int64_t *)primes.data)[l * cols + c]);
            CHECK_EQ_INT(model->engram[l].offset[c], ((const int64_t *)offs.data)[l * cols + c]);
        }
    }
}

TEST(row_ids_one_shot_and_token_by_token) {
    const ModelDims *d = &model->d;
    int cols = engram_columns(d);
    int64_t T = golden.seq_len, width = (int64_t)d->n_engram * cols;
    GoldenArray ids, want;
    CHECK(golden_array(&golden, "input_ids", "i32", 1, NULL, &ids) == 0);
    CHECK(golden_array(&golden, "engram.row_ids", "i64", 3, NULL, &want) == 0);
    if (!ids.data || !want.data) return;
    int64_t *got = calloc((size_t)(T * width), sizeof *got);
    RunState *st = state_create(d);
    CHECK(engram_hash(model, st, ids.data, T, 0, got) == 0);
    CHECK(memcmp(got, want.data, (size_t)(T * width) * sizeof *got) == 0);
    /* token by token: the look-back comes from the state history */
    memset(got, 0xff, (size_t)(T * width) * sizeof *got);
    for (int64_t p = 0; p < T; p++) {
        CHECK(engram_hash(model, st, (const int32_t *)ids.data + p, 1, p, got + p * width) == 0);
        engram_push_history(model, st, (const int32_t *)ids.data + p, 1);
    }
    CHECK(memcmp(got, want.data, (size_t)(T * width) * sizeof *got) == 0);
    /* a token outside the map is an error, not a wrapped id */
    int32_t bad = (int32_t)model->token_map_len;
    CHECK(engram_hash(model, st, &bad, 1, T, got) == -1);
    CHECK(strstr(di_error_message(), "compressed token map") != NULL);
    state_free(st);
    free(got);
}

int main(void) {
    RUN_TEST(multipliers_match_the_release_table);
    RUN_TEST(multipliers_match_the_tiny_spec);
    RUN_TEST(numpy_32bit_bounded_path);
    char dir[600], ck[700];
    snprintf(dir, sizeof dir, "%s/golden-v41/tiny-a", test_shared_dir());
    snprintf(ck, sizeof ck, "%s/checkpoint", dir);
    if (golden_open(dir, &golden) != 0 || !(model = model_load(ck, MODE_EXACT)) || golden_prepare_model(&golden, model) != 0) {
        fprintf(stderr, "cannot load golden tiny-a: %s\n", di_error_message());
        return 1;
    }
    RUN_TEST(golden_multipliers_primes_and_offsets);
    RUN_TEST(row_ids_one_shot_and_token_by_token);
    model_free(model);
    golden_close(&golden);
    return TEST_SUMMARY();
}
