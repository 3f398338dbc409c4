/* test_backend.c — the CPU backend tables (kernels/backend.h; on aarch64 the NEON one): which table cpuid and the
 * DEEPINFER_KERNELS value select (the AVX-512 tiles by default only where they pay; an error
 * where the CPU lacks what the value demands), that every table fills every op, that the SIMD
 * tables give the reference table's bits where the contract says so (attention heads, FP8
 * round trip) and stay within 3 ulp of exp where it does not (SwiGLU), and the reference ops on
 * hand-derived cases and a brute-force top-k. */
#include "test.h"

#include "base/error.h"
#include "kernels/activations.h"
#include "kernels/backend.h"
#include "kernels/cpu/matmul_simd.h"
#include "kernels/numformats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static float rnd(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 40) / (double)(1ULL << 24) * 2.0 - 1.0);
}

/* The tables this CPU can run (the registry): the reference, then whichever SIMD ones the CPU allows. */
static int tables(const DiKernelBackend *out[DI_BACKEND_CPU_TABLES_MAX]) {
    int n = di_backend_cpu_tables(out, DI_BACKEND_CPU_TABLES_MAX);
    CHECK(n >= 1 && out[0] == di_backend_cpu_ref());
    return n;
}

/* The registry lists what the knobs select: ref first, then the SIMD tables on auto's route. */
TEST(registry_lists_every_table_this_cpu_runs) {
    const DiKernelBackend *t[DI_BACKEND_CPU_TABLES_MAX], *be = NULL;
    int n = tables(t);
#if defined(__x86_64__)
    CHECK_EQ_INT(n, 1 + di_simd_available() + di_simd_avx512_available());
    if (n > 1) CHECK(di_backend_cpu_select((DiEnvKernelKnobs){.kernels = DI_ENV_KERNELS_AVX2}, &be) == 0 && be == t[1]);
    if (n > 2) CHECK(di_backend_cpu_select((DiEnvKernelKnobs){.kernels = DI_ENV_KERNELS_AVX512}, &be) == 0 && be == t[2]);
#else
    CHECK_EQ_INT(n, 2);
    CHECK(di_backend_cpu_select((DiEnvKernelKnobs){.kernels = DI_ENV_KERNELS_NEON}, &be) == 0 && be == t[1]);
    CHECK_STR(t[1]->name, "neon");
#endif
    CHECK(di_backend_cpu_tables(t, DI_BACKEND_CPU_TABLES_MAX - 1) == -1);
    CHECK(di_backend_cpu_tables(NULL, DI_BACKEND_CPU_TABLES_MAX) == -1);
}

