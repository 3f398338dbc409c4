/* vit_load.c — binding the vision tower's tensors (vision-v41.md §3) from an open checkpoint
 * into a VisionModel (vit.h), with every shape taken from vision_config, and the config checks
 * of §2.2.  Matrices stay BF16 in the shard maps; norms, biases and the delimiter vectors are
 * copied to float32 (exact). */
#include "model/vit.h"

#include "base/error.h"
#include "base/mem.h"
#include "kernels/numformats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int vit_dims_from_config(const DiVisionConfig *vc, int64_t text_dim, VitDims *out) {
    if (!vc || !out) return di_errorf("vision config: invalid arguments");
    memset(out, 0, sizeof *out);
    if (!vc->present || vc->num_hidden_layers <= 0) return di_errorf("vision_config: the model has no vision tower (num_hidden_layers 0)");
    const int64_t lim = 1 << 20;
    struct {
        const char *key;
        int64_t v;
    } pos[] = {{"hidden_size", vc->hidden_size},   {"num_attention_heads", vc->num_attention_heads},
               {"intermediate_size", vc->intermediate_size}, {"patch_size", vc->patch_size},
               {"downsample_ratio", vc->downsample_ratio}, {"num_hidden_layers", vc->num_hidden_layers}};
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v < 1 || pos[i].v > lim) return di_errorf("vision_config.%s: %lld is not in 1..%lld", pos[i].key, (long long)pos[i].v, (long long)lim);
    if (vc->hidden_size % vc->num_attention_heads)
        return di_errorf("vision_config: hidden_size %lld is not a multiple of num_attention_heads %lld", (long long)vc->hidden_size,
                         (long long)vc->num_attention_heads);
    int64_t hd = vc->hidden_size / vc->num_attention_heads;
    if (hd % 4) return di_errorf("vision_config: head dim %lld is not a multiple of 4 (2-D RoPE, §2.2)", (long long)hd);
    if (vc->patch_size > 256 || vc->downsample_ratio > 64) return di_errorf("vision_config: patch_size / downsample_ratio too large");
    if (!(vc->rope_theta > 0) || !isfinite(vc->rope_theta)) return di_errorf("vision_config.rope_theta: not a positive number");
    if (text_dim < 1 || text_dim > lim) return di_errorf("vision: text hidden size %lld out of range", (long long)text_dim);
    out->layers = (int)vc->num_hidden_layers;
    out->dim = (int)vc->hidden_size;
    out->heads = (int)vc->num_attention_heads;
    out->head_dim = (int)hd;
    out->inter = (int)vc->intermediate_size;
    out->patch = (int)vc->patch_size;
    out->ratio = (int)vc->downsample_ratio;
    out->text_dim = (int)text_dim;
    out->patch_in = 3 * out->patch * out->patch;
    out->cell_in = out->dim * out->ratio * out->ratio;
    out->theta = vc->rope_theta;
    out->eps = 1e-6f;
    return 0;
}

static int own(VisionModel *vm, void *p) {
    if (di_grow(&vm->owned, &vm->cap_owned, vm->n_owned + 1, 16, sizeof *vm->owned, "vision weight copies") != 0) return -1;
    vm->owned[vm->n_owned++] = p;
    return 0;
}

/* A vector of n values (BF16 as in the release, or F32) copied to float32. */
static int vec(VisionModel *vm, DiCheckpoint *ck, const char *name, int64_t n, float **out) {
    const DiTensorInfo *t = di_checkpoint_lookup(ck, name);
    if (!t) return di_errorf("%s: no tensor '%s'", di_checkpoint_dir(ck), name);
    DiDType dt = t->dtype == DI_DTYPE_F32 ? DI_DTYPE_F32 : DI_DTYPE_BF16;
    const void *data;
    if (di_checkpoint_vector(ck, name, n, dt, &data) != 0) return -1;
    float *v = di_malloc((size_t)n * sizeof *v, name);
    if (!v || own(vm, v) != 0) {
        free(v);
        return -1;
    }
    for (int64_t i = 0; i < n; i++) v[i] = dt == DI_DTYPE_F32 ? ((const float *)data)[i] : di_bf16_to_f32(((const uint16_t *)data)[i]);
    *out = v;
    return 0;
}

