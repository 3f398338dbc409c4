/* state.c — per-request decode state (state.h). */
#include "model/state.h"

#include "base/error.h"
#include "base/mem.h"

#include <stdlib.h>
#include <string.h>

RunState *state_create(const ModelDims *d) {
    if (!d || d->window <= 0 || d->head_dim <= 0) {
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
    size_t ring = (size_t)d->window * (size_t)d->head_dim;
    st->window_rows = di_calloc((size_t)d->n_layers * ring, sizeof(float), "window rings");
    st->dspark_rows = d->n_mtp ? di_calloc((size_t)d->n_mtp * ring, sizeof(float), "DSpark rings") : NULL;
    st->kv = st->n_kv ? di_calloc((size_t)st->n_kv, sizeof *st->kv, "KV source states") : NULL;
    if (!st->window_rows || (d->n_mtp && !st->dspark_rows) || (st->n_kv && !st->kv)) goto fail;
    for (int L = 0; L < d->n_layers; L++) {
        int k = d->kv_slot[L];
        if (k < 0) continue;
        int m = d->ratio[L];
        if (m > 1) {
            st->kv[k].pend_kv = di_calloc((size_t)(m - 1) * (size_t)d->head_dim, sizeof(float), "pending rows");
            st->kv[k].pend_gate = di_calloc((size_t)(m - 1) * (size_t)d->head_dim, sizeof(float), "pending rows");
            if (!st->kv[k].pend_kv || !st->kv[k].pend_gate) goto fail;
        }
    }
    return st;
fail:
    state_free(st);
    return NULL;
}

void state_free(RunState *st) {
    if (!st) return;
    for (int k = 0; k < st->n_kv && st->kv; k++) {
        free(st->kv[k].comp);
        free(st->kv[k].ikeys);
        free(st->kv[k].pend_kv);
        free(st->kv[k].pend_gate);
    }
    free(st->kv);
    free(st->window_rows);
    free(st->dspark_rows);
    free(st);
}

void state_reset(RunState *st) {
    if (!st) return;
    st->n_pos = 0;
    for (int k = 0; k < st->n_kv; k++) {
        st->kv[k].n_rows = 0;
        st->kv[k].n_pending = 0;
    }
    memset(st->hist, 0, sizeof st->hist);
}

float *state_window_row(RunState *st, int layer, int64_t pos) {
    return st->window_rows + ((size_t)layer * (size_t)st->window + (size_t)(pos % st->window)) * (size_t)st->head_dim;
}

float *state_dspark_row(RunState *st, int stage, int64_t pos) {
    return st->dspark_rows + ((size_t)stage * (size_t)st->window + (size_t)(pos % st->window)) * (size_t)st->head_dim;
}

float *state_comp_row(RunState *st, int slot, int64_t g) { return st->kv[slot].comp + (size_t)g * (size_t)st->head_dim; }
float *state_ikey_row(RunState *st, int slot, int64_t g) { return st->kv[slot].ikeys + (size_t)g * (size_t)st->idx_head_dim; }

int64_t state_kv_append(RunState *st, int slot) {
    KvSourceState *kv = &st->kv[slot];
    if (kv->n_rows == kv->cap_rows) {
        int64_t cap = kv->cap_rows ? kv->cap_rows * 2 : 64;
        float *c = di_realloc_array(kv->comp, (size_t)cap * (size_t)st->head_dim, sizeof(float), "compressed KV rows");
        if (!c) return -1;
        kv->comp = c;
        float *k = di_realloc_array(kv->ikeys, (size_t)cap * (size_t)st->idx_head_dim, sizeof(float), "index-key rows");
        if (!k) return -1;
        kv->ikeys = k;
        kv->cap_rows = cap;
    }
    return kv->n_rows++;
}