#if defined(__x86_64__)
TEST(selection_follows_cpuid_and_the_knob) {
    const DiKernelBackend *be = NULL;
    bool simd = di_simd_available(), avx512 = di_simd_avx512_available(), pays = avx512 && di_simd_avx512_pays();
    CHECK(di_backend_cpu_select((DiEnvKernelKnobs){.kernels = DI_ENV_KERNELS_REF}, &be) == 0 && be == di_backend_cpu_ref());
    CHECK_STR(be->name, "reference");
    CHECK(di_backend_cpu_select((DiEnvKernelKnobs){.kernels = DI_ENV_KERNELS_AUTO}, &be) == 0);
    CHECK_STR(be->name, pays ? "avx512" : simd ? "avx2-fma" : "reference");
    CHECK(di_backend_cpu_select((DiEnvKernelKnobs){.kernels = DI_ENV_KERNELS_SIMD}, &be) == (simd ? 0 : -1));
    if (simd) CHECK_STR(be->name, pays ? "avx512" : "avx2-fma");
    CHECK(di_backend_cpu_select((DiEnvKernelKnobs){.kernels = DI_ENV_KERNELS_AVX2}, &be) == (simd ? 0 : -1));
    if (simd) CHECK_STR(be->name, "avx2-fma");
    int rc = di_backend_cpu_select((DiEnvKernelKnobs){.kernels = DI_ENV_KERNELS_AVX512}, &be);
    CHECK_EQ_INT(rc, avx512 ? 0 : -1);
    if (rc != 0) CHECK(strstr(di_error_message(), "DEEPINFER_KERNELS=avx512") != NULL);
    else CHECK_STR(be->name, "avx512");
    CHECK(di_backend_cpu_select((DiEnvKernelKnobs){.kernels = DI_ENV_KERNELS_NEON}, &be) == -1);
    CHECK(strstr(di_error_message(), "DEEPINFER_KERNELS=neon") != NULL);
    CHECK(di_backend_cpu_select((DiEnvKernelKnobs){.kernels = DI_ENV_KERNELS_AUTO}, NULL) == -1);
    CHECK(di_backend_cpu_select((DiEnvKernelKnobs){(DiEnvKernels)99, DI_ENV_FP8_GEMV_AUTO}, &be) == -1);
    CHECK(di_backend_cpu_select((DiEnvKernelKnobs){.kernels = DI_ENV_KERNELS_AUTO, (DiEnvFp8Gemv)99}, &be) == -1);
}
#else
/* aarch64: auto, simd and neon take the NEON table; the x86-64 names are errors naming the knob. */
TEST(selection_follows_cpuid_and_the_knob) {
    const DiKernelBackend *be = NULL;
    CHECK(di_simd_available() && !di_simd_avx512_available());
    CHECK(di_backend_cpu_select((DiEnvKernelKnobs){.kernels = DI_ENV_KERNELS_REF}, &be) == 0 && be == di_backend_cpu_ref());
    static const DiEnvKernels neon[] = {DI_ENV_KERNELS_AUTO, DI_ENV_KERNELS_SIMD, DI_ENV_KERNELS_NEON};
    for (int i = 0; i < 3; i++) {
        CHECK(di_backend_cpu_select((DiEnvKernelKnobs){.kernels = neon[i]}, &be) == 0);
        CHECK_STR(be->name, "neon");
    }
    static const DiEnvKernels x86[] = {DI_ENV_KERNELS_AVX2, DI_ENV_KERNELS_AVX512};
    for (int i = 0; i < 2; i++) {
        CHECK(di_backend_cpu_select((DiEnvKernelKnobs){.kernels = x86[i]}, &be) == -1);
        CHECK(strstr(di_error_message(), "DEEPINFER_KERNELS=avx") != NULL && strstr(di_error_message(), "aarch64") != NULL);
    }
    CHECK(di_backend_cpu_select((DiEnvKernelKnobs){.kernels = DI_ENV_KERNELS_AUTO}, NULL) == -1);
    CHECK(di_backend_cpu_select((DiEnvKernelKnobs){(DiEnvKernels)99, DI_ENV_FP8_GEMV_AUTO}, &be) == -1);
    CHECK(di_backend_cpu_select((DiEnvKernelKnobs){.kernels = DI_ENV_KERNELS_AUTO, (DiEnvFp8Gemv)99}, &be) == -1);
}
#endif

TEST(every_table_fills_every_op) {
    const DiKernelBackend *t[DI_BACKEND_CPU_TABLES_MAX];
    int n = tables(t);
    for (int i = 0; i < n; i++) {
        const DiKernelBackend *be = t[i];
        for (int f = 0; f < DI_MAT_N_FORMATS; f++)
            CHECK_MSG(be->mat[f].name && be->mat[f].matmul && be->mat[f].scratch_floats && be->mat[f].row_align >= 1,
                      "%s: format %d has no traits", be->name, f);
        CHECK_EQ_INT(be->mat[DI_MAT_FP8_BLOCK].row_align, 32);
        CHECK_MSG(be->roundtrip_fp8_block32 && be->roundtrip_fp4_ue8m0_block32 && be->roundtrip_fp4_e4m3_block16 && be->rmsnorm &&
                      be->rope && be->expf_row && be->attn_heads && be->index_scores && be->topk && be->best_k && be->compress_pool &&
                      be->mhc_mix && be->mhc_collapse && be->mhc_expand && be->engram_gather && be->engram_gate && be->router &&
                      be->swiglu && be->matrix_prepare,
                  "%s: an op is missing", be->name);
    }
}

