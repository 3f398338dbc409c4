/* sim_report.c — JSON summaries of simulation runs (see sim_report.h). */
#include "cluster/sim/sim_report.h"

static json_t *pct_ms(const DiSimPercentiles *p) {
    return json_pack("{s:I, s:f, s:f, s:f, s:f}", "n", (json_int_t)p->n, "p50", p->p50 * 1e3, "p90", p->p90 * 1e3,
                     "p99", p->p99 * 1e3, "mean", p->mean * 1e3);
}

static json_t *buckets(const double *v) {
    json_t *a = json_array();
    for (int b = 0; a && b < DI_SIM_MOE_BUCKETS; b++) json_array_append_new(a, json_real(v[b]));
    return a;
}

static json_t *moe_json(const DiSimMoeReport *m) {
    return json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:I, s:o, s:o, s:[f, f]}", "eplb", m->eplb,
                     "eplb_noise_free", m->eplb_expected, "routing_noise_floor", m->noise_floor, "rearrange_only",
                     m->rearrange,
                     "no_eplb", m->fixed, "eplb_vs_no_eplb", m->fixed > 0 ? m->eplb / m->fixed : 0.0, "steps",
                     (json_int_t)m->steps, "replans", (json_int_t)m->replans, "moved_slots",
                     (json_int_t)m->moved_slots, "eplb_over_time", buckets(m->eplb_bucket), "no_eplb_over_time",
                     buckets(m->fixed_bucket), "over_time_span_s", m->first_s, m->last_s);
}

json_t *di_sim_result_json(const DiSimResult *r) {
    json_t *ttft = json_object(), *hit = json_object();
    static const char *const tiers[DI_PREFILL_TIERS] = {"lt16k", "16k_64k", "64k_256k", "ge256k"};
    for (int t = 0; t < DI_PREFILL_TIERS; t++) {
        json_object_set_new(ttft, tiers[t], pct_ms(&r->ttft_s[t]));
        json_object_set_new(hit, tiers[t], json_real(r->tier_hit_rate[t]));
    }
    json_object_set_new(ttft, "all", pct_ms(&r->ttft_all_s));
    json_object_set_new(hit, "all", json_real(r->hit_rate));
    json_t *o = json_pack("{s:I, s:I, s:o, s:o, s:o, s:f, s:f, s:o, s:f, s:f, s:f, s:I, s:I, s:I, s:I}", "completed",
                          (json_int_t)r->completed, "rejected", (json_int_t)r->rejected, "ttft_ms", ttft, "tpot_ms",
                          pct_ms(&r->tpot_s), "cache_hit_rate", hit, "prefill_imbalance", r->prefill_imbalance,
                          "decode_imbalance", r->decode_imbalance, "decode_step_imbalance",
                          json_pack("{s:f, s:f, s:f}", "p50", r->decode_step_imbalance.p50, "p90",
                                    r->decode_step_imbalance.p90, "p99", r->decode_step_imbalance.p99),
                          "makespan_s", r->makespan_s, "input_tokens_per_s", r->input_tokens_per_s,
                          "output_tokens_per_s", r->output_tokens_per_s, "prefill_steps", (json_int_t)r->prefill_steps,
                          "decode_steps", (json_int_t)r->decode_steps, "prefill_tokens_computed",
                          (json_int_t)r->prefill_tokens_computed, "quota_moves", (json_int_t)r->quota_moves);
    if (o)
        json_object_set_new(o, "fitted_prefill_cost_ns",
                            json_pack("{s:f, s:f, s:f, s:f, s:f}", "a_qq", r->fitted_prefill_cost.a, "b_qc",
                                      r->fitted_prefill_cost.b, "d_q", r->fitted_prefill_cost.d, "e_c",
                                      r->fitted_prefill_cost.e, "f", r->fitted_prefill_cost.f));
    if (o) json_object_set_new(o, "prefill_step_time_correction", json_real(r->prefill_correction));
    if (o && r->has_moe)
        json_object_set_new(o, "moe_lb",
                            json_pack("{s:o, s:o}", "prefill", moe_json(&r->moe_prefill), "decode", moe_json(&r->moe_decode)));
    return o;
}

