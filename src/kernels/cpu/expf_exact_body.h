/* expf_exact_body.h — the parts of the exact vector expf (di_attn_expf_row, attn_lanes.h) that do
 * not depend on the instruction set, written once and compiled by expf_exact_avx2.c (eight lanes)
 * and kernels/neon/expf_exact_neon.c (four): the 2^(i/32) table, the one-time check against this
 * libm's expf, and the row loop.  The includer declares `static <64-bit integer> exp2_table[32]`
 * (read by its vector code), defines EXPF_VW (lanes) and
 *   expf_vec_mem(x, y)   y[0 .. EXPF_VW) = expf's bits of x[0 .. EXPF_VW),
 * then includes this.  No include guard: included once per instruction set. */

static bool exact_ok;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

/* The table (bits of 2^(i/32) less i << 47), then the check: every 1/64 on [-104, 89], a spread
 * of small magnitudes, and the range ends, against expf. */
static void init_table(void) {
    for (int i = 0; i < 32; i++) {
        double v = exp2((double)i / 32.0);
        __typeof__(exp2_table[0]) b;
        memcpy(&b, &v, sizeof b);
        exp2_table[i] = b - ((__typeof__(b))i << 47);
    }
    bool ok = true;
    for (int i = -104 * 64; i <= 89 * 64 && ok; i += EXPF_VW) {
        float x[EXPF_VW], y[EXPF_VW];
        for (int l = 0; l < EXPF_VW; l++) x[l] = (float)(i + l) / 64.0f + (l & 1 ? 1e-3f * (float)l : 0.0f);
        expf_vec_mem(x, y);
        for (int l = 0; l < EXPF_VW; l++) ok = ok && memcmp(&y[l], &(float){expf(x[l])}, sizeof(float)) == 0;
    }
    exact_ok = ok;
}

bool di_attn_expf_exact(void) {
    pthread_once(&table_once, init_table);
    return exact_ok;
}

void di_attn_expf_row(const float *x, int64_t n, float *out) {
    int64_t i = 0;
    if (di_attn_expf_exact())
        for (; i + EXPF_VW <= n; i += EXPF_VW) expf_vec_mem(x + i, out + i);
    for (; i < n; i++) out[i] = expf(x[i]);
}
