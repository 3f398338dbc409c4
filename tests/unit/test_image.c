/* test_image.c — image decoding and preprocessing (src/vision/image.h, vision-v41.md §4) against
 * the golden set golden-v41/tiny-v: every image's decoded_rgb, plan, placement, resized_rgb,
 * pixels and patches, exactly (README §5: these arrays are exact); plus the release plans of the
 * spec's §4.2 table, hand-derived resampling and normalisation values, lossless WebP and GIF
 * round trips through Debian's encoders, and bad input (empty, truncated, corrupt, unsupported,
 * zero-size, a pixel limit that must trip from the header before any decoding).
 * Every size comes from golden.json / config.json (a held-out set has other shapes). */
#include "base/error.h"
#include "base/file.h"
#include "base/json.h"
#include "golden/golden.h"
#include "model/config.h"
#include "test.h"
#include "vision/image.h"

#include <gif_lib.h>
#include <jpeglib.h>
#include <webp/encode.h>

static GoldenSet golden;
static char golden_dir[600];
static DiImageConfig vcfg;

/* ---- golden set ------------------------------------------------------------------------- */

typedef struct {
    char *bytes;
    size_t len;
    json_t *meta;
    int64_t width, height;
} GoldenImage;

static int golden_image(size_t k, GoldenImage *gi) {
    json_t *imgs = json_object_get(golden.root, "images");
    gi->meta = json_array_get(imgs, k);
    const char *file;
    if (!gi->meta || di_json_string(gi->meta, "images[]", "file", true, &file) < 0 ||
        di_json_int(gi->meta, "images[]", "width", true, &gi->width) < 0 || di_json_int(gi->meta, "images[]", "height", true, &gi->height) < 0)
        return -1;
    char *path = di_path_join(golden_dir, file);
    int rc = path ? di_read_file(path, &gi->bytes, &gi->len) : -1;
    free(path);
    return rc;
}

static const char *array_name(const GoldenImage *gi, const char *key) {
    return json_string_value(json_object_get(json_object_get(gi->meta, "arrays"), key));
}

static int64_t plan_field(const GoldenImage *gi, const char *key) {
    return json_integer_value(json_object_get(json_object_get(gi->meta, "plan"), key));
}

/* count of positions where the u8 image differs from the golden i32 array */
static int64_t diff_u8(const uint8_t *got, const GoldenArray *a) {
    const int32_t *want = a->data;
    int64_t bad = 0;
    for (int64_t i = 0; i < a->numel; i++) bad += got[i] != want[i];
    return bad;
}

static int64_t diff_f32(const float *got, const GoldenArray *a) {
    const float *want = a->data;
    int64_t bad = 0;
    for (int64_t i = 0; i < a->numel; i++) bad += memcmp(&got[i], &want[i], 4) != 0;
    return bad;
}

