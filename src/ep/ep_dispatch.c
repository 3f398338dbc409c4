/* ep_dispatch.c — dispatch layout, packing, serving and combine (ep_dispatch.h). */
#include "ep/ep_dispatch.h"

#include "base/error.h"
#include "base/mem.h"
#include "kernels/numformats.h"

#include <stdlib.h>
#include <string.h>

/* Grow *pp (a pointer to a heap array) to hold n elements of `size`, contents kept. */
static int reserve(void *pp, size_t *cap, size_t n, size_t size, const char *what) {
    if (n <= *cap) return 0;
    size_t want = n < 64 ? 64 : n + n / 2;
    void *q = realloc(*(void **)pp, want * size);
    if (!q) return di_errorf("out of memory for %s (%zu bytes)", what, want * size);
    *(void **)pp = q;
    *cap = want;
    return 0;
}

int64_t ep_wire_row_bytes(EpWire wire, int64_t D) { return wire == EP_WIRE_FP8 ? D + D / 32 : 4 * D; }

const char *ep_wire_name(EpWire wire) { return wire == EP_WIRE_FP8 ? "fp8" : wire == EP_WIRE_F32 ? "f32" : "unknown"; }

int ep_wire_check(EpWire wire, NumericsMode mode, int64_t D) {
    if (wire != EP_WIRE_F32 && wire != EP_WIRE_FP8) return di_errorf("dispatch format %d: neither f32 nor fp8", (int)wire);
    if (wire == EP_WIRE_FP8 && mode != MODE_REF)
        return di_errorf("fp8 dispatch is exact only under the ref numerics (the %s numerics multiply by unquantised rows)",
                         numerics_mode_name(mode));
    if (wire == EP_WIRE_FP8 && (D <= 0 || D % 32))
        return di_errorf("fp8 dispatch needs a hidden size that is a multiple of 32, not %lld", (long long)D);
    return 0;
}

EpWire ep_wire_default(NumericsMode mode, int64_t D) { return ep_wire_check(EP_WIRE_FP8, mode, D) == 0 ? EP_WIRE_FP8 : EP_WIRE_F32; }

static int pack_ranks(EpPack *pk, int n_ranks) {
    if (pk->n_ranks == n_ranks) return 0;
    free(pk->hdr);
    free(pk->asg_off);
    free(pk->pay_off);
    pk->hdr = di_calloc((size_t)n_ranks, sizeof *pk->hdr, "dispatch headers");
    pk->asg_off = di_calloc((size_t)n_ranks + 1, sizeof *pk->asg_off, "dispatch offsets");
    pk->pay_off = di_calloc((size_t)n_ranks + 1, sizeof *pk->pay_off, "dispatch offsets");
    pk->n_ranks = pk->hdr && pk->asg_off && pk->pay_off ? n_ranks : 0;
    return pk->n_ranks ? 0 : -1;
}

/* Total rows of r's routed slots, and the number of tokens (largest token index + 1). */
static int routed_rows(const MoeRouted *r, int64_t *rows, int64_t *n_tok) {
    *rows = 0;
    *n_tok = 0;
    for (int i = 0; i < r->n_slots; i++) {
        if (r->slots[i].off != *rows || r->slots[i].cnt <= 0) return di_errorf("dispatch: slot %d is not on the next rows", i);
        *rows += r->slots[i].cnt;
    }
    for (int64_t g = 0; g < *rows; g++) {
        if (r->token[g] < 0) return di_errorf("dispatch: gathered row %lld has token %lld", (long long)g, (long long)r->token[g]);
        if (r->token[g] + 1 > *n_tok) *n_tok = r->token[g] + 1;
    }
    return 0;
}

/* Pass 1: each gathered row's rank, and per rank its assignments and distinct tokens. */
static int layout(EpPack *pk, const EpPlacement *pl, const MoeRouted *r, int64_t rows, int64_t n_tok, int n_ranks) {
    int E = r->lw->n_experts;
    for (int k = 0; k < n_ranks; k++) pk->hdr[k] = (EpHeader){EP_CMD_LAYER, r->layer, 0, 0, 0, 0};
    int64_t g = 0;
    for (int i = 0; i < r->n_slots; i++) {
        int e = (int)((const ExpertWeights *)r->slots[i].ex - r->lw->experts);
        if (e < 0 || e >= E) return di_errorf("dispatch: slot %d is not a routed expert of layer %d", i, r->layer);
        for (int64_t t = 0; t < r->slots[i].cnt; t++, g++) {
            int k = ep_placement_rank(pl, r->layer, e, r->token[g]);
            if (k < 0 || k >= n_ranks)
                return di_errorf("dispatch: expert %d of layer %d is placed on rank %d of %d", e, r->layer, k, n_ranks);
            pk->dst[g] = k;
            pk->hdr[k].n_asg++;
        }
    }
    for (int k = 0; k < n_ranks; k++) { /* distinct tokens per rank */
        for (int64_t t = 0; t < n_tok; t++) pk->tok_idx[t] = -1;
        for (g = 0; g < rows; g++)
            if (pk->dst[g] == k && pk->tok_idx[r->token[g]] < 0) pk->tok_idx[r->token[g]] = (int32_t)pk->hdr[k].n_tok++;
    }
    return 0;
}

