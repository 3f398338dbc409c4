/* eplb.c — the expert-parallel load balancer (serving.md §8.1; deepseek-ai/EPLB eplb.py d52c72d).
 *
 * Owns the static planning algorithm: balanced packing, greedy replication, the hierarchical
 * routine (groups -> nodes, replicas within nodes, replicas -> GPUs) and the global policy, plus
 * the moe_lb metric of a plan (§8.3).  The dynamic policy (load windows, periods) lives in
 * eplb_policy.c; the JSON interface of `deepinfer eplb` in eplb_json.c.
 *
 * Exactness with the Python reference.  The reference converts weights to float32, sorts with
 * torch.sort(descending) and accumulates pack weights in float32; its "lightest non-full pack" is
 * Python's min() over packs in index order (first minimum wins) and its "largest weight/count" is
 * torch.max(dim) (first maximum wins).  We do the same in float.  Equal weights are where the two
 * may part: the reference calls torch.sort without stable=True, so its order among equal weights
 * is unspecified (the CPU sort does reorder them from 17 items up), and ties are common: the
 * replicas of one expert always carry equal weights.  deepinfer takes weight descending, then
 * index ascending (a stable sort, order_key below).  Equal-weight items are interchangeable for
 * the greedy packing, so any tie order gives the same pack weights; only which of the tied items
 * lands in which pack can differ.  Group sums are accumulated in double and rounded once to float,
 * which equals torch's float32 sum whenever that is exact (e.g. integer token counts < 2^24).
 *
 * Speed.  The reference's linear scans cost O(R·E + R·P) per layer.  Here both greedy choices use
 * binary heaps whose order is (key, index), so the tie rules above are kept exactly:
 * O(R log E + R log P) per layer (§8.1 "Cost"). */
#include "cluster/eplb.h"

#include "base/error.h"
#include "base/mem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- balanced packing ------------------------------------------------------------------- */

/* Order of items for packing: weight descending, then index ascending (a stable descending
 * sort).  Each item becomes one 64-bit key, (~weight bits) << 32 | index: for weights >= 0
 * the IEEE-754 bit pattern orders like the value, so ascending keys give exactly that order and
 * ties cannot occur.  Small inputs use insertion sort, larger ones an LSD radix sort (bytes
 * that are equal in every key are skipped); both beat qsort's comparator calls by far here. */
static uint64_t order_key(float w, int32_t index) {
    uint32_t bits;
    memcpy(&bits, &w, sizeof bits);
    if (w == 0.0f) bits = 0; /* -0.0 sorts as 0.0 */
    return ((uint64_t)~bits << 32) | (uint32_t)index;
}

static void sort_keys(uint64_t *key, uint64_t *tmp, int n) {
    if (n <= 64) {
        for (int i = 1; i < n; i++) {
            uint64_t k = key[i];
            int j = i;
            for (; j > 0 && key[j - 1] > k; j--) key[j] = key[j - 1];
            key[j] = k;
        }
        return;
    }
    for (int shift = 0; shift < 64; shift += 8) {
        size_t count[257] = {0};
        for (int i = 0; i < n; i++) count[((key[i] >> shift) & 0xff) + 1]++;
        if (count[((key[0] >> shift) & 0xff) + 1] == (size_t)n) continue; /* one digit everywhere */
        for (int d = 0; d < 256; d++) count[d + 1] += count[d];
        for (int i = 0; i < n; i++) tmp[count[(key[i] >> shift) & 0xff]++] = key[i];
        memcpy(key, tmp, sizeof *key * (size_t)n);
    }
}

/* Min-heap of pack ids ordered by (pack weight, pack id): the top is the lightest pack with the
 * lowest index among equals, which is what min() over packs in index order returns. */
static int pack_before(const float *pw, int32_t a, int32_t b) {
    return pw[a] < pw[b] || (pw[a] == pw[b] && a < b);
}

