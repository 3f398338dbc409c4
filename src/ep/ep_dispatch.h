/* ep_dispatch.h — expert-parallel dispatch and combine, independent of the transport
 * (serving.md §9.2), and the messages rank 0 and the expert ranks exchange.
 *
 * Rank 0 gathers a MoE layer's rows as moe_forward always does (routed experts in ascending id,
 * rows ascending within each).  Dispatch: every gathered row goes to the rank of the replica its
 * token chooses (ep_place.h); per destination rank a header (the counts: tokens, assignments,
 * bytes) goes first, then one payload holding each token's hidden state ONCE (a token with two
 * experts on the same rank is sent once) and per assignment (token, expert, routing weight), in
 * gathered order.  The rank runs its experts on those rows with the same kernels (matmuls are
 * batch-invariant: a row's bits do not depend on which other rows share the call) and returns
 * one output row per assignment, in the same order.  Combine puts each back at its gathered
 * row; moe_forward then sums in its fixed order (ascending expert, shared expert last), so the
 * layer's output is bit-identical for any number of ranks and any placement.
 *
 * Activations travel as float32, not as DeepEP's FP8 (left out on purpose): exactness does not
 * need it, and it would only shrink one direction.  Under the `ref` numerics the expert's GEMM
 * input goes through the FP8 block-32 round trip on the expert rank anyway, so E4M3 codes plus
 * one scale per 32 values on the wire would be exact there and cut the dispatch payload ~3.8x;
 * but the kvq and exact numerics multiply by the unquantised row, and the combine rows are
 * expert outputs that FP8 would round.  float32 keeps every mode bit-exact with one format.
 *
 * Payload of one destination, 4-byte elements: int32 tok[n_asg] (index into this message's
 * tokens), int32 expert[n_asg], float weight[n_asg], float x[n_tok][D].  Reply: float
 * y[n_asg][D]. */
#ifndef DI_EP_EP_DISPATCH_H
#define DI_EP_EP_DISPATCH_H

#include "ep/ep_place.h"
#include "model/moe.h"

#include <stddef.h>
#include <stdint.h>

/* Commands rank 0 sends; the header is the "counts" message that precedes every payload. */
enum { EP_CMD_INIT = 1, EP_CMD_PLAN = 2, EP_CMD_LAYER = 3, EP_CMD_STOP = 4 };
typedef struct {
    int64_t cmd, layer, n_tok, n_asg;
    int64_t bytes;       /* payload bytes that follow (0: none) */
    int64_t reply_bytes; /* bytes the rank answers with (0: no answer) */
} EpHeader;
#define EP_HEADER_WORDS 6 /* int64 words of EpHeader */

/* Rank 0's buffers for one MoE call, reused call to call. */
typedef struct {
    int n_ranks;
    EpHeader *hdr;          /* [n_ranks] */
    int64_t *asg_off;       /* [n_ranks + 1] assignments of rank r: asg_off[r] .. asg_off[r+1]-1 */
    size_t *pay_off;        /* [n_ranks + 1] payload byte offsets in buf */
    uint8_t *buf;
    int64_t *asg_row;       /* [assignments] the gathered row of each, grouped by rank */
    float *reply;           /* [assignments][D], grouped by rank */
    int32_t *dst;           /* [rows] destination rank of each gathered row */
    int32_t *tok_idx;       /* [n_tokens] scratch: a token's index in the current rank's message */
    size_t cap_buf, cap_asg, cap_rows, cap_tok, cap_reply;
} EpPack;

/* Lay out and pack the routed rows of r (layer r->layer of a model with hidden size D) for
 * n_ranks ranks by placement pl.  Afterwards hdr[k] is rank k's header (n_asg 0: nothing to
 * send), its payload at buf + pay_off[k]. */
int ep_pack_build(EpPack *pk, const EpPlacement *pl, const MoeRouted *r, int64_t D, int n_ranks);
/* Put rank k's reply rows (reply + asg_off[k] * D) back at their gathered rows of r->y. */
void ep_pack_combine(const EpPack *pk, const MoeRouted *r, int64_t D);
void ep_pack_free(EpPack *pk);

/* An expert rank's scratch for serving layers. */
typedef struct {
    WsExpertSlot *slots;
    float *x, *w;
    int32_t *tok, *expert;
    size_t cap_slots, cap_tok, cap_expert, cap_w, cap_x;
} EpServe;

/* Serve one LAYER message on `rank`: every assignment's expert must be one pl places on this
 * rank, in ascending order; y receives h->n_asg rows of m->d.dim. */
int ep_serve_layer(EpServe *sv, const Model *m, const EpPlacement *pl, int rank, const EpHeader *h, const uint8_t *payload,
                   float *y);
void ep_serve_free(EpServe *sv);

#endif
