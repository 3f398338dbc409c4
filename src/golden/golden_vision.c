/* golden_vision.c — vision-stage checks of an image golden set (golden_vision.h). */
#include "golden/golden_vision.h"

#include "base/error.h"
#include "base/json.h"
#include "base/mem.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VIS_MAX_ABS 1e-3
#define VIS_MEAN_ABS 5e-5

bool golden_is_vision(const GoldenSet *g) { return g && json_is_array(json_object_get(g->root, "images")); }

size_t golden_n_images(const GoldenSet *g) { return golden_is_vision(g) ? json_array_size(json_object_get(g->root, "images")) : 0; }

static json_t *image_entry(const GoldenSet *g, size_t k, char *ctx, size_t ctx_len) {
    snprintf(ctx, ctx_len, "images[%zu]", k);
    json_t *im = json_array_get(json_object_get(g->root, "images"), k);
    if (!json_is_object(im)) di_errorf("golden.json: no %s", ctx);
    return json_is_object(im) ? im : NULL;
}

/* The name of array `stage` of image k (images[k].arrays.<stage>). */
static int stage_name(const GoldenSet *g, size_t k, const char *stage, const char **name) {
    char ctx[64];
    json_t *im = image_entry(g, k, ctx, sizeof ctx), *arrs;
    if (!im || di_json_object(im, ctx, "arrays", true, &arrs) < 0) return -1;
    return di_json_string(arrs, ctx, stage, true, name) < 0 ? -1 : 0;
}

int golden_image_patches(const GoldenSet *g, size_t k, const float **patches, VitGrid *grid) {
    if (!g || !patches || !grid) return di_errorf("golden: invalid arguments");
    char ctx[64];
    json_t *im = image_entry(g, k, ctx, sizeof ctx), *plan;
    if (!im || di_json_object(im, ctx, "plan", true, &plan) < 0) return -1;
    int64_t h, w;
    if (di_json_int(plan, ctx, "n_vit_h", true, &h) < 0 || di_json_int(plan, ctx, "n_vit_w", true, &w) < 0) return -1;
    if (h < 1 || w < 1 || h > (1 << 16) || w > (1 << 16)) return di_errorf("%s.plan: a %lld x %lld patch grid", ctx, (long long)h, (long long)w);
    const char *name;
    GoldenArray a;
    int64_t shape[2] = {h * w, -1};
    if (stage_name(g, k, "patches", &name) != 0 || golden_array(g, name, "f32", 2, shape, &a) != 0) return -1;
    *patches = a.data;
    grid->n_vit_h = h;
    grid->n_vit_w = w;
    return 0;
}

typedef struct {
    double max_abs, sum_abs, max_ref;
    int64_t count;
} VisDiff;

static void diff(VisDiff *df, const float *got, const float *want, int64_t n) {
    memset(df, 0, sizeof *df);
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - (double)want[i]);
        if (isnan(e)) e = INFINITY;
        if (e > df->max_abs) df->max_abs = e;
        df->sum_abs += e;
        if (fabs(want[i]) > df->max_ref) df->max_ref = fabs(want[i]);
    }
    df->count = n;
}

int golden_run_image(const GoldenSet *g, VisionModel *vm, size_t k, GoldenResult *res) {
    if (!g || !vm || !res) return di_errorf("golden: invalid arguments");
    memset(res, 0, sizeof *res);
    snprintf(res->name, sizeof res->name, "image%zu.vision", k);
    snprintf(res->mode, sizeof res->mode, "float32");
    const float *patches;
    VitGrid grid;
    if (golden_image_patches(g, k, &patches, &grid) != 0) return -1;
    const VitDims *d = &vm->d;
    int64_t n = grid.n_vit_h * grid.n_vit_w, cells = vit_cells(vm, grid, NULL, NULL);
    struct {
        const char *stage;
        int ndim;
        int64_t shape[3];
        float *got;
    } st[4] = {{"vit_layer_out", 3, {d->layers, n, d->dim}, NULL},
               {"vit_out", 2, {n, d->dim, 0}, NULL},
               {"aligner_in", 2, {cells, d->cell_in, 0}, NULL},
               {"embeds", 2, {cells, d->text_dim, 0}, NULL}};
    GoldenArray want[4];
    int rc = -1;
    GoldenArray pa;
    const char *pname;
    if (stage_name(g, k, "patches", &pname) != 0 || golden_array(g, pname, "f32", 2, (int64_t[]){n, d->patch_in}, &pa) != 0) goto done;
    for (int i = 0; i < 4; i++) {
        const char *name;
        if (stage_name(g, k, st[i].stage, &name) != 0 || golden_array(g, name, "f32", st[i].ndim, st[i].shape, &want[i]) != 0) goto done;
        st[i].got = di_malloc((size_t)want[i].numel * sizeof(float), st[i].stage);
        if (!st[i].got) goto done;
    }
    VitTrace tr = {st[0].got, st[1].got, st[2].got};
    if (vit_encode(vm, patches, grid, st[3].got, &tr) != 0) {
        di_error_wrap("image %zu", k);
        goto done;
    }
    res->ok = true;
    for (int i = 0; i < 4; i++) {
        VisDiff df;
        diff(&df, st[i].got, want[i].data, want[i].numel);
        double mean = df.count ? df.sum_abs / (double)df.count : 0;
        if (df.max_abs > res->max_abs || i == 0) {
            res->max_abs = df.max_abs;
            res->max_rel = df.max_ref > 0 ? df.max_abs / df.max_ref : df.max_abs;
        }
        if (mean > res->mean_abs) res->mean_abs = mean;
        if (res->ok && !(df.max_abs <= VIS_MAX_ABS && mean <= VIS_MEAN_ABS)) {
            snprintf(res->why, sizeof res->why, "%s: max_abs %.3g mean_abs %.3g (tolerance %.0e / %.0e)", st[i].stage, df.max_abs, mean,
                     VIS_MAX_ABS, VIS_MEAN_ABS);
            res->ok = false;
        }
    }
    rc = 0;
done:
    for (int i = 0; i < 4; i++) free(st[i].got);
    return rc;
}

