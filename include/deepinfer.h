/* deepinfer.h — the public C API of deepinfer, an inference engine for DeepSeek-V4.1-Flash.
 *
 * Conventions: functions return 0 (or a non-NULL pointer) on success and -1 (or NULL) on
 * failure; di_last_error() then returns a message naming the cause.  Every function checks its
 * arguments.  Objects are opaque and freed by their *_free / *_destroy function. */
#ifndef DEEPINFER_H
#define DEEPINFER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DEEPINFER_VERSION "0.1.0"

/* The calling thread's last error message ("" when none). */
const char *di_last_error(void);
const char *di_version(void);

/* ---- model: checkpoint loading and the forward pass (src/model) ------------------------- */

/* (model API goes here) */

/* ---- recipe: tokenizer (src/recipe) ----------------------------------------------------- */

/* (tokenizer API goes here) */

/* ---- recipe: prompt rendering, output parsing, protocols (src/recipe) ------------------- */

/* (rendering / parsing API goes here) */

/* ---- engine: offline inference (src/engine) -------------------------------------------- */

/* An engine runs many requests at once over one model: continuous batching with chunked prefill,
 * per-request state in fixed-size pages, deterministic sampling, optional overlap of scheduling
 * with compute (async).  Single-threaded API: call every di_engine_* function of one engine
 * from one thread; streaming callbacks run on that thread, inside di_engine_step/run, and may
 * call di_engine_abort. */

typedef struct DiEngine DiEngine;

typedef struct {
    int max_num_seqs;          /* requests in one step (default 64) */
    int max_batch_tokens;      /* token budget of one step: decode tokens + prefill chunks (default 512) */
    int max_prefill_chunk;     /* longest prefill chunk of one request in one step (0: the budget) */
    size_t state_memory_bytes; /* page pool for per-request state (default 256 MiB) */
    int async_scheduling;      /* -1 default (on), 0 off, 1 on */
    int batch_invariant;       /* -1 default ($DEEPINFER_BATCH_INVARIANT, else off), 0, 1 */
    uint64_t seed;             /* draws the seeds of requests that have none (0: from the clock) */
} DiEngineOptions;

/* Defaults as documented above. */
void di_engine_options_init(DiEngineOptions *opts);

typedef struct {
    float temperature;          /* 0: greedy (argmax, ties to the lowest id) */
    int top_k;                  /* <= 0: off */
    float top_p;                /* (0, 1]; 1: off */
    float min_p;                /* [0, 1]; 0: off */
    float presence_penalty;     /* [-2, 2], on generated tokens */
    float frequency_penalty;    /* [-2, 2], on generated tokens */
    float repetition_penalty;   /* > 0; 1: off; on prompt and generated tokens */
    int has_seed;               /* 0: the engine draws a seed (reported in the output) */
    uint64_t seed;
    int max_tokens;             /* >= 1 */
    int min_tokens;             /* EOS and stop tokens are masked until this many were generated */
    const int32_t *stop_token_ids; /* finish (token kept in the output) on any of these */
    int n_stop_token_ids;
    const char *const *stop;    /* stop strings: finish, text cut before the match */
    int n_stop;
    int logprobs;               /* -1: none; n >= 0: sampled token's logprob + the n best (n <= 20) */
    int ignore_eos;
} DiSamplingParams;

#define DI_MAX_LOGPROBS 20

/* vLLM's defaults: temperature 1, top_p 1, top_k off, max_tokens 16, no logprobs. */
void di_sampling_params_init(DiSamplingParams *params);

typedef enum {
    DI_FINISH_NONE = 0,   /* still running */
    DI_FINISH_STOP = 1,   /* EOS, a stop token or a stop string */
    DI_FINISH_LENGTH = 2, /* max_tokens */
    DI_FINISH_ABORT = 3,  /* di_engine_abort */
} DiFinishReason;

const char *di_finish_reason_name(DiFinishReason reason); /* "stop", "length", "abort", NULL */

/* A request's input: exactly one of prompt_ids, prompt_text or chat_json.  Text needs the model's
 * tokenizer and chat the prompt renderer (chat_json is the `render` command's input object);
 * an engine without them rejects such input with an error that says so. */
typedef struct {
    const int32_t *prompt_ids;
    int n_prompt_ids;
    const char *prompt_text;
    const char *chat_json;
} DiRequestInput;

/* Logprobs of one generated token: the sampled token's, then the n best (descending; ties by id). */
typedef struct {
    int32_t token;
    float logprob;
    int n_top;
    int32_t top_ids[DI_MAX_LOGPROBS];
    float top_logprobs[DI_MAX_LOGPROBS];
} DiTokenLogprobs;