TEST(golden_images_decode_plan_resize_pixels_patches) {
    size_t n = json_array_size(json_object_get(golden.root, "images"));
    CHECK(n >= 1);
    for (size_t k = 0; k < n; k++) {
        GoldenImage gi = {0};
        if (golden_image(k, &gi) < 0) {
            CHECK_MSG(0, "image %zu: %s", k, di_error_message());
            continue;
        }
        /* header probe and decode */
        DiImageFormat fmt;
        int64_t pw, ph;
        CHECK_MSG(di_image_probe((const uint8_t *)gi.bytes, gi.len, &fmt, &pw, &ph) == 0, "%s", di_error_message());
        CHECK_EQ_INT(pw, gi.width);
        CHECK_EQ_INT(ph, gi.height);
        CHECK_STR(di_image_format_name(fmt), json_string_value(json_object_get(gi.meta, "format")));
        DiImage img;
        CHECK_MSG(di_image_decode((const uint8_t *)gi.bytes, gi.len, NULL, &img) == 0, "%s", di_error_message());
        int64_t want_dec[3] = {gi.height, gi.width, 3};
        GoldenArray dec;
        CHECK_MSG(golden_array(&golden, array_name(&gi, "decoded_rgb"), "i32", 3, want_dec, &dec) == 0, "%s", di_error_message());
        if (img.rgb && dec.data) CHECK_MSG(diff_u8(img.rgb, &dec) == 0, "image %zu: %lld decoded bytes differ", k, (long long)diff_u8(img.rgb, &dec));

        /* plan and placement */
        DiImagePlan p;
        CHECK_MSG(di_image_plan(&vcfg, gi.width, gi.height, &p) == 0, "%s", di_error_message());
        CHECK_EQ_INT(p.best_w, plan_field(&gi, "best_w"));
        CHECK_EQ_INT(p.best_h, plan_field(&gi, "best_h"));
        CHECK_EQ_INT(p.n_vit_h, plan_field(&gi, "n_vit_h"));
        CHECK_EQ_INT(p.n_vit_w, plan_field(&gi, "n_vit_w"));
        CHECK_EQ_INT(p.n_llm_h, plan_field(&gi, "n_llm_h"));
        CHECK_EQ_INT(p.n_llm_w, plan_field(&gi, "n_llm_w"));
        CHECK_EQ_INT(p.n_tokens, plan_field(&gi, "n_tokens"));
        CHECK_EQ_INT(p.shrunk, json_is_true(json_object_get(json_object_get(gi.meta, "plan"), "shrunk")));
        CHECK_STR(p.stretch ? "stretch" : "pad", json_string_value(json_object_get(json_object_get(gi.meta, "plan"), "mode")));
        json_t *xywh = json_object_get(gi.meta, "placement_xywh");
        CHECK_EQ_INT(p.fit_x, json_integer_value(json_array_get(xywh, 0)));
        CHECK_EQ_INT(p.fit_y, json_integer_value(json_array_get(xywh, 1)));
        CHECK_EQ_INT(p.fit_w, json_integer_value(json_array_get(xywh, 2)));
        CHECK_EQ_INT(p.fit_h, json_integer_value(json_array_get(xywh, 3)));

        /* resize + pad from the golden decoded pixels (README §3: the rest of the pipeline is
         * checked from decoded_rgb, whatever the decoder gave) */
        DiImage ref = {gi.width, gi.height, malloc((size_t)(gi.width * gi.height * 3)), fmt};
        for (int64_t i = 0; dec.data && i < dec.numel; i++) ref.rgb[i] = (uint8_t)((const int32_t *)dec.data)[i];
        int64_t want_res[3] = {p.best_h, p.best_w, 3}, want_pix[3] = {3, p.best_h, p.best_w},
                want_pat[2] = {p.n_vit_h * p.n_vit_w, 3 * vcfg.patch_size * vcfg.patch_size};
        GoldenArray res, pix, pat;
        CHECK_MSG(golden_array(&golden, array_name(&gi, "resized_rgb"), "i32", 3, want_res, &res) == 0, "%s", di_error_message());
        CHECK_MSG(golden_array(&golden, array_name(&gi, "pixels"), "f32", 3, want_pix, &pix) == 0, "%s", di_error_message());
        CHECK_MSG(golden_array(&golden, array_name(&gi, "patches"), "f32", 2, want_pat, &pat) == 0, "%s", di_error_message());
        uint8_t *canvas = malloc((size_t)(p.best_w * p.best_h * 3));
        float *pixels = malloc((size_t)(p.best_w * p.best_h * 3) * sizeof(float));
        float *patches = malloc((size_t)(want_pat[0] * want_pat[1]) * sizeof(float));
        CHECK_MSG(di_image_fit(&ref, &p, canvas) == 0, "%s", di_error_message());
        if (res.data) CHECK_MSG(diff_u8(canvas, &res) == 0, "image %zu: %lld resized bytes differ", k, (long long)diff_u8(canvas, &res));
        CHECK(di_image_normalize(canvas, p.best_w, p.best_h, pixels) == 0);
        if (pix.data) CHECK_MSG(diff_f32(pixels, &pix) == 0, "image %zu: %lld pixel values differ", k, (long long)diff_f32(pixels, &pix));
        CHECK(di_image_patchify(pixels, &p, vcfg.patch_size, patches) == 0);
        if (pat.data) CHECK_MSG(diff_f32(patches, &pat) == 0, "image %zu: %lld patch values differ", k, (long long)diff_f32(patches, &pat));

        /* the one-call pipeline from the encoded bytes gives the same patches */
        DiImagePatches ip;
        CHECK_MSG(di_image_load(&vcfg, NULL, (const uint8_t *)gi.bytes, gi.len, &ip) == 0, "%s", di_error_message());
        CHECK_EQ_INT(ip.n_patches, want_pat[0]);
        CHECK_EQ_INT(ip.patch_dim, want_pat[1]);
        if (ip.patches && pat.data) CHECK_MSG(diff_f32(ip.patches, &pat) == 0, "image %zu: di_image_load patches differ", k);
        di_image_patches_free(&ip);
        free(canvas);
        free(pixels);
        free(patches);
        di_image_free(&ref);
        di_image_free(&img);
        free(gi.bytes);
    }
}