/* Scores 1 and 0 (scale 1): the keys weigh e : 1, and a sink of logit 0 adds e^0 to the
 * denominator only; a sink of -inf adds nothing. */
TEST(attention_heads_by_hand) {
    const float q[4] = {1, 0, 1, 0}, k0[2] = {1, 0}, k1[2] = {0, 1}, sink[2] = {-INFINITY, 0};
    const float *keys[2] = {k0, k1};
    float o[4], z[2 * DI_BACKEND_HEAD_GROUP];
    di_backend_cpu_ref()->attn_heads(q, 2, 2, keys, 2, sink, 1.0f, o, z);
    double e = exp(1.0);
    CHECK_NEAR(o[0], e / (e + 1), 1e-6);
    CHECK_NEAR(o[1], 1 / (e + 1), 1e-6);
    CHECK_NEAR(o[2], e / (e + 2), 1e-6);
    CHECK_NEAR(o[3], 1 / (e + 2), 1e-6);
}

/* Attention over 1..40 keys of a width with and without a tail past the 8-lane blocks, three
 * heads with their own sinks. */
TEST(simd_attention_gives_the_reference_bits) {
    const DiKernelBackend *t[DI_BACKEND_CPU_TABLES_MAX];
    int n = tables(t);
    enum { NK = 40, NH = 3 };
    const int64_t dims[] = {64, 13};
    const float sink[NH] = {0.5f, -2.0f, 3.0f};
    for (size_t di = 0; di < 2; di++) {
        int64_t dim = dims[di];
        float q[NH * 64], rows[NK][64], want[NH * 64], got[NH * 64], z[NK * DI_BACKEND_HEAD_GROUP];
        const float *keys[NK];
        for (int j = 0; j < NK; j++) {
            for (int c = 0; c < dim; c++) rows[j][c] = 4 * rnd();
            keys[j] = rows[j];
        }
        for (int c = 0; c < NH * dim; c++) q[c] = rnd();
        for (int nk = 1; nk <= NK; nk += 3) {
            float scale = 1.0f / sqrtf((float)dim);
            di_backend_cpu_ref()->attn_heads(q, NH, dim, keys, nk, sink, scale, want, z);
            for (int i = 1; i < n; i++) {
                t[i]->attn_heads(q, NH, dim, keys, nk, sink, scale, got, z);
                CHECK_MSG(memcmp(want, got, (size_t)(NH * dim) * sizeof *got) == 0, "%s: %d keys of width %lld differ", t[i]->name,
                          nk, (long long)dim);
            }
        }
    }
}

TEST(simd_fp8_round_trip_gives_the_reference_bits) {
    const DiKernelBackend *t[DI_BACKEND_CPU_TABLES_MAX];
    int n = tables(t);
    enum { N = 256 };
    float x[N], want[N], got[N];
    for (int i = 0; i < N; i++) x[i] = rnd() * powf(2.0f, (float)(i % 40 - 20)); /* every block its own range */
    memcpy(want, x, sizeof x);
    CHECK(di_backend_cpu_ref()->roundtrip_fp8_block32(want, N) == 0);
    int moved = 0;
    for (int i = 0; i < N; i++) moved += want[i] != x[i];
    CHECK_MSG(moved > N / 2, "the round trip moved only %d of %d values: the comparison would prove nothing", moved, N);
    for (int i = 1; i < n; i++) {
        memcpy(got, x, sizeof x);
        CHECK(t[i]->roundtrip_fp8_block32(got, N) == 0);
        CHECK_MSG(memcmp(want, got, sizeof got) == 0, "%s differs from the reference", t[i]->name);
        CHECK(t[i]->roundtrip_fp8_block32(got, N - 1) == -1); /* not whole blocks */
    }
}

