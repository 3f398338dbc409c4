/* matmul.c — the CPU backend's SIMD matmul driver (matmul.h, the tables of backend_cpu.c): pads
 * the activations to whole scale blocks and splits the output rows over the thread pool; and
 * di_matmul / di_matmul_qa, which run a kernel table the caller chose once.
 *
 * Nothing here reads a knob: the tables carry their variant (tiles, FP8 route), fixed when
 * di_backend_cpu_select chose them from the knobs parsed at load; the free functions
 * (di_matmul_simd, di_matrix_prepare) run the cpuid / probe choice, di_simd_auto_variant.
 *
 * Threads split rows only, in chunks of DI_SIMD_ROW_CHUNK: every output row is computed whole by
 * one task with the reduction order of matmul_simd.h, so neither the thread count nor the
 * schedule changes a bit of the result (engine-features.md §4.2: no split-K). */
#include "kernels/matmul.h"

#include "base/error.h"
#include "base/mem.h"
#include "kernels/backend.h"
#include "kernels/cpu/matmul_simd.h"
#include "kernels/cpu/ops_cpu.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* From this many tokens on, decoding the weights once into a panel beats decoding them in
 * registers.  FP4's four-token GEMV tiles stay ahead to ~32 tokens, FP8's to ~16; F32 and BF16
 * have no decode to amortise and switch at 8.  Same bits either way; the measurements (Zen 3,
 * EPYC, Intel) are in bench/kernels_cpu.md. */
static int64_t gemm_min_tokens(DiMatFormat format) {
    switch (format) {
    case DI_MAT_FP4_ROW32: return 32;
    case DI_MAT_FP8_BLOCK: return 17;
    default: return 8;
    }
}

int64_t di_matrix_fp8_subnormal_map_bytes(const DiMatrix *w) {
    return (w->rows + 7) / 8 * ((w->cols + 31) / 32);
}

/* A byte is an E4M3 subnormal when its magnitude bits are 1..7 (exponent 0, mantissa not 0). */
void di_matrix_fp8_subnormal_map(const DiMatrix *w, uint8_t *map) {
    int64_t kblocks = (w->cols + 31) / 32;
    memset(map, 0, (size_t)di_matrix_fp8_subnormal_map_bytes(w));
    for (int64_t r = 0; r < w->rows; r++) {
        const uint8_t *row = (const uint8_t *)w->data + r * w->cols;
        uint8_t *group = map + (r / 8) * kblocks;
        for (int64_t kb = 0; kb < kblocks; kb++) {
            int64_t c1 = (kb + 1) * 32 < w->cols ? (kb + 1) * 32 : w->cols;
            uint8_t any = 0;
            for (int64_t c = kb * 32; c < c1; c++) any |= (uint8_t)((uint8_t)((row[c] & 0x7F) - 1) < 7);
            group[kb] |= any;
        }
    }
}

/* The free GEMV on the auto variant (matmul_simd.h), whichever SIMD family this build has. */
void di_simd_gemv_rows(const DiMatrix *w, const DiSimdActs *a, float *y, int64_t r0, int64_t r1, float *scratch) {
    DiSimdVariant v = di_simd_auto_variant();
    di_simd_gemv_rows_tiles(w, a, y, r0, r1, scratch, &v);
}

int di_cpu_matrix_prepare_ref(DiMatrix *w, void **owned) {
    if (!owned) return di_errorf("di_matrix_prepare: no output given");
    *owned = NULL;
    if (!w) return di_errorf("di_matrix_prepare: no matrix given");
    return di_matrix_validate(w, "prepared weight");
}