/* ---- plan -------------------------------------------------------------------------------- */

/* vision-v41.md §4.2 release table (checked there against the official image_processor.py) */
TEST(release_plans_match_the_spec_table) {
    DiImageConfig rel = {14, 3, 1024, 295936, -1};
    static const struct {
        int64_t w, h, bw, bh, vw, vh, lw, lh, tokens;
        bool shrunk;
    } t[] = {
        {100, 60, 714, 434, 51, 31, 17, 11, 200, false},    {30, 500, 140, 2226, 10, 159, 4, 53, 267, false},
        {1000, 1000, 1008, 1008, 72, 72, 24, 24, 602, false}, {544, 544, 546, 546, 39, 39, 13, 13, 184, false},
        {1, 1, 546, 546, 39, 39, 13, 13, 184, false},        {546, 546, 546, 546, 39, 39, 13, 13, 184, false},
        {1024, 768, 1036, 770, 74, 55, 25, 19, 496, false},  {1920, 1080, 1708, 966, 122, 69, 41, 23, 968, true},
        {1080, 1920, 966, 1708, 69, 122, 23, 41, 986, true}, {4032, 3024, 1512, 1134, 108, 81, 36, 27, 1001, true},
        {3000, 2000, 1568, 1050, 112, 75, 38, 25, 977, true}, {10, 5000, 28, 12166, 2, 869, 1, 290, 582, false},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        DiImagePlan p;
        CHECK_MSG(di_image_plan(&rel, t[i].w, t[i].h, &p) == 0, "%lldx%lld: %s", (long long)t[i].w, (long long)t[i].h, di_error_message());
        CHECK_MSG(p.best_w == t[i].bw && p.best_h == t[i].bh && p.n_vit_w == t[i].vw && p.n_vit_h == t[i].vh && p.n_llm_w == t[i].lw &&
                      p.n_llm_h == t[i].lh && p.n_tokens == t[i].tokens && p.shrunk == t[i].shrunk,
                  "%lldx%lld -> %lldx%lld vit %lldx%lld llm %lldx%lld tokens %lld shrunk %d", (long long)t[i].w, (long long)t[i].h,
                  (long long)p.best_w, (long long)p.best_h, (long long)p.n_vit_w, (long long)p.n_vit_h, (long long)p.n_llm_w,
                  (long long)p.n_llm_h, (long long)p.n_tokens, p.shrunk);
        CHECK(p.n_tokens <= rel.max_tokens);
    }
}

/* placements worked by hand from ImageOps.pad: round() is half to even */
TEST(placement_rounds_half_to_even) {
    DiImageConfig rel = {14, 3, 1024, 295936, -1};
    DiImagePlan p;
    /* 100x60 -> 714x434: 714/434 = 1.645 < 1.667, so fit = (714, round(60/100 * 714) = round(428.4) = 428), y = round(3) = 3 */
    CHECK(di_image_plan(&rel, 100, 60, &p) == 0);
    CHECK_EQ_INT(p.fit_w, 714);
    CHECK_EQ_INT(p.fit_h, 428);
    CHECK_EQ_INT(p.fit_x, 0);
    CHECK_EQ_INT(p.fit_y, 3);
    /* 1000x1000 -> 1008x1008: same aspect, no pad */
    CHECK(di_image_plan(&rel, 1000, 1000, &p) == 0);
    CHECK(p.fit_w == 1008 && p.fit_h == 1008 && p.fit_x == 0 && p.fit_y == 0);
    /* 1024x768 -> 1036x770: src 1.3333 < 1.3455, fit w = round(1024/768 * 770) = round(1026.67) = 1027, x = round(4.5) = 4 */
    CHECK(di_image_plan(&rel, 1024, 768, &p) == 0);
    CHECK_EQ_INT(p.fit_w, 1027);
    CHECK_EQ_INT(p.fit_h, 770);
    CHECK_EQ_INT(p.fit_x, 4);
}

