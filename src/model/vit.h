/* vit.h — the vision tower of DeepSeek-V4.1 (vision-v41.md §5, §6): the ViT (linear patch
 * embedding, 2-D RoPE, bidirectional attention, SwiGLU MLP, RMSNorm) and the 3x3 aligner, one
 * image at a time, over the model's kernel table (kernels/backend.h) and thread pool.
 *
 * Why its own weights and workspace: the tower is independent of the text model (its own widths,
 * a per-image row count N that the text workspace is not sized for), so VisionModel holds the
 * bound vision tensors and a scratch arena grown to the largest image seen.  Every size comes
 * from config.json's vision_config and the checkpoint's shapes (a held-out set has others).
 *
 * Numerics: float32 throughout after the bf16 pixel values (the golden sets' vision numerics,
 * golden-v41/tiny-v README §4: the vision stages have no quantisation points in any text mode).
 * VIT_NUM_BF16 adds the official bf16-native rounding points of §5.2 / §6 (every Linear output,
 * residual adds, silu·up, attention output, q/k after RoPE, the norms' outputs, the aligner's
 * W1 / GELU / W2 outputs) for comparing against the official bf16 run (~1% relative). */
#ifndef DI_MODEL_VIT_H
#define DI_MODEL_VIT_H

#include "base/threadpool.h"
#include "kernels/backend.h"
#include "model/checkpoint.h"
#include "model/config.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum { VIT_NUM_F32 = 0, VIT_NUM_BF16 } VitNumerics;

typedef struct {
    float *norm1, *norm2;   /* [Dv], fp32 copies (REF keeps the vision norms in fp32) */
    DiMatrix wqkv, wo;      /* [3Dv, Dv] (q | k | v), [Dv, Dv] */
    float *bqkv, *bo;       /* [3Dv], [Dv] */
    DiMatrix w1, w2;        /* [2Fv, Dv] (gate | up), [Dv, Fv]; no biases */
} VitBlock;

typedef struct {
    int layers, dim, heads, head_dim, inter, patch, ratio, text_dim;
    int patch_in;      /* 3·P² */
    int cell_in;       /* Dv·r² */
    double theta;
    float eps;         /* 1e-6 */
} VitDims;

typedef struct VitScratch VitScratch;

typedef struct {
    VitDims d;
    DiMatrix patch_w;   /* [Dv, 3P²] */
    float *patch_b;     /* [Dv] */
    VitBlock *blocks;
    float *norm;        /* [Dv] */
    DiMatrix al_w1, al_w2;       /* [D, Dv·r²], [D, D] */
    float *al_b1, *al_b2;        /* [D] */
    float *image_start, *image_end, *image_newline; /* [D] */
    float *freq;        /* RoPE frequencies f_k, k < head_dim/4 */
    const DiKernelBackend *be;
    DiThreadPool *pool; /* may be NULL */
    VitNumerics num;
    VitScratch *ws;     /* grown to the largest image (vit.c) */
    void **owned;
    size_t n_owned, cap_owned;
} VisionModel;

/* Check vision_config (§2.2) and fill the dims; text_dim = the text hidden size. */
int vit_dims_from_config(const DiVisionConfig *vc, int64_t text_dim, VitDims *out);

/* Bind every vision tensor of an open checkpoint (vision.*, aligner.*, image_*) with the
 * shapes vision_config implies; be / pool: the kernels and threads the forward runs on.  NULL
 * with an error naming the tensor; an error too when the config has no vision tower. */
VisionModel *vit_load(DiCheckpoint *ck, const DiModelConfig *cfg, const DiKernelBackend *be, DiThreadPool *pool);
void vit_free(VisionModel *vm);

/* The grid of one image's preprocessed patches: n_vit_h x n_vit_w patches, row-major. */
typedef struct {
    int64_t n_vit_h, n_vit_w;
} VitGrid;

/* Cells of the 3x3 aligner grid: ceil(h/r) x ceil(w/r). */
int64_t vit_cells(const VisionModel *vm, VitGrid g, int64_t *gh, int64_t *gw);

/* Optional per-stage outputs (each may be NULL): layer_out [layers][N][Dv] (residual stream
 * after each block), vit_out [N][Dv] (after the final norm), aligner_in [cells][Dv·r²]. */
typedef struct {
    float *layer_out, *vit_out, *aligner_in;
} VitTrace;

/* THE entry point of preprocessed patches: patches [N][3P²] (N = n_vit_h·n_vit_w, inner order
 * c·P² + y·P + x, values already the bf16 pixel table of §4.5) -> the image's aligner rows
 * embeds [cells][D] in row-major cell order (§6).  One image; threaded inside. */
int vit_encode(VisionModel *vm, const float *patches, VitGrid g, float *embeds, VitTrace *trace);


/* ---- the image span in the token sequence (§7.1, §7.2; vision_span.c) */
enum { VIT_TYPE_TEXT = -1, VIT_TYPE_START = 0, VIT_TYPE_IMAGE = 1, VIT_TYPE_NEWLINE = 2, VIT_TYPE_END = 3 };

/* Positions of a gh x gw span: gh·(gw+1) + 2; -1 for an empty grid. */
int64_t vit_span_len(int64_t gh, int64_t gw);
/* The span's token types (START, (IMAGE x gw, NEWLINE) x gh, END) and its embedding rows
 * [len][D]: image_start / image_newline / image_end and aligner row s at IMAGE slot s.
 * rows may be NULL (types only). */
int vit_span(const VisionModel *vm, const float *embeds, int64_t gh, int64_t gw, int32_t *types, float *rows);

#endif
