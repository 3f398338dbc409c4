/* golden.c — golden set reader and case runner (golden.h). */
#include "golden/golden.h"

#include "base/error.h"
#include "base/json.h"
#include "base/mem.h"
#include "model/dspark.h"
#include "model/forward.h"
#include "model/state.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* README §6 tolerances per mode. */
typedef struct {
    double max_abs, mean_abs, conf_max_abs, argmax_min;
    bool integers_scored;
} Tolerance;

static Tolerance tolerance_of(NumericsMode mode) {
    switch (mode) {
    case MODE_EXACT: return (Tolerance){1e-3, 5e-5, 1e-3, 1.0, true};
    case MODE_KVQ: return (Tolerance){2e-2, 1e-3, 2e-2, 0.0, true};
    case MODE_REF: return (Tolerance){1.0, 1e-2, 0.5, 0.95, false};
    }
    return (Tolerance){0, 0, 0, 1, true};
}

int golden_open(const char *dir, GoldenSet *g) {
    if (!dir || !g) return di_errorf("golden: invalid arguments");
    memset(g, 0, sizeof *g);
    char *jp = di_path_join(dir, "golden.json"), *bp = di_path_join(dir, "golden.bin");
    int rc = -1;
    if (!jp || !bp) goto done;
    g->root = di_json_load_file(jp);
    if (!g->root) goto done;
    if (di_map_file(bp, &g->bin) != 0) goto done;
    if (di_json_int(g->root, "golden.json", "seq_len", true, &g->seq_len) < 0) goto done;
    json_t *arr;
    if (di_json_object(g->root, "golden.json", "arrays", true, &arr) < 0 || di_json_array(g->root, "golden.json", "cases", true, &arr) < 0)
        goto done;
    g->dir = di_strdup(dir);
    rc = g->dir ? 0 : -1;
done:
    free(jp);
    free(bp);
    if (rc != 0) {
        di_error_wrap("golden set %s", dir);
        golden_close(g);
    }
    return rc;
}

void golden_close(GoldenSet *g) {
    if (!g) return;
    if (g->root) json_decref(g->root);
    di_unmap_file(&g->bin);
    free(g->dir);
    memset(g, 0, sizeof *g);
}

int golden_array(const GoldenSet *g, const char *name, const char *dtype, int ndim, const int64_t *shape, GoldenArray *out) {
    json_t *arrays = json_object_get(g->root, "arrays");
    json_t *a = json_object_get(arrays, name);
    if (!a) return di_errorf("golden.json: no array '%s'", name);
    char ctx[200];
    snprintf(ctx, sizeof ctx, "arrays.%s", name);
    const char *dt;
    int64_t off, nbytes;
    json_t *shp;
    if (di_json_string(a, ctx, "dtype", true, &dt) < 0 || di_json_int(a, ctx, "offset", true, &off) < 0 ||
        di_json_int(a, ctx, "nbytes", true, &nbytes) < 0 || di_json_array(a, ctx, "shape", true, &shp) < 0)
        return -1;
    if (strcmp(dt, dtype) != 0) return di_errorf("%s: dtype %s, expected %s", ctx, dt, dtype);
    if ((int)json_array_size(shp) != ndim || ndim > 8) return di_errorf("%s: %zu dims, expected %d", ctx, json_array_size(shp), ndim);
    memset(out, 0, sizeof *out);
    out->ndim = ndim;
    out->numel = 1;
    for (int i = 0; i < ndim; i++) {
        json_t *v = json_array_get(shp, (size_t)i);
        if (!json_is_integer(v) || json_integer_value(v) < 0) return di_errorf("%s.shape[%d]: not a size", ctx, i);
        out->shape[i] = json_integer_value(v);
        if (shape && shape[i] >= 0 && shape[i] != out->shape[i])
            return di_errorf("%s.shape[%d] = %lld, expected %lld", ctx, i, (long long)out->shape[i], (long long)shape[i]);
        out->numel *= out->shape[i];
    }
    int64_t es = strcmp(dtype, "i64") == 0 ? 8 : 4;
    if (nbytes != out->numel * es || off < 0 || off % 16 || (uint64_t)(off + nbytes) > g->bin.size)
        return di_errorf("%s: %lld bytes at offset %lld do not fit golden.bin (%zu bytes) or the shape", ctx, (long long)nbytes,
                         (long long)off, g->bin.size);
    out->data = g->bin.data + off;
    return 0;
}

