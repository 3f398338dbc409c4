/* matmul_ref.c — the readable definition of every weight format's matrix product (matmul.h).
 * Slow on purpose: one output at a time, the stored value decoded exactly, ascending columns.
 * The optimised kernels are tested against this file. */
#include "kernels/matmul.h"

#include "base/error.h"
#include "kernels/numformats.h"

#include <math.h>
#include <stdlib.h>

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t di_matrix_data_bytes(const DiMatrix *w) {
    switch (w->format) {
    case DI_MAT_F32: return w->rows * w->cols * 4;
    case DI_MAT_BF16: return w->rows * w->cols * 2;
    case DI_MAT_FP8_BLOCK: return w->rows * w->cols;
    case DI_MAT_FP4_ROW32: return w->rows * (w->cols / 2);
    }
    return -1;
}

int64_t di_matrix_scale_bytes(const DiMatrix *w) {
    switch (w->format) {
    case DI_MAT_FP8_BLOCK: return ceil_div(w->rows, 32) * ceil_div(w->cols, 32);
    case DI_MAT_FP4_ROW32: return w->rows * (w->cols / 32);
    default: return 0;
    }
}

int di_matrix_validate(const DiMatrix *w, const char *name) {
    name = name ? name : "matrix";
    if (!w) return di_errorf("%s: no matrix", name);
    if (w->format < DI_MAT_F32 || w->format > DI_MAT_FP4_ROW32) return di_errorf("%s: unknown format %d", name, (int)w->format);
    if (w->rows <= 0 || w->cols <= 0 || w->rows > (1LL << 31) || w->cols > (1LL << 31))
        return di_errorf("%s: invalid shape [%lld, %lld]", name, (long long)w->rows, (long long)w->cols);
    if (!w->data) return di_errorf("%s: no data", name);
    if (w->format == DI_MAT_FP4_ROW32 && w->cols % 32)
        return di_errorf("%s: FP4 matrix needs a column count divisible by 32, got %lld", name, (long long)w->cols);
    if ((w->format == DI_MAT_FP8_BLOCK || w->format == DI_MAT_FP4_ROW32) && !w->scale)
        return di_errorf("%s: quantised matrix without scales", name);
    return 0;
}

int64_t di_matrix_row_align(const DiMatrix *w) { return w && w->format == DI_MAT_FP8_BLOCK ? 32 : 1; }

int di_matrix_rows(const DiMatrix *w, int64_t r0, int64_t len, DiMatrix *out) {
    if (di_matrix_validate(w, "matrix") != 0) return -1;
    if (!out) return di_errorf("di_matrix_rows: no output given");
    if (r0 < 0 || len <= 0 || r0 > w->rows - len)
        return di_errorf("matrix rows [%lld, %lld) outside [0, %lld)", (long long)r0, (long long)(r0 + len),
                         (long long)w->rows);
    if (r0 % di_matrix_row_align(w) != 0)
        return di_errorf("FP8 matrix rows must start on a 32-row scale block, not at row %lld", (long long)r0);
    *out = *w;
    out->rows = len;
    switch (w->format) {
    case DI_MAT_F32: out->data = (const float *)w->data + r0 * w->cols; break;
    case DI_MAT_BF16: out->data = (const uint16_t *)w->data + r0 * w->cols; break;
    case DI_MAT_FP8_BLOCK:
        out->data = (const uint8_t *)w->data + r0 * w->cols;
        out->scale = w->scale + (r0 / 32) * ceil_div(w->cols, 32);
        if (w->fp8_subnormal_map) out->fp8_subnormal_map = w->fp8_subnormal_map + (r0 / 8) * ceil_div(w->cols, 32);
        break;
    case DI_MAT_FP4_ROW32:
        out->data = (const uint8_t *)w->data + r0 * (w->cols / 2);
        out->scale = w->scale + r0 * (w->cols / 32);
        break;
    }
    return 0;
}

/* The E2M1 code of column c of FP4 row r (§3.3: low nibble = even column). */
static uint8_t fp4_code_at(const DiMatrix *w, int64_t r, int64_t c) {
    uint8_t byte = ((const uint8_t *)w->data)[r * (w->cols / 2) + c / 2];
    return (c & 1) ? (uint8_t)(byte >> 4) : (uint8_t)(byte & 0xF);
}

