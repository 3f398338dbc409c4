/* backend_cpu.c — the CPU backend: three tables of the backend interface (kernels/backend.h),
 * the scalar reference, AVX2+FMA and AVX2+FMA with the AVX-512 tiles, and the choice between
 * them, made once when a model loads from cpuid and the parsed DEEPINFER_KERNELS knob.
 *
 * The variants differ only where a kernel has a faster form: the matmuls (matmul.c and the
 * *_avx2.c kernels: the summation order of matmul_simd.h; the AVX-512 one-token tiles give the
 * AVX2 bits, and auto takes them only where they pay, di_simd_avx512_pays), the attention
 * kernels (attn_simd.h: index scores, top-k and heads, the reference's bits on every route),
 * the FP8 round trip and the exp of SwiGLU (ops_simd.c).  The other ops
 * are the reference's loops in every table (ops_ref.c), which the compiler vectorises as they are. */
#include "kernels/backend.h"

#include "base/error.h"
#include "kernels/cpu/attn_simd.h"
#include "kernels/cpu/matmul_simd.h"
#include "kernels/cpu/ops_cpu.h"
#include "kernels/numformats.h"

/* The tile choice a SIMD table passes to the matmul kernels. */
typedef struct {
    bool avx512;
} CpuVariant;

static const CpuVariant avx2_variant = {false}, avx512_variant = {true};

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
    const CpuVariant *v = be->impl;
    return di_cpu_matmul_simd_into(v->avx512, pool, w, x, n, y, qa, scratch, scratch_floats);
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
    .matrix_prepare = di_cpu_matrix_prepare_ref,
    .roundtrip_fp8_block32 = di_roundtrip_fp8_block32,
    .expf_row = di_ref_expf_row,
    .attn_heads = di_attn_heads_ref,
    .index_scores = di_attn_index_scores_ref,
    .topk = di_attn_topk_ref,
    .swiglu = di_ref_swiglu,
    SHARED_OPS,
};

/* The AVX-512 table differs from the AVX2 one in its matmul tiles and its index scores (sixteen
 * keys a vector); the top-k and the heads are the AVX2 kernels in both. */
#define SIMD_TABLE(label, variant, scores)                                                                             \
    {                                                                                                                  \
        .name = label, .impl = &variant, .mat = FORMAT_TRAITS(simd_matmul, simd_scratch_floats),                      \
        .matrix_prepare = di_cpu_matrix_prepare_simd,                                                                  \
        .roundtrip_fp8_block32 = di_simd_op_roundtrip_fp8_block32, .expf_row = di_simd_op_expf_row,                   \
        .attn_heads = di_attn_heads_avx2, .index_scores = scores, .topk = di_attn_topk_avx2, .swiglu = di_simd_swiglu,  \
        SHARED_OPS,                                                                                                    \
    }

static const DiKernelBackend cpu_avx2 = SIMD_TABLE("avx2-fma", avx2_variant, di_attn_index_scores_avx2);
static const DiKernelBackend cpu_avx512 = SIMD_TABLE("avx512", avx512_variant, di_attn_index_scores_avx512);

const DiKernelBackend *di_backend_cpu_ref(void) { return &cpu_ref; }

int di_backend_cpu_select(DiEnvKernels want, const DiKernelBackend **out) {
    if (!out) return di_errorf("backend: no output given");
    bool simd = di_simd_available(), avx512 = di_simd_avx512_available();
    bool tiles = avx512 && di_simd_avx512_pays(); /* not on Zen 4: it splits 512-bit operations */
    switch (want) {
    case DI_ENV_KERNELS_AUTO: *out = tiles ? &cpu_avx512 : simd ? &cpu_avx2 : &cpu_ref; break;
    case DI_ENV_KERNELS_REF: *out = &cpu_ref; return 0;
    case DI_ENV_KERNELS_SIMD:
    case DI_ENV_KERNELS_AVX2:
        if (!simd) return di_errorf("DEEPINFER_KERNELS=%s, but this CPU lacks AVX2, FMA or F16C", di_env_kernels_name(want));
        *out = want == DI_ENV_KERNELS_SIMD && tiles ? &cpu_avx512 : &cpu_avx2;
        break;
    case DI_ENV_KERNELS_AVX512:
        if (!avx512) return di_errorf("DEEPINFER_KERNELS=avx512, but this CPU lacks AVX-512 F, BW or VL (or AVX2)");
        *out = &cpu_avx512;
        break;
    default: return di_errorf("backend: DEEPINFER_KERNELS value %d unknown", (int)want);
    }
    DiFp8GemvRoute route; /* the SIMD tables' FP8 GEMV knob, refused here rather than at a call */
    if (*out != &cpu_ref && di_fp8_gemv_route_from_env(&route) != 0) return -1;
    return 0;
}

int di_backend_matmul(const DiKernelBackend *be, DiThreadPool *pool, const DiMatrix *w, const float *x, int64_t n, float *y,
                      bool qa, float *scratch, int64_t scratch_floats) {
    if (!be) return di_errorf("matmul: no backend");
    if (!w || (unsigned)w->format >= DI_MAT_N_FORMATS) return di_errorf("matmul: no weight, or a format the backend lacks");
    return be->mat[w->format].matmul(be, pool, w, x, n, y, qa, scratch, scratch_floats);
}
