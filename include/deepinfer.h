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

/* Write a synthetic DeepSeek-V4.1 checkpoint in the official Hugging Face layout into out_dir:
 * preset "tiny" (model-v41.md §9 shapes, 297-token byte-level tokenizer), "spec9" (§9.2
 * verbatim, no tokenizer) or "medium" (benchmark size, ~520 MB).  Same seed, same bytes. */
int di_make_tiny(const char *out_dir, const char *preset, uint64_t seed);
/* The built-in tiny model used when no checkpoint is given: generated on first use into
 * $XDG_CACHE_HOME/deepinfer/tiny-v41 (else ~/.cache/deepinfer/tiny-v41) and reused after;
 * its directory is written to buf. */
int di_builtin_model_dir(char *buf, size_t n);

/* The V4.1 forward pass on a loaded checkpoint (model-v41.md §5).  A DiModel is immutable while
 * forwards run on it, except for the setters below; each request has its own DiModelState (§6:
 * window rings, compressed KV rows, index keys, compressor pending rows, Engram history, DSpark
 * rings).  numerics: "ref" (default, NULL: the reference's FP8 activation quantisation and KV
 * round trips), "kvq" (KV / indexer round trips only), "exact" (float32 throughout).  A prefill
 * chunk runs every layer on every row unless DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE=compact
 * (decoder bounded replay over the chunk's last DEEPINFER_YOCO_PREFILL_KEEP_TOKENS rows, default
 * 140), read when the model loads, as di_engine_create does. */
typedef struct DiModel DiModel;
typedef struct DiModelState DiModelState;

DiModel *di_model_load(const char *dir, const char *numerics);
void di_model_free(DiModel *model);
int32_t di_model_vocab_size(const DiModel *model);
/* Worker threads of the matrix kernels (<= 0: DEEPINFER_NUM_THREADS, else all CPUs). */
int di_model_set_threads(DiModel *model, int n_threads);
/* The Engram compressed-token map cid[t], t < len (tokenizer-derived, §5.2 a); required before
 * the first forward of a model with Engram layers. */
int di_model_set_engram_token_map(DiModel *model, const int32_t *cid, int64_t len);

DiModelState *di_model_state_new(const DiModel *model);
void di_model_state_free(DiModelState *state);
/* Positions the state holds (the next chunk starts there). */
int64_t di_model_state_positions(const DiModelState *state);

/* Process tokens at positions start_pos .. start_pos+n-1 (start_pos must equal the state's
 * positions): a prefill chunk of any length or a decode step.  logits (may be NULL): [n][vocab]
 * when all_rows, else [vocab] for the last token.  On error the state is unusable only if the
 * error came from inside the layers; argument errors leave it untouched. */
int di_model_forward(DiModel *model, DiModelState *state, const int32_t *tokens, int64_t n, int64_t start_pos,
                     float *logits, int all_rows);

/* DSpark drafter (§5.11): with `anchor` at the state's next position, fill base_logits and
 * logits [block][vocab], confidence [block] (raw logits) and tokens [block]; given = NULL drafts
 * greedily, else the block's drafts are imposed.  Commits nothing to the state. */
int di_model_draft_block_size(const DiModel *model);
int di_model_draft(DiModel *model, DiModelState *state, int32_t anchor, const int32_t *given, float *base_logits,
                   float *logits, float *confidence, int32_t *tokens);

/* ---- recipe: tokenizer (src/recipe) ----------------------------------------------------- */

/* The DeepSeek V3 / V4 / V4.1 tokenizer: byte-level BPE loaded from a Hugging Face
 * tokenizer.json (recipe.md §1).  A loaded tokenizer is immutable and may be shared by threads;
 * only di_tokenizer_set_threads changes it.  Text is UTF-8: invalid UTF-8 is an error naming
 * the byte offset, never silently replaced.  BOS is never added implicitly. */
typedef struct DiTokenizer DiTokenizer;

