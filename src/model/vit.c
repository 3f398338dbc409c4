/* vit.c — the ViT forward and the 3x3 aligner of vision-v41.md §5-§6 (vit.h), one image at a
 * time.  Every projection goes through the kernel table (be->mat[].matmul, batch-invariant, so
 * a row's bits never depend on the image's other rows or the thread count); the norms through
 * be->rmsnorm, SwiGLU through be->swiglu (no clamp); the bidirectional attention and the 2-D
 * RoPE are written here (the text kernels' attention shares one key/value row, §4.8).  Scratch
 * lives in one arena grown to the largest image seen (no allocation for images no larger). */
#include "model/vit.h"

#include "base/error.h"
#include "base/mem.h"
#include "kernels/activations.h"
#include "kernels/numformats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct VitScratch {
    int64_t n, cells; /* rows / cells the arena holds */
    int threads;
    void *mem;
    float *X, *u, *qkv, *att, *tmp, *h, *s, *cs, *sn, *scores, *z, *a, *mm;
    int64_t mm_floats;
};

void vit_free(VisionModel *vm) {
    if (!vm) return;
    for (size_t i = 0; i < vm->n_owned; i++) free(vm->owned[i]);
    free(vm->owned);
    free(vm->blocks);
    if (vm->ws) di_aligned_free(vm->ws->mem);
    free(vm->ws);
    free(vm);
}

int64_t vit_cells(const VisionModel *vm, VitGrid g, int64_t *gh, int64_t *gw) {
    if (!vm || g.n_vit_h < 1 || g.n_vit_w < 1) return -1;
    int64_t r = vm->d.ratio, h = (g.n_vit_h + r - 1) / r, w = (g.n_vit_w + r - 1) / r;
    if (gh) *gh = h;
    if (gw) *gw = w;
    return h * w;
}

static int64_t mm_need(const VisionModel *vm, const DiMatrix *w, int64_t n, int threads) {
    return vm->be->mat[w->format].scratch_floats(vm->be, w, n, threads, false);
}

/* Size the arena for n patch rows and `cells` aligner cells. */
static int scratch_reserve(VisionModel *vm, int64_t n, int64_t cells) {
    int threads = vm->pool ? di_pool_threads(vm->pool) : 1;
    VitScratch *s = vm->ws;
    if (s && s->n >= n && s->cells >= cells && s->threads >= threads) return 0;
    if (s) {
        if (s->n > n) n = s->n;
        if (s->cells > cells) cells = s->cells;
    }
    const VitDims *d = &vm->d;
    int64_t Dv = d->dim, F = d->inter, A = d->head_dim / 2, D = d->text_dim;
    int64_t mm = 0;
    const DiMatrix *mats[] = {&vm->patch_w, &vm->blocks[0].wqkv, &vm->blocks[0].wo, &vm->blocks[0].w1, &vm->blocks[0].w2};
    for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) {
        int64_t k = mm_need(vm, mats[i], n, threads);
        if (k > mm) mm = k;
    }
    int64_t k1 = mm_need(vm, &vm->al_w1, cells, threads), k2 = mm_need(vm, &vm->al_w2, cells, threads);
    if (k1 > mm) mm = k1;
    if (k2 > mm) mm = k2;
    int64_t sizes[13] = {n * Dv, n * Dv, n * 3 * Dv, n * Dv, n * Dv, n * 2 * F, n * F, n * A, n * A, (int64_t)threads * n,
                         cells * d->cell_in, cells * D, mm};
    size_t total = 0;
    for (int i = 0; i < 13; i++) total += ((size_t)sizes[i] * sizeof(float) + 63) & ~(size_t)63;
    void *mem = di_aligned_malloc(1, total, "vision workspace");
    if (!mem) return -1;
    VitScratch *ns = s ? s : di_calloc(1, sizeof *ns, "vision workspace");
    if (!ns) {
        di_aligned_free(mem);
        return -1;
    }
    if (s) di_aligned_free(s->mem);
    ns->mem = mem;
    float **dst[13] = {&ns->X, &ns->u, &ns->qkv, &ns->att, &ns->tmp, &ns->h, &ns->s, &ns->cs, &ns->sn, &ns->scores, &ns->z, &ns->a, &ns->mm};
    char *p = mem;
    for (int i = 0; i < 13; i++) {
        *dst[i] = (float *)p;
        p += ((size_t)sizes[i] * sizeof(float) + 63) & ~(size_t)63;
    }
    ns->n = n;
    ns->cells = cells;
    ns->threads = threads;
    ns->mm_floats = mm;
    vm->ws = ns;
    return 0;
}

