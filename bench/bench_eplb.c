/* bench_eplb.c — time per full EPLB plan (serving.md §8.1; issue target: under 5 ms) for
 * V4.1-Flash's 384 routed experts x 40 MoE layers at two deployments:
 *   decode EP64: 64 GPUs on 8 nodes, 1 redundant expert per GPU (R = 448), 8 groups;
 *   prefill EP8: 8 GPUs on 1 node, 4 redundant per GPU (R = 416).
 * Baseline, measured in the same run: the same replicate + pack steps with the reference's linear
 * scans (argmax over all experts per extra slot, min over all packs per item), checked to give
 * the identical plan.  Runs are interleaved and medians quoted (the machine is shared). */
#include "deepinfer.h"
#include "cluster/eplb.h"
#include "cluster/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { L = 40, E = 384, REPS = 31 };

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

/* Linear-scan replicate (the reference's structure): one argmax over all experts per extra slot. */
static void replicate_linear(const float *w, int e, int r, int32_t *p2l, int32_t *rank, int32_t *cnt) {
    for (int i = 0; i < e; i++) {
        p2l[i] = i;
        rank[i] = 0;
        cnt[i] = 1;
    }
    for (int s = e; s < r; s++) {
        int best = 0;
        for (int i = 1; i < e; i++)
            if (w[i] / (float)cnt[i] > w[best] / (float)cnt[best]) best = i;
        p2l[s] = best;
        rank[s] = cnt[best]++;
    }
}

static const float *sort_w;
static int by_w(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    if (sort_w[i] != sort_w[j]) return sort_w[i] > sort_w[j] ? -1 : 1;
    return i - j;
}

/* Linear-scan balanced packing: min over all non-full packs per item. */
static void pack_linear(const float *w, int n, int m, int32_t *pack, int32_t *rank) {
    int per = n / m, *order = malloc(sizeof(int) * n), *count = calloc((size_t)m, sizeof(int));
    float *pw = calloc((size_t)m, sizeof(float));
    for (int i = 0; i < n; i++) order[i] = i;
    sort_w = w;
    qsort(order, (size_t)n, sizeof(int), by_w);
    for (int k = 0; k < n; k++) {
        int best = -1;
        for (int p = 0; p < m; p++)
            if (count[p] < per && (best < 0 || pw[p] < pw[best])) best = p;
        pack[order[k]] = best;
        rank[order[k]] = count[best]++;
        pw[best] += w[order[k]];
    }
    free(order);
    free(count);
    free(pw);
}

/* The global policy's per-layer work with either the heap or the linear primitives. */
static void plan_primitives(const float *w, int R, int P, int linear, int32_t *out_p2l) {
    int32_t p2l[1024], rank[1024], cnt[E], pack[1024], rip[1024];
    _Alignas(8) int32_t scratch[8 * 1024 + E];
    float rw[1024];
    for (int l = 0; l < L; l++) {
        const float *wl = w + l * E;
        if (linear) replicate_linear(wl, E, R, p2l, rank, cnt);
        else di_eplb_replicate(wl, E, R, p2l, rank, cnt, scratch);
        for (int i = 0; i < R; i++) rw[i] = wl[p2l[i]] / (float)cnt[p2l[i]];
        if (linear) pack_linear(rw, R, P, pack, rip);
        else di_eplb_balanced_packing(rw, R, P, pack, rip, scratch);
        for (int i = 0; i < R; i++) out_p2l[l * R + pack[i] * (R / P) + rip[i]] = p2l[i];
    }
}

static void run_case(const char *name, const float *w, int R, int G, int N, int P) {
    double full[REPS], heap[REPS], lin[REPS];
    int32_t *a = malloc(sizeof(int32_t) * L * R), *b = malloc(sizeof(int32_t) * L * R);
    DiEplbPlan plan;
    for (int k = 0; k < REPS; k++) { /* interleaved */
        double t0 = now_ms();
        if (di_eplb_rebalance(w, L, E, R, G, N, P, &plan) != 0) {
            fprintf(stderr, "%s: %s\n", name, di_last_error());
            exit(1);
        }
        double t1 = now_ms();
        di_eplb_plan_free(&plan);
        plan_primitives(w, R, P, 0, a);
        double t2 = now_ms();
        plan_primitives(w, R, P, 1, b);
        double t3 = now_ms();
        full[k] = t1 - t0;
        heap[k] = t2 - t1;
        lin[k] = t3 - t2;
    }
    int same = memcmp(a, b, sizeof(int32_t) * L * R) == 0;
    double mf = median(full, REPS), best = full[0], mh = median(heap, REPS), ml = median(lin, REPS);
    printf("%-34s full plan %.3f ms, best %.3f ms (target < 5 ms: %s) | global replicate+pack: heap %.3f ms, "
           "linear scan %.3f ms, speedup %.1fx, identical plans: %s\n",
           name, mf, best, mf < 5.0 ? "met" : "MISSED", mh, ml, ml / mh, same ? "yes" : "NO");
    free(a);
    free(b);
}

int main(void) {
    float *w = malloc(sizeof(float) * L * E);
    DiRng rng = di_rng_seed(2026);
    for (int l = 0; l < L; l++) /* skewed loads: Zipf(1.0) token counts, shuffled per layer */
        for (int e = 0; e < E; e++) {
            int r = (int)(di_rng_next(&rng) % E);
            w[l * E + e] = (float)floor(2.0e5 / (r + 1) * (0.5 + di_rng_uniform(&rng)));
        }
    printf("EPLB, %d experts x %d layers, median of %d interleaved runs\n", E, L, REPS);
    run_case("decode EP64 (8 nodes, +1/GPU)", w, E + 64, 8, 8, 64);
    run_case("prefill EP8 (1 node, +4/GPU)", w, E + 32, 8, 1, 8);
    free(w);
    return 0;
}