TEST(plan_rejects_bad_sizes_and_configs) {
    DiImageConfig rel = {14, 3, 1024, 295936, -1};
    DiImagePlan p;
    CHECK(di_image_plan(&rel, 0, 10, &p) == -1);
    CHECK(strstr(di_error_message(), "no pixels"));
    CHECK(di_image_plan(&rel, 10, -1, &p) == -1);
    CHECK(di_image_plan(&rel, 1LL << 32, 1, &p) == -1);
    /* 1x200000: the one-column collapse to 42x21462 leaves a fit width of round(0.107) = 0 */
    CHECK(di_image_plan(&rel, 1, 200000, &p) == -1);
    CHECK_MSG(strstr(di_error_message(), "too elongated"), "%s", di_error_message());
    CHECK(di_image_plan(&rel, 200000, 1, &p) == -1);
    DiImageConfig bad = rel;
    bad.patch_size = 0;
    CHECK(di_image_plan(&bad, 10, 10, &p) == -1);
    CHECK(strstr(di_error_message(), "patch_size"));
    bad = rel;
    bad.max_tokens = 2;
    CHECK(di_image_config_check(&bad) == -1);
    bad = rel;
    bad.max_wh_ratio = 0;
    CHECK(di_image_config_check(&bad) == -1);
    CHECK(di_image_plan(NULL, 10, 10, &p) == -1);
    DiVisionConfig none = {0};
    CHECK(di_image_config_from_vision(&none, &bad) == -1);
    CHECK(strstr(di_error_message(), "no vision tower"));
}

/* every plan of many sizes stays within the token cap and is a whole number of patches */
TEST(plans_respect_the_cap) {
    DiImageConfig cfgs[2] = {{14, 3, 1024, 295936, -1}, vcfg};
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < 3000; i++) {
            int64_t w = 1 + test_rand32() % (i % 3 ? 5000 : 60), h = 1 + test_rand32() % (i % 2 ? 5000 : 60);
            DiImagePlan p;
            if (di_image_plan(&cfgs[c], w, h, &p) < 0) {
                CHECK_MSG(strstr(di_error_message(), "too elongated"), "%lldx%lld: %s", (long long)w, (long long)h, di_error_message());
                continue;
            }
            CHECK(p.n_tokens <= cfgs[c].max_tokens && p.best_w % cfgs[c].patch_size == 0 && p.best_h % cfgs[c].patch_size == 0);
            CHECK(p.fit_w >= 1 && p.fit_h >= 1 && p.fit_x + p.fit_w <= p.best_w && p.fit_y + p.fit_h <= p.best_h);
            CHECK(p.fit_w == p.best_w || p.fit_h == p.best_h); /* only one axis is padded */
        }
}

TEST(stretch_mode_with_a_width_ratio) {
    DiImageConfig c = {14, 3, 1024, 295936, 2.0};
    DiImagePlan p;
    CHECK(di_image_plan(&c, 1000, 100, &p) == 0); /* 1000 >= 2 * 100: stretch, the plan sees 200x100 */
    CHECK(p.stretch);
    CHECK(p.fit_x == 0 && p.fit_y == 0 && p.fit_w == p.best_w && p.fit_h == p.best_h);
    /* 200x100 = 20000 < min: s = sqrt(14.7968) = 3.8467; 769x384 -> 770x392 */
    CHECK_EQ_INT(p.best_w, 770);
    CHECK_EQ_INT(p.best_h, 392);
    CHECK(di_image_plan(&c, 150, 100, &p) == 0);
    CHECK(!p.stretch);
}

/* ---- resampling and normalisation ------------------------------------------------------- */