static void round_bf16(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = di_bf16_to_f32(di_f32_to_bf16(x[i]));
}

/* y[n][rows] = W x (+ b), rounded to bf16 under VIT_NUM_BF16. */
static int linear(VisionModel *vm, const DiMatrix *w, const float *b, const float *x, int64_t n, float *y) {
    VitScratch *s = vm->ws;
    if (vm->be->mat[w->format].matmul(vm->be, vm->pool, w, x, n, y, false, s->mm, s->mm_floats) != 0) return -1;
    if (b)
        for (int64_t t = 0; t < n; t++) {
            float *row = y + t * w->rows;
            for (int64_t r = 0; r < w->rows; r++) row[r] += b[r];
        }
    if (vm->num == VIT_NUM_BF16) round_bf16(y, n * w->rows);
    return 0;
}

/* ---- RMSNorm over rows, threaded */
typedef struct {
    VisionModel *vm;
    const float *x, *w;
    float *y;
    int64_t n, dim;
} NormJob;

static void norm_task(void *ctx, int task, int thread) {
    (void)thread;
    const NormJob *j = ctx;
    int parts = j->vm->ws->threads;
    int64_t r0 = j->n * task / parts, r1 = j->n * (task + 1) / parts;
    for (int64_t r = r0; r < r1; r++) {
        j->vm->be->rmsnorm(j->y + r * j->dim, j->x + r * j->dim, j->w, j->dim, j->vm->d.eps);
        if (j->vm->num == VIT_NUM_BF16) round_bf16(j->y + r * j->dim, j->dim);
    }
}

static void run_tasks(VisionModel *vm, int n_tasks, DiTaskFn fn, void *ctx) {
    if (vm->pool && n_tasks > 1) di_pool_run(vm->pool, n_tasks, fn, ctx);
    else
        for (int t = 0; t < n_tasks; t++) fn(ctx, t, 0);
}

static void norm_rows(VisionModel *vm, const float *x, const float *w, int64_t n, float *y) {
    NormJob j = {vm, x, w, y, n, vm->d.dim};
    run_tasks(vm, vm->ws->threads, norm_task, &j);
}

/* ---- 2-D RoPE (§5.1): cos/sin tables [N][A], φ = [i·f_0 .. i·f_{A/2-1}, j·f_0 .. j·f_{A/2-1}] */
static void rope_tables(VisionModel *vm, VitGrid g) {
    int A = vm->d.head_dim / 2, half = A / 2;
    float *cs = vm->ws->cs, *sn = vm->ws->sn;
    for (int64_t i = 0; i < g.n_vit_h; i++)
        for (int64_t j = 0; j < g.n_vit_w; j++) {
            int64_t p = i * g.n_vit_w + j;
            for (int k = 0; k < A; k++) {
                float ang = (k < half ? (float)i : (float)j) * vm->freq[k % half];
                cs[p * A + k] = cosf(ang);
                sn[p * A + k] = sinf(ang);
            }
        }
}

/* Rotate every head of q and k of row p in place: pairs (s, s + A) over the whole head. */
static void rope_row(VisionModel *vm, float *qk, int64_t p) {
    const VitDims *d = &vm->d;
    int A = d->head_dim / 2;
    const float *c = vm->ws->cs + p * A, *sn = vm->ws->sn + p * A;
    for (int part = 0; part < 2; part++)
        for (int h = 0; h < d->heads; h++) {
            float *t = qk + (int64_t)part * d->dim + (int64_t)h * d->head_dim;
            for (int s = 0; s < A; s++) {
                float a = t[s], b = t[s + A];
                t[s] = a * c[s] - b * sn[s];
                t[s + A] = b * c[s] + a * sn[s];
            }
            if (vm->num == VIT_NUM_BF16) round_bf16(t, d->head_dim);
        }
}

