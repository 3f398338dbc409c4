/* image_decode.c — image bytes to 8-bit RGB (vision-v41.md §4.1): format sniffing, the byte and
 * pixel limits, and the PNG (Debian libpng) and JPEG (Debian libjpeg-turbo) decoders; WebP and GIF
 * are in image_decode_web.c.
 *
 * The target is Pillow's `Image.open(b).convert("RGB")`, which the official preprocessing runs:
 * - PNG: palette -> colours; 1/2/4-bit gray scaled by bit replication (Pillow's L;2 / L;4);
 *   16-bit samples keep their high byte (Pillow's RGB;16B, RGBA;16B, LA;16B raw modes), except
 *   16-bit gray without alpha, which Pillow opens as mode I and clips to 255 on convert("RGB");
 *   alpha and tRNS are dropped, gAMA/iCCP are not applied; only IHDR..IDAT are needed (a missing
 *   IEND is accepted, as Pillow does); APNG's extra chunks are skipped (the default image).
 * - JPEG: ISLOW IDCT, fancy upsampling (libjpeg's defaults, which Pillow keeps); gray -> R=G=B;
 *   a truncated file is an error (Pillow: "image file is truncated"), not gray fill; CMYK/YCCK is
 *   rejected (Pillow's CMYK -> RGB formula changed between versions).
 * Every decoder reads its header first, so the pixel limit is checked before any decoding. */
#include "vision/image_codec.h"

#include "base/error.h"

#include <setjmp.h>
#include <stdio.h> /* before jpeglib.h, which uses FILE */
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>
#include <png.h>

const char *di_image_format_name(DiImageFormat f) {
    switch (f) {
    case DI_IMAGE_FMT_PNG: return "PNG";
    case DI_IMAGE_FMT_JPEG: return "JPEG";
    case DI_IMAGE_FMT_WEBP: return "WebP";
    case DI_IMAGE_FMT_GIF: return "GIF";
    case DI_IMAGE_FMT_UNKNOWN: break;
    }
    return "unknown";
}

