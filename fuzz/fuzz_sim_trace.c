/* fuzz_sim_trace.c — libFuzzer target for the Mooncake trace parser (src/cluster/sim/trace.c) and
 * the simulator behind `deepinfer sim --trace`: any byte string must give either a trace that
 * keeps the parser's documented invariants or a clean error, never a crash, hang or sanitizer
 * report.  Small traces are also replayed through a small cluster, so arbitrary (valid) request
 * shapes reach the prefill/decode balancers and the prefix-cache model. */
#include "cluster/sim/sim.h"
#include "cluster/sim/trace.h"

#include <stdint.h>
#include <stdlib.h>

/* The parser's contract (trace.h): timestamps non-decreasing and finite, input in 1..2^31,
 * at most one block id per 512-token block, block pointers inside block_ids. */
static void check_invariants(const DiSimTrace *t) {
    size_t blocks = 0;
    for (size_t i = 0; i < t->n; i++) {
        const DiSimRequest *r = &t->reqs[i];
        if (i > 0 && r->arrival_s < t->reqs[i - 1].arrival_s) abort();
        if (r->input_tokens <= 0 || r->output_tokens < 0 || r->n_blocks < 0) abort();
        if ((int64_t)r->n_blocks > (r->input_tokens + DI_SIM_BLOCK_TOKENS - 1) / DI_SIM_BLOCK_TOKENS) abort();
        if (r->n_blocks > 0 && (r->blocks < t->block_ids || r->blocks + r->n_blocks > t->block_ids + t->n_block_ids))
            abort();
        blocks += (size_t)r->n_blocks;
    }
    if (blocks != t->n_block_ids) abort();
}

/* Replay only traces that finish in milliseconds: few requests, bounded prompt and output
 * lengths (decode runs one step per output token) and a bounded time span. */
static int small_enough(const DiSimTrace *t) {
    if (t->n == 0 || t->n > 16) return 0;
    for (size_t i = 0; i < t->n; i++)
        if (t->reqs[i].input_tokens > (1 << 20) || t->reqs[i].output_tokens > 256 ||
            t->reqs[i].arrival_s - t->reqs[0].arrival_s > 3600.0)
            return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    DiSimTrace trace;
    if (di_sim_trace_parse((const char *)data, size, "fuzz input", &trace) != 0) return 0;
    check_invariants(&trace);
    if (small_enough(&trace)) {
        DiSimConfig cfg;
        di_sim_config_default(&cfg);
        cfg.prefill_instances = 2;
        cfg.prefill_ranks = 2;
        cfg.decode_ranks = 2;
        cfg.cache_blocks = 64;
        cfg.moe_layers = 0;
        DiSimResult res;
        if (di_sim_run(&trace, &cfg, &res) == 0 && res.completed + res.rejected != trace.n) abort();
    }
    di_sim_trace_free(&trace);
    return 0;
}
