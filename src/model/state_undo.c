/* state_undo.c — snapshot before a speculative verify, cut back after it (state_undo.h). */
#include "model/state_undo.h"

#include "base/error.h"
#include "base/mem.h"
#include "model/engram.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    RunState *st;
    int64_t start, n;
    int64_t row0; /* first of the record's rows in ring / log */
} UndoRecord;

struct StateUndo {
    int n_layers, n_mtp, n_kv, window, hist;
    int64_t dh, pend_rows; /* floats per row; pending rows of all ratio > 1 sources */
    int ratio[DIMS_MAX_LAYERS];
    int64_t cap_rows, used_rows;
    int n_records;
    UndoRecord *rec;  /* [cap_rows] */
    float *ring;      /* [cap_rows][n_layers + n_mtp][dh]: slots before the forward */
    float *log;       /* [cap_rows][n_kv][2][dh]: pending rows the chunk wrote */
    float *pend;      /* [cap_rows][pend_rows][dh]: pending rows before the forward */
    int32_t *history; /* [cap_rows][DIMS_MAX_NGRAM] */
};

StateUndo *state_undo_create(const ModelDims *d) {
    if (!d || d->n_layers <= 0 || d->window <= 0 || d->head_dim <= 0) {
        di_errorf("state undo: invalid model dims");
        return NULL;
    }
    StateUndo *u = di_calloc(1, sizeof *u, "speculative undo");
    if (!u) return NULL;
    u->n_layers = d->n_layers;
    u->n_mtp = d->n_mtp;
    u->n_kv = d->n_kv_sources;
    u->window = d->window;
    u->dh = d->head_dim;
    u->hist = d->engram_max_ngram > 1 ? d->engram_max_ngram - 1 : 0;
    for (int L = 0; L < d->n_layers; L++) {
        int k = d->layer[L].kv_slot;
        if (k < 0) continue;
        u->ratio[k] = d->layer[L].compress_ratio;
        if (d->layer[L].compress_ratio > 1) u->pend_rows += 2 * (d->layer[L].compress_ratio - 1);
    }
    return u;
}

void state_undo_free(StateUndo *u) {
    if (!u) return;
    free(u->rec);
    free(u->ring);
    free(u->log);
    free(u->pend);
    free(u->history);
    free(u);
}

int state_undo_reserve(StateUndo *u, int64_t rows) {
    if (!u || rows < 1) return di_errorf("state undo: invalid reservation of %lld rows", (long long)rows);
    if (rows <= u->cap_rows) return 0;
    size_t n = (size_t)rows, dh = (size_t)u->dh;
    UndoRecord *rec = di_realloc_array(u->rec, n, sizeof *rec, "undo records");
    if (rec) u->rec = rec;
    float *ring = rec ? di_realloc_array(u->ring, n * (size_t)(u->n_layers + u->n_mtp), dh * sizeof(float), "undo ring rows") : NULL;
    if (ring) u->ring = ring;
    float *log = ring ? di_realloc_array(u->log, n * (size_t)(u->n_kv ? u->n_kv : 1) * 2, dh * sizeof(float), "undo pending log") : NULL;
    if (log) u->log = log;
    float *pend = log ? di_realloc_array(u->pend, n * (size_t)(u->pend_rows ? u->pend_rows : 1), dh * sizeof(float), "undo pending rows") : NULL;
    if (pend) u->pend = pend;
    int32_t *history = pend ? di_realloc_array(u->history, n, DIMS_MAX_NGRAM * sizeof(int32_t), "undo Engram history") : NULL;
    if (!history) return di_error_wrap("state undo: room for %lld rows", (long long)rows);
    u->history = history;
    u->cap_rows = rows;
    return 0;
}

void state_undo_clear(StateUndo *u) {
    if (!u) return;
    for (int i = 0; i < u->n_records; i++) state_log_pending_stop(u->rec[i].st);
    u->n_records = 0;
    u->used_rows = 0;
}

/* Slot j (window rings of every layer, then DSpark rings) of position pos. */
static float *ring_slot(RunState *st, const StateUndo *u, int j, int64_t pos) {
    return j < u->n_layers ? state_window_row(st, j, pos) : state_dspark_row(st, j - u->n_layers, pos);
}

/* The record's copy of ring slot j of its row i, of pending row j, and its log row of position q. */
static float *ring_copy(const StateUndo *u, const UndoRecord *r, int64_t i, int j) {
    return u->ring + ((size_t)(r->row0 + i) * (size_t)(u->n_layers + u->n_mtp) + (size_t)j) * (size_t)u->dh;
}

