/* attn_simd.h — the CPU kernels of the attention sub-layer's non-matmul work (spec §4.8,
 * §5.6.6): lightning-indexer scores, top-k selection and the sparse attention of a row's heads
 * over its window and selected compressed rows.
 *
 * Four implementations: the scalar reference (attn_ref.c, the spec's math as written), AVX2
 * (attn_avx2.c) and AVX-512 (attn_avx512.c) on x86-64, NEON (kernels/neon/attn_neon.c) on
 * aarch64, chosen once with the backend table (the CPU and DEEPINFER_KERNELS, backend_cpu.c).
 * Every route
 * gives the reference's bits: each dot product, head sum and softmax sum keeps the reference's
 * order (one separate multiply and add per term, as the build's -ffp-contract=off gives the
 * scalar loops); the vector lanes hold different entries, keys or heads, never parts of one sum
 * (tests/unit/test_attn_kernels.c checks it on random data and edge sizes).
 *
 * Plain signatures (pointers and dimensions): the CPU backend's tables (backend_cpu.c) hold the
 * functions named below as their attn_heads, index_scores, topk and best_k entries, whose
 * contracts (kernels/backend.h) they keep; callers reach them through a table, chosen once. */
#ifndef DI_KERNELS_CPU_ATTN_SIMD_H
#define DI_KERNELS_CPU_ATTN_SIMD_H

#include "kernels/backend.h"

#include <stdint.h>

/* Moves the k best of it[0..m) (score descending, id ascending) to it[0..k), best first;
 * returns min(k, m).  The scan keeps the best so far sorted and rejects most entries with one
 * compare: ~O(m) for k << m (the reference top-k, and the indexer's candidate blocks). */
int64_t di_attn_best_k_sorted(DiScored *it, int64_t m, int64_t k);

/* Each route's kernels by name, for the backend tables' static initialisers (the AVX2 ones only
 * where di_simd_available(), the AVX-512 one only where di_simd_avx512_available()). */
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
/* The NEON kernels (kernels/neon/attn_neon.c, aarch64 builds only). */
void di_attn_index_scores_neon(const float *q, const float *wh, int64_t nq, int64_t HI, int64_t DI, const float *keys,
                               int64_t stride, int64_t n, float *score, int64_t sstride);
int64_t di_attn_topk_neon(const float *score, const int32_t *ids, int64_t n, int64_t k, DiScored *buf, int32_t *out);
void di_attn_heads_neon(const float *q, int64_t nh, int64_t Dh, const float *const *keys, int64_t nk, const float *sink,
                        float scale, float *o, float *z);

#endif