TEST(bicubic_hand_cases) {
    /* 2 -> 1 pixels: scale 2, support 4, both taps K(0.25) -> 1/2 each = 2^21; (2^21 + 2^21 (a + b)) >> 22 */
    uint8_t src[6] = {10, 0, 255, 20, 1, 255}, dst[3];
    CHECK(di_image_resize_bicubic(src, 2, 1, dst, 1, 1) == 0);
    CHECK_EQ_INT(dst[0], 15); /* (10 + 20 + 1) / 2 = 15.5 -> 15 */
    CHECK_EQ_INT(dst[1], 1);  /* (0 + 1 + 1) / 2 = 1 */
    CHECK_EQ_INT(dst[2], 255);
    /* same size: a copy */
    uint8_t id[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, out[12];
    CHECK(di_image_resize_bicubic(id, 2, 2, out, 2, 2) == 0);
    CHECK(memcmp(id, out, 12) == 0);
    /* a constant image stays constant under any up- or down-scale (weights sum to 1) */
    uint8_t c[7 * 5 * 3], big[23 * 3 * 3];
    memset(c, 200, sizeof c);
    CHECK(di_image_resize_bicubic(c, 7, 5, big, 23, 3) == 0);
    int all = 1;
    for (size_t i = 0; i < sizeof big; i++) all &= big[i] == 200;
    CHECK(all);
    /* overshoot of the negative lobes is clipped: a step 0 | 255 upscaled has values at 0 and 255 only at the ends */
    uint8_t step[4 * 3] = {0, 0, 0, 0, 0, 0, 255, 255, 255, 255, 255, 255}, up[16 * 3];
    CHECK(di_image_resize_bicubic(step, 4, 1, up, 16, 1) == 0);
    CHECK(up[0] == 0 && up[15 * 3] == 255);
    CHECK(di_image_resize_bicubic(step, 0, 1, up, 16, 1) == -1);
    CHECK(di_image_resize_bicubic(NULL, 4, 1, up, 16, 1) == -1);
}

TEST(normalisation_values) {
    /* vision-v41.md §4.5 */
    CHECK(di_image_norm_value(0) == -1.0f);
    CHECK(di_image_norm_value(1) == -0.9921875f);
    CHECK(di_image_norm_value(127) == -0.003936767578125f);
    CHECK(di_image_norm_value(128) == 0.003936767578125f);
    CHECK(di_image_norm_value(254) == 0.9921875f);
    CHECK(di_image_norm_value(255) == 1.0f);
    for (int v = 1; v < 256; v++) CHECK(di_image_norm_value((uint8_t)v) >= di_image_norm_value((uint8_t)(v - 1)));
}

/* ---- formats through Debian's encoders -------------------------------------------------- */

static void test_pattern(uint8_t *rgb, int w, int h) {
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = rgb + (y * w + x) * 3;
            p[0] = (uint8_t)(x * 7 + y);
            p[1] = (uint8_t)(y * 11);
            p[2] = (uint8_t)((x ^ y) * 3);
        }
}

TEST(webp_lossless_round_trip) {
    enum { W = 37, H = 23 };
    uint8_t rgb[W * H * 3];
    test_pattern(rgb, W, H);
    uint8_t *enc = NULL;
    size_t n = WebPEncodeLosslessRGB(rgb, W, H, W * 3, &enc);
    CHECK(n > 0);
    DiImage img;
    CHECK_MSG(di_image_decode(enc, n, NULL, &img) == 0, "%s", di_error_message());
    CHECK(img.format == DI_IMAGE_FMT_WEBP && img.width == W && img.height == H);
    if (img.rgb) CHECK(memcmp(img.rgb, rgb, sizeof rgb) == 0);
    di_image_free(&img);
    CHECK(di_image_decode(enc, n / 2, NULL, &img) == -1); /* truncated */
    CHECK_MSG(strstr(di_error_message(), "WebP"), "%s", di_error_message());
    DiImageLimits lim = {W * H - 1, 0};
    CHECK(di_image_decode(enc, n, &lim, &img) == -1);
    CHECK(strstr(di_error_message(), "exceeds the limit"));
    WebPFree(enc);
}

typedef struct {
    uint8_t buf[8192];
    size_t n;
} MemOut;

static int gif_write(GifFileType *g, const GifByteType *b, int len) {
    MemOut *m = g->UserData;
    if (m->n + (size_t)len > sizeof m->buf) return 0;
    memcpy(m->buf + m->n, b, (size_t)len);
    m->n += (size_t)len;
    return len;
}