/* The subnormal map where the route widens by it (MAPPED); the other routes need nothing. */
static int prepare_for_route(DiFp8GemvRoute route, DiMatrix *w, void **owned) {
    if (di_cpu_matrix_prepare_ref(w, owned) != 0) return -1;
    if (w->format != DI_MAT_FP8_BLOCK || route != DI_FP8_GEMV_MAPPED) return 0;
    uint8_t *map = di_malloc((size_t)di_matrix_fp8_subnormal_map_bytes(w), "FP8 subnormal map");
    if (!map) return -1;
    di_matrix_fp8_subnormal_map(w, map);
    w->fp8_subnormal_map = map;
    *owned = map;
    return 0;
}

int di_cpu_matrix_prepare_simd(const DiSimdVariant *v, DiMatrix *w, void **owned) {
    return prepare_for_route(v ? v->fp8 : DI_FP8_GEMV_AUTO, w, owned);
}

int di_matrix_prepare(DiMatrix *w, void **owned) {
    if (!di_simd_available()) return di_cpu_matrix_prepare_ref(w, owned);
    return prepare_for_route(di_simd_fp8_gemv_auto_route(NULL), w, owned);
}

typedef struct {
    const DiMatrix *w;
    DiSimdActs acts;
    float *y;
    float *scratch; /* one region of scratch_floats per thread */
    const float *prepared; /* di_matmul_qa's FP4 tasks: the activations as di_simd_fp4q_prepare left them */
    int64_t scratch_floats;
    int64_t chunk; /* rows per task (row_chunk) */
    const DiSimdVariant *v; /* the table's tiles and FP8 route (the same bits every way) */
} MatmulJob;

/* GEMV tasks aim at this many per thread, so a matrix of a few hundred rows still keeps every
 * thread streaming to the end (with 96-row tasks a 128-row matrix split 96 + 32, and the
 * 24 x 4096 mHC projection ran on one thread while the others waited). */
#define GEMV_TASKS_PER_THREAD 2

/* Rows per task.  The GEMM keeps DI_SIMD_ROW_CHUNK (two whole panels).  A GEMV matrix with few
 * rows is cut finer, down to a granule that keeps an FP8 scale row-block in one task (32 rows,
 * §3.4) and, for the other formats, half a GEMV register tile.  Rows are computed whole either
 * way, so the chunk never changes a result bit. */
static int64_t row_chunk(const DiMatrix *w, bool gemm, int threads) {
    if (gemm || threads <= 1) return DI_SIMD_ROW_CHUNK;
    int64_t granule = w->format == DI_MAT_FP8_BLOCK ? 32 : 4;
    int64_t tasks = (int64_t)threads * GEMV_TASKS_PER_THREAD;
    int64_t chunk = ((w->rows + tasks - 1) / tasks + granule - 1) / granule * granule;
    return chunk < DI_SIMD_ROW_CHUNK ? chunk : DI_SIMD_ROW_CHUNK;
}

static void rows_range(const MatmulJob *job, int task, int64_t *r0, int64_t *r1) {
    *r0 = (int64_t)task * job->chunk;
    *r1 = *r0 + job->chunk < job->w->rows ? *r0 + job->chunk : job->w->rows;
}

static void gemv_task(void *ctx, int task, int thread) {
    const MatmulJob *job = ctx;
    int64_t r0, r1;
    rows_range(job, task, &r0, &r1);
    di_simd_gemv_rows_tiles(job->w, &job->acts, job->y, r0, r1, job->scratch + thread * job->scratch_floats, job->v);
}

static void fp4q_task(void *ctx, int task, int thread) {
    const MatmulJob *job = ctx;
    int64_t r0, r1;
    rows_range(job, task, &r0, &r1);
    di_simd_fp4q_rows_tiles(job->w, &job->acts, job->prepared, job->y, r0, r1, job->scratch + thread * job->scratch_floats,
                            job->v->avx512);
}

static void gemm_task(void *ctx, int task, int thread) {
    const MatmulJob *job = ctx;
    int64_t r0, r1;
    rows_range(job, task, &r0, &r1);
    di_simd_gemm_rows(job->w, &job->acts, job->y, r0, r1, job->scratch + thread * job->scratch_floats);
}

