/* image_resample.c — Pillow's BICUBIC resampling of 8-bit RGB, bit for bit (vision-v41.md §4.4:
 * the 8-bit path of Pillow's libImaging/Resample.c, which the official preprocessing calls
 * through ImageOps.pad), and the pad onto the gray canvas (§4.3).
 *
 * Exactness is the point: a float resampler or OpenCV's cubic gives other pixels and so other
 * patches.  What has to match: the antialiasing support 2 * max(scale, 1), the window bounds
 * rounded by truncation of c -/+ support + 0.5, the kernel argument (i + lo - c + 0.5) times
 * 1/filterscale (a multiply by the reciprocal, as Pillow does, not a division), the kernel
 * polynomial in Pillow's Horner order, coefficients normalised in double and quantised to 22
 * fractional bits with rounding away from zero, the integer accumulation from 2^21, and the uint8
 * image between the horizontal pass (first) and the vertical one.  Each pass is skipped when its
 * size is unchanged. */
#include "vision/image.h"

#include "base/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PRECISION_BITS 22 /* 32 - 8 - 2 */
#define BICUBIC_SUPPORT 2.0

static double bicubic(double x) {
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

typedef struct {
    int64_t ksize;
    int64_t *lo, *n; /* per output index: first input index, number of taps */
    int32_t *k;      /* [out][ksize] fixed-point coefficients */
} Coeffs;

static void coeffs_free(Coeffs *c) {
    free(c->lo);
    free(c->n);
    free(c->k);
    memset(c, 0, sizeof *c);
}

/* Coefficients of one axis, input size n_in, output size n_out (both >= 1). */
static int coeffs_build(int64_t n_in, int64_t n_out, Coeffs *c) {
    memset(c, 0, sizeof *c);
    /* Pillow passes the box as floats (0, n_in) and divides their difference by the output size */
    double scale = (double)((float)n_in - 0.0f) / (double)n_out, filterscale = scale < 1.0 ? 1.0 : scale;
    double support = BICUBIC_SUPPORT * filterscale;
    c->ksize = (int64_t)ceil(support) * 2 + 1;
    if (c->ksize > (1LL << 30) / n_out) return di_errorf("image resize: %lld -> %lld needs too many filter taps", (long long)n_in, (long long)n_out);
    double *w = malloc((size_t)c->ksize * sizeof *w);
    c->lo = malloc((size_t)n_out * sizeof *c->lo);
    c->n = malloc((size_t)n_out * sizeof *c->n);
    c->k = calloc((size_t)(n_out * c->ksize), sizeof *c->k);
    if (!w || !c->lo || !c->n || !c->k) {
        free(w);
        coeffs_free(c);
        return di_errorf("image resize: out of memory for %lld x %lld coefficients", (long long)n_out, (long long)c->ksize);
    }
    double ss = 1.0 / filterscale;
    for (int64_t o = 0; o < n_out; o++) {
        double center = 0.0 + ((double)o + 0.5) * scale, sum = 0.0;
        int64_t lo = (int64_t)(center - support + 0.5), hi = (int64_t)(center + support + 0.5);
        if (lo < 0) lo = 0;
        if (hi > n_in) hi = n_in;
        int64_t taps = hi - lo;
        if (taps > c->ksize) taps = c->ksize; /* cannot happen: the window is 2 * support + 1 wide */
        if (taps < 0) taps = 0;
        for (int64_t i = 0; i < taps; i++) {
            w[i] = bicubic(((double)(i + lo) - center + 0.5) * ss);
            sum += w[i];
        }
        int32_t *k = c->k + o * c->ksize;
        for (int64_t i = 0; i < taps; i++) {
            double v = sum != 0.0 ? w[i] / sum : w[i];
            k[i] = (int32_t)(v < 0 ? -0.5 + v * (1 << PRECISION_BITS) : 0.5 + v * (1 << PRECISION_BITS));
        }
        c->lo[o] = lo;
        c->n[o] = taps;
    }
    free(w);
    return 0;
}

static inline uint8_t clip8(int64_t acc) {
    int64_t v = acc >> PRECISION_BITS; /* arithmetic shift, as Pillow's int */
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* rows [y0, y0 + nrows) of src (width sw) resampled horizontally into dst (width dw, nrows rows) */
static void pass_horizontal(const uint8_t *src, int64_t sw, int64_t y0, int64_t nrows, uint8_t *dst, int64_t dw, const Coeffs *c) {
    for (int64_t y = 0; y < nrows; y++) {
        const uint8_t *row = src + (y0 + y) * sw * 3;
        uint8_t *out = dst + y * dw * 3;
        for (int64_t x = 0; x < dw; x++) {
            const int32_t *k = c->k + x * c->ksize;
            const uint8_t *in = row + c->lo[x] * 3;
            int64_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
            for (int64_t i = 0; i < c->n[x]; i++) {
                s0 += (int64_t)in[i * 3 + 0] * k[i];
                s1 += (int64_t)in[i * 3 + 1] * k[i];
                s2 += (int64_t)in[i * 3 + 2] * k[i];
            }
            out[x * 3 + 0] = clip8(s0);
            out[x * 3 + 1] = clip8(s1);
            out[x * 3 + 2] = clip8(s2);
        }
    }
}

/* src rows are indexed from y0 (the first row the vertical window reads) */
static void pass_vertical(const uint8_t *src, int64_t y0, int64_t w, uint8_t *dst, int64_t dh, const Coeffs *c) {
    for (int64_t y = 0; y < dh; y++) {
        const int32_t *k = c->k + y * c->ksize;
        const uint8_t *in = src + (c->lo[y] - y0) * w * 3;
        uint8_t *out = dst + y * w * 3;
        for (int64_t x = 0; x < w * 3; x++) {
            int64_t s = 1 << (PRECISION_BITS - 1);
            for (int64_t i = 0; i < c->n[y]; i++) s += (int64_t)in[i * w * 3 + x] * k[i];
            out[x] = clip8(s);
        }
    }
}

static int check_size(const char *what, int64_t w, int64_t h) {
    if (w <= 0 || h <= 0 || w > (1LL << 31) || h > (1LL << 31) || w > (INT64_MAX / 3) / h)
        return di_errorf("image resize: %s size %lldx%lld is not a valid image size", what, (long long)w, (long long)h);
    return 0;
}

int di_image_resize_bicubic(const uint8_t *src, int64_t sw, int64_t sh, uint8_t *dst, int64_t dw, int64_t dh) {
    if (!src || !dst) return di_errorf("image resize: NULL buffer");
    if (check_size("source", sw, sh) < 0 || check_size("target", dw, dh) < 0) return -1;
    if (sw == dw && sh == dh) {
        memcpy(dst, src, (size_t)(sw * sh * 3));
        return 0;
    }
    Coeffs ch = {0}, cv = {0};
    uint8_t *tmp = NULL;
    int rc = -1;
    if (coeffs_build(sw, dw, &ch) < 0 || coeffs_build(sh, dh, &cv) < 0) goto done;
    if (sw == dw) { /* vertical only */
        pass_vertical(src, 0, sw, dst, dh, &cv);
        rc = 0;
        goto done;
    }
    if (sh == dh) { /* horizontal only */
        pass_horizontal(src, sw, 0, sh, dst, dw, &ch);
        rc = 0;
        goto done;
    }
    /* only the source rows some output row reads: [first lo, last lo + taps) */
    int64_t y0 = cv.lo[0], y1 = cv.lo[dh - 1] + cv.n[dh - 1];
    if (y1 <= y0) y1 = y0 + 1;
    if (check_size("intermediate", dw, y1 - y0) < 0) goto done;
    tmp = malloc((size_t)(dw * (y1 - y0) * 3));
    if (!tmp) {
        di_errorf("image resize: out of memory for a %lldx%lld intermediate", (long long)dw, (long long)(y1 - y0));
        goto done;
    }
    pass_horizontal(src, sw, y0, y1 - y0, tmp, dw, &ch);
    pass_vertical(tmp, y0, dw, dst, dh, &cv);
    rc = 0;
done:
    free(tmp);
    coeffs_free(&ch);
    coeffs_free(&cv);
    return rc;
}

int di_image_fit(const DiImage *img, const DiImagePlan *p, uint8_t *out) {
    if (!img || !p || !out || !img->rgb) return di_errorf("image fit: NULL argument");
    if (img->width != p->width || img->height != p->height)
        return di_errorf("image fit: the plan is for %lldx%lld, the image is %lldx%lld", (long long)p->width, (long long)p->height,
                         (long long)img->width, (long long)img->height);
    if (check_size("target", p->best_w, p->best_h) < 0) return -1;
    if (p->fit_w <= 0 || p->fit_h <= 0 || p->fit_x < 0 || p->fit_y < 0 || p->fit_x + p->fit_w > p->best_w ||
        p->fit_y + p->fit_h > p->best_h)
        return di_errorf("image fit: placement [%lld, %lld, %lld, %lld] is outside %lldx%lld", (long long)p->fit_x, (long long)p->fit_y,
                         (long long)p->fit_w, (long long)p->fit_h, (long long)p->best_w, (long long)p->best_h);
    if (p->fit_w == p->best_w && p->fit_h == p->best_h) return di_image_resize_bicubic(img->rgb, img->width, img->height, out, p->best_w, p->best_h);
    uint8_t *fit = malloc((size_t)(p->fit_w * p->fit_h * 3));
    if (!fit) return di_errorf("image fit: out of memory for %lldx%lld pixels", (long long)p->fit_w, (long long)p->fit_h);
    if (di_image_resize_bicubic(img->rgb, img->width, img->height, fit, p->fit_w, p->fit_h) < 0) {
        free(fit);
        return -1;
    }
    memset(out, 127, (size_t)(p->best_w * p->best_h * 3)); /* ImageOps.pad colour (127, 127, 127) */
    for (int64_t y = 0; y < p->fit_h; y++)
        memcpy(out + ((p->fit_y + y) * p->best_w + p->fit_x) * 3, fit + y * p->fit_w * 3, (size_t)(p->fit_w * 3));
    free(fit);
    return 0;
}