DiImageFormat di_image_sniff(const uint8_t *b, size_t n) {
    if (!b) return DI_IMAGE_FMT_UNKNOWN;
    if (n >= 8 && memcmp(b, "\x89PNG\r\n\x1a\n", 8) == 0) return DI_IMAGE_FMT_PNG;
    if (n >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return DI_IMAGE_FMT_JPEG;
    if (n >= 12 && memcmp(b, "RIFF", 4) == 0 && memcmp(b + 8, "WEBP", 4) == 0) return DI_IMAGE_FMT_WEBP;
    if (n >= 6 && (memcmp(b, "GIF87a", 6) == 0 || memcmp(b, "GIF89a", 6) == 0)) return DI_IMAGE_FMT_GIF;
    return DI_IMAGE_FMT_UNKNOWN;
}

/* What a client sent that is an image format, but not one decoded here, is named in the error. */
static const char *other_format(const uint8_t *b, size_t n) {
    if (n >= 2 && b[0] == 'B' && b[1] == 'M') return "BMP";
    if (n >= 4 && (memcmp(b, "II*\0", 4) == 0 || memcmp(b, "MM\0*", 4) == 0)) return "TIFF";
    if (n >= 12 && memcmp(b + 4, "ftyp", 4) == 0) return "HEIF/AVIF (ISO media)";
    if (n >= 4 && memcmp(b, "\0\0\1\0", 4) == 0) return "ICO";
    if (n >= 5 && (memcmp(b, "<?xml", 5) == 0 || memcmp(b, "<svg", 4) == 0)) return "SVG";
    if (n >= 4 && memcmp(b, "8BPS", 4) == 0) return "PSD";
    if (n >= 4 && memcmp(b, "\xFF\x0A", 2) == 0) return "JPEG XL";
    if (n >= 12 && memcmp(b, "\0\0\0\x0CJXL ", 8) == 0) return "JPEG XL";
    return NULL;
}

int di_image_check_pixels(const char *fmt, int64_t w, int64_t h, uint64_t max_pixels) {
    if (w <= 0 || h <= 0) return di_errorf("image: %s of size %lldx%lld has no pixels", fmt, (long long)w, (long long)h);
    if (max_pixels == 0) max_pixels = DI_IMAGE_DEFAULT_MAX_PIXELS;
    uint64_t px = (uint64_t)w * (uint64_t)h; /* w, h < 2^32 from every header */
    if (px > max_pixels)
        return di_errorf("image: %s of %lldx%lld = %llu pixels exceeds the limit of %llu pixels (checked from the header, nothing decoded)",
                         fmt, (long long)w, (long long)h, (unsigned long long)px, (unsigned long long)max_pixels);
    return 0;
}

uint8_t *di_image_alloc_rgb(int64_t w, int64_t h) {
    if (w <= 0 || h <= 0 || (uint64_t)w > SIZE_MAX / 3 / (uint64_t)h) {
        di_errorf("image: %lldx%lld does not fit in memory", (long long)w, (long long)h);
        return NULL;
    }
    uint8_t *p = malloc((size_t)w * (size_t)h * 3);
    if (!p) di_errorf("image: out of memory for %lldx%lld RGB pixels", (long long)w, (long long)h);
    return p;
}

/* ---- PNG (libpng) ---------------------------------------------------------------------- */

typedef struct {
    const uint8_t *data;
    size_t size, off;
    char msg[200], warn[200]; /* libpng's error, and its first warning (often the actual cause) */
    uint8_t *buf;        /* decoded rows */
    png_bytep *rows;
} PngCtx;

static void png_read_mem(png_structp png, png_bytep out, size_t len) {
    PngCtx *c = png_get_io_ptr(png);
    if (len > c->size - c->off) png_error(png, "truncated PNG data (the file ends early)");
    memcpy(out, c->data + c->off, len);
    c->off += len;
}

static void png_on_error(png_structp png, png_const_charp msg) {
    PngCtx *c = png_get_error_ptr(png);
    snprintf(c->msg, sizeof c->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg) {
    PngCtx *c = png_get_error_ptr(png);
    if (!c->warn[0]) snprintf(c->warn, sizeof c->warn, "%s", msg);
}

int di_png_decode(const uint8_t *b, size_t n, uint64_t max_pixels, int64_t *w, int64_t *h, DiImage *out) {
    PngCtx *c = calloc(1, sizeof *c); /* on the heap: longjmp leaves it intact */
    if (!c) return di_errorf("image: out of memory");
    c->data = b;
    c->size = n;
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, c, png_on_error, png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    volatile int rc = -1;
    if (!png || !info) {
        di_errorf("image: out of memory for the PNG decoder");
        goto done;
    }
    if (setjmp(png_jmpbuf(png))) {
        di_errorf("image: corrupt PNG: %s%s%s%s", c->msg[0] ? c->msg : "libpng error", c->warn[0] ? " (" : "", c->warn,
                  c->warn[0] ? ")" : "");
        goto done;
    }
    /* IHDR is the first chunk at a fixed place: its size is checked before libpng reads on
     * (png_read_info goes on through the ancillary chunks up to the first IDAT) */
    if (out && n >= 24 && memcmp(b + 12, "IHDR", 4) == 0) {
        int64_t hw = (int64_t)b[16] << 24 | b[17] << 16 | b[18] << 8 | b[19], hh = (int64_t)b[20] << 24 | b[21] << 16 | b[22] << 8 | b[23];
        if (hw > 0 && hh > 0 && di_image_check_pixels("PNG", hw, hh, max_pixels) < 0) goto done;
    }
    png_set_read_fn(png, c, png_read_mem);
    png_set_user_limits(png, 0x7fffffff, 0x7fffffff); /* the pixel limit below decides, not libpng's 10^6 per side */
    png_read_info(png, info);
    png_uint_32 pw, ph;
    int depth, ctype, interlace;
    png_get_IHDR(png, info, &pw, &ph, &depth, &ctype, &interlace, NULL, NULL);
    *w = pw;
    *h = ph;
    if (!out) {
        rc = 0;
        goto done;
    }
    if (di_image_check_pixels("PNG", pw, ph, max_pixels) < 0) goto done;
    bool gray16 = ctype == PNG_COLOR_TYPE_GRAY && depth == 16; /* Pillow mode I: clipped, not shifted */
    if (ctype == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (ctype == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (depth == 16 && !gray16) png_set_strip_16(png);
    if (interlace != PNG_INTERLACE_NONE) png_set_interlace_handling(png);
    png_read_update_info(png, info);
    int ch = png_get_channels(png, info);
    size_t rowbytes = png_get_rowbytes(png, info);
    size_t want = (size_t)pw * (size_t)ch * (gray16 ? 2 : 1);
    if (ch < 1 || ch > 4 || rowbytes < want) {
        di_errorf("image: PNG colour type %d depth %d gives %d channels / %zu row bytes, not what the decoder expects", ctype, depth, ch,
                  rowbytes);
        goto done;
    }
    if (rowbytes > SIZE_MAX / ph) {
        di_errorf("image: PNG %ux%u does not fit in memory", (unsigned)pw, (unsigned)ph);
        goto done;
    }
    c->buf = malloc(rowbytes * ph);
    c->rows = malloc(sizeof *c->rows * ph);
    out->rgb = di_image_alloc_rgb(pw, ph);
    if (!c->buf || !c->rows || !out->rgb) {
        if (out->rgb) di_errorf("image: out of memory for PNG rows"); /* else di_image_alloc_rgb said why */
        goto done;
    }
    for (png_uint_32 y = 0; y < ph; y++) c->rows[y] = c->buf + (size_t)y * rowbytes;
    png_read_image(png, c->rows);
    for (png_uint_32 y = 0; y < ph; y++) {
        const uint8_t *r = c->rows[y];
        uint8_t *o = out->rgb + (size_t)y * pw * 3;
        for (png_uint_32 x = 0; x < pw; x++, o += 3) {
            if (gray16) {
                unsigned v = (unsigned)r[x * 2] << 8 | r[x * 2 + 1];
                o[0] = o[1] = o[2] = (uint8_t)(v > 255 ? 255 : v);
            } else if (ch <= 2) {
                o[0] = o[1] = o[2] = r[x * ch];
            } else {
                o[0] = r[x * ch];
                o[1] = r[x * ch + 1];
                o[2] = r[x * ch + 2];
            }
        }
    }
    out->width = pw;
    out->height = ph;
    out->format = DI_IMAGE_FMT_PNG;
    rc = 0;
done:
    if (png) png_destroy_read_struct(&png, info ? &info : NULL, NULL);
    if (rc < 0 && out) {
        free(out->rgb);
        out->rgb = NULL;
    }
    free(c->buf);
    free(c->rows);
    free(c);
    return rc;
}

/* ---- JPEG (libjpeg-turbo) -------------------------------------------------------------- */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
    int truncated; /* libjpeg warned that the data ended (it would fill the rest with gray) */
} JpegErr;

static void jpeg_on_error(j_common_ptr cinfo) {
    JpegErr *e = (JpegErr *)cinfo->err;
    e->pub.format_message(cinfo, e->msg);
    longjmp(e->jb, 1);
}

static void jpeg_on_message(j_common_ptr cinfo, int level) {
    JpegErr *e = (JpegErr *)cinfo->err;
    if (level < 0 && e->pub.msg_code == JWRN_JPEG_EOF) e->truncated = 1;
}

/* A progressive JPEG of thousands of tiny scans costs time quadratic in the file (the known
 * libjpeg CPU bomb); djpeg's -maxscans guards the same way.  Real encoders write about 10. */
#define JPEG_MAX_SCANS 1000

static void jpeg_on_progress(j_common_ptr cinfo) {
    j_decompress_ptr d = (j_decompress_ptr)cinfo;
    if (d->input_scan_number > JPEG_MAX_SCANS) {
        JpegErr *e = (JpegErr *)cinfo->err;
        snprintf(e->msg, sizeof e->msg, "more than %d progressive scans", JPEG_MAX_SCANS);
        longjmp(e->jb, 1);
    }
}

typedef struct {
    struct jpeg_decompress_struct cinfo;
    JpegErr err;
    struct jpeg_progress_mgr progress;
    uint8_t *row;
} JpegCtx;

int di_jpeg_decode(const uint8_t *b, size_t n, uint64_t max_pixels, int64_t *w, int64_t *h, DiImage *out) {
    JpegCtx *c = calloc(1, sizeof *c); /* on the heap: longjmp leaves it intact */
    if (!c) return di_errorf("image: out of memory");
    volatile int rc = -1, created = 0;
    c->cinfo.err = jpeg_std_error(&c->err.pub);
    c->err.pub.error_exit = jpeg_on_error;
    c->err.pub.emit_message = jpeg_on_message;
    if (setjmp(c->err.jb)) {
        di_errorf("image: corrupt JPEG: %s", c->err.msg);
        goto done;
    }
    jpeg_create_decompress(&c->cinfo);
    created = 1;
    c->progress.progress_monitor = jpeg_on_progress;
    c->cinfo.progress = &c->progress;
    jpeg_mem_src(&c->cinfo, b, (unsigned long)n);
    if (jpeg_read_header(&c->cinfo, TRUE) != JPEG_HEADER_OK || c->err.truncated) {
        di_errorf("image: truncated JPEG data (the file ends inside the header)");
        goto done;
    }
    *w = c->cinfo.image_width;
    *h = c->cinfo.image_height;
    if (!out) {
        rc = 0;
        goto done;
    }
    if (di_image_check_pixels("JPEG", *w, *h, max_pixels) < 0) goto done;
    J_COLOR_SPACE cs = c->cinfo.jpeg_color_space;
    if (cs == JCS_GRAYSCALE) c->cinfo.out_color_space = JCS_GRAYSCALE;
    else if (cs == JCS_YCbCr || cs == JCS_RGB) c->cinfo.out_color_space = JCS_RGB;
    else {
        di_errorf("image: unsupported JPEG colour space (%s, %d components); send RGB or grayscale",
                  cs == JCS_CMYK ? "CMYK" : cs == JCS_YCCK ? "YCCK" : "unknown", c->cinfo.num_components);
        goto done;
    }
    c->cinfo.dct_method = JDCT_ISLOW;
    c->cinfo.do_fancy_upsampling = TRUE;
    jpeg_start_decompress(&c->cinfo);
    int ch = c->cinfo.output_components;
    if ((ch != 1 && ch != 3) || c->cinfo.output_width != (JDIMENSION)*w || c->cinfo.output_height != (JDIMENSION)*h) {
        di_errorf("image: JPEG decoder output %ux%u x %d is not the header's %lldx%lld", c->cinfo.output_width, c->cinfo.output_height, ch,
                  (long long)*w, (long long)*h);
        goto done;
    }
    c->row = malloc((size_t)*w * (size_t)ch);
    out->rgb = di_image_alloc_rgb(*w, *h);
    if (!c->row || !out->rgb) {
        if (!c->row) di_errorf("image: out of memory for a JPEG row");
        goto done;
    }
    while (c->cinfo.output_scanline < c->cinfo.output_height) {
        JDIMENSION y = c->cinfo.output_scanline;
        JSAMPROW rp = c->row;
        if (jpeg_read_scanlines(&c->cinfo, &rp, 1) != 1) {
            di_errorf("image: corrupt JPEG: no data for row %u", (unsigned)y);
            goto done;
        }
        uint8_t *o = out->rgb + (size_t)y * (size_t)*w * 3;
        if (ch == 3) memcpy(o, c->row, (size_t)*w * 3);
        else
            for (int64_t x = 0; x < *w; x++) o[x * 3] = o[x * 3 + 1] = o[x * 3 + 2] = c->row[x];
    }
    jpeg_finish_decompress(&c->cinfo);
    if (c->err.truncated) {
        di_errorf("image: truncated JPEG data (the file ends before the image does)");
        goto done;
    }
    out->width = *w;
    out->height = *h;
    out->format = DI_IMAGE_FMT_JPEG;
    rc = 0;
done:
    if (created) jpeg_destroy_decompress(&c->cinfo);
    if (rc < 0 && out) {
        free(out->rgb);
        out->rgb = NULL;
    }
    free(c->row);
    free(c);
    return rc;
}

/* ---- dispatch -------------------------------------------------------------------------- */

static int dispatch(const uint8_t *b, size_t len, uint64_t max_bytes, uint64_t max_pixels, DiImageFormat *fmt, int64_t *w, int64_t *h,
                    DiImage *out) {
    if (!b || len == 0) return di_errorf("image: empty data (0 bytes)");
    if (max_bytes == 0) max_bytes = DI_IMAGE_DEFAULT_MAX_BYTES;
    if (len > max_bytes) return di_errorf("image: %zu bytes exceed the limit of %llu bytes", len, (unsigned long long)max_bytes);
    DiImageFormat f = di_image_sniff(b, len);
    if (fmt) *fmt = f;
    switch (f) {
    case DI_IMAGE_FMT_PNG: return di_png_decode(b, len, max_pixels, w, h, out);
    case DI_IMAGE_FMT_JPEG: return di_jpeg_decode(b, len, max_pixels, w, h, out);
    case DI_IMAGE_FMT_WEBP: return di_webp_decode(b, len, max_pixels, w, h, out);
    case DI_IMAGE_FMT_GIF: return di_gif_decode(b, len, max_pixels, w, h, out);
    case DI_IMAGE_FMT_UNKNOWN: break;
    }
    const char *other = other_format(b, len);
    if (other) return di_errorf("image: unsupported format %s (PNG, JPEG, WebP and GIF are decoded)", other);
    return di_errorf("image: unrecognised data (%zu bytes, not PNG, JPEG, WebP or GIF)", len);
}

int di_image_probe(const uint8_t *bytes, size_t len, DiImageFormat *fmt, int64_t *width, int64_t *height) {
    if (!fmt || !width || !height) return di_errorf("image probe: NULL argument");
    *width = *height = 0;
    if (dispatch(bytes, len, UINT64_MAX, 0, fmt, width, height, NULL) < 0) return -1;
    if (*width <= 0 || *height <= 0)
        return di_errorf("image: %s of size %lldx%lld has no pixels", di_image_format_name(*fmt), (long long)*width, (long long)*height);
    return 0;
}

int di_image_decode(const uint8_t *bytes, size_t len, const DiImageLimits *lim, DiImage *out) {
    if (!out) return di_errorf("image decode: NULL output");
    memset(out, 0, sizeof *out);
    int64_t w = 0, h = 0;
    DiImageFormat f;
    return dispatch(bytes, len, lim ? lim->max_bytes : 0, lim ? lim->max_pixels : 0, &f, &w, &h, out);
}

void di_image_free(DiImage *img) {
    if (!img) return;
    free(img->rgb);
    memset(img, 0, sizeof *img);
}