/* Pass 2: rank k's payload (see the header for the layout) and its assignments' rows. */
static int fill_rank(EpPack *pk, const MoeRouted *r, int64_t rows, int64_t n_tok, int64_t D, int k, EpWire wire) {
    EpHeader *h = &pk->hdr[k];
    int64_t rb = ep_wire_row_bytes(wire, D);
    uint8_t *p = pk->buf + pk->pay_off[k];
    int64_t na = h->n_asg, j = 0, e_slot = 0, slot_end = r->n_slots ? r->slots[0].cnt : 0;
    for (int64_t t = 0; t < n_tok; t++) pk->tok_idx[t] = -1;
    int32_t n_seen = 0;
    for (int64_t g = 0; g < rows; g++) {
        while (g >= slot_end) slot_end += r->slots[++e_slot].cnt;
        if (pk->dst[g] != k) continue;
        int64_t tok = r->token[g];
        if (pk->tok_idx[tok] < 0) {
            uint8_t *row = p + (size_t)(12 * na + n_seen * rb);
            pk->tok_idx[tok] = n_seen++;
            if (wire == EP_WIRE_F32) memcpy(row, r->x + g * D, (size_t)D * sizeof(float));
            else if (di_quant_fp8_block32(r->x + g * D, (size_t)D, row, row + D) != 0)
                return di_error_wrap("dispatch row %lld", (long long)g);
        }
        int32_t ti = pk->tok_idx[tok], ex = (int32_t)((const ExpertWeights *)r->slots[e_slot].ex - r->lw->experts);
        memcpy(p + (size_t)(4 * j), &ti, 4);
        memcpy(p + (size_t)(4 * (na + j)), &ex, 4);
        memcpy(p + (size_t)(4 * (2 * na + j)), &r->weight[g], 4);
        pk->asg_row[pk->asg_off[k] + j] = g;
        j++;
    }
    return 0;
}

int ep_pack_build(EpPack *pk, const EpPlacement *pl, const MoeRouted *r, int64_t D, int n_ranks, EpWire wire) {
    if (!pk || !pl || !r || !r->lw || (r->n_slots > 0 && (!r->slots || !r->x || !r->weight || !r->token)) || D <= 0 || n_ranks <= 0)
        return di_errorf("ep_pack_build: invalid arguments");
    if ((wire != EP_WIRE_F32 && wire != EP_WIRE_FP8) || (wire == EP_WIRE_FP8 && D % 32))
        return di_errorf("ep_pack_build: dispatch format %d for hidden size %lld", (int)wire, (long long)D);
    if (r->layer < 0 || r->layer >= pl->n_layers || r->lw->n_experts != pl->n_experts)
        return di_errorf("dispatch: layer %d of %d experts is not in the plan (%d layers of %d experts)", r->layer, r->lw->n_experts,
                         pl->n_layers, pl->n_experts);
    int64_t rows, n_tok;
    if (routed_rows(r, &rows, &n_tok) != 0 || pack_ranks(pk, n_ranks) != 0 ||
        reserve(&pk->dst, &pk->cap_rows, (size_t)rows, sizeof *pk->dst, "dispatch ranks") != 0 ||
        reserve(&pk->asg_row, &pk->cap_asg, (size_t)rows, sizeof *pk->asg_row, "dispatch rows") != 0 ||
        reserve(&pk->tok_idx, &pk->cap_tok, (size_t)n_tok, sizeof *pk->tok_idx, "dispatch tokens") != 0 ||
        reserve(&pk->reply, &pk->cap_reply, (size_t)(rows * D), sizeof *pk->reply, "combine rows") != 0 ||
        layout(pk, pl, r, rows, n_tok, n_ranks) != 0)
        return -1;
    pk->asg_off[0] = 0;
    pk->pay_off[0] = 0;
    for (int k = 0; k < n_ranks; k++) {
        EpHeader *h = &pk->hdr[k];
        h->bytes = h->n_asg ? 12 * h->n_asg + h->n_tok * ep_wire_row_bytes(wire, D) : 0;
        h->reply_bytes = 4 * h->n_asg * D;
        pk->asg_off[k + 1] = pk->asg_off[k] + h->n_asg;
        pk->pay_off[k + 1] = pk->pay_off[k] + (size_t)h->bytes;
    }
    if (reserve(&pk->buf, &pk->cap_buf, pk->pay_off[n_ranks] ? pk->pay_off[n_ranks] : 1, 1, "dispatch payload") != 0) return -1;
    for (int k = 0; k < n_ranks; k++)
        if (pk->hdr[k].n_asg && fill_rank(pk, r, rows, n_tok, D, k, wire) != 0) return -1;
    return 0;
}

