/* attn_simd.h — the CPU kernels of the attention sub-layer's non-matmul work (spec §4.8,
 * §5.6.6): lightning-indexer scores, top-k selection and the sparse attention of a row's heads
 * over its window and selected compressed rows.
 *
 * Three implementations: the scalar reference (attn_ref.c, the spec's math as written), AVX2
 * (attn_avx2.c) and AVX-512 (attn_avx512.c), chosen once with the backend table (cpuid and
 * DEEPINFER_KERNELS, backend_cpu.c).  Every route
 * gives the reference's bits: each dot product, head sum and softmax sum keeps the reference's
 * order (one separate multiply and add per term, as the build's -ffp-contract=off gives the
 * scalar loops); the vector lanes hold different entries, keys or heads, never parts of one sum
 * (tests/unit/test_attn_kernels.c checks it on random data and edge sizes).
 *
 * Plain signatures (pointers and dimensions): the CPU backend's tables (backend_cpu.c) hold the
 * functions named below as their attn_heads, index_scores, topk and best_k entries; the tables
 * of this header group each route's three for the tests and the benchmark. */
#ifndef DI_KERNELS_CPU_ATTN_SIMD_H
#define DI_KERNELS_CPU_ATTN_SIMD_H

#include "kernels/backend.h"

#include <stdint.h>

typedef struct {
    const char *name; /* "reference", "avx2", "avx512" */
    /* For nq query rows r: score[r·sstride + t] = Σ_h wh[r][h] · max(0, q[r][h] · k_t), h
     * ascending from +0, each dot product ascending over its DI terms from +0 (§5.6.6 step 3),
     * for the n keys k_t = keys + t·stride (DI floats each); q is [nq][HI][DI]; wh [nq][HI] is
     * the head weights with the DI^-½·HI^-½ scale already applied. */
    void (*index_scores)(const float *q, const float *wh, int64_t nq, int64_t HI, int64_t DI, const float *keys,
                         int64_t stride, int64_t n, float *score, int64_t sstride);
    /* Writes to out the ids of the min(k, #finite) best finite scores of score[0..n) by
     * (score descending, id ascending), in ascending id order, and returns their count (§5.6.6
     * step 6).  ids: the entries' ids, ascending (NULL: t itself).  buf: n + 8 scored pairs of
     * scratch. */
    int64_t (*topk)(const float *score, const int32_t *ids, int64_t n, int64_t k, DiScored *buf, int32_t *out);
    /* §4.8 for nh heads of one query row: o[h] = softmax with sink over the nk keys (key =
     * value, Dh floats each) of (q[h] · k_j) · scale, weighting the keys.  q, o: [nh][Dh]; sink:
     * [nh]; z: nk · DI_BACKEND_HEAD_GROUP floats of scratch. */
    void (*heads)(const float *q, int64_t nh, int64_t Dh, const float *const *keys, int64_t nk, const float *sink,
                  float scale, float *o, float *z);
} DiAttnKernels;

extern const DiAttnKernels di_attn_kernels_ref;
extern const DiAttnKernels di_attn_kernels_avx2;   /* call only where di_simd_available() */
extern const DiAttnKernels di_attn_kernels_avx512; /* call only where di_simd_avx512_available() */

/* Moves the k best of it[0..m) (score descending, id ascending) to it[0..k), best first;
 * returns min(k, m).  The scan keeps the best so far sorted and rejects most entries with one
 * compare: ~O(m) for k << m (the reference top-k, and the indexer's candidate blocks). */
int64_t di_attn_best_k_sorted(DiScored *it, int64_t m, int64_t k);

/* Each route's kernels by name, for the backend tables' static initialisers. */
void di_attn_index_scores_ref(const float *q, const float *wh, int64_t nq, int64_t HI, int64_t DI, const float *keys,
                              int64_t stride, int64_t n, float *score, int64_t sstride);
int64_t di_attn_topk_ref(const float *score, const int32_t *ids, int64_t n, int64_t k, DiScored *buf, int32_t *out);
void di_attn_heads_ref(const float *q, int64_t nh, int64_t Dh, const float *const *keys, int64_t nk, const float *sink,
                       float scale, float *o, float *z);
void di_attn_index_scores_avx2(const float *q, const float *wh, int64_t nq, int64_t HI, int64_t DI, const float *keys,
                               int64_t stride, int64_t n, float *score, int64_t sstride);
int64_t di_attn_topk_avx2(const float *score, const int32_t *ids, int64_t n, int64_t k, DiScored *buf, int32_t *out);
void di_attn_heads_avx2(const float *q, int64_t nh, int64_t Dh, const float *const *keys, int64_t nk, const float *sink,
                        float scale, float *o, float *z);
void di_attn_index_scores_avx512(const float *q, const float *wh, int64_t nq, int64_t HI, int64_t DI, const float *keys,
                                 int64_t stride, int64_t n, float *score, int64_t sstride);

#endif
