/* sim.c — the cluster simulator's event loop (see sim.h).
 *
 * Entities: prefill instances (each an EP group whose ranks step together), one decode EP group,
 * the arrival stream and the quota controller.  The loop repeatedly takes the earliest pending
 * event (ties: instance step ends by index, then the decode step end, then arrivals, then the
 * quota tick — a fixed order, so runs are reproducible), applies it, and lets idle instances and
 * the idle decode group start a step.  With a dozen entities a linear scan for the next event
 * is cheaper than a heap; only decode-ready requests (out of order, after KV transfer) use a heap.
 *
 * Cost coefficients of di_sim_config_default are assumptions chosen to be plausible for
 * V4.1-Flash on H200-class GPUs (8 B active parameters in prefill, 16 B in decode, serving.md §3),
 * not measurements; every one can be changed from the command line and they are printed with the
 * results. */
#include "cluster/sim/sim.h"

#include "base/error.h"
#include "base/mem.h"
#include "cluster/rng.h"
#include "cluster/sim/prefix_cache.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void di_sim_config_default(DiSimConfig *c) {
    memset(c, 0, sizeof *c);
    c->prefill_instances = 8; /* 64 prefill GPUs as EP8 instances (§2.1, §6.2) */
    c->prefill_ranks = 8;
    c->decode_ranks = 64; /* one EP64 decode group (§7.2) */
    c->speedup = 1.0;
    c->cache_blocks = 1 << 20; /* 512 M tokens of prefix KV in the shared pool */
    /* prefill per rank: ~40 k tok/s of linear work (25 us/token), attention terms, 2 ms fixed */
    c->prefill_cost = (DiPrefillCost){0.02, 0.02, 25000.0, 5.0, 2.0e6};
    /* decode per rank: 10 ms fixed (dispatch/combine, launch), 40 us per request, 2 ns per KV token */
    c->decode_cost = (DiDecodeCost){10.0e6, 40.0e3, 2.0};
    c->tier_budget_ms[0] = 150.0;
    c->tier_budget_ms[1] = 300.0;
    c->tier_budget_ms[2] = 600.0;
    c->tier_budget_ms[3] = 1200.0;
    c->fifo_budget_ms = 300.0;
    /* assumed TTFT objectives, doubling per tier; they weigh queue heads against each other
     * (pick_tier).  Measured on the conversation trace at x40-x80: 1/2/4/8 s keeps the 64-256K
     * p99 within 4 % of one FIFO; 1/3/10/30 s let it reach 1.07x at x80 and 1.56x at x100. */
    c->tier_slo_ms[0] = 1000.0;
    c->tier_slo_ms[1] = 2000.0;
    c->tier_slo_ms[2] = 4000.0;
    c->tier_slo_ms[3] = 8000.0;
    c->jump_slowdown = 0.0; /* no overtaking across tiers on a rank: measured best, see may_overtake */
    c->rr_chunk_tokens = 8192;
    c->token_cap = 32768; /* DeepEP normal-mode buffers (§6.3) */
    c->chunk = (DiChunkRules){512, 512};
    c->profile_noise = 0.02; /* 2 % step-time jitter while profiling */
    for (int t = 0; t < DI_PREFILL_TIERS; t++) c->quota_min[t] = 1; /* every tier keeps a home instance */
    c->quota_period_s = 1.0; /* Δ of §6.2 */
    c->kv_bytes_per_token = 890.0; /* V4.1 HBM-resident KV (§3) */
    c->transfer_gb_per_s = 6.25;   /* 400 Gbps per 8 GPUs (§2.2) */
    c->decode_lookahead = 64;
    c->decode_max_requests = 256; /* DeepEP low-latency batch per rank (§7.2) */
    c->decode_max_kv_tokens = 64LL << 20;
    c->moe_layers = 4;
    c->moe_experts = 384; /* V4.1-Flash routed experts, top-6 (model-v41.md) */
    c->moe_top_k = 6;
    c->moe_skew = 0.6;
    c->moe_drift_tau_s = 21600.0; /* assumed: expert popularity decorrelates over ~6 hours */
    c->seed = 1;
    c->prefill_policy = DI_SIM_PREFILL_TIERED;
    c->decode_policy = DI_DECODE_LB_BALANCED;
}

const char *di_sim_prefill_policy_name(DiSimPrefillPolicy p) {
    switch (p) {
    case DI_SIM_PREFILL_TIERED: return "tiered";
    case DI_SIM_PREFILL_FIFO: return "fifo";
    case DI_SIM_PREFILL_ROUND_ROBIN: return "round-robin";
    }
    return "unknown";
}

/* ---- state ------------------------------------------------------------------------------ */

typedef struct {
    double arrival, prefill_done, decode_start, ready;
    int64_t remaining, c, q, cached, generated;
    int tier, decode_rank, next; /* next: FIFO link */
    double queued_cost;          /* predicted cost while queued (quota demand) */
    double solo_ns, overtaken_ns; /* tiered: predicted cost when placed on its rank, and the
                                     predicted cost of later work placed ahead of it since */
} Req;

typedef struct {
    int head, tail;
} Fifo;

typedef struct {
    int *ids;
    int n, cap;
    double backlog_ns; /* predicted cost of all remaining work */
    Fifo own;          /* round robin: the rank's own queue */
} Rank;

typedef struct {
    Rank *ranks;
    int tier, busy;
    double step_end;
} Instance;

typedef struct {
    double *v;
    size_t n, cap;
} Samples;

