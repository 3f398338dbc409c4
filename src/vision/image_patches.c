/* image_patches.c — from the fitted RGB canvas to the ViT's input (vision-v41.md §4.5, §4.6):
 * the bf16 normalisation (v/255 - 0.5)/0.5 in float32, planar pixels [3][H][W], the row-major
 * patches [N][3*P*P] with inner order channel, row, column; and the one-call pipelines
 * di_image_preprocess / di_image_load over the plan and the resampler.
 *
 * The official code divides a float32 tensor by 255, subtracts 0.5, divides by 0.5 and casts to
 * bf16; each of the 256 byte values therefore has one exact result, computed here with the same
 * float32 operations (the build has -ffp-contract=off, so nothing is fused). */
#include "vision/image.h"

#include "base/error.h"
#include "kernels/numformats.h"

#include <stdlib.h>
#include <string.h>

float di_image_norm_value(uint8_t v) {
    volatile float x = (float)v / 255.0f; /* volatile: each step rounded to float32, as torch does */
    x = (x - 0.5f) / 0.5f;
    return di_bf16_to_f32(di_f32_to_bf16(x));
}

int di_image_normalize(const uint8_t *rgb, int64_t w, int64_t h, float *pixels) {
    if (!rgb || !pixels) return di_errorf("image normalize: NULL buffer");
    if (w <= 0 || h <= 0 || w > INT64_MAX / 3 / h) return di_errorf("image normalize: bad size %lldx%lld", (long long)w, (long long)h);
    float table[256];
    for (int v = 0; v < 256; v++) table[v] = di_image_norm_value((uint8_t)v);
    const int64_t plane = w * h;
    for (int64_t i = 0; i < plane; i++)
        for (int c = 0; c < 3; c++) pixels[c * plane + i] = table[rgb[i * 3 + c]];
    return 0;
}

int di_image_patchify(const float *pixels, const DiImagePlan *p, int64_t patch_size, float *patches) {
    if (!pixels || !p || !patches) return di_errorf("image patchify: NULL argument");
    const int64_t P = patch_size;
    if (P < 1 || p->n_vit_h < 1 || p->n_vit_w < 1 || p->best_h != p->n_vit_h * P || p->best_w != p->n_vit_w * P)
        return di_errorf("image patchify: %lldx%lld is not a %lldx%lld grid of %lld-pixel patches", (long long)p->best_w,
                         (long long)p->best_h, (long long)p->n_vit_w, (long long)p->n_vit_h, (long long)P);
    const int64_t W = p->best_w, plane = p->best_w * p->best_h, dim = 3 * P * P;
    for (int64_t i = 0; i < p->n_vit_h; i++)
        for (int64_t j = 0; j < p->n_vit_w; j++) {
            float *dst = patches + (i * p->n_vit_w + j) * dim;
            for (int64_t c = 0; c < 3; c++)
                for (int64_t y = 0; y < P; y++)
                    memcpy(dst + c * P * P + y * P, pixels + c * plane + (i * P + y) * W + j * P, (size_t)P * sizeof(float));
        }
    return 0;
}

void di_image_patches_free(DiImagePatches *p) {
    if (!p) return;
    free(p->patches);
    memset(p, 0, sizeof *p);
}

int di_image_preprocess(const DiImageConfig *c, const DiImage *img, DiImagePatches *out) {
    if (!out) return di_errorf("image preprocess: NULL output");
    memset(out, 0, sizeof *out);
    if (!c || !img || !img->rgb) return di_errorf("image preprocess: NULL argument");
    if (di_image_plan(c, img->width, img->height, &out->plan) < 0) return -1;
    const DiImagePlan *p = &out->plan;
    const int64_t npix = p->best_w * p->best_h;
    out->n_patches = p->n_vit_h * p->n_vit_w;
    out->patch_dim = 3 * c->patch_size * c->patch_size;
    uint8_t *canvas = malloc((size_t)npix * 3);
    float *pixels = malloc((size_t)npix * 3 * sizeof(float));
    out->patches = malloc((size_t)(out->n_patches * out->patch_dim) * sizeof(float));
    int rc = -1;
    if (!canvas || !pixels || !out->patches) {
        di_errorf("image preprocess: out of memory for %lldx%lld pixels", (long long)p->best_w, (long long)p->best_h);
        goto done;
    }
    if (di_image_fit(img, p, canvas) < 0 || di_image_normalize(canvas, p->best_w, p->best_h, pixels) < 0 ||
        di_image_patchify(pixels, p, c->patch_size, out->patches) < 0)
        goto done;
    rc = 0;
done:
    free(canvas);
    free(pixels);
    if (rc < 0) di_image_patches_free(out);
    return rc;
}

int di_image_load(const DiImageConfig *c, const DiImageLimits *lim, const uint8_t *bytes, size_t len, DiImagePatches *out) {
    if (!out) return di_errorf("image load: NULL output");
    memset(out, 0, sizeof *out);
    if (di_image_config_check(c) < 0) return -1;
    /* plan from the header first: an image the plan rejects is never decoded */
    DiImageFormat fmt;
    int64_t w, h;
    DiImagePlan plan;
    if (di_image_probe(bytes, len, &fmt, &w, &h) < 0 || di_image_plan(c, w, h, &plan) < 0) return -1;
    DiImage img;
    if (di_image_decode(bytes, len, lim, &img) < 0) return -1;
    int rc = di_image_preprocess(c, &img, out);
    di_image_free(&img);
    return rc;
}
