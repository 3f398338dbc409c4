/* ep.c — rank 0's side of expert parallelism: the MoE executor installed in the engine's model,
 * control messages (INIT, PLAN, STOP) and di_ep_apply_plan (ep.h, deepinfer_ep.h). */
#include "ep/ep.h"

#include "base/error.h"
#include "base/mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct DiEp {
    int rank, n_ranks, first_rank, n_gpus;
    EpLink link;
    Model *m;
    DiEplbPlan plan; /* owned copy of the plan in use */
    EpPlacement pl;
    EpPack pk;
    MoeExecutor exec;
    EpTraffic tr;
    EpHeader *ctl;    /* [n_ranks] control headers */
    int64_t *answer;  /* [n_ranks][4] control answers */
    uint8_t *msg;     /* control payload */
    bool prefault;
    bool wire_given; /* ep_set_wire, else the default at ep_attach */
};

void ep_set_prefault(DiEp *ep, bool on) {
    if (ep) ep->prefault = on;
}

int ep_set_wire(DiEp *ep, EpWire wire) {
    if (!ep || (wire != EP_WIRE_F32 && wire != EP_WIRE_FP8)) return di_errorf("ep_set_wire: no context or an unknown format");
    if (ep->m) return di_errorf("ep_set_wire: the dispatch format is fixed once the model is attached");
    ep->tr.wire = wire;
    ep->wire_given = true;
    return 0;
}

DiEp *ep_create(int rank, int n_ranks, const EpLink *link) {
    if (n_ranks <= 0 || rank < 0 || rank >= n_ranks || (n_ranks > 1 && (!link || !link->post || !link->wait))) {
        di_errorf("ep_create: rank %d of %d%s", rank, n_ranks, link ? "" : " without a link");
        return NULL;
    }
    DiEp *ep = di_calloc(1, sizeof *ep, "expert-parallel context");
    if (!ep) return NULL;
    ep->rank = rank;
    ep->n_ranks = n_ranks;
    ep->first_rank = n_ranks > 1 ? 1 : 0;
    ep->n_gpus = n_ranks > 1 ? n_ranks - 1 : 1;
    if (link) ep->link = *link;
    ep->ctl = di_calloc((size_t)n_ranks, sizeof *ep->ctl, "control headers");
    ep->answer = di_calloc((size_t)n_ranks * 4, sizeof *ep->answer, "control answers");
    if (!ep->ctl || !ep->answer) {
        ep_destroy(ep);
        return NULL;
    }
    return ep;
}

void ep_destroy(DiEp *ep) {
    if (!ep) return;
    if (ep->m && ep->m->moe_exec == &ep->exec) model_set_moe_executor(ep->m, NULL);
    di_eplb_plan_free(&ep->plan);
    ep_placement_free(&ep->pl);
    ep_pack_free(&ep->pk);
    free(ep->ctl);
    free(ep->answer);
    free(ep->msg);
    free(ep);
}

void ep_forget_model(DiEp *ep) {
    if (ep) ep->m = NULL;
}

int ep_rank(const DiEp *ep) { return ep ? ep->rank : -1; }
int ep_n_ranks(const DiEp *ep) { return ep ? ep->n_ranks : 0; }
int di_ep_expert_ranks(const DiEp *ep) { return ep ? ep->n_gpus : 0; }
const EpTraffic *ep_traffic(const DiEp *ep) { return ep ? &ep->tr : NULL; }
const DiEplbPlan *di_ep_current_plan(const DiEp *ep) { return ep && ep->plan.phy2log ? &ep->plan : NULL; }

/* Send every expert rank the same control message (header h, payload ep->msg) and wait for
 * their answers (h->reply_bytes each, into ep->answer[rank]). */
static int broadcast(DiEp *ep, const EpHeader *h) {
    for (int k = ep->first_rank; k < ep->n_ranks && ep->n_ranks > 1; k++) {
        ep->ctl[k] = *h;
        if (ep->link.post(ep->link.ctx, k, &ep->ctl[k], ep->msg, h->reply_bytes ? ep->answer + 4 * k : NULL) != 0) return -1;
    }
    return ep->n_ranks > 1 ? ep->link.wait(ep->link.ctx) : 0;
}

/* ---- the executor ----------------------------------------------------------------------- */

