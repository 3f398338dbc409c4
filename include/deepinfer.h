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

/* (engine API goes here) */

/* ---- serve: load balancers and EPLB (src/serve) ---------------------------------------- */

/* EPLB (serving.md §8.1, a port of deepseek-ai/EPLB eplb.py): a replication and placement plan
 * for the routed experts of every MoE layer.  Physical slot s of a layer lives on GPU
 * s / (num_replicas / num_gpus). */
typedef struct {
    int num_layers;    /* L */
    int num_logical;   /* E: logical (routed) experts per layer */
    int num_replicas;  /* R: physical expert slots per layer, a multiple of num_gpus */
    int num_gpus;      /* P */
    int max_replicas;  /* X: the largest replica count of any expert in any layer */
    int hierarchical;  /* 1: hierarchical policy (num_groups % num_nodes == 0), 0: global */
    int32_t *phy2log;  /* [L][R] logical expert held by each slot */
    int32_t *phy_rank; /* [L][R] which replica of its expert the slot holds (0-based) */
    int32_t *log2phy;  /* [L][E][X] the slots of each expert, -1 padded */
    int32_t *logcnt;   /* [L][E] replica count of each expert (>= 1) */
} DiEplbPlan;

/* Plan from weight[L][E] (estimated load of each expert, finite and >= 0).  Requires
 * E % num_groups == 0, num_gpus % num_nodes == 0, num_replicas % num_gpus == 0, R >= E, and for
 * the hierarchical policy num_groups % num_nodes == 0 (else the global policy is used).  On
 * success *out owns fresh arrays (free with di_eplb_plan_free); on failure *out is zeroed. */
int di_eplb_rebalance(const float *weight, int num_layers, int num_logical, int num_replicas,
                      int num_groups, int num_nodes, int num_gpus, DiEplbPlan *out);
void di_eplb_plan_free(DiEplbPlan *plan);

/* moe_lb (serving.md §8.3) of a plan under a load weight[L][E], each expert's load split evenly
 * over its replicas: per layer max/mean of the per-GPU load (1.0 for an all-zero layer) into
 * per_layer[L] (may be NULL), and the aggregate sum(max)/sum(mean) over layers into *aggregate. */
int di_eplb_moe_lb(const DiEplbPlan *plan, const float *weight, double *per_layer, double *aggregate);

#ifdef __cplusplus
}
#endif

#endif
