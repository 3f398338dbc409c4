/* test.h — the unit-test harness: each TEST is a named specification; CHECK* record failures
 * with file:line and the values involved; the binary ends with the plain summary line
 * "N passed, N failed" that tests/run_tests.sh (and CI) read. */
#ifndef DI_TEST_H
#define DI_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_passed_count, test_failed_count, test_current_failed;

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
            test_current_failed = 1;                                             \
        }                                                                        \
    } while (0)

#define CHECK_MSG(cond, ...)                                                     \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "  %s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                        \
            fputc('\n', stderr);                                                 \
            test_current_failed = 1;                                             \
        }                                                                        \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                       \
    do {                                                                         \
        long long _a = (long long)(a), _b = (long long)(b);                      \
        if (_a != _b) {                                                          \
            fprintf(stderr, "  %s:%d: %s == %s failed: %lld != %lld\n", __FILE__, __LINE__, #a, #b, _a, _b); \
            test_current_failed = 1;                                             \
        }                                                                        \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                    \
    do {                                                                         \
        double _a = (double)(a), _b = (double)(b);                               \
        if (!(fabs(_a - _b) <= (tol))) {                                         \
            fprintf(stderr, "  %s:%d: |%s - %s| <= %g failed: %.9g vs %.9g\n", __FILE__, __LINE__, #a, #b, \
                    (double)(tol), _a, _b);                                      \
            test_current_failed = 1;                                             \
        }                                                                        \
    } while (0)

#define CHECK_STR(a, b)                                                          \
    do {                                                                         \
        const char *_a = (a), *_b = (b);                                         \
        if (!_a || !_b || strcmp(_a, _b) != 0) {                                 \
            fprintf(stderr, "  %s:%d: %s == %s failed: \"%s\" != \"%s\"\n", __FILE__, __LINE__, #a, #b, \
                    _a ? _a : "(null)", _b ? _b : "(null)");                     \
            test_current_failed = 1;                                             \
        }                                                                        \
    } while (0)

#define TEST(name) static void name(void)

#define RUN_TEST(name)                                                           \
    do {                                                                         \
        test_current_failed = 0;                                                 \
        name();                                                                  \
        if (test_current_failed) {                                               \
            test_failed_count++;                                                 \
            fprintf(stderr, "FAIL %s\n", #name);                                 \
        } else {                                                                 \
            test_passed_count++;                                                 \
        }                                                                        \
    } while (0)

#define TEST_SUMMARY()                                                           \
    (printf("%d passed, %d failed\n", test_passed_count, test_failed_count),     \
     test_failed_count ? 1 : 0)

/* Directory of the shared test data (../shared by default, SHARED_DIR overrides). */
static inline const char *test_shared_dir(void) {
    const char *d = getenv("SHARED_DIR");
    return (d && *d) ? d : "../shared";
}

/* A fixed xorshift64 stream: the same test data on every run and machine. */
/* A variable unset for a check of the default (the kernel route matrix runs the unit tests under
 * each DEEPINFER_KERNELS value), then given back as it was. */
static inline char *test_env_unset(const char *name) {
    const char *v = getenv(name);
    char *saved = v ? strdup(v) : NULL;
    unsetenv(name);
    return saved;
}
static inline void test_env_restore(const char *name, char *saved) {
    if (saved) setenv(name, saved, 1);
    else unsetenv(name);
    free(saved);
}

static uint64_t test_rng_state = 0x9E3779B97F4A7C15ull;
static inline uint32_t test_rand32(void) {
    test_rng_state ^= test_rng_state << 13;
    test_rng_state ^= test_rng_state >> 7;
    test_rng_state ^= test_rng_state << 17;
    return (uint32_t)(test_rng_state >> 11);
}

#endif