/* a 6x5 screen; the first frame 4x3 at (1, 1), interlaced, with transparent index 2; a second frame that must not show */
static size_t make_gif(MemOut *m, bool interlace) {
    memset(m, 0, sizeof *m);
    int err;
    GifFileType *g = EGifOpen(m, gif_write, &err);
    GifColorType colors[4] = {{10, 20, 30}, {200, 100, 50}, {1, 2, 3}, {255, 255, 0}};
    ColorMapObject *cm = GifMakeMapObject(4, colors);
    EGifSetGifVersion(g, true);
    EGifPutScreenDesc(g, 6, 5, 2, 0, cm);
    GraphicsControlBlock gcb = {DISPOSAL_UNSPECIFIED, false, 0, 2};
    GifByteType ext[4];
    EGifGCBToExtension(&gcb, ext);
    EGifPutExtension(g, GRAPHICS_EXT_FUNC_CODE, 4, ext);
    EGifPutImageDesc(g, 1, 1, 4, 3, interlace, NULL);
    GifPixelType rows[3][4] = {{0, 1, 3, 1}, {3, 3, 0, 0}, {1, 0, 1, 3}};
    static const int order_il[3] = {0, 2, 1}; /* 3 rows interlaced: pass 1 row 0, pass 3 row 2, pass 4 row 1 */
    for (int i = 0; i < 3; i++) EGifPutLine(g, rows[interlace ? order_il[i] : i], 4);
    EGifPutImageDesc(g, 0, 0, 6, 5, false, NULL);
    GifPixelType full[6];
    memset(full, 3, sizeof full);
    for (int i = 0; i < 5; i++) EGifPutLine(g, full, 6);
    EGifCloseFile(g, &err);
    GifFreeMapObject(cm);
    return m->n;
}

TEST(gif_first_frame) {
    static const uint8_t pal[4][3] = {{10, 20, 30}, {200, 100, 50}, {1, 2, 3}, {255, 255, 0}};
    static const int idx[3][4] = {{0, 1, 3, 1}, {3, 3, 0, 0}, {1, 0, 1, 3}};
    for (int il = 0; il < 2; il++) {
        static MemOut m;
        size_t n = make_gif(&m, il);
        CHECK(n > 0);
        DiImage img;
        CHECK_MSG(di_image_decode(m.buf, n, NULL, &img) == 0, "%s", di_error_message());
        CHECK(img.format == DI_IMAGE_FMT_GIF && img.width == 6 && img.height == 5);
        int bad = 0;
        for (int y = 0; img.rgb && y < 5; y++)
            for (int x = 0; x < 6; x++) {
                bool in = x >= 1 && x < 5 && y >= 1 && y < 4;
                const uint8_t *want = pal[in ? idx[y - 1][x - 1] : 2]; /* outside the frame: the transparent index */
                bad += memcmp(img.rgb + (y * 6 + x) * 3, want, 3) != 0;
            }
        CHECK_MSG(bad == 0, "interlace %d: %d pixels differ", il, bad);
        di_image_free(&img);
        /* 13 header + 12 colour table + 8 graphics control + 10 descriptor + 2: inside the first frame's LZW data */
        CHECK(di_image_decode(m.buf, 46, NULL, &img) == -1);
        CHECK_MSG(strstr(di_error_message(), "first frame"), "%s", di_error_message());
        CHECK(di_image_decode(m.buf, 20, NULL, &img) == -1);
        CHECK_MSG(strstr(di_error_message(), "GIF"), "%s", di_error_message());
    }
}

/* ---- bad input --------------------------------------------------------------------------- */

static uint32_t crc32_of(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
    }
    return c ^ 0xFFFFFFFFu;
}

static void be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* signature + IHDR of the given size, RGB 8-bit, and nothing after it */
static size_t png_header_only(uint8_t *b, uint32_t w, uint32_t h) {
    memcpy(b, "\x89PNG\r\n\x1a\n", 8);
    be32(b + 8, 13);
    memcpy(b + 12, "IHDR", 4);
    be32(b + 16, w);
    be32(b + 20, h);
    b[24] = 8, b[25] = 2, b[26] = 0, b[27] = 0, b[28] = 0;
    be32(b + 29, crc32_of(b + 12, 17));
    return 33;
}

static void expect_error(const uint8_t *b, size_t n, const DiImageLimits *lim, const char *needle) {
    DiImage img;
    int rc = di_image_decode(b, n, lim, &img);
    CHECK_MSG(rc == -1, "decoded %zu bytes that should fail with '%s'", n, needle);
    CHECK_MSG(strstr(di_error_message(), needle), "'%s' not in '%s'", needle, di_error_message());
    CHECK(img.rgb == NULL);
}