static void pack_sift_down(int32_t *heap, int n, int pos, const float *pw) {
    for (;;) {
        int l = 2 * pos + 1, r = l + 1, best = pos;
        if (l < n && pack_before(pw, heap[l], heap[best])) best = l;
        if (r < n && pack_before(pw, heap[r], heap[best])) best = r;
        if (best == pos) return;
        int32_t t = heap[pos];
        heap[pos] = heap[best];
        heap[best] = t;
        pos = best;
    }
}

int di_eplb_balanced_packing(const float *weight, int n, int m, int32_t *pack_index,
                             int32_t *rank_in_pack, int32_t *scratch) {
    if (!weight || !pack_index || !rank_in_pack || !scratch)
        return di_errorf("balanced packing: NULL argument");
    if (n <= 0 || m <= 0 || n % m != 0)
        return di_errorf("balanced packing: %d items do not split evenly into %d packs", n, m);
    int per_pack = n / m;
    if (per_pack == 1) { /* the reference's shortcut: item i -> pack i */
        for (int i = 0; i < n; i++) {
            pack_index[i] = i;
            rank_in_pack[i] = 0;
        }
        return 0;
    }
    /* scratch: n + n keys (64-bit, so 4n words), then m heap entries, m counts, m pack weights */
    uint64_t *order = (uint64_t *)(void *)scratch, *tmp = order + n;
    int32_t *heap = (int32_t *)(tmp + n), *count = heap + m;
    float *pack_w = (float *)(count + m);
    for (int i = 0; i < n; i++) order[i] = order_key(weight[i], i);
    sort_keys(order, tmp, n);
    for (int p = 0; p < m; p++) {
        heap[p] = p;
        count[p] = 0;
        pack_w[p] = 0.0f;
    }
    int heap_n = m;
    for (int k = 0; k < n; k++) {
        int32_t item = (int32_t)(uint32_t)order[k], p = heap[0];
        pack_index[item] = p;
        rank_in_pack[item] = count[p]++;
        pack_w[p] += weight[item];
        if (count[p] == per_pack) heap[0] = heap[--heap_n]; /* full: leaves the heap */
        pack_sift_down(heap, heap_n, 0, pack_w);
    }
    return 0;
}

/* ---- replication ------------------------------------------------------------------------ */

/* Max-heap of experts ordered by (weight / replica count descending, expert index ascending). */
static int expert_before(const float *w, const int32_t *cnt, int32_t a, int32_t b) {
    float ka = w[a] / (float)cnt[a], kb = w[b] / (float)cnt[b];
    return ka > kb || (ka == kb && a < b);
}

static void expert_sift_down(int32_t *heap, int n, int pos, const float *w, const int32_t *cnt) {
    for (;;) {
        int l = 2 * pos + 1, r = l + 1, best = pos;
        if (l < n && expert_before(w, cnt, heap[l], heap[best])) best = l;
        if (r < n && expert_before(w, cnt, heap[r], heap[best])) best = r;
        if (best == pos) return;
        int32_t t = heap[pos];
        heap[pos] = heap[best];
        heap[best] = t;
        pos = best;
    }
}

int di_eplb_replicate(const float *weight, int e, int r, int32_t *phy2log, int32_t *rank,
                      int32_t *logcnt, int32_t *scratch) {
    if (!weight || !phy2log || !rank || !logcnt || !scratch)
        return di_errorf("replicate experts: NULL argument");
    if (e <= 0 || r < e)
        return di_errorf("replicate experts: %d slots cannot hold %d experts", r, e);
    int32_t *heap = scratch;
    for (int i = 0; i < e; i++) {
        phy2log[i] = i;
        rank[i] = 0;
        logcnt[i] = 1;
        heap[i] = i;
    }
    for (int i = e / 2 - 1; i >= 0; i--) expert_sift_down(heap, e, i, weight, logcnt);
    for (int s = e; s < r; s++) {
        int32_t x = heap[0];
        phy2log[s] = x;
        rank[s] = logcnt[x]++;
        expert_sift_down(heap, e, 0, weight, logcnt);
    }
    return 0;
}

