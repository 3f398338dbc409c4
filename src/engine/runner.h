/* runner.h — the narrow interface between the engine and a model (the "model runner").
 *
 * The engine owns requests, scheduling, per-request state memory and sampling; the model owns
 * the math.  The engine sees a model only through this vtable, so the real V4.1 forward pass, the
 * deterministic mock of the tests (runner_mock.c) and the benchmarks' synthetic model plug in
 * alike.  Data flows one way: the engine calls the runner, never the reverse.
 *
 * State in pages.  A request's decode state (model-v41.md §6.1: window rings per layer,
 * compressed KV rows and index keys per KV-source layer, compressor pending rows, Engram history)
 * lives in fixed-size pages of the engine's pool (pages.h).  The runner says how many pages a
 * context of n tokens needs (pages_for_tokens, non-decreasing in n); before every forward the
 * engine guarantees that each sequence's page table holds at least pages_for_tokens(start + n)
 * pages.  The runner lays its state out over the pages as it likes; model/page_layout.h does it
 * for the usual case (fixed rows such as window rings in the first pages, rows that grow with the
 * context such as compressed KV and index keys in chunk pages appended as the context grows), and
 * page i is di_runner_page(seq, i).  A sequence with start_pos == 0 starts from fresh, uninitialised pages:
 * the runner must write state before it reads it.  Freeing a request's state is returning its
 * pages; preemption by recompute is freeing them and prefilling prompt + generated tokens again.
 *
 * Batches.  One forward runs a mixed batch: decode sequences (one token each) and prefill chunks
 * (any number of tokens), each {state pages, token ids, start position}.  The runner writes one
 * logits rows (fp32, vocab_size values each) for every sequence with n_logits > 0, in sequence
 * order: one row for each of the sequence's last n_logits tokens, in position order (a plain
 * decode or the end of a prefill asks for 1; a speculative verify for 1 + its drafts).  With batch_invariant set, a row's logits must be bit-identical
 * whatever else is in the batch, at any batch position and with any chunking
 * (engine-features.md §4.2); a CPU runner whose reductions run per row in a fixed order is
 * invariant by construction.
 *
 * KV block cache (serving.md §4, optional).  A runner that sets export_block/import_block lets
 * the engine keep the cacheable rows of whole blocks of B positions (B a multiple of 128: what
 * the model keeps per token for the prefix, e.g. V4.1's compressed KV and index keys of the
 * KV-source layers; never the window rings) and restore them into another request's pages.  A
 * restored state lacks the fixed rows (window rings, pending compressor rows), so the engine
 * then prefills from H - replay_exact_rows (by default: exact) or H - replay_window (the official
 * approximation) with replay_start/replay_end set (engine-features.md §2.4): positions in [replay_start, replay_end) rebuild only the fixed rows, their writes to the
 * cached rows are suppressed, and sliding-window attention of rows >= replay_start reads only
 * keys >= replay_start. */
#ifndef DI_ENGINE_RUNNER_H
#define DI_ENGINE_RUNNER_H

#include "base/threadpool.h"
#include "kernels/backend.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One request's part of a batch. */
typedef struct {
    uint8_t *const *pages;  /* the request's state pages, in page-table order */
    size_t n_pages;         /* >= pages_for_tokens(start_pos + n_tokens) */
    const int32_t *tokens;  /* the chunk's token ids */
    int32_t n_tokens;       /* >= 1 */
    int64_t start_pos;      /* position of tokens[0]; the state holds positions [0, start_pos) */
    int32_t n_logits;       /* logits rows for the last n_logits tokens (0: none; <= n_tokens) */
    /* Speculative verify: the engine will cut this chunk back with commit() once it knows how
     * many of its rows were accepted, so the runner keeps what it needs to undo the rest. */
    bool speculative;
    /* Bounded replay after a block-cache hit at replay_end (both 0: none).  Positions of this
     * chunk below replay_end recompute fixed rows only; no attention reads keys < replay_start. */
    int64_t replay_start, replay_end;
} DiRunnerSeq;