typedef struct {
    const DiSimTrace *trace;
    const DiSimConfig *cfg;
    DiPrefillCost model; /* the scheduler's cost model, fitted from profiled step times */
    DiPrefillCorrection correction; /* measured / predicted step time (§6.3 online refit) */
    double planned_ns;   /* the fitted model's prediction of the step being planned */
    Req *req;
    Instance *inst;
    Fifo tier_q[DI_PREFILL_TIERS], fifo_q;
    int rr_next;
    DiPrefixCache *cache;
    DiDecodeLb dlb;
    DiPrefillQuota quota;
    double tier_queued_ns[DI_PREFILL_TIERS], tier_arrivals[DI_PREFILL_TIERS], tier_cost_sum[DI_PREFILL_TIERS];
    double tier_cost_n[DI_PREFILL_TIERS];
    /* decode */
    int *running, n_running, *ready_heap, n_ready;
    int decode_busy;
    double decode_end;
    /* stats */
    Samples ttft[DI_PREFILL_TIERS], tpot, dec_ratio;
    double sum_pmax, sum_pmean, sum_dmax, sum_dmean;
    double tier_input[DI_PREFILL_TIERS], tier_cached[DI_PREFILL_TIERS];
    double last_done, out_tokens, in_tokens;
    size_t done;
    DiSimMoe *moe_prefill, *moe_decode;
    DiSimResult *res;
} Sim;

static int sample_push(Samples *s, double x) {
    if (di_grow(&s->v, &s->cap, s->n + 1, 1024, sizeof *s->v, "simulation samples") != 0) return -1;
    s->v[s->n++] = x;
    return 0;
}

static void fifo_push(Sim *s, Fifo *f, int id) {
    s->req[id].next = -1;
    if (f->tail >= 0) s->req[f->tail].next = id;
    else f->head = id;
    f->tail = id;
}

static int fifo_pop(Sim *s, Fifo *f) {
    int id = f->head;
    if (id < 0) return -1;
    f->head = s->req[id].next;
    if (f->head < 0) f->tail = -1;
    return id;
}

static double remaining_cost(const Sim *s, const Req *q);

/* May request `id` (cost `cost`) be placed ahead of `other` on a rank?  Ranks serve requests in
 * tier order, then age (§6.3 "Filling a step"); the FIFO and round-robin baselines keep plain
 * arrival order.  A shorter request overtakes a longer one only while the work that has
 * overtaken it stays within jump_slowdown of its own predicted cost: a long request is slowed
 * by a bounded factor instead of being starved by a stream of short ones (measured: unbounded
 * overtaking made the 64-256K TTFT p99 4.5x that of one FIFO at x80 load). */
static int may_overtake(const Sim *s, int id, double cost, int other) {
    const Req *q = &s->req[id], *o = &s->req[other];
    if (s->cfg->prefill_policy != DI_SIM_PREFILL_TIERED) return other > id;
    if (o->tier == q->tier) return other > id;
    return o->tier > q->tier && o->overtaken_ns + cost <= s->cfg->jump_slowdown * o->solo_ns;
}

/* Where request `id` would go on rank r, and the predicted cost of the work ahead of it. */
static int rank_position(const Sim *s, const Rank *r, int id, double *ahead_ns) {
    double cost = remaining_cost(s, &s->req[id]);
    int at = r->n;
    while (at > 0 && may_overtake(s, id, cost, r->ids[at - 1])) at--;
    *ahead_ns = 0.0;
    for (int k = 0; k < at; k++) *ahead_ns += remaining_cost(s, &s->req[r->ids[k]]);
    return at;
}

static int rank_add(Sim *s, Rank *r, int id) {
    size_t cap = (size_t)r->cap;
    if (di_grow(&r->ids, &cap, (size_t)r->n + 1, 8, sizeof *r->ids, "rank requests") != 0) return -1;
    r->cap = (int)cap;
    double ahead, cost = remaining_cost(s, &s->req[id]);
    int at = rank_position(s, r, id, &ahead);
    s->req[id].solo_ns = cost;
    s->req[id].overtaken_ns = 0.0;
    for (int k = r->n; k > at; k--) {
        r->ids[k] = r->ids[k - 1];
        s->req[r->ids[k]].overtaken_ns += cost;
    }
    r->ids[at] = id;
    r->n++;
    return 0;
}

static double remaining_cost(const Sim *s, const Req *q) {
    return di_prefill_cost_request_ns(&s->model, q->remaining, q->c);
}

/* ---- decode-ready heap (by ready time, then request index) ------------------------------- */

static int ready_before(const Sim *s, int a, int b) {
    return s->req[a].ready < s->req[b].ready || (s->req[a].ready == s->req[b].ready && a < b);
}

static void ready_push(Sim *s, int id) {
    int i = s->n_ready++;
    s->ready_heap[i] = id;
    while (i > 0 && ready_before(s, s->ready_heap[i], s->ready_heap[(i - 1) / 2])) {
        int p = (i - 1) / 2, t = s->ready_heap[p];
        s->ready_heap[p] = s->ready_heap[i];
        s->ready_heap[i] = t;
        i = p;
    }
}

