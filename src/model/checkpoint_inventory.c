/* checkpoint_inventory.c — the §3.6 tensor list of a config (see checkpoint_inventory.h).
 * Shapes follow model-v41.md §3.6 and, for the tiny configuration, the explicit table of §9.5. */
#include "model/checkpoint_inventory.h"

#include "base/error.h"
#include "base/mem.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    DiInventory *inv;
    size_t cap;
    int layer;
    char prefix[32];
    int failed;
} Builder;

static int64_t ceil32(int64_t x) { return (x + 31) / 32; }

static DiInventoryEntry *add(Builder *b, DiDType dtype, DiInventoryKind kind, int64_t d0, int64_t d1, const char *fmt,
                             ...) __attribute__((format(printf, 6, 7)));

static DiInventoryEntry *add(Builder *b, DiDType dtype, DiInventoryKind kind, int64_t d0, int64_t d1, const char *fmt,
                             ...) {
    if (b->failed) return NULL;
    if (di_grow(&b->inv->entries, &b->cap, b->inv->n + 1, 256, sizeof *b->inv->entries, "inventory") != 0) {
        b->failed = 1;
        return NULL;
    }
    DiInventoryEntry *e = &b->inv->entries[b->inv->n++];
    memset(e, 0, sizeof *e);
    int len = snprintf(e->name, sizeof e->name, "%s", b->prefix);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->name + len, sizeof e->name - (size_t)len, fmt, ap);
    va_end(ap);
    e->dtype = dtype;
    e->kind = kind;
    e->ndim = d1 < 0 ? 1 : 2;
    e->shape[0] = d0;
    e->shape[1] = d1 < 0 ? 0 : d1;
    e->layer = b->layer;
    b->inv->total_bytes += d0 * (d1 < 0 ? 1 : d1) * (int64_t)di_dtype_size(dtype);
    return e;
}

/* FP8 block-scaled matrix `<what>.weight` [out, in] + `<what>.scale` (§3.4). */
static void add_fp8(Builder *b, const char *what, int64_t out, int64_t in) {
    DiInventoryEntry *w = add(b, DI_DTYPE_F8_E4M3, DI_INV_FP8_WEIGHT, out, in, "%s.weight", what);
    if (w) w->fan_in = in;
    add(b, DI_DTYPE_F8_E8M0, DI_INV_FP8_SCALE, ceil32(out), ceil32(in), "%s.scale", what);
}

/* FP4 routed-expert matrix: I8 [out, in/2] + scale [out, in/32] (§3.5). */
static void add_fp4(Builder *b, const char *what, int64_t out, int64_t in) {
    DiInventoryEntry *w = add(b, DI_DTYPE_I8, DI_INV_FP4_WEIGHT, out, in / 2, "%s.weight", what);
    if (w) w->fan_in = in;
    add(b, DI_DTYPE_F8_E8M0, DI_INV_FP4_SCALE, out, in / 32, "%s.scale", what);
}

static void add_bf16_matrix(Builder *b, const char *name, int64_t out, int64_t in) {
    DiInventoryEntry *w = add(b, DI_DTYPE_BF16, DI_INV_BF16_MATRIX, out, in, "%s", name);
    if (w) w->fan_in = in;
}

