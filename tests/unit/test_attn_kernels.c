/* test_attn_kernels.c — the attention kernels (kernels/cpu/attn_simd.h), through the backend
 * tables that hold them (kernels/backend.h).  The reference is held
 * to the spec's definitions (a plain loop, a brute-force sort), and every SIMD route this CPU
 * runs (AVX2, AVX-512 on x86-64; NEON on aarch64) to the reference, bit for bit: each kernel keeps the reference's order
 * in every sum, so the claim is equality, not a tolerance.  Random data plus the edge sizes of
 * each kernel's blocking (tails of keys, heads, dimensions). */
#include "test.h"

#include "kernels/cpu/attn_lanes.h"
#include "kernels/cpu/attn_simd.h"
#include "kernels/cpu/matmul_simd.h"
#include "kernels/matmul.h"

#include <stdbool.h>

static float rand_float(float scale) { return ((float)test_rand32() / 4294967296.0f - 0.5f) * scale; }

static void fill(float *x, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) x[i] = rand_float(scale);
}

/* The kernel tables (kernels/backend.h) this CPU can run; the reference is always first. */
static const DiKernelBackend *select_table(DiEnvKernels want) {
    const DiKernelBackend *be = NULL;
    CHECK_EQ_INT(di_backend_cpu_select((DiEnvKernelKnobs){want, DI_ENV_FP8_GEMV_AUTO}, &be), 0);
    return be;
}

static int tables(const DiKernelBackend *out[DI_BACKEND_CPU_TABLES_MAX]) {
    int n = di_backend_cpu_tables(out, DI_BACKEND_CPU_TABLES_MAX);
    CHECK(n >= 1 && out[0] == di_backend_cpu_ref());
    return n;
}

/* ---------------------------------------------------------------- index scores */

/* §5.6.6 step 3 one term at a time; volatile keeps the compiler from fusing or reordering. */
static float score_by_definition(const float *q, const float *wh, int64_t HI, int64_t DI, const float *k) {
    float sc = 0;
    for (int64_t h = 0; h < HI; h++) {
        float dot = 0;
        for (int64_t c = 0; c < DI; c++) {
            volatile float p = q[h * DI + c] * k[c];
            dot = dot + p;
        }
        volatile float term = wh[h] * (dot > 0 ? dot : 0.0f);
        sc = sc + term;
    }
    return sc;
}

/* Every query row r (nq of them, scores sstride apart) against every key, stride apart. */
TEST(index_scores_equal_the_definition_on_every_route_bit_for_bit) {
    static const int64_t his[] = {1, 3, 4, 5, 8}, dis[] = {1, 7, 8, 32, 64, 65, 128};
    static const int64_t ns[] = {0, 1, 7, 8, 15, 16, 17, 31, 32, 33, 100}, nqs[] = {1, 3, 8};
    enum { MAXN = 100, MAXD = 128, MAXH = 8, MAXQ = 8, STRIDE_PAD = 3, SSTRIDE = MAXN + 5 };
    static float q[MAXQ * MAXH * MAXD], wh[MAXQ * MAXH], keys[MAXN * (MAXD + STRIDE_PAD)];
    static float got[MAXQ * SSTRIDE], want[MAXQ * SSTRIDE];
    const DiKernelBackend *tab[DI_BACKEND_CPU_TABLES_MAX];
    int nt = tables(tab);
    for (size_t a = 0; a < sizeof his / sizeof *his; a++)
        for (size_t b = 0; b < sizeof dis / sizeof *dis; b++)
            for (size_t c = 0; c < sizeof ns / sizeof *ns; c++) {
                int64_t HI = his[a], DI = dis[b], n = ns[c], nq = nqs[(a + b + c) % 3];
                int64_t stride = DI + (int64_t)(c % 2) * STRIDE_PAD;
                fill(q, nq * HI * DI, 4.0f), fill(wh, nq * HI, 2.0f), fill(keys, n * stride, 4.0f);
                for (int64_t i = 0; i < MAXQ * SSTRIDE; i++) want[i] = 12345.0f; /* nothing written between rows */
                for (int64_t r = 0; r < nq; r++)
                    for (int64_t t = 0; t < n; t++)
                        want[r * SSTRIDE + t] = score_by_definition(q + r * HI * DI, wh + r * HI, HI, DI, keys + t * stride);
                for (int i = 0; i < nt; i++) {
                    memcpy(got, want, sizeof got);
                    for (int64_t r = 0; r < nq; r++)
                        for (int64_t t = 0; t < n; t++) got[r * SSTRIDE + t] = -1.0f;
                    tab[i]->index_scores(q, wh, nq, HI, DI, keys, stride, n, got, SSTRIDE);
                    CHECK_MSG(memcmp(got, want, sizeof got) == 0, "%s: %lld rows, HI %lld, DI %lld, n %lld", tab[i]->name,
                              (long long)nq, (long long)HI, (long long)DI, (long long)n);
                }
            }
}

