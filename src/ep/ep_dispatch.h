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
 * How a token's row travels (EpWire) is fixed for the job at ep_attach and told to the expert
 * ranks at INIT.  Under the `ref` numerics the expert's GEMM input goes through the FP8 round trip
 * of §4.3 anyway (E4M3 per block of 32 values with a power-of-two scale, numformats.h), so rank 0
 * sends that round trip's result in its wire form, the E4M3 codes and one UE8M0 scale byte per
 * 32 values (D + D/32 bytes a row instead of 4 D, 3.88x fewer), and the expert rank decodes it to
 * the very floats the local path would multiply by (and does not round-trip them again): FP8 is
 * the default there and bit-exact.  The kvq and exact numerics multiply by the unquantised row,
 * so they send float32 (FP8 is refused there).  DeepEP's FP8 dispatch uses one float scale per
 * 128 values; here the scale block is the one the numerics quantise with (32), and a power of two
 * fits a byte.  The combine rows are expert outputs, which FP8 would round: always float32.
 *
 * Payload of one destination: int32 tok[n_asg] (index into this message's tokens), int32
 * expert[n_asg], float weight[n_asg], then n_tok rows of ep_wire_row_bytes each: float32 x[D],
 * or uint8 E4M3 code[D] followed by uint8 UE8M0 scale[D / 32].  Reply: float y[n_asg][D]. */
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

/* How a token's hidden row travels in a LAYER payload (see above). */
typedef enum { EP_WIRE_F32 = 0, EP_WIRE_FP8 = 1 } EpWire;

/* Bytes of one row of D values: 4 D (F32) or D + D / 32 (FP8). */
int64_t ep_wire_row_bytes(EpWire wire, int64_t D);
const char *ep_wire_name(EpWire wire); /* "f32", "fp8" */
/* 0 when `wire` keeps a model of numerics `mode` and hidden size D bit-exact (FP8: MODE_REF and
 * D a multiple of 32), else -1 naming why. */
int ep_wire_check(EpWire wire, NumericsMode mode, int64_t D);
/* FP8 where it is exact, else F32. */
EpWire ep_wire_default(NumericsMode mode, int64_t D);

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
 * n_ranks ranks by placement pl, rows in `wire` form (ep_wire_check must have passed).
 * Afterwards hdr[k] is rank k's header (n_asg 0: nothing to send), its payload at
 * buf + pay_off[k]. */
int ep_pack_build(EpPack *pk, const EpPlacement *pl, const MoeRouted *r, int64_t D, int n_ranks, EpWire wire);
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

/* Serve one LAYER message on `rank` whose rows are in `wire` form: every assignment's expert
 * must be one pl places on this rank, in ascending order; y receives h->n_asg rows of m->d.dim. */
int ep_serve_layer(EpServe *sv, const Model *m, const EpPlacement *pl, int rank, EpWire wire, const EpHeader *h,
                   const uint8_t *payload, float *y);
void ep_serve_free(EpServe *sv);

#endif