/* Which added-token table to use on top of the file's own (recipe-data/README.md):
 * FILE = the file as it is; V4 = plus the V4 additions (ids 128815..129279) the file lacks;
 * V41 = V4 plus <｜System｜> at 128799 in place of the V3 placeholder.  A token the file
 * already has at an id always wins (a real checkpoint's tokenizer.json loads as is).
 * AUTO = FILE when the file defines the V4 control tokens itself (it has "</think>": a V4 /
 * V4.1 checkpoint, the built-in tiny model, whose ids differ), else V41 (a V3 file). */
typedef enum {
    DI_ADDED_TABLE_FILE = 0,
    DI_ADDED_TABLE_V4 = 1,
    DI_ADDED_TABLE_V41 = 2,
    DI_ADDED_TABLE_AUTO = 3
} DiAddedTable;

DiTokenizer *di_tokenizer_load(const char *path);
DiTokenizer *di_tokenizer_load_table(const char *path, DiAddedTable table);
/* The same from tokenizer.json contents in memory; `what` names the source in errors. */
DiTokenizer *di_tokenizer_load_buffer(const char *json, size_t len, const char *what, DiAddedTable table);
void di_tokenizer_free(DiTokenizer *tok);

/* Encode long texts on n_threads threads (<= 1: sequentially, the default).  The ids are
 * identical to the sequential ones; texts are cut only where pre-tokenization allows (§5.4). */
int di_tokenizer_set_threads(DiTokenizer *tok, int n_threads);

/* Number of ids: highest vocab or added-token id + 1 (129280 for V4 / V4.1). */
size_t di_tokenizer_vocab_size(const DiTokenizer *tok);

/* Plain text -> ids with no added-token recognition (recipe.md §1.2): "<｜User｜>" in the text
 * is 5 ordinary tokens.  *ids is a fresh heap array (free with free()); NULL when empty. */
int di_tokenizer_encode(const DiTokenizer *tok, const char *text, size_t len, int32_t **ids, size_t *n_ids);
/* Hugging Face compatible encoding (recipe.md §1.4): added-token spellings in the text become
 * their ids (non-normalized tokens first, then normalized ones, leftmost-longest), the gaps are
 * encoded as plain text.  For tools and tests; prompts use di_tokenizer_encode_segments. */
int di_tokenizer_encode_with_added(const DiTokenizer *tok, const char *text, size_t len, int32_t **ids,
                                   size_t *n_ids);

/* Bytes of ids, concatenated exactly (not necessarily valid UTF-8), NUL-terminated; free with
 * free().  An id with no token is an error. */
int di_tokenizer_decode(const DiTokenizer *tok, const int32_t *ids, size_t n_ids, char **out, size_t *out_len);
/* The bytes of one token (not NUL-terminated), NULL with an error for an invalid id. */
const char *di_tokenizer_token_bytes(const DiTokenizer *tok, int32_t id, size_t *len);

/* id <-> spelling: vocab entries in their byte-level form ("Ġworld"), added tokens as
 * written ("<｜User｜>").  token_to_id returns -1 with an error when there is none. */
const char *di_tokenizer_id_to_token(const DiTokenizer *tok, int32_t id);
int32_t di_tokenizer_token_to_id(const DiTokenizer *tok, const char *spelling);
/* The id of an added (special or control) token by spelling; -1 with an error otherwise. */
int32_t di_tokenizer_special_id(const DiTokenizer *tok, const char *spelling);
/* 1 when id is an added token, 0 when it is a plain vocab entry, -1 (error) when invalid. */
int di_tokenizer_is_added(const DiTokenizer *tok, int32_t id);

/* Incremental decoding for streaming (recipe.md §1.5): text is released only as whole UTF-8
 * characters; bytes that can never become valid come out as U+FFFD, one per maximal invalid
 * subpart; an incomplete tail at the end of the stream is dropped. */
typedef struct DiDecodeStream DiDecodeStream;
DiDecodeStream *di_decode_stream_new(const DiTokenizer *tok);
/* Feed one id; *text and *len get the text it releases (possibly empty), valid until the next
 * call.  *text is NUL-terminated. */