/* ---------------------------------------------------------------- top-k */

static bool ranks_before(float sa, int32_t a, float sb, int32_t b) { return sa > sb || (sa == sb && a < b); }

/* Brute force: rank every finite entry by selection, keep k, then sort the ids. */
static int64_t topk_by_sorting(const float *score, const int32_t *ids, int64_t n, int64_t k, int32_t *out) {
    static int32_t idx[4096];
    int64_t m = 0;
    for (int64_t t = 0; t < n; t++)
        if (isfinite(score[t]) || (isinf(score[t]) && score[t] > 0)) idx[m++] = (int32_t)t;
    for (int64_t i = 0; i < m; i++) /* selection sort by rank */
        for (int64_t j = i + 1; j < m; j++) {
            int32_t a = idx[i], b = idx[j];
            if (ranks_before(score[b], ids ? ids[b] : b, score[a], ids ? ids[a] : a)) idx[i] = b, idx[j] = a;
        }
    int64_t take = k < m ? k : m;
    for (int64_t j = 0; j < take; j++) out[j] = ids ? ids[idx[j]] : idx[j];
    for (int64_t i = 0; i < take; i++)
        for (int64_t j = i + 1; j < take; j++)
            if (out[j] < out[i]) {
                int32_t t = out[i];
                out[i] = out[j], out[j] = t;
            }
    return take;
}

/* Scores drawn from a few values (many ties), with -inf, NaN and +inf sprinkled in. */
static void tie_heavy_scores(float *s, int64_t n, int distinct) {
    for (int64_t t = 0; t < n; t++) {
        uint32_t r = test_rand32() % 100;
        s[t] = r < 5 ? -INFINITY : r < 7 ? NAN : r < 8 ? INFINITY : (float)(test_rand32() % (uint32_t)distinct) - 3.0f;
        if (r >= 8 && r < 12) s[t] = -0.0f; /* equal to +0 for the ranking */
    }
}

TEST(topk_selects_the_k_best_by_score_then_id_on_every_route) {
    static const int64_t ns[] = {0, 1, 7, 8, 9, 16, 100, 1500, 4000}, ks[] = {0, 1, 3, 16, 512, 5000};
    enum { MAXN = 4000 };
    static float score[MAXN];
    static int32_t ids[MAXN], want[MAXN], got[MAXN];
    static DiScored buf[MAXN + 8];
    const DiKernelBackend *tab[DI_BACKEND_CPU_TABLES_MAX];
    int nt = tables(tab);
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
        for (size_t b = 0; b < sizeof ks / sizeof *ks; b++)
            for (int kind = 0; kind < 4; kind++) {
                int64_t n = ns[a], k = ks[b];
                if (kind == 0) fill(score, n, 100.0f);
                else if (kind == 1) tie_heavy_scores(score, n, 4);
                else for (int64_t t = 0; t < n; t++) score[t] = (float)t * (kind == 2 ? 1.0f : -1.0f); /* rising: every entry beats the kept ones */
                bool with_ids = b % 2 == 1;
                int32_t next = 5;
                for (int64_t t = 0; t < n; t++) ids[t] = next += 1 + (int32_t)(test_rand32() % 3); /* ascending, gaps */
                int64_t nw = topk_by_sorting(score, with_ids ? ids : NULL, n, k, want);
                for (int i = 0; i < nt; i++) {
                    int64_t ng = tab[i]->topk(score, with_ids ? ids : NULL, n, k, buf, got);
                    CHECK_MSG(ng == nw && memcmp(got, want, (size_t)nw * sizeof *got) == 0,
                              "%s: n %lld, k %lld, kind %d: %lld vs %lld picked", tab[i]->name, (long long)n, (long long)k,
                              kind, (long long)ng, (long long)nw);
                }
            }
}

