/* cpu_check.c — the build's CPU baseline, checked before any other code of the program runs.
 *
 * The default build compiles everything for x86-64-v3 (AVX2, FMA, F16C, BMI1/2, LZCNT, MOVBE:
 * the Makefile's ARCH), so the compiler may place an AVX2 instruction in any function.  On a CPU
 * without those features the first such instruction would be an illegal-instruction crash with
 * no message.  This file alone is compiled for the plain x86-64 baseline (the Makefile's
 * CPU_CHECK_ARCH, appended after ARCH), and its constructor runs first (priority 101) in every
 * program and in libdeepinfer.so when it is loaded: it names the missing features on stderr and
 * exits 1.  The AVX-512 kernels need no entry here: they are chosen at run time from cpuid
 * (kernels/cpu/backend_cpu.c), whatever the build's baseline. */
#include "base/cpu_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>

/* What -march=x86-64-v3 lets the compiler use (gcc's x86-64 psABI levels), read from cpuid
 * directly: clang 14's __builtin_cpu_supports knows neither "f16c" nor "lzcnt". */
typedef struct {
    const char *name;
    unsigned leaf, sub, reg, bit; /* reg: 1 = ebx, 2 = ecx, 3 = edx */
} Feature;

static const Feature v3_features[] = {
    {"AVX", 1, 0, 2, 28},  {"FMA", 1, 0, 2, 12},   {"F16C", 1, 0, 2, 29}, {"MOVBE", 1, 0, 2, 22},
    {"AVX2", 7, 0, 1, 5},  {"BMI1", 7, 0, 1, 3},   {"BMI2", 7, 0, 1, 8},  {"LZCNT", 0x80000001u, 0, 2, 5},
};

static bool has_feature(const Feature *f) {
    unsigned r[4] = {0, 0, 0, 0};
    if (!__get_cpuid_count(f->leaf, f->sub, &r[0], &r[1], &r[2], &r[3])) return false;
    return (r[f->reg] >> f->bit) & 1u;
}

/* The OS saves the YMM registers (OSXSAVE and XCR0 bits 1-2): without it AVX faults too. */
static bool os_saves_ymm(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1u)) return false;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 6u) == 6u;
}

const char *di_cpu_missing_features(void) {
    static char missing[128];
    missing[0] = '\0';
    for (size_t i = 0; i < sizeof v3_features / sizeof v3_features[0]; i++) {
        if (has_feature(&v3_features[i])) continue;
        if (missing[0]) strcat(missing, ", ");
        strcat(missing, v3_features[i].name);
    }
    if (!os_saves_ymm()) {
        if (missing[0]) strcat(missing, ", ");
        strcat(missing, "OS support for AVX state (XSAVE)");
    }
    return missing;
}

__attribute__((constructor(101))) static void check_baseline(void) {
    const char *missing = di_cpu_missing_features();
    if (!missing[0]) return;
    fprintf(stderr,
            "deepinfer: this CPU lacks %s, which this build requires (it was compiled for x86-64-v3: "
            "AVX2, FMA, F16C, BMI1/2, LZCNT, MOVBE).  deepinfer needs an x86-64 CPU with AVX2 (Intel "
            "Haswell, AMD Zen or newer) or an aarch64 build.\n",
            missing);
    exit(1);
}

#else /* another architecture: its build's ARCH is its baseline; nothing is checked at run time */
const char *di_cpu_missing_features(void) { return ""; }
#endif