int di_decode_stream_push(DiDecodeStream *stream, int32_t id, const char **text, size_t *len);
/* Ids whose bytes are still held back (they count as output only once their text is out). */
size_t di_decode_stream_pending_ids(const DiDecodeStream *stream);
void di_decode_stream_free(DiDecodeStream *stream);

/* The Engram compressed-token map of a tokenizer (model-v41.md §5.2 a): *cid gets cid[t] for
 * every id t < *n_ids (= di_tokenizer_vocab_size; fresh heap array, free()), *n_keys the number
 * of distinct compressed ids, which must equal the model's engram_compressed_vocab_size.  Give
 * it to DiEngineOptions.engram_token_map or di_model_set_engram_token_map for a checkpoint
 * without engram_token_map.json (a real one ships none). */
int di_tokenizer_engram_map(const DiTokenizer *tok, int32_t **cid, int64_t *n_ids, int64_t *n_keys);
/* The Engram map a model directory needs from its tokenizer: when DIR has no
 * engram_token_map.json and does have tokenizer.json, builds the map from it (*cid, *n_ids set;
 * free() it); otherwise returns 0 with *cid = NULL (the engine reads the file itself, or the
 * directory needs no map).  model_dir NULL: $DEEPINFER_HF_MODEL_DIR, else nothing to do. */
int di_model_dir_engram_map(const char *model_dir, int32_t **cid, int64_t *n_ids);

/* ---- recipe: prompt rendering, output parsing, protocols (src/recipe) ------------------- */

/* Render a conversation to its prompt.  `json` holds the `deepinfer render` input
 * ({"encoding": "v4"|"v4-0731"|"v41", "messages": [...], "tools": [...], "thinking_mode":
 * "chat"|"thinking", "reasoning_effort": ..., "drop_thinking": bool, "tool_choice": ...,
 * "response_format": ...}); *result_json receives {"prompt": "..."} (plus "segments":
 * [{"special": bool, "text": "..."}] with DI_RENDER_WITH_SEGMENTS).  Free with free(). */
#define DI_RENDER_WITH_SEGMENTS 1
int di_render_json(const char *json, size_t len, int flags, char **result_json);
/* The same plus "ids": the prompt's token ids, SPECIAL segments by id and TEXT runs as plain
 * BPE (recipe.md §5.2).  Load `tok` with DI_ADDED_TABLE_V41 (or from the model's own
 * tokenizer.json) so every control token of every encoding has its id. */
int di_render_json_ids(const DiTokenizer *tok, const char *json, size_t len, int flags, char **result_json);

/* Streaming parser of model output (reasoning, content, DSML tool calls, JSON mode, stop
 * sequences).  options_json (NULL = defaults): {"initial": "content"|"start"|"reasoning"|
 * "content_continuation", "tools": true, "tool_stage": false, "json_mode": false,
 * "stop": ["..."], "finish": "stop"|"length"}.  Feed decoded UTF-8 text in any split; the
 * result is the same however the text is split. */
typedef struct DiOutputParser DiOutputParser;
DiOutputParser *di_output_parser_new(const char *options_json);
int di_output_parser_feed(DiOutputParser *parser, const char *text, size_t len);
/* Streaming deltas, in order, as a protocol sends them: kind DI_OUTPUT_REASONING / _CONTENT
 * (text), _TOOL_BEGIN (the call's whole name, when the name ends), _TOOL_ARGS (a piece of the
 * current call's argument JSON).  Their concatenation equals the final result.  A non-zero
 * return from fn fails the feed.  fn NULL removes the callback. */
#define DI_OUTPUT_REASONING 0
#define DI_OUTPUT_CONTENT 1
#define DI_OUTPUT_TOOL_BEGIN 2
#define DI_OUTPUT_TOOL_ARGS 3
typedef int (*DiOutputEventFn)(void *ctx, int kind, const char *text, size_t len);
int di_output_parser_set_callback(DiOutputParser *parser, DiOutputEventFn fn, void *ctx);
/* End of stream; then the result: {"reasoning_content", "content", "tool_calls": [{"name",
 * "arguments"}], "invalid": [...], "stopped": bool, "finish_reason"}.  Free with free(). */