TEST(topk_breaks_ties_by_the_lower_id) {
    float score[6] = {2.0f, 5.0f, 2.0f, -INFINITY, 2.0f, 5.0f};
    int32_t out[6];
    DiScored buf[16];
    const DiKernelBackend *tab[DI_BACKEND_CPU_TABLES_MAX];
    int nt = tables(tab);
    for (int i = 0; i < nt; i++) {
        CHECK_EQ_INT(tab[i]->topk(score, NULL, 6, 3, buf, out), 3); /* 5 (1), 5 (5), then 2 at the lowest id 0 */
        CHECK(out[0] == 0 && out[1] == 1 && out[2] == 5);
        CHECK_EQ_INT(tab[i]->topk(score, NULL, 6, 6, buf, out), 5); /* -inf is never picked */
    }
}

/* ---------------------------------------------------------------- attention heads */

TEST(heads_equal_the_reference_bit_for_bit_on_every_route) {
    static const int64_t nhs[] = {1, 3, 4, 8, 9, 16}, dhs[] = {8, 17, 64, 128}, nks[] = {1, 5, 8, 9, 80};
    enum { MAXH = 16, MAXD = 128, MAXK = 80 };
    static float q[MAXH * MAXD], sink[MAXH], keyrows[MAXK * MAXD], want[MAXH * MAXD], got[MAXH * MAXD];
    static float z[MAXK * DI_BACKEND_HEAD_GROUP];
    const float *keys[MAXK];
    const DiKernelBackend *tab[DI_BACKEND_CPU_TABLES_MAX];
    int nt = tables(tab);
    for (size_t a = 0; a < sizeof nhs / sizeof *nhs; a++)
        for (size_t b = 0; b < sizeof dhs / sizeof *dhs; b++)
            for (size_t c = 0; c < sizeof nks / sizeof *nks; c++) {
                int64_t nh = nhs[a], Dh = dhs[b], nk = nks[c];
                fill(q, nh * Dh, 2.0f), fill(sink, nh, 8.0f), fill(keyrows, nk * Dh, 2.0f);
                for (int64_t j = 0; j < nk; j++) keys[j] = keyrows + ((j * 7) % nk) * Dh; /* any order, repeats */
                float scale = 1.0f / sqrtf((float)Dh);
                di_backend_cpu_ref()->attn_heads(q, nh, Dh, keys, nk, sink, scale, want, z);
                for (int i = 1; i < nt; i++) {
                    tab[i]->attn_heads(q, nh, Dh, keys, nk, sink, scale, got, z);
                    CHECK_MSG(memcmp(got, want, (size_t)(nh * Dh) * sizeof *got) == 0, "%s: %lld heads, Dh %lld, %lld keys",
                              tab[i]->name, (long long)nh, (long long)Dh, (long long)nk);
                }
            }
}

/* §4.8 by hand: one key, q·k = 2, scale 1/2, sink 0: z = 1, o = e/(1 + e) · k. */
TEST(heads_follow_the_sink_softmax_by_hand) {
    float k[8] = {1, 0, 0, 0, 0, 0, 0, 2}, q[8] = {2, 0, 0, 0, 0, 0, 0, 0}, sink = 0, o[8], z[DI_BACKEND_HEAD_GROUP];
    const float *keys[1] = {k};
    const DiKernelBackend *tab[DI_BACKEND_CPU_TABLES_MAX];
    int nt = tables(tab);
    float w = expf(1.0f) / (1.0f + expf(1.0f));
    for (int i = 0; i < nt; i++) {
        tab[i]->attn_heads(q, 1, 8, keys, 1, &sink, 0.5f, o, z);
        CHECK_NEAR(o[0], w, 1e-6);
        CHECK_NEAR(o[7], 2 * w, 1e-6);
        CHECK(o[1] == 0.0f);
    }
}