/* Scratch of one call, carved from the caller's buffer in this order (each part a whole number
 * of 64-byte lines, so every part keeps the buffer's alignment): one region per thread, the
 * activations padded to k32 columns (only when cols % 32), the FP4 block-order preparation. */
typedef struct {
    int64_t per_thread, padded, prepared; /* floats, each rounded up to 16 */
    bool gemm, block_order;
} ScratchPlan;

static int64_t round16(int64_t floats) { return (floats + 15) / 16 * 16; }

static ScratchPlan scratch_plan(const DiMatrix *w, int64_t n_tokens, bool block_order) {
    ScratchPlan p = {0};
    int64_t k32 = (w->cols + 31) / 32 * 32;
    p.block_order = block_order && w->format == DI_MAT_FP4_ROW32;
    p.gemm = !p.block_order && n_tokens >= gemm_min_tokens(w->format);
    p.per_thread = round16(p.block_order ? di_simd_fp4q_scratch_floats(w->cols) : di_simd_scratch_floats(w->cols, p.gemm));
    p.padded = k32 == w->cols ? 0 : round16(n_tokens * k32);
    p.prepared = p.block_order ? round16(di_simd_fp4q_prepared_floats(n_tokens, w->cols)) : 0;
    return p;
}

static int64_t plan_floats(const ScratchPlan *p, int threads) { return (int64_t)threads * p->per_thread + p->padded + p->prepared; }

/* The activations with each row padded by zeros to k32 columns (into `padded` only when cols % 32). */
static void padded_acts(const float *x, int64_t n_tokens, int64_t cols, DiSimdActs *acts, float *padded) {
    int64_t k32 = (cols + 31) / 32 * 32;
    acts->n_tokens = n_tokens;
    acts->k32 = k32;
    acts->x = x;
    if (k32 == cols) return;
    for (int64_t t = 0; t < n_tokens; t++) {
        memcpy(padded + t * k32, x + t * cols, (size_t)cols * sizeof(float));
        memset(padded + t * k32 + cols, 0, (size_t)(k32 - cols) * sizeof(float));
    }
    acts->x = padded;
}

/* block_order: the FP4 block-order kernels of di_matmul_qa (every token count: they have no
 * panel GEMM), else the GEMV or the GEMM by token count.  scratch: 64-byte aligned, at least
 * scratch_plan's floats for the pool's thread count (checked by the callers). */
static void matmul_simd_run(DiThreadPool *pool, const DiMatrix *w, const float *x, int64_t n_tokens, float *y,
                            const ScratchPlan *plan, float *scratch, const DiSimdVariant *v) {
    int threads = pool ? di_pool_threads(pool) : 1;
    MatmulJob job = {.w = w, .y = y, .v = v};
    job.chunk = row_chunk(w, plan->gemm, threads);
    int n_tasks = (int)((w->rows + job.chunk - 1) / job.chunk);
    /* not zeroed: the kernels write every scratch float they read (a GEMM's is ~240 KB a thread,
     * and zeroing it was ~3 % of a batched decode step) */
    job.scratch = scratch;
    job.scratch_floats = plan->per_thread;
    float *rest = scratch + (int64_t)threads * plan->per_thread;
    padded_acts(x, n_tokens, w->cols, &job.acts, rest);
    if (plan->block_order) {
        float *prepared = rest + plan->padded;
        di_simd_fp4q_prepare(&job.acts, prepared);
        job.prepared = prepared;
    }
    di_pool_run(pool, n_tasks, plan->block_order ? fp4q_task : plan->gemm ? gemm_task : gemv_task, &job);
}

static int check_call(const DiMatrix *w, const float *x, int64_t n_tokens, float *y) {
    if (di_matrix_validate(w, "matmul weight") != 0) return -1;
    if (!x || !y || n_tokens < 0) return di_errorf("matmul: invalid activations (x %p, y %p, n_tokens %lld)",
                                                   (const void *)x, (void *)y, (long long)n_tokens);
    if (!di_simd_available()) return di_errorf("matmul: this CPU lacks AVX2 or FMA");
    return 0;
}