static int mat(VisionModel *vm, DiCheckpoint *ck, const char *name, int64_t rows, int64_t cols, DiMatrix *out) {
    if (di_checkpoint_matrix(ck, name, rows, cols, out) != 0) return -1;
    if (out->format != DI_MAT_BF16 && out->format != DI_MAT_F32)
        return di_errorf("%s: '%s' must be BF16 or F32 (vision tensors are never quantised, §3)", di_checkpoint_dir(ck), name);
    void *prepared = NULL;
    if (vm->be->matrix_prepare(vm->be, out, &prepared) != 0) return di_error_wrap("'%s'", name);
    if (prepared && own(vm, prepared) != 0) {
        free(prepared);
        return -1;
    }
    return 0;
}

#define NAME(buf, ...) snprintf(buf, sizeof buf, __VA_ARGS__)

VisionModel *vit_load(DiCheckpoint *ck, const DiModelConfig *cfg, const DiKernelBackend *be, DiThreadPool *pool) {
    if (!ck || !cfg || !be) {
        di_errorf("vision: invalid arguments");
        return NULL;
    }
    VisionModel *vm = di_calloc(1, sizeof *vm, "vision model");
    if (!vm) return NULL;
    vm->be = be;
    vm->pool = pool;
    if (vit_dims_from_config(&cfg->vision, cfg->hidden_size, &vm->d) != 0) goto fail;
    const VitDims *d = &vm->d;
    int64_t Dv = d->dim, D = d->text_dim;
    vm->blocks = di_calloc((size_t)d->layers, sizeof *vm->blocks, "vision blocks");
    if (!vm->blocks) goto fail;
    char n[160];
    if (mat(vm, ck, "vision.patch_embed.proj.weight", Dv, d->patch_in, &vm->patch_w) ||
        vec(vm, ck, "vision.patch_embed.proj.bias", Dv, &vm->patch_b))
        goto fail;
    for (int i = 0; i < d->layers; i++) {
        VitBlock *b = &vm->blocks[i];
        if ((NAME(n, "vision.blocks.%d.norm1.weight", i), vec(vm, ck, n, Dv, &b->norm1)) ||
            (NAME(n, "vision.blocks.%d.norm2.weight", i), vec(vm, ck, n, Dv, &b->norm2)) ||
            (NAME(n, "vision.blocks.%d.attn.wqkv.weight", i), mat(vm, ck, n, 3 * Dv, Dv, &b->wqkv)) ||
            (NAME(n, "vision.blocks.%d.attn.wqkv.bias", i), vec(vm, ck, n, 3 * Dv, &b->bqkv)) ||
            (NAME(n, "vision.blocks.%d.attn.wo.weight", i), mat(vm, ck, n, Dv, Dv, &b->wo)) ||
            (NAME(n, "vision.blocks.%d.attn.wo.bias", i), vec(vm, ck, n, Dv, &b->bo)) ||
            (NAME(n, "vision.blocks.%d.mlp.w1.weight", i), mat(vm, ck, n, 2 * (int64_t)d->inter, Dv, &b->w1)) ||
            (NAME(n, "vision.blocks.%d.mlp.w2.weight", i), mat(vm, ck, n, Dv, d->inter, &b->w2)))
            goto fail;
    }
    if (vec(vm, ck, "vision.norm.weight", Dv, &vm->norm) || mat(vm, ck, "aligner.w1.weight", D, d->cell_in, &vm->al_w1) ||
        vec(vm, ck, "aligner.w1.bias", D, &vm->al_b1) || mat(vm, ck, "aligner.w2.weight", D, D, &vm->al_w2) ||
        vec(vm, ck, "aligner.w2.bias", D, &vm->al_b2) || vec(vm, ck, "image_start", D, &vm->image_start) ||
        vec(vm, ck, "image_end", D, &vm->image_end) || vec(vm, ck, "image_newline", D, &vm->image_newline))
        goto fail;
    /* §5.1: f_k = 1 / θ^(2k/A) in fp32, A = head_dim / 2 rotation pairs, k < A/2 */
    int A = d->head_dim / 2;
    vm->freq = di_malloc((size_t)(A / 2) * sizeof *vm->freq, "vision rope");
    if (!vm->freq || own(vm, vm->freq) != 0) goto fail;
    for (int k = 0; k < A / 2; k++) {
        float e = (float)(2 * k) / (float)A;
        vm->freq[k] = 1.0f / powf((float)d->theta, e);
    }
    return vm;
fail:
    di_error_wrap("vision tower");
    vit_free(vm);
    return NULL;
}