/* ---- the hierarchical routine ----------------------------------------------------------- */

/* Per-call work arrays, sized once for all layers. */
typedef struct {
    float *group_w, *node_w, *replica_w;
    int32_t *group_pack, *group_rank, *log2mlog, *mlog2log, *mlogcnt;
    int32_t *phy2mlog, *phy_rank, *gpu_pack, *gpu_rank, *scratch;
} Work;

static void work_free(Work *w) {
    free(w->group_w);
    free(w->node_w);
    free(w->replica_w);
    free(w->group_pack);
    free(w->group_rank);
    free(w->log2mlog);
    free(w->mlog2log);
    free(w->mlogcnt);
    free(w->phy2mlog);
    free(w->phy_rank);
    free(w->gpu_pack);
    free(w->gpu_rank);
    free(w->scratch);
}

static int work_alloc(Work *w, int E, int R, int G, int N) {
    memset(w, 0, sizeof *w);
    int rn = R / N, scratch_n = 4 * (R + G) + 3 * (R + G) + E + 2; /* >= 4n + 3m of both packings, and E */
    w->group_w = di_calloc((size_t)G, sizeof(float), "EPLB group weights");
    w->node_w = di_calloc((size_t)E, sizeof(float), "EPLB node expert weights");
    w->replica_w = di_calloc((size_t)rn, sizeof(float), "EPLB replica weights");
    w->group_pack = di_calloc((size_t)G, sizeof(int32_t), "EPLB group packs");
    w->group_rank = di_calloc((size_t)G, sizeof(int32_t), "EPLB group ranks");
    w->log2mlog = di_calloc((size_t)E, sizeof(int32_t), "EPLB expert order");
    w->mlog2log = di_calloc((size_t)E, sizeof(int32_t), "EPLB expert order");
    w->mlogcnt = di_calloc((size_t)E, sizeof(int32_t), "EPLB replica counts");
    w->phy2mlog = di_calloc((size_t)rn, sizeof(int32_t), "EPLB node slots");
    w->phy_rank = di_calloc((size_t)rn, sizeof(int32_t), "EPLB node slot ranks");
    w->gpu_pack = di_calloc((size_t)rn, sizeof(int32_t), "EPLB GPU packs");
    w->gpu_rank = di_calloc((size_t)rn, sizeof(int32_t), "EPLB GPU ranks");
    w->scratch = di_calloc((size_t)scratch_n, sizeof(int32_t), "EPLB scratch");
    if (!w->group_w || !w->node_w || !w->replica_w || !w->group_pack || !w->group_rank ||
        !w->log2mlog || !w->mlog2log || !w->mlogcnt || !w->phy2mlog || !w->phy_rank ||
        !w->gpu_pack || !w->gpu_rank || !w->scratch) {
        work_free(w);
        return -1;
    }
    return 0;
}

/* Steps 1-2 of §8.1: pack whole groups onto nodes and number the experts node-major
 * ("middle" ids: node n owns mlog ids n*E/N .. (n+1)*E/N - 1, groups in pack-rank order). */
static int pack_groups_to_nodes(Work *w, const float *weight, int E, int G, int N) {
    int group_size = E / G, groups_per_node = G / N;
    for (int g = 0; g < G; g++) {
        double sum = 0.0;
        for (int j = 0; j < group_size; j++) sum += weight[g * group_size + j];
        w->group_w[g] = (float)sum;
    }
    if (di_eplb_balanced_packing(w->group_w, G, N, w->group_pack, w->group_rank, w->scratch) != 0)
        return -1;
    for (int g = 0; g < G; g++) {
        int base = (w->group_pack[g] * groups_per_node + w->group_rank[g]) * group_size;
        for (int j = 0; j < group_size; j++) {
            w->log2mlog[g * group_size + j] = base + j;
            w->mlog2log[base + j] = g * group_size + j;
        }
    }
    return 0;
}