static float weight_at(const DiMatrix *w, int64_t r, int64_t c) {
    switch (w->format) {
    case DI_MAT_F32: return ((const float *)w->data)[r * w->cols + c];
    case DI_MAT_BF16: return di_bf16_to_f32(((const uint16_t *)w->data)[r * w->cols + c]);
    case DI_MAT_FP8_BLOCK: {
        uint8_t code = ((const uint8_t *)w->data)[r * w->cols + c];
        uint8_t s = w->scale[(r / 32) * ceil_div(w->cols, 32) + c / 32];
        return di_e4m3_to_f32(code) * di_ue8m0_to_f32(s);
    }
    case DI_MAT_FP4_ROW32: {
        uint8_t s = w->scale[r * (w->cols / 32) + c / 32];
        return di_e2m1_to_f32(fp4_code_at(w, r, c)) * di_ue8m0_to_f32(s);
    }
    }
    return 0.0f;
}

int di_matrix_row(const DiMatrix *w, int64_t r, float *out) {
    if (di_matrix_validate(w, "matrix") != 0) return -1;
    if (r < 0 || r >= w->rows || !out) return di_errorf("matrix row %lld out of range [0, %lld)", (long long)r, (long long)w->rows);
    if (w->format == DI_MAT_BF16) { /* the embeddings, read every token: one loop, not weight_at's switch per value */
        const uint16_t *h = (const uint16_t *)w->data + r * w->cols;
        for (int64_t c = 0; c < w->cols; c++) out[c] = di_bf16_to_f32(h[c]);
        return 0;
    }
    for (int64_t c = 0; c < w->cols; c++) out[c] = weight_at(w, r, c);
    return 0;
}

int di_matmul_ref(const DiMatrix *w, const float *x, int64_t n_tokens, float *y) {
    if (di_matrix_validate(w, "matmul weight") != 0) return -1;
    if (!x || !y || n_tokens < 0) return di_errorf("matmul: invalid activations");
    for (int64_t t = 0; t < n_tokens; t++)
        for (int64_t r = 0; r < w->rows; r++) {
            float acc = 0.0f;
            for (int64_t c = 0; c < w->cols; c++) acc += weight_at(w, r, c) * x[t * w->cols + c];
            y[t * w->rows + r] = acc;
        }
    return 0;
}

/* Block order for FP4 (matmul.h): per row, 8 lanes, each block's four-term sums first. */
static float fp4_block_order_dot(const DiMatrix *w, int64_t r, const float *x) {
    const uint8_t *scales = w->scale + r * (w->cols / 32);
    float acc[8] = {0};
    for (int64_t kb = 0; kb < w->cols / 32; kb++) {
        float s = di_ue8m0_to_f32(scales[kb]) * 0.5f; /* 2^(b-128), exact; NaN for b = 255 */
        for (int lane = 0; lane < 8; lane++) {
            int h = lane / 4, k = lane % 4;
            float p = 0.0f;
            for (int g = 0; g < 4; g++) {
                int64_t c = 32 * kb + 8 * k + h + 2 * g;
                float d = 2.0f * di_e2m1_to_f32(fp4_code_at(w, r, c));
                p = g == 0 ? d * x[c] : fmaf(d, x[c], p);
            }
            acc[lane] = fmaf(p, s, acc[lane]);
        }
    }
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

int di_matmul_ref_qa(const DiMatrix *w, const float *x, int64_t n_tokens, float *y) {
    if (di_matrix_validate(w, "matmul weight") != 0) return -1;
    if (w->format != DI_MAT_FP4_ROW32) return di_matmul_ref(w, x, n_tokens, y);
    if (!x || !y || n_tokens < 0) return di_errorf("matmul: invalid activations");
    for (int64_t t = 0; t < n_tokens; t++)
        for (int64_t r = 0; r < w->rows; r++) y[t * w->rows + r] = fp4_block_order_dot(w, r, x + t * w->cols);
    return 0;
}
