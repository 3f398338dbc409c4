/* rng.h — the seeded pseudo-random generator of the control plane (simulator workloads, test
 * loads): SplitMix64, written from its published definition (Steele, Lea & Flood, "Fast
 * Splittable Pseudorandom Number Generators", OOPSLA 2014; the constants are those of
 * Vigna's reference splitmix64.c).  One 64-bit word of state, so every run with the same seed
 * draws the same sequence on every platform: simulations are reproducible from the command line. */
#ifndef DI_CLUSTER_RNG_H
#define DI_CLUSTER_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct {
    uint64_t state;
} DiRng;

static inline DiRng di_rng_seed(uint64_t seed) { return (DiRng){seed}; }

static inline uint64_t di_rng_next(DiRng *r) {
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double di_rng_uniform(DiRng *r) { return (double)(di_rng_next(r) >> 11) * 0x1.0p-53; }

/* Exponential with the given mean (inverse CDF; 1 - u is in (0, 1], so log never sees 0). */
static inline double di_rng_exponential(DiRng *r, double mean) { return -mean * log(1.0 - di_rng_uniform(r)); }

/* Standard normal (Box-Muller, one of the pair). */
static inline double di_rng_normal(DiRng *r) {
    double u = 1.0 - di_rng_uniform(r), v = di_rng_uniform(r);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

#endif
