/* backend_cpu.c — the CPU backend: the tables of the backend interface (kernels/backend.h) and
 * the choice between them, made once when a model loads from the CPU and the knobs parsed then
 * (DEEPINFER_KERNELS, DEEPINFER_FP8_GEMV).  Every build has the scalar reference; an x86-64 build
 * adds AVX2+FMA and AVX2+FMA with the AVX-512 tiles (cpuid decides), an aarch64 build NEON
 * (kernels/neon/; Advanced SIMD is part of ARMv8-A), each SIMD table in the three FP8 GEMV routes.
 *
 * The variants differ only where a kernel has a faster form: the matmuls (matmul.c and the
 * *_avx2.c / kernels/neon kernels: the summation order of matmul_simd.h, the same bits on every
 * SIMD table; the AVX-512 one-token tiles, FP4 and FP8, give the AVX2 bits, and auto takes them
 * only where they pay, di_simd_avx512_pays), the attention kernels (attn_simd.h: index scores,
 * top-k and heads, the reference's bits on every route), the FP8 round trip and the exp of
 * SwiGLU and expf_row (ops_simd.c: libmvec's on x86-64, within 3 ulp; expf's own on NEON).  The
 * other ops are the reference's loops in every table (ops_ref.c), which the compiler vectorises
 * as they are. */
#include "kernels/backend.h"

#include "base/cpu_check.h"
#include "base/error.h"
#include "kernels/cpu/attn_simd.h"
#include "kernels/cpu/matmul_simd.h"
#include "kernels/cpu/ops_cpu.h"
#include "kernels/numformats.h"

/* A SIMD table's variant (matmul_simd.h): [tiles][route], the route F32, FP16 or MAPPED (the
 * AVX-512 tiles only on x86-64: the NEON tables take the first row). */
#define N_ROUTES 3
static const DiFp8GemvRoute routes[N_ROUTES] = {DI_FP8_GEMV_F32, DI_FP8_GEMV_FP16, DI_FP8_GEMV_MAPPED};
static const DiSimdVariant variants[2][N_ROUTES] = {
    {{false, DI_FP8_GEMV_F32}, {false, DI_FP8_GEMV_FP16}, {false, DI_FP8_GEMV_MAPPED}},
    {{true, DI_FP8_GEMV_F32}, {true, DI_FP8_GEMV_FP16}, {true, DI_FP8_GEMV_MAPPED}},
};

static int ref_matmul(const DiKernelBackend *be, DiThreadPool *pool, const DiMatrix *w, const float *x, int64_t n, float *y,
                      bool qa, float *scratch, int64_t scratch_floats) {
    (void)be, (void)pool, (void)scratch, (void)scratch_floats; /* single-threaded, no scratch: both documented as optional */
    return qa ? di_matmul_ref_qa(w, x, n, y) : di_matmul_ref(w, x, n, y);
}

static int64_t ref_scratch_floats(const DiKernelBackend *be, const DiMatrix *w, int64_t n, int threads, bool qa) {
    (void)be, (void)w, (void)n, (void)threads, (void)qa;
    return 0;
}

static int simd_matmul(const DiKernelBackend *be, DiThreadPool *pool, const DiMatrix *w, const float *x, int64_t n, float *y,
                       bool qa, float *scratch, int64_t scratch_floats) {
    return di_cpu_matmul_simd_into(be->impl, pool, w, x, n, y, qa, scratch, scratch_floats);
}

static int ref_prepare(const DiKernelBackend *be, DiMatrix *w, void **owned) {
    (void)be;
    return di_cpu_matrix_prepare_ref(w, owned);
}

static int simd_prepare(const DiKernelBackend *be, DiMatrix *w, void **owned) {
    return di_cpu_matrix_prepare_simd(be->impl, w, owned);
}

static int64_t simd_scratch_floats(const DiKernelBackend *be, const DiMatrix *w, int64_t n, int threads, bool qa) {
    (void)be; /* the tiles do not change the scratch */
    return di_cpu_matmul_simd_scratch_floats(w, n, threads, qa);
}

#define FORMAT_TRAITS(mm, scratch)                                                                                     \
    {                                                                                                                  \
        [DI_MAT_F32] = {"f32", 1, mm, scratch}, [DI_MAT_BF16] = {"bf16", 1, mm, scratch},                              \
        [DI_MAT_FP8_BLOCK] = {"fp8-block", 32, mm, scratch}, [DI_MAT_FP4_ROW32] = {"fp4-row32", 1, mm, scratch},      \
    }

/* The ops every CPU table shares: the reference loops. */
#define SHARED_OPS                                                                                                     \
    .roundtrip_fp4_ue8m0_block32 = di_roundtrip_fp4_ue8m0_block32,                                                     \
    .roundtrip_fp4_e4m3_block16 = di_roundtrip_fp4_e4m3_block16, .rmsnorm = di_ref_rmsnorm, .rope = di_ref_rope,      \
    .best_k = di_attn_best_k_sorted, .compress_pool = di_ref_compress_pool,                                                                             \
    .mhc_mix = di_ref_mhc_mix, .mhc_collapse = di_ref_mhc_collapse, .mhc_expand = di_ref_mhc_expand,                 \
    .engram_gather = di_ref_engram_gather, .engram_gate = di_ref_engram_gate, .router = di_ref_router

