/* state.c — per-request decode state, owned or paged (state.h). */
#include "model/state.h"

#include "base/error.h"
#include "base/mem.h"

#include <stdlib.h>
#include <string.h>

/* The sizes and counters every state has, owned or paged. */
static RunState *state_alloc_header(const ModelDims *d) {
    if (!d || d->window <= 0 || d->head_dim <= 0 || d->n_layers <= 0) {
        di_errorf("state: invalid model dims");
        return NULL;
    }
    RunState *st = di_calloc(1, sizeof *st, "request state");
    if (!st) return NULL;
    st->n_layers = d->n_layers;
    st->n_mtp = d->n_mtp;
    st->window = d->window;
    st->head_dim = d->head_dim;
    st->idx_head_dim = d->idx_head_dim;
    st->n_kv = d->n_kv_sources;
    st->ngram_hist = d->engram_max_ngram > 1 ? d->engram_max_ngram - 1 : 0;
    return st;
}

RunState *state_create(const ModelDims *d) {
    RunState *st = state_alloc_header(d);
    if (!st) return NULL;
    size_t ring = (size_t)d->window * (size_t)d->head_dim;
    st->window_rows = di_calloc((size_t)d->n_layers * ring, sizeof(float), "window rings");
    st->dspark_rows = d->n_mtp ? di_calloc((size_t)d->n_mtp * ring, sizeof(float), "DSpark rings") : NULL;
    st->kv = st->n_kv ? di_calloc((size_t)st->n_kv, sizeof *st->kv, "KV source states") : NULL;
    if (!st->window_rows || (d->n_mtp && !st->dspark_rows) || (st->n_kv && !st->kv)) goto fail;
    for (int L = 0; L < d->n_layers; L++) {
        int k = d->layer[L].kv_slot;
        if (k < 0) continue;
        int m = d->layer[L].compress_ratio;
        st->kv_ratio[k] = m;
        if (m > 1) {
            st->kv[k].pend = di_calloc((size_t)(2 * (m - 1)) * (size_t)d->head_dim, sizeof(float), "pending rows");
            if (!st->kv[k].pend) goto fail;
        }
    }
    return st;
fail:
    state_free(st);
    return NULL;
}

/* A state for paged use only: the counters and per-source bookkeeping, no owned rows (every
 * row of a paged state lives in the engine's pages, see state_attach_pages). */
RunState *state_create_paged(const ModelDims *d) {
    RunState *st = state_alloc_header(d);
    if (!st) return NULL;
    st->kv = st->n_kv ? di_calloc((size_t)st->n_kv, sizeof *st->kv, "KV source states") : NULL;
    if (st->n_kv && !st->kv) {
        free(st);
        return NULL;
    }
    for (int L = 0; L < d->n_layers; L++)
        if (d->layer[L].kv_slot >= 0) st->kv_ratio[d->layer[L].kv_slot] = d->layer[L].compress_ratio;
    return st;
}

void state_free(RunState *st) {
    if (!st) return;
    for (int k = 0; k < st->n_kv && st->kv; k++) {
        free(st->kv[k].comp);
        free(st->kv[k].ikeys);
        free(st->kv[k].pend);
    }
    free(st->kv);
    free(st->window_rows);
    free(st->dspark_rows);
    free(st);
}

void state_reset(RunState *st) {
    if (!st) return;
    st->n_pos = 0;
    st->paged = false;
    st->pages = NULL;
    st->n_pages = 0;
    st->replay_start = st->replay_end = 0;
    state_log_pending_stop(st);
    state_set_positions(st, 0);
    memset(st->hist_own, 0, sizeof st->hist_own);
}

/* ------------------------------------------------------------------ paged layout */

