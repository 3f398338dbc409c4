/* image_decode_web.c — WebP (Debian libwebp + libwebpdemux) and GIF (Debian giflib) to 8-bit RGB,
 * the first frame only, as Pillow's `Image.open(b).convert("RGB")` gives it (vision-v41.md §4.1).
 *
 * WebP: a still image decodes straight to RGB (alpha dropped, never composited); an animation
 * through WebPAnimDecoder, whose first canvas is what Pillow shows (area outside the first frame
 * transparent black, i.e. RGB 0).  GIF: the logical screen is the image size (enlarged to hold a
 * first frame that reaches past it, as Pillow does); before the first
 * frame is drawn it is filled with the frame's transparent index when it has one, else index 0
 * (Pillow's load_prepare), and indices go through the frame's local colour table, else the
 * global one (an index past the table's end is black); a GIF with no colour table is gray
 * (Pillow's mode L).  Transparency is otherwise ignored, as convert("RGB") does. */
#include "vision/image_codec.h"

#include "base/error.h"

#include <gif_lib.h>
#include <stdlib.h>
#include <string.h>
#include <webp/decode.h>
#include <webp/demux.h>

/* ---- WebP ------------------------------------------------------------------------------ */

static const char *webp_status(VP8StatusCode s) {
    switch (s) {
    case VP8_STATUS_OK: return "ok";
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "corrupt bitstream";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
    case VP8_STATUS_SUSPENDED: return "suspended";
    case VP8_STATUS_USER_ABORT: return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "truncated data (the file ends early)";
    }
    return "unknown error";
}

int di_webp_decode(const uint8_t *b, size_t n, uint64_t max_pixels, int64_t *w, int64_t *h, DiImage *out) {
    WebPBitstreamFeatures f;
    VP8StatusCode st = WebPGetFeatures(b, n, &f);
    if (st != VP8_STATUS_OK) return di_errorf("image: corrupt WebP: %s", webp_status(st));
    *w = f.width; /* the canvas of an animation */
    *h = f.height;
    if (!out) return 0;
    if (di_image_check_pixels("WebP", *w, *h, max_pixels) < 0) return -1;
    out->rgb = di_image_alloc_rgb(*w, *h);
    if (!out->rgb) return -1;
    if (!f.has_animation) {
        size_t size = (size_t)*w * (size_t)*h * 3;
        if (!WebPDecodeRGBInto(b, n, out->rgb, size, (int)(*w * 3))) {
            /* WebPDecodeRGBInto says only "failed": ask the full decoder why */
            WebPDecoderConfig cfg;
            const char *why = "corrupt bitstream";
            if (WebPInitDecoderConfig(&cfg)) {
                cfg.output.colorspace = MODE_RGB;
                cfg.output.is_external_memory = 1;
                cfg.output.u.RGBA.rgba = out->rgb;
                cfg.output.u.RGBA.stride = (int)(*w * 3);
                cfg.output.u.RGBA.size = size;
                why = webp_status(WebPDecode(b, n, &cfg));
            }
            free(out->rgb);
            out->rgb = NULL;
            return di_errorf("image: corrupt WebP: %s", why);
        }
    } else {
        WebPAnimDecoderOptions opt;
        if (!WebPAnimDecoderOptionsInit(&opt)) {
            free(out->rgb);
            out->rgb = NULL;
            return di_errorf("image: WebP animation decoder version mismatch");
        }
        opt.color_mode = MODE_RGBA; /* straight alpha, as Pillow asks for */
        opt.use_threads = 0;
        WebPData data = {b, n};
        WebPAnimDecoder *dec = WebPAnimDecoderNew(&data, &opt);
        WebPAnimInfo info;
        uint8_t *frame = NULL;
        int ts = 0;
        if (!dec || !WebPAnimDecoderGetInfo(dec, &info) || info.canvas_width != (uint32_t)*w || info.canvas_height != (uint32_t)*h ||
            !WebPAnimDecoderGetNext(dec, &frame, &ts) || !frame) {
            if (dec) WebPAnimDecoderDelete(dec);
            free(out->rgb);
            out->rgb = NULL;
            return di_errorf("image: corrupt animated WebP (its first frame does not decode)");
        }
        for (int64_t i = 0; i < *w * *h; i++) memcpy(out->rgb + i * 3, frame + i * 4, 3);
        WebPAnimDecoderDelete(dec);
    }
    out->width = *w;
    out->height = *h;
    out->format = DI_IMAGE_FMT_WEBP;
    return 0;
}

/* ---- GIF ------------------------------------------------------------------------------- */

typedef struct {
    const uint8_t *data;
    size_t size, off;
} GifSrc;

static int gif_read(GifFileType *g, GifByteType *buf, int len) {
    GifSrc *s = g->UserData;
    size_t k = len < 0 ? 0 : (size_t)len;
    if (k > s->size - s->off) k = s->size - s->off;
    memcpy(buf, s->data + s->off, k);
    s->off += k;
    return (int)k;
}

