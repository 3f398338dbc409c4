/* bench_medium.h — where the benchmarks keep the medium synthetic checkpoint (make-tiny --config
 * medium, ~520 MB, ~1.5 min to generate): $DEEPINFER_BENCH_DIR, else
 * $XDG_CACHE_HOME/deepinfer/bench-medium, else ~/.cache/deepinfer/bench-medium.  Shared so every
 * benchmark on it generates it once. */
#ifndef DI_BENCH_MEDIUM_H
#define DI_BENCH_MEDIUM_H

#include <stdio.h>
#include <stdlib.h>

static inline void bench_medium_dir(char *buf, size_t n) {
    const char *env = getenv("DEEPINFER_BENCH_DIR");
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (env && *env)
        snprintf(buf, n, "%s", env);
    else if (xdg && *xdg)
        snprintf(buf, n, "%s/deepinfer/bench-medium", xdg);
    else
        snprintf(buf, n, "%s/.cache/deepinfer/bench-medium", home && *home ? home : "/tmp");
}

#endif
