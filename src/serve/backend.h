/* backend.h — the narrow interface between the HTTP server and whatever generates tokens.
 *
 * The server converts a protocol request into a DiApiRequest (recipe/api_request.h) and hands
 * it to a backend; the backend (the engine with its scheduler, detokenizer and output parser,
 * once wired; a deterministic fake in the tests) batches the requests of all connections and
 * reports each request's progress as parsed output events (recipe/api_stream.h): READY, then
 * reasoning / content / tool-call events, then exactly one FINISH.
 *
 * Threading contract: submit / abort / stats may be called from any thread, concurrently.
 * `emit` is called from the backend's own thread(s), never re-entrantly for one request, never
 * from inside submit or abort; after the FINISH event of a request the backend never touches
 * `user` again.  abort of a finished or unknown id is a no-op; of a live one it makes the
 * backend send FINISH (DI_API_FINISH_ABORT) soon and free the request's state. */
#ifndef DI_SERVE_BACKEND_H
#define DI_SERVE_BACKEND_H

#include "deepinfer.h"
#include "engine/kvcache/kv_cache.h"
#include "recipe/api_request.h"
#include "recipe/api_stream.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DI_BACKEND_PREFILL_SAMPLES 16

typedef void (*DiBackendEmit)(void *user, const DiApiEvent *ev);

typedef struct {
    int queued;              /* accepted, waiting for a batch slot */
    int running;             /* in the running batch */
    uint64_t steps;          /* engine steps so far */
    double step_seconds;     /* their total duration */
    uint64_t preemptions;    /* requests preempted (state freed, recomputed later) so far */
    double state_usage;      /* fraction of the request-state pool in use, 0..1 */
    /* the KV block cache (DiEngineMetrics' kv_*); rendered only when enabled */
    bool kv_enabled;
    uint64_t kv_lookups, kv_hit_tokens_ram, kv_hit_tokens_disk, kv_evictions, kv_bytes_read, kv_bytes_written,
        kv_records_corrupt, kv_files_skipped;
    /* speculative decoding (DiEngineMetrics.spec_*): verify steps with drafts, drafts verified,
     * drafts accepted, and verify steps by accepted drafts */
    uint64_t spec_drafts, spec_draft_tokens, spec_accepted_tokens;
    uint64_t spec_accepted_hist[DI_MAX_DRAFT + 1];
    /* PD decode: received states imported into the engine (DiApiRequest.pd_state), and those
     * refused (no room, a foreign layout: the request then prefilled locally) */
    uint64_t pd_states_imported, pd_state_import_failures;
    /* load for a gateway (GET /internal/load, serving.md §6-7): context tokens held by the
     * running requests (prompt + generated), monotonic prefill / decode token counters and the
     * wall time of the steps that ran a prefill chunk, the KV block size (0: no block cache), and
     * the latest per-request prefill samples (new tokens q, cached prefix c, prefill seconds),
     * prefill_samples_total counting every sample ever taken (the ring keeps the last few) */
    int64_t kv_tokens;
    uint64_t prefill_tokens, decode_tokens;
    double prefill_seconds;
    int block_tokens;
    uint64_t prefill_samples_total;
    struct {
        int64_t q, c;
        double seconds;
    } prefill_samples[DI_BACKEND_PREFILL_SAMPLES];
} DiBackendStats;

/* The phases of a finished request as the backend saw them (seconds; vLLM's definitions):
 * queue = accepted -> first scheduled, prefill = scheduled -> first token, decode = first token
 * -> finish. */
typedef struct {
    double queue_s, prefill_s, decode_s;
} DiBackendTimes;

/* The backend's KV block cache, for a PD worker (serve/kv_transfer.h): the cache (thread-safe)
 * and what names its blocks. */
typedef struct {
    DiKvCache *cache;
    DiKvKey fingerprint;
    int block_tokens;
    size_t block_bytes;
    size_t page_bytes; /* one state page (an exact state's layout, DiApiRequest.pd_export) */
} DiBackendKv;

typedef struct {
    void *self;
    const char *model_name;  /* the model served, as /v1/models reports it */
    int64_t context_limit;   /* tokens (prompt + output) one request may hold */
    /* Accept a request.  0 and *out_id on success; -1 with an error message and *http_status
     * (400 prompt too long, 429 queue full, 503 shutting down) when it is refused. */
    int (*submit)(void *self, const DiApiRequest *req, DiBackendEmit emit, void *user, uint64_t *out_id,
                  int *http_status);
    void (*abort)(void *self, uint64_t id);
    void (*stats)(void *self, DiBackendStats *out);
    /* The prompt ids `req` would be given (chat: rendered; raw prompt: BOS + BPE unless
     * !add_special): a fresh heap array.  -1 with the cause and *http_status. */
    int (*tokenize)(void *self, const DiApiRequest *req, bool add_special, int32_t **ids, size_t *n_ids,
                    int *http_status);
    /* ids -> their text (special tokens included), a fresh NUL-terminated UTF-8 string (invalid
     * sequences replaced by U+FFFD).  -1 with the cause and *http_status (400: an id out of range). */
    int (*detokenize)(void *self, const int32_t *ids, size_t n_ids, char **text, int *http_status);
    /* The phase times of request `id`, only from inside its FINISH event; 0, or -1 when unknown
     * (aborted before it was scheduled...). */
    int (*times)(void *self, uint64_t id, DiBackendTimes *out);
    /* The KV block cache: 0 and *out, or -1 when the backend has none (NULL: never has one). */
    int (*kv)(void *self, DiBackendKv *out);
} DiBackend;

#endif
