/* request.h — one request inside the engine: its tokens, sampling parameters (deep-copied),
 * scheduling counters, state pages and output.
 *
 * Ownership of fields between the two threads of async mode (engine-features.md §3):
 *   - the worker (forward + sampling of a step) writes only tokens[p] and logprobs[p - n_prompt]
 *     for the positions p it samples, which the planner reserved ahead (placeholders);
 *   - the main thread (planning, output processing, the API) owns everything else and reads a
 *     sampled token only after the step that wrote it has completed.
 * tokens and logprobs are allocated once at their final size (prompt + max_tokens), so the worker
 * never sees them move. */
#ifndef DI_ENGINE_REQUEST_H
#define DI_ENGINE_REQUEST_H

#include "deepinfer.h"
#include "engine/kvcache/block_key.h"
#include "engine/grammar/grammar.h"
#include "engine/pages.h"
#include "engine/textstream.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    DI_REQ_WAITING = 0, /* queued (new, or preempted and waiting to recompute) */
    DI_REQ_RUNNING = 1, /* holds pages; prefilling or decoding */
    DI_REQ_FINISHED = 2 /* stopped, hit max_tokens or aborted; output kept until released */
} DiRequestState;

typedef struct DiRequest {
    uint64_t id;
    DiRequestState state;
    DiSamplingParams params;   /* stop / stop_token_ids point into the copies below */
    char **stop_copy;
    int32_t *stop_ids_copy;
    DiLogitBias *logit_bias_copy;
    char *constraint_copy;
    /* structured output (constraint.h): attached at admission; the matcher is advanced only by
     * the thread sampling the request's rows, one row at a time */
    DiGrammarMatcher *matcher;
    const DiGrammar *grammar;  /* held in the engine's grammar store until detached */
    size_t longest_stop;       /* bytes of the longest stop string */
    uint64_t seed;
    bool reproducible;         /* its seed, or the engine's, came from the caller (step.c) */
    DiStreamCallback callback;
    void *user;

    int32_t *tokens;           /* prompt, then generated tokens; capacity n_prompt + max_tokens */
    int n_prompt;
    DiTokenLogprobs *logprobs; /* [max_tokens] when params.logprobs >= 0, else NULL */

    /* scheduling (main thread) */
    int64_t n_computed;        /* positions whose state is computed or being computed */
    int n_output_scheduled;    /* generated tokens that planned steps will have produced */
    DiPageTable pages;
    int inflight;              /* planned steps not yet processed that include this request */
    bool release_pages_pending;/* preempted or finished while in flight: free pages when idle */
    bool released;             /* di_engine_release called: free the request when idle */
    int n_preemptions;
    int n_cached_tokens;       /* prompt positions restored from the prefix cache at admission */
    bool state_unreliable;     /* a step with this request failed: its state must not be cached */
    bool exact_state;          /* DiRequestInput.exact_state: never restored from KV blocks */
    bool snapshot_planned;     /* the prefix cache's copy before the last prompt token is planned */
    uint64_t planned_epoch;    /* the scheduler step that last planned it */
    int prefill_grant;         /* tokens of prefill the step being planned may give it ... */
    uint64_t grant_epoch;      /* ... valid when this equals the scheduler's epoch */

    /* KV block cache (kv_blocks.h, main thread) */
    char *cache_salt;          /* tenant salt (NULL: none) */
    size_t cache_salt_len;
    DiKvKey *kv_keys;          /* the key chain of its first n_kv_keys blocks */
    int n_kv_keys;
    size_t cap_kv_keys;
    int kv_blocks_cached;      /* leading blocks known to be in the cache (restored or stored) */
    int64_t replay_start, replay_end; /* bounded replay after a restore (0, 0: none) */

    /* output (main thread) */
    int n_output;              /* generated tokens confirmed (processed) */
    int n_output_streamed;
    DiTextStream text;
    double cumulative_logprob;
    DiFinishReason finish_reason;
    char *error;               /* DI_FINISH_ERROR: the cause (heap, set once), else NULL */
    int32_t stop_token;
    int stop_string;
    double t_arrival, t_first_token, t_finish;
    double t_scheduled;          /* first admitted to the running batch (0 until then) */
    uint64_t spec_drafts, spec_draft_tokens, spec_accepted; /* DiRequestOutput.spec_num_* */
} DiRequest;

/* A new waiting request; copies the prompt and everything params points to. */
DiRequest *di_request_create(uint64_t id, const int32_t *prompt, int n_prompt, const DiSamplingParams *params,
                             uint64_t seed, DiStreamCallback callback, void *user);
/* Free the request (its pages must have been returned to the pool). */
void di_request_free(DiRequest *req);

/* Tokens the scheduler knows of, placeholders for in-flight samples included. */
static inline int64_t di_request_known_tokens(const DiRequest *req) {
    return (int64_t)req->n_prompt + req->n_output_scheduled;
}

#endif