int golden_prepare_model(const GoldenSet *g, Model *m) {
    if (m->d.n_engram == 0) return 0;
    GoldenArray map, mult;
    int64_t ms[2] = {m->d.n_engram, m->d.engram_max_ngram};
    if (golden_array(g, "engram.token_map", "i32", 1, NULL, &map) != 0 || golden_array(g, "engram.hash_multipliers", "i64", 2, ms, &mult) != 0)
        return -1;
    if (map.shape[0] < m->d.vocab) return di_errorf("engram.token_map has %lld entries, vocabulary is %d", (long long)map.shape[0], m->d.vocab);
    if (model_set_engram_token_map(m, map.data, map.shape[0]) != 0) return -1;
    /* the multipliers computed at load must be the ones the golden set was made with */
    const int64_t *gm = mult.data;
    for (int64_t l = 0; l < ms[0]; l++)
        for (int64_t k = 0; k < ms[1]; k++)
            if (m->engram[l].mult[k] != gm[l * ms[1] + k])
                return di_errorf("engram.hash_multipliers[%lld][%lld] = %lld, computed %lld", (long long)l, (long long)k,
                                 (long long)gm[l * ms[1] + k], (long long)m->engram[l].mult[k]);
    return 0;
}

size_t golden_n_cases(const GoldenSet *g) { return json_array_size(json_object_get(g->root, "cases")); }

/* ------------------------------------------------------------------ comparison */

typedef struct {
    double max_abs, sum_abs, max_ref;
    int64_t count, rows, argmax_same;
} Diff;

static void diff_rows(Diff *df, const float *got, const float *want, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        int64_t ag = 0, aw = 0;
        for (int64_t c = 0; c < cols; c++) {
            double g = got[r * cols + c], w = want[r * cols + c], e = fabs(g - w);
            if (!(e <= df->max_abs)) df->max_abs = isnan(e) ? INFINITY : (e > df->max_abs ? e : df->max_abs);
            df->sum_abs += isnan(e) ? INFINITY : e;
            if (fabs(w) > df->max_ref) df->max_ref = fabs(w);
            if (got[r * cols + c] > got[r * cols + ag]) ag = c;
            if (want[r * cols + c] > want[r * cols + aw]) aw = c;
        }
        df->count += cols;
        df->rows++;
        df->argmax_same += ag == aw;
    }
}

static void fill_result(GoldenResult *res, const Diff *df, Tolerance tol) {
    res->max_abs = df->max_abs;
    res->mean_abs = df->count ? df->sum_abs / (double)df->count : 0;
    res->max_rel = df->max_ref > 0 ? df->max_abs / df->max_ref : df->max_abs;
    res->argmax_agree = df->rows ? (double)df->argmax_same / (double)df->rows : 1;
    res->ok = true;
    if (!(res->max_abs <= tol.max_abs))
        snprintf(res->why, sizeof res->why, "max_abs %.3g > %.3g", res->max_abs, tol.max_abs), res->ok = false;
    else if (!(res->mean_abs <= tol.mean_abs))
        snprintf(res->why, sizeof res->why, "mean_abs %.3g > %.3g", res->mean_abs, tol.mean_abs), res->ok = false;
    else if (res->argmax_agree < tol.argmax_min)
        snprintf(res->why, sizeof res->why, "argmax agreement %.3f < %.3f", res->argmax_agree, tol.argmax_min), res->ok = false;
}