int golden_run_prompt(const GoldenSet *g, VisionModel *vm, int64_t image_token_id, GoldenResult *res) {
    if (!g || !vm || !res) return di_errorf("golden: invalid arguments");
    memset(res, 0, sizeof *res);
    snprintf(res->name, sizeof res->name, "prompt.span");
    snprintf(res->mode, sizeof res->mode, "float32");
    GoldenArray ph, ids, types, rows;
    int64_t T = g->seq_len, D = vm->d.text_dim;
    int64_t *order = NULL;
    size_t n_order = 0;
    int32_t *got_ids = NULL, *got_types = NULL;
    float *got_rows = NULL, *emb = NULL;
    int rc = -1;
    if (golden_array(g, "prompt.placeholder_ids", "i32", 1, NULL, &ph) || golden_array(g, "prompt.input_ids", "i32", 1, (int64_t[]){T}, &ids) ||
        golden_array(g, "prompt.token_types", "i32", 1, (int64_t[]){T}, &types) ||
        golden_array(g, "prompt.span_embeds", "f32", 2, (int64_t[]){T, D}, &rows) ||
        di_json_int_array(g->root, "golden.json", "prompt_image_order", true, &order, &n_order) < 0)
        goto done;
    got_ids = di_malloc((size_t)T * sizeof *got_ids, "ids");
    got_types = di_malloc((size_t)T * sizeof *got_types, "types");
    got_rows = di_calloc((size_t)(T * D), sizeof *got_rows, "span rows");
    if (!got_ids || !got_types || !got_rows) goto done;
    int64_t p = 0;
    size_t next = 0;
    const int32_t *pid = ph.data;
    for (int64_t i = 0; i < ph.numel; i++) {
        if (pid[i] != image_token_id) {
            if (p >= T) break;
            got_ids[p] = pid[i], got_types[p] = VIT_TYPE_TEXT, p++;
            continue;
        }
        if (next >= n_order || order[next] < 0 || (size_t)order[next] >= golden_n_images(g)) {
            di_errorf("golden.json: placeholder %lld has no image in prompt_image_order", (long long)i);
            goto done;
        }
        size_t k = (size_t)order[next++];
        const float *patches;
        VitGrid grid;
        int64_t gh, gw;
        if (golden_image_patches(g, k, &patches, &grid) != 0) goto done;
        int64_t cells = vit_cells(vm, grid, &gh, &gw), len = vit_span_len(gh, gw);
        if (p + len > T) {
            di_errorf("golden.json: image %zu's span of %lld positions runs past seq_len %lld", k, (long long)len, (long long)T);
            goto done;
        }
        free(emb);
        emb = di_malloc((size_t)(cells * D) * sizeof *emb, "aligner rows");
        if (!emb || vit_encode(vm, patches, grid, emb, NULL) != 0 || vit_span(vm, emb, gh, gw, got_types + p, got_rows + p * D) != 0) goto done;
        for (int64_t q = 0; q < len; q++) got_ids[p + q] = (int32_t)image_token_id;
        p += len;
    }
    if (p != T || next != n_order) {
        di_errorf("golden.json: the expanded prompt has %lld positions and %zu of %zu images, seq_len is %lld", (long long)p, next, n_order,
                  (long long)T);
        goto done;
    }
    res->ok = true;
    for (int64_t q = 0; q < T && res->ok; q++)
        if (got_ids[q] != ((const int32_t *)ids.data)[q] || got_types[q] != ((const int32_t *)types.data)[q]) {
            snprintf(res->why, sizeof res->why, "position %lld: id %d type %d, golden id %d type %d", (long long)q, got_ids[q], got_types[q],
                     ((const int32_t *)ids.data)[q], ((const int32_t *)types.data)[q]);
            res->ok = false;
        }
    VisDiff df;
    diff(&df, got_rows, rows.data, T * D);
    res->max_abs = df.max_abs;
    res->mean_abs = df.count ? df.sum_abs / (double)df.count : 0;
    res->max_rel = df.max_ref > 0 ? df.max_abs / df.max_ref : df.max_abs;
    if (res->ok && !(res->max_abs <= VIS_MAX_ABS && res->mean_abs <= VIS_MEAN_ABS)) {
        snprintf(res->why, sizeof res->why, "span_embeds: max_abs %.3g mean_abs %.3g", res->max_abs, res->mean_abs);
        res->ok = false;
    }
    rc = 0;
done:
    free(order);
    free(got_ids);
    free(got_types);
    free(got_rows);
    free(emb);
    return rc;
}
