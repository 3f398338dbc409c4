/* cli_ep.h — `--expert-parallel` for generate and serve (include/deepinfer_ep.h): the flags, the
 * start of an MPI job (an expert rank serves and exits there; rank 0 goes on with the command,
 * its engine's model handed to the expert ranks at load), the test replan and the end. */
#ifndef DI_TOOLS_CLI_EP_H
#define DI_TOOLS_CLI_EP_H

#include "cli_eplb.h"
#include "deepinfer_ep.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    bool on;             /* --expert-parallel */
    double timeout_s;    /* --ep-timeout S */
    int64_t replan_steps; /* --ep-test-replan-steps N (0: never) */
    bool prefault;       /* --ep-prefault */
    int dispatch;        /* --ep-dispatch: -1 the default (fp8 where exact), else EpWire (ep/ep_dispatch.h) */
    DiEp *ep;            /* the job, once started */
} CliEp;

#define CLI_EP_DEFAULTS {false, 120.0, 0, false, -1, NULL}

/* --expert-parallel and --ep-prefault (no value: return 1 and *used_value 0), --ep-timeout S,
 * --ep-test-replan-steps N, --ep-dispatch fp8|f32.  Returns 1 when `opt` is one of them (*bad set
 * when the value is invalid), else 0. */
int cli_ep_flag(const char *opt, const char *val, CliEp *e, int *used_value, int *bad);
extern const char cli_ep_help[];

/* With e->on: start the MPI job.  Returns 0 on rank 0 (the command goes on; the next engine
 * attaches the expert ranks), 1 on an expert rank (it has served until rank 0 stopped it: exit
 * with *status), -1 with the cause.  Without e->on: 0, nothing done. */
int cli_ep_start(CliEp *e, int *status);
/* Rank 0 after engine step `step` (1-based): with --ep-test-replan-steps N, every N steps apply a
 * new EPLB plan (di_ep_apply_plan) made from a pseudo-random load, with one redundant expert per
 * rank, so experts move between ranks mid-generation. */
int cli_ep_after_step(CliEp *e, int64_t step);
/* Start live EPLB (cli_eplb_start) on the engine: under a job of N >= 2 ranks its plans are
 * applied (di_ep_apply_plan) and --eplb-ranks must be the expert ranks, N - 1; otherwise plans
 * are only scored, as without expert parallelism. */
int cli_ep_eplb_start(CliEp *e, CliEplb *c, DiEngine *engine);
/* Rank 0 at the end (failed: the command failed): di_ep_finish.  Nothing without a job. */
void cli_ep_finish(CliEp *e, int failed);

#endif
