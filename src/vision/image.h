/* image.h — image input up to the ViT's patches (vision-v41.md §4): decoding PNG / JPEG / WebP /
 * GIF bytes with Debian's libraries into 8-bit RGB as Pillow's `Image.open(...).convert("RGB")`
 * gives it, the resize plan (a pure function of the decoded size and the vision config),
 * Pillow's BICUBIC resampling with the gray-127 pad of `ImageOps.pad`, the normalisation to bf16
 * pixel values and the patch layout the patch embedding reads.
 *
 * Why it lives apart from the model: decoding and planning run in the request front end (a
 * bad image must be a 400 before any model work, and the router lays out the span from the plan
 * alone, §9), and they are the only place client bytes meet C parsers, so they are fuzzed on
 * their own (fuzz/fuzz_image.c).
 *
 * Errors follow base/error.h: -1 with a message naming the cause ("image: truncated PNG data",
 * "image: 40000x40000 = 1600000000 pixels exceeds the limit of ..."), never a crash.  The pixel
 * limit is checked from the header before any pixel is decoded (decompression bombs). */
#ifndef DI_VISION_IMAGE_H
#define DI_VISION_IMAGE_H

#include "model/config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    DI_IMAGE_FMT_UNKNOWN = 0,
    DI_IMAGE_FMT_PNG,
    DI_IMAGE_FMT_JPEG,
    DI_IMAGE_FMT_WEBP,
    DI_IMAGE_FMT_GIF,
} DiImageFormat;

/* Pillow's own bomb threshold (Image.MAX_IMAGE_PIXELS = 2^30 / 4 / 3, above which it warns). */
#define DI_IMAGE_DEFAULT_MAX_PIXELS 89478485ull
#define DI_IMAGE_DEFAULT_MAX_BYTES (64ull << 20)

typedef struct {
    uint64_t max_pixels; /* width * height from the header; 0 = DI_IMAGE_DEFAULT_MAX_PIXELS */
    uint64_t max_bytes;  /* encoded size; 0 = DI_IMAGE_DEFAULT_MAX_BYTES */
} DiImageLimits;

typedef struct {
    int64_t width, height;
    uint8_t *rgb; /* [height][width][3] R, G, B; free with di_image_free */
    DiImageFormat format;
} DiImage;

const char *di_image_format_name(DiImageFormat f);
/* The format from the leading magic bytes (UNKNOWN when none matches). */
DiImageFormat di_image_sniff(const uint8_t *bytes, size_t len);

/* Format and size from the header alone (nothing decoded): what the router needs to plan. */
int di_image_probe(const uint8_t *bytes, size_t len, DiImageFormat *fmt, int64_t *width, int64_t *height);

/* Decode to RGB, Pillow's convert("RGB") semantics (§4.1): alpha dropped without compositing,
 * gray replicated, palette colours (transparency ignored), 16-bit samples as Pillow reduces them
 * (high byte; 16-bit gray without alpha clipped to 255 as Pillow's I -> RGB does), the first
 * frame of an animation, no EXIF rotation, JPEG through libjpeg-turbo's ISLOW IDCT with fancy
 * upsampling.  lim may be NULL (defaults).  On error *out is empty. */
int di_image_decode(const uint8_t *bytes, size_t len, const DiImageLimits *lim, DiImage *out);
void di_image_free(DiImage *img);

/* The preprocessing-relevant part of the vision config (§2.1). */
typedef struct {
    int64_t patch_size;       /* P */
    int64_t downsample_ratio; /* r */
    int64_t max_tokens;       /* NMAX: span positions per image, delimiters included */
    int64_t min_pixels;       /* smaller images are scaled up */
    double max_wh_ratio;      /* < 0: none (the release) */
} DiImageConfig;

/* Validates (patch, ratio >= 1, NMAX >= 3, min_pixels >= 0; §2.2). */
int di_image_config_check(const DiImageConfig *c);
/* From the parsed config.json; -1 when the model has no vision tower or the values are invalid. */
int di_image_config_from_vision(const DiVisionConfig *v, DiImageConfig *out);

typedef struct {
    int64_t width, height;       /* decoded size the plan was made for */
    int64_t best_w, best_h;      /* pixel size the ViT sees (multiples of P) */
    int64_t n_vit_h, n_vit_w;    /* patch grid */
    int64_t n_llm_h, n_llm_w;    /* token grid after the r x r aligner */
    int64_t n_tokens;            /* span length n_llm_h * (n_llm_w + 1) + 2 */
    bool shrunk;                 /* the NMAX cap shrank it (§4.2) */
    bool stretch;                /* max_wh_ratio stretch mode instead of pad (§4.3) */
    int64_t fit_x, fit_y, fit_w, fit_h; /* the resized image inside best_w x best_h; rest is gray 127 */
} DiImagePlan;

/* The §4.2 plan and the §4.3 placement, in IEEE double with Python's operation order.  Errors
 * for sizes <= 0, sizes beyond 2^31, and images whose fit rounds to zero pixels (Pillow raises). */
int di_image_plan(const DiImageConfig *c, int64_t width, int64_t height, DiImagePlan *out);

/* Pillow BICUBIC (8-bit path of Resample.c, §4.4) of interleaved RGB src [sh][sw][3] into
 * dst [dh][dw][3]; horizontal pass first, uint8 in between; a same-size resize is a copy. */
int di_image_resize_bicubic(const uint8_t *src, int64_t sw, int64_t sh, uint8_t *dst, int64_t dw, int64_t dh);

/* Resize + pad of the decoded image to the plan: out [best_h][best_w][3] (§4.3). */
int di_image_fit(const DiImage *img, const DiImagePlan *p, uint8_t *out);

/* bf16((v/255 - 0.5)/0.5) as a float (§4.5): -1 for 0, 1 for 255, -0.003936767578125 for 127. */
float di_image_norm_value(uint8_t v);
/* Interleaved RGB [h][w][3] -> planar pixels [3][h][w] of normalised values. */
int di_image_normalize(const uint8_t *rgb, int64_t w, int64_t h, float *pixels);
/* Planar pixels [3][best_h][best_w] -> patches [n_vit_h * n_vit_w][3 * P * P], patch n = i * n_vit_w
 * + j, inner index c * P * P + y * P + x (§4.6). */
int di_image_patchify(const float *pixels, const DiImagePlan *p, int64_t patch_size, float *patches);

/* Everything of one image after decoding. */
typedef struct {
    DiImagePlan plan;
    int64_t n_patches, patch_dim; /* n_vit_h * n_vit_w, 3 * P * P */
    float *patches;               /* [n_patches][patch_dim] */
} DiImagePatches;

/* plan + fit + normalise + patchify of a decoded image. */
int di_image_preprocess(const DiImageConfig *c, const DiImage *img, DiImagePatches *out);
/* decode + preprocess of encoded bytes. */
int di_image_load(const DiImageConfig *c, const DiImageLimits *lim, const uint8_t *bytes, size_t len,
                  DiImagePatches *out);
void di_image_patches_free(DiImagePatches *p);

#endif