static float *pend_copy(const StateUndo *u, const UndoRecord *r, int64_t j) {
    return u->pend + ((size_t)r->row0 * (size_t)(u->pend_rows ? u->pend_rows : 1) + (size_t)j) * (size_t)u->dh;
}

static float *log_row(const StateUndo *u, const UndoRecord *r, int64_t q, int k, int which) {
    size_t row = (size_t)(r->row0 + q - r->start) * (size_t)(u->n_kv ? u->n_kv : 1) + (size_t)k;
    return u->log + (row * 2 + (size_t)which) * (size_t)u->dh;
}

int state_undo_save(StateUndo *u, RunState *st, int64_t n) {
    if (!u || !st || n < 1 || n > u->window)
        return di_errorf("state undo: a speculative chunk of %lld rows (the window is %d)", (long long)n, u ? u->window : 0);
    if (u->used_rows + n > u->cap_rows || u->n_records >= u->cap_rows)
        return di_errorf("state undo: %lld speculative rows exceed the %lld reserved", (long long)(u->used_rows + n), (long long)u->cap_rows);
    UndoRecord *r = &u->rec[u->n_records];
    *r = (UndoRecord){st, st->n_pos, n, u->used_rows};
    int slots = u->n_layers + u->n_mtp;
    size_t dh = (size_t)u->dh * sizeof(float);
    for (int64_t i = 0; i < n; i++)
        for (int j = 0; j < slots; j++) memcpy(ring_copy(u, r, i, j), ring_slot(st, u, j, r->start + i), dh);
    int64_t pj = 0;
    for (int k = 0; k < u->n_kv; k++)
        for (int which = 0; which < 2 && u->ratio[k] > 1; which++)
            for (int row = 0; row < u->ratio[k] - 1; row++) memcpy(pend_copy(u, r, pj++), state_pending_row(st, k, which, row), dh);
    memset(u->history + (size_t)r->row0 * DIMS_MAX_NGRAM, 0, DIMS_MAX_NGRAM * sizeof(int32_t));
    if (u->hist > 0) memcpy(u->history + (size_t)r->row0 * DIMS_MAX_NGRAM, state_engram_history(st), (size_t)u->hist * sizeof(int32_t));
    state_log_pending_start(st, log_row(u, r, r->start, 0, 0), r->start, n);
    u->used_rows += n;
    return u->n_records++;
}

/* The open group of the committed length: pending rows from before the forward, then the ones
 * the chunk's accepted rows wrote (the log). */
static void restore_pending(const StateUndo *u, const UndoRecord *r, RunState *st, int64_t committed) {
    size_t dh = (size_t)u->dh * sizeof(float);
    int64_t pj = 0;
    for (int k = 0; k < u->n_kv; k++) {
        int m = u->ratio[k];
        if (m <= 1) continue;
        for (int which = 0; which < 2; which++)
            for (int row = 0; row < m - 1; row++) memcpy(state_pending_row(st, k, which, row), pend_copy(u, r, pj++), dh);
        int64_t g0 = committed / m * m;
        for (int64_t q = g0 > r->start ? g0 : r->start; q < committed; q++)
            for (int which = 0; which < 2; which++) memcpy(state_pending_row(st, k, which, (int)(q - g0)), log_row(u, r, q, k, which), dh);
    }
}

int state_undo_commit(StateUndo *u, int record, const Model *m, RunState *st, const int32_t *tokens, int64_t keep) {
    if (!u || !m || !st || !tokens || record < 0 || record >= u->n_records) return di_errorf("state undo: invalid commit (record %d)", record);
    const UndoRecord *r = &u->rec[record];
    if (keep < 1 || keep > r->n) return di_errorf("state undo: keep %lld of a %lld-row chunk", (long long)keep, (long long)r->n);
    state_log_pending_stop(st);
    int slots = u->n_layers + u->n_mtp;
    size_t dh = (size_t)u->dh * sizeof(float);
    for (int64_t i = keep; i < r->n; i++)
        for (int j = 0; j < slots; j++) memcpy(ring_slot(st, u, j, r->start + i), ring_copy(u, r, i, j), dh);
    restore_pending(u, r, st, r->start + keep);
    if (u->hist > 0) memcpy(state_engram_history(st), u->history + (size_t)r->row0 * DIMS_MAX_NGRAM, (size_t)u->hist * sizeof(int32_t));
    engram_push_history(m, st, tokens, keep);
    state_set_positions(st, r->start + keep);
    return 0;
}
