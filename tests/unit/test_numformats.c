/* Specification of the checkpoint number formats (model-v41.md §3.3–3.5, §4.3–4.6), checked
 * against the real checkpoint bytes of §3.10 and against hand-derived rounding cases. */
#include "test.h"

#include "kernels/cpu/matmul_simd.h"
#include "kernels/cpu/roundtrip_simd.h"
#include "kernels/numformats.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

TEST(e4m3_decodes_real_checkpoint_bytes) {
    /* layers.0.attn.wkv.weight row 0 of the release, block scale 0x73 = 2^-12 (§3.10) */
    const uint8_t codes[8] = {0xd8, 0x71, 0xf2, 0x79, 0x70, 0x69, 0xf0, 0xe5};
    const float expect[8] = {-0.00390625f, 0.03515625f, -0.0390625f, 0.0703125f,
                             0.03125f, 0.017578125f, -0.03125f, -0.0126953125f};
    float scale = di_ue8m0_to_f32(0x73);
    CHECK(scale == 0x1p-12f);
    for (int i = 0; i < 8; i++) CHECK_MSG(di_e4m3_to_f32(codes[i]) * scale == expect[i], "element %d", i);
}

TEST(e2m1_decodes_real_checkpoint_bytes) {
    /* layers.0.ffn.experts.0.w1.weight row 0, scale 0x78 = 2^-7; low nibble = even column (§3.10) */
    const uint8_t bytes[8] = {0xa0, 0xa8, 0xec, 0x4a, 0xad, 0xaf, 0x42, 0xaa};
    const float expect[16] = {0, -0.0078125f, 0, -0.0078125f, -0.015625f, -0.03125f, -0.0078125f, 0.015625f,
                              -0.0234375f, -0.0078125f, -0.046875f, -0.0078125f, 0.0078125f, 0.015625f,
                              -0.0078125f, -0.0078125f};
    float scale = di_ue8m0_to_f32(0x78);
    for (int c = 0; c < 16; c++) {
        uint8_t nib = (c & 1) ? bytes[c / 2] >> 4 : bytes[c / 2] & 0xF;
        CHECK_MSG(di_e2m1_to_f32(nib) * scale == expect[c], "column %d", c);
    }
    CHECK(signbit(di_e2m1_to_f32(0xa0 & 0xF) * scale) == 0);
    CHECK(signbit(di_e2m1_to_f32(8))); /* code 8 is -0 */
}

TEST(e4m3_encode_inverts_decode_on_every_code) {
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7F) == 0x7F) continue; /* NaN */
        float v = di_e4m3_to_f32((uint8_t)c);
        CHECK_MSG(di_f32_to_e4m3(v) == c, "code 0x%02x (%g) -> 0x%02x", c, v, di_f32_to_e4m3(v));
    }
    CHECK(di_e4m3_to_f32(0x7E) == 448.0f);
    CHECK(di_e4m3_to_f32(0x01) == 0x1p-9f);
    CHECK(isnan(di_e4m3_to_f32(0x7F)) && isnan(di_e4m3_to_f32(0xFF)));
}

/* §3.3 by the formula, in double with ldexp, for every byte: the decoders must give these floats. */
TEST(e4m3_and_ue8m0_decode_every_code_to_its_value) {
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7F) == 0x7F) continue; /* NaN, checked above */
        int e = (c >> 3) & 0xF, m = c & 7;
        double mag = e == 0 ? ldexp(m / 8.0, -6) : ldexp(1.0 + m / 8.0, e - 7);
        float expect = (float)((c & 0x80) ? -mag : mag), got = di_e4m3_to_f32((uint8_t)c);
        CHECK_MSG(memcmp(&got, &expect, sizeof got) == 0, "e4m3 0x%02x: %a, expected %a", c, got, expect);
    }
    for (int b = 0; b < 255; b++) {
        float expect = (float)ldexp(1.0, b - 127), got = di_ue8m0_to_f32((uint8_t)b);
        CHECK_MSG(memcmp(&got, &expect, sizeof got) == 0, "ue8m0 %d: %a, expected %a", b, got, expect);
    }
    CHECK(isnan(di_ue8m0_to_f32(0xFF)));
}

