/* gemm_panel_body.h — the panel GEMM's driver (di_simd_gemm_rows, matmul_simd.h), written once
 * and compiled by matmul_avx2.c and kernels/neon/matmul_neon.c under their own instruction sets.
 * A panel of up to PANEL_ROWS rows is decoded PANEL_K columns at a time into `scratch`, and a
 * register tile of TILE_ROWS rows x TILE_TOKENS tokens streams it against a block of up to
 * TOKEN_BLOCK tokens; each (row, token) keeps GROUP = 8 float32 lanes in `accs` between chunks
 * (stored and reloaded unchanged), so the per-lane order of matmul_simd.h holds whatever the
 * chunking, tile or batch.  The includer defines those constants, ACC_INDEX(i, j) (where the
 * accumulator of panel row i and token j of the block lives, in GROUP units), and
 *   decode_panel_fmt(format, w, r0, nr, k0, kc, panel)  rows r0 .. r0+nr-1, columns k0 .. k0+kc-1
 *                                                       decoded at row stride PANEL_K (format a
 *                                                       constant: one instantiation a format);
 *   gemm_tile_any(panel, x, xstride, kc, accs, nr, nt)  one nr x nt tile over kc columns;
 *   acc_lane_sum(acc)                                   the fixed lane sum of 8 stored lanes;
 * and may define GEMM_ROWS_PREPARE(w), run once per call first (default: nothing).  No include
 * guard: included once per instruction set. */

#ifndef GEMM_ROWS_PREPARE
#define GEMM_ROWS_PREPARE(w) ((void)(w))
#endif

static void decode_panel(const DiMatrix *w, int64_t r0, int nr, int64_t k0, int64_t kc, float *panel) {
    switch (w->format) {
    case DI_MAT_F32: decode_panel_fmt(DI_MAT_F32, w, r0, nr, k0, kc, panel); break;
    case DI_MAT_BF16: decode_panel_fmt(DI_MAT_BF16, w, r0, nr, k0, kc, panel); break;
    case DI_MAT_FP8_BLOCK: decode_panel_fmt(DI_MAT_FP8_BLOCK, w, r0, nr, k0, kc, panel); break;
    case DI_MAT_FP4_ROW32: decode_panel_fmt(DI_MAT_FP4_ROW32, w, r0, nr, k0, kc, panel); break;
    }
}

/* One panel of up to PANEL_ROWS rows against tokens [t0, t0 + nt_block). */
static void gemm_panel(const DiMatrix *w, const DiSimdActs *a, float *y, int64_t r0, int nr_panel, int64_t t0,
                       int nt_block, float *panel, float *accs) {
    for (int j = 0; j < nt_block; j++) /* only the accumulators this block uses */
        memset(accs + ACC_INDEX(0, j) * GROUP, 0, sizeof(float) * (size_t)nr_panel * GROUP);
    for (int64_t k0 = 0; k0 < a->k32; k0 += PANEL_K) {
        int64_t kc = a->k32 - k0 < PANEL_K ? a->k32 - k0 : PANEL_K;
        decode_panel(w, r0, nr_panel, k0, kc, panel);
        for (int j = 0; j < nt_block; j += TILE_TOKENS) {
            int nt = nt_block - j < TILE_TOKENS ? nt_block - j : TILE_TOKENS;
            const float *x = a->x + (t0 + j) * a->k32 + k0;
            for (int i = 0; i < nr_panel; i += TILE_ROWS) {
                int nr = nr_panel - i < TILE_ROWS ? nr_panel - i : TILE_ROWS;
                gemm_tile_any(panel + i * PANEL_K, x, a->k32, kc, accs + ACC_INDEX(i, j) * GROUP, nr, nt);
            }
        }
    }
    for (int j = 0; j < nt_block; j++)
        for (int i = 0; i < nr_panel; i++) y[(t0 + j) * w->rows + r0 + i] = acc_lane_sum(accs + ACC_INDEX(i, j) * GROUP);
}

void di_simd_gemm_rows(const DiMatrix *w, const DiSimdActs *a, float *y, int64_t r0, int64_t r1, float *scratch) {
    GEMM_ROWS_PREPARE(w);
    float *panel = scratch, *accs = scratch + (int64_t)PANEL_ROWS * PANEL_K;
    for (int64_t t0 = 0; t0 < a->n_tokens; t0 += TOKEN_BLOCK) {
        int nt_block = a->n_tokens - t0 < TOKEN_BLOCK ? (int)(a->n_tokens - t0) : TOKEN_BLOCK;
        for (int64_t r = r0; r < r1; r += PANEL_ROWS) {
            int nr_panel = r1 - r < PANEL_ROWS ? (int)(r1 - r) : PANEL_ROWS;
            gemm_panel(w, a, y, r, nr_panel, t0, nt_block, panel, accs);
        }
    }
}

#undef GEMM_ROWS_PREPARE