static int ready_pop(Sim *s) {
    int top = s->ready_heap[0], i = 0;
    s->ready_heap[0] = s->ready_heap[--s->n_ready];
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < s->n_ready && ready_before(s, s->ready_heap[l], s->ready_heap[m])) m = l;
        if (r < s->n_ready && ready_before(s, s->ready_heap[r], s->ready_heap[m])) m = r;
        if (m == i) break;
        int t = s->ready_heap[m];
        s->ready_heap[m] = s->ready_heap[i];
        s->ready_heap[i] = t;
        i = m;
    }
    return top;
}

/* ---- arrivals --------------------------------------------------------------------------- */

static int on_arrival(Sim *s, int id) {
    const DiSimRequest *tr = &s->trace->reqs[id];
    Req *q = &s->req[id];
    int hit = di_prefix_cache_match(s->cache, tr->blocks, tr->n_blocks);
    int64_t cached = (int64_t)hit * DI_SIM_BLOCK_TOKENS;
    if (cached > tr->input_tokens - 1) cached = tr->input_tokens - 1; /* at least one token computes the first output */
    q->cached = q->c = cached;
    q->remaining = tr->input_tokens - cached;
    q->tier = di_prefill_tier(tr->input_tokens);
    s->tier_input[q->tier] += (double)tr->input_tokens;
    s->tier_cached[q->tier] += (double)cached;
    s->in_tokens += (double)tr->input_tokens;
    q->decode_rank = -1;
    q->queued_cost = remaining_cost(s, q);
    s->tier_arrivals[q->tier] += 1.0;
    s->tier_cost_sum[q->tier] += q->queued_cost;
    s->tier_cost_n[q->tier] += 1.0;
    switch (s->cfg->prefill_policy) {
    case DI_SIM_PREFILL_TIERED:
        s->tier_queued_ns[q->tier] += q->queued_cost;
        fifo_push(s, &s->tier_q[q->tier], id);
        break;
    case DI_SIM_PREFILL_FIFO: fifo_push(s, &s->fifo_q, id); break;
    case DI_SIM_PREFILL_ROUND_ROBIN: {
        int R = s->cfg->prefill_ranks, g = s->rr_next++ % (s->cfg->prefill_instances * R);
        fifo_push(s, &s->inst[g / R].ranks[g % R].own, id);
        break;
    }
    }
    return 0;
}

/* ---- prefill ---------------------------------------------------------------------------- */

/* Tiered pulling (§6.2), as refined by measurement in this simulator:
 *  - the next request comes from the queue whose head is latest relative to its tier's TTFT
 *    objective (wait / objective), the instance's own tier counting double (its quota is for
 *    it) — so an instance is work-conserving and no tier starves behind the quotas;
 *  - a request goes to a rank as long as the work that would run before it is under the
 *    budget of the step it joins (its own tier's budget, or the instance's if smaller),
 *    preferring the rank with the least total backlog; longer tiers are lent only ranks with a
 *    spare step;
 *  - on a rank, a shorter request overtakes a longer one only within the longer one's slowdown
 *    allowance (jump_slowdown, default 0: none), so long prefills are never starved;
 *  - a step's budget T is that of the shortest tier present (§6.3 "Choosing T": T must suit
 *    every request in the step).
 * Measured on the conversation trace (bench/bench_sim.c, `deepinfer sim`): unbounded
 * overtaking plus admission against the instance's budget gave the short tier 0.65x FIFO's TTFT
 * p99 at x80 load but 16-64K 2.0x and 64-256K 4.5x; these rules give <16K 0.72-0.86x,
 * 16-64K 0.92-0.99x and 64-256K 0.98-1.04x from x40 to x80 (x10: 0.74 / 1.02 / 1.02, the
 * long tiers paying ~2 % for 150 ms steps' block rounding). */
static int take_from_tier(Sim *s, int t) {
    int id = fifo_pop(s, &s->tier_q[t]);
    s->tier_queued_ns[t] -= s->req[id].queued_cost;
    if (s->tier_queued_ns[t] < 0) s->tier_queued_ns[t] = 0;
    return id;
}

/* The tier to pull from: the queued head with the largest lateness (wait / TTFT objective),
 * counting the instance's own tier double (its quota is for it); -1 when all queues are empty. */
static int pick_tier(const Sim *s, const Instance *in, double now) {
    int pick = -1;
    double best = -1.0;
    for (int t = 0; t < DI_PREFILL_TIERS; t++) {
        int head = s->tier_q[t].head;
        if (head < 0) continue;
        /* +1 ms: a head that has just arrived still counts, so the own-tier factor decides */
        double late = (now - s->req[head].arrival + 1e-3) / (1e-3 * s->cfg->tier_slo_ms[t]);
        if (t == in->tier) late *= 2.0;
        if (late > best) best = late, pick = t;
    }
    return pick;
}

static double budget_ns(const Sim *s, const Instance *in) {
    return 1e6 * (s->cfg->prefill_policy == DI_SIM_PREFILL_FIFO ? s->cfg->fifo_budget_ms : s->cfg->tier_budget_ms[in->tier]);
}

/* The rank for the next request.  For loans (priority_only = 0): the least total backlog.  For
 * own-tier or shorter work: among ranks whose higher-priority backlog is under the budget, the
 * one with the least total backlog (the smallest predicted finish, §6.2), so short requests do
 * not pile onto ranks busy with long ones while others are free.  *load is the backlog that
 * decides whether the rank can take more (>= budget: no). */