/* The fixed components of the state, in page order; -1 indices for the absent ones. */
static int fixed_components(const ModelDims *d, StateLayout *l, DiStateComponent *c) {
    size_t slot = (size_t)d->head_dim * sizeof(float);
    int n = 0;
    int64_t pending = 0;
    l->c_window = n;
    c[n++] = (DiStateComponent){"window rings", slot, (int64_t)d->n_layers * d->window, 0};
    l->c_dspark = d->n_mtp > 0 ? n : -1;
    if (d->n_mtp > 0) c[n++] = (DiStateComponent){"DSpark rings", slot, (int64_t)d->n_mtp * d->window, 0};
    for (int L = 0; L < d->n_layers; L++) {
        int k = d->layer[L].kv_slot, m = d->layer[L].compress_ratio;
        if (k < 0) continue;
        l->pending_row0[k] = pending;
        if (m > 1) pending += 2 * (m - 1);
    }
    l->c_pending = pending > 0 ? n : -1;
    if (pending > 0) c[n++] = (DiStateComponent){"compressor pending rows", slot, pending, 0};
    l->c_hist = n;
    c[n++] = (DiStateComponent){"Engram history", slot, 1, 0};
    return n;
}

int state_layout(const ModelDims *d, size_t page_bytes, StateLayout *l) {
    if (!d || !l) return di_errorf("state layout: invalid arguments");
    memset(l, 0, sizeof *l);
    if (page_bytes % 64) return di_errorf("state layout: page of %zu bytes is not a multiple of 64", page_bytes);
    if (d->engram_max_ngram > d->head_dim) return di_errorf("state layout: Engram history does not fit one row");
    if (d->n_kv_sources + 4 > DI_STATE_MAX_COMPONENTS)
        return di_errorf("state layout: %d KV sources exceed the layout's %d components", d->n_kv_sources, DI_STATE_MAX_COMPONENTS);
    DiStateComponent c[DI_STATE_MAX_COMPONENTS];
    int n = fixed_components(d, l, c);
    l->entry_floats = (int64_t)d->head_dim + d->idx_head_dim;
    l->c_entries0 = n;
    for (int L = 0; L < d->n_layers; L++)
        if (d->layer[L].kv_slot >= 0)
            c[l->c_entries0 + d->layer[L].kv_slot] = (DiStateComponent){"compressed KV + index key entries",
                                                                        (size_t)l->entry_floats * sizeof(float), 0, d->layer[L].compress_ratio};
    return di_state_layout_init(&l->pages, page_bytes, c, n + d->n_kv_sources);
}

int64_t state_pages_for_tokens(const StateLayout *l, int64_t n_tokens) {
    return (int64_t)di_state_layout_pages(&l->pages, n_tokens);
}

int state_attach_pages(RunState *st, const StateLayout *l, uint8_t *const *pages, size_t n_pages, int64_t n_pos) {
    if (!st || !l || (!pages && n_pages) || n_pos < 0) return di_errorf("state: invalid pages");
    if ((int64_t)n_pages < state_pages_for_tokens(l, n_pos))
        return di_errorf("state: %zu pages cannot hold %lld positions (need %lld)", n_pages, (long long)n_pos,
                         (long long)state_pages_for_tokens(l, n_pos));
    st->paged = true;
    st->layout = *l;
    st->pages = pages;
    st->n_pages = n_pages;
    state_set_positions(st, n_pos);
    return 0;
}

void state_set_positions(RunState *st, int64_t n_pos) {
    st->n_pos = n_pos;
    for (int k = 0; k < st->n_kv; k++) {
        int m = st->kv_ratio[k];
        st->kv[k].n_rows = m > 0 ? n_pos / m : 0;
        st->kv[k].n_pending = m > 1 ? (int)(n_pos % m) : 0;
    }
}

/* ------------------------------------------------------------------ pending-row log */

void state_log_pending_start(RunState *st, float *log, int64_t start, int64_t rows) {
    st->pend_log = log;
    st->pend_log_start = start;
    st->pend_log_rows = rows;
}

void state_log_pending_stop(RunState *st) {
    if (st) st->pend_log = NULL;
}

