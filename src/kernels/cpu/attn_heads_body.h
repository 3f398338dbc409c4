/* attn_heads_body.h — the attention-heads kernel's driver, written once and compiled by
 * attn_avx2.c and kernels/neon/attn_neon.c under their own instruction sets.  The includer
 * defines DI_ATTN_HEADS_FN (the name) and three static functions on its own vectors:
 *   head_dots(qT, Dh, keys, nk, scale, z)   z[j][l] = (q_l · k_j) · scale, l < 8;
 *   head_softmax(sink, ng, nk, z, den)      z[j][l] = e^(z - M_l) in place, den[l] the sums;
 *   head_values16(e, l0, c, keys, nk, den, out)  out[u][0..16) = (Σ_j e[j][l0+u] · k_j[c ..]) /
 *                                                den[l0+u] for u < 4, one 16-column pass.
 * Heads go in groups of eight (one lane each), queries transposed once per group; each output
 * keeps the reference's order (di_attn_heads_ref): the dot products, sums and weighted sums are
 * one chain per lane, in ascending j and c.  No include guard: included once per instruction set. */

/* o_l[c] = (Σ_j e[j][l] · k_j[c]) / den[l] for lanes l0 .. l0+nl-1 (nl <= 4): whole 16-column
 * passes (four lanes computed, so the accumulators stay in registers), then the columns left. */
static void head_values(const float *e, int l0, int nl, int64_t Dh, const float *const *keys, int64_t nk,
                        const float den[8], float *o) {
    int64_t c = 0;
    for (; c + 16 <= Dh; c += 16) {
        float out[4][16] __attribute__((aligned(32)));
        head_values16(e, l0, c, keys, nk, den, out);
        for (int u = 0; u < nl; u++) memcpy(o + u * Dh + c, out[u], sizeof out[u]);
    }
    for (; c < Dh; c++)
        for (int u = 0; u < nl; u++) {
            float acc = 0;
            for (int64_t j = 0; j < nk; j++) acc += e[j * 8 + l0 + u] * keys[j][c];
            o[u * Dh + c] = acc / den[l0 + u];
        }
}

void DI_ATTN_HEADS_FN(const float *q, int64_t nh, int64_t Dh, const float *const *keys, int64_t nk, const float *sink,
                      float scale, float *o, float *z) {
    if (Dh > DI_ATTN_MAX_DIM || nk <= 0) {
        di_attn_heads_ref(q, nh, Dh, keys, nk, sink, scale, o, z);
        return;
    }
    float qT[DI_ATTN_MAX_DIM * 8] __attribute__((aligned(32)));
    for (int64_t g0 = 0; g0 < nh; g0 += 8) {
        int ng = nh - g0 < 8 ? (int)(nh - g0) : 8;
        for (int64_t c = 0; c < Dh; c++)
            for (int l = 0; l < 8; l++) qT[c * 8 + l] = l < ng ? q[(g0 + l) * Dh + c] : 0.0f;
        head_dots(qT, Dh, keys, nk, scale, z);
        float den[8];
        head_softmax(sink + g0, ng, nk, z, den);
        for (int l0 = 0; l0 < ng; l0 += 4)
            head_values(z, l0, ng - l0 < 4 ? ng - l0 : 4, Dh, keys, nk, den, o + (g0 + l0) * Dh);
    }
}
