/* numformats.c — scalar, bit-exact number formats and round trips (see numformats.h). */
#include "kernels/numformats.h"

#include "base/error.h"

#include <math.h>
#include <string.h>

/* 2^e for -126 <= e <= 127, from its bits: ldexpf is a libm call per value, and the Engram
 * table rows decoded per token made it ~3% of a batch-1 decode step on the main thread. */
static inline float pow2_normal(int e) {
    uint32_t bits = (uint32_t)(e + 127) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

float di_e4m3_to_f32(uint8_t code) {
    int sign = code >> 7, exp = (code >> 3) & 0xF, man = code & 7;
    if (exp == 0xF && man == 7) return NAN;
    float mag = exp == 0 ? (float)man * 0x1p-9f                         /* (m/8) * 2^-6 */
                         : (float)(8 + man) * pow2_normal(exp - 7 - 3); /* (1 + m/8) * 2^(e-7) */
    return sign ? -mag : mag;
}

uint8_t di_f32_to_e4m3(float x) {
    if (isnan(x)) return 0x7F;
    uint8_t sign = signbit(x) ? 0x80 : 0;
    float a = fabsf(x);
    if (a > DI_E4M3_MAX) a = DI_E4M3_MAX;
    if (a < 0x1p-6f) {
        /* subnormal grid step 2^-9; m == 8 is exactly the smallest normal (code 0x08) */
        int m = (int)rintf(a * 512.0f);
        return sign | (uint8_t)m;
    }
    int e2;
    float f = frexpf(a, &e2); /* a = f * 2^e2, f in [0.5, 1) */
    int unbiased = e2 - 1;
    int m = (int)rintf((f * 2.0f - 1.0f) * 8.0f); /* exact: the product has few bits */
    if (m == 8) {
        m = 0;
        unbiased++;
    }
    return sign | (uint8_t)(((unbiased + 7) << 3) | m);
}

static const float e2m1_values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

float di_e2m1_to_f32(uint8_t code) {
    float mag = e2m1_values[code & 7];
    return (code & 8) ? -mag : mag;
}

uint8_t di_f32_to_e2m1(float x) {
    uint8_t sign = signbit(x) ? 8 : 0;
    float a = fabsf(x);
    uint8_t c;
    /* §4.6: ties at 0.25, 1.25, 2.5, 5 go down to the even code; 0.75, 1.75, 3.5 go up */
    if (isnan(a) || a <= 0.25f) c = 0;
    else if (a < 0.75f) c = 1;
    else if (a <= 1.25f) c = 2;
    else if (a < 1.75f) c = 3;
    else if (a <= 2.5f) c = 4;
    else if (a < 3.5f) c = 5;
    else if (a <= 5.0f) c = 6;
    else c = 7;
    return sign | c;
}

float di_ue8m0_to_f32(uint8_t b) {
    if (b == 0xFF) return NAN;
    return b ? pow2_normal((int)b - 127) : 0x1p-127f; /* b = 0: the subnormal 2^-127 */
}

uint8_t di_ue8m0_ceil(float t) {
    uint32_t bits;
    memcpy(&bits, &t, sizeof bits);
    uint32_t exp = (bits >> 23) & 0xFF;
    if (bits & 0x7FFFFF) exp++;
    return exp > 254 ? 254 : (uint8_t)exp;
}

float di_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

uint16_t di_f32_to_bf16(float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    if ((bits & 0x7F800000) == 0x7F800000 && (bits & 0x7FFFFF)) return (uint16_t)((bits >> 16) | 0x40);
    bits += 0x7FFF + ((bits >> 16) & 1);
    return (uint16_t)(bits >> 16);
}

/* The largest |x|, NaN ignored (quiet or signalling: glibc's fmaxf returns NaN for a
 * signalling NaN, which would reset the maximum). */
static float block_amax(const float *x, size_t n) {
    float amax = 0.0f;
    for (size_t j = 0; j < n; j++) {
        float a = fabsf(x[j]);
        if (a > amax) amax = a;
    }
    return amax;
}

/* §4.3's scale byte of one block of 32: 2^ceil(log2(max(amax, 1e-4) / 448)). */
static uint8_t fp8_block32_scale(const float *x) { return di_ue8m0_ceil(fmaxf(block_amax(x, 32), 1e-4f) * (1.0f / 448.0f)); }

int di_roundtrip_fp8_block32(float *x, size_t n) {
    if (!x || n % 32) return di_errorf("fp8 round trip: length %zu is not a multiple of 32", n);
    for (size_t b = 0; b < n; b += 32) {
        float s = di_ue8m0_to_f32(fp8_block32_scale(x + b));
        for (int j = 0; j < 32; j++) x[b + j] = di_e4m3_to_f32(di_f32_to_e4m3(x[b + j] / s)) * s;
    }
    return 0;
}

int di_quant_fp8_block32(const float *x, size_t n, uint8_t *codes, uint8_t *scales) {
    if (!x || !codes || !scales || n % 32) return di_errorf("fp8 quantisation: length %zu is not a multiple of 32", n);
    for (size_t b = 0; b < n; b += 32) {
        uint8_t sb = fp8_block32_scale(x + b);
        float s = di_ue8m0_to_f32(sb);
        scales[b / 32] = sb;
        for (int j = 0; j < 32; j++) codes[b + j] = di_f32_to_e4m3(x[b + j] / s);
    }
    return 0;
}

int di_dequant_fp8_block32(const uint8_t *codes, const uint8_t *scales, size_t n, float *x) {
    if (!x || !codes || !scales || n % 32) return di_errorf("fp8 dequantisation: length %zu is not a multiple of 32", n);
    for (size_t b = 0; b < n; b += 32) {
        float s = di_ue8m0_to_f32(scales[b / 32]);
        for (int j = 0; j < 32; j++) x[b + j] = di_e4m3_to_f32(codes[b + j]) * s;
    }
    return 0;
}

int di_roundtrip_fp4_ue8m0_block32(float *x, size_t n) {
    if (!x || n % 32) return di_errorf("fp4 round trip: length %zu is not a multiple of 32", n);
    for (size_t b = 0; b < n; b += 32) {
        float a = fmaxf(block_amax(x + b, 32), 6.0f * 0x1p-126f);
        float s = di_ue8m0_to_f32(di_ue8m0_ceil(a * (1.0f / 6.0f)));
        for (int j = 0; j < 32; j++) x[b + j] = di_e2m1_to_f32(di_f32_to_e2m1(x[b + j] / s)) * s;
    }
    return 0;
}

int di_roundtrip_fp4_e4m3_block16(float *x, size_t n) {
    if (!x || n % 16) return di_errorf("fp4 round trip: length %zu is not a multiple of 16", n);
    for (size_t b = 0; b < n; b += 16) {
        float a = fmaxf(block_amax(x + b, 16), 6.0f * 0x1p-9f);
        float s = di_e4m3_to_f32(di_f32_to_e4m3(a / 6.0f));
        for (int j = 0; j < 16; j++) x[b + j] = di_e2m1_to_f32(di_f32_to_e2m1(x[b + j] / s)) * s;
    }
    return 0;
}
