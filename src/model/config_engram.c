/* config_engram.c — the Engram hash multipliers of model-v41.md §5.2 (d), computed exactly as the
 * reference does with numpy: `default_rng(10007 * layer_id).integers(0, B, size=N, dtype=int64)`,
 * M[k] = 2 v_k + 1, B = max(1, (2^63 - 1) div C div 2), C = engram_compressed_vocab_size.
 *
 * Why here: the multipliers are part of the model definition (they depend only on config values),
 * and a make-tiny model has no shipped table.  numpy's generator is re-stated from its published
 * algorithm (no code copied): SeedSequence (pool of 4 uint32, the hashmix/mix entropy mixing),
 * PCG64 (128-bit LCG, XSL-RR output, seeded by pcg setseq), and Lemire's bounded integers with
 * rejection for 64-bit ranges.  Verified against the release table of §5.2 (d), the §9.3 values
 * and the golden tiny-a array engram.hash_multipliers (tests/unit/test_config.c). */
#include "model/config.h"

#include "base/error.h"

#include <stdint.h>

/* ---- numpy SeedSequence (entropy = one non-negative integer < 2^32, no spawn key) ---------- */

#define SS_POOL 4
#define SS_INIT_A 0x43b0d7e5u
#define SS_MULT_A 0x931e8875u
#define SS_INIT_B 0x8b51f9ddu
#define SS_MULT_B 0x58f38dedu
#define SS_MIX_L 0xca01f9ddu
#define SS_MIX_R 0x4973f715u
#define SS_XSHIFT 16

static uint32_t hashmix(uint32_t value, uint32_t *hash_const) {
    value ^= *hash_const;
    *hash_const *= SS_MULT_A;
    value *= *hash_const;
    value ^= value >> SS_XSHIFT;
    return value;
}

static uint32_t mix(uint32_t x, uint32_t y) {
    uint32_t r = SS_MIX_L * x - SS_MIX_R * y;
    return r ^ (r >> SS_XSHIFT);
}

/* Pool of the entropy [seed] (one word), then 4 uint64 of state (8 uint32, little-endian pairs). */
static void seed_sequence_state(uint32_t seed, uint64_t out[4]) {
    uint32_t pool[SS_POOL], hc = SS_INIT_A;
    for (int i = 0; i < SS_POOL; i++) pool[i] = hashmix(i == 0 ? seed : 0, &hc);
    for (int src = 0; src < SS_POOL; src++)
        for (int dst = 0; dst < SS_POOL; dst++)
            if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], &hc));
    uint32_t words[8], hb = SS_INIT_B;
    for (int i = 0; i < 8; i++) {
        uint32_t v = pool[i % SS_POOL] ^ hb;
        hb *= SS_MULT_B;
        v *= hb;
        v ^= v >> SS_XSHIFT;
        words[i] = v;
    }
    for (int i = 0; i < 4; i++) out[i] = (uint64_t)words[2 * i] | ((uint64_t)words[2 * i + 1] << 32);
}

/* ---- PCG64 (XSL-RR 128/64) ---------------------------------------------------------------- */

typedef unsigned __int128 u128;
#define PCG_MULT (((u128)2549297995355413924ULL << 64) | 4865540595714422341ULL)

typedef struct {
    u128 state, inc;
} Pcg64;

static void pcg_step(Pcg64 *r) { r->state = r->state * PCG_MULT + r->inc; }

static uint64_t pcg_next(Pcg64 *r) {
    pcg_step(r);
    uint64_t x = (uint64_t)(r->state >> 64) ^ (uint64_t)r->state;
    unsigned rot = (unsigned)(r->state >> 122);
    return (x >> rot) | (x << ((64 - rot) & 63));
}

static void pcg_seed(Pcg64 *r, const uint64_t s[4]) {
    u128 initstate = ((u128)s[0] << 64) | s[1], initseq = ((u128)s[2] << 64) | s[3];
    r->state = 0;
    r->inc = (initseq << 1) | 1;
    pcg_step(r);
    r->state += initstate;
    pcg_step(r);
}

/* Lemire's method for [0, rng] with rng > 2^32 - 1 (numpy bounded_lemire_uint64). */
static uint64_t bounded_lemire(Pcg64 *r, uint64_t rng) {
    uint64_t excl = rng + 1;
    u128 m = (u128)pcg_next(r) * excl;
    uint64_t leftover = (uint64_t)m;
    if (leftover < excl) {
        uint64_t threshold = (UINT64_MAX - rng) % excl;
        while (leftover < threshold) {
            m = (u128)pcg_next(r) * excl;
            leftover = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

int di_engram_hash_multipliers(int64_t layer_id, int64_t compressed_vocab, int64_t n, int64_t *out) {
    if (!out || n <= 0 || layer_id < 0 || compressed_vocab <= 0)
        return di_errorf("engram multipliers: invalid arguments (layer %lld, vocab %lld, n %lld)", (long long)layer_id,
                         (long long)compressed_vocab, (long long)n);
    uint64_t seed = 10007ULL * (uint64_t)layer_id;
    int64_t B = INT64_MAX / compressed_vocab / 2;
    if (B < 1) B = 1;
    /* numpy draws 32-bit words for ranges below 2^32; every supported vocabulary (C < 2^30)
     * keeps B - 1 above that, so only the 64-bit path is needed. */
    if (seed > UINT32_MAX || (uint64_t)(B - 1) <= UINT32_MAX)
        return di_errorf("engram multipliers: layer %lld / compressed vocab %lld outside the supported range",
                         (long long)layer_id, (long long)compressed_vocab);
    uint64_t st[4];
    seed_sequence_state((uint32_t)seed, st);
    Pcg64 r;
    pcg_seed(&r, st);
    for (int64_t k = 0; k < n; k++) out[k] = 2 * (int64_t)bounded_lemire(&r, (uint64_t)(B - 1)) + 1;
    return 0;
}
