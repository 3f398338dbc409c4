/* gw_load.h — a worker's GET /internal/load answer (pd-protocol.md) as the gateway reads it.
 *
 * Kept apart from the pool so the parser can be fuzzed on its own (fuzz/fuzz_gw_load.c): any
 * byte string gives either a checked DiGwLoad or an error naming the field, never a crash. */
#ifndef DI_GATEWAY_GW_LOAD_H
#define DI_GATEWAY_GW_LOAD_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#define DI_GW_LOAD_SAMPLES 16 /* the per-request prefill samples a worker reports (its ring) */
#define DI_GW_LOAD_PREFIX_KEYS 512 /* the block keys of a worker kept (its hottest, serve's bound) */
#define DI_GW_LOAD_MAX_COUNT ((int64_t)1 << 48) /* the largest count accepted (sums stay in int64) */

typedef struct {
    char role[16];        /* "prefill", "decode" or "both" */
    char model[128];
    char transfer[128];   /* the decode worker's transfer HOST:PORT; "" when null */
    int64_t queued, running, kv_tokens;
    int64_t rooms_waiting;            /* decode: requests waiting for their KV transfer */
    int64_t steps, prefill_tokens, decode_tokens, block_tokens;
    double step_seconds, prefill_seconds;
    int64_t samples_total;            /* prefill samples the worker ever took */
    int n_samples;                    /* the latest ones, oldest first */
    int64_t sample_q[DI_GW_LOAD_SAMPLES], sample_c[DI_GW_LOAD_SAMPLES];
    double sample_s[DI_GW_LOAD_SAMPLES];
    bool has_identity;                /* kv_identity reported (a block cache) */
    uint64_t identity_lo, identity_hi; /* its fingerprint */
    int n_prefix_keys;                /* prefix_keys: the first 64 bits of its cached blocks' keys, */
    uint64_t prefix_keys[DI_GW_LOAD_PREFIX_KEYS]; /* sorted ascending (di_gw_load_has_key) */
} DiGwLoad;

/* Parse and check a load answer: counts (and sample lengths) must be integers in
 * [0, DI_GW_LOAD_MAX_COUNT], times finite and >= 0, role one of the three.  Fields added later
 * are ignored (the gateway may be older than its workers); samples beyond DI_GW_LOAD_SAMPLES keep the newest.  -1 with the cause. */
int di_gw_load_parse(const char *data, size_t len, DiGwLoad *out);
/* Whether the worker reported a block whose key begins with these 64 bits. */
bool di_gw_load_has_key(const DiGwLoad *l, uint64_t key_lo);

#endif