static int gif_fail(GifFileType *g, const char *what) {
    int code = g ? g->Error : 0;
    const char *msg = code ? GifErrorString(code) : NULL;
    return di_errorf("image: corrupt GIF: %s%s%s", what, msg ? ": " : "", msg ? msg : "");
}

int di_gif_decode(const uint8_t *b, size_t n, uint64_t max_pixels, int64_t *w, int64_t *h, DiImage *out) {
    GifSrc src = {b, n, 0};
    int err = 0;
    GifFileType *g = DGifOpen(&src, gif_read, &err);
    if (!g) {
        const char *msg = GifErrorString(err);
        return di_errorf("image: corrupt GIF: %s", msg ? msg : "cannot open");
    }
    int rc = -1;
    GifPixelType *line = NULL;
    int transparent = -1;
    for (;;) { /* up to the first image descriptor: no pixel data is read before the size is known */
        GifRecordType rt;
        if (DGifGetRecordType(g, &rt) == GIF_ERROR) {
            gif_fail(g, "reading a record");
            goto done;
        }
        if (rt == TERMINATE_RECORD_TYPE) {
            di_errorf("image: corrupt GIF: no image in the file");
            goto done;
        }
        if (rt == EXTENSION_RECORD_TYPE) {
            int code;
            GifByteType *ext;
            if (DGifGetExtension(g, &code, &ext) == GIF_ERROR) {
                gif_fail(g, "reading an extension");
                goto done;
            }
            if (code == GRAPHICS_EXT_FUNC_CODE && ext && ext[0] >= 4) transparent = (ext[1] & 1) ? ext[4] : -1;
            while (ext) {
                if (DGifGetExtensionNext(g, &ext) == GIF_ERROR) {
                    gif_fail(g, "reading an extension");
                    goto done;
                }
            }
            continue;
        }
        if (rt != IMAGE_DESC_RECORD_TYPE) continue;
        if (DGifGetImageDesc(g) == GIF_ERROR) {
            gif_fail(g, "reading the image descriptor");
            goto done;
        }
        break;
    }
    const GifImageDesc *d = &g->Image;
    if (d->Width <= 0 || d->Height <= 0 || d->Left < 0 || d->Top < 0) {
        di_errorf("image: corrupt GIF: first frame of size %dx%d at (%d, %d)", d->Width, d->Height, d->Left, d->Top);
        goto done;
    }
    /* a first frame reaching past the logical screen enlarges the image (Pillow does) */
    *w = g->SWidth > d->Left + d->Width ? g->SWidth : (int64_t)d->Left + d->Width;
    *h = g->SHeight > d->Top + d->Height ? g->SHeight : (int64_t)d->Top + d->Height;
    if (!out) {
        rc = 0;
        goto done;
    }
    if (di_image_check_pixels("GIF", *w, *h, max_pixels) < 0) goto done;
    const ColorMapObject *cmap = d->ColorMap ? d->ColorMap : g->SColorMap;
    out->rgb = di_image_alloc_rgb(*w, *h);
    line = malloc((size_t)d->Width);
    if (!out->rgb || !line) {
        if (out->rgb) di_errorf("image: out of memory for a GIF row");
        goto done;
    }
    uint8_t lut[256][3];
    for (int i = 0; i < 256; i++) {
        if (!cmap) lut[i][0] = lut[i][1] = lut[i][2] = (uint8_t)i;
        else if (i < cmap->ColorCount) {
            lut[i][0] = cmap->Colors[i].Red;
            lut[i][1] = cmap->Colors[i].Green;
            lut[i][2] = cmap->Colors[i].Blue;
        } else lut[i][0] = lut[i][1] = lut[i][2] = 0;
    }
    const uint8_t *fill = lut[transparent >= 0 ? transparent : 0];
    for (int64_t i = 0; i < *w * *h; i++) memcpy(out->rgb + i * 3, fill, 3);
    /* interlaced rows come in four passes: every 8th from 0, every 8th from 4, every 4th from 2, every 2nd from 1 */
    static const int start[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
    int passes = d->Interlace ? 4 : 1;
    for (int p = 0; p < passes; p++) {
        for (int y = d->Interlace ? start[p] : 0; y < d->Height; y += d->Interlace ? step[p] : 1) {
            if (DGifGetLine(g, line, d->Width) == GIF_ERROR) {
                gif_fail(g, "reading the first frame (truncated or corrupt LZW data)");
                goto done;
            }
            int64_t cy = (int64_t)d->Top + y;
            for (int x = 0; x < d->Width; x++) memcpy(out->rgb + (cy * *w + d->Left + x) * 3, lut[line[x]], 3);
        }
    }
    out->width = *w;
    out->height = *h;
    out->format = DI_IMAGE_FMT_GIF;
    rc = 0;
done:
    if (rc < 0 && out) {
        free(out->rgb);
        out->rgb = NULL;
    }
    free(line);
    DGifCloseFile(g, &err);
    return rc;
}