/* The allocating entry points: scratch for this one call. */
static int matmul_simd(DiThreadPool *pool, const DiMatrix *w, const float *x, int64_t n_tokens, float *y) {
    if (check_call(w, x, n_tokens, y) != 0) return -1;
    if (n_tokens == 0) return 0;
    ScratchPlan plan = scratch_plan(w, n_tokens, false);
    float *scratch = di_aligned_malloc((size_t)plan_floats(&plan, pool ? di_pool_threads(pool) : 1), sizeof(float), "matmul scratch");
    if (!scratch) return di_error_wrap("matmul");
    DiSimdVariant v = di_simd_auto_variant();
    matmul_simd_run(pool, w, x, n_tokens, y, &plan, scratch, &v);
    di_aligned_free(scratch);
    return 0;
}

int64_t di_cpu_matmul_simd_scratch_floats(const DiMatrix *w, int64_t n_tokens, int threads, bool qa) {
    if (!w || n_tokens <= 0 || threads < 1) return 0;
    ScratchPlan plan = scratch_plan(w, n_tokens, qa);
    return plan_floats(&plan, threads);
}

int di_cpu_matmul_simd_into(const DiSimdVariant *v, DiThreadPool *pool, const DiMatrix *w, const float *x, int64_t n_tokens, float *y,
                            bool qa, float *scratch, int64_t scratch_floats) {
    if (check_call(w, x, n_tokens, y) != 0) return -1;
    if (n_tokens == 0) return 0;
    ScratchPlan plan = scratch_plan(w, n_tokens, qa);
    int64_t need = plan_floats(&plan, pool ? di_pool_threads(pool) : 1);
    if ((need > 0 && !scratch) || ((uintptr_t)scratch & 63) != 0 || scratch_floats < need) /* NEON GEMVs need none */
        return di_errorf("matmul: [%lld, %lld] x %lld tokens needs %lld floats of 64-byte aligned scratch, given %lld",
                         (long long)w->rows, (long long)w->cols, (long long)n_tokens, (long long)need,
                         (long long)(scratch ? scratch_floats : 0));
    matmul_simd_run(pool, w, x, n_tokens, y, &plan, scratch, v);
    return 0;
}

int di_matmul_simd(DiThreadPool *pool, const DiMatrix *w, const float *x, int64_t n_tokens, float *y) {
    return matmul_simd(pool, w, x, n_tokens, y);
}

/* The allocating entry points: the table's own scratch size, for this one call. */
static int matmul_on(const DiKernelBackend *be, DiThreadPool *pool, const DiMatrix *w, const float *x, int64_t n_tokens,
                     float *y, bool qa) {
    if (!be) return di_errorf("matmul: no kernel table given");
    if (di_matrix_validate(w, "matmul weight") != 0) return -1;
    int64_t floats = be->mat[w->format].scratch_floats(be, w, n_tokens, pool ? di_pool_threads(pool) : 1, qa);
    float *scratch = NULL;
    if (floats > 0 && !(scratch = di_aligned_malloc((size_t)floats, sizeof(float), "matmul scratch")))
        return di_error_wrap("matmul");
    int rc = di_backend_matmul(be, pool, w, x, n_tokens, y, qa, scratch, floats);
    di_aligned_free(scratch);
    return rc;
}

int di_matmul(const DiKernelBackend *be, DiThreadPool *pool, const DiMatrix *w, const float *x, int64_t n_tokens, float *y) {
    return matmul_on(be, pool, w, x, n_tokens, y, false);
}

int di_matmul_qa(const DiKernelBackend *be, DiThreadPool *pool, const DiMatrix *w, const float *x, int64_t n_tokens,
                 float *y) {
    return matmul_on(be, pool, w, x, n_tokens, y, true);
}
