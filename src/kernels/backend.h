/* backend.h — the compute backend: every kernel the model's forward pass runs, as one table of
 * plain functions (pointers and sizes, no model structs), chosen once when a model loads.
 *
 * Why a table: the model wiring (src/model/) must reach the hardware through one narrow seam so
 * that a new backend (a CUDA one, say) is a new directory filling this struct, and so that the
 * kernel variant (scalar reference, AVX2, AVX-512, NEON) is decided once from the CPU and the parsed
 * DEEPINFER_KERNELS knob, never per call.  The CPU backend is kernels/cpu/backend_cpu.c.
 *
 * Contract of every op: the math of model-v41.md (the section named at each op), float32, and
 * batch invariance (engine-features.md §4): a row's result never depends on the other rows, the
 * batch size or the thread count.  Each backend of one family gives the bits of its reference
 * where the comment says "bit-identical"; the CPU variants all do except the matmul summation
 * order (matmul.h) and the x86 tables' swiglu/expf_row exp (libmvec, within 3 ulp,
 * cpu/expf_simd.h; the NEON table's is expf's own bits).  src/kernels/README.md: what a backend
 * implements, how it registers, how its tests prove it.  Inputs are checked by the
 * caller (the model), so the ops themselves are hot-path loops; ops that can fail return -1
 * with a di_error. */
#ifndef DI_KERNELS_BACKEND_H
#define DI_KERNELS_BACKEND_H

#include "base/env.h"
#include "base/threadpool.h"
#include "kernels/matmul.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DI_MAT_N_FORMATS (DI_MAT_FP4_ROW32 + 1)

/* Heads one attn_heads call may score together: its scratch z holds nk scores of each. */
#define DI_BACKEND_HEAD_GROUP 8

/* Query rows an index_scores call should get where it can: the CPU kernels stage (transpose)
 * each block of keys once for all its rows, which pays for a small indexer. */
#define DI_BACKEND_INDEX_ROWS 8

/* An index score and its entry (or block) id (§5.6.6). */
typedef struct {
    float score;
    int32_t id;
} DiScored;

typedef struct DiKernelBackend DiKernelBackend;

/* What a backend does with one weight format (the ggml type-traits idea): y[n][rows] = W x[n][cols]
 * per matmul.h, qa selecting the quantised-activation product (di_matmul_qa's block order for
 * FP4).  scratch: scratch_floats(...) floats, 64-byte aligned, owned by the caller (the
 * workspace), so a product allocates nothing; pool may be NULL (the caller's thread). */
typedef struct {
    const char *name;  /* "f32", "bf16", "fp8-block", "fp4-row32" */
    int64_t row_align; /* the row granule a slice of the matrix keeps (di_matrix_row_align) */
    int (*matmul)(const DiKernelBackend *be, DiThreadPool *pool, const DiMatrix *w, const float *x, int64_t n, float *y,
                  bool qa, float *scratch, int64_t scratch_floats);
    int64_t (*scratch_floats)(const DiKernelBackend *be, const DiMatrix *w, int64_t n, int threads, bool qa);
} DiMatTraits;

struct DiKernelBackend {
    const char *name; /* "reference", "avx2-fma", "avx512", "neon" */
    const void *impl; /* the backend's own parameters (kernels/cpu: the tile choice) */
    DiMatTraits mat[DI_MAT_N_FORMATS];
    /* Readies a weight for this table's matmuls (as di_matrix_prepare, matmul.h, does for the
     * free functions): speed only, the same bits with or without it. */
    int (*matrix_prepare)(const DiKernelBackend *be, DiMatrix *w, void **owned);

    /* ---- number formats (§4.3-4.6), in place; n a multiple of the block (32 or 16) */
    int (*roundtrip_fp8_block32)(float *x, size_t n);
    int (*roundtrip_fp4_ue8m0_block32)(float *x, size_t n);
    int (*roundtrip_fp4_e4m3_block16)(float *x, size_t n);

    /* ---- element-wise (§4.1, §4.2, §4.7) */
    /* y = w ⊙ (x · rsqrt(mean(x²) + eps)); w NULL: unweighted; y may alias x. */
    void (*rmsnorm)(float *y, const float *x, const float *w, int64_t n, float eps);
    /* Rotates the last `rot` of x's n dims as pairs at angle fp32(pos)·freq[i] (-angle: inverse). */
    void (*rope)(const float *freq, int rot, float *x, int64_t n, int64_t pos, bool inverse);
    /* out[i] = expf((x[i] - shift) · scale); x and out may be the same array. */
    void (*expf_row)(const float *x, size_t n, float shift, float scale, float *out);

    /* ---- attention (§4.8, §5.6) */
    /* nh heads of one query row over the same nk key rows (key = value), each with its sink
     * logit: o[h] = Σ_j softmax_j(scale · q[h]·k_j) k_j, the sink only in the denominator.
     * q, o: [nh][dim]; sink: [nh]; z: nk · DI_BACKEND_HEAD_GROUP floats of scratch. */
    void (*attn_heads)(const float *q, int64_t nh, int64_t dim, const float *const *keys, int64_t nk, const float *sink,
                       float scale, float *o, float *z);
    /* Indexer scores (§5.6.6 step 3) of nq query rows r: score[r·sstride + t] = Σ_h wh[r][h]·
     * max(q[r][h]·k_t, 0), h ascending, each dot ascending over dim, for the n index-key rows
     * k_t = keys + t·stride; q is [nq][heads][dim], wh [nq][heads] the head weights with the
     * DI^-1/2·HI^-1/2 scale already applied. */
    void (*index_scores)(const float *q, const float *wh, int64_t nq, int64_t heads, int64_t dim, const float *keys,
                         int64_t stride, int64_t n, float *score, int64_t sstride);
    /* The ids of the min(k, #finite) best finite scores of score[0..n) (score descending, id
     * ascending on ties, §5.6.6 step 6) into out, ascending; returns their count.  ids: the
     * entries' ids (NULL: t itself); buf: n + 8 pairs of scratch. */
    int64_t (*topk)(const float *score, const int32_t *ids, int64_t n, int64_t k, DiScored *buf, int32_t *out);
    /* Moves the k best of it[0..m) to it[0..k), best first, by the same order; returns min(k, m)
     * (the candidate blocks, §5.6.6 step 4). */
    int64_t (*best_k)(DiScored *it, int64_t m, int64_t k);
    /* Compressor pooling (§5.6.3): out[c] = Σ_r softmax_r(gate[r][c]) · kv[r][c] over `rows` rows. */
    void (*compress_pool)(const float *const *kv, const float *const *gate, int rows, int64_t dim, float *out);

