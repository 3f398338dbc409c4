/* abi.c — the layout of the public engine structs of deepinfer.h, for bindings that mirror them.
 *
 * python/deepinfer/_lib.py redeclares DiEngineOptions, DiEngineMetrics, ... with ctypes and reads
 * memory by its own idea of their layout; a field added or retyped on one side only would be a
 * silent wrong read.  The tables below are the compiler's layout (offsetof, sizeof on the
 * header's types), so the binding compares its copy field by field at import.  A field added to
 * one of these structs is added to its table here too (tests/unit/test_abi.c checks that the
 * fields cover each struct). */
#include "deepinfer.h"

#include "base/error.h"

#include <stddef.h>
#include <string.h>

typedef struct {
    const char *name;
    size_t offset, size;
} AbiField;

typedef struct {
    const char *name;
    size_t size;
    const AbiField *fields;
    int n_fields;
} AbiStruct;

#define FIELD(T, f) {#f, offsetof(T, f), sizeof(((T *)0)->f)}
#define STRUCT(T, table) {#T, sizeof(T), table, (int)(sizeof table / sizeof table[0])}

static const AbiField engine_options[] = {
    FIELD(DiEngineOptions, max_num_seqs),         FIELD(DiEngineOptions, max_batch_tokens),
    FIELD(DiEngineOptions, max_prefill_chunk),    FIELD(DiEngineOptions, state_memory_bytes),
    FIELD(DiEngineOptions, async_scheduling),     FIELD(DiEngineOptions, batch_invariant),
    FIELD(DiEngineOptions, seed),                 FIELD(DiEngineOptions, engram_token_map),
    FIELD(DiEngineOptions, engram_token_map_len), FIELD(DiEngineOptions, enable_prefix_caching),
    FIELD(DiEngineOptions, prefix_cache_bytes),   FIELD(DiEngineOptions, kv_cache_dir),
    FIELD(DiEngineOptions, kv_cache_ram_bytes),   FIELD(DiEngineOptions, kv_cache_disk_bytes),
    FIELD(DiEngineOptions, kv_cache_ttl_s),       FIELD(DiEngineOptions, kv_block_tokens),
    FIELD(DiEngineOptions, kv_cache_replay),
    FIELD(DiEngineOptions, draft_max),            FIELD(DiEngineOptions, draft_schedule),
};

static const AbiField logit_bias[] = {FIELD(DiLogitBias, token), FIELD(DiLogitBias, bias)};

static const AbiField sampling_params[] = {
    FIELD(DiSamplingParams, temperature),       FIELD(DiSamplingParams, top_k),
    FIELD(DiSamplingParams, top_p),             FIELD(DiSamplingParams, min_p),
    FIELD(DiSamplingParams, presence_penalty),  FIELD(DiSamplingParams, frequency_penalty),
    FIELD(DiSamplingParams, repetition_penalty), FIELD(DiSamplingParams, has_seed),
    FIELD(DiSamplingParams, seed),              FIELD(DiSamplingParams, max_tokens),
    FIELD(DiSamplingParams, min_tokens),        FIELD(DiSamplingParams, stop_token_ids),
    FIELD(DiSamplingParams, n_stop_token_ids),  FIELD(DiSamplingParams, stop),
    FIELD(DiSamplingParams, n_stop),            FIELD(DiSamplingParams, logprobs),
    FIELD(DiSamplingParams, ignore_eos),        FIELD(DiSamplingParams, logit_bias),
    FIELD(DiSamplingParams, n_logit_bias),      FIELD(DiSamplingParams, has_thinking_budget),
    FIELD(DiSamplingParams, thinking_budget),   FIELD(DiSamplingParams, think_end_id),
    FIELD(DiSamplingParams, constraint_type),   FIELD(DiSamplingParams, constraint),
    FIELD(DiSamplingParams, constraint_after_think),
};

static const AbiField request_input[] = {
    FIELD(DiRequestInput, prompt_ids), FIELD(DiRequestInput, n_prompt_ids),
    FIELD(DiRequestInput, prompt_text), FIELD(DiRequestInput, chat_json),
    FIELD(DiRequestInput, cache_salt),  FIELD(DiRequestInput, exact_state),
};

static const AbiField token_logprobs[] = {
    FIELD(DiTokenLogprobs, token),   FIELD(DiTokenLogprobs, logprob),      FIELD(DiTokenLogprobs, n_top),
    FIELD(DiTokenLogprobs, top_ids), FIELD(DiTokenLogprobs, top_logprobs),
};

static const AbiField stream_delta[] = {
    FIELD(DiStreamDelta, request_id),   FIELD(DiStreamDelta, new_token_ids), FIELD(DiStreamDelta, n_new_tokens),
    FIELD(DiStreamDelta, new_text),     FIELD(DiStreamDelta, new_text_len),  FIELD(DiStreamDelta, new_logprobs),
    FIELD(DiStreamDelta, finish_reason),
};

static const AbiField request_output[] = {
    FIELD(DiRequestOutput, request_id),      FIELD(DiRequestOutput, prompt_ids),
    FIELD(DiRequestOutput, n_prompt_ids),    FIELD(DiRequestOutput, token_ids),
    FIELD(DiRequestOutput, n_tokens),        FIELD(DiRequestOutput, text),
    FIELD(DiRequestOutput, text_len),        FIELD(DiRequestOutput, logprobs),
    FIELD(DiRequestOutput, cumulative_logprob), FIELD(DiRequestOutput, finish_reason),
    FIELD(DiRequestOutput, stop_token),      FIELD(DiRequestOutput, stop_string),
    FIELD(DiRequestOutput, seed),            FIELD(DiRequestOutput, n_preemptions),
    FIELD(DiRequestOutput, time_to_first_token_s), FIELD(DiRequestOutput, total_time_s),
    FIELD(DiRequestOutput, n_cached_tokens), FIELD(DiRequestOutput, time_in_queue_s),
    FIELD(DiRequestOutput, spec_num_drafts), FIELD(DiRequestOutput, spec_num_draft_tokens),
    FIELD(DiRequestOutput, spec_num_accepted_tokens),
};