static int case_chunks(json_t *c, const char *ctx, int64_t seq_len, int64_t **chunks, size_t *n) {
    if (di_json_int_array(c, ctx, "chunks", true, chunks, n) < 0) return -1;
    int64_t total = 0;
    for (size_t i = 0; i < *n; i++) {
        if ((*chunks)[i] <= 0) return di_errorf("%s.chunks[%zu]: %lld is not a positive size", ctx, i, (long long)(*chunks)[i]);
        total += (*chunks)[i];
    }
    if (total != seq_len) return di_errorf("%s.chunks: sum %lld != seq_len %lld", ctx, (long long)total, (long long)seq_len);
    return 0;
}

static int run_logits_case(const GoldenSet *g, Model *m, json_t *c, const char *ctx, const int32_t *ids, GoldenResult *res) {
    int64_t T = g->seq_len, V = m->d.vocab, *chunks = NULL;
    size_t nch = 0;
    const char *lname;
    GoldenArray want;
    float *got = NULL;
    RunState *st = NULL;
    int rc = -1;
    if (case_chunks(c, ctx, T, &chunks, &nch) != 0 || di_json_string(c, ctx, "logits", true, &lname) < 0) goto done;
    int64_t shape[2] = {T, V};
    if (golden_array(g, lname, "f32", 2, shape, &want) != 0) goto done;
    got = di_malloc((size_t)(T * V) * sizeof *got, "logits");
    st = state_create(&m->d);
    if (!got || !st) goto done;
    int64_t pos = 0;
    for (size_t i = 0; i < nch; i++) {
        if (model_forward(m, st, ids + pos, chunks[i], pos, got + pos * V, true, NULL) != 0) {
            di_error_wrap("%s: chunk %zu (positions %lld..%lld)", ctx, i, (long long)pos, (long long)(pos + chunks[i] - 1));
            goto done;
        }
        pos += chunks[i];
    }
    Diff df = {0};
    diff_rows(&df, got, want.data, T, V);
    fill_result(res, &df, tolerance_of(m->mode));
    rc = 0;
done:
    free(chunks);
    free(got);
    state_free(st);
    return rc;
}