static int least_loaded(const Sim *s, const Instance *in, int id, int priority_only, double budget, double *load) {
    int best = -1;
    double best_total = 0.0;
    *load = INFINITY;
    for (int r = 0; r < s->cfg->prefill_ranks; r++) {
        double total = in->ranks[r].backlog_ns, gate = total;
        if (priority_only) rank_position(s, &in->ranks[r], id, &gate);
        if (gate >= budget && best >= 0) continue;
        if (best < 0 || (gate < budget && (*load >= budget || total < best_total))) {
            best = r;
            best_total = total;
            *load = gate;
        }
    }
    return best;
}

static int give(Sim *s, Instance *in, int rank, int id) {
    if (rank_add(s, &in->ranks[rank], id) != 0) return -1;
    in->ranks[rank].backlog_ns += remaining_cost(s, &s->req[id]);
    return 0;
}

/* Pull queued requests onto the ranks with the least predicted backlog until every rank has a
 * full step's worth (the smallest-predicted-finish rule of §6.2). */
static int pull_work(Sim *s, Instance *in, double budget, double now) {
    double load;
    if (s->cfg->prefill_policy == DI_SIM_PREFILL_FIFO) {
        for (;;) {
            int r = least_loaded(s, in, -1, 0, budget, &load);
            if (load >= budget || s->fifo_q.head < 0) return 0;
            if (give(s, in, r, fifo_pop(s, &s->fifo_q)) != 0) return -1;
        }
    }
    for (;;) {
        int t = pick_tier(s, in, now);
        if (t < 0) return 0;
        /* own-tier and shorter work sees only the backlog it would queue behind (rank order,
         * may_overtake); longer tiers are lent only ranks with a spare step.  The step the
         * request joins runs at its tier's budget at most (§6.3 "Choosing T"), so it is admitted
         * against that budget: against a long tier's budget, short requests queued a long
         * step deep on a long-tier instance (measured: 14-16K requests took 1.6 s instead of
         * 0.9 s to prefill at x80 load, 1.5x FIFO's short-tier p99). */
        double gate = fmin(budget, 1e6 * s->cfg->tier_budget_ms[t]);
        int r = least_loaded(s, in, s->tier_q[t].head, t <= in->tier, gate, &load);
        if (load >= gate) {
            if (t <= in->tier) return 0;
            /* no spare rank for a loan; own-tier work may still fit */
            if (s->tier_q[in->tier].head < 0) return 0;
            r = least_loaded(s, in, s->tier_q[in->tier].head, 1, budget, &load);
            if (load >= budget) return 0;
            t = in->tier;
        }
        if (give(s, in, r, take_from_tier(s, t)) != 0) return -1;
    }
}

/* Round robin: the rank's own FIFO, fixed chunks of rr_chunk_tokens tokens per step. */
static int pull_round_robin(Sim *s, Rank *r) {
    int64_t have = 0;
    for (int k = 0; k < r->n; k++) have += s->req[r->ids[k]].remaining;
    while (have < s->cfg->rr_chunk_tokens && r->own.head >= 0) {
        int id = fifo_pop(s, &r->own);
        if (rank_add(s, r, id) != 0) return -1;
        have += s->req[id].remaining;
    }
    return 0;
}

/* The time the rank's chunks really take: the true cost model (cfg->prefill_cost), which the
 * scheduler only knows through its fit (s->model). */
static double true_rank_cost(const Sim *s, const Rank *r) {
    const DiPrefillCost *truth = &s->cfg->prefill_cost;
    double cost = truth->f;
    for (int k = 0; k < r->n; k++) {
        const Req *q = &s->req[r->ids[k]];
        if (q->q) cost += di_prefill_cost_request_ns(truth, q->q, q->c);
    }
    return cost;
}

/* Chunks for one rank this step (planned with the fitted model); returns the rank's true step
 * cost (f when idle). */
static double plan_rank(Sim *s, Rank *r, double budget, int64_t *tokens) {
    const DiPrefillCost *m = &s->model;
    int64_t used = 0;
    if (s->cfg->prefill_policy == DI_SIM_PREFILL_ROUND_ROBIN) { /* fixed chunk, no cost model */
        for (int k = 0; k < r->n; k++) {
            Req *q = &s->req[r->ids[k]];
            int64_t left = s->cfg->rr_chunk_tokens - used;
            q->q = q->remaining < left ? q->remaining : left;
            used += q->q;
        }
        *tokens = used;
        return true_rank_cost(s, r);
    }
    double left = budget - m->f;
    for (int k = 0; k < r->n; k++) {
        Req *q = &s->req[r->ids[k]];
        q->q = 0;
        if (left <= 0 || used >= s->cfg->token_cap) continue;
        int64_t want = q->remaining < s->cfg->token_cap - used ? q->remaining : s->cfg->token_cap - used;
        int64_t got = di_prefill_chunk_solve(m, q->c, want, left, &s->cfg->chunk);
        if (got <= 0) continue;
        q->q = got;
        used += got;
        left -= di_prefill_cost_request_ns(m, got, q->c);
    }
    if (used == 0 && r->n > 0) { /* progress guarantee: nothing fits the budget, run one block */
        Req *q = &s->req[r->ids[0]];
        q->q = q->remaining < s->cfg->chunk.block ? q->remaining : s->cfg->chunk.block;
        used = q->q;
    }
    double planned = m->f;
    for (int k = 0; k < r->n; k++)
        if (s->req[r->ids[k]].q) planned += di_prefill_cost_request_ns(m, s->req[r->ids[k]].q, s->req[r->ids[k]].c);
    if (planned > s->planned_ns) s->planned_ns = planned;
    *tokens = used;
    return true_rank_cost(s, r);
}

