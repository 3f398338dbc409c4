/* ep.h — the expert-parallel context (DiEp, deepinfer_ep.h) inside the EP library: the link to
 * the other ranks, rank 0's side (the MoE executor it installs in the model, applying plans)
 * and an expert rank's side (EpWorker: the messages it answers).
 *
 * Who does what.  Rank 0 runs the engine: the scheduler, every non-expert layer, the router, the
 * gather, the shared expert and the combine.  With N >= 2 ranks the routed experts of the main
 * layers live only on ranks 1..N-1 (P = N - 1 in the plan); rank 0 holds none.  That is what
 * meets the memory target: on the medium checkpoint the main layers' routed experts are 83 % of
 * the weights, so with N = 4 an expert rank holds a third of them (~28 % of the weights) and rank
 * 0 the other 17 %; had rank 0 held a quarter of the experts as well, it would carry
 * 17 % + 21 % = 38 % and miss the 0.35x target.  The draft (DSpark) layers' experts stay on rank
 * 0.  With N = 1 no executor is installed: everything runs as without expert parallelism.
 *
 * The link (EpLink) is the transport: the MPI one (ep_mpi.c) and an in-process one
 * (ep_link_local.c: the expert ranks are EpWorkers in the same process, for the dispatch tests).
 * Messages between rank 0 and an expert rank are ordered, so a PLAN sent at a step boundary is
 * applied by every rank before the next LAYER that uses it. */
#ifndef DI_EP_EP_H
#define DI_EP_EP_H

#include "deepinfer_ep.h"
#include "ep/ep_dispatch.h"
#include "ep/ep_place.h"

#include <stdbool.h>

typedef struct {
    /* Send rank `rank` the header, then its payload when h->bytes > 0, and when h->reply_bytes >
     * 0 receive its answer into `reply`; the buffers stay valid until wait.  May complete at once. */
    int (*post)(void *ctx, int rank, const EpHeader *h, const void *payload, void *reply);
    /* Complete every post; bounded (an error names the rank that did not answer). */
    int (*wait)(void *ctx);
    void *ctx;
} EpLink;

/* Per-rank figures a STOP collects (rank 0's own from this process). */
typedef struct {
    int64_t hwm_kb, rss_kb;   /* VmHWM, VmRSS */
    int64_t released_bytes;   /* pages given back for experts a replan moved away */
    int64_t layers_served;    /* LAYER messages answered */
} EpRankStats;

/* Rank 0's traffic counters (remote ranks only). */
typedef struct {
    int64_t calls, tokens;          /* MoE layer calls dispatched, their tokens summed */
    int64_t remote_asg;             /* (token, expert) rows computed on another rank */
    int64_t dispatch_bytes, combine_bytes; /* headers + payloads out, replies in */
    int64_t plans;                  /* plans applied */
    int64_t hidden;                 /* the model's hidden size (floats per row) */
    EpWire wire;                    /* how dispatched rows travel */
} EpTraffic;

/* INIT's leading int64 words: mode, rows, prefault, dispatch format (then the directory). */
#define EP_INIT_WORDS 4

/* ---- rank 0 ----------------------------------------------------------------------------- */

/* A context for rank `rank` of n_ranks over link (copied; unused when n_ranks is 1). */
DiEp *ep_create(int rank, int n_ranks, const EpLink *link);
/* Rank 0: tell every expert rank to load `dir` (INIT), place the experts by ep_default_plan and
 * install the executor in m (N >= 2).  m must not be running a forward. */
int ep_attach(DiEp *ep, Model *m, const char *dir);
/* engine.h DiModelHook form of ep_attach (ctx: the DiEp), for di_engine_create_hooked. */
int ep_model_hook(Model *m, const char *dir, void *ctx);
/* Rank 0: stop every expert rank and collect its figures into stats[n_ranks] (may be NULL). */
int ep_stop(DiEp *ep, EpRankStats *stats);
const EpTraffic *ep_traffic(const DiEp *ep);
int ep_rank(const DiEp *ep);
int ep_n_ranks(const DiEp *ep);
void ep_destroy(DiEp *ep);
/* Forget the attached model without touching it (it was freed with its engine), so that
 * ep_destroy does not remove the executor from it. */
void ep_forget_model(DiEp *ep);

/* This process's VmHWM / VmRSS in KiB (/proc/self/status). */
int ep_self_memory(int64_t *hwm_kb, int64_t *rss_kb);

/* ---- an expert rank --------------------------------------------------------------------- */

typedef struct {
    int rank;
    Model *m;            /* owned when loaded by INIT */
    bool own_model;
    EpPlacement pl;
    EpServe sv;
    bool prefault;       /* INIT's: make held experts resident when a plan gives them */
    EpWire wire;         /* INIT's: how LAYER payloads carry the rows */
    float *reply;        /* the current answer */
    size_t cap_reply;
    EpRankStats stats;
} EpWorker;

/* A worker for `rank`; m (may be NULL) is a model already loaded (the in-process link), else
 * INIT loads one. */
void ep_worker_init(EpWorker *w, int rank, Model *m);
/* Answer one message: *reply (reply_bytes as the header says) points into the worker until the
 * next call; *stop is set by STOP. */
int ep_worker_handle(EpWorker *w, const EpHeader *h, const uint8_t *payload, const void **reply, bool *stop);
void ep_worker_free(EpWorker *w);
/* Make one expert's pages resident (resident true) or give them back; the bytes, -1 on error. */
int64_t ep_expert_pages(const Model *m, const ExpertWeights *ex, bool resident);
/* Rank 0, before ep_attach: expert ranks fault in the experts a plan gives them at once (and with
 * N = 1 this process all experts), instead of on first use. */
void ep_set_prefault(DiEp *ep, bool on);
/* Rank 0, before ep_attach: send rows in `wire` form instead of the default (ep_wire_default of
 * the model's numerics); ep_attach refuses a format that is not exact for the model. */
int ep_set_wire(DiEp *ep, EpWire wire);

/* ---- the in-process link ---------------------------------------------------------------- */

/* The reference transport: expert rank k (1 <= k < n_ranks) is workers[k], in this process; a
 * post is answered at once.  *out's ctx points at `workers`, which must outlive it. */
typedef struct {
    EpWorker *workers;
    int n_ranks;
} EpLocalLink;
int ep_link_local(EpLocalLink *ll, EpWorker *workers, int n_ranks, EpLink *out);

#endif