TEST(bad_input_is_a_clear_error) {
    uint8_t b[64];
    expect_error(NULL, 0, NULL, "empty");
    expect_error((const uint8_t *)"x", 0, NULL, "empty");
    expect_error((const uint8_t *)"BM\x36\0\0\0", 6, NULL, "unsupported format BMP");
    expect_error((const uint8_t *)"II*\0\x08\0\0\0", 8, NULL, "unsupported format TIFF");
    expect_error((const uint8_t *)"hello world", 11, NULL, "unrecognised");
    /* decompression bomb: a valid 60000x60000 header with no pixel data is refused by the limit, not
     * by the missing data, so the check runs before decoding */
    size_t n = png_header_only(b, 60000, 60000);
    expect_error(b, n, NULL, "exceeds the limit");
    n = png_header_only(b, 16, 16);
    expect_error(b, n, NULL, "truncated PNG");
    n = png_header_only(b, 0, 16);
    expect_error(b, n, NULL, "width is zero");
    n = png_header_only(b, 16, 16);
    b[30] ^= 1; /* IHDR CRC now wrong */
    expect_error(b, n, NULL, "corrupt PNG");
    DiImageLimits small = {0, 10};
    expect_error(b, n, &small, "exceed the limit of 10 bytes");
}

TEST(bad_golden_files) {
    size_t n = json_array_size(json_object_get(golden.root, "images"));
    for (size_t k = 0; k < n; k++) {
        GoldenImage gi = {0};
        if (golden_image(k, &gi) < 0) continue;
        const uint8_t *b = (const uint8_t *)gi.bytes;
        const char *fmt = json_string_value(json_object_get(gi.meta, "format"));
        /* cut in half, cut after the first 100 bytes: truncated */
        char needle[64];
        snprintf(needle, sizeof needle, "%s", fmt);
        expect_error(b, gi.len / 2, NULL, needle);
        expect_error(b, gi.len < 100 ? gi.len / 3 : 100, NULL, needle);
        /* a limit one pixel short of the image */
        DiImageLimits lim = {(uint64_t)(gi.width * gi.height) - 1, 0};
        expect_error(b, gi.len, &lim, "exceeds the limit");
        lim.max_pixels = (uint64_t)(gi.width * gi.height);
        DiImage img;
        CHECK_MSG(di_image_decode(b, gi.len, &lim, &img) == 0, "%s", di_error_message());
        di_image_free(&img);
        /* a corrupted middle: an error or a decoded image, never a crash (ASan build checks) */
        char *bad = malloc(gi.len);
        memcpy(bad, gi.bytes, gi.len);
        for (size_t i = gi.len / 3; i < gi.len / 3 + 64 && i < gi.len; i++) bad[i] = (char)(bad[i] ^ 0x5A);
        if (di_image_decode((const uint8_t *)bad, gi.len, NULL, &img) == 0) di_image_free(&img);
        else CHECK(di_error_message()[0] != 0);
        free(bad);
        free(gi.bytes);
    }
}

/* the JPEG bomb: SOF0 patched to 65000x65000 is refused from the header */
TEST(jpeg_header_limit) {
    size_t n = json_array_size(json_object_get(golden.root, "images"));
    for (size_t k = 0; k < n; k++) {
        GoldenImage gi = {0};
        if (golden_image(k, &gi) < 0) continue;
        if (strcmp(json_string_value(json_object_get(gi.meta, "format")), "JPEG") == 0) {
            /* truncated in the middle of the entropy-coded data */
            expect_error((const uint8_t *)gi.bytes, gi.len - 200, NULL, "truncated JPEG");
            uint8_t *b = (uint8_t *)gi.bytes;
            int patched = 0;
            for (size_t i = 2; i + 9 < gi.len; i++)
                if (b[i] == 0xFF && (b[i + 1] == 0xC0 || b[i + 1] == 0xC2)) {
                    b[i + 5] = 0xFD, b[i + 6] = 0xE8, b[i + 7] = 0xFD, b[i + 8] = 0xE8; /* height, width = 65000 */
                    patched = 1;
                    break;
                }
            CHECK(patched);
            int64_t w, h;
            DiImageFormat f;
            CHECK(di_image_probe(b, gi.len, &f, &w, &h) == 0 && w == 65000 && h == 65000);
            expect_error(b, gi.len, NULL, "exceeds the limit");
        }
        free(gi.bytes);
    }
}