/* Everything every backbone layer and DSpark stage has (§3.6 "Every backbone layer"). */
static void add_common(Builder *b, const DiModelConfig *c, const DiLayerPlan *L) {
    int64_t D = c->hidden_size, hc = c->hc_mult, E = L->n_routed_experts, F = c->moe_intermediate_size;
    int64_t mix = (2 + hc) * hc; /* pre (hc) + post (hc) + comb (hc*hc), §5.4 */
    add(b, DI_DTYPE_BF16, DI_INV_NORM, D, -1, "attn_norm.weight");
    add(b, DI_DTYPE_BF16, DI_INV_NORM, D, -1, "ffn_norm.weight");
    const char *sites[2] = {"attn", "ffn"};
    for (int s = 0; s < 2; s++) {
        DiInventoryEntry *fn = add(b, DI_DTYPE_F32, DI_INV_HC_FN, mix, hc * D, "hc_%s_fn", sites[s]);
        if (fn) fn->fan_in = hc * D;
        add(b, DI_DTYPE_F32, DI_INV_HC_BASE, mix, -1, "hc_%s_base", sites[s]);
        add(b, DI_DTYPE_F32, DI_INV_HC_SCALE, 3, -1, "hc_%s_scale", sites[s]);
    }
    int64_t H = c->n_heads, Dh = c->head_dim, Rq = c->q_lora_rank, G = c->o_groups, Ro = c->o_lora_rank;
    add_fp8(b, "attn.wq_a", Rq, D);
    add(b, DI_DTYPE_BF16, DI_INV_NORM, Rq, -1, "attn.q_norm.weight");
    add_fp8(b, "attn.wq_b", H * Dh, Rq);
    add_fp8(b, "attn.wkv", Dh, D);
    add(b, DI_DTYPE_BF16, DI_INV_NORM, Dh, -1, "attn.kv_norm.weight");
    add_fp8(b, "attn.wo_a", G * Ro, H * Dh / G);
    add_fp8(b, "attn.wo_b", D, G * Ro);
    add(b, DI_DTYPE_F32, DI_INV_SINK, H, -1, "attn.attn_sink");
    add_bf16_matrix(b, "ffn.gate.weight", E, D);
    add(b, DI_DTYPE_F32, DI_INV_GATE_BIAS, E, -1, "ffn.gate.bias");
    if (c->vision.num_hidden_layers > 0) add(b, DI_DTYPE_F32, DI_INV_GATE_BIAS, E, -1, "ffn.gate.bias_vl");
    char what[64];
    for (int64_t e = 0; e < E; e++) {
        snprintf(what, sizeof what, "ffn.experts.%lld.w1", (long long)e);
        add_fp4(b, what, F, D);
        snprintf(what, sizeof what, "ffn.experts.%lld.w2", (long long)e);
        add_fp4(b, what, D, F);
        snprintf(what, sizeof what, "ffn.experts.%lld.w3", (long long)e);
        add_fp4(b, what, F, D);
    }
    int64_t Fs = F * c->n_shared_experts;
    if (Fs > 0) {
        add_fp8(b, "ffn.shared_experts.w1", Fs, D);
        add_fp8(b, "ffn.shared_experts.w2", D, Fs);
        add_fp8(b, "ffn.shared_experts.w3", Fs, D);
    }
}

/* Compressor and indexer of KV-source / index-source layers, Engram of Engram layers. */
static void add_backbone_extras(Builder *b, const DiModelConfig *c, const DiLayerPlan *L) {
    int64_t D = c->hidden_size, Dh = c->head_dim, DI = c->index_head_dim;
    if (L->is_kv_source) {
        add_bf16_matrix(b, "attn.compressor.wkv.weight", Dh, D);
        if (L->has_compressor_gate) add_bf16_matrix(b, "attn.compressor.wgate.weight", Dh, D);
        add(b, DI_DTYPE_BF16, DI_INV_NORM, Dh, -1, "attn.compressor.norm.weight");
        add_bf16_matrix(b, "attn.indexer.wk.weight", DI, Dh);
        add(b, DI_DTYPE_BF16, DI_INV_NORM, DI, -1, "attn.indexer.k_norm.weight");
    }
    if (L->is_index_source) {
        add_fp8(b, "attn.indexer.wq_b", c->index_n_heads * DI, c->q_lora_rank);
        add_bf16_matrix(b, "attn.indexer.weights_proj.weight", c->index_n_heads, D);
    }
    if (L->engram_slot >= 0) {
        int64_t rows = c->engram_num_embeddings[L->engram_slot], hd = c->engram_head_dim;
        add(b, DI_DTYPE_F8_E4M3, DI_INV_ENGRAM_TABLE, rows, hd, "engram.embed.weight");
        add(b, DI_DTYPE_F8_E8M0, DI_INV_ENGRAM_SCALE, rows, hd / 32, "engram.embed.scale");
        /* wkv: hc keys + 1 value, each D wide, from the concatenated rows (§5.3) */
        add_fp8(b, "engram.wkv", (c->hc_mult + 1) * D, (c->engram_max_ngram_size - 1) * c->engram_n_heads * hd);
        add(b, DI_DTYPE_BF16, DI_INV_ENGRAM_QK, c->hc_mult, D, "engram.q_weight");
        add(b, DI_DTYPE_BF16, DI_INV_ENGRAM_QK, c->hc_mult, D, "engram.k_weight");
    }
}