typedef struct {
    const DiRunnerSeq *seqs;
    int n_seqs;
    bool batch_invariant;   /* DEEPINFER_BATCH_INVARIANT: fixed-geometry kernels */
    float *logits;          /* [sum of n_logits][vocab_size] */
} DiRunnerBatch;

/* Speculative decoding (engine-features.md §1).  A request's state holds its committed
 * positions [0, start_pos); anchor is the token at start_pos, not yet forwarded.  draft()
 * proposes the next draft_block tokens (positions start_pos+1 ..) from the state alone (the
 * drafter's context is written by forward for every committed row), with:
 *   tokens[k]      the draft for position start_pos + 1 + k
 *   confidence[k]  the confidence head's raw logit for draft k given drafts < k (no sigmoid)
 *   logits[k]      (optional, may be NULL) the draft distribution's logits z_k before
 *                  temperature, the row tokens[k] was picked from (verification at T > 0)
 * pick chooses token k from z_k (the engine's sampler, so drafts follow the request's sampling
 * parameters); NULL picks the argmax (ties to the lower id).  pick returns -1 on error. */
typedef int32_t (*DiDraftPick)(void *ctx, int row, const float *logits, int32_t vocab_size);
typedef struct {
    uint8_t *const *pages;
    size_t n_pages;
    int64_t start_pos;      /* committed positions */
    int32_t anchor;         /* the token at start_pos */
    int32_t *tokens;        /* [draft_block] out */
    float *confidence;      /* [draft_block] out */
    float *logits;          /* [draft_block][vocab_size] out, or NULL */
    DiDraftPick pick;
    void *pick_ctx;
} DiRunnerDraft;

/* Expert load (serving.md §8.2 "Load collection"): the routed (token, expert) pairs of every
 * forward and draft since the counts were last cleared, per layer and logical expert.  Every row
 * a forward runs through a MoE layer counts top_k pairs: prefill chunks, decodes, speculative
 * verify rows (accepted or not: each costs its experts' compute); the drafter's DSpark stages
 * count in their own table, since their experts are not the backbone's. */
typedef struct {
    int64_t *tokens;        /* [layers][experts], the runner's live counts */
    int layers, experts;    /* backbone MoE layers and routed experts per layer */
    int64_t *draft_tokens;  /* [draft_layers][draft_experts]; NULL when there is no drafter */
    int draft_layers, draft_experts;
} DiExpertLoad;

typedef struct DiRunner DiRunner;

