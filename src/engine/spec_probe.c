/* spec_probe.c — the start-up step-cost probe of speculative decoding (see spec_probe.h). */
#include "engine/spec_probe.h"

#include "base/error.h"
#include "base/log.h"
#include "base/mem.h"
#include "engine/step.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct {
    DiPageTable *tables;
    DiRunnerSeq *seqs;
    int32_t *tokens;        /* rows_per_seq token ids (0): any token costs the same */
    int n_seqs;             /* scratch sequences that got their pages */
} Scratch;

static void scratch_free(const DiSpecProbe *p, Scratch *s, int cap) {
    for (int i = 0; s->tables && i < cap; i++) {
        di_page_table_release(p->pool, &s->tables[i]);
        di_page_table_free(&s->tables[i]);
    }
    free(s->tables);
    free(s->seqs);
    free(s->tokens);
}

/* Pages for up to cap sequences of rows_per_seq tokens; fewer when the pool runs short. */
static int scratch_init(const DiSpecProbe *p, Scratch *s, int cap) {
    s->tables = di_calloc((size_t)cap, sizeof *s->tables, "cost probe pages");
    s->seqs = di_calloc((size_t)cap, sizeof *s->seqs, "cost probe sequences");
    s->tokens = di_calloc((size_t)p->rows_per_seq, sizeof *s->tokens, "cost probe tokens");
    if (!s->tables || !s->seqs || !s->tokens) return -1;
    size_t pages = p->runner->ops->pages_for_tokens(p->runner, p->rows_per_seq);
    for (s->n_seqs = 0; s->n_seqs < cap; s->n_seqs++) {
        if (di_page_table_reserve(p->pool, &s->tables[s->n_seqs], pages) != 0) {
            di_error_clear(); /* a small pool measures the sizes it can hold */
            break;
        }
    }
    return 0;
}

/* One timed forward of `rows` rows: verify-shaped sequences (all rows give logits) at position 0
 * of fresh pages, which the runner must accept (runner.h). */
static int time_forward(const DiSpecProbe *p, Scratch *s, int64_t rows, double *seconds) {
    int n = 0;
    for (int64_t left = rows; left > 0; n++) {
        int32_t t = left < p->rows_per_seq ? (int32_t)left : p->rows_per_seq;
        s->seqs[n] = (DiRunnerSeq){.pages = s->tables[n].pages, .n_pages = s->tables[n].n, .tokens = s->tokens,
                                   .n_tokens = t, .start_pos = 0, .n_logits = t};
        left -= t;
    }
    DiRunnerBatch batch = {s->seqs, n, false, p->logits};
    double t0 = di_now_seconds();
    if (p->runner->ops->forward(p->runner, &batch) != 0) return di_error_wrap("step-cost probe (%lld rows)", (long long)rows);
    *seconds = di_now_seconds() - t0;
    return 0;
}

static void log_curve(const DiSpecControl *c) {
    double rows[64], seconds[64];
    int n = di_spec_cost_points(&c->cost, rows, seconds, 64);
    char line[1024];
    int at = snprintf(line, sizeof line, "speculation: step-cost curve at start-up (rows: ms):");
    for (int i = 0; i < n && i < 64 && at > 0 && (size_t)at < sizeof line; i++)
        at += snprintf(line + at, sizeof line - (size_t)at, " %.0f: %.3f", rows[i], seconds[i] * 1e3);
    di_log(DI_LOG_INFO, "%s", line);
}

int di_spec_probe_cost(const DiSpecProbe *p, DiSpecControl *c) {
    if (!p || !c || !p->runner || !p->pool || !p->logits || p->max_rows < 1 || p->rows_per_seq < 1 ||
        !(p->budget_s > 0))
        return di_errorf("step-cost probe: bad arguments");
    int cap = (int)((p->max_rows + p->rows_per_seq - 1) / p->rows_per_seq);
    Scratch s = {0};
    int measured = -1;
    if (scratch_init(p, &s, cap) != 0) goto done;
    int64_t max_rows = (int64_t)s.n_seqs * p->rows_per_seq < p->max_rows ? (int64_t)s.n_seqs * p->rows_per_seq
                                                                          : p->max_rows;
    double warm, start = di_now_seconds();
    measured = 0;
    if (max_rows < 1) goto done;
    if (time_forward(p, &s, 1, &warm) != 0) { /* the first forward warms up */
        measured = -1;
        goto done;
    }
    for (int64_t rows = 1;; rows = rows * 2 < max_rows ? rows * 2 : max_rows) { /* one size at least */
        double seconds = 0, again = 0; /* the faster of two: a shared CPU's stalls only add time */
        if (time_forward(p, &s, rows, &seconds) != 0 || time_forward(p, &s, rows, &again) != 0) {
            measured = -1;
            goto done;
        }
        if (again < seconds) seconds = again;
        di_spec_control_timing(c, rows, seconds, 0, 0);
        measured++;
        if (rows == max_rows || di_now_seconds() - start >= p->budget_s) break;
    }
    log_curve(c);
done:
    scratch_free(p, &s, cap);
    return measured;
}