TEST(e4m3_rounds_to_nearest_even) {
    /* between 1 (0x38) and 1.125 (0x39): the midpoint 1.0625 goes to the even mantissa (1) */
    CHECK_EQ_INT(di_f32_to_e4m3(1.0625f), 0x38);
    CHECK_EQ_INT(di_f32_to_e4m3(1.1875f), 0x3A); /* midpoint of 1.125 and 1.25 -> 1.25 (even) */
    CHECK_EQ_INT(di_f32_to_e4m3(1.07f), 0x39);
    /* subnormals: step 2^-9; 1.5 * 2^-9 ties to 2 * 2^-9 */
    CHECK_EQ_INT(di_f32_to_e4m3(1.5f * 0x1p-9f), 0x02);
    CHECK_EQ_INT(di_f32_to_e4m3(0.5f * 0x1p-9f), 0x00);
    CHECK_EQ_INT(di_f32_to_e4m3(7.5f * 0x1p-9f), 0x08); /* rounds up into the first normal */
    CHECK_EQ_INT(di_f32_to_e4m3(1000.0f), 0x7E);        /* clamped to 448 */
    CHECK_EQ_INT(di_f32_to_e4m3(-464.0f), 0xFE);
    CHECK_EQ_INT(di_f32_to_e4m3(-0.0f), 0x80);
}

TEST(e2m1_rounding_table) {
    /* §4.6, every boundary */
    const float in[] = {0.25f, 0.26f, 0.75f, 1.25f, 1.26f, 1.75f, 2.5f, 2.6f, 3.5f, 5.0f, 5.01f, 6.0f, 9.0f};
    const float out[] = {0.0f, 0.5f, 1.0f, 1.0f, 1.5f, 2.0f, 2.0f, 3.0f, 4.0f, 4.0f, 6.0f, 6.0f, 6.0f};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        CHECK_MSG(di_e2m1_to_f32(di_f32_to_e2m1(in[i])) == out[i], "%g", in[i]);
        CHECK_MSG(di_e2m1_to_f32(di_f32_to_e2m1(-in[i])) == -out[i], "-%g", in[i]);
    }
    CHECK(signbit(di_e2m1_to_f32(di_f32_to_e2m1(-0.1f)))); /* negative rounding to zero keeps -0 */
}

TEST(ue8m0_ceil_uses_exponent_bits) {
    CHECK_EQ_INT(di_ue8m0_ceil(1.0f), 127);
    CHECK_EQ_INT(di_ue8m0_ceil(1.0000001f), 128);
    CHECK_EQ_INT(di_ue8m0_ceil(0.75f), 127);
    CHECK_EQ_INT(di_ue8m0_ceil(0x1p-12f), 115);
    CHECK(di_ue8m0_to_f32(0) == 0x1p-127f);
}

TEST(bf16_round_to_nearest_even) {
    CHECK_EQ_INT(di_f32_to_bf16(1.0f), 0x3F80);
    CHECK_EQ_INT(di_f32_to_bf16(1.00390625f), 0x3F80); /* exact tie -> even */
    CHECK_EQ_INT(di_f32_to_bf16(1.01171875f), 0x3F82); /* tie between 0x3F81 and 0x3F82 -> even */
    CHECK(di_bf16_to_f32(0xC040) == -3.0f);
}

TEST(fp8_roundtrip_block32_follows_4_3) {
    float x[32];
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 16) * 0.37f;
    x[5] = 10.0f; /* amax 10 -> t = 10/448 = 0.0223 -> s = 2^-5 */
    float s = 0x1p-5f;
    float expect[32];
    for (int j = 0; j < 32; j++) expect[j] = di_e4m3_to_f32(di_f32_to_e4m3(x[j] / s)) * s;
    CHECK_EQ_INT(di_roundtrip_fp8_block32(x, 32), 0);
    for (int j = 0; j < 32; j++) CHECK(x[j] == expect[j]);
    CHECK(x[5] == 10.0f); /* 320 = 1.25 * 2^8 is representable */
    float zero[32] = {0};
    CHECK_EQ_INT(di_roundtrip_fp8_block32(zero, 32), 0);
    CHECK(zero[0] == 0.0f);
    CHECK_EQ_INT(di_roundtrip_fp8_block32(zero, 31), -1);
}