int di_output_parser_finish(DiOutputParser *parser, char **result_json);
void di_output_parser_free(DiOutputParser *parser);
/* The `deepinfer parse` contract: {"encoding": ..., "options": {...}, "chunks": ["..."]}. */
int di_parse_json(const char *json, size_t len, char **result_json);

/* ---- engine: offline inference (src/engine) -------------------------------------------- */

/* An engine runs many requests at once over one model: continuous batching with chunked prefill,
 * per-request state in fixed-size pages, deterministic sampling, optional overlap of scheduling
 * with compute (async).  Single-threaded API: call every di_engine_* function of one engine
 * from one thread; streaming callbacks run on that thread, inside di_engine_step/run, and may
 * call di_engine_abort. */

typedef struct DiEngine DiEngine;

enum { DI_KV_REPLAY_EXACT = 0, DI_KV_REPLAY_APPROX = 1 }; /* DiEngineOptions.kv_cache_replay */

typedef struct {
    int max_num_seqs;          /* requests in one step (default 64) */
    int max_batch_tokens;      /* token budget of one step: decode tokens + prefill chunks (default 512) */
    int max_prefill_chunk;     /* longest prefill chunk of one request in one step (0: the budget) */
    size_t state_memory_bytes; /* page pool for per-request state (default 256 MiB) */
    int async_scheduling;      /* -1 default (on), 0 off, 1 on */
    int batch_invariant;       /* -1 default ($DEEPINFER_BATCH_INVARIANT, else off), 0, 1 */
    uint64_t seed;             /* draws the seeds of requests that have none (0: from the clock) */
    /* Engram compressed-token map (model-v41.md §5.2 a) for a model with Engram layers; it is
     * derived from the tokenizer, so the layer above supplies it.  NULL: DIR/engram_token_map.json,
     * else for the built-in tiny model the synthetic map t mod engram_compressed_vocab_size (§9.3),
     * else an error. */
    const int32_t *engram_token_map;
    int64_t engram_token_map_len;
    /* Prompt caching: keep the state of each finished request (prompt + output) in the state
     * pool and start a later request whose tokens extend it from there (the next turn of a
     * conversation).  Cached states use only pages no request needs: they are evicted before a
     * request would wait or be preempted.  -1 default (off), 0 off, 1 on.  prefix_cache_bytes
     * caps them (0: the whole pool). */
    int enable_prefix_caching;
    size_t prefix_cache_bytes;
    /* KV block cache (serving.md §4): blocks of kv_block_tokens prompt/output positions shared by
     * every request whose tokens start with them, kept in a host-RAM pool of kv_cache_ram_bytes
     * (LRU) and, with kv_cache_dir, in segment files there (shared by every engine using the
     * directory, kv_cache_disk_bytes cap with 0 none, kv_cache_ttl_s retention with 0 none).  On
     * when kv_cache_ram_bytes > 0 or kv_cache_dir is set (RAM then 1 GiB); needs a runner that
     * exports blocks.  With enable_prefix_caching too, requests restore blocks and
     * only DiRequestInput.exact_state requests use (and feed) the prefix cache (PD workers).  kv_block_tokens: 0 is 256, else a
     * positive multiple of 128.  kv_cache_replay: how a hit at H rebuilds the window state the
     * blocks do not hold: DI_KV_REPLAY_EXACT (0, the default) recomputes the positions the
     * window state depends on (the runner's replay_exact_rows before H), so outputs are a cold
     * prefill's bit for bit; DI_KV_REPLAY_APPROX (1) recomputes only the last window (the
     * official design, engine-features.md §2.4: cheaper, close to but not a cold run's). */
    const char *kv_cache_dir;
    size_t kv_cache_ram_bytes;
    uint64_t kv_cache_disk_bytes;
    uint64_t kv_cache_ttl_s;
    int kv_block_tokens;
    int kv_cache_replay;
    /* DSpark speculative decoding, for a model with a drafter: each decode step drafts up to
     * draft_max tokens per request and verifies them in one forward.  Lossless: greedy output,
     * constrained requests, and sampling with a caller's seed under the confidence schedule, are
     * plain decoding's tokens (a draft is accepted when it equals the plain sample); every other
     * request at T > 0 (fixed lengths, draft_schedule 0; or no caller's seed) is verified by
     * rejection sampling (more accepted, every token with the target's distribution); with fixed
     * lengths a seed gives the same tokens whatever runs beside it (preemption included),
     * but not plain decoding's.  Steps then run
     * synchronously (async_scheduling is not used): the next positions depend on the accepted
     * drafts.  draft_max: -1 default ($DEEPINFER_USE_NEXTN_DECODE, else 5; off for a model
     * without a drafter), 0 off, 1..16 (the drafter's block caps it; a model without a drafter
     * is an error).  draft_schedule: -1 default ($DEEPINFER_ENABLE_MTP_VARLEN, else
     * confidence), 0 fixed (every request verifies draft_max drafts), 1 confidence (DSpark's
     * production scheduler: a budget of drafts from the calibrated confidences of the last
     * drafting step and a step-cost curve learnt from the engine's forwards, the drafter skipped
     * while drafting does not pay). */
    int draft_max;
    int draft_schedule;
} DiEngineOptions;

