/* image_plan.c — the vision config's preprocessing part and the resize plan (vision-v41.md §4.2,
 * §4.3; official image_processor.py plan_image_grid / safe_resize / solve_resize_ratio and
 * Pillow's ImageOps.contain / pad for the placement).
 *
 * The plan decides the span length before any pixel is touched, so it must equal the official
 * code's exactly: every step is IEEE double in Python's order ("int()" = truncation, floor and
 * ceil where Python calls them, round() = half to even).  The min-pixels scale is
 * `(min / (w*h)) ** 0.5`, i.e. pow(), not sqrt(): the official code writes it that way, and glibc's
 * pow is not always the correctly rounded sqrt (the spec's §4.2 writes sqrt). */
#include "vision/image.h"

#include "base/error.h"

#include <math.h>
#include <string.h>

/* Largest side an image may have: Pillow and every decoder here keep sizes in C ints. */
#define MAX_SIDE 2147483647LL

int di_image_config_check(const DiImageConfig *c) {
    if (!c) return di_errorf("image config: NULL");
    if (c->patch_size < 1 || c->patch_size > 4096) return di_errorf("image config: patch_size %lld is not in [1, 4096]", (long long)c->patch_size);
    if (c->downsample_ratio < 1 || c->downsample_ratio > 64)
        return di_errorf("image config: downsample_ratio %lld is not in [1, 64]", (long long)c->downsample_ratio);
    if (c->max_tokens < 3 || c->max_tokens > (1 << 24))
        return di_errorf("image config: max_image_tokens %lld is not in [3, 2^24] (the collapse cases need NMAX - 3 >= 0)",
                         (long long)c->max_tokens);
    if (c->min_pixels < 0 || c->min_pixels > (1LL << 40)) return di_errorf("image config: min_pixels %lld is not in [0, 2^40]", (long long)c->min_pixels);
    if (!(c->max_wh_ratio < 0) && !(isfinite(c->max_wh_ratio) && c->max_wh_ratio > 0))
        return di_errorf("image config: max_wh_ratio %g is not a positive finite number", c->max_wh_ratio);
    return 0;
}

int di_image_config_from_vision(const DiVisionConfig *v, DiImageConfig *out) {
    if (!v || !out) return di_errorf("image config: NULL argument");
    if (!v->present || v->num_hidden_layers <= 0) return di_errorf("image config: the model has no vision tower (vision_config.num_hidden_layers is 0)");
    DiImageConfig c = {v->patch_size, v->downsample_ratio, v->max_image_tokens, v->min_pixels, v->max_wh_ratio};
    if (di_image_config_check(&c) < 0) return di_error_wrap("vision_config");
    *out = c;
    return 0;
}

static int64_t n_tokens_of(int64_t gh, int64_t gw) { return gh * (gw + 1) + 2; }

/* math.ceil((b // p) / r) */
static int64_t grid_of(int64_t b, int64_t p, int64_t r) { return (int64_t)ceil((double)(b / p) / (double)r); }

/* Python round() of a double: half to even (the default rounding mode). */
static int64_t py_round(double x) { return (int64_t)nearbyint(x); }

int di_image_plan(const DiImageConfig *c, int64_t width, int64_t height, DiImagePlan *out) {
    if (!out) return di_errorf("image plan: NULL argument");
    memset(out, 0, sizeof *out);
    if (di_image_config_check(c) < 0) return -1;
    if (width <= 0 || height <= 0) return di_errorf("image plan: size %lldx%lld has no pixels", (long long)width, (long long)height);
    if (width > MAX_SIDE || height > MAX_SIDE)
        return di_errorf("image plan: size %lldx%lld exceeds 2^31 - 1 per side", (long long)width, (long long)height);
    const int64_t P = c->patch_size, R = c->downsample_ratio, NMAX = c->max_tokens, cell = P * R;
    /* w, h as Python holds them: ints, or floats once max_wh_ratio clamps the width.  Both are
     * exact in a double until the float branch, whose products round like Python's. */
    double w = (double)width, h = (double)height;
    if (c->max_wh_ratio >= 0 && w > h * c->max_wh_ratio) w = h * c->max_wh_ratio;
    double area = w * h; /* exact for ints below 2^31 each */
    if (0 < area && area < (double)c->min_pixels) {
        double s = pow((double)c->min_pixels / area, 0.5);
        w = trunc(w * s);
        h = trunc(h * s);
    }
    int64_t best_w = (int64_t)ceil(w / (double)P) * P, best_h = (int64_t)ceil(h / (double)P) * P;
    int64_t gh = grid_of(best_h, P, R), gw = grid_of(best_w, P, R);
    bool shrunk = false;
    if (n_tokens_of(gh, gw) > NMAX) {
        shrunk = true;
        double a = h / w;
        double cols = sqrt((double)(NMAX - 2) / a + 0.25) - 0.5, rows = cols * a;
        if (cols < 1.0) {
            best_h = (NMAX - 2) / 2 * cell;
            best_w = cell;
        } else if (rows < 1.0) {
            best_h = cell;
            best_w = (NMAX - 3) * cell;
        } else {
            double bw = (double)((int64_t)floor(cols) * cell) / w, bh = (double)((int64_t)floor(rows) * cell) / h;
            double beta = bw < bh ? bw : bh; /* Python min(): the first on ties, same value */
            best_h = (int64_t)floor(h * beta / (double)P) * P;
            best_w = (int64_t)floor(w * beta / (double)P) * P;
        }
        gh = grid_of(best_h, P, R);
        gw = grid_of(best_w, P, R);
    }
    if (best_w <= 0 || best_h <= 0 || n_tokens_of(gh, gw) > NMAX)
        return di_errorf("image plan: %lldx%lld does not fit %lld tokens (planned %lldx%lld)", (long long)width,
                         (long long)height, (long long)NMAX, (long long)best_w, (long long)best_h);
    out->width = width;
    out->height = height;
    out->best_w = best_w;
    out->best_h = best_h;
    out->n_vit_h = best_h / P;
    out->n_vit_w = best_w / P;
    out->n_llm_h = gh;
    out->n_llm_w = gw;
    out->n_tokens = n_tokens_of(gh, gw);
    out->shrunk = shrunk;

    /* §4.3 placement from the decoded size (not the up-scaled one) */
    out->stretch = c->max_wh_ratio >= 0 && (double)width >= c->max_wh_ratio * (double)height;
    int64_t fw = best_w, fh = best_h;
    if (!out->stretch) {
        double src = (double)width / (double)height, dst = (double)best_w / (double)best_h;
        if (src > dst) fh = py_round((double)height / (double)width * (double)best_w);
        else if (src < dst) fw = py_round((double)width / (double)height * (double)best_h);
    }
    if (fw <= 0 || fh <= 0 || fw > best_w || fh > best_h)
        return di_errorf("image plan: %lldx%lld is too elongated: its fit into %lldx%lld is %lldx%lld pixels", (long long)width,
                         (long long)height, (long long)best_w, (long long)best_h, (long long)fw, (long long)fh);
    out->fit_w = fw;
    out->fit_h = fh;
    if (fw != best_w) out->fit_x = py_round((double)(best_w - fw) * 0.5);
    else out->fit_y = py_round((double)(best_h - fh) * 0.5);
    return 0;
}
