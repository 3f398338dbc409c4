/* checkpoint.h — a DeepSeek-V4.1 checkpoint directory (official HF layout) opened for the weight
 * binder: every shard memory-mapped and checked (safetensors.h), names resolved through
 * model.safetensors.index.json, and checked accessors that hand out weights in their stored
 * format (matmul.h DiMatrix) after verifying dtype, shape and scale shape.
 *
 * Layout (model-v41.md §3.1): either `model.safetensors.index.json` (weight_map name -> shard;
 * authoritative, every shard it names must exist and hold exactly the tensors mapped to it) or a
 * single `model.safetensors`.  Nothing is copied: tensor data points into the maps, which live
 * until di_checkpoint_close (but for tensors a file leaves off their element alignment, which
 * safetensors.h copies).
 *
 * With a config, open also compares the directory against the tensor inventory of §3.6 for that
 * config (checkpoint_inventory.h): a missing tensor or a wrong dtype/shape is an error; a tensor
 * the text model does not use is a warning (di_checkpoint_warning); vision tensors of a config
 * with a vision tower are accepted silently (§3.9). */
#ifndef DI_MODEL_CHECKPOINT_H
#define DI_MODEL_CHECKPOINT_H

#include "kernels/matmul.h"
#include "model/config.h"
#include "model/safetensors.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct DiCheckpoint DiCheckpoint;

/* Open a checkpoint directory.  cfg may be NULL (no inventory check).  Logs progress (bytes
 * mapped, tensors checked) at info level.  NULL with an error naming file and tensor. */
DiCheckpoint *di_checkpoint_open(const char *dir, const DiModelConfig *cfg);
void di_checkpoint_close(DiCheckpoint *ck);

/* The tensor called `name`, or NULL with an error "<dir>: no tensor '<name>'".  Marks the tensor
 * as used (see di_checkpoint_report_unused). */
const DiTensorInfo *di_checkpoint_find(DiCheckpoint *ck, const char *name);
/* Same without recording an error or marking use (for optional tensors). */
const DiTensorInfo *di_checkpoint_lookup(const DiCheckpoint *ck, const char *name);

/* A weight matrix of logical shape [rows, cols] in its stored format:
 *   F32  [rows, cols]                     -> DI_MAT_F32
 *   BF16 [rows, cols]                     -> DI_MAT_BF16
 *   F8_E4M3 [rows, cols] + `<name minus "weight">scale` F8_E8M0 [ceil(rows/32), ceil(cols/32)]
 *                                         -> DI_MAT_FP8_BLOCK (§3.4)
 *   I8 [rows, cols/2] + scale F8_E8M0 [rows, cols/32]  -> DI_MAT_FP4_ROW32 (§3.5)
 * `weight_name` is the full name ("layers.0.attn.wq_a.weight").  Any mismatch is an error naming
 * the file, tensor, and the expected and found dtype/shape. */
int di_checkpoint_matrix(DiCheckpoint *ck, const char *weight_name, int64_t rows, int64_t cols, DiMatrix *out);

/* §3.8 load-time conversions, exact: the matrix re-encoded as F32 or BF16 into a buffer the
 * caller owns (di_owned_matrix_free).  Every stored value is decoded exactly (matmul.h
 * di_matrix_row) and must be finite and exactly representable in the target, else it is an error
 * naming the tensor and element.  REF does this for attn.wo_a (FP8 -> BF16), head.weight,
 * mtp.*.markov_head.head / confidence_head.proj and the ratio-2 compressor wkv / wgate
 * (BF16 -> F32); the model needs none of them (exact values give the same products in any
 * format, e.g. attention.h attn_wo_a). */
typedef struct {
    DiMatrix m;  /* m.data points into owned */
    void *owned;
} DiOwnedMatrix;
int di_checkpoint_matrix_as(DiCheckpoint *ck, const char *weight_name, int64_t rows, int64_t cols, DiMatFormat format,
                            DiOwnedMatrix *out);
void di_owned_matrix_free(DiOwnedMatrix *m);

/* A 1-D tensor of n elements of the given dtype (norms, biases, sinks, hc_*_base/scale). */
int di_checkpoint_vector(DiCheckpoint *ck, const char *name, int64_t n, DiDType dtype, const void **data);

/* A tensor of exactly this dtype and shape (e.g. hc_*_fn F32 [24, 4D], q_weight BF16 [4, D]). */
int di_checkpoint_tensor(DiCheckpoint *ck, const char *name, DiDType dtype, int ndim, const int64_t *shape,
                         const void **data);

/* An Engram table (golden README §2, model-v41.md §3.6): `<prefix>.weight` F8_E4M3
 * [rows, head_dim] + `<prefix>.scale` F8_E8M0 [rows, head_dim/32], one scale per row per 32
 * columns.  prefix = "layers.1.engram.embed". */
int di_checkpoint_engram_table(DiCheckpoint *ck, const char *prefix, int64_t rows, int64_t head_dim,
                               const uint8_t **codes, const uint8_t **scales);

/* Every tensor, sorted by name (for tools and tests). */
size_t di_checkpoint_n_tensors(const DiCheckpoint *ck);
const DiTensorInfo *di_checkpoint_tensor_at(const DiCheckpoint *ck, size_t i);
size_t di_checkpoint_n_files(const DiCheckpoint *ck);
/* Bytes of all mapped shard files and of all tensor data. */
int64_t di_checkpoint_mapped_bytes(const DiCheckpoint *ck);
int64_t di_checkpoint_tensor_bytes(const DiCheckpoint *ck);
const char *di_checkpoint_dir(const DiCheckpoint *ck);
/* Give back this process's pages of [p, p + n) (madvise MADV_DONTNEED on the whole pages inside
 * it) when the range lies in one of the read-only shard maps; memory outside them (an aligned
 * copy) is left alone.  The next read faults the pages in again from the file.  The bytes given
 * back (0 outside the maps), or -1 with the cause. */
int64_t di_checkpoint_release_pages(const DiCheckpoint *ck, const void *p, size_t n);
/* The reverse: fault this process's pages of [p, p + n) in now (MADV_POPULATE_READ, else a read
 * of every page) when the range lies in a shard map.  The bytes made resident (0 outside). */
int64_t di_checkpoint_prefault_pages(const DiCheckpoint *ck, const void *p, size_t n);

/* Warnings found at open (unknown tensors that the text model does not use). */
size_t di_checkpoint_n_warnings(const DiCheckpoint *ck);
const char *di_checkpoint_warning(const DiCheckpoint *ck, size_t i);

/* After binding: number of tensors never handed out by find/matrix/vector/tensor/engram_table
 * (vision tensors excluded); each is logged as a warning when log is true. */
size_t di_checkpoint_report_unused(const DiCheckpoint *ck, bool log);

/* The resident memory a model needs: mapped weights + the §6 per-request state for
 * `n_requests` requests of `context_len` tokens (packed layout).  Logged at info level by
 * di_checkpoint_log_memory. */
typedef struct {
    int64_t weights; /* tensor bytes mapped */
    DiStateBytes per_request;
    int64_t total; /* weights + n_requests * per_request.total */
} DiMemoryReport;
int di_checkpoint_memory(const DiCheckpoint *ck, const DiModelConfig *cfg, int64_t context_len, int64_t n_requests,
                         DiMemoryReport *out);
int di_checkpoint_log_memory(const DiCheckpoint *ck, const DiModelConfig *cfg, int64_t context_len, int64_t n_requests);

#endif
