/* trace.h — request workloads for the cluster simulator: the Mooncake FAST'25 traces
 * (../shared/data/mooncake-traces/README.md: one JSON object per line with timestamp in ms,
 * input_length, output_length and hash_ids, one id per 512-token block, chained so equal ids mean
 * equal prefixes) and synthetic workloads with Poisson arrivals and Zipf-shared prefixes. */
#ifndef DI_CLUSTER_SIM_TRACE_H
#define DI_CLUSTER_SIM_TRACE_H

#include <stddef.h>
#include <stdint.h>

#define DI_SIM_BLOCK_TOKENS 512 /* Mooncake trace block size (trace README) */

typedef struct {
    double arrival_s;
    int64_t input_tokens, output_tokens;
    const uint64_t *blocks; /* prefix block ids, into DiSimTrace.block_ids */
    int n_blocks;
} DiSimRequest;

typedef struct {
    DiSimRequest *reqs;
    size_t n;
    uint64_t *block_ids;
    size_t n_block_ids;
} DiSimTrace;

/* Load a Mooncake JSONL trace; errors name the line and field.  Requests are kept in file order
 * and must have non-decreasing timestamps. */
int di_sim_trace_load(const char *path, DiSimTrace *out);
/* The same from a buffer (tests, fuzzing); `what` names it in errors. */
int di_sim_trace_parse(const char *data, size_t size, const char *what, DiSimTrace *out);

typedef struct {
    size_t requests;
    double rate_per_s;      /* Poisson arrival rate */
    int prefixes;           /* shared prefix documents (system prompts, contexts) */
    double zipf_s;          /* popularity exponent of the prefixes */
    double prefix_fraction; /* share of each input that is the shared prefix */
    double mean_output;     /* exponential output lengths */
    double tier_mix[4];     /* share of requests per context tier (normalised; all 0 = default) */
    uint64_t seed;
} DiSimSynthConfig;

/* Context lengths by tier_mix, default 70 % short (< 16K, from 256), 20 % 16-64K, 8 % 64-256K,
 * 2 % 256K-1M, log-uniform within each tier, so every prefill tier is exercised. */
int di_sim_trace_synthetic(const DiSimSynthConfig *cfg, DiSimTrace *out);

void di_sim_trace_free(DiSimTrace *t);

#endif