/* ---- bidirectional attention: tasks over (head, block of query rows) */
#define ATT_ROWS 32
typedef struct {
    VisionModel *vm;
    int64_t n;
    int row_blocks;
} AttJob;

static void att_task(void *ctx, int task, int thread) {
    const AttJob *j = ctx;
    VisionModel *vm = j->vm;
    const VitDims *d = &vm->d;
    int64_t n = j->n, Dv = d->dim, hd = d->head_dim, stride = 3 * Dv;
    int h = task / j->row_blocks;
    int64_t r0 = (int64_t)(task % j->row_blocks) * ATT_ROWS, r1 = r0 + ATT_ROWS < n ? r0 + ATT_ROWS : n;
    float *z = vm->ws->scores + (int64_t)thread * n;
    const float *qkv = vm->ws->qkv;
    float scale = 1.0f / sqrtf((float)hd);
    for (int64_t r = r0; r < r1; r++) {
        const float *q = qkv + r * stride + (int64_t)h * hd;
        float mx = -INFINITY;
        for (int64_t m = 0; m < n; m++) {
            const float *k = qkv + m * stride + Dv + (int64_t)h * hd;
            float dot = 0;
            for (int64_t c = 0; c < hd; c++) dot += q[c] * k[c];
            z[m] = dot * scale;
            if (z[m] > mx) mx = z[m];
        }
        vm->be->expf_row(z, (size_t)n, mx, 1.0f, z);
        float sum = 0;
        for (int64_t m = 0; m < n; m++) sum += z[m];
        float inv = 1.0f / sum, *o = vm->ws->att + r * Dv + (int64_t)h * hd;
        for (int64_t c = 0; c < hd; c++) o[c] = 0;
        for (int64_t m = 0; m < n; m++) {
            const float *v = qkv + m * stride + 2 * Dv + (int64_t)h * hd;
            float p = z[m] * inv;
            for (int64_t c = 0; c < hd; c++) o[c] += p * v[c];
        }
        if (vm->num == VIT_NUM_BF16) round_bf16(o, hd);
    }
}

static void residual_add(VisionModel *vm, float *X, const float *y, int64_t count) {
    for (int64_t i = 0; i < count; i++) X[i] += y[i];
    if (vm->num == VIT_NUM_BF16) round_bf16(X, count);
}

static int vit_block(VisionModel *vm, const VitBlock *b, int64_t n) {
    VitScratch *s = vm->ws;
    const VitDims *d = &vm->d;
    int64_t Dv = d->dim, F = d->inter;
    norm_rows(vm, s->X, b->norm1, n, s->u);
    if (linear(vm, &b->wqkv, b->bqkv, s->u, n, s->qkv) != 0) return -1;
    for (int64_t p = 0; p < n; p++) rope_row(vm, s->qkv + p * 3 * Dv, p);
    AttJob aj = {vm, n, (int)((n + ATT_ROWS - 1) / ATT_ROWS)};
    run_tasks(vm, d->heads * aj.row_blocks, att_task, &aj);
    if (linear(vm, &b->wo, b->bo, s->att, n, s->tmp) != 0) return -1;
    residual_add(vm, s->X, s->tmp, n * Dv);
    norm_rows(vm, s->X, b->norm2, n, s->u);
    if (linear(vm, &b->w1, NULL, s->u, n, s->h) != 0) return -1;
    for (int64_t p = 0; p < n; p++) {
        const float *g = s->h + p * 2 * F;
        float *o = s->s + p * F;
        if (vm->num == VIT_NUM_BF16) { /* REF: silu(g) rounded, then the product rounded */
            for (int64_t i = 0; i < F; i++) {
                float sg = di_bf16_to_f32(di_f32_to_bf16(di_silu(g[i])));
                o[i] = di_bf16_to_f32(di_f32_to_bf16(sg * g[F + i]));
            }
        } else {
            vm->be->swiglu(g, g + F, F, 0.0f, 1.0f, o);
        }
    }
    if (linear(vm, &b->w2, NULL, s->s, n, s->tmp) != 0) return -1;
    residual_add(vm, s->X, s->tmp, n * Dv);
    return 0;
}