/* §6.3 "Fit": profile a log-spaced (q, c) grid on the "hardware" (the true model with
 * multiplicative measurement noise, after a warm-up that is not recorded), and fit the five
 * coefficients by relative least squares.  A coefficient the noise drives below zero is clamped
 * to 0 (the chunk solver needs a model that grows with q and c). */
static int fit_prefill_model(Sim *s) {
    enum { NQ = 8, NC = 8 };
    int64_t q[NQ * NC], c[NQ * NC];
    double ns[NQ * NC];
    DiRng rng = di_rng_seed(s->cfg->seed ^ 0xf17ULL);
    int n = 0;
    for (int i = 0; i < NQ; i++)
        for (int j = 0; j < NC; j++, n++) {
            q[n] = (int64_t)256 << i;                     /* 256 .. 32K new tokens */
            c[n] = j == 0 ? 0 : (int64_t)1024 << (2 * j - 2); /* 0, 1K .. 4M prefix */
            if (c[n] > (1 << 20)) c[n] = 1 << 20;
            double noise = 1.0 + s->cfg->profile_noise * di_rng_normal(&rng);
            ns[n] = di_prefill_cost_ns(&s->cfg->prefill_cost, q[n], c[n]) * (noise > 0.5 ? noise : 0.5);
        }
    if (di_prefill_cost_fit(q, c, ns, (size_t)n, 1, &s->model) != 0) return di_error_wrap("fitting the prefill cost model");
    double *coef[5] = {&s->model.a, &s->model.b, &s->model.d, &s->model.e, &s->model.f};
    for (int k = 0; k < 5; k++)
        if (*coef[k] < 0.0) *coef[k] = 0.0;
    s->res->fitted_prefill_cost = s->model;
    return 0;
}

static int try_start_prefill(Sim *s, Instance *in, double now) {
    if (in->busy) return 0;
    int R = s->cfg->prefill_ranks;
    double budget = budget_ns(s, in);
    if (s->cfg->prefill_policy == DI_SIM_PREFILL_ROUND_ROBIN) {
        for (int r = 0; r < R; r++)
            if (pull_round_robin(s, &in->ranks[r]) != 0) return -1;
    } else if (pull_work(s, in, budget, now) != 0) {
        return -1;
    }
    if (s->cfg->prefill_policy == DI_SIM_PREFILL_TIERED) /* T must suit every request in the step (§6.3) */
        for (int r = 0; r < R; r++)
            for (int k = 0; k < in->ranks[r].n; k++)
                budget = fmin(budget, 1e6 * s->cfg->tier_budget_ms[s->req[in->ranks[r].ids[k]].tier]);
    double max = 0.0, sum = 0.0;
    int64_t tokens = 0;
    s->planned_ns = 0.0;
    if (s->cfg->prefill_policy != DI_SIM_PREFILL_ROUND_ROBIN) budget /= s->correction.factor;
    for (int r = 0; r < R; r++) {
        int64_t t = 0;
        double c = plan_rank(s, &in->ranks[r], budget, &t);
        tokens += t;
        sum += c;
        if (c > max) max = c;
    }
    if (tokens == 0) return 0; /* nothing to do: idle until an arrival */
    s->sum_pmax += max;
    s->sum_pmean += sum / R;
    di_prefill_correction_update(&s->correction, s->planned_ns, max); /* the step as measured */
    s->res->prefill_steps++;
    s->res->prefill_tokens_computed += tokens;
    if (s->moe_prefill && di_sim_moe_step(s->moe_prefill, now, tokens) != 0) return -1;
    in->busy = 1;
    in->step_end = now + max * 1e-9; /* the EP barrier: the slowest rank sets the step */
    return 0;
}

static int prefill_complete(Sim *s, int id, double now) {
    const DiSimRequest *tr = &s->trace->reqs[id];
    Req *q = &s->req[id];
    q->prefill_done = now;
    if (sample_push(&s->ttft[q->tier], now - q->arrival) != 0) return -1;
    if (di_prefix_cache_insert(s->cache, tr->blocks, tr->n_blocks) != 0) return -1;
    /* The decode rank is chosen when the prefill ends and the KV transfer starts, not at
     * arrival as §5.2 step 3 suggests: a long prefill takes tens of seconds, and a request
     * parked on a rank's projection all that time steers work away from a rank that is in
     * fact lightly loaded (measured: worse decode balance than round robin). */
    if (tr->output_tokens > 1) {
        q->decode_rank = di_decode_lb_pick(&s->dlb, tr->input_tokens);
        if (q->decode_rank < 0) { /* no decode capacity: the request fails */
            s->res->rejected++;
            return 0;
        }
        if (di_decode_lb_admit(&s->dlb, q->decode_rank, tr->input_tokens) != 0) return -1;
    }
    if (q->decode_rank < 0) { /* a one-token answer ends with prefill */
        s->done++;
        s->out_tokens += (double)tr->output_tokens;
        if (now > s->last_done) s->last_done = now;
        return 0;
    }
    double transfer_s = (double)tr->input_tokens * s->cfg->kv_bytes_per_token / (s->cfg->transfer_gb_per_s * 1e9);
    q->ready = now + transfer_s;
    ready_push(s, id);
    return 0;
}

