/* bench_stats.h — the order statistics the benchmarks report (a median over rounds: robust to
 * one slow round on a shared machine).  Header-only, for the bench programs alone. */
#ifndef DI_BENCH_STATS_H
#define DI_BENCH_STATS_H

#include <stdlib.h>

static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0, n) (n >= 1); sorts v in place. */
static inline double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