/* §6: zero-padded 3x3 unfold, channel-major z[c·r² + dy·r + dx]. */
static void unfold(const VisionModel *vm, const float *Y, VitGrid g, int64_t gh, int64_t gw, float *z) {
    int64_t r = vm->d.ratio, Dv = vm->d.dim, rr = r * r, cin = vm->d.cell_in;
    for (int64_t a = 0; a < gh; a++)
        for (int64_t bb = 0; bb < gw; bb++) {
            float *zt = z + (a * gw + bb) * cin;
            for (int64_t dy = 0; dy < r; dy++)
                for (int64_t dx = 0; dx < r; dx++) {
                    int64_t i = a * r + dy, j = bb * r + dx;
                    const float *y = i < g.n_vit_h && j < g.n_vit_w ? Y + (i * g.n_vit_w + j) * Dv : NULL;
                    for (int64_t c = 0; c < Dv; c++) zt[c * rr + dy * r + dx] = y ? y[c] : 0.0f;
                }
        }
}

static float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * (float)M_SQRT1_2)); }

int vit_encode(VisionModel *vm, const float *patches, VitGrid g, float *embeds, VitTrace *trace) {
    if (!vm || !patches || !embeds) return di_errorf("vision encode: invalid arguments");
    const int64_t lim = 1 << 22;
    if (g.n_vit_h < 1 || g.n_vit_w < 1 || g.n_vit_h > lim || g.n_vit_w > lim || g.n_vit_h * g.n_vit_w > lim)
        return di_errorf("vision encode: a %lld x %lld patch grid is empty or too large", (long long)g.n_vit_h, (long long)g.n_vit_w);
    const VitDims *d = &vm->d;
    int64_t n = g.n_vit_h * g.n_vit_w, gh, gw, cells = vit_cells(vm, g, &gh, &gw), Dv = d->dim;
    if (scratch_reserve(vm, n, cells) != 0) return di_error_wrap("vision encode: %lld patches", (long long)n);
    VitScratch *s = vm->ws;
    for (int64_t i = 0; i < n * d->patch_in; i++)
        if (!isfinite(patches[i])) return di_errorf("vision encode: patch value %lld is not finite", (long long)i);
    if (linear(vm, &vm->patch_w, vm->patch_b, patches, n, s->X) != 0) return -1;
    rope_tables(vm, g);
    for (int l = 0; l < d->layers; l++) {
        if (vit_block(vm, &vm->blocks[l], n) != 0) return di_error_wrap("vision block %d", l);
        if (trace && trace->layer_out) memcpy(trace->layer_out + (int64_t)l * n * Dv, s->X, (size_t)(n * Dv) * sizeof(float));
    }
    norm_rows(vm, s->X, vm->norm, n, s->u);
    if (trace && trace->vit_out) memcpy(trace->vit_out, s->u, (size_t)(n * Dv) * sizeof(float));
    unfold(vm, s->u, g, gh, gw, s->z);
    if (trace && trace->aligner_in) memcpy(trace->aligner_in, s->z, (size_t)(cells * d->cell_in) * sizeof(float));
    if (linear(vm, &vm->al_w1, vm->al_b1, s->z, cells, s->a) != 0) return -1;
    for (int64_t i = 0; i < cells * d->text_dim; i++) s->a[i] = gelu_erf(s->a[i]);
    if (vm->num == VIT_NUM_BF16) round_bf16(s->a, cells * d->text_dim);
    if (linear(vm, &vm->al_w2, vm->al_b2, s->a, cells, embeds) != 0) return -1;
    return 0;
}