static int end_prefill_step(Sim *s, Instance *in, double now) {
    in->busy = 0;
    for (int r = 0; r < s->cfg->prefill_ranks; r++) {
        Rank *rk = &in->ranks[r];
        int keep = 0;
        rk->backlog_ns = 0.0;
        for (int k = 0; k < rk->n; k++) {
            int id = rk->ids[k];
            Req *q = &s->req[id];
            q->remaining -= q->q;
            q->c += q->q;
            q->q = 0;
            if (q->remaining == 0) {
                if (prefill_complete(s, id, now) != 0) return -1;
                continue;
            }
            rk->ids[keep++] = id;
            rk->backlog_ns += remaining_cost(s, q);
        }
        rk->n = keep;
    }
    return 0;
}

/* ---- decode ----------------------------------------------------------------------------- */

static int try_start_decode(Sim *s, double now) {
    if (s->decode_busy) return 0;
    while (s->n_ready > 0 && s->req[s->ready_heap[0]].ready <= now) {
        int id = ready_pop(s);
        Req *q = &s->req[id];
        if (di_decode_lb_start(&s->dlb, q->decode_rank, s->trace->reqs[id].input_tokens) != 0) return -1;
        q->decode_start = now;
        s->running[s->n_running++] = id;
    }
    if (s->n_running == 0) return 0;
    double max_ns;
    double ratio = di_decode_lb_imbalance(&s->dlb, &s->cfg->decode_cost, &max_ns);
    s->sum_dmax += max_ns;
    s->sum_dmean += max_ns / ratio;
    if (sample_push(&s->dec_ratio, ratio) != 0) return -1;
    s->res->decode_steps++;
    if (s->moe_decode && di_sim_moe_step(s->moe_decode, now, s->n_running) != 0) return -1;
    s->decode_busy = 1;
    s->decode_end = now + max_ns * 1e-9;
    return 0;
}

static int end_decode_step(Sim *s, double now) {
    s->decode_busy = 0;
    di_decode_lb_step(&s->dlb);
    int keep = 0;
    for (int k = 0; k < s->n_running; k++) {
        int id = s->running[k];
        Req *q = &s->req[id];
        const DiSimRequest *tr = &s->trace->reqs[id];
        q->generated++;
        if (q->generated < tr->output_tokens - 1) { /* the first token came from prefill */
            s->running[keep++] = id;
            continue;
        }
        if (sample_push(&s->tpot, (now - q->decode_start) / (double)q->generated) != 0) return -1;
        if (di_decode_lb_finish(&s->dlb, q->decode_rank, tr->input_tokens + q->generated) != 0) return -1;
        s->done++;
        s->out_tokens += (double)tr->output_tokens;
        if (now > s->last_done) s->last_done = now;
    }
    s->n_running = keep;
    return 0;
}

/* ---- quota controller ------------------------------------------------------------------- */

/* Give instances to tiers per the quota, moving as few as possible (highest index first). */
static void map_instances(Sim *s) {
    int have[DI_PREFILL_TIERS] = {0}, I = s->cfg->prefill_instances;
    for (int i = 0; i < I; i++) have[s->inst[i].tier]++;
    for (int i = I - 1; i >= 0; i--) {
        int t = s->inst[i].tier;
        if (have[t] <= s->quota.quota[t]) continue;
        for (int u = 0; u < DI_PREFILL_TIERS; u++)
            if (have[u] < s->quota.quota[u]) {
                have[t]--;
                have[u]++;
                s->inst[i].tier = u;
                break;
            }
    }
}

static int quota_tick(Sim *s) {
    double mean[DI_PREFILL_TIERS];
    for (int t = 0; t < DI_PREFILL_TIERS; t++) mean[t] = s->tier_cost_n[t] > 0 ? s->tier_cost_sum[t] / s->tier_cost_n[t] : 0;
    if (di_prefill_quota_update(&s->quota, s->tier_queued_ns, s->tier_arrivals, mean, s->cfg->quota_period_s) != 0)
        return -1;
    memset(s->tier_arrivals, 0, sizeof s->tier_arrivals);
    map_instances(s);
    return 0;
}

/* ---- setup, loop, results --------------------------------------------------------------- */

static int check_config(const DiSimConfig *c) {
    if (c->prefill_instances <= 0 || c->prefill_ranks <= 0 || c->decode_ranks <= 0 ||
        c->prefill_instances * c->prefill_ranks > 65536 || c->decode_ranks > 65536)
        return di_errorf("simulation: instance and rank counts must be in 1..65536");
    if (!(c->speedup > 0.0) || !isfinite(c->speedup)) return di_errorf("simulation: speedup must be positive");
    if (c->cache_blocks == 0) return di_errorf("simulation: cache must hold at least one block");
    for (int t = 0; t < DI_PREFILL_TIERS; t++)
        if (!(c->tier_budget_ms[t] > 0.0) || !(c->tier_slo_ms[t] > 0.0))
            return di_errorf("simulation: tier %d step budget and TTFT objective must be positive", t);
    if (!(c->jump_slowdown >= 0.0) || !isfinite(c->jump_slowdown))
        return di_errorf("simulation: the tier overtaking allowance must be finite and >= 0, got %g", c->jump_slowdown);
    if (!(c->fifo_budget_ms > 0.0) || c->rr_chunk_tokens <= 0 || c->token_cap <= 0 || c->chunk.block <= 0)
        return di_errorf("simulation: budgets, chunk sizes and the token cap must be positive");
    if (!(c->transfer_gb_per_s > 0.0) || !(c->kv_bytes_per_token >= 0.0) || !(c->quota_period_s > 0.0))
        return di_errorf("simulation: transfer bandwidth and quota period must be positive");
    if (!(c->profile_noise >= 0.0 && c->profile_noise <= 0.2))
        return di_errorf("simulation: profile noise must be in 0..0.2, got %g", c->profile_noise);
    if (c->moe_layers < 0 || (c->moe_layers > 0 && (c->moe_experts % c->decode_ranks != 0 ||
                                                     c->moe_experts % c->prefill_ranks != 0)))
        return di_errorf("simulation: %d experts must spread evenly over %d decode and %d prefill ranks",
                         c->moe_experts, c->decode_ranks, c->prefill_ranks);
    return 0;
}

