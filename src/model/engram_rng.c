/* engram_rng.c — numpy's SeedSequence + PCG64 + bounded integers, for the Engram multipliers
 * (engram_rng.h). */
#include "model/engram_rng.h"

#include "base/error.h"

#include <stdbool.h>

/* SeedSequence constants (numpy bit_generator.pyx) */
#define SS_INIT_A 0x43b0d7e5u
#define SS_MULT_A 0x931e8875u
#define SS_INIT_B 0x8b51f9ddu
#define SS_MULT_B 0x58f38dedu
#define SS_MIX_MULT_L 0xca01f9ddu
#define SS_MIX_MULT_R 0x4973f715u
#define SS_XSHIFT 16
#define SS_POOL 4

static uint32_t hashmix(uint32_t value, uint32_t *hash_const) {
    value ^= *hash_const;
    *hash_const *= SS_MULT_A;
    value *= *hash_const;
    value ^= value >> SS_XSHIFT;
    return value;
}

static uint32_t mix(uint32_t x, uint32_t y) {
    uint32_t r = SS_MIX_MULT_L * x - SS_MIX_MULT_R * y;
    return r ^ (r >> SS_XSHIFT);
}

/* SeedSequence(seed).generate_state(4, uint64) */
static void seed_sequence_state(uint64_t seed, uint64_t out[4]) {
    uint32_t entropy[2];
    int n_entropy = 0;
    /* the integer as little-endian 32-bit words (0 -> [0]) */
    do {
        entropy[n_entropy++] = (uint32_t)seed;
        seed >>= 32;
    } while (seed && n_entropy < 2);
    uint32_t pool[SS_POOL], hc = SS_INIT_A;
    for (int i = 0; i < SS_POOL; i++) pool[i] = hashmix(i < n_entropy ? entropy[i] : 0u, &hc);
    for (int src = 0; src < SS_POOL; src++)
        for (int dst = 0; dst < SS_POOL; dst++)
            if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], &hc));
    /* entropy words beyond the pool size: none for seeds < 2^64 with a pool of 4 */
    uint32_t words[8], hb = SS_INIT_B;
    for (int i = 0; i < 8; i++) {
        uint32_t v = pool[i % SS_POOL];
        v ^= hb;
        hb *= SS_MULT_B;
        v *= hb;
        v ^= v >> SS_XSHIFT;
        words[i] = v;
    }
    for (int i = 0; i < 4; i++) out[i] = (uint64_t)words[2 * i] | ((uint64_t)words[2 * i + 1] << 32);
}

typedef unsigned __int128 u128;

typedef struct {
    u128 state, inc;
    bool has_u32;
    uint32_t u32;
} Pcg64;

static const u128 PCG_MULT = ((u128)2549297995355413924ULL << 64) | 4865540595714422341ULL;

static void pcg_step(Pcg64 *r) { r->state = r->state * PCG_MULT + r->inc; }

static void pcg_seed(Pcg64 *r, const uint64_t v[4]) {
    u128 initstate = ((u128)v[0] << 64) | v[1], initseq = ((u128)v[2] << 64) | v[3];
    r->state = 0;
    r->inc = (initseq << 1) | 1;
    pcg_step(r);
    r->state += initstate;
    pcg_step(r);
    r->has_u32 = false;
    r->u32 = 0;
}

static uint64_t pcg_next64(Pcg64 *r) {
    pcg_step(r);
    uint64_t x = (uint64_t)(r->state >> 64) ^ (uint64_t)r->state;
    unsigned rot = (unsigned)(r->state >> 122);
    return (x >> rot) | (x << ((64 - rot) & 63));
}

static uint32_t pcg_next32(Pcg64 *r) {
    if (r->has_u32) {
        r->has_u32 = false;
        return r->u32;
    }
    uint64_t v = pcg_next64(r);
    r->has_u32 = true;
    r->u32 = (uint32_t)(v >> 32);
    return (uint32_t)v;
}

/* Lemire's method on [0, rng] (closed), 64-bit path */
static uint64_t bounded64(Pcg64 *r, uint64_t rng) {
    uint64_t excl = rng + 1;
    u128 m = (u128)pcg_next64(r) * excl;
    uint64_t left = (uint64_t)m;
    if (left < excl) {
        uint64_t threshold = (UINT64_MAX - rng) % excl;
        while (left < threshold) {
            m = (u128)pcg_next64(r) * excl;
            left = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

/* 32-bit path (numpy buffers 32-bit draws from 64-bit outputs, low half first) */
static uint32_t bounded32(Pcg64 *r, uint32_t rng) {
    uint32_t excl = rng + 1;
    uint64_t m = (uint64_t)pcg_next32(r) * excl;
    uint32_t left = (uint32_t)m;
    if (left < excl) {
        uint32_t threshold = (UINT32_MAX - rng) % excl;
        while (left < threshold) {
            m = (uint64_t)pcg_next32(r) * excl;
            left = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

int engram_numpy_integers(uint64_t seed, int64_t high, int n, int64_t *out) {
    if (high < 1 || n < 0 || !out) return di_errorf("numpy integers: invalid range or output");
    uint64_t v[4];
    seed_sequence_state(seed, v);
    Pcg64 r;
    pcg_seed(&r, v);
    uint64_t rng = (uint64_t)high - 1;
    for (int i = 0; i < n; i++) {
        if (rng == 0) out[i] = 0;
        else if (rng <= 0xFFFFFFFFu) out[i] = bounded32(&r, (uint32_t)rng);
        else out[i] = (int64_t)bounded64(&r, rng);
    }
    return 0;
}

int engram_multipliers(int64_t layer_id, int64_t compressed_vocab, int n, int64_t *out) {
    if (layer_id < 0 || compressed_vocab <= 0) return di_errorf("engram multipliers: layer %lld, compressed vocab %lld", (long long)layer_id, (long long)compressed_vocab);
    int64_t b = INT64_MAX / compressed_vocab / 2;
    if (b < 1) b = 1;
    if (engram_numpy_integers((uint64_t)(10007 * layer_id), b, n, out) != 0) return -1;
    for (int i = 0; i < n; i++) out[i] = 2 * out[i] + 1;
    return 0;
}