static const AbiField engine_metrics[] = {
    FIELD(DiEngineMetrics, steps),               FIELD(DiEngineMetrics, prefill_tokens),
    FIELD(DiEngineMetrics, decode_tokens),       FIELD(DiEngineMetrics, preemptions),
    FIELD(DiEngineMetrics, requests_added),      FIELD(DiEngineMetrics, requests_finished),
    FIELD(DiEngineMetrics, requests_aborted),    FIELD(DiEngineMetrics, requests_waiting),
    FIELD(DiEngineMetrics, requests_running),    FIELD(DiEngineMetrics, page_bytes),
    FIELD(DiEngineMetrics, pages_total),         FIELD(DiEngineMetrics, pages_used),
    FIELD(DiEngineMetrics, pages_peak),          FIELD(DiEngineMetrics, state_bytes_used),
    FIELD(DiEngineMetrics, time_forward_s),      FIELD(DiEngineMetrics, time_sample_s),
    FIELD(DiEngineMetrics, time_schedule_s),     FIELD(DiEngineMetrics, time_output_s),
    FIELD(DiEngineMetrics, time_wait_s),         FIELD(DiEngineMetrics, prefix_cache_enabled),
    FIELD(DiEngineMetrics, prefix_cache_lookups), FIELD(DiEngineMetrics, prefix_cache_hits),
    FIELD(DiEngineMetrics, prefix_cache_hit_tokens), FIELD(DiEngineMetrics, prefix_cache_entries),
    FIELD(DiEngineMetrics, pages_cached),        FIELD(DiEngineMetrics, kv_cache_enabled),
    FIELD(DiEngineMetrics, kv_lookups),          FIELD(DiEngineMetrics, kv_hit_tokens_ram),
    FIELD(DiEngineMetrics, kv_hit_tokens_disk),  FIELD(DiEngineMetrics, kv_blocks_stored),
    FIELD(DiEngineMetrics, kv_evictions),        FIELD(DiEngineMetrics, kv_bytes_read),
    FIELD(DiEngineMetrics, kv_bytes_written),    FIELD(DiEngineMetrics, kv_records_corrupt),
    FIELD(DiEngineMetrics, kv_files_skipped),    FIELD(DiEngineMetrics, kv_writes_dropped),
    FIELD(DiEngineMetrics, kv_write_errors),
    FIELD(DiEngineMetrics, spec_draft_max),      FIELD(DiEngineMetrics, spec_num_drafts),
    FIELD(DiEngineMetrics, spec_num_draft_tokens), FIELD(DiEngineMetrics, spec_num_accepted_tokens),
    FIELD(DiEngineMetrics, spec_accepted_hist),  FIELD(DiEngineMetrics, spec_num_grammar_truncated),
    FIELD(DiEngineMetrics, time_draft_s),
};

static const AbiField text_hooks[] = {
    FIELD(DiTextHooks, encode),      FIELD(DiTextHooks, token_bytes), FIELD(DiTextHooks, is_special),
    FIELD(DiTextHooks, render_chat), FIELD(DiTextHooks, ctx),         FIELD(DiTextHooks, bos_id),
};

static const AbiStruct structs[] = {
    STRUCT(DiEngineOptions, engine_options), STRUCT(DiLogitBias, logit_bias),
    STRUCT(DiSamplingParams, sampling_params),
    STRUCT(DiRequestInput, request_input),   STRUCT(DiTokenLogprobs, token_logprobs),
    STRUCT(DiStreamDelta, stream_delta),     STRUCT(DiRequestOutput, request_output),
    STRUCT(DiEngineMetrics, engine_metrics), STRUCT(DiTextHooks, text_hooks),
};

static const AbiStruct *find_struct(const char *type) {
    if (!type) {
        di_errorf("di_abi: type is NULL");
        return NULL;
    }
    for (size_t i = 0; i < sizeof structs / sizeof structs[0]; i++)
        if (strcmp(structs[i].name, type) == 0) return &structs[i];
    di_errorf("di_abi: no public struct named '%s' is described", type);
    return NULL;
}

int di_abi_struct(const char *type, size_t *size, int *n_fields) {
    const AbiStruct *s = find_struct(type);
    if (!s) return -1;
    if (!size || !n_fields) return di_errorf("di_abi_struct: size and n_fields must not be NULL");
    *size = s->size;
    *n_fields = s->n_fields;
    return 0;
}

int di_abi_field(const char *type, int index, const char **name, size_t *offset, size_t *size) {
    const AbiStruct *s = find_struct(type);
    if (!s) return -1;
    if (!name || !offset || !size) return di_errorf("di_abi_field: name, offset and size must not be NULL");
    if (index < 0 || index >= s->n_fields)
        return di_errorf("di_abi_field: %s has %d fields; index %d is out of range", type, s->n_fields, index);
    *name = s->fields[index].name;
    *offset = s->fields[index].offset;
    *size = s->fields[index].size;
    return 0;
}