/* DSpark extras (§3.6): main_proj on stage 0, norm / Markov / confidence heads on the last. */
static void add_draft_extras(Builder *b, const DiModelConfig *c, const DiLayerPlan *L) {
    int64_t D = c->hidden_size, rank = c->dspark_markov_rank;
    if (L->draft_stage == 0) {
        add_fp8(b, "main_proj", D, (int64_t)c->n_dspark_targets * D);
        add(b, DI_DTYPE_BF16, DI_INV_NORM, D, -1, "main_norm.weight");
    }
    if (L->draft_stage == c->n_draft_stages - 1) {
        add(b, DI_DTYPE_BF16, DI_INV_NORM, D, -1, "norm.weight");
        add(b, DI_DTYPE_BF16, DI_INV_EMBED, c->vocab_size, rank, "markov_head.embed.weight");
        add_bf16_matrix(b, "markov_head.head.weight", c->vocab_size, rank);
        add_bf16_matrix(b, "confidence_head.proj.weight", 1, D + rank);
    }
}

int di_inventory_build(const DiModelConfig *c, DiInventory *out) {
    if (!out) return di_errorf("di_inventory_build: no output given");
    memset(out, 0, sizeof *out);
    if (!c || !c->layers) return di_errorf("di_inventory_build: no config given");
    Builder b = {.inv = out, .layer = -1};
    add(&b, DI_DTYPE_BF16, DI_INV_EMBED, c->vocab_size, c->hidden_size, "embed.weight");
    DiInventoryEntry *head = add(&b, DI_DTYPE_BF16, DI_INV_BF16_MATRIX, c->vocab_size, c->hidden_size, "head.weight");
    if (head) head->fan_in = c->hidden_size;
    add(&b, DI_DTYPE_BF16, DI_INV_NORM, c->hidden_size, -1, "norm.weight");
    for (int64_t i = 0; i < c->n_total_layers && !b.failed; i++) {
        const DiLayerPlan *L = &c->layers[i];
        b.layer = (int)i;
        if (di_layer_is_draft(L))
            snprintf(b.prefix, sizeof b.prefix, "mtp.%d.", L->draft_stage);
        else
            snprintf(b.prefix, sizeof b.prefix, "layers.%lld.", (long long)i);
        add_common(&b, c, L);
        if (di_layer_is_draft(L))
            add_draft_extras(&b, c, L);
        else
            add_backbone_extras(&b, c, L);
    }
    if (b.failed) {
        di_inventory_free(out);
        return -1;
    }
    return 0;
}

void di_inventory_free(DiInventory *inv) {
    if (!inv) return;
    free(inv->entries);
    memset(inv, 0, sizeof *inv);
}

int di_inventory_is_vision_name(const char *name) {
    if (!name) return 0;
    return strncmp(name, "vision.", 7) == 0 || strncmp(name, "aligner.", 8) == 0 || strcmp(name, "image_start") == 0 ||
           strcmp(name, "image_end") == 0 || strcmp(name, "image_newline") == 0;
}