    /* ---- mHC (§5.4) for one token of hc streams of dim floats */
    /* pre/post/comb from the projection mu[(2+hc)·hc] of the raw state x[hc·dim], RMS-scaled,
     * with the Sinkhorn normalisation of comb (comb[a·hc + b]: stream a -> stream b). */
    void (*mhc_mix)(const float *mu, const float *x, int hc, int64_t dim, const float *scale, const float *base, float eps,
                    float hc_eps, int sinkhorn_iters, float *pre, float *post, float *comb);
    /* out[d] = Σ_k pi[k]·X[k][d], k ascending; out aliases no stream. */
    void (*mhc_collapse)(const float *X, const float *pi, int hc, int64_t dim, float *out);
    /* X[b] = post[b]·o + Σ_a comb[a·hc + b]·X[a], in place; o is no row of X. */
    void (*mhc_expand)(float *X, const float *o, const float *post, const float *comb, int hc, int64_t dim);

    /* ---- Engram (§5.3) */
    /* out[i·hd ..] = the FP8 table row ids[i] dequantised (codes [rows][hd], ue8m0 scales
     * [rows][hd/32]), for i < n_ids; ids already checked against the table. */
    void (*engram_gather)(const uint8_t *codes, const uint8_t *scales, const int64_t *ids, int64_t n_ids, int hd, float *out);
    /* One stream h[dim] += sigmoid(signed sqrt(RMS-scaled h·qk·key / sqrt(dim))) · value. */
    void (*engram_gate)(float *h, const float *key, const float *value, const float *qk, int64_t dim, float eps);

    /* ---- MoE (§5.7) */
    /* One token: scores[e] = sqrt(softplus(logits[e] / temp)) in place, ids[top_k] best first by
     * scores + bias (ties to the lower id), wts[top_k] normalised when norm (top_k > 1), times
     * route_scale. */
    void (*router)(float *scores, const float *bias, int n_experts, int top_k, float temp, bool norm, float route_scale,
                   int32_t *ids, float *wts);
    /* out[i] = silu(min(g[i], lim)) · clamp(u[i], ±lim) · weight (lim <= 0: no clamp). */
    void (*swiglu)(const float *g, const float *u, int64_t n, float lim, float weight, float *out);
};

/* The CPU backends (kernels/cpu/backend_cpu.c; on aarch64 its NEON kernels are kernels/neon/).
 * di_backend_cpu_select: the table the knobs (parsed once by the caller, di_env_kernel_knobs)
 * name on this CPU.  knobs.kernels on x86-64: auto: the AVX-512 tiles where cpuid has them and
 * they pay, else AVX2+FMA, else the reference; simd: as auto but never the reference; avx2:
 * without the tiles; avx512: the tiles demanded.  On aarch64: auto, simd and neon: the NEON
 * table.  knobs.fp8_gemv: the SIMD tables' FP8 GEMV widening (auto: the probe's on x86-64, made
 * once per process; FP16 on NEON).  An error naming the knob where the CPU or the build's
 * architecture lacks what it demands. */
int di_backend_cpu_select(DiEnvKernelKnobs knobs, const DiKernelBackend **out);
/* Every CPU table this machine runs, into out[0 .. n) (max >= DI_BACKEND_CPU_TABLES_MAX), the
 * reference first, each SIMD one on the FP8 route auto takes: the registry the per-op unit tests
 * run every backend from.  Returns n, or -1 with an error for too small an out. */
#define DI_BACKEND_CPU_TABLES_MAX 3
int di_backend_cpu_tables(const DiKernelBackend **out, int max);
/* di_backend_cpu_select of the knobs the environment holds now (di_env_kernel_knobs), for the
 * loaders that choose once (a model, an engine without a model's table, the CLI's bench). */
int di_backend_cpu_from_env(const DiKernelBackend **out);
/* How a CPU table's FP8 GEMV widens E4M3 codes: "f32", "fp16" or "mapped" (matmul_simd.h),
 * "reference" for the scalar table; NULL with an error for a table that is none of the CPU ones.
 * *subnormal_slowdown (when not NULL): the probe's ratio (matmul_simd.h), 0 for the reference. */
const char *di_backend_cpu_fp8_gemv_route(const DiKernelBackend *be, double *subnormal_slowdown);
/* The scalar reference: the spec's math, readable, one thread per op. */
const DiKernelBackend *di_backend_cpu_ref(void);

/* y = W x on backend be (the format's traits), for callers outside the model (tests, tools). */
int di_backend_matmul(const DiKernelBackend *be, DiThreadPool *pool, const DiMatrix *w, const float *x, int64_t n, float *y,
                      bool qa, float *scratch, int64_t scratch_floats);

#endif
