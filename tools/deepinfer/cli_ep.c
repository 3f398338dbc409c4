/* cli_ep.c — see cli_ep.h. */
#include "cli_ep.h"

#include "base/error.h"
#include "base/mem.h"
#include "cli_engine.h"
#include "ep/ep.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char cli_ep_help[] =
    "  --expert-parallel   run under `mpirun -n N`: rank 0 runs the engine, ranks 1..N-1 hold and run the\n"
    "                      routed experts (EPLB placement, bit-identical results for any N)\n"
    "  --ep-timeout S      seconds rank 0 waits for an expert rank before it names it and ends the job\n"
    "                      (default 120)\n"
    "  --ep-dispatch F     how rank 0 sends the experts' input rows: fp8 (E4M3 codes + a power-of-two scale\n"
    "                      per 32 values, the default: bit-exact, since the ref numerics quantise them so)\n"
    "                      or f32 (4 bytes a value)\n"
    "  --ep-prefault        make each rank's experts resident when it gets them (MADV_POPULATE_READ),\n"
    "                      not on first use: no page fault on the serving path (with N = 1: all experts)\n"
    "  --ep-test-replan-steps N   test only: every N engine steps apply a new EPLB plan (pseudo-random\n"
    "                      load, one redundant expert per rank), moving experts mid-generation\n";

int cli_ep_flag(const char *o, const char *v, CliEp *e, int *used_value, int *bad) {
    *used_value = 1;
    *bad = 0;
    char *end = NULL;
    if (strcmp(o, "--expert-parallel") == 0 || strcmp(o, "--ep-prefault") == 0) {
        *(o[2] == 'e' && o[3] == 'x' ? &e->on : &e->prefault) = true;
        *used_value = 0;
    } else if (strcmp(o, "--ep-timeout") == 0) {
        errno = 0;
        e->timeout_s = v ? strtod(v, &end) : 0;
        *bad = !v || errno || end == v || *end || !(e->timeout_s > 0 && e->timeout_s <= 1e6);
    } else if (strcmp(o, "--ep-dispatch") == 0) {
        *bad = !v || (strcmp(v, "fp8") != 0 && strcmp(v, "f32") != 0);
        e->dispatch = *bad ? -1 : strcmp(v, "fp8") == 0 ? EP_WIRE_FP8 : EP_WIRE_F32;
    } else if (strcmp(o, "--ep-test-replan-steps") == 0) {
        errno = 0;
        long long n = v ? strtoll(v, &end, 10) : -1;
        *bad = !v || errno || end == v || *end || n < 1 || n > 1000000000;
        e->replan_steps = n;
    } else {
        return 0;
    }
    return 1;
}

int cli_ep_start(CliEp *e, int *status) {
    *status = 0;
    if (!e->on) {
        if (e->replan_steps || e->prefault || e->dispatch >= 0)
            return di_errorf("--ep-test-replan-steps, --ep-prefault and --ep-dispatch need --expert-parallel");
        return 0;
    }
    if (!(e->ep = di_ep_mpi_init(e->timeout_s))) return -1;
    ep_set_prefault(e->ep, e->prefault);
    if (di_ep_rank(e->ep) != 0) {
        /* rank 0 ends the job (its STOP, or its MPI_Abort): a Ctrl-C that mpirun forwards to every
         * rank must not kill an expert rank under a serving rank 0 */
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &set, NULL);
        *status = di_ep_serve(e->ep) == 0 ? 0 : 1; /* a failing rank aborts the job inside */
        e->ep = NULL;
        return 1;
    }
    if (e->dispatch >= 0 && ep_set_wire(e->ep, (EpWire)e->dispatch) != 0) {
        fprintf(stderr, "deepinfer: %s\n", di_last_error());
        di_ep_finish(e->ep, 1); /* ends the whole job */
        e->ep = NULL;
        return -1;
    }
    cli_set_model_hook(ep_model_hook, e->ep);
    return 0;
}

/* xorshift64: the test plan's load, a function of the step only (every run replans the same). */
static uint64_t next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

int cli_ep_after_step(CliEp *e, int64_t step) {
    if (!e->ep || !e->replan_steps || step % e->replan_steps) return 0;
    const DiEplbPlan *cur = di_ep_current_plan(e->ep);
    if (!cur) return 0;
    int L = cur->num_layers, E = cur->num_logical, P = cur->num_gpus, R = (E + P - 1) / P * P + P;
    float *w = di_malloc((size_t)L * (size_t)E * sizeof *w, "test load");
    if (!w) return -1;
    uint64_t s = 0x9E3779B97F4A7C15ull ^ (uint64_t)step;
    for (int64_t i = 0; i < (int64_t)L * E; i++) w[i] = (float)(next(&s) % 1000) + 1.0f;
    DiEplbPlan plan;
    int rc = di_eplb_rebalance(w, L, E, R, 1, 1, P, &plan);
    free(w);
    if (rc == 0) rc = di_ep_apply_plan(e->ep, &plan);
    di_eplb_plan_free(&plan);
    return rc == 0 ? 0 : di_error_wrap("--ep-test-replan-steps: replan at step %lld", (long long)step);
}

static int apply_plan(void *ep, const DiEplbPlan *plan) { return di_ep_apply_plan(ep, plan); }

int cli_ep_eplb_start(CliEp *e, CliEplb *c, DiEngine *engine) {
    if (!e->ep || di_ep_size(e->ep) < 2) return cli_eplb_start(c, engine, NULL, NULL);
    int P = di_ep_expert_ranks(e->ep);
    if (c->ranks && c->ranks != P)
        return di_errorf("--eplb-ranks %ld: this job has %d expert ranks (mpirun -n %d), the plans must place on them", c->ranks, P,
                         P + 1);
    return cli_eplb_start(c, engine, apply_plan, e->ep);
}

void cli_ep_finish(CliEp *e, int failed) {
    if (!e->ep) return;
    cli_set_model_hook(NULL, NULL);
    di_ep_finish(e->ep, failed);
    e->ep = NULL;
}