/* The heads' softmax takes its exponentials eight at a time: they must be expf's, bit for bit,
 * on a dense sweep of the softmax's range (every 2^-12 of [-110, 0], where scaled differences
 * to the maximum lie) plus random values on the whole float line and the special values. */
TEST(vector_expf_gives_the_bits_of_expf) {
    if (!di_simd_available()) {
        CHECK(select_table(DI_ENV_KERNELS_AUTO) == di_backend_cpu_ref());
        return;
    }
    CHECK(di_attn_expf_exact()); /* glibc's algorithm: this build's libm has it */
    enum { BATCH = 4096 };
    static float x[BATCH], got[BATCH];
    long bad = 0, total = 0;
    for (int64_t base = -110 * 4096; base < 0; base += BATCH) {
        for (int i = 0; i < BATCH; i++) x[i] = (float)(base + i) / 4096.0f;
        di_attn_expf_row(x, BATCH, got);
        for (int i = 0; i < BATCH; i++, total++) bad += memcmp(&got[i], &(float){expf(x[i])}, sizeof(float)) != 0;
    }
    for (int r = 0; r < 64; r++) {
        for (int i = 0; i < BATCH; i++) {
            uint32_t u = test_rand32();
            memcpy(&x[i], &u, sizeof u);
        }
        x[0] = NAN, x[1] = INFINITY, x[2] = -INFINITY, x[3] = 88.72283f, x[4] = 88.7229f, x[5] = -103.5f, x[6] = -0.0f;
        di_attn_expf_row(x, BATCH, got);
        for (int i = 0; i < BATCH; i++, total++) {
            float want = expf(x[i]);
            bad += isnan(want) ? !isnan(got[i]) : memcmp(&got[i], &want, sizeof want) != 0;
        }
    }
    CHECK_MSG(bad == 0, "%ld of %ld values differ from expf", bad, total);
}

/* Each backend table (kernels/backend.h) holds its route's kernels, so the model runs them. */
TEST(the_backend_tables_hold_each_routes_kernels) {
    const DiKernelBackend *be = select_table(DI_ENV_KERNELS_REF);
    CHECK(be->index_scores == di_attn_index_scores_ref && be->topk == di_attn_topk_ref);
    CHECK(be->attn_heads == di_attn_heads_ref && be->best_k == di_attn_best_k_sorted);
#if defined(__x86_64__)
    if (di_simd_available()) {
        be = select_table(DI_ENV_KERNELS_AVX2);
        CHECK(be->index_scores == di_attn_index_scores_avx2 && be->topk == di_attn_topk_avx2);
        CHECK(be->attn_heads == di_attn_heads_avx2 && be->best_k == di_attn_best_k_sorted);
    }
    if (di_simd_avx512_available()) {
        be = select_table(DI_ENV_KERNELS_AVX512);
        CHECK(be->index_scores == di_attn_index_scores_avx512 && be->topk == di_attn_topk_avx2);
        CHECK(be->attn_heads == di_attn_heads_avx2 && be->best_k == di_attn_best_k_sorted);
    }
#else
    be = select_table(DI_ENV_KERNELS_NEON);
    CHECK(be->index_scores == di_attn_index_scores_neon && be->topk == di_attn_topk_neon);
    CHECK(be->attn_heads == di_attn_heads_neon && be->best_k == di_attn_best_k_sorted);
#endif
}

int main(void) {
    RUN_TEST(index_scores_equal_the_definition_on_every_route_bit_for_bit);
    RUN_TEST(topk_selects_the_k_best_by_score_then_id_on_every_route);
    RUN_TEST(topk_breaks_ties_by_the_lower_id);
    RUN_TEST(heads_equal_the_reference_bit_for_bit_on_every_route);
    RUN_TEST(heads_follow_the_sink_softmax_by_hand);
    RUN_TEST(vector_expf_gives_the_bits_of_expf);
    RUN_TEST(the_backend_tables_hold_each_routes_kernels);
    return TEST_SUMMARY();
}
