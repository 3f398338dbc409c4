/* attn_index_body.h — the indexer-score kernel, written once for any vector width and compiled
 * by attn_avx2.c (eight floats a vector) and attn_avx512.c (sixteen) under their own target
 * pragmas, and by kernels/neon/attn_neon.c (four); the includer defines DI_ATTN_VW (floats a
 * vector) and DI_ATTN_INDEX_FN (the name), includes attn_lanes.h (di_attn_stage_keys) first, and may
 * define DI_ATTN_VREG, the asm constraint of a vector register ("v" on x86, "w" on aarch64).
 *
 * Lanes are keys: a block of 2·DI_ATTN_VW keys is transposed once (di_attn_stage_keys), then
 * each head's dot product runs down the columns, one separate multiply and add per term in
 * ascending c, and the head sum adds the heads in ascending order: every lane is the
 * reference's chain for its key.  Four heads at a time give eight independent chains, enough to
 * cover the add latency.  No include guard: included once per width. */

typedef float IdxVec __attribute__((vector_size(DI_ATTN_VW * 4)));
typedef int32_t IdxMask __attribute__((vector_size(DI_ATTN_VW * 4)));

#ifndef DI_ATTN_VREG
#define DI_ATTN_VREG "v"
#endif

#define IDX_KEYS (2 * DI_ATTN_VW)
#define IDX_HEADS 4

static inline __attribute__((always_inline)) IdxVec idx_load(const float *p) {
    IdxVec v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* max(x, 0) as fmaxf gives it for the score: 0 for a NaN or negative x */
static inline __attribute__((always_inline)) IdxVec idx_relu(IdxVec x) {
    IdxVec zero = {0};
    return (IdxVec)((IdxMask)x & (x > zero));
}

/* sc[2] += Σ over heads h0 .. h0+nh-1 (nh <= IDX_HEADS, in order) of wh[h] · max(0, q_h · k). */
static inline __attribute__((always_inline)) void idx_score_heads(const float *q, const float *wh, int64_t h0, int nh,
                                                                  int64_t DI, const float *kT, IdxVec sc[2]) {
    IdxVec acc[IDX_HEADS][2] = {{{0}}};
    for (int64_t c = 0; c < DI; c++) {
        IdxVec k0 = idx_load(kT + c * IDX_KEYS), k1 = idx_load(kT + c * IDX_KEYS + DI_ATTN_VW);
        /* loaded once into registers: left to itself the compiler folds the load into each of
         * the eight multiplies, and the loads, not the arithmetic, then bound the loop */
        __asm__("" : "+" DI_ATTN_VREG(k0), "+" DI_ATTN_VREG(k1));
#pragma GCC unroll 4 /* the accumulators stay in registers */
        for (int u = 0; u < nh; u++) {
            float qc = q[(h0 + u) * DI + c];
            acc[u][0] = acc[u][0] + qc * k0;
            acc[u][1] = acc[u][1] + qc * k1;
        }
    }
#pragma GCC unroll 4
    for (int u = 0; u < nh; u++) {
        sc[0] = sc[0] + wh[h0 + u] * idx_relu(acc[u][0]);
        sc[1] = sc[1] + wh[h0 + u] * idx_relu(acc[u][1]);
    }
}

void DI_ATTN_INDEX_FN(const float *q, const float *wh, int64_t nq, int64_t HI, int64_t DI, const float *keys,
                     int64_t stride, int64_t n, float *score, int64_t sstride) {
    if (DI > DI_ATTN_MAX_DIM) {
        di_attn_index_scores_ref(q, wh, nq, HI, DI, keys, stride, n, score, sstride);
        return;
    }
    float kT[DI_ATTN_MAX_DIM * IDX_KEYS] __attribute__((aligned(64)));
    for (int64_t t0 = 0; t0 < n; t0 += IDX_KEYS) {
        int64_t nb = n - t0 < IDX_KEYS ? n - t0 : IDX_KEYS;
        di_attn_stage_keys(keys, stride, t0, nb, IDX_KEYS, DI, kT); /* once for every row */
        for (int64_t r = 0; r < nq; r++) {
            const float *qr = q + r * HI * DI, *wr = wh + r * HI;
            IdxVec sc[2] = {{0}, {0}};
            int64_t h = 0;
            for (; h + IDX_HEADS <= HI; h += IDX_HEADS) idx_score_heads(qr, wr, h, IDX_HEADS, DI, kT, sc);
            for (; h < HI; h++) idx_score_heads(qr, wr, h, 1, DI, kT, sc);
            float out[IDX_KEYS];
            memcpy(out, sc, sizeof out);
            memcpy(score + r * sstride + t0, out, (size_t)nb * sizeof *score);
        }
    }
}

#undef IDX_KEYS
#undef IDX_HEADS
#undef DI_ATTN_VREG
