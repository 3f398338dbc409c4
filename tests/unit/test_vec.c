/* test_vec.c — kernels/vec.h: the vector loops give, bit for bit, what their scalar reading gives
 * (a separate multiply and add per element), for every length and alignment. */
#include "test.h"

#include "kernels/vec.h"

static float rand_float(void) { return ((float)test_rand32() / 4294967296.0f - 0.5f) * 64.0f; }

/* The definition, one element at a time; volatile keeps the compiler from vectorising or fusing it. */
static void add_scaled_by_definition(float *y, float a, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        volatile float product = a * x[i];
        y[i] = y[i] + product;
    }
}

TEST(add_scaled_equals_the_scalar_definition_bit_for_bit) {
    enum { MAX = 77 };
    float x[MAX + 3], y[MAX + 3], expect[MAX + 3];
    for (int offset = 0; offset < 3; offset++) /* unaligned starts */
        for (int64_t n = 0; n <= MAX; n++) {
            float a = rand_float();
            for (int i = 0; i < MAX + 3; i++) x[i] = rand_float(), y[i] = expect[i] = rand_float();
            di_vec_add_scaled(y + offset, a, x + offset, n);
            add_scaled_by_definition(expect + offset, a, x + offset, n);
            CHECK_MSG(memcmp(y, expect, sizeof y) == 0, "n = %lld, offset %d", (long long)n, offset);
        }
}

TEST(add_scaled_keeps_special_values) {
    float x[9] = {INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 1e-45f, 3.4e38f, 1.0f, 2.0f};
    float y[9] = {1.0f, 1.0f, 1.0f, -0.0f, -0.0f, 0.0f, 3.4e38f, -1.0f, 0.5f};
    di_vec_add_scaled(y, 2.0f, x, 9);
    CHECK(isinf(y[0]) && y[0] > 0 && isinf(y[1]) && y[1] < 0 && isnan(y[2]));
    CHECK(y[3] == 0.0f && !signbit(y[3]));          /* -0 + 2*0 = +0 */
    CHECK(y[4] == 0.0f && signbit(y[4]));           /* -0 + 2*(-0) = -0 */
    CHECK(y[5] == 2 * 1e-45f);                      /* subnormals kept, not flushed */
    CHECK(isinf(y[6]));                             /* overflow */
    CHECK(y[7] == 1.0f && y[8] == 4.5f);
}

/* The scalar dot product, one element at a time (volatile: no vectorising, no fusing). */
static float dot_by_definition(const float *q, const float *row, int64_t n) {
    float dot = 0;
    for (int64_t c = 0; c < n; c++) {
        volatile float product = q[c] * row[c];
        dot = dot + product;
    }
    return dot;
}

TEST(dot_rows8_equals_eight_scalar_dot_products_bit_for_bit) {
    enum { MAX = 77, ROWS = 11 };
    float q[MAX + 3], data[ROWS][MAX + 3];
    for (int offset = 0; offset < 3; offset++)
        for (int64_t n = 0; n <= MAX; n++) {
            for (int i = 0; i < MAX + 3; i++) q[i] = rand_float();
            for (int r = 0; r < ROWS; r++)
                for (int i = 0; i < MAX + 3; i++) data[r][i] = rand_float();
            const float *rows[8]; /* rows out of order and one repeated, as key lists can be */
            const int pick[8] = {3, 0, 7, 10, 1, 1, 5, 8};
            for (int l = 0; l < 8; l++) rows[l] = data[pick[l]] + offset;
            float out[8];
            di_vec_dot_rows8(q + offset, rows, n, out);
            for (int l = 0; l < 8; l++) {
                float expect = dot_by_definition(q + offset, rows[l], n);
                CHECK_MSG(memcmp(&out[l], &expect, sizeof expect) == 0, "n = %lld, offset %d, row %d: %.9g vs %.9g",
                          (long long)n, offset, l, out[l], expect);
            }
        }
}

TEST(transpose8_moves_every_element) {
    float data[8][13];
    const float *rows[8];
    for (int l = 0; l < 8; l++) {
        for (int c = 0; c < 13; c++) data[l][c] = (float)(100 * l + c);
        rows[l] = data[l];
    }
    DiVec8 col[8];
    di_vec_transpose8(rows, 5, col);
    for (int k = 0; k < 8; k++)
        for (int l = 0; l < 8; l++) CHECK_MSG(col[k][l] == data[l][5 + k], "column %d, row %d: %g", k, l, col[k][l]);
}

int main(void) {
    RUN_TEST(dot_rows8_equals_eight_scalar_dot_products_bit_for_bit);
    RUN_TEST(transpose8_moves_every_element);
    RUN_TEST(add_scaled_equals_the_scalar_definition_bit_for_bit);
    RUN_TEST(add_scaled_keeps_special_values);
    return TEST_SUMMARY();
}