static int ep_dispatch(void *ctx, const Model *m, const MoeRouted *r) {
    DiEp *ep = ctx;
    int64_t D = m->d.dim;
    if (ep_pack_build(&ep->pk, &ep->pl, r, D, ep->n_ranks, ep->tr.wire) != 0) return -1;
    ep->tr.calls++;
    int64_t rows = r->n_slots ? r->slots[r->n_slots - 1].off + r->slots[r->n_slots - 1].cnt : 0, n_tok = 0;
    for (int64_t g = 0; g < rows; g++) /* every token has top-k rows: the call's tokens are 0 .. max */
        if (r->token[g] + 1 > n_tok) n_tok = r->token[g] + 1;
    ep->tr.tokens += n_tok;
    for (int k = 0; k < ep->n_ranks; k++) {
        const EpHeader *h = &ep->pk.hdr[k];
        if (!h->n_asg) continue;
        if (k == ep->rank) return di_errorf("layer %d: rank 0 holds no experts, yet the plan placed rows on it", r->layer);
        if (ep->link.post(ep->link.ctx, k, h, ep->pk.buf + ep->pk.pay_off[k], ep->pk.reply + ep->pk.asg_off[k] * D) != 0) return -1;
        ep->tr.remote_asg += h->n_asg;
        ep->tr.dispatch_bytes += (int64_t)sizeof *h + h->bytes;
        ep->tr.combine_bytes += h->reply_bytes;
    }
    return 0;
}

static int ep_combine(void *ctx, const Model *m, const MoeRouted *r) {
    DiEp *ep = ctx;
    if (ep->link.wait(ep->link.ctx) != 0) return -1;
    ep_pack_combine(&ep->pk, r, m->d.dim);
    return 0;
}

/* ---- plans ------------------------------------------------------------------------------ */

static int copy_plan(const DiEplbPlan *src, DiEplbPlan *dst) {
    memset(dst, 0, sizeof *dst);
    size_t LR = (size_t)src->num_layers * (size_t)src->num_replicas, LE = (size_t)src->num_layers * (size_t)src->num_logical;
    size_t X = (size_t)src->max_replicas;
    *dst = *src;
    dst->phy2log = di_malloc(LR * sizeof(int32_t), "plan");
    dst->phy_rank = di_malloc(LR * sizeof(int32_t), "plan");
    dst->log2phy = di_malloc(LE * X * sizeof(int32_t), "plan");
    dst->logcnt = di_malloc(LE * sizeof(int32_t), "plan");
    if (!dst->phy2log || !dst->phy_rank || !dst->log2phy || !dst->logcnt) {
        di_eplb_plan_free(dst);
        return -1;
    }
    memcpy(dst->phy2log, src->phy2log, LR * sizeof(int32_t));
    memcpy(dst->phy_rank, src->phy_rank, LR * sizeof(int32_t));
    memcpy(dst->log2phy, src->log2phy, LE * X * sizeof(int32_t));
    memcpy(dst->logcnt, src->logcnt, LE * sizeof(int32_t));
    return 0;
}

static int check_plan(const DiEp *ep, const DiEplbPlan *plan) {
    if (!plan || !plan->phy2log || !plan->phy_rank || !plan->log2phy || !plan->logcnt || plan->max_replicas <= 0)
        return di_errorf("di_ep_apply_plan: no plan (or one without its arrays) given");
    if (plan->num_layers != ep->m->d.n_layers || plan->num_logical != ep->m->d.n_experts || plan->num_gpus != ep->n_gpus)
        return di_errorf("di_ep_apply_plan: a plan for %d layers of %d experts on %d ranks; this job has %d layers of %d "
                         "experts on %d expert ranks",
                         plan->num_layers, plan->num_logical, plan->num_gpus, ep->m->d.n_layers, ep->m->d.n_experts, ep->n_gpus);
    return 0;
}

int di_ep_apply_plan(DiEp *ep, const DiEplbPlan *plan) {
    if (!ep) return di_errorf("di_ep_apply_plan: no context given");
    if (ep->rank != 0 || !ep->m) return di_errorf("di_ep_apply_plan: only rank 0, after the model is attached, applies plans");
    if (check_plan(ep, plan) != 0) return -1;
    int L = plan->num_layers, R = plan->num_replicas;
    EpPlacement pl;
    if (ep_placement_build(L, plan->num_logical, R, plan->num_gpus, ep->first_rank, plan->phy2log, plan->phy_rank, &pl) != 0)
        return di_error_wrap("di_ep_apply_plan");
    DiEplbPlan copy;
    size_t LR = (size_t)L * (size_t)R, bytes = 20 + 8 * LR;
    uint8_t *msg = realloc(ep->msg, bytes);
    if (!msg || copy_plan(plan, &copy) != 0) {
        ep_placement_free(&pl);
        return msg ? -1 : di_errorf("out of memory for a plan message");
    }
    ep->msg = msg;
    int32_t dims[5] = {L, plan->num_logical, R, plan->num_gpus, ep->first_rank};
    memcpy(msg, dims, sizeof dims);
    memcpy(msg + 20, plan->phy2log, LR * 4);
    memcpy(msg + 20 + 4 * LR, plan->phy_rank, LR * 4);
    EpHeader h = {EP_CMD_PLAN, 0, 0, 0, (int64_t)bytes, 8};
    if (broadcast(ep, &h) != 0) {
        ep_placement_free(&pl);
        di_eplb_plan_free(&copy);
        return di_error_wrap("sending the new plan");
    }
    ep_placement_free(&ep->pl);
    di_eplb_plan_free(&ep->plan);
    ep->pl = pl;
    ep->plan = copy;
    ep->tr.plans++;
    return 0;
}