/* an 8x8 JPEG through libjpeg's encoder: 3 (RGB) or 4 (CMYK) components, an optional scan script */
static unsigned char *encode_jpeg(int comps, const jpeg_scan_info *scans, int n_scans, unsigned long *len) {
    enum { W = 8, H = 8 };
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    unsigned char *buf = NULL;
    *len = 0;
    jpeg_mem_dest(&c, &buf, len);
    c.image_width = W, c.image_height = H, c.input_components = comps, c.in_color_space = comps == 4 ? JCS_CMYK : JCS_RGB;
    jpeg_set_defaults(&c);
    if (scans) {
        c.scan_info = scans;
        c.num_scans = n_scans;
    }
    jpeg_start_compress(&c, TRUE);
    uint8_t row[W * 4];
    for (int y = 0; y < H; y++) {
        for (int x = 0; x < W * comps; x++) row[x] = (uint8_t)(x * 29 + y * 7);
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    return buf;
}

TEST(cmyk_jpeg_is_rejected) {
    unsigned long len;
    unsigned char *buf = encode_jpeg(4, NULL, 0, &len);
    expect_error(buf, len, NULL, "CMYK");
    free(buf);
}

/* the progressive-scan CPU bomb: a valid script of 2090 scans (every AC coefficient of every
 * component alone, refined bit by bit) is refused once it passes the limit */
TEST(jpeg_scan_bomb_is_refused) {
    enum { AL = 10 }; /* libjpeg allows successive approximation up to bit 10 */
    static jpeg_scan_info scans[3000];
    int n = 0;
    scans[n++] = (jpeg_scan_info){3, {0, 1, 2, 0}, 0, 0, 0, AL};
    for (int al = AL; al > 0; al--) scans[n++] = (jpeg_scan_info){3, {0, 1, 2, 0}, 0, 0, al, al - 1};
    for (int comp = 0; comp < 3; comp++)
        for (int k = 1; k < 64; k++) {
            scans[n++] = (jpeg_scan_info){1, {comp, 0, 0, 0}, k, k, 0, AL};
            for (int al = AL; al > 0; al--) scans[n++] = (jpeg_scan_info){1, {comp, 0, 0, 0}, k, k, al, al - 1};
        }
    CHECK(n > 1000);
    unsigned long len;
    unsigned char *buf = encode_jpeg(3, scans, n, &len);
    expect_error(buf, len, NULL, "progressive scans");
    /* the same image with a one-scan script decodes */
    free(buf);
    jpeg_scan_info few[1] = {{3, {0, 1, 2, 0}, 0, 63, 0, 0}}; /* one sequential scan as a script */
    buf = encode_jpeg(3, few, 1, &len);
    DiImage img;
    CHECK_MSG(di_image_decode(buf, len, NULL, &img) == 0, "%s", di_error_message());
    di_image_free(&img);
    free(buf);
}

int main(void) {
    snprintf(golden_dir, sizeof golden_dir, "%s/golden-v41/tiny-v", test_shared_dir());
    if (golden_open(golden_dir, &golden) != 0) {
        fprintf(stderr, "cannot open %s: %s\n", golden_dir, di_error_message());
        return 1;
    }
    char *ck = di_path_join(golden_dir, "checkpoint");
    DiModelConfig mc;
    if (di_config_load(ck, &mc) != 0 || di_image_config_from_vision(&mc.vision, &vcfg) != 0) {
        fprintf(stderr, "cannot read the vision config of %s: %s\n", ck, di_error_message());
        return 1;
    }
    free(ck);
    di_config_free(&mc);
    RUN_TEST(golden_images_decode_plan_resize_pixels_patches);
    RUN_TEST(release_plans_match_the_spec_table);
    RUN_TEST(placement_rounds_half_to_even);
    RUN_TEST(plan_rejects_bad_sizes_and_configs);
    RUN_TEST(plans_respect_the_cap);
    RUN_TEST(stretch_mode_with_a_width_ratio);
    RUN_TEST(bicubic_hand_cases);
    RUN_TEST(normalisation_values);
    RUN_TEST(webp_lossless_round_trip);
    RUN_TEST(gif_first_frame);
    RUN_TEST(bad_input_is_a_clear_error);
    RUN_TEST(bad_golden_files);
    RUN_TEST(jpeg_header_limit);
    RUN_TEST(cmyk_jpeg_is_rejected);
    RUN_TEST(jpeg_scan_bomb_is_refused);
    golden_close(&golden);
    return TEST_SUMMARY();
}