/* Steps 3-4 for node `node`: replicate its E/N experts into R/N slots, pack the replicas onto
 * its P/N GPUs, and write the node's slots of phy2log / phy_rank. */
static int plan_node(Work *w, const float *weight, int node, int E, int R, int N, int P,
                     int32_t *phy2log, int32_t *phy_rank) {
    int en = E / N, rn = R / N, slots_per_gpu = R / P;
    float *mw = w->node_w + node * en;
    int32_t *mcnt = w->mlogcnt + node * en;
    for (int k = 0; k < en; k++) mw[k] = weight[w->mlog2log[node * en + k]];
    if (di_eplb_replicate(mw, en, rn, w->phy2mlog, w->phy_rank, mcnt, w->scratch) != 0) return -1;
    for (int i = 0; i < rn; i++) w->replica_w[i] = mw[w->phy2mlog[i]] / (float)mcnt[w->phy2mlog[i]];
    if (di_eplb_balanced_packing(w->replica_w, rn, P / N, w->gpu_pack, w->gpu_rank, w->scratch) != 0)
        return -1;
    for (int i = 0; i < rn; i++) {
        int slot = node * rn + w->gpu_pack[i] * slots_per_gpu + w->gpu_rank[i];
        phy2log[slot] = w->mlog2log[node * en + w->phy2mlog[i]];
        phy_rank[slot] = w->phy_rank[i];
    }
    return 0;
}

static int plan_layer(Work *w, const float *weight, int E, int R, int G, int N, int P,
                      int32_t *phy2log, int32_t *phy_rank, int32_t *logcnt) {
    if (pack_groups_to_nodes(w, weight, E, G, N) != 0) return -1;
    for (int node = 0; node < N; node++)
        if (plan_node(w, weight, node, E, R, N, P, phy2log, phy_rank) != 0) return -1;
    for (int e = 0; e < E; e++) logcnt[e] = w->mlogcnt[w->log2mlog[e]];
    return 0;
}

/* ---- entry point ------------------------------------------------------------------------ */

static int check_shape(int L, int E, int R, int G, int N, int P) {
    if (L <= 0) return di_errorf("EPLB: num_layers must be positive, got %d", L);
    if (E <= 0) return di_errorf("EPLB: number of logical experts must be positive, got %d", E);
    if (R <= 0 || G <= 0 || N <= 0 || P <= 0)
        return di_errorf("EPLB: num_replicas, num_groups, num_nodes, num_gpus must be positive "
                         "(got %d, %d, %d, %d)", R, G, N, P);
    if (E % G != 0)
        return di_errorf("EPLB: %d experts do not split into %d equal groups", E, G);
    if (P % N != 0) return di_errorf("EPLB: num_gpus %d is not a multiple of num_nodes %d", P, N);
    if (R % P != 0)
        return di_errorf("EPLB: num_replicas %d is not a multiple of num_gpus %d", R, P);
    if (R < E) return di_errorf("EPLB: num_replicas %d is smaller than the %d experts", R, E);
    return 0;
}

static int check_weights(const float *weight, size_t n, int E) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(weight[i]) || weight[i] < 0.0f)
            return di_errorf("EPLB: weight[%zu][%zu] = %g; loads must be finite and >= 0",
                             i / (size_t)E, i % (size_t)E, (double)weight[i]);
    return 0;
}

void di_eplb_plan_free(DiEplbPlan *plan) {
    if (!plan) return;
    free(plan->phy2log);
    free(plan->phy_rank);
    free(plan->log2phy);
    free(plan->logcnt);
    memset(plan, 0, sizeof *plan);
}