static const DiKernelBackend cpu_ref = {
    .name = "reference",
    .mat = FORMAT_TRAITS(ref_matmul, ref_scratch_floats),
    .matrix_prepare = ref_prepare,
    .roundtrip_fp8_block32 = di_roundtrip_fp8_block32,
    .expf_row = di_ref_expf_row,
    .attn_heads = di_attn_heads_ref,
    .index_scores = di_attn_index_scores_ref,
    .topk = di_attn_topk_ref,
    .swiglu = di_ref_swiglu,
    SHARED_OPS,
};

/* A SIMD table: the variant's matmuls, the SIMD ops, and its attention kernels. */
#define SIMD_TABLE(label, variant, scores, heads, top)                                                                 \
    {                                                                                                                  \
        .name = label, .impl = &variant, .mat = FORMAT_TRAITS(simd_matmul, simd_scratch_floats),                      \
        .matrix_prepare = simd_prepare,                                                                                \
        .roundtrip_fp8_block32 = di_simd_op_roundtrip_fp8_block32, .expf_row = di_simd_op_expf_row,                   \
        .attn_heads = heads, .index_scores = scores, .topk = top, .swiglu = di_simd_swiglu, SHARED_OPS,                \
    }

#if defined(__x86_64__)
/* The AVX-512 tables differ from the AVX2 ones in their matmul tiles and their index scores
 * (sixteen keys a vector); the top-k and the heads are the AVX2 kernels in both.  Each comes in
 * the three FP8 GEMV routes (the same bits), so a table's choice is fixed once it is chosen. */
#define AVX2_TABLE(route)                                                                                              \
    SIMD_TABLE("avx2-fma", variants[0][route], di_attn_index_scores_avx2, di_attn_heads_avx2, di_attn_topk_avx2)
#define AVX512_TABLE(route)                                                                                            \
    SIMD_TABLE("avx512", variants[1][route], di_attn_index_scores_avx512, di_attn_heads_avx2, di_attn_topk_avx2)

static const DiKernelBackend cpu_simd[2][N_ROUTES] = {
    {AVX2_TABLE(0), AVX2_TABLE(1), AVX2_TABLE(2)},
    {AVX512_TABLE(0), AVX512_TABLE(1), AVX512_TABLE(2)},
};
#elif defined(__aarch64__)
/* The NEON tables (kernels/neon/), one per FP8 GEMV route. */
#define NEON_TABLE(route) \
    SIMD_TABLE("neon", variants[0][route], di_attn_index_scores_neon, di_attn_heads_neon, di_attn_topk_neon)

static const DiKernelBackend cpu_neon[N_ROUTES] = {NEON_TABLE(0), NEON_TABLE(1), NEON_TABLE(2)};
#else
#error "kernels/cpu: the SIMD kernels exist for x86-64 and aarch64 only (kernels/README.md)"
#endif

const DiKernelBackend *di_backend_cpu_ref(void) { return &cpu_ref; }

/* The index into routes[] of the FP8 GEMV knob's route (auto: the probe's, made once). */
static int route_index(DiEnvFp8Gemv want) {
    DiFp8GemvRoute r = want == DI_ENV_FP8_GEMV_F32    ? DI_FP8_GEMV_F32
                       : want == DI_ENV_FP8_GEMV_FP16 ? DI_FP8_GEMV_FP16
                       : want == DI_ENV_FP8_GEMV_MAPPED ? DI_FP8_GEMV_MAPPED
                                                        : di_simd_fp8_gemv_auto_route(NULL);
    for (int i = 0; i < N_ROUTES; i++)
        if (routes[i] == r) return i;
    return 0;
}

#if defined(__x86_64__)
/* Whether the table takes the AVX-512 tiles: -1 with an error where the CPU lacks what the knob
 * demands, -2 for the scalar reference. */
static int tiles_for(DiEnvKernels want) {
    bool simd = di_simd_available(), avx512 = di_simd_avx512_available();
    bool tiles = avx512 && di_simd_avx512_pays(); /* not on Zen 4: it splits 512-bit operations */
    switch (want) {
    case DI_ENV_KERNELS_AUTO: return tiles ? 1 : simd ? 0 : -2;
    case DI_ENV_KERNELS_REF: return -2;
    case DI_ENV_KERNELS_SIMD:
    case DI_ENV_KERNELS_AVX2:
        if (!simd) return di_errorf("DEEPINFER_KERNELS=%s, but this CPU lacks AVX2, FMA or F16C", di_env_kernels_name(want));
        return want == DI_ENV_KERNELS_SIMD && tiles;
    case DI_ENV_KERNELS_AVX512:
        if (!avx512) return di_errorf("DEEPINFER_KERNELS=avx512, but this CPU lacks AVX-512 F, BW or VL (or AVX2)");
        return 1;
    case DI_ENV_KERNELS_NEON:
        return di_errorf("DEEPINFER_KERNELS=neon names the aarch64 table; this x86-64 build has ref, avx2 and avx512");
    default: return di_errorf("backend: DEEPINFER_KERNELS value %d unknown", (int)want);
    }
}