static float f32_of(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* The AVX2 round trip against the scalar definition, bit for bit (memcmp), on blocks built to hit
 * every case: each block's maximum picks the scale, the other values land on E4M3 codes, exactly
 * half-way between neighbouring codes (ties, both parities), just either side of a half-way
 * point, across the subnormal/normal boundary 2^-6, above 448 (saturation), on zeros of both
 * signs, infinities, NaN and random bit patterns. */
static void fp8_adversarial_blocks(float *a, int blocks) {
    for (int blk = 0; blk < blocks; blk++) {
        float *x = a + 32 * blk;
        int k = (int)(test_rand32() % 60) - 30;           /* scale 2^k of the block's codes */
        float s = ldexpf(1.0f, k);
        for (int j = 0; j < 32; j++) {
            uint8_t c = (uint8_t)(test_rand32() & 0xFF), c2 = (uint8_t)(c + 1);
            if ((c & 0x7F) >= 0x7E) c = 0x7D, c2 = 0x7E; /* finite codes and their upper neighbour */
            float lo = di_e4m3_to_f32(c), hi = di_e4m3_to_f32(c2), mid = 0.5f * (lo + hi);
            switch (test_rand32() % 10) {
            case 0: x[j] = lo * s; break;
            case 1: x[j] = mid * s; break;                               /* tie */
            case 2: x[j] = nextafterf(mid, INFINITY) * s; break;
            case 3: x[j] = nextafterf(mid, -INFINITY) * s; break;
            case 4: x[j] = (test_rand32() & 1 ? 1 : -1) * ldexpf(1.0f + (float)(test_rand32() % 64) / 64, -6 + (int)(test_rand32() % 3) - 1) * s;
                break;                                                   /* around 2^-6 */
            case 5: x[j] = (test_rand32() & 1 ? 1 : -1) * (448.0f + (float)(test_rand32() % 64)) * s; break; /* saturation */
            case 6: x[j] = test_rand32() & 1 ? 0.0f : -0.0f; break;
            case 7: x[j] = f32_of(test_rand32() * 2654435761u); break;         /* any bits, NaN included */
            default: x[j] = ((float)(test_rand32() % 20001) - 10000.0f) * 1e-4f * s; break;
            }
        }
        if (blk % 97 == 0) x[test_rand32() % 32] = test_rand32() & 1 ? INFINITY : -INFINITY;
        if (blk % 89 == 0) x[test_rand32() % 32] = NAN;
        if (blk % 83 == 0) memset(x, 0, 32 * sizeof *x);                 /* amax 0: the 1e-4 floor */
    }
}

TEST(fp8_roundtrip_simd_equals_the_scalar_definition) {
    if (!di_simd_available()) return; /* nothing to compare on a CPU without AVX2 */
    enum { BLOCKS = 20000 };
    float *a = malloc(sizeof(float) * 32 * BLOCKS), *b = malloc(sizeof(float) * 32 * BLOCKS);
    CHECK(a && b);
    if (!a || !b) return;
    fp8_adversarial_blocks(a, BLOCKS);
    memcpy(b, a, sizeof(float) * 32 * BLOCKS);
    CHECK_EQ_INT(di_roundtrip_fp8_block32(a, 32 * BLOCKS), 0);
    di_simd_roundtrip_fp8_block32(b, 32 * BLOCKS);
    int differ = 0;
    for (int i = 0; i < 32 * BLOCKS; i++) differ += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    CHECK_EQ_INT(differ, 0);
    free(a);
    free(b);
}

/* The wire form of the FP8 round trip (expert-parallel dispatch): a hand-derived block, then
 * decode(encode(x)) against the scalar round trip (and the SIMD one the model calls) bit for bit
 * on the adversarial blocks above. */
TEST(fp8_quant_dequant_equals_the_roundtrip) {
    float x[32];
    uint8_t codes[32], scale[1];
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 16) * 0.37f;
    x[5] = 10.0f; /* s = 2^-5: scale byte 127 - 5; 10 / s = 320 = 1.25 * 2^8: code (15 << 3) | 2 */
    CHECK_EQ_INT(di_quant_fp8_block32(x, 32, codes, scale), 0);
    CHECK_EQ_INT(scale[0], 122);
    CHECK_EQ_INT(codes[5], 0x7A);
    CHECK_EQ_INT(codes[16], 0x00);
    CHECK_EQ_INT(di_quant_fp8_block32(x, 31, codes, scale), -1);
    CHECK_EQ_INT(di_dequant_fp8_block32(codes, scale, 16, x), -1);
    enum { BLOCKS = 20000 };
    size_t n = 32 * BLOCKS;
    float *a = malloc(sizeof(float) * n), *want = malloc(sizeof(float) * n), *simd = malloc(sizeof(float) * n),
          *got = malloc(sizeof(float) * n);
    uint8_t *c = malloc(n), *sc = malloc(BLOCKS);
    CHECK(a && want && simd && got && c && sc);
    if (!a || !want || !simd || !got || !c || !sc) return;
    fp8_adversarial_blocks(a, BLOCKS);
    memcpy(want, a, sizeof(float) * n);
    memcpy(simd, a, sizeof(float) * n);
    CHECK_EQ_INT(di_roundtrip_fp8_block32(want, n), 0);
    if (di_simd_available()) di_simd_roundtrip_fp8_block32(simd, n);
    else memcpy(simd, want, sizeof(float) * n);
    CHECK_EQ_INT(di_quant_fp8_block32(a, n, c, sc), 0);
    CHECK_EQ_INT(di_dequant_fp8_block32(c, sc, n, got), 0);
    int differ = 0, differ_simd = 0;
    for (size_t i = 0; i < n; i++) {
        differ += memcmp(&got[i], &want[i], sizeof(float)) != 0;
        differ_simd += memcmp(&got[i], &simd[i], sizeof(float)) != 0;
    }
    CHECK_EQ_INT(differ, 0);
    CHECK_EQ_INT(differ_simd, 0);
    free(a);
    free(want);
    free(simd);
    free(got);
    free(c);
    free(sc);
}