/* log2phy[l][e][rank] = slot, -1 padded to the largest replica count. */
static int fill_log2phy(DiEplbPlan *p) {
    int L = p->num_layers, E = p->num_logical, R = p->num_replicas, X = 1;
    for (size_t i = 0; i < (size_t)L * (size_t)E; i++)
        if (p->logcnt[i] > X) X = p->logcnt[i];
    p->max_replicas = X;
    p->log2phy = di_calloc((size_t)L * (size_t)E, (size_t)X * sizeof(int32_t), "EPLB log2phy");
    if (!p->log2phy) return -1;
    for (size_t i = 0; i < (size_t)L * (size_t)E * (size_t)X; i++) p->log2phy[i] = -1;
    for (int l = 0; l < L; l++)
        for (int s = 0; s < R; s++) {
            size_t at = ((size_t)l * (size_t)E + (size_t)p->phy2log[(size_t)l * R + s]) * (size_t)X;
            p->log2phy[at + (size_t)p->phy_rank[(size_t)l * R + s]] = s;
        }
    return 0;
}

int di_eplb_rebalance(const float *weight, int L, int E, int R, int G, int N, int P,
                      DiEplbPlan *out) {
    if (!out) return di_errorf("EPLB: NULL output plan");
    memset(out, 0, sizeof *out);
    if (!weight) return di_errorf("EPLB: NULL weight matrix");
    if (check_shape(L, E, R, G, N, P) != 0) return -1;
    int hierarchical = G % N == 0;
    if (!hierarchical) G = N = 1; /* the global policy (eplb.py since e1100fe) */
    if (check_weights(weight, (size_t)L * (size_t)E, E) != 0) return -1;

    Work w;
    if (work_alloc(&w, E, R, G, N) != 0) return -1;
    out->num_layers = L;
    out->num_logical = E;
    out->num_replicas = R;
    out->num_gpus = P;
    out->hierarchical = hierarchical;
    out->phy2log = di_calloc((size_t)L * (size_t)R, sizeof(int32_t), "EPLB phy2log");
    out->phy_rank = di_calloc((size_t)L * (size_t)R, sizeof(int32_t), "EPLB replica ranks");
    out->logcnt = di_calloc((size_t)L * (size_t)E, sizeof(int32_t), "EPLB logcnt");
    int rc = (out->phy2log && out->phy_rank && out->logcnt) ? 0 : -1;
    for (int l = 0; rc == 0 && l < L; l++)
        rc = plan_layer(&w, weight + (size_t)l * E, E, R, G, N, P, out->phy2log + (size_t)l * R,
                        out->phy_rank + (size_t)l * R, out->logcnt + (size_t)l * E);
    if (rc == 0) rc = fill_log2phy(out);
    work_free(&w);
    if (rc != 0) di_eplb_plan_free(out);
    return rc;
}

/* ---- moe_lb ----------------------------------------------------------------------------- */

int di_eplb_moe_lb(const DiEplbPlan *plan, const float *weight, double *per_layer, double *aggregate) {
    if (!plan || !weight || !aggregate) return di_errorf("moe_lb: NULL argument");
    if (!plan->phy2log || !plan->logcnt || plan->num_gpus <= 0 || plan->num_replicas <= 0 ||
        plan->num_replicas % plan->num_gpus != 0)
        return di_errorf("moe_lb: the plan is empty or malformed");
    int L = plan->num_layers, E = plan->num_logical, R = plan->num_replicas, P = plan->num_gpus;
    int per_gpu = R / P;
    double sum_max = 0.0, sum_mean = 0.0;
    for (int l = 0; l < L; l++) {
        const float *w = weight + (size_t)l * E;
        const int32_t *p2l = plan->phy2log + (size_t)l * R, *cnt = plan->logcnt + (size_t)l * E;
        double max = 0.0, total = 0.0;
        for (int g = 0; g < P; g++) {
            double load = 0.0;
            for (int s = g * per_gpu; s < (g + 1) * per_gpu; s++) load += (double)w[p2l[s]] / cnt[p2l[s]];
            if (load > max) max = load;
            total += load;
        }
        double mean = total / P;
        if (per_layer) per_layer[l] = mean > 0.0 ? max / mean : 1.0;
        sum_max += max;
        sum_mean += mean;
    }
    *aggregate = sum_mean > 0.0 ? sum_max / sum_mean : 1.0;
    return 0;
}
