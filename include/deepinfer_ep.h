/* deepinfer_ep.h — expert parallelism across processes (issue 25, serving.md §8.2, §9): the routed
 * experts of the main layers run on other MPI ranks, placed by an EPLB plan (DiEplbPlan,
 * deepinfer_cluster.h).
 *
 * It lives in its own library, build/libdeepinfer_ep.a (src/ep), built with mpicc's flags and
 * linked only into the CLI and the tests that need it: the engine library (libdeepinfer.{a,so})
 * never links MPI.  Rank 0 runs the engine (scheduler, every non-expert layer, the router, the
 * gather and the combine); ranks 1..N-1 serve the routed experts the plan places on them
 * (src/ep/ep.h explains the choice).  With N = 1 everything runs in one process as without
 * expert parallelism.  Conventions are deepinfer.h's: 0 on success, -1 with di_last_error(). */
#ifndef DEEPINFER_EP_H
#define DEEPINFER_EP_H

#include "deepinfer_cluster.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One process's expert-parallel context (rank 0's or a worker's). */
typedef struct DiEp DiEp;

/* Switch to a new placement at a step boundary (between two di_engine_step calls on rank 0):
 * plan->num_layers must be the model's main layer count, num_logical its routed experts per
 * layer and num_gpus the number of expert-serving ranks (di_ep_expert_ranks).  Every later MoE
 * layer dispatches by the new plan; a worker starts using an expert it newly holds (its pages
 * are touched on first use) and drops the pages of one it no longer holds.  The plan is copied.
 * On a worker rank, or with a plan that does not fit, -1 with the cause (the old plan stays). */
int di_ep_apply_plan(DiEp *ep, const DiEplbPlan *plan);

/* The number of ranks that serve experts: the P of a plan for this job (1 when N = 1). */
int di_ep_expert_ranks(const DiEp *ep);
/* The plan in use on rank 0 (owned by ep, valid until the next di_ep_apply_plan), NULL before
 * the engine's model is attached or on an expert rank. */
const DiEplbPlan *di_ep_current_plan(const DiEp *ep);

/* ---- the MPI job (`mpirun -n N deepinfer generate|serve --expert-parallel`) ---------------- */

/* Initialise MPI (MPI_Init_thread, serialized: one thread at a time talks to the other ranks,
 * the engine's stepping thread, which in `serve` is not the main one) and return this
 * process's context.  timeout_s (> 0): the longest rank 0 waits for
 * an expert rank's answer before it names the rank and ends the job.  Run without mpirun, the
 * job is one rank and everything stays local. */
DiEp *di_ep_mpi_init(double timeout_s);
int di_ep_rank(const DiEp *ep);
int di_ep_size(const DiEp *ep);
/* An expert rank (rank >= 1): answer rank 0 until it stops the job.  0 then; on an error the
 * rank prints it and aborts the whole job (MPI_Abort), since rank 0 cannot go on without it. */
int di_ep_serve(DiEp *ep);
/* Rank 0, at the end, after the engine the job's model belongs to is destroyed (that model is not
 * touched here): with failed = 0, stop the expert ranks and print each rank's memory and the
 * traffic to stderr; with failed != 0 (the command failed, e.g. a rank did not answer) abort the
 * job (MPI_Abort) so no rank is left waiting.  Then finalize MPI and free ep.  Returns 0, or -1
 * when stopping failed (the job is aborted then too). */
int di_ep_finish(DiEp *ep, int failed);

#ifdef __cplusplus
}
#endif

#endif
