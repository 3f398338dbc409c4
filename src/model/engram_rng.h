/* engram_rng.h — the Engram hash multipliers (§5.2 d): M_l[k] = 2·v_k + 1 with v drawn by
 * numpy `default_rng(10007·layer_id).integers(0, B, size=N, dtype=int64)`,
 * B = max(1, (2^63−1) div C div 2).
 *
 * The reference draws them with numpy at load time, so an engine must reproduce numpy's
 * generator bit for bit: SeedSequence (entropy pool of 4 words, hashmix/mix), PCG64 (XSL-RR
 * 128/64) seeded from four generated 64-bit words, and Lemire's bounded integers (the unmasked
 * 64-bit path numpy uses for int64 ranges wider than 2^32; the 32-bit buffered path otherwise).
 * Algorithms restated from numpy's documented SeedSequence and PCG64 definitions. */
#ifndef DI_MODEL_ENGRAM_RNG_H
#define DI_MODEL_ENGRAM_RNG_H

#include <stdint.h>

/* out[k] for k < n: the multipliers of the Engram layer `layer_id` for compressed vocab size C. */
int engram_multipliers(int64_t layer_id, int64_t compressed_vocab, int n, int64_t *out);

/* numpy default_rng(seed).integers(0, high, size=n, dtype=int64) for high >= 1 (tests). */
int engram_numpy_integers(uint64_t seed, int64_t high, int n, int64_t *out);

#endif