json_t *di_sim_config_json(const DiSimConfig *c) {
    json_t *budgets = json_pack("[f, f, f, f]", c->tier_budget_ms[0], c->tier_budget_ms[1], c->tier_budget_ms[2],
                                c->tier_budget_ms[3]);
    json_t *o = json_pack(
        "{s:i, s:i, s:i, s:f, s:I, s:I, s:o, s:f, s:I, s:i, s:i, s:f, s:f, s:i, s:i}", "prefill_instances",
        c->prefill_instances, "prefill_ranks_per_instance", c->prefill_ranks, "decode_ranks", c->decode_ranks,
        "speedup", c->speedup, "cache_blocks", (json_int_t)c->cache_blocks, "seed", (json_int_t)c->seed,
        "tier_budget_ms", budgets, "fifo_budget_ms", c->fifo_budget_ms, "rr_chunk_tokens",
        (json_int_t)c->rr_chunk_tokens, "decode_lookahead", c->decode_lookahead, "moe_layers", c->moe_layers,
        "moe_skew", c->moe_skew, "moe_drift_tau_s", c->moe_drift_tau_s, "moe_experts", c->moe_experts, "moe_top_k",
        c->moe_top_k);
    if (!o) return NULL;
    json_object_set_new(o, "decode_lb", json_string(di_decode_lb_policy_name(c->decode_policy)));
    json_object_set_new(o, "tier_slo_ms", json_pack("[f, f, f, f]", c->tier_slo_ms[0], c->tier_slo_ms[1],
                                                    c->tier_slo_ms[2], c->tier_slo_ms[3]));
    json_object_set_new(o, "tier_overtake", json_real(c->jump_slowdown));
    json_object_set_new(o, "prefill_cost_ns",
                        json_pack("{s:f, s:f, s:f, s:f, s:f}", "a_qq", c->prefill_cost.a, "b_qc", c->prefill_cost.b,
                                  "d_q", c->prefill_cost.d, "e_c", c->prefill_cost.e, "f", c->prefill_cost.f));
    json_object_set_new(o, "decode_cost_ns",
                        json_pack("{s:f, s:f, s:f}", "alpha", c->decode_cost.alpha, "beta_per_request",
                                  c->decode_cost.beta, "gamma_per_kv_token", c->decode_cost.gamma));
    return o;
}

static double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

json_t *di_sim_ratios_json(const DiSimResult *o, const DiSimResult *f, const DiSimResult *rr) {
    json_t *ttft_fifo = json_object(), *ttft_rr = json_object();
    static const char *const tiers[DI_PREFILL_TIERS] = {"lt16k", "16k_64k", "64k_256k", "ge256k"};
    for (int t = 0; t < DI_PREFILL_TIERS; t++) {
        if (o->ttft_s[t].n == 0) continue;
        json_object_set_new(ttft_fifo, tiers[t], json_real(ratio(o->ttft_s[t].p99, f->ttft_s[t].p99)));
        json_object_set_new(ttft_rr, tiers[t], json_real(ratio(o->ttft_s[t].p99, rr->ttft_s[t].p99)));
    }
    return json_pack("{s:o, s:o, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "ttft_p99_tiered_vs_fifo", ttft_fifo,
                     "ttft_p99_tiered_vs_round_robin", ttft_rr, "prefill_imbalance_vs_fifo",
                     ratio(o->prefill_imbalance, f->prefill_imbalance), "prefill_imbalance_vs_round_robin",
                     ratio(o->prefill_imbalance, rr->prefill_imbalance), "decode_imbalance_vs_count_only",
                     ratio(o->decode_imbalance, f->decode_imbalance), "decode_imbalance_vs_round_robin",
                     ratio(o->decode_imbalance, rr->decode_imbalance), "tpot_p99_vs_count_only",
                     ratio(o->tpot_s.p99, f->tpot_s.p99), "tpot_p99_vs_round_robin",
                     ratio(o->tpot_s.p99, rr->tpot_s.p99), "throughput_vs_fifo_count",
                     ratio(o->output_tokens_per_s, f->output_tokens_per_s), "throughput_vs_round_robin",
                     ratio(o->output_tokens_per_s, rr->output_tokens_per_s));
}