/* ---- attach and stop -------------------------------------------------------------------- */

int ep_attach(DiEp *ep, Model *m, const char *dir) {
    if (!ep || !m || !dir) return di_errorf("ep_attach: invalid arguments");
    if (ep->rank != 0 || ep->m) return di_errorf("ep_attach: only rank 0 attaches, once");
    size_t len = strlen(dir);
    if (len == 0 || len > 4096) return di_errorf("ep_attach: model directory of %zu bytes", len);
    if (!ep->wire_given) ep->tr.wire = ep_wire_default(m->mode, m->d.dim);
    if (ep_wire_check(ep->tr.wire, m->mode, m->d.dim) != 0) return di_error_wrap("ep_attach");
    int64_t words[EP_INIT_WORDS] = {(int64_t)m->mode, m->ws ? m->ws->rows : 1, ep->prefault, ep->tr.wire};
    if (!(ep->msg = di_malloc(sizeof words + len, "INIT message"))) return -1;
    memcpy(ep->msg, words, sizeof words);
    memcpy(ep->msg + sizeof words, dir, len);
    EpHeader h = {EP_CMD_INIT, 0, 0, 0, (int64_t)(sizeof words + len), 0};
    if (broadcast(ep, &h) != 0) return di_error_wrap("starting the expert ranks");
    ep->m = m;
    DiEplbPlan plan;
    if (ep_default_plan(m->d.n_layers, m->d.n_experts, ep->n_gpus, &plan) != 0) return di_error_wrap("the starting expert plan");
    int rc = di_ep_apply_plan(ep, &plan);
    di_eplb_plan_free(&plan);
    if (rc != 0) return -1;
    ep->tr.plans = 0;
    ep->tr.hidden = m->d.dim;
    if (ep->n_ranks == 1) { /* everything local, as without expert parallelism */
        for (int l = 0; ep->prefault && l < m->d.n_layers; l++)
            for (int e = 0; e < m->d.n_experts; e++)
                if (ep_expert_pages(m, &m->w.layers[l].experts[e], true) < 0) return -1;
        return 0;
    }
    ep->exec = (MoeExecutor){ep_dispatch, ep_combine, ep};
    return model_set_moe_executor(m, &ep->exec);
}

_Static_assert(sizeof(EpRankStats) == 4 * sizeof(int64_t), "a STOP answer is the four words of EpRankStats");

int ep_stop(DiEp *ep, EpRankStats *stats) {
    if (!ep || ep->rank != 0) return di_errorf("ep_stop: only rank 0 stops the job");
    EpHeader h = {EP_CMD_STOP, 0, 0, 0, 0, (int64_t)sizeof(EpRankStats)};
    if (broadcast(ep, &h) != 0) return di_error_wrap("stopping the expert ranks");
    if (stats) {
        for (int k = ep->first_rank; k < ep->n_ranks; k++) memcpy(&stats[k], ep->answer + 4 * k, sizeof *stats);
        memset(&stats[0], 0, sizeof stats[0]);
        if (ep_self_memory(&stats[0].hwm_kb, &stats[0].rss_kb) != 0) return -1;
    }
    return 0;
}

int ep_self_memory(int64_t *hwm_kb, int64_t *rss_kb) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return di_errorf("/proc/self/status: cannot open");
    char line[256];
    long long v;
    *hwm_kb = *rss_kb = -1;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "VmHWM: %lld kB", &v) == 1) *hwm_kb = v;
        if (sscanf(line, "VmRSS: %lld kB", &v) == 1) *rss_kb = v;
    }
    fclose(f);
    return *hwm_kb < 0 || *rss_kb < 0 ? di_errorf("/proc/self/status: no VmHWM / VmRSS") : 0;
}