static DiSimMoe *make_moe(const DiSimConfig *c, DiEplbPhase phase, int gpus) {
    DiSimMoeConfig m = {c->moe_layers, c->moe_experts, c->moe_top_k, gpus, 1, 1,
                        c->moe_skew, c->moe_drift_tau_s, phase,
                        /* decode steps are ~40x as many as prefill steps: sample 1 in 10 of them */
                        phase == DI_EPLB_DECODE ? 10 : 1,
                        c->seed ^ (phase == DI_EPLB_DECODE ? 0x5eedULL : 0xbeefULL)};
    return di_sim_moe_create(&m);
}

static int sim_init(Sim *s, const DiSimTrace *t, const DiSimConfig *c, DiSimResult *res) {
    memset(s, 0, sizeof *s);
    s->trace = t;
    s->cfg = c;
    s->res = res;
    s->fifo_q = (Fifo){-1, -1};
    for (int k = 0; k < DI_PREFILL_TIERS; k++) s->tier_q[k] = (Fifo){-1, -1};
    s->req = di_calloc(t->n, sizeof *s->req, "simulated requests");
    s->inst = di_calloc((size_t)c->prefill_instances, sizeof *s->inst, "prefill instances");
    s->running = di_calloc(t->n, sizeof(int), "decode batch");
    s->ready_heap = di_calloc(t->n, sizeof(int), "decode ready queue");
    s->cache = di_prefix_cache_create(c->cache_blocks);
    if (!s->req || !s->inst || !s->running || !s->ready_heap || !s->cache) return -1;
    if (fit_prefill_model(s) != 0 || di_prefill_correction_init(&s->correction, 0.05) != 0) return -1;
    for (size_t i = 0; i < t->n; i++) s->req[i].arrival = t->reqs[i].arrival_s / c->speedup;
    for (int i = 0; i < c->prefill_instances; i++) {
        s->inst[i].ranks = di_calloc((size_t)c->prefill_ranks, sizeof(Rank), "prefill ranks");
        if (!s->inst[i].ranks) return -1;
        for (int r = 0; r < c->prefill_ranks; r++) s->inst[i].ranks[r].own = (Fifo){-1, -1};
    }
    DiDecodeLbConfig dc = {c->decode_ranks, c->decode_lookahead, c->decode_max_requests, c->decode_max_kv_tokens,
                           c->decode_policy, c->decode_cost};
    if (di_decode_lb_init(&s->dlb, &dc) != 0) return -1;
    DiPrefillQuotaConfig qc = {c->prefill_instances, {0}, 0.3, 2.0};
    for (int k = 0; k < DI_PREFILL_TIERS; k++)
        qc.min_quota[k] = c->quota_min[k] < c->prefill_instances ? c->quota_min[k] : 0;
    int floors = qc.min_quota[0] + qc.min_quota[1] + qc.min_quota[2] + qc.min_quota[3];
    if (floors > c->prefill_instances) memset(qc.min_quota, 0, sizeof qc.min_quota);
    if (di_prefill_quota_init(&s->quota, &qc) != 0) return -1;
    for (int i = 0; i < c->prefill_instances; i++) { /* initial mapping: instances in tier order */
        int acc = 0, tier = DI_PREFILL_TIERS - 1;
        for (int k = 0; k < DI_PREFILL_TIERS; k++) {
            acc += s->quota.quota[k];
            if (i < acc) {
                tier = k;
                break;
            }
        }
        s->inst[i].tier = tier;
    }
    if (c->moe_layers > 0) {
        s->moe_prefill = make_moe(c, DI_EPLB_PREFILL, c->prefill_ranks);
        s->moe_decode = s->moe_prefill ? make_moe(c, DI_EPLB_DECODE, c->decode_ranks) : NULL;
        if (!s->moe_decode) return -1;
    }
    return 0;
}

