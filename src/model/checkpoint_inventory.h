/* checkpoint_inventory.h — the tensor inventory of model-v41.md §3.6 for a given config: every
 * name, dtype and shape a V4.1 checkpoint must contain.  One list serves two readers: the
 * checkpoint loader (missing or mis-shaped tensors are errors) and make-tiny (which writes
 * exactly this list), so the writer and the reader can never disagree about the format. */
#ifndef DI_MODEL_CHECKPOINT_INVENTORY_H
#define DI_MODEL_CHECKPOINT_INVENTORY_H

#include "model/config.h"
#include "model/safetensors.h"

#include <stddef.h>
#include <stdint.h>

/* What a tensor is, so that a writer can choose plausible values (§9.6) and a reader can tell
 * FP8/FP4 codes from their scales. */
typedef enum {
    DI_INV_EMBED = 0,    /* BF16 [V, D] token embedding / output head / Markov tables */
    DI_INV_NORM,         /* BF16 RMSNorm weight, ~1 */
    DI_INV_BF16_MATRIX,  /* BF16 projection (router, compressor, indexer wk / weights_proj, heads) */
    DI_INV_HC_FN,        /* F32 mHC projection */
    DI_INV_HC_BASE,      /* F32 mHC bias */
    DI_INV_HC_SCALE,     /* F32 [3] pre / post / comb scales */
    DI_INV_SINK,         /* F32 attention sink logits */
    DI_INV_GATE_BIAS,    /* F32 router selection bias (text or image) */
    DI_INV_FP8_WEIGHT,   /* F8_E4M3 [out, in] */
    DI_INV_FP8_SCALE,    /* F8_E8M0 [ceil(out/32), ceil(in/32)] */
    DI_INV_FP4_WEIGHT,   /* I8 [out, in/2], packed E2M1 */
    DI_INV_FP4_SCALE,    /* F8_E8M0 [out, in/32] */
    DI_INV_ENGRAM_TABLE, /* F8_E4M3 [rows, head_dim] */
    DI_INV_ENGRAM_SCALE, /* F8_E8M0 [rows, head_dim/32] */
    DI_INV_ENGRAM_QK     /* BF16 [hc, D] q_weight / k_weight, ~1 */
} DiInventoryKind;

typedef struct {
    char name[96];
    DiDType dtype;
    DiInventoryKind kind;
    int ndim;
    int64_t shape[2];
    int64_t fan_in; /* logical input width of a matrix (for weight scaling), else 0 */
    int layer;      /* 0..n_total_layers-1, or -1 for globals */
} DiInventoryEntry;

typedef struct {
    size_t n;
    DiInventoryEntry *entries; /* in a stable order: globals, then layers, then stages */
    int64_t total_bytes;
} DiInventory;

/* Build the inventory for a validated config (vision tensors excluded; `gate.bias_vl` included
 * when the config has a vision tower, §3.6). */
int di_inventory_build(const DiModelConfig *cfg, DiInventory *out);
void di_inventory_free(DiInventory *inv);
/* True for names of the vision tower (§3.9): vision.*, aligner.*, image_start/end/newline. */
int di_inventory_is_vision_name(const char *name);

#endif
