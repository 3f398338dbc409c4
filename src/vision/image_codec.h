/* image_codec.h — the per-format decoders behind di_image_probe / di_image_decode (image.h),
 * internal to src/vision.  Each takes the whole encoded buffer; with out == NULL it reads the
 * header only and fills *w, *h.  Otherwise it checks w * h against max_pixels before decoding a
 * single pixel (di_image_check_pixels) and fills out->rgb with [h][w][3]. */
#ifndef DI_VISION_IMAGE_CODEC_H
#define DI_VISION_IMAGE_CODEC_H

#include "vision/image.h"

int di_image_check_pixels(const char *fmt, int64_t w, int64_t h, uint64_t max_pixels);
/* malloc of h * w * 3 bytes after the overflow checks; NULL with an error */
uint8_t *di_image_alloc_rgb(int64_t w, int64_t h);

int di_png_decode(const uint8_t *b, size_t n, uint64_t max_pixels, int64_t *w, int64_t *h, DiImage *out);
int di_jpeg_decode(const uint8_t *b, size_t n, uint64_t max_pixels, int64_t *w, int64_t *h, DiImage *out);
int di_webp_decode(const uint8_t *b, size_t n, uint64_t max_pixels, int64_t *w, int64_t *h, DiImage *out);
int di_gif_decode(const uint8_t *b, size_t n, uint64_t max_pixels, int64_t *w, int64_t *h, DiImage *out);

#endif