/* Defaults as documented above. */
void di_engine_options_init(DiEngineOptions *opts);

typedef struct {
    int32_t token;
    float bias;
} DiLogitBias;

/* Structured outputs (DiSamplingParams.constraint_type): what the output must match. */
typedef enum {
    DI_CONSTRAINT_NONE = 0,
    DI_CONSTRAINT_REGEX = 1,       /* constraint: a Python-re pattern the whole output matches */
    DI_CONSTRAINT_JSON_SCHEMA = 2, /* constraint: a JSON Schema document (text) */
    DI_CONSTRAINT_EBNF = 3,        /* constraint: a GBNF-style grammar, start rule "root" */
    DI_CONSTRAINT_JSON_OBJECT = 4, /* any JSON object; constraint must be NULL */
    DI_CONSTRAINT_DSML_TOOLS = 5,  /* constraint: a DSML tool-call spec (JSON; grammar.h
                                    * di_grammar_compile_dsml): calls of declared tools whose
                                    * arguments match their schemas.  The ｜DSML｜ token must be
                                    * text to the hooks (not is_special), as the server's are */
} DiConstraintType;

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
    /* OpenAI logit_bias: each bias (in [-100, 100]) is added to its token's logit before the
     * min_tokens masking and the penalties; logprobs stay those of the raw logits. */
    const DiLogitBias *logit_bias;
    int n_logit_bias;
    /* A reasoning budget (Anthropic thinking.budget_tokens): once thinking_budget tokens were
     * generated without think_end_id (the end-of-thinking token), that token is forced, so the
     * reasoning holds at most thinking_budget tokens and the answer follows.  0 when unused. */
    int has_thinking_budget;
    int thinking_budget;
    int32_t think_end_id;
    /* Structured output: a DiConstraintType and its text (NUL-terminated, copied at admission,
     * where it is compiled: a bad one fails di_engine_add_request naming the problem).  Tokens
     * outside the language are masked before sampling (and before logprobs), EOS is allowed only
     * where the output is complete, special tokens are never grammar text.  With
     * constraint_after_think the output opens with reasoning and the constraint applies after
     * think_end_id.  Cannot be combined with ignore_eos; where the grammar allows only its end,
     * the end wins over min_tokens. */
    int constraint_type;
    const char *constraint;
    int constraint_after_think;
} DiSamplingParams;

#define DI_MAX_LOGPROBS 20

/* vLLM's defaults: temperature 1, top_p 1, top_k off, max_tokens 16, no logprobs. */
void di_sampling_params_init(DiSamplingParams *params);

