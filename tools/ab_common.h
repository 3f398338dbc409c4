/* ab_common.h — the clock and the ordering the A/B tools (kernel_ab.c, decode_ab.c) share. */
#ifndef DEEPINFER_TOOLS_AB_COMMON_H
#define DEEPINFER_TOOLS_AB_COMMON_H

#include <time.h>

/* Seconds on `clock` (CLOCK_MONOTONIC for wall time, CLOCK_THREAD_CPUTIME_ID for this thread's). */
static inline double clock_s(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* What a missing internal symbol means since libdeepinfer.so exports only the public API. */
#define AB_INTERNAL_HINT "the public libdeepinfer.so exports only the di_ API of deepinfer.h; give the build's libdeepinfer_internal.so"

/* qsort's comparison for doubles, ascending. */
static inline int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#endif