void state_log_pending(RunState *st, int slot, int64_t pos, const float *kappa, const float *zeta) {
    int64_t i = pos - st->pend_log_start;
    if (!st->pend_log || i < 0 || i >= st->pend_log_rows) return;
    size_t dh = (size_t)st->head_dim;
    float *row = st->pend_log + ((size_t)i * (size_t)st->n_kv + (size_t)slot) * 2 * dh;
    memcpy(row, kappa, dh * sizeof *row);
    memcpy(row + dh, zeta, dh * sizeof *row);
}

static float *row_ptr(RunState *st, int component, int64_t row) {
    return (float *)di_state_row(&st->layout.pages, st->pages, st->n_pages, component, row);
}

/* ------------------------------------------------------------------ accessors */

float *state_window_row(RunState *st, int layer, int64_t pos) {
    int64_t slot = (int64_t)layer * st->window + pos % st->window;
    if (st->paged) return row_ptr(st, st->layout.c_window, slot);
    return st->window_rows + (size_t)slot * (size_t)st->head_dim;
}

float *state_dspark_row(RunState *st, int stage, int64_t pos) {
    int64_t slot = (int64_t)stage * st->window + pos % st->window;
    if (st->paged) return row_ptr(st, st->layout.c_dspark, slot);
    return st->dspark_rows + (size_t)slot * (size_t)st->head_dim;
}

float *state_pending_row(RunState *st, int slot, int which, int r) {
    int m = st->kv_ratio[slot];
    if (st->paged) return row_ptr(st, st->layout.c_pending, st->layout.pending_row0[slot] + (int64_t)which * (m - 1) + r);
    return st->kv[slot].pend + ((size_t)which * (size_t)(m - 1) + (size_t)r) * (size_t)st->head_dim;
}

int32_t *state_engram_history(RunState *st) {
    if (st->paged) return (int32_t *)row_ptr(st, st->layout.c_hist, 0);
    return st->hist_own;
}

float *state_comp_row(RunState *st, int slot, int64_t g) {
    if (st->paged) return row_ptr(st, st->layout.c_entries0 + slot, g);
    return st->kv[slot].comp + (size_t)g * (size_t)st->head_dim;
}

float *state_ikey_row(RunState *st, int slot, int64_t g) {
    if (st->paged) return row_ptr(st, st->layout.c_entries0 + slot, g) + st->head_dim;
    return st->kv[slot].ikeys + (size_t)g * (size_t)st->idx_head_dim;
}

const float *state_ikey_span(RunState *st, int slot, int64_t g, int64_t *stride, int64_t *run) {
    if (st->paged) { /* a growing component's rows are contiguous within one page's chunk */
        int c = st->layout.c_entries0 + slot;
        int64_t per_page = st->layout.pages.rows_per_page[c];
        *stride = (int64_t)(st->layout.pages.comp[c].row_bytes / sizeof(float));
        *run = per_page - g % per_page;
    } else {
        *stride = st->idx_head_dim;
        *run = st->kv[slot].n_rows > g ? st->kv[slot].n_rows - g : 1;
    }
    return state_ikey_row(st, slot, g);
}

int64_t state_kv_append(RunState *st, int slot) {
    KvSourceState *kv = &st->kv[slot];
    if (st->paged) {
        if (!row_ptr(st, st->layout.c_entries0 + slot, kv->n_rows))
            return di_errorf("state: entry %lld of KV source %d beyond the %zu attached pages", (long long)kv->n_rows, slot, st->n_pages);
        return kv->n_rows++;
    }
    /* two arrays of rows, one capacity; a row is head_dim (idx_head_dim) floats */
    size_t cap = (size_t)kv->cap_rows, cap_ikeys = (size_t)kv->cap_rows, need = (size_t)kv->n_rows + 1;
    if (di_grow(&kv->comp, &cap, need, 64, (size_t)st->head_dim * sizeof(float), "compressed KV rows") != 0 ||
        di_grow(&kv->ikeys, &cap_ikeys, need, 64, (size_t)st->idx_head_dim * sizeof(float), "index-key rows") != 0)
        return -1;
    kv->cap_rows = (int64_t)cap;
    return kv->n_rows++;
}
