/* cli_eplb.h — the live EPLB flags of `deepinfer serve` and `deepinfer generate` (serving.md §8.2):
 * the driver (cluster/eplb_live.h) is created on the engine's model, fed every step's expert
 * loads (engine.h di_engine_set_expert_load_observer) and, in serve, reported on /metrics.
 *
 * Without expert parallelism the plans are made for --eplb-ranks N virtual ranks and only scored
 * (no apply callback), so moe_lb is observable in one process; the expert-parallel runtime
 * (deepinfer_ep.h) passes di_ep_apply_plan as the apply callback (cli_eplb_start). */
#ifndef DI_TOOLS_CLI_EPLB_H
#define DI_TOOLS_CLI_EPLB_H

#include "cluster/eplb_live.h"
#include "deepinfer.h"

#include <stdbool.h>
#include <stdio.h>

typedef struct {
    int phase;                        /* DI_EPLB_PREFILL / DI_EPLB_DECODE (default decode) */
    long ranks, window, period, redundant; /* 0: not given (ranks: EPLB off; the rest: the preset's) */
    bool any;                         /* some --eplb-* flag was given */
    DiEplbLive *live;                 /* the running driver (cli_eplb_start) */
    int record_errors;                /* steps the driver refused (the first is logged) */
} CliEplb;

#define CLI_EPLB_DEFAULTS {DI_EPLB_DECODE, 0, 0, 0, -1, false, NULL, 0}

/* --eplb-ranks N, --eplb-phase prefill|decode, --eplb-window N, --eplb-period N,
 * --eplb-redundant N.  Returns 1 when `opt` is one of them (*bad set when the value is invalid),
 * 0 otherwise. */
int cli_eplb_flag(const char *opt, const char *val, CliEplb *c, int *bad);
extern const char cli_eplb_help[];

/* With --eplb-ranks: create the driver for the engine's model (the phase's preset, overridden
 * by the flags) with `apply` (NULL: score only) and install it as the engine's expert load
 * observer; without, nothing (and -1 when another --eplb-* flag was given: it would be
 * ignored).  Before the first request.  -1 with the cause. */
int cli_eplb_start(CliEplb *c, DiEngine *engine, DiEplbApplyFn apply, void *apply_user);
/* DiServerConfig.extra_metrics for the driver (user = the CliEplb). */
int cli_eplb_metrics(void *user, DiApiBuf *out);
/* One line of the driver's counters and moe_lb (generate's summary); nothing when off. */
void cli_eplb_summary(const CliEplb *c, FILE *out);
void cli_eplb_stop(CliEplb *c);

#endif
