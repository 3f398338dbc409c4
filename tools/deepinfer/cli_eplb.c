/* cli_eplb.c — the live EPLB flags and the driver's wiring (cli_eplb.h). */
#include "cli_eplb.h"

#include "cli_engine.h"

#include "base/error.h"
#include "base/log.h"
#include "engine/engine.h"

#include <string.h>

const char cli_eplb_help[] =
    "  --eplb-ranks N      live EPLB (serving.md §8.2): count routed tokens per (layer, expert) every step and\n"
    "                      replan expert placement for N expert ranks on the schedule below (without expert\n"
    "                      parallelism the ranks are virtual: plans are scored, moe_lb reported, nothing moves)\n"
    "  --eplb-phase P      the preset: prefill (4 redundant experts per rank, window 100 steps, replan every\n"
    "                      1000) or decode (1, 1000, 10000; the first plan after 100 steps); default decode\n"
    "  --eplb-window N     steps of load each plan is made from (default: the preset's)\n"
    "  --eplb-period N     replan every N steps, N >= the window (default: the preset's); with --eplb-window\n"
    "                      or --eplb-period the first plan comes after the first window\n"
    "  --eplb-redundant N  redundant expert replicas per rank, 0..64 (default: the preset's)\n";

int cli_eplb_flag(const char *o, const char *v, CliEplb *c, int *bad) {
    if (strcmp(o, "--eplb-ranks") == 0) *bad = cli_parse_long(v, 1, 4096, &c->ranks) != 0;
    else if (strcmp(o, "--eplb-window") == 0) *bad = cli_parse_long(v, 1, 1000000, &c->window) != 0;
    else if (strcmp(o, "--eplb-period") == 0) *bad = cli_parse_long(v, 1, 1000000, &c->period) != 0;
    else if (strcmp(o, "--eplb-redundant") == 0) *bad = cli_parse_long(v, 0, 64, &c->redundant) != 0;
    else if (strcmp(o, "--eplb-phase") == 0) {
        *bad = strcmp(v, "prefill") != 0 && strcmp(v, "decode") != 0;
        c->phase = strcmp(v, "prefill") == 0 ? DI_EPLB_PREFILL : DI_EPLB_DECODE;
    } else {
        return 0;
    }
    c->any = true;
    return 1;
}

static void observe(void *user, const DiExpertLoad *load) {
    CliEplb *c = user;
    if (di_eplb_live_record(c->live, load->tokens, load->layers, load->experts) == 0) return;
    if (c->record_errors++ == 0) DI_WARN("EPLB: %s", di_error_message());
}

int cli_eplb_start(CliEplb *c, DiEngine *engine, DiEplbApplyFn apply, void *apply_user) {
    if (c->ranks == 0)
        return c->any ? di_errorf("--eplb-phase/--eplb-window/--eplb-period/--eplb-redundant need --eplb-ranks N") : 0;
    int layers, experts;
    if (di_engine_expert_load_shape(engine, &layers, &experts) != 0) return di_error_wrap("--eplb-ranks");
    DiEplbLiveConfig cfg = {di_eplb_policy_preset(c->phase, layers, experts, 1, 1, (int)c->ranks), apply, apply_user};
    if (c->window || c->period) {
        cfg.policy.window_steps = c->window ? (int)c->window : cfg.policy.window_steps;
        cfg.policy.period_steps = c->period ? (int)c->period : cfg.policy.period_steps;
        cfg.policy.warmup_steps = 0; /* the preset's early first plan is for its own window */
    }
    if (c->redundant >= 0) cfg.policy.redundant_per_gpu = (int)c->redundant;
    if (!(c->live = di_eplb_live_create(&cfg))) return di_error_wrap("--eplb-ranks %ld on %d experts per layer", c->ranks, experts);
    if (di_engine_set_expert_load_observer(engine, observe, c) != 0) {
        cli_eplb_stop(c);
        return -1;
    }
    DI_INFO("EPLB: %d layers x %d experts on %ld ranks, %d redundant per rank, window %d, period %d steps", layers, experts,
            c->ranks, cfg.policy.redundant_per_gpu, cfg.policy.window_steps, cfg.policy.period_steps);
    return 0;
}

int cli_eplb_metrics(void *user, DiApiBuf *out) {
    const CliEplb *c = user;
    return di_eplb_live_metrics(c->live, out);
}

void cli_eplb_summary(const CliEplb *c, FILE *out) {
    DiEplbLiveStats st;
    if (!c->live || di_eplb_live_stats(c->live, &st, NULL) != 0) return;
    fprintf(out, "eplb: steps %lld replans %lld moved-slots %lld moe_lb %.4f (identity placement %.4f) over the window, "
                 "%.4f since the start\n",
            (long long)st.steps, (long long)st.replans, (long long)st.moved_slots, st.moe_lb, st.moe_lb_identity,
            st.moe_lb_total);
}

void cli_eplb_stop(CliEplb *c) {
    di_eplb_live_destroy(c->live);
    c->live = NULL;
}