/* The table the knob names on the FP8 route given; NULL with an error where there is none. */
static const DiKernelBackend *table_for(DiEnvKernels want, int route) {
    int tiles = tiles_for(want);
    return tiles == -1 ? NULL : tiles == -2 ? &cpu_ref : &cpu_simd[tiles][route];
}
#else
/* The NEON table for auto, simd and neon; an error naming the knob for the x86-64 ones. */
static const DiKernelBackend *table_for(DiEnvKernels want, int route) {
    switch (want) {
    case DI_ENV_KERNELS_AUTO:
    case DI_ENV_KERNELS_SIMD:
    case DI_ENV_KERNELS_NEON: return &cpu_neon[route];
    case DI_ENV_KERNELS_REF: return &cpu_ref;
    case DI_ENV_KERNELS_AVX2:
    case DI_ENV_KERNELS_AVX512:
        di_errorf("DEEPINFER_KERNELS=%s names an x86-64 table; this aarch64 build has ref and neon", di_env_kernels_name(want));
        return NULL;
    default: di_errorf("backend: DEEPINFER_KERNELS value %d unknown", (int)want); return NULL;
    }
}
#endif

int di_backend_cpu_select(DiEnvKernelKnobs knobs, const DiKernelBackend **out) {
    if (!out) return di_errorf("backend: no output given");
    if ((unsigned)knobs.fp8_gemv > DI_ENV_FP8_GEMV_MAPPED)
        return di_errorf("backend: DEEPINFER_FP8_GEMV value %d unknown", (int)knobs.fp8_gemv);
    /* Unreachable where cpu_check.c's constructor ran (it exits first); here for a program that
     * bypassed it, and so that every program choosing kernels links that check. */
    const char *missing = di_cpu_missing_features();
    if (missing[0]) return di_errorf("backend: this CPU lacks %s, which this build's x86-64-v3 baseline needs", missing);
    const DiKernelBackend *be = table_for(knobs.kernels, route_index(knobs.fp8_gemv));
    if (!be) return -1;
    *out = be;
    return 0;
}

int di_backend_cpu_tables(const DiKernelBackend **out, int max) {
    if (!out || max < DI_BACKEND_CPU_TABLES_MAX)
        return di_errorf("backend: room for %d tables needed, given %d", DI_BACKEND_CPU_TABLES_MAX, out ? max : 0);
    int n = 0, route = route_index(DI_ENV_FP8_GEMV_AUTO);
    out[n++] = &cpu_ref;
#if defined(__x86_64__)
    if (di_simd_available()) out[n++] = &cpu_simd[0][route];
    if (di_simd_avx512_available()) out[n++] = &cpu_simd[1][route];
#else
    out[n++] = &cpu_neon[route];
#endif
    return n;
}

/* The SIMD variant of a CPU table or of a copy of one (by its impl); NULL for any other table. */
static const DiSimdVariant *variant_of(const DiKernelBackend *be) {
    for (int t = 0; t < 2; t++)
        for (int r = 0; r < N_ROUTES; r++)
            if (be->impl == &variants[t][r]) return &variants[t][r];
    return NULL;
}

int di_backend_cpu_from_env(const DiKernelBackend **out) {
    DiEnvKernelKnobs knobs;
    return di_env_kernel_knobs(&knobs) != 0 ? -1 : di_backend_cpu_select(knobs, out);
}

const char *di_backend_cpu_fp8_gemv_route(const DiKernelBackend *be, double *subnormal_slowdown) {
    if (subnormal_slowdown) *subnormal_slowdown = 0;
    if (!be) return di_errorf("backend: no table given"), NULL;
    if (be->matrix_prepare == ref_prepare) return "reference";
    const DiSimdVariant *v = variant_of(be);
    if (!v) return di_errorf("backend: '%s' is not a CPU table", be->name ? be->name : "?"), NULL;
    if (subnormal_slowdown) di_simd_fp8_gemv_auto_route(subnormal_slowdown);
    return v->fp8 == DI_FP8_GEMV_FP16 ? "fp16" : v->fp8 == DI_FP8_GEMV_MAPPED ? "mapped" : "f32";
}

int di_backend_matmul(const DiKernelBackend *be, DiThreadPool *pool, const DiMatrix *w, const float *x, int64_t n, float *y,
                      bool qa, float *scratch, int64_t scratch_floats) {
    if (!be) return di_errorf("matmul: no backend");
    if (!w || (unsigned)w->format >= DI_MAT_N_FORMATS) return di_errorf("matmul: no weight, or a format the backend lacks");
    return be->mat[w->format].matmul(be, pool, w, x, n, y, qa, scratch, scratch_floats);
}