typedef enum {
    DI_FINISH_NONE = 0,   /* still running */
    DI_FINISH_STOP = 1,   /* EOS, a stop token or a stop string */
    DI_FINISH_LENGTH = 2, /* max_tokens */
    DI_FINISH_ABORT = 3,  /* di_engine_abort */
    /* This request alone failed inside a step (its constraint masked every token, a sampling
     * or grammar error): di_engine_request_error says why.  The other requests of the step go
     * on with the bits they would have had without it. */
    DI_FINISH_ERROR = 4,
} DiFinishReason;

const char *di_finish_reason_name(DiFinishReason reason); /* "stop", "length", "abort", "error", NULL */

/* A request's input: exactly one of prompt_ids, prompt_text or chat_json.  Text needs the model's
 * tokenizer and chat the prompt renderer (chat_json is the `render` command's input object);
 * an engine without them rejects such input with an error that says so. */
typedef struct {
    const int32_t *prompt_ids;
    int n_prompt_ids;
    const char *prompt_text;
    const char *chat_json;
    /* KV block cache tenant salt (NUL-terminated, at most 256 bytes; NULL or "": none): requests
     * with different salts never share cached blocks. */
    const char *cache_salt;
    /* Nonzero: the request's state must be exact, a function of its tokens alone (PD workers,
     * issue 24).  Its admission restores only the prefix cache's exact states (or prefills
     * from 0), never KV blocks with a bounded replay; with the block cache on, only such
     * requests' states are kept in the prefix cache. */
    int exact_state;
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
    int n_cached_tokens;         /* prompt tokens whose state came from the prefix or KV block cache */
    double time_in_queue_s;      /* arrival -> first admitted to the running batch (0 before) */
    /* speculative decoding: verify steps with at least one draft, drafts verified, drafts
     * accepted (each such step emits its accepted drafts + 1 tokens) */
    uint64_t spec_num_drafts, spec_num_draft_tokens, spec_num_accepted_tokens;
} DiRequestOutput;

#define DI_MAX_DRAFT 16

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
    /* prefix cache (DiEngineOptions.enable_prefix_caching): admissions that looked, found a
     * cached state, and the positions those states saved; entries and their pages now (included
     * in pages_used) */
    int prefix_cache_enabled;
    uint64_t prefix_cache_lookups, prefix_cache_hits, prefix_cache_hit_tokens;
    size_t prefix_cache_entries, pages_cached;
    /* KV block cache (DiEngineOptions.kv_cache_*): admissions that looked, positions restored
     * from RAM and from disk, blocks stored, RAM evictions, disk bytes read and written, corrupt
     * records and foreign files skipped, writes dropped (queue full) or failed */
    int kv_cache_enabled;
    uint64_t kv_lookups, kv_hit_tokens_ram, kv_hit_tokens_disk, kv_blocks_stored, kv_evictions;
    uint64_t kv_bytes_read, kv_bytes_written, kv_records_corrupt, kv_files_skipped, kv_writes_dropped,
        kv_write_errors;
    /* speculative decoding (DiEngineOptions.draft_max): the draft length in use (0: off), verify
     * steps with at least one draft, drafts verified and accepted, and how many verify steps
     * accepted k drafts (k = 0 .. DI_MAX_DRAFT), and drafts a request's grammar cut short (it
     * refused one of their tokens) */
    int spec_draft_max;
    uint64_t spec_num_drafts, spec_num_draft_tokens, spec_num_accepted_tokens;
    uint64_t spec_accepted_hist[DI_MAX_DRAFT + 1];
    uint64_t spec_num_grammar_truncated;
    double time_draft_s;       /* the drafter */
} DiEngineMetrics;

/* Text for the engine, supplied by the layer above it (the tokenizer and the prompt renderer live
 * in src/recipe, which calls the engine, never the reverse).  Every hook may be NULL: without
 * encode, text prompts are rejected; without token_bytes, outputs carry ids but no text; without
 * render_chat, chat input is rejected.  ctx is passed to every hook. */