/* SwiGLU: the reference is di_silu's one division exactly; the SIMD exp is within 3 ulp. */
TEST(swiglu_is_clamped_silu_times_up) {
    const DiKernelBackend *t[DI_BACKEND_CPU_TABLES_MAX];
    int n = tables(t);
    enum { N = 300 };
    float g[N], u[N], want[N], got[N];
    for (int i = 0; i < N; i++) g[i] = 12 * rnd(), u[i] = 12 * rnd();
    di_backend_cpu_ref()->swiglu(g, u, N, 7.0f, 0.5f, want);
    for (int i = 0; i < N; i++) {
        float gc = g[i] < 7 ? g[i] : 7, uc = u[i] < -7 ? -7 : u[i] > 7 ? 7 : u[i];
        float exact = di_silu(gc) * uc * 0.5f;
        CHECK_MSG(memcmp(&exact, &want[i], sizeof exact) == 0, "reference swiglu(%g, %g) = %g, not %g", (double)g[i], (double)u[i],
                  (double)want[i], (double)exact);
    }
    for (int i = 1; i < n; i++) {
        t[i]->swiglu(g, u, N, 7.0f, 0.5f, got);
        for (int k = 0; k < N; k++)
            CHECK_MSG(fabsf(got[k] - want[k]) <= 8 * 0x1p-23f * fabsf(want[k]) + 1e-30f, "%s: swiglu(%g, %g) = %g vs %g", t[i]->name,
                      (double)g[k], (double)u[k], (double)got[k], (double)want[k]);
#if defined(__aarch64__) /* NEON's exp is expf's own bits (no aarch64 libmvec): the reference's SwiGLU exactly */
        CHECK_MSG(memcmp(got, want, sizeof got) == 0, "%s: swiglu differs from the reference", t[i]->name);
#endif
    }
}