static int run_dspark_case(const GoldenSet *g, Model *m, json_t *c, const char *ctx, const int32_t *ids, GoldenResult *res) {
    int64_t p, anchor, V = m->d.vocab, B = m->d.dspark_block;
    bool given_flag = false;
    double margin = 0;
    int64_t *drafts = NULL;
    size_t nd = 0;
    const char *nb, *nl, *nc, *nt;
    GoldenArray wb, wl, wc, wt;
    float *base = NULL, *lg = NULL, *conf = NULL;
    int32_t *tok = NULL, given[64];
    RunState *st = NULL;
    int rc = -1;
    if (di_json_int(c, ctx, "committed", true, &p) < 0 || di_json_int(c, ctx, "anchor", true, &anchor) < 0 ||
        di_json_bool(c, ctx, "drafts_given", true, &given_flag) < 0 || di_json_number(c, ctx, "argmax_margin_min", false, &margin) < 0 ||
        di_json_int_array(c, ctx, "drafts", true, &drafts, &nd) < 0 || di_json_string(c, ctx, "base_logits", true, &nb) < 0 ||
        di_json_string(c, ctx, "logits", true, &nl) < 0 || di_json_string(c, ctx, "confidence", true, &nc) < 0 ||
        di_json_string(c, ctx, "tokens", true, &nt) < 0)
        goto done;
    if (p <= 0 || p > g->seq_len || B <= 0 || B > 64 || (int64_t)nd != B) {
        di_errorf("%s: committed %lld / %zu drafts do not fit seq_len %lld and block %lld", ctx, (long long)p, nd, (long long)g->seq_len, (long long)B);
        goto done;
    }
    int64_t s2[2] = {B, V}, s1[1] = {B};
    if (golden_array(g, nb, "f32", 2, s2, &wb) || golden_array(g, nl, "f32", 2, s2, &wl) || golden_array(g, nc, "f32", 1, s1, &wc) ||
        golden_array(g, nt, "i32", 1, s1, &wt))
        goto done;
    for (int64_t i = 0; i < B; i++) given[i] = (int32_t)drafts[i];
    base = di_malloc((size_t)(B * V) * sizeof *base, "base logits");
    lg = di_malloc((size_t)(B * V) * sizeof *lg, "draft logits");
    conf = di_malloc((size_t)B * sizeof *conf, "confidence");
    tok = di_malloc((size_t)B * sizeof *tok, "drafts");
    st = state_create(&m->d);
    if (!base || !lg || !conf || !tok || !st) goto done;
    if (model_forward(m, st, ids, p, 0, NULL, false, NULL) != 0) goto done;
    DraftOutput out = {base, lg, conf, tok};
    if (dspark_draft(m, st, (int32_t)anchor, given_flag ? given : NULL, &out) != 0) goto done;
    Tolerance tol = tolerance_of(m->mode);
    Diff df = {0};
    diff_rows(&df, base, wb.data, B, V);
    diff_rows(&df, lg, wl.data, B, V);
    fill_result(res, &df, tol);
    res->conf_max_abs = 0;
    for (int64_t i = 0; i < B; i++) {
        double e = fabs((double)conf[i] - ((const float *)wc.data)[i]);
        if (!(e <= res->conf_max_abs)) res->conf_max_abs = isnan(e) ? INFINITY : e;
    }
    if (res->ok && !(res->conf_max_abs <= tol.conf_max_abs))
        snprintf(res->why, sizeof res->why, "confidence max_abs %.3g > %.3g", res->conf_max_abs, tol.conf_max_abs), res->ok = false;
    /* draft tokens: imposed ones must echo; greedy ones count only where the margin exceeds the
     * logit tolerance (README §6) and the mode scores integer arrays */
    bool score_tokens = given_flag || (tol.integers_scored && margin > tol.max_abs);
    if (res->ok && score_tokens)
        for (int64_t i = 0; i < B; i++)
            if (tok[i] != ((const int32_t *)wt.data)[i]) {
                snprintf(res->why, sizeof res->why, "draft token %lld is %d, golden %d", (long long)i, tok[i], ((const int32_t *)wt.data)[i]);
                res->ok = false;
                break;
            }
    rc = 0;
done:
    free(drafts);
    free(base);
    free(lg);
    free(conf);
    free(tok);
    state_free(st);
    return rc;
}

int golden_run_case(const GoldenSet *g, Model *m, size_t i, GoldenResult *res) {
    if (!g || !m || !res) return di_errorf("golden: invalid arguments");
    memset(res, 0, sizeof *res);
    json_t *c = json_array_get(json_object_get(g->root, "cases"), i);
    if (!c) return di_errorf("golden.json: no case %zu", i);
    char ctx[64];
    snprintf(ctx, sizeof ctx, "cases[%zu]", i);
    const char *name, *kind, *mode;
    if (di_json_string(c, ctx, "name", true, &name) < 0 || di_json_string(c, ctx, "kind", true, &kind) < 0 ||
        di_json_string(c, ctx, "mode", true, &mode) < 0)
        return -1;
    snprintf(res->name, sizeof res->name, "%s", name);
    snprintf(res->mode, sizeof res->mode, "%s", mode);
    NumericsMode nm;
    if (numerics_mode_parse(mode, &nm) != 0) return di_error_wrap("%s (%s)", ctx, name);
    m->mode = nm;
    if (json_is_array(json_object_get(g->root, "images")))
        return di_errorf("image prompts in the text model (span embeddings, bias_vl, Engram DEAD positions) are not implemented yet");
    GoldenArray ids;
    int64_t sh[1] = {g->seq_len};
    if (golden_array(g, "input_ids", "i32", 1, sh, &ids) != 0) return -1;
    int rc;
    if (strcmp(kind, "logits") == 0) rc = run_logits_case(g, m, c, name, ids.data, res);
    else if (strcmp(kind, "dspark") == 0) rc = run_dspark_case(g, m, c, name, ids.data, res);
    else rc = di_errorf("%s: unknown case kind '%s'", name, kind);
    return rc;
}