static void sim_free(Sim *s) {
    for (int i = 0; s->inst && i < s->cfg->prefill_instances; i++) {
        for (int r = 0; s->inst[i].ranks && r < s->cfg->prefill_ranks; r++) free(s->inst[i].ranks[r].ids);
        free(s->inst[i].ranks);
    }
    free(s->inst);
    free(s->req);
    free(s->running);
    free(s->ready_heap);
    di_prefix_cache_destroy(s->cache);
    di_decode_lb_free(&s->dlb);
    for (int k = 0; k < DI_PREFILL_TIERS; k++) free(s->ttft[k].v);
    free(s->tpot.v);
    free(s->dec_ratio.v);
    di_sim_moe_destroy(s->moe_prefill);
    di_sim_moe_destroy(s->moe_decode);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentiles. */
static DiSimPercentiles percentiles(Samples *s) {
    DiSimPercentiles p = {0, 0, 0, 0, s->n};
    if (s->n == 0) return p;
    qsort(s->v, s->n, sizeof *s->v, cmp_double);
    double sum = 0;
    for (size_t i = 0; i < s->n; i++) sum += s->v[i];
    p.mean = sum / (double)s->n;
    const double q[3] = {0.50, 0.90, 0.99};
    double *out[3] = {&p.p50, &p.p90, &p.p99};
    for (int k = 0; k < 3; k++) {
        size_t idx = (size_t)ceil(q[k] * (double)s->n);
        *out[k] = s->v[(idx ? idx : 1) - 1];
    }
    return p;
}

static int collect(Sim *s, double first_arrival) {
    DiSimResult *r = s->res;
    Samples all = {0};
    for (int t = 0; t < DI_PREFILL_TIERS; t++) {
        for (size_t i = 0; i < s->ttft[t].n; i++)
            if (sample_push(&all, s->ttft[t].v[i]) != 0) {
                free(all.v);
                return -1;
            }
        r->ttft_s[t] = percentiles(&s->ttft[t]);
        r->tier_hit_rate[t] = s->tier_input[t] > 0 ? s->tier_cached[t] / s->tier_input[t] : 0.0;
    }
    r->ttft_all_s = percentiles(&all);
    free(all.v);
    r->tpot_s = percentiles(&s->tpot);
    r->decode_step_imbalance = percentiles(&s->dec_ratio);
    double cached = 0;
    for (int t = 0; t < DI_PREFILL_TIERS; t++) cached += s->tier_cached[t];
    r->hit_rate = s->in_tokens > 0 ? cached / s->in_tokens : 0.0;
    r->prefill_imbalance = s->sum_pmean > 0 ? s->sum_pmax / s->sum_pmean : 1.0;
    r->decode_imbalance = s->sum_dmean > 0 ? s->sum_dmax / s->sum_dmean : 1.0;
    r->completed = s->done;
    r->makespan_s = s->last_done - first_arrival;
    r->input_tokens_per_s = r->makespan_s > 0 ? s->in_tokens / r->makespan_s : 0.0;
    r->output_tokens_per_s = r->makespan_s > 0 ? s->out_tokens / r->makespan_s : 0.0;
    r->quota_moves = s->quota.moves;
    r->prefill_correction = s->correction.factor;
    r->has_moe = s->moe_decode != NULL;
    if (r->has_moe) {
        r->moe_prefill = di_sim_moe_report(s->moe_prefill);
        r->moe_decode = di_sim_moe_report(s->moe_decode);
    }
    return 0;
}

/* The event loop. */
static int run_loop(Sim *s) {
    const DiSimConfig *c = s->cfg;
    size_t n = s->trace->n, next_arrival = 0;
    double next_quota = s->req[0].arrival + c->quota_period_s;
    while (s->done + s->res->rejected < n) {
        double t_best = INFINITY;
        int kind = -1, which = -1; /* 0 instance, 1 decode step end, 2 decode wake, 3 arrival, 4 quota */
        for (int i = 0; i < c->prefill_instances; i++)
            if (s->inst[i].busy && s->inst[i].step_end < t_best) t_best = s->inst[i].step_end, kind = 0, which = i;
        if (s->decode_busy && s->decode_end < t_best) t_best = s->decode_end, kind = 1;
        if (!s->decode_busy && s->n_ready > 0 && s->req[s->ready_heap[0]].ready < t_best)
            t_best = s->req[s->ready_heap[0]].ready, kind = 2;
        if (next_arrival < n && s->req[next_arrival].arrival < t_best) t_best = s->req[next_arrival].arrival, kind = 3;
        if (c->prefill_policy == DI_SIM_PREFILL_TIERED && next_quota < t_best) t_best = next_quota, kind = 4;
        if (kind < 0) return di_errorf("simulation stalled with %zu of %zu requests unfinished", n - s->done, n);
        double now = t_best;
        int rc = 0;
        switch (kind) {
        case 0: rc = end_prefill_step(s, &s->inst[which], now); break;
        case 1: rc = end_decode_step(s, now); break;
        case 2: break; /* the wake-up below starts the step */
        case 3:
            while (rc == 0 && next_arrival < n && s->req[next_arrival].arrival <= now)
                rc = on_arrival(s, (int)next_arrival++);
            break;
        case 4:
            rc = quota_tick(s);
            next_quota += c->quota_period_s;
            break;
        }
        for (int i = 0; rc == 0 && i < c->prefill_instances; i++) rc = try_start_prefill(s, &s->inst[i], now);
        if (rc == 0) rc = try_start_decode(s, now);
        if (rc != 0) return -1;
    }
    return 0;
}

int di_sim_run(const DiSimTrace *trace, const DiSimConfig *cfg, DiSimResult *out) {
    if (!trace || !cfg || !out) return di_errorf("simulation: NULL argument");
    memset(out, 0, sizeof *out);
    if (trace->n == 0 || trace->n > (size_t)1 << 30) return di_errorf("simulation: the trace has no requests");
    if (check_config(cfg) != 0) return -1;
    Sim s;
    int rc = sim_init(&s, trace, cfg, out);
    if (rc == 0) rc = run_loop(&s);
    if (rc == 0) rc = collect(&s, s.req[0].arrival);
    sim_free(&s);
    if (rc != 0) di_error_wrap("simulation (%s prefill, %s decode)", di_sim_prefill_policy_name(cfg->prefill_policy),
                               di_decode_lb_policy_name(cfg->decode_policy));
    return rc;
}