/* What a streaming callback receives after each step that produced something for the request.
 * Pointers are valid only during the call. */
typedef struct {
    uint64_t request_id;
    const int32_t *new_token_ids;
    int n_new_tokens;
    const char *new_text;       /* complete UTF-8 only; text that may start a stop string is held back */
    size_t new_text_len;
    const DiTokenLogprobs *new_logprobs; /* n_new_tokens entries, or NULL */
    DiFinishReason finish_reason;        /* != DI_FINISH_NONE on the last delivery */
} DiStreamDelta;

typedef void (*DiStreamCallback)(void *user, const DiStreamDelta *delta);

/* A request's whole result so far.  Pointers stay valid until di_engine_release or destroy. */
typedef struct {
    uint64_t request_id;
    const int32_t *prompt_ids;
    int n_prompt_ids;
    const int32_t *token_ids;   /* generated tokens (a matched stop string's tokens included) */
    int n_tokens;
    const char *text;           /* generated text, NUL-terminated, cut before a matched stop string */
    size_t text_len;
    const DiTokenLogprobs *logprobs; /* n_tokens entries, or NULL */
    double cumulative_logprob;
    DiFinishReason finish_reason;
    int32_t stop_token;          /* the stop/EOS token that finished it, else -1 */
    int stop_string;             /* index of the matched stop string, else -1 */
    uint64_t seed;               /* the seed used (drawn when the request had none) */
    int n_preemptions;
    double time_to_first_token_s, total_time_s;
} DiRequestOutput;

typedef struct {
    uint64_t steps, prefill_tokens, decode_tokens, preemptions;
    uint64_t requests_added, requests_finished, requests_aborted;
    int requests_waiting, requests_running;
    size_t page_bytes, pages_total, pages_used, pages_peak; /* exact state-pool accounting */
    size_t state_bytes_used;                                /* pages_used * page_bytes */
    double time_forward_s;     /* the model's forward passes */
    double time_sample_s;      /* the sampler */
    double time_schedule_s;    /* planning steps (admission, pages, preemption) */
    double time_output_s;      /* detokenising, stop checks, streaming callbacks */
    double time_wait_s;        /* async: the main thread waiting for the forward */
} DiEngineMetrics;

/* Create an engine on a model directory (config.json + checkpoint + tokenizer).  NULL opts:
 * defaults.  Needs the model core; this build says so with an error until it lands. */
DiEngine *di_engine_create(const char *model_dir, const DiEngineOptions *opts);
void di_engine_destroy(DiEngine *engine);

/* Queue a request; NULL params: defaults.  The callback (may be NULL) streams its output.
 * Returns -1 (with the cause) on bad input, e.g. a prompt that can never fit the state memory. */
int di_engine_add_request(DiEngine *engine, const DiRequestInput *input, const DiSamplingParams *params,
                          DiStreamCallback callback, void *user, uint64_t *out_id);
/* Abort a waiting, running or finished-but-unreleased request; its state is freed at once (or,
 * if a step using it is in flight, as soon as that step ends).  Unknown id: -1. */
int di_engine_abort(DiEngine *engine, uint64_t request_id);
/* One scheduling step (plans, computes, delivers).  *out_active = requests not finished. */
int di_engine_step(DiEngine *engine, int *out_active);
/* Step until every request has finished. */
int di_engine_run(DiEngine *engine);
/* A request's output (running or finished); -1 for an unknown or released id. */
int di_engine_get_output(DiEngine *engine, uint64_t request_id, DiRequestOutput *out);
/* Forget a finished request (its output memory).  A running one is aborted first. */
int di_engine_release(DiEngine *engine, uint64_t request_id);
int di_engine_get_metrics(const DiEngine *engine, DiEngineMetrics *out);
int32_t di_engine_vocab_size(const DiEngine *engine);

/* Testing hook, not a model: an engine over a deterministic mock model whose logits are a hash of
 * (token history, position), with its state in the engine's pages.  Byte-level text: ids 0..255
 * are bytes, id 256 is EOS, ids above are the words " w<id>".  vocab_size >= 257.  Used by the
 * tests and the Python binding's tests until the model core lands. */
DiEngine *di_engine_create_mock(int32_t vocab_size, uint64_t model_seed, const DiEngineOptions *opts);

/* ---- serve: load balancers and EPLB (src/serve) ---------------------------------------- */

/* (serving control-plane API goes here) */

#ifdef __cplusplus
}
#endif

#endif