typedef struct {
    /* Pages a context of n_tokens needs (n_tokens >= 1).  Non-decreasing in n_tokens. */
    size_t (*pages_for_tokens)(const DiRunner *runner, int64_t n_tokens);
    /* Run the batch; on failure record the cause (di_errorf) and return -1. */
    int (*forward)(DiRunner *runner, const DiRunnerBatch *batch);
    void (*destroy)(DiRunner *runner);
    /* Optional (NULL: the runner computes on the calling thread): the engine lends its thread
     * pool (DEEPINFER_NUM_THREADS, else every online CPU) for the runner's forwards; it stays
     * valid until destroy, and only the thread calling forward uses it. */
    void (*use_threads)(DiRunner *runner, DiThreadPool *pool);
    /* Optional: the most rows one forward will carry (the engine's max batch tokens), called
     * once at engine creation so the runner sizes its scratch for them up front.  <0 on error. */
    int (*reserve_rows)(DiRunner *runner, int64_t rows);
    /* Optional (NULL: no drafter; then draft_block is 0): draft for n requests, their states
     * left unchanged.  <0 on error. */
    int (*draft)(DiRunner *runner, const DiRunnerDraft *drafts, int n);
    /* Required when draft is set: after a forward whose batch had speculative sequences and
     * before any other forward, keep[i] (1 <= keep[i] <= n_tokens, for each sequence of that
     * batch; ignored for non-speculative ones) cuts sequence i back so that its state holds
     * exactly start_pos + keep[i] positions, bit-identical to a forward of its first keep[i]
     * tokens alone.  <0 on error. */
    int (*commit)(DiRunner *runner, const DiRunnerBatch *batch, const int32_t *keep);
    /* Optional, all three or none (then the engine refuses the KV block cache): the bytes of one
     * block of block_tokens positions (0 when block_tokens is not a multiple of 128); copy the
     * cacheable rows of positions [first, first + block_tokens) out of / into a request's pages
     * (which must hold pages_for_tokens(first + block_tokens)).  first is a multiple of
     * block_tokens.  <0 on error. */
    size_t (*block_bytes)(const DiRunner *runner, int block_tokens);
    int (*export_block)(const DiRunner *runner, uint8_t *const *pages, size_t n_pages, int64_t first,
                        int block_tokens, void *out);
    int (*import_block)(const DiRunner *runner, uint8_t *const *pages, size_t n_pages, int64_t first,
                        int block_tokens, const void *in);
    /* Optional (NULL: the model has no routed experts): the runner's expert load tables, which it
     * only ever adds to (on the thread calling forward / draft); the engine reads and clears them
     * at the end of every step (step.c).  -1 when there are none. */
    int (*expert_load)(DiRunner *runner, DiExpertLoad *out);
    /* Optional (NULL: nothing streams, the state is sent whole at the end): the end of the pages
     * that a context of n_tokens positions has filled for good, pages [first, end) with first the
     * count of pages every context has (model/page_layout.h di_state_layout_final_pages): no later
     * forward writes them, so a PD prefill may send them while it runs.  first <= end <=
     * pages_for_tokens(n_tokens). */
    void (*final_pages)(const DiRunner *runner, int64_t n_tokens, size_t *first, size_t *end);
} DiRunnerOps;

/* A runner's built-in byte-level text, used when the engine was given no text hooks
 * (di_engine_set_text_hooks, the way for a real tokenizer).  encode may be NULL (text prompts
 * are then rejected); piece returns a token's exact bytes (NULL: outputs carry no text). */
typedef struct {
    int (*encode)(void *ctx, const char *text, size_t len, int32_t **out_ids, size_t *out_n);
    void (*piece)(void *ctx, int32_t token, const char **out_bytes, size_t *out_len);
    void *ctx;
} DiTextCodec;

struct DiRunner {
    const DiRunnerOps *ops;
    int32_t vocab_size;
    size_t page_bytes;       /* size of one state page (a multiple of 64) */
    const int32_t *eos_ids;  /* tokens that end a generation */
    int n_eos_ids;
    const char *name;        /* for messages */
    /* Optional: the kernels the model chose when it loaded, which the engine's samplers then use
     * too; NULL (a runner with no model, the mocks): the engine resolves DEEPINFER_KERNELS once
     * when it is created. */
    const DiKernelBackend *be;
    int32_t draft_block;     /* drafts one draft() proposes (dspark_block_size); 0: no drafter */
    DiTextCodec codec;       /* optional built-in text */
    /* Optional: called just before a request's pages go back to the pool (finish, abort,
     * preemption, engine destroy), for a runner that keeps something outside the pages. */
    void (*release_state)(DiRunner *runner, uint8_t *const *pages, size_t n_pages);
    /* KV block cache: W, the positions the official (approximate) replay recomputes before a hit
     * (> 0 with export_block); replay_exact_rows, the positions a replay must recompute for the
     * fixed rows it rebuilds to equal a cold prefill's bit for bit (their dependency cone; 0: no
     * replay is exact); and the bytes naming the model's weights and state format (the cache's
     * model fingerprint). */
    int32_t replay_window;
    int32_t replay_exact_rows;
    const void *identity;
    size_t identity_len;
};

static inline uint8_t *di_runner_page(const DiRunnerSeq *seq, size_t index) { return seq->pages[index]; }

#endif
