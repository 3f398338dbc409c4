/* layer_plan.c — building the per-layer plan (layer_plan.h) from the derived config lists. */
#include "model/layer_plan.h"

#include "base/error.h"

#include <string.h>

bool di_layer_list_contains(const int64_t *v, size_t n, int64_t x) {
    for (size_t i = 0; i < n; i++)
        if (v[i] == x) return true;
    return false;
}

int64_t di_layer_list_latest(const int64_t *v, size_t n, int64_t layer, bool strict) {
    int64_t best = -1;
    for (size_t i = 0; i < n; i++)
        if (strict ? v[i] < layer : v[i] <= layer) best = v[i];
    return best;
}

int di_ced_midpoint(int64_t n_layers) { return (int)(n_layers / 2); }

static int slot_in(const int64_t *v, size_t n, int64_t layer) {
    for (size_t k = 0; k < n; k++)
        if (v[k] == layer) return (int)k;
    return -1;
}

/* The CSA2 role of backbone layer i with a ratio > 0 (§5.6.7). */
static void plan_compressed(const DiLayerPlanSpec *s, int64_t i, DiLayerPlan *L) {
    L->is_kv_source = di_layer_list_contains(s->kv_sources, s->n_kv_sources, i);
    L->is_index_source = di_layer_list_contains(s->index_sources, s->n_index_sources, i);
    L->is_candidate_source = i == s->candidate_source;
    L->uses_candidate_pool = L->is_index_source && s->candidate_source >= 0 && i > s->candidate_source;
    L->has_compressor_gate = L->is_kv_source && L->compress_ratio > 1;
    L->kv_source = (int)di_layer_list_latest(s->kv_sources, s->n_kv_sources, i, false);
    L->index_source = (int)di_layer_list_latest(s->index_sources, s->n_index_sources, i, false);
    L->kv_slot = L->is_kv_source ? slot_in(s->kv_sources, s->n_kv_sources, i) : -1;
    L->role = L->is_kv_source ? DI_ROLE_FULL : L->is_index_source ? DI_ROLE_REINDEX : DI_ROLE_REUSE;
}

int di_layer_plan_build(const DiLayerPlanSpec *s, DiLayerPlan *out) {
    if (!s || !out || s->n_layers <= 0 || s->n_draft_stages < 0 || !s->compress_ratios)
        return di_errorf("layer plan: no layers or ratios given");
    int mid = di_ced_midpoint(s->n_layers);
    for (int64_t i = 0; i < s->n_layers + s->n_draft_stages; i++) {
        DiLayerPlan *L = &out[i];
        bool draft = i >= s->n_layers;
        memset(L, 0, sizeof *L);
        L->stack = draft ? DI_STACK_DRAFT : i >= mid ? DI_STACK_DECODER : DI_STACK_ENCODER;
        L->draft_stage = draft ? (int)(i - s->n_layers) : -1;
        L->compress_ratio = (int)s->compress_ratios[i];
        L->kv_source = L->index_source = L->kv_slot = L->engram_slot = L->dspark_tap_slot = -1;
        L->n_routed_experts = (int)(draft ? s->dspark_n_routed_experts : s->n_routed_experts);
        L->n_experts_per_tok = (int)(draft ? s->dspark_n_experts_per_tok : s->n_experts_per_tok);
        L->rope_compress = L->compress_ratio > 0;
        if (draft) continue;
        L->engram_slot = slot_in(s->engram_layers, s->n_engram_layers, i);
        L->dspark_tap_slot = slot_in(s->dspark_taps, s->n_dspark_taps, i);
        if (L->compress_ratio > 0) plan_compressed(s, i, L);
    }
    return 0;
}

const char *di_layer_role_name(DiLayerRole role) {
    switch (role) {
    case DI_ROLE_WINDOW: return "window";
    case DI_ROLE_FULL: return "full";
    case DI_ROLE_REUSE: return "reuse";
    case DI_ROLE_REINDEX: return "reindex";
    }
    return "unknown";
}
