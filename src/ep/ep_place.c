/* ep_place.c — expert placement from a plan (ep_place.h). */
#include "ep/ep_place.h"

#include "base/error.h"
#include "base/mem.h"

#include <stdlib.h>
#include <string.h>

void ep_placement_free(EpPlacement *pl) {
    if (!pl) return;
    free(pl->nrep);
    free(pl->holder);
    memset(pl, 0, sizeof *pl);
}

static int check_dims(int L, int E, int R, int P, int first_rank) {
    if (L <= 0 || E <= 0 || P <= 0 || R < E || R % P != 0 || first_rank < 0)
        return di_errorf("expert placement: %d layers, %d experts, %d slots on %d ranks (need slots >= experts and a "
                         "multiple of the ranks)",
                         L, E, R, P);
    return 0;
}

/* Replica counts and the largest, with every slot's logical expert in range. */
static int count_replicas(const EpPlacement *pl, const int32_t *phy2log, int32_t *nrep, int *max_rep) {
    int L = pl->n_layers, E = pl->n_experts, R = pl->n_slots;
    *max_rep = 1;
    for (int l = 0; l < L; l++)
        for (int s = 0; s < R; s++) {
            int32_t e = phy2log[(int64_t)l * R + s];
            if (e < 0 || e >= E) return di_errorf("expert placement: layer %d slot %d holds expert %d of %d", l, s, e, E);
            int32_t *c = &nrep[(int64_t)l * E + e];
            if (++*c > *max_rep) *max_rep = *c;
        }
    for (int64_t i = 0; i < (int64_t)L * E; i++)
        if (nrep[i] == 0) return di_errorf("expert placement: layer %lld expert %lld has no slot", (long long)(i / E), (long long)(i % E));
    return 0;
}

int ep_placement_build(int L, int E, int R, int P, int first_rank, const int32_t *phy2log, const int32_t *phy_rank,
                       EpPlacement *out) {
    if (!out) return di_errorf("ep_placement_build: no output given");
    memset(out, 0, sizeof *out);
    if (!phy2log || !phy_rank) return di_errorf("ep_placement_build: no plan arrays given");
    if (check_dims(L, E, R, P, first_rank) != 0) return -1;
    EpPlacement pl = {L, E, R, P, first_rank, 1, NULL, NULL};
    pl.nrep = di_calloc((size_t)L * (size_t)E, sizeof *pl.nrep, "expert replica counts");
    if (!pl.nrep || count_replicas(&pl, phy2log, pl.nrep, &pl.max_rep) != 0) goto fail;
    size_t n = (size_t)L * (size_t)E * (size_t)pl.max_rep;
    if (!(pl.holder = di_malloc(n * sizeof *pl.holder, "expert holders"))) goto fail;
    for (size_t i = 0; i < n; i++) pl.holder[i] = -1;
    int per = R / P;
    for (int l = 0; l < L; l++)
        for (int s = 0; s < R; s++) {
            int64_t ls = (int64_t)l * R + s, le = (int64_t)l * E + phy2log[ls];
            int32_t k = phy_rank[ls];
            if (k < 0 || k >= pl.nrep[le] || pl.holder[le * pl.max_rep + k] != -1) {
                di_errorf("expert placement: layer %d slot %d is replica %d of expert %d, which has %d", l, s, k, phy2log[ls],
                          pl.nrep[le]);
                goto fail;
            }
            pl.holder[le * pl.max_rep + k] = first_rank + s / per;
        }
    *out = pl;
    return 0;
fail:
    ep_placement_free(&pl);
    return -1;
}

bool ep_placement_holds(const EpPlacement *pl, int rank, int l, int e) {
    if (!pl || !pl->nrep || l < 0 || l >= pl->n_layers || e < 0 || e >= pl->n_experts) return false;
    int64_t le = (int64_t)l * pl->n_experts + e;
    for (int k = 0; k < pl->nrep[le]; k++)
        if (pl->holder[le * pl->max_rep + k] == rank) return true;
    return false;
}

int ep_default_plan(int L, int E, int P, DiEplbPlan *out) {
    if (!out) return di_errorf("ep_default_plan: no output given");
    memset(out, 0, sizeof *out);
    if (L <= 0 || E <= 0 || P <= 0) return di_errorf("ep_default_plan: %d layers, %d experts, %d ranks", L, E, P);
    int R = (E + P - 1) / P * P;
    float *w = di_malloc((size_t)L * (size_t)E * sizeof *w, "uniform expert load");
    if (!w) return -1;
    for (int64_t i = 0; i < (int64_t)L * E; i++) w[i] = 1.0f;
    int rc = di_eplb_rebalance(w, L, E, R, 1, 1, P, out);
    free(w);
    return rc;
}
