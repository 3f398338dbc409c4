/* moe.h — the mixture-of-experts feed-forward of V4.1 (§5.7): sqrt-softplus router whose bias
 * only selects, renormalised weights × routed_scaling_factor, SwiGLU experts with the one-sided
 * gate clamp and two-sided up clamp, routed outputs summed in ascending expert id, then the
 * shared expert. */
#ifndef DI_MODEL_MOE_H
#define DI_MODEL_MOE_H

#include "model/model.h"
#include "model/workspace.h"

#include <stdbool.h>

/* y[n][D] = MoE(f[n][D]) with the layer's experts and top_k.  selected (may be NULL) receives
 * [n][top_k] expert ids, best (highest biased score) first.  load (may be NULL) is the layer's
 * row of expert load counts: load[e] grows by the rows routed to expert e (n x top_k in all). */
int moe_forward(const Model *m, const LayerWeights *lw, int top_k, const float *f, int64_t n, float *y, int32_t *selected,
                int64_t *load);

/* Routed experts served outside this process (expert parallelism, src/ep; set once at load with
 * model_set_moe_executor).  For a main layer, moe_forward gathers as always (slots in ascending
 * expert id, rows ascending within each), then calls dispatch with the routed slots, runs the
 * shared expert itself, calls combine, which fills y[g][D] for every routed gathered row g (the
 * expert's output, routing weight applied, the same bits moe_run_routed gives), and sums the rows
 * in the usual order: the result is bit-identical to running the experts here.  The draft
 * (DSpark) layers always run here. */
typedef struct {
    const LayerWeights *lw;
    int layer;                  /* main layer index, < n_layers */
    int n_slots;                /* routed experts with rows; expert id = slots[i].ex - lw->experts */
    const WsExpertSlot *slots;  /* rows slots[i].off .. off + cnt - 1, contiguous from 0 */
    const float *x;             /* [rows][D] gathered inputs (not yet FP8 round-tripped) */
    const float *weight;        /* [rows] routing weight of each gathered row */
    const int64_t *token;       /* [rows] the call's row (token) each gathered row came from */
    float *y;                   /* [rows][D] combine's output */
} MoeRouted;

typedef struct MoeExecutor {
    int (*dispatch)(void *ctx, const Model *m, const MoeRouted *r);
    int (*combine)(void *ctx, const Model *m, const MoeRouted *r);
    void *ctx;
} MoeExecutor;

/* Install (or with NULL remove) the executor; not during a forward.  The executor must outlive
 * its use by m. */
int model_set_moe_executor(Model *m, const MoeExecutor *exec);

/* Run routed experts of layer lw here, as moe_forward does: slots over x[rows][D] with routing
 * weights w[rows], outputs (weight applied) into y[rows][D].  x is FP8 round-tripped in place
 * under the `ref` numerics, unless x_quantised says it already was (rows decoded from the FP8
 * wire form, numformats.h di_dequant_fp8_block32, are the round trip's result).  Claims the
 * workspace (expert-serving ranks, tests). */
int moe_run_routed(const Model *m, const LayerWeights *lw, const WsExpertSlot *slots, int n_slots, float *x, bool x_quantised,
                   const float *w, float *y);

#endif
