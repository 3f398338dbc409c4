/* ep_place.h — which rank holds each replica of each routed expert, from an EPLB plan
 * (DiEplbPlan, deepinfer_cluster.h), and the deterministic replica choice of dispatch.
 *
 * Expert-serving ranks are first_rank .. first_rank + P - 1 (P = plan->num_gpus): physical slot
 * s of a layer lives on rank first_rank + s / (R / P), as the plan's convention says.  A token
 * routed to expert e goes to replica (token mod replica count) (serving.md §8.2, the deterministic
 * alternative), with replica k = the slot whose phy_rank is k; the choice only picks where a row
 * is computed, never its bits, so any choice keeps the results bit-identical. */
#ifndef DI_EP_EP_PLACE_H
#define DI_EP_EP_PLACE_H

#include "deepinfer_cluster.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    int n_layers, n_experts, n_slots, n_gpus, first_rank;
    int max_rep;
    int32_t *nrep;   /* [L][E] replicas of each expert (>= 1) */
    int32_t *holder; /* [L][E][max_rep] rank of replica k */
} EpPlacement;

/* Build from the plan's phy2log and phy_rank (each [L][R]); every expert must have replicas
 * 0 .. cnt-1 exactly once, R a multiple of P.  On failure *out is zeroed, -1 with the cause. */
int ep_placement_build(int n_layers, int n_experts, int n_slots, int n_gpus, int first_rank, const int32_t *phy2log,
                       const int32_t *phy_rank, EpPlacement *out);
void ep_placement_free(EpPlacement *pl);

/* The rank that computes token `token`'s row of expert e in layer l (arguments in range). */
static inline int ep_placement_rank(const EpPlacement *pl, int l, int e, int64_t token) {
    int64_t le = (int64_t)l * pl->n_experts + e;
    return pl->holder[le * pl->max_rep + token % pl->nrep[le]];
}

/* Whether `rank` holds a replica of expert e of layer l. */
bool ep_placement_holds(const EpPlacement *pl, int rank, int l, int e);

/* The starting plan for L layers of E experts over P ranks: EPLB (di_eplb_rebalance) on a
 * uniform load with the fewest slots that P divides, ceil(E / P) x P (so the extra slots, if
 * any, become replicas).  *out as di_eplb_rebalance leaves it. */
int ep_default_plan(int n_layers, int n_experts, int n_gpus, DiEplbPlan *out);

#endif