static int canonical(const void *pa, const void *pb) {
    const DiScored *a = pa, *b = pb;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* Against a full sort, on scores with many ties (the id order decides them). */
TEST(best_k_matches_a_full_sort) {
    enum { M = 500 };
    DiScored items[M], sorted[M];
    for (int k = 0; k <= 64; k += 7) {
        for (int i = 0; i < M; i++) items[i] = (DiScored){(float)(int)(8 * rnd()), (int32_t)((i * 37) % M)};
        memcpy(sorted, items, sizeof items);
        qsort(sorted, M, sizeof *sorted, canonical);
        int64_t got = di_backend_cpu_ref()->best_k(items, M, k);
        CHECK_EQ_INT(got, k);
        for (int j = 0; j < k; j++)
            CHECK_MSG(items[j].id == sorted[j].id && items[j].score == sorted[j].score, "k %d: rank %d is id %d, not %d", k, j,
                      items[j].id, sorted[j].id);
    }
    CHECK_EQ_INT(di_backend_cpu_ref()->best_k(items, 3, 10), 3); /* fewer entries than k */
}

/* The selection the indexer publishes: the k best finite scores' ids, in ascending id order;
 * -inf entries (masked) are never chosen, a tie goes to the lower id. */
TEST(topk_selects_ids_ascending) {
    const float score[6] = {0.5f, -INFINITY, 2.0f, 0.5f, 1.0f, -INFINITY};
    const int32_t ids[6] = {10, 11, 12, 13, 14, 15};
    DiScored buf[6 + 8];
    int32_t out[6];
    CHECK_EQ_INT(di_backend_cpu_ref()->topk(score, NULL, 6, 3, buf, out), 3);
    CHECK(out[0] == 0 && out[1] == 2 && out[2] == 4); /* 2.0, 1.0, then 0.5 of the lower id 0 */
    CHECK_EQ_INT(di_backend_cpu_ref()->topk(score, ids, 6, 6, buf, out), 4); /* only 4 finite */
    CHECK(out[0] == 10 && out[1] == 12 && out[2] == 13 && out[3] == 14);
}

/* score = Σ_h wh[h]·max(q_h·k, 0), keys 3 floats apart: a negative dot is dropped.  Two query
 * rows, the second's scores 4 floats after the first's (the gap is left alone). */
TEST(index_scores_by_hand) {
    const float q[8] = {1, 0, 0, 1, /* row 1 */ 0, 1, 1, 0}, wh[4] = {0.5f, 0.25f, /* row 1 */ 1, 2};
    const float keys[9] = {2, -1, 99, -1, 3, 99, -1, -1, 99}; /* the third float of each row is not a key's */
    float score[8] = {0, 0, 0, 42, 0, 0, 0, 42};
    di_backend_cpu_ref()->index_scores(q, wh, 2, 2, 2, keys, 3, 3, score, 4);
    CHECK(score[0] == 1.0f);  /* 1·0.5·2 + 0.5·0.5·0 */
    CHECK(score[1] == 0.75f); /* 1·0.5·0 + 0.5·0.5·3 */
    CHECK(score[2] == 0.0f);
    CHECK(score[4] == 4.0f); /* 1·max(-1, 0) + 2·2 */
    CHECK(score[5] == 3.0f); /* 1·3 + 2·0 */
    CHECK(score[6] == 0.0f);
    CHECK(score[3] == 42.0f && score[7] == 42.0f);
}

/* Gates 0 and ln 3 weigh the two rows 1/4 and 3/4; equal gates average. */
TEST(compress_pool_by_hand) {
    const float kv0[2] = {4, 8}, kv1[2] = {8, 0}, g0[2] = {0, 5}, g1[2] = {logf(3.0f), 5};
    const float *kv[2] = {kv0, kv1}, *gate[2] = {g0, g1};
    float out[2];
    di_backend_cpu_ref()->compress_pool(kv, gate, 2, 2, out);
    CHECK_NEAR(out[0], 0.25 * 4 + 0.75 * 8, 1e-6);
    CHECK_NEAR(out[1], 4, 1e-6);
}

/* Equal logits: the bias decides, ties go to the lower id, weights renormalised and scaled. */
TEST(router_by_hand) {
    float s[4] = {0, 0, 0, 0}, wts[2];
    const float bias[4] = {0, 1, 0, 2}, none[4] = {0, 0, 0, 0};
    int32_t ids[2];
    di_backend_cpu_ref()->router(s, bias, 4, 2, 1.0f, true, 2.0f, ids, wts);
    CHECK(ids[0] == 3 && ids[1] == 1);
    CHECK_NEAR(s[0], sqrt(log(2.0)), 1e-6); /* sqrt(softplus(0)) */
    CHECK_NEAR(wts[0], 1.0, 1e-6);
    CHECK_NEAR(wts[1], 1.0, 1e-6);
    float s2[4] = {0, 0, 0, 0};
    di_backend_cpu_ref()->router(s2, none, 4, 2, 1.0f, false, 1.0f, ids, wts);
    CHECK(ids[0] == 0 && ids[1] == 1);
    CHECK_NEAR(wts[0], sqrt(log(2.0)), 1e-6); /* not renormalised */
}

/* E4M3 0x38 = 1.0, 0xC0 = -2.0; scale byte 128 = 2, 126 = 0.5. */
TEST(engram_gather_dequantises_exactly) {
    uint8_t codes[3 * 64], scales[3 * 2];
    for (int i = 0; i < 3 * 64; i++) codes[i] = i % 2 ? 0xC0 : 0x38;
    scales[0] = 127, scales[1] = 127, scales[2] = 128, scales[3] = 126, scales[4] = 127, scales[5] = 127;
    const int64_t ids[2] = {1, 0};
    float out[2 * 64];
    di_backend_cpu_ref()->engram_gather(codes, scales, ids, 2, 64, out);
    CHECK(out[0] == 2.0f && out[1] == -4.0f);   /* row 1, first block: x2 */
    CHECK(out[32] == 0.5f && out[33] == -1.0f); /* row 1, second block: x0.5 */
    CHECK(out[64] == 1.0f && out[65] == -2.0f); /* row 0 */
}

/* A stream whose gate is sigmoid(±1) by construction: h = key = (1, 1), qk = (1, 1), dim 2:
 * rms 1 each, dot = 2 / sqrt(2) · 1 = sqrt 2, gate = sigmoid(sqrt(sqrt 2)). */
TEST(engram_gate_by_hand) {
    float h[2] = {1, 1};
    const float key[2] = {1, 1}, value[2] = {1, -2}, qk[2] = {1, 1};
    di_backend_cpu_ref()->engram_gate(h, key, value, qk, 2, 0.0f);
    double g = 1.0 / (1.0 + exp(-sqrt(sqrt(2.0))));
    CHECK_NEAR(h[0], 1 + g, 1e-6);
    CHECK_NEAR(h[1], 1 - 2 * g, 1e-6);
}

/* A weight is readied for the table it was given: the reference adds nothing; a SIMD table adds
 * the FP8 subnormal map exactly where its FP8 GEMV route is "mapped", the map of
 * di_matrix_fp8_subnormal_map.  Every table refuses an invalid matrix. */
TEST(matrix_prepare_follows_the_table) {
    static uint8_t data[32 * 64];
    uint8_t scale[2] = {127, 127};
    data[5 * 64 + 40] = 0x03; /* a subnormal code: row group 0, block 1 */
    const DiMatrix m = {.format = DI_MAT_FP8_BLOCK, .rows = 32, .cols = 64, .data = data, .scale = scale};
    uint8_t want[8];
    di_matrix_fp8_subnormal_map(&m, want);
    const DiKernelBackend *t[DI_BACKEND_CPU_TABLES_MAX];
    int n = tables(t);
    for (int i = 0; i < n; i++) {
        DiMatrix w = m;
        void *owned = (void *)1;
        CHECK(t[i]->matrix_prepare(t[i], &w, &owned) == 0);
        bool mapped = strcmp(di_backend_cpu_fp8_gemv_route(t[i], NULL), "mapped") == 0;
        CHECK_MSG((owned != NULL) == mapped && w.fp8_subnormal_map == owned, "%s", t[i]->name);
        if (owned) CHECK(memcmp(w.fp8_subnormal_map, want, (size_t)di_matrix_fp8_subnormal_map_bytes(&m)) == 0);
        free(owned);
        DiMatrix bad = m;
        bad.rows = 0;
        CHECK(t[i]->matrix_prepare(t[i], &bad, &owned) == -1 && owned == NULL);
    }
}

/* The FP8 GEMV knob picks the table's route once, when the table is chosen: each named route
 * gives a table that says so, prepares maps only for "mapped", and auto takes the probe's. */
TEST(fp8_route_is_fixed_when_the_table_is_chosen) {
    if (!di_simd_available()) return; /* the reference has no route: checked below */
    static const char *names[] = {"f32", "fp16", "mapped"};
    static const DiEnvFp8Gemv knobs[] = {DI_ENV_FP8_GEMV_F32, DI_ENV_FP8_GEMV_FP16, DI_ENV_FP8_GEMV_MAPPED};
    const DiKernelBackend *be = NULL;
    for (int i = 0; i < 3; i++) {
        CHECK(di_backend_cpu_select((DiEnvKernelKnobs){.kernels = DI_ENV_KERNELS_SIMD, knobs[i]}, &be) == 0);
        CHECK(strcmp(be->name, "reference") != 0);
        CHECK_STR(di_backend_cpu_fp8_gemv_route(be, NULL), names[i]);
    }
    double slowdown = 0;
    CHECK(di_backend_cpu_select((DiEnvKernelKnobs){.kernels = DI_ENV_KERNELS_SIMD}, &be) == 0);
    const char *route = di_backend_cpu_fp8_gemv_route(be, &slowdown);
#if defined(__x86_64__)
    CHECK(route && (strcmp(route, "f32") == 0 || strcmp(route, "mapped") == 0)); /* the probe's two choices */
    CHECK_STR(route, di_simd_fp8_gemv_auto_route(NULL) == DI_FP8_GEMV_MAPPED ? "mapped" : "f32");
#else
    CHECK_STR(route, "fp16"); /* NEON's auto: the FP16 widening whatever the probe says */
    CHECK(di_simd_fp8_gemv_auto_route(NULL) == DI_FP8_GEMV_FP16);
#endif
    CHECK_MSG(slowdown > 0 && isfinite(slowdown), "probe ratio %g", slowdown);
    DiKernelBackend copy = *be; /* a copy of a CPU table (bench_prefill's wrappers) keeps its route */
    CHECK_STR(di_backend_cpu_fp8_gemv_route(&copy, NULL), route);
    CHECK_STR(di_backend_cpu_fp8_gemv_route(di_backend_cpu_ref(), NULL), "reference");
    copy.impl = NULL, copy.matrix_prepare = NULL; /* not a CPU table */
    CHECK(di_backend_cpu_fp8_gemv_route(&copy, NULL) == NULL);
    CHECK(di_backend_cpu_fp8_gemv_route(NULL, NULL) == NULL);
}

/* The environment is parsed into the knobs (env.c) and a bad value refused there, naming it. */
TEST(kernel_knobs_come_from_the_environment) {
    DiEnvKernelKnobs k;
    setenv("DEEPINFER_KERNELS", "ref", 1);
    setenv("DEEPINFER_FP8_GEMV", "fp16", 1);
    CHECK(di_env_kernel_knobs(&k) == 0 && k.kernels == DI_ENV_KERNELS_REF && k.fp8_gemv == DI_ENV_FP8_GEMV_FP16);
    const DiKernelBackend *be = NULL;
    CHECK(di_backend_cpu_from_env(&be) == 0 && be == di_backend_cpu_ref());
    setenv("DEEPINFER_FP8_GEMV", "fastest", 1);
    CHECK(di_env_kernel_knobs(&k) == -1 && strstr(di_error_message(), "DEEPINFER_FP8_GEMV=fastest") != NULL);
    CHECK(di_backend_cpu_from_env(&be) == -1);
    unsetenv("DEEPINFER_FP8_GEMV");
    setenv("DEEPINFER_KERNELS", "fast please", 1);
    CHECK(di_env_kernel_knobs(&k) == -1 && strstr(di_error_message(), "DEEPINFER_KERNELS") != NULL);
    unsetenv("DEEPINFER_KERNELS");
    CHECK(di_env_kernel_knobs(&k) == 0 && k.kernels == DI_ENV_KERNELS_AUTO && k.fp8_gemv == DI_ENV_FP8_GEMV_AUTO);
    CHECK(di_env_kernel_knobs(NULL) == -1);
}

int main(void) {
    RUN_TEST(registry_lists_every_table_this_cpu_runs);
    RUN_TEST(selection_follows_cpuid_and_the_knob);
    RUN_TEST(every_table_fills_every_op);
    RUN_TEST(matrix_prepare_follows_the_table);
    RUN_TEST(fp8_route_is_fixed_when_the_table_is_chosen);
    RUN_TEST(kernel_knobs_come_from_the_environment);
    RUN_TEST(attention_heads_by_hand);
    RUN_TEST(simd_attention_gives_the_reference_bits);
    RUN_TEST(simd_fp8_round_trip_gives_the_reference_bits);
    RUN_TEST(swiglu_is_clamped_silu_times_up);
    RUN_TEST(best_k_matches_a_full_sort);
    RUN_TEST(topk_selects_ids_ascending);
    RUN_TEST(index_scores_by_hand);
    RUN_TEST(compress_pool_by_hand);
    RUN_TEST(router_by_hand);
    RUN_TEST(engram_gather_dequantises_exactly);
    RUN_TEST(engram_gate_by_hand);
    return TEST_SUMMARY();
}
