/* state_undo.h — undoing the rejected rows of a speculative verify (engine-features.md §1.3 n,
 * §1.5).
 *
 * A verify forward writes the state of every row it runs (anchor + drafts) before the engine
 * knows how many are accepted.  The counters of a request's state are functions of its position
 * count, so cutting it back to start + keep positions only has to put back the rows a later
 * forward reads and the rejected rows overwrote:
 *   window rings and DSpark rings  the slots of the rejected positions held positions W earlier
 *   compressor pending rows         the (κ, ζ) rows of the committed length's open group, which
 *                                   later rejected positions of the chunk may have replaced
 *   Engram history                  the compressed ids of the last committed positions
 * Compressed-KV and index-key entries past floor(n / m) are simply overwritten later.
 *
 * state_undo_save runs before the forward (snapshot of the slots it is about to write, and a log
 * of the pending rows the chunk writes, fed by the compressor through state_log_pending);
 * state_undo_commit after it.  One record per speculative request of the batch; the buffers are
 * sized by state_undo_reserve (the engine's max batch rows), so a step allocates nothing. */
#ifndef DI_MODEL_STATE_UNDO_H
#define DI_MODEL_STATE_UNDO_H

#include "model/model.h"
#include "model/state.h"

typedef struct StateUndo StateUndo;

StateUndo *state_undo_create(const ModelDims *d);
void state_undo_free(StateUndo *u);
/* Room for records covering `rows` verify rows in all (at most one record per row).  Grows only. */
int state_undo_reserve(StateUndo *u, int64_t rows);
/* Forget every record (the next batch starts). */
void state_undo_clear(StateUndo *u);
/* Before a forward of n rows on st (holding st->n_pos positions, pages covering n_pos + n):
 * snapshot what the forward overwrites and start logging the chunk's pending rows into the record.
 * n must not exceed the window (a ring slot would be written twice).  Returns the record's index,
 * or -1 when the reserved room is exceeded or n is out of range. */
int state_undo_save(StateUndo *u, RunState *st, int64_t n);
/* After that forward, st re-attached at the same pages (any n_pos): cut the request back to
 * start + keep positions (1 <= keep <= n), tokens being the n tokens of the chunk.  Leaves st
 * holding start + keep positions and stops its log. */
int state_undo_commit(StateUndo *u, int record, const Model *m, RunState *st, const int32_t *tokens, int64_t keep);

#endif