void ep_pack_combine(const EpPack *pk, const MoeRouted *r, int64_t D) {
    for (int k = 0; k < pk->n_ranks; k++)
        for (int64_t j = pk->asg_off[k]; j < pk->asg_off[k + 1]; j++)
            memcpy(r->y + pk->asg_row[j] * D, pk->reply + j * D, (size_t)D * sizeof *r->y);
}

void ep_pack_free(EpPack *pk) {
    if (!pk) return;
    free(pk->hdr);
    free(pk->asg_off);
    free(pk->pay_off);
    free(pk->buf);
    free(pk->asg_row);
    free(pk->reply);
    free(pk->dst);
    free(pk->tok_idx);
    memset(pk, 0, sizeof *pk);
}

/* ---- the expert rank's side ------------------------------------------------------------- */

/* Unpack the assignments and check them against this rank's placement. */
static int unpack(EpServe *sv, const EpPlacement *pl, int rank, const EpHeader *h, const uint8_t *payload, int E) {
    int64_t na = h->n_asg;
    memcpy(sv->tok, payload, (size_t)(4 * na));
    memcpy(sv->expert, payload + 4 * na, (size_t)(4 * na));
    memcpy(sv->w, payload + 8 * na, (size_t)(4 * na));
    for (int64_t j = 0; j < na; j++) {
        int32_t e = sv->expert[j];
        if (sv->tok[j] < 0 || sv->tok[j] >= h->n_tok || e < 0 || e >= E || (j && e < sv->expert[j - 1]))
            return di_errorf("layer %lld: assignment %lld (token %d, expert %d) is malformed", (long long)h->layer, (long long)j,
                             sv->tok[j], e);
        if (!ep_placement_holds(pl, rank, (int)h->layer, e))
            return di_errorf("layer %lld: asked to run expert %d, which the plan does not place on rank %d", (long long)h->layer, e, rank);
    }
    return 0;
}

int ep_serve_layer(EpServe *sv, const Model *m, const EpPlacement *pl, int rank, EpWire wire, const EpHeader *h,
                   const uint8_t *payload, float *y) {
    if (!sv || !m || !pl || !h || h->cmd != EP_CMD_LAYER || h->n_asg < 0 || h->n_tok < 0 || h->n_tok > h->n_asg ||
        (h->n_asg && (!payload || !y)))
        return di_errorf("ep_serve_layer: invalid arguments");
    int64_t D = m->d.dim, na = h->n_asg, rb = ep_wire_row_bytes(wire, D);
    if (ep_wire_check(wire, m->mode, D) != 0) return -1;
    /* bound the counts before the size product: 2^31 rows is far past any workspace */
    if (na > INT32_MAX || h->n_tok > INT32_MAX || h->layer < 0 || h->layer >= m->d.n_layers ||
        h->bytes != 12 * na + h->n_tok * rb)
        return di_errorf("layer message: layer %lld, %lld bytes for %lld assignments of %lld tokens", (long long)h->layer,
                         (long long)h->bytes, (long long)na, (long long)h->n_tok);
    const LayerWeights *lw = &m->w.layers[h->layer];
    if (na == 0) return 0;
    if (reserve(&sv->tok, &sv->cap_tok, (size_t)na, sizeof *sv->tok, "served tokens") != 0 ||
        reserve(&sv->expert, &sv->cap_expert, (size_t)na, sizeof *sv->expert, "served experts") != 0 ||
        reserve(&sv->w, &sv->cap_w, (size_t)na, sizeof *sv->w, "served weights") != 0 ||
        reserve(&sv->x, &sv->cap_x, (size_t)(na * D), sizeof *sv->x, "served rows") != 0)
        return -1;
    if (reserve(&sv->slots, &sv->cap_slots, (size_t)lw->n_experts, sizeof *sv->slots, "served slots") != 0) return -1;
    if (unpack(sv, pl, rank, h, payload, lw->n_experts) != 0) return -1;
    const uint8_t *xs = payload + 12 * na;
    int n_slots = 0;
    for (int64_t j = 0; j < na; j++) {
        const uint8_t *row = xs + (size_t)(sv->tok[j] * rb);
        if (wire == EP_WIRE_F32) memcpy(sv->x + j * D, row, (size_t)D * sizeof(float));
        else if (di_dequant_fp8_block32(row, row + D, (size_t)D, sv->x + j * D) != 0) return -1;
        if (j == 0 || sv->expert[j] != sv->expert[j - 1]) sv->slots[n_slots++] = (WsExpertSlot){&lw->experts[sv->expert[j]], j, 0};
        sv->slots[n_slots - 1].cnt++;
    }
    return moe_run_routed(m, lw, sv->slots, n_slots, sv->x, wire == EP_WIRE_FP8, sv->w, y);
}

void ep_serve_free(EpServe *sv) {
    if (!sv) return;
    free(sv->slots);
    free(sv->x);
    free(sv->w);
    free(sv->tok);
    free(sv->expert);
    memset(sv, 0, sizeof *sv);
}