typedef struct {
    /* text -> ids (fresh heap array, free()); -1 with di_errorf on failure */
    int (*encode)(const void *ctx, const char *text, size_t len, int32_t **ids, size_t *n_ids);
    /* the exact bytes of one token (not NUL-terminated); NULL for none */
    const char *(*token_bytes)(const void *ctx, int32_t id, size_t *len);
    /* 1 when a token's text is not shown (special tokens: BOS, EOS, role markers) */
    int (*is_special)(const void *ctx, int32_t id);
    /* a DiRequestInput.chat_json conversation -> prompt ids (fresh heap array) */
    int (*render_chat)(const void *ctx, const char *json, int32_t **ids, size_t *n_ids);
    const void *ctx;
    int32_t bos_id; /* prepended to text prompts when >= 0 (Hugging Face add_special_tokens) */
} DiTextHooks;

/* Install text hooks (copied; ctx must outlive the engine).  Before the first request. */
int di_engine_set_text_hooks(DiEngine *engine, const DiTextHooks *hooks);

/* Create an engine on a model directory (config.json + safetensors checkpoint; NULL or "":
 * $DEEPINFER_HF_MODEL_DIR, else the built-in tiny model, generated on first use).  NULL opts:
 * defaults.  Text needs di_engine_set_text_hooks. */
DiEngine *di_engine_create(const char *model_dir, const DiEngineOptions *opts);
void di_engine_destroy(DiEngine *engine);
/* The model directory the engine was created on (resolved as above); NULL for the test mock. */
const char *di_engine_model_dir(const DiEngine *engine);

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
/* Why a request finished with DI_FINISH_ERROR ("" for any other request); NULL with an error for
 * an unknown id.  Valid until di_engine_release or destroy. */
const char *di_engine_request_error(DiEngine *engine, uint64_t request_id);
/* Compile a structured-output constraint (a DiConstraintType and its text, as in
 * DiSamplingParams) into the engine's grammar cache now: 0, or -1 with the problem named.  Safe
 * to call from any thread while the engine steps (a server's request thread), so that a big
 * schema compiles there, not in the step loop, and a bad one is refused before admission. */
int di_engine_prepare_constraint(DiEngine *engine, int constraint_type, const char *constraint);
/* Forget a finished request (its output memory).  A running one is aborted first. */
int di_engine_release(DiEngine *engine, uint64_t request_id);
int di_engine_get_metrics(const DiEngine *engine, DiEngineMetrics *out);
int32_t di_engine_vocab_size(const DiEngine *engine);

/* Testing hook, not a model: an engine over a deterministic mock model whose logits are a hash of
 * (token history, position), with its state in the engine's pages.  Byte-level text: ids 0..255
 * are bytes, id 256 is EOS, ids above are the words " w<id>" (di_engine_set_text_hooks may replace
 * them).  vocab_size >= 257.  For tests of the engine and its bindings, independent of a model. */
DiEngine *di_engine_create_mock(int32_t vocab_size, uint64_t model_seed, const DiEngineOptions *opts);
/* The same mock with a drafter of draft_block (1..16) tokens whose drafts are the mock's own
 * greedy continuation with probability agree_rate (in [0, 1]), for tests of speculative
 * decoding: 1 gives the accept path, 0 the reject path. */
DiEngine *di_engine_create_mock_drafter(int32_t vocab_size, uint64_t model_seed, int32_t draft_block,
                                        double agree_rate, const DiEngineOptions *opts);

/* ---- ABI: the layout of the structs above, for bindings that mirror them ----------------- */

/* A binding that redeclares these structs (python/deepinfer/_lib.py, with ctypes) checks its
 * copy against the library it loaded.  di_abi_struct: sizeof the struct named `type` (its C name,
 * e.g. "DiEngineOptions") and its number of fields.  di_abi_field: field `index` of it, in
 * declaration order: name, offset, size.  -1 with an error naming an unknown type or an index
 * out of range.  Described: DiEngineOptions, DiLogitBias, DiSamplingParams, DiRequestInput,
 * DiTokenLogprobs, DiStreamDelta, DiRequestOutput, DiEngineMetrics, DiTextHooks. */
int di_abi_struct(const char *type, size_t *size, int *n_fields);
int di_abi_field(const char *type, int index, const char **name, size_t *offset, size_t *size);

#ifdef __cplusplus
}
#endif

#endif
