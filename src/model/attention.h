/* attention.h — the attention sub-layer of V4.1 (§5.6): low-rank query, the layer's own window
 * KV, the CSA2 compressor and index keys of KV-source layers, the lightning indexer with the
 * candidate block pool and top-k (Full / Reindex layers), reuse of the latest published cache and
 * selection (Reuse layers), attention with a per-head sink over window + selected compressed
 * rows, inverse RoPE and the grouped output projection.
 *
 * The pieces are exported separately because the DSpark drafter (dspark.c) reuses the query,
 * window-KV, per-head attention and output projection with its own key set. */
#ifndef DI_MODEL_ATTENTION_H
#define DI_MODEL_ATTENTION_H

#include "model/model.h"
#include "model/state.h"

/* What CSA2 sources publish for later layers of the same forward (§5.0, REF
 * SharedAttentionRuntime): the latest index source's selection and the candidate pool. */
typedef struct {
    int64_t n;            /* rows of the chunk */
    int32_t *sel;         /* [n][index_topk] ascending entry ids */
    int32_t *sel_count;   /* [n] */
    int sel_layer;        /* layer that published sel, -1 none */
    int32_t *pool;        /* [n][candidate_topk_blocks] kept block ids */
    int32_t *pool_count;  /* [n] */
    int pool_layer;       /* -1 none */
} AttnShared;

/* The rows of one forward: n_seqs requests, each a chunk of consecutive positions, their rows
 * concatenated in request order.  Projections run on all rows at once (weights are read once
 * per batch); everything that touches a request's caches runs per request. */
typedef struct {
    int n_seqs;
    RunState *const *st;  /* [n_seqs] */
    const int64_t *row0;  /* [n_seqs + 1]: first row of each request; row0[n_seqs] = rows */
    const int64_t *start; /* [n_seqs]: position of each request's first row */
    const int64_t *pos;   /* [rows]: absolute position of every row */
    /* Bounded replay (replay.h); NULL / false in a plain forward. */
    const int64_t *swa_floor; /* [n_seqs]: lowest position whose window key a row may read */
    bool sources_done;        /* the layer's compressor and index keys already ran on the whole chunk */
} RowBatch;

/* Nothing published yet, the arrays in the workspace (n <= its rows). */
struct Workspace;
void attn_shared_init(AttnShared *sh, const struct Workspace *ws, int64_t n);

/* Full attention sub-layer of backbone layer L for every row of the batch: a[rows][D] ->
 * out[rows][D].  Updates each request's state (window ring of L; compressed rows, index keys and
 * pending rows when L is a KV source). */
int attention_forward(const Model *m, const RowBatch *rb, int layer, const float *a, AttnShared *sh, float *out);

/* The KV-source part of a Full layer L for every row: compressor projections of a[rows][D], then
 * per request its compressed entries, index keys and pending rows (§5.6.3-5.6.5). */
int attn_write_sources(const Model *m, const RowBatch *rb, int layer, const float *a);

/* ---- pieces shared with the DSpark drafter ---- */
/* q[n][H·Dh] with RoPE at pos[i]; qr[n][Rq] (the normalised low-rank query, kept for the indexer). */
int attn_query(const Model *m, const LayerWeights *lw, const RopeTable *rope, const float *a, int64_t n, const int64_t *pos,
               float *q, float *qr);
/* kv[n][Dh] = RMSNorm(wkv·a), RoPE at pos[i], FP8 round trip in kvq/ref modes (§5.6.2). */
int attn_window_kv(const Model *m, const LayerWeights *lw, const RopeTable *rope, const float *a, int64_t n, const int64_t *pos,
                   float *kv);
/* Head h of one query row over nk key rows (key = value), with the sink (§4.8): oh[Dh] from
 * qh[Dh]; z: nk · DI_BACKEND_HEAD_GROUP floats of scratch (kernels/backend.h). */
void attn_head(const Model *m, const LayerWeights *lw, int64_t h, const float *qh, const float *const *keys, int64_t nk,
               float *oh, float *z);
/* Every head of one query row: o[H·Dh]; z as attn_head's. */
void attn_heads(const Model *m, const LayerWeights *lw, const float *q, const float *const *keys, int64_t nk, float *o,
                float *zbuf);
/* The grouped projection z[n][G·Ro] of o[n][H·Dh] (§5.6.8): z_g = rows g·Ro.. of wo_a times the
 * heads of group g, in any format.  REF multiplies by wo_a's BF16 dequantisation; the FP8 matrix as
 * stored gives the same bits: e4m3 x 2^k is exact in BF16 and float32 for every scale byte from 3
 * to 246, and the kernels decode it exactly and sum in the same order whatever the format
 * (matmul.h). */
int attn_wo_a(const Model *m, const DiMatrix *wo_a, const float *o, int64_t n, float *z);
/* Inverse RoPE of o[n][H·Dh] at pos[i], grouped wo_a, wo_b: out[n][D] (§5.6.8). */
int attn_output(const Model *m, const LayerWeights *lw, const RopeTable *rope, float *o, int64_t n, const int64_t *pos, float *out);

#endif
