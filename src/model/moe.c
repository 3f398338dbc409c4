/* moe.c — router, routed experts and the shared expert (moe.h, spec §5.7). */
#include "model/moe.h"

#include "base/error.h"
#include "model/workspace.h"

#include <stdatomic.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- expert jobs
 *
 * All experts a forward touches (the routed ones with at least one row, ascending id, then the
 * shared expert) run as two thread-pool jobs instead of three matmuls per expert: job A computes
 * the SwiGLU hidden rows (w1 and w3) of every expert, job B the down projection (w2).  A task
 * is one expert x one slice of its output rows, computed by the single-thread kernel over all of
 * that expert's rows, so each expert's weights are read once per forward and the pool
 * synchronises twice per layer (decode at batch 1 ran ~15 small matmuls per layer, each a pool
 * wake-up).  The kernel computes every output row whole with the same n_tokens as a whole-matrix
 * call (matmul.h: bit-identical for any row split), and the expert sums below run in the same
 * order whatever the schedule, so results are unchanged bit for bit.
 *
 * Balance: an expert gets slices in proportion to its share of the job's cost (expert_cost), and
 * the tasks run largest first.  In a batched step the shared expert sees every row while a
 * routed one sees one or two; with equal slices per expert and the shared one last in the task
 * order, one thread ran it alone at the end while the other waited (at batch 16 on the medium
 * checkpoint the worker thread ran none of the experts' GEMMs). */

/* Tasks per pool thread a job aims for: enough to balance a few experts over the threads, few
 * enough that each kernel call stays large (a call costs a few microseconds of setup). */
#define TASKS_PER_THREAD 4

/* Relative cost of an expert matrix applied to `tokens` rows: decoding its weights, which costs
 * about as much as EXPERT_DECODE_TOKENS tokens' multiply-adds (bench_kernels: the decode-bound
 * GEMV at n = 1 runs ~15-18 GFLOP/s, the panel GEMM ~40-50), plus each token's multiply-adds. */
#define EXPERT_DECODE_TOKENS 3
static int64_t expert_cost(int64_t tokens) { return EXPERT_DECODE_TOKENS + tokens; }

/* An expert (ex: const ExpertWeights *) and its rows off .. off+cnt-1 of the gathered buffers. */
typedef WsExpertSlot ExpertSlot;
/* Output rows r0 .. r0+len-1 of the slot's matrix (r0 a multiple of 32); cost: expert_cost x len,
 * comparable between tasks of one job. */
typedef WsExpertTask ExpertTask;

typedef struct {
    const Model *m;
    const ExpertSlot *slots;
    const ExpertTask *tasks_a, *tasks_b; /* w1/w3 and w2 slices, largest first */
    int64_t D, F;
    const float *xb, *rw; /* gathered inputs [total][D], routing weight per gathered row */
    float *hidden, *ga, *ua; /* [total][F]; ga/ua: per-task scratch of the same size */
    float *ob, *obs;         /* [total][D] outputs and per-task scratch */
    bool xb_quantised;       /* xb already went through the FP8 round trip (moe_run_routed) */
    _Atomic int failed;
} ExpertJob;

/* One thread's matmul on that thread's kernel scratch: the pool is busy running this job's
 * tasks.  Under the reference numerics the inputs were quantised (§4.3, run_experts), and FP4
 * experts take the block order (di_matmul_qa, matmul.h) that the reference's fp4_gemm has. */
static int task_matmul(const Model *m, const DiMatrix *w, const float *x, int64_t n, float *y, int thread) {
    const Workspace *ws = m->ws;
    return di_backend_matmul(m->be, NULL, w, x, n, y, model_act_quant(m), ws->moe.task_mm + thread * ws->moe.task_mm_floats,
                             ws->moe.task_mm_floats);
}

static int compare_task_cost(const void *pa, const void *pb) {
    const ExpertTask *a = pa, *b = pb;
    if (a->cost != b->cost) return a->cost < b->cost ? 1 : -1;
    if (a->slot != b->slot) return a->slot < b->slot ? -1 : 1;
    return (a->r0 > b->r0) - (a->r0 < b->r0);
}

/* Slices of `rows` output rows for every slot, about `target` in all and each slot's share in
 * proportion to its cost, into tasks (room for n_slots + target); sorted largest first.  Slices
 * are multiples of 32 rows, so an FP8 slice starts on a scale block (§3.4). */
static int plan_tasks(const ExpertSlot *slots, int n_slots, int64_t rows, int target, ExpertTask *tasks) {
    int64_t total = 0;
    for (int i = 0; i < n_slots; i++) total += expert_cost(slots[i].cnt);
    int n = 0;
    for (int i = 0; i < n_slots; i++) {
        int64_t cost = expert_cost(slots[i].cnt), parts = (target * cost + total - 1) / total; /* >= 1 */
        int64_t slice = ((rows + parts - 1) / parts + 31) / 32 * 32;
        for (int64_t r0 = 0; r0 < rows; r0 += slice) {
            int64_t len = rows - r0 < slice ? rows - r0 : slice;
            tasks[n++] = (ExpertTask){i, r0, len, cost * len};
        }
    }
    qsort(tasks, (size_t)n, sizeof *tasks, compare_task_cost);
    return n;
}

/* Job A task: hidden[r][i] = silu(min(w1 x, L)) · clamp(w3 x, ±L) · weight[r] for one row slice. */
static void hidden_task(void *ctx, int task, int thread) {
    ExpertJob *j = ctx;
    const ExpertTask *t = &j->tasks_a[task];
    const ExpertSlot *s = &j->slots[t->slot];
    int64_t r0 = t->r0, len = t->len, F = j->F, cnt = s->cnt;
    DiMatrix w1, w3; /* r0 is a multiple of 32 (plan_tasks), as an FP8 slice needs */
    float *g = j->ga + s->off * F + cnt * r0, *u = j->ua + s->off * F + cnt * r0; /* this task's [cnt][len] */
    const float *x = j->xb + s->off * j->D;
    const ExpertWeights *ex = s->ex;
    if (di_matrix_rows(&ex->w1, r0, len, &w1) != 0 || di_matrix_rows(&ex->w3, r0, len, &w3) != 0 ||
        task_matmul(j->m, &w1, x, cnt, g, thread) != 0 || task_matmul(j->m, &w3, x, cnt, u, thread) != 0) {
        j->failed = 1;
        return;
    }
    for (int64_t t = 0; t < cnt; t++)
        j->m->be->swiglu(g + t * len, u + t * len, len, j->m->d.swiglu_limit, j->rw[s->off + t], j->hidden + (s->off + t) * F + r0);
    /* §4.3: w2's input rows go through FP8 here, slice by slice, instead of after the job on one
     * thread: r0 and len are multiples of 32 (plan_tasks; F is one, config.c), so
     * the slices' blocks are the rows' blocks */
    if (model_act_quant(j->m))
        for (int64_t t = 0; t < cnt; t++)
            if (j->m->be->roundtrip_fp8_block32(j->hidden + (s->off + t) * F + r0, (size_t)len) != 0) {
                j->failed = 1;
                return;
            }
}

/* Job B task: out = w2 · hidden for one row slice of w2. */
static void down_task(void *ctx, int task, int thread) {
    ExpertJob *j = ctx;
    const ExpertTask *t = &j->tasks_b[task];
    const ExpertSlot *s = &j->slots[t->slot];
    int64_t r0 = t->r0, len = t->len, D = j->D, cnt = s->cnt;
    DiMatrix w2;
    float *o = j->obs + s->off * D + cnt * r0;
    const ExpertWeights *ex = s->ex;
    if (di_matrix_rows(&ex->w2, r0, len, &w2) != 0 || task_matmul(j->m, &w2, j->hidden + s->off * j->F, cnt, o, thread) != 0) {
        j->failed = 1;
        return;
    }
    for (int64_t t = 0; t < cnt; t++) memcpy(j->ob + (s->off + t) * D + r0, o + t * len, (size_t)len * sizeof *o);
}

static int check_expert(const ExpertWeights *ex, int64_t D, int64_t F) {
    if (ex->w1.rows != F || ex->w1.cols != D || ex->w3.rows != F || ex->w3.cols != D || ex->w2.rows != D || ex->w2.cols != F)
        return di_errorf("expert weights are not [%lld, %lld] / [%lld, %lld]", (long long)F, (long long)D, (long long)D, (long long)F);
    if (di_matrix_validate(&ex->w1, "w1") != 0 || di_matrix_validate(&ex->w2, "w2") != 0 || di_matrix_validate(&ex->w3, "w3") != 0)
        return -1;
    return 0;
}

/* Run every slot's expert on its gathered rows (both jobs); ob receives the slots' rows, which
 * are contiguous (slot i + 1's follow slot i's). */
static int run_experts(const Model *m, ExpertJob *j, int n_slots) {
    bool aq = model_act_quant(m);
    if (n_slots <= 0) return 0;
    for (int i = 0; i < n_slots; i++)
        if (check_expert(j->slots[i].ex, j->D, j->F) != 0) return -1;
    /* §4.3: the FP8 round trip of each GEMM input row (cols are multiples of 32, so the flat
     * block-32 round trip is the per-row one model_linear applies) */
    int64_t first = j->slots[0].off, end = j->slots[n_slots - 1].off + j->slots[n_slots - 1].cnt;
    if (aq && !j->xb_quantised && m->be->roundtrip_fp8_block32((float *)j->xb + first * j->D, (size_t)((end - first) * j->D)) != 0)
        return -1;
    int target = TASKS_PER_THREAD * (m->pool ? di_pool_threads(m->pool) : 1);
    ExpertTask *tasks = m->ws->moe.tasks; /* room for 2 x (E + 1 + TASKS_PER_THREAD x threads) */
    int n_a = plan_tasks(j->slots, n_slots, j->F, target, tasks), n_b = plan_tasks(j->slots, n_slots, j->D, target, tasks + n_slots + target);
    j->tasks_a = tasks;
    j->tasks_b = tasks + n_slots + target;
    di_pool_run(m->pool, n_a, hidden_task, j);
    if (j->failed) return di_errorf("expert up-projection failed");
    di_pool_run(m->pool, n_b, down_task, j);
    if (j->failed) return di_errorf("expert down-projection failed");
    return 0;
}

/* The routed slots (the first n_slots - shared) through m's executor when it has one and lw is
 * a main layer, the shared slot here in between (it overlaps the remote work); else all here. */
static int run_all(const Model *m, const LayerWeights *lw, ExpertJob *j, int n_slots) {
    const MoeExecutor *ex = m->moe_exec;
    int64_t L = lw - m->w.layers;
    if (!ex || L < 0 || L >= m->d.n_layers)
        return run_experts(m, j, n_slots) != 0 ? di_error_wrap("MoE experts") : 0;
    int n_routed = lw->has_shared ? n_slots - 1 : n_slots;
    MoeRouted r = {lw, (int)L, n_routed, j->slots, j->xb, j->rw, m->ws->moe.rows, j->ob};
    if (ex->dispatch(ex->ctx, m, &r) != 0) return di_error_wrap("MoE layer %d: expert dispatch", (int)L);
    ExpertJob shared = *j;
    shared.slots = j->slots + n_routed;
    if (run_experts(m, &shared, n_slots - n_routed) != 0) return di_error_wrap("MoE shared expert");
    if (ex->combine(ex->ctx, m, &r) != 0) return di_error_wrap("MoE layer %d: expert combine", (int)L);
    return 0;
}

int model_set_moe_executor(Model *m, const MoeExecutor *exec) {
    if (!m) return di_errorf("model_set_moe_executor: no model given");
    if (exec && (!exec->dispatch || !exec->combine)) return di_errorf("model_set_moe_executor: executor without dispatch/combine");
    m->moe_exec = exec;
    return 0;
}

int moe_run_routed(const Model *m, const LayerWeights *lw, const WsExpertSlot *slots, int n_slots, float *x, bool x_quantised,
                   const float *w, float *y) {
    if (!m || !lw || (n_slots > 0 && (!slots || !x || !w || !y)) || n_slots < 0)
        return di_errorf("moe_run_routed: invalid arguments");
    int64_t rows = 0;
    for (int i = 0; i < n_slots; i++) {
        const ExpertWeights *e = slots[i].ex;
        if (e < lw->experts || e >= lw->experts + lw->n_experts || slots[i].off != rows || slots[i].cnt <= 0)
            return di_errorf("moe_run_routed: slot %d is not a routed expert of the layer on the next rows", i);
        rows += slots[i].cnt;
    }
    if (workspace_acquire(m) != 0) return -1;
    const Workspace *ws = m->ws;
    int rc = 0;
    int64_t most = 0; /* an expert's rows are one kernel call, whose scratch holds ws->rows */
    for (int i = 0; i < n_slots; i++) most = slots[i].cnt > most ? slots[i].cnt : most;
    if (rows > ws->rows * ws->moe.max_top_k || most > ws->rows || n_slots > ws->moe.max_experts)
        rc = di_errorf("moe_run_routed: %lld rows (%lld for one expert) of %d experts exceed the workspace of %lld rows",
                       (long long)rows, (long long)most, n_slots, (long long)ws->rows);
    ExpertJob j = {.m = m, .D = m->d.dim, .F = m->d.moe_inter, .hidden = ws->moe.hidden, .ga = ws->moe.gate, .ua = ws->moe.up,
                   .ob = y, .obs = ws->moe.y_task, .slots = slots, .xb = x, .rw = w, .xb_quantised = x_quantised};
    if (rc == 0 && run_experts(m, &j, n_slots) != 0) rc = di_error_wrap("routed experts");
    workspace_release(m);
    return rc;
}

/* Router (§5.7 steps 1-3): ids [n][top_k] best first and their weights. */
static int route(const Model *m, const LayerWeights *lw, int top_k, const float *f, int64_t n, float *logits, int32_t *ids,
                 float *wts) {
    const ModelDims *d = &m->d;
    int E = lw->n_experts;
    if (model_matmul(m, &lw->gate, f, n, logits) != 0) return -1;
    for (int64_t r = 0; r < n; r++)
        m->be->router(logits + r * E, lw->gate_bias, E, top_k, d->gate_temp, d->norm_topk, d->route_scale, ids + r * top_k,
                      wts + r * top_k);
    return 0;
}

int moe_forward(const Model *m, const LayerWeights *lw, int top_k, const float *f, int64_t n, float *y, int32_t *selected,
                int64_t *load) {
    const ModelDims *d = &m->d;
    int E = lw->n_experts;
    int64_t D = d->dim, F = d->moe_inter;
    if (top_k <= 0 || top_k > E) return di_errorf("MoE: top-k %d out of range for %d experts", top_k, E);
    const Workspace *ws = m->ws;
    int threads = m->pool ? di_pool_threads(m->pool) : 1;
    if (!ws || n > ws->rows || threads > ws->threads || E > ws->moe.max_experts || top_k > ws->moe.max_top_k)
        return di_errorf("MoE: %lld rows, %d threads, %d experts, top-%d exceed the workspace", (long long)n, threads, E, top_k);
    float *logits = ws->moe.router, *wts = ws->moe.weights, *xb = ws->moe.x, *rw = ws->moe.row_weight;
    int32_t *ids = ws->moe.ids;
    int64_t *rows = ws->moe.rows, *count = ws->moe.count;
    ExpertSlot *slots = ws->moe.slots;
    ExpertJob j = {.m = m, .D = D, .F = F, .hidden = ws->moe.hidden, .ga = ws->moe.gate, .ua = ws->moe.up, .ob = ws->moe.y, .obs = ws->moe.y_task};
    memset(count, 0, (size_t)(E + 1) * sizeof *count);
    if (route(m, lw, top_k, f, n, logits, ids, wts) != 0) return -1;
    if (selected) memcpy(selected, ids, (size_t)(n * top_k) * sizeof *ids);
    /* gather: routed experts in ascending id (rows ascending within each), then the shared one */
    for (int64_t i = 0; i < n * top_k; i++) {
        if (ids[i] < 0 || ids[i] >= E) return di_errorf("MoE: router chose expert %d of %d", ids[i], E);
        count[ids[i]]++;
    }
    if (load) /* EPLB's live load (model.h expert_load), before count[] turns into slot numbers */
        for (int e = 0; e < E; e++) load[e] += count[e];
    int n_slots = 0;
    int64_t off = 0;
    for (int e = 0; e < E; e++) {
        if (count[e] == 0) continue;
        slots[n_slots++] = (ExpertSlot){&lw->experts[e], off, 0};
        count[e] = n_slots; /* now the slot number + 1 */
        for (int64_t r = 0; r < n; r++)
            for (int k = 0; k < top_k; k++)
                if (ids[r * top_k + k] == e) {
                    ExpertSlot *s = &slots[n_slots - 1];
                    int64_t g = s->off + s->cnt++;
                    rows[g] = r;
                    rw[g] = wts[r * top_k + k];
                    memcpy(xb + g * D, f + r * D, (size_t)D * sizeof *xb);
                }
        off += slots[n_slots - 1].cnt;
    }
    if (lw->has_shared) {
        slots[n_slots++] = (ExpertSlot){&lw->shared, off, n};
        for (int64_t r = 0; r < n; r++) {
            rows[off + r] = r;
            rw[off + r] = 1.0f;
            memcpy(xb + (off + r) * D, f + r * D, (size_t)D * sizeof *xb);
        }
    }
    j.slots = slots;
    j.xb = xb;
    j.rw = rw;
    if (run_all(m, lw, &j, n_slots) != 0) return -1;
    /* each row's sum in ascending expert order, the shared expert last (slot order) */
    memset(y, 0, (size_t)(n * D) * sizeof *y);
    for (int i = 0; i < n_slots; i++)
        for (int64_t t = slots[i].off; t < slots[i].off + slots[i].cnt; t++)
            for (int64_t c = 0; c < D; c++) y[rows[t] * D + c] += j.ob[t * D + c];
    return 0;
}
