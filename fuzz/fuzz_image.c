/* fuzz_image.c — libFuzzer target for image decoding and the resize plan (src/vision/image.h): any
 * byte string must either decode (PNG, JPEG, WebP, GIF) into an image of the size its header
 * gives, within the pixel limit, or fail with an error message; the plan of any size and config
 * either fails with a message or keeps its invariants (whole patches, at most NMAX tokens, the fit
 * inside the canvas); a decoded image small enough goes through the whole preprocessing.  Never
 * a crash, hang or out-of-bounds access.  Run: make fuzz && build-fuzz/fuzz_image -max_total_time=60
 * (seeds: tests/data/fuzz/fuzz_image/). */
#include "base/error.h"
#include "vision/image.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check_plan(const DiImageConfig *c, int64_t w, int64_t h) {
    DiImagePlan p;
    di_error_clear();
    if (di_image_plan(c, w, h, &p) < 0) {
        if (!di_error_message()[0]) abort();
        return;
    }
    if (p.n_tokens > c->max_tokens || p.n_tokens != p.n_llm_h * (p.n_llm_w + 1) + 2) abort();
    if (p.best_w != p.n_vit_w * c->patch_size || p.best_h != p.n_vit_h * c->patch_size || p.best_w <= 0 || p.best_h <= 0) abort();
    if (p.fit_w < 1 || p.fit_h < 1 || p.fit_x < 0 || p.fit_y < 0 || p.fit_x + p.fit_w > p.best_w || p.fit_y + p.fit_h > p.best_h) abort();
}

static uint64_t rd(const uint8_t *d, int k) {
    uint64_t v = 0;
    for (int i = 0; i < k; i++) v = v << 8 | d[i];
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const DiImageConfig release = {14, 3, 1024, 295936, -1}, small = {14, 3, 64, 15876, -1};
    /* the plan over sizes and configs taken from the first bytes */
    if (size >= 16) {
        DiImageConfig c = {1 + (int64_t)(data[8] % 32), 1 + (int64_t)(data[9] % 5), (int64_t)rd(data + 10, 2), (int64_t)rd(data + 12, 3),
                           data[15] & 1 ? -1.0 : 0.25 + (data[15] >> 1) / 8.0};
        check_plan(&c, (int64_t)rd(data, 4), (int64_t)rd(data + 4, 4));
        check_plan(&release, (int64_t)rd(data, 4) % 100000, (int64_t)rd(data + 4, 4) % 100000);
    }
    /* the decoders */
    DiImageLimits lim = {1u << 20, 0}; /* keeps each run short; the limit itself is under test */
    DiImageFormat f;
    int64_t w = 0, h = 0;
    di_error_clear();
    int probed = di_image_probe(data, size, &f, &w, &h) == 0;
    if (!probed && !di_error_message()[0]) abort();
    DiImage img;
    di_error_clear();
    if (di_image_decode(data, size, &lim, &img) == 0) {
        if (!probed || img.width != w || img.height != h || (uint64_t)(w * h) > lim.max_pixels || !img.rgb) abort();
        volatile uint8_t last = img.rgb[w * h * 3 - 1];
        (void)last;
        check_plan(&release, w, h);
        DiImagePatches p;
        di_error_clear();
        if (di_image_preprocess(&small, &img, &p) == 0) {
            for (int64_t i = 0; i < p.n_patches * p.patch_dim; i++)
                if (!(p.patches[i] >= -1.0f && p.patches[i] <= 1.0f)) abort();
            di_image_patches_free(&p);
        } else if (!di_error_message()[0]) abort();
        di_image_free(&img);
    } else if (!di_error_message()[0] || img.rgb) {
        abort(); /* a failure must say why and leave nothing behind */
    }
    return 0;
}