TEST(fp4_roundtrips_follow_4_5) {
    float x[32];
    for (int j = 0; j < 32; j++) x[j] = 0.1f * (float)(j % 7) - 0.25f;
    x[0] = 3.0f; /* amax 3 -> 3/6 = 0.5 -> s = 0.5 exactly */
    float copy[32];
    memcpy(copy, x, sizeof x);
    CHECK_EQ_INT(di_roundtrip_fp4_ue8m0_block32(x, 32), 0);
    for (int j = 0; j < 32; j++) CHECK(x[j] == di_e2m1_to_f32(di_f32_to_e2m1(copy[j] / 0.5f)) * 0.5f);
    /* E4M3 scale per 16: amax 0.9 -> s = e4m3(0.15) = 0.15625 (not a power of two) */
    float y[16] = {0.9f, -0.3f, 0.2f, 0.0f, 0.5f, 0.1f, -0.9f, 0.7f, 0.4f, 0.33f, -0.05f, 0.6f, 0.8f, 0.25f, 0.45f, -0.2f};
    float ycopy[16];
    memcpy(ycopy, y, sizeof y);
    float s = di_e4m3_to_f32(di_f32_to_e4m3(0.9f / 6.0f));
    CHECK(s == 0.15625f);
    CHECK_EQ_INT(di_roundtrip_fp4_e4m3_block16(y, 16), 0);
    for (int j = 0; j < 16; j++) CHECK(y[j] == di_e2m1_to_f32(di_f32_to_e2m1(ycopy[j] / s)) * s);
    CHECK(y[0] == 0.9375f); /* 0.9 / 0.15625 = 5.76 -> 6 */
}

int main(void) {
    RUN_TEST(e4m3_decodes_real_checkpoint_bytes);
    RUN_TEST(e2m1_decodes_real_checkpoint_bytes);
    RUN_TEST(e4m3_encode_inverts_decode_on_every_code);
    RUN_TEST(e4m3_and_ue8m0_decode_every_code_to_its_value);
    RUN_TEST(e4m3_rounds_to_nearest_even);
    RUN_TEST(e2m1_rounding_table);
    RUN_TEST(ue8m0_ceil_uses_exponent_bits);
    RUN_TEST(bf16_round_to_nearest_even);
    RUN_TEST(fp8_roundtrip_block32_follows_4_3);
    RUN_TEST(fp8_roundtrip_simd_equals_the_scalar_definition);
    RUN_TEST(fp8_quant_dequant_equals_the_roundtrip);
    RUN_TEST(fp4_roundtrips_follow_4_5);
    return TEST_SUMMARY();
}
