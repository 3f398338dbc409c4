/* attn_ref.c — the scalar reference of the attention kernels (attn_simd.h), the spec's math as
 * written.  The SIMD routes are checked against
 * these loops bit for bit, and DEEPINFER_KERNELS=ref runs them. */
#include "kernels/cpu/attn_simd.h"

#include "kernels/cpu/attn_lanes.h"

#include "kernels/cpu/matmul_simd.h"
#include "kernels/matmul.h"
#include "kernels/vec.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

void di_attn_index_scores_ref(const float *q, const float *wh, int64_t nq, int64_t HI, int64_t DI, const float *keys,
                              int64_t stride, int64_t n, float *score, int64_t sstride) {
    for (int64_t r = 0; r < nq; r++)
        for (int64_t t = 0; t < n; t++) {
            const float *k = keys + t * stride, *qr = q + r * HI * DI;
            float sc = 0;
            for (int64_t h = 0; h < HI; h++) {
                float dot = 0;
                for (int64_t c = 0; c < DI; c++) dot += qr[h * DI + c] * k[c];
                sc += wh[r * HI + h] * fmaxf(dot, 0.0f);
            }
            score[r * sstride + t] = sc;
        }
}

/* score descending, id ascending (the canonical tie order, §5.6.6 step 6) */
static inline bool ranks_before(DiScored a, DiScored b) {
    return a.score > b.score || (a.score == b.score && a.id < b.id);
}

int64_t di_attn_best_k_sorted(DiScored *it, int64_t m, int64_t k) {
    if (k > m) k = m;
    int64_t have = 0;
    for (int64_t i = 0; i < m && k > 0; i++) {
        DiScored s = it[i]; /* have <= i: the writes below only touch entries already read */
        if (have == k && !ranks_before(s, it[k - 1])) continue;
        int64_t j = have < k ? have++ : k - 1;
        while (j > 0 && ranks_before(s, it[j - 1])) {
            it[j] = it[j - 1];
            j--;
        }
        it[j] = s;
    }
    return k;
}

static int by_id(const void *pa, const void *pb) {
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    return (a > b) - (a < b);
}

int64_t di_attn_topk_ref(const float *score, const int32_t *ids, int64_t n, int64_t k, DiScored *buf, int32_t *out) {
    int64_t m = 0;
    for (int64_t t = 0; t < n; t++)
        if (score[t] > -INFINITY) buf[m++] = (DiScored){score[t], ids ? ids[t] : (int32_t)t};
    int64_t take = di_attn_best_k_sorted(buf, m, k);
    for (int64_t j = 0; j < take; j++) out[j] = buf[j].id;
    qsort(out, (size_t)take, sizeof *out, by_id);
    return take;
}

/* One head: z_j = (q·k_j)·scale, M = max(sink, z), o = Σ e^(z_j−M) k_j / (e^(sink−M) + Σ e^(z_j−M)). */
static void head_ref(const float *qh, int64_t Dh, const float *const *keys, int64_t nk, float sink, float scale, float *oh,
                     float *z) {
    float mx = sink;
    int64_t j = 0;
    for (; j + 8 <= nk; j += 8) { /* eight keys at a time, each dot product in its own order */
        float dot[8];
        di_vec_dot_rows8(qh, keys + j, Dh, dot);
        for (int l = 0; l < 8; l++) z[j + l] = dot[l] * scale;
    }
    for (; j < nk; j++) {
        float dot = 0;
        for (int64_t c = 0; c < Dh; c++) dot += qh[c] * keys[j][c];
        z[j] = dot * scale;
    }
    for (j = 0; j < nk; j++) mx = fmaxf(mx, z[j]);
    float den = expf(sink - mx); /* the sink adds to the denominator only */
    memset(oh, 0, (size_t)Dh * sizeof *oh);
    for (j = 0; j < nk; j++) {
        float e = expf(z[j] - mx);
        den += e;
        di_vec_add_scaled(oh, e, keys[j], Dh);
    }
    for (int64_t c = 0; c < Dh; c++) oh[c] /= den;
}

void di_attn_heads_ref(const float *q, int64_t nh, int64_t Dh, const float *const *keys, int64_t nk, const float *sink,
                       float scale, float *o, float *z) {
    for (int64_t h = 0; h < nh; h++) head_ref(q + h * Dh, Dh, keys, nk, sink[h], scale, o + h * Dh, z);
}

/* ---- the SIMD top-k's exact selection (attn_lanes.h) */

static inline void swap_scored(DiScored *a, DiScored *b) {
    DiScored t = *a;
    *a = *b;
    *b = t;
}

int64_t di_attn_select_best(DiScored *buf, int64_t m, int64_t k) {
    if (k >= m) return m;
    if (k <= 0) return 0;
    int64_t lo = 0, hi = m - 1;
    while (lo < hi) { /* invariant: buf[0..lo) rank before buf[lo..hi], which rank before buf(hi..m) */
        swap_scored(&buf[lo + (hi - lo) / 2], &buf[hi]);
        DiScored p = buf[hi];
        int64_t s = lo;
        for (int64_t i = lo; i < hi; i++)
            if (ranks_before(buf[i], p)) swap_scored(&buf[i], &buf[s++]);
        swap_scored(&buf[s], &buf[hi]); /* the pivot at its rank s */
        if (s == k - 1) break;
        if (s < k - 1) lo = s + 1;
        else hi = s - 1;
    }
    return k;
}

int64_t di_attn_topk_finish(DiScored *buf, int64_t m, int64_t k, int32_t *out) {
    int64_t take = di_attn_select_best(buf, m, k);
    for (int64_t j = 0; j < take; j++) out[j] = buf[j].id;
    qsort(out, (size_t)take, sizeof *out, by_id);
    return take;
}
