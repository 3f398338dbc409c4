/* workspace.h — every scratch buffer the forward pass writes, sized once per model (llama2.c's
 * RunState; here RunState is the per-request cache, state.h).
 *
 * A forward used to allocate and free its buffers in every function it called (~570 heap
 * allocations per decoded token on the 8-layer tiny model).  The workspace holds them all,
 * named for what they hold and grouped by the stage that writes them, sized from ModelDims, the
 * most rows one forward call runs (the engine's max batch tokens; a longer call is split into
 * chunks of that many rows, forward.c) and the pool's thread count (per-thread scratch: attention
 * scores, the matmul kernels' scratch, the MoE expert tasks' own matmul scratch).  So a decode
 * step at steady state makes no heap allocation in the model.
 *
 * One workspace per Model: forwards and drafts on one model run one at a time (a second
 * concurrent call is refused with an error, never overlapped).  A pool with more threads than
 * the workspace was sized for makes the next call re-size it once, with an info line. */
#ifndef DI_MODEL_WORKSPACE_H
#define DI_MODEL_WORKSPACE_H

#include "model/mhc.h"
#include "model/model_dims.h"
#include "model/state.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Most rows one forward runs by default: the engine's default max batch tokens. */
#define WORKSPACE_DEFAULT_ROWS 512

/* An index score and its entry (or block) id, ranked by the indexer (attention.c). */
typedef DiScored WsScored;

/* One expert's gathered rows (moe.c). */
typedef struct {
    const void *ex; /* const ExpertWeights * */
    int64_t off, cnt;
} WsExpertSlot;

/* One slice of an expert matrix for a pool task (moe.c). */
typedef struct {
    int slot;
    int64_t r0, len, cost;
} WsExpertTask;

typedef struct Workspace {
    int64_t rows;    /* most rows per forward call */
    int threads;     /* pool threads the per-thread scratch is sized for */
    atomic_int busy; /* a forward or draft is running on it */
    void *mem;       /* the one allocation everything below is carved from */
    size_t bytes;

    struct { /* forward.c: the batch, residual streams, taps, head */
        float *X, *pi, *embed_row, *taps, *head_in, *head_out, *ctx, *ctx_kv;
        int64_t *engram_ids, *row0, *start, *pos;
        int64_t *keep, *swa_floor; /* bounded replay (replay.h): rows kept, window floor per request */
        int32_t *tokens;
        RunState **states;
        void *pieces; /* ForwardSeq[rows]: one chunk of a split call */
    } fwd;
    struct { /* model_block: mHC mixes, sub-layer input and output */
        HcMix *mix_attn, *mix_ffn;
        float *mix_proj, *in, *out;
    } block;
    struct { /* attention.c */
        float *q, *q_low, *kv, *heads_out, *scores, *comp_kv, *comp_gate, *idx_q, *idx_w, *groups, *group_in, *group_out;
        float *latent, *idx_key, *idx_scores;
        const float **keys;
        int64_t *n_keys;
        int64_t key_slots;   /* keys per row */
        int64_t max_entries; /* compressed entries one indexer call can see */
        WsScored *ranked;    /* max_entries + 8: the top-k's candidates */
        int32_t *pool_ids;   /* the pool's blocks, then their entries (candidate_topk_blocks · (1 + block size)) */
        int32_t *sel, *sel_count, *cand, *cand_count; /* AttnShared's arrays */
    } attn;
    struct { /* moe.c */
        float *router, *weights, *x, *row_weight, *hidden, *gate, *up, *y, *y_task, *task_mm;
        int32_t *ids;
        int64_t *rows, *count;
        WsExpertSlot *slots;
        WsExpertTask *tasks;
        int64_t task_mm_floats;  /* per thread */
        int max_experts, max_top_k; /* what the buffers hold per row */
    } moe;
    struct { /* engram.c */
        float *rows, *kv;
    } engram;
    struct { /* dspark.c */
        float *markov_e, *markov_bias, *conf_in; /* the block rows use the forward's buffers */
    } draft;
    /* model_linear: the FP8 round trip's private copy of the activations (§4.3) */
    float *act_q;
    int64_t act_q_cols; /* widest matrix: act_q holds rows x act_q_cols */
    /* matmul kernels' scratch (DiMatTraits.scratch_floats, kernels/backend.h) for pool-wide products */
    float *mm;
    int64_t mm_floats;
} Workspace;

/* Size and allocate for model m (its dims and weights), `rows` rows per call, `threads` threads. */
Workspace *workspace_create(const Model *m, int64_t rows, int threads);
void workspace_free(Workspace *ws);

/* Claim m's workspace for one forward or draft: re-sized first when m's pool has more threads
 * than it was sized for; -1 with an error when another call holds it.  Release after. */
int workspace_acquire(const Model *m);
void workspace_release(const Model *m);

#endif
