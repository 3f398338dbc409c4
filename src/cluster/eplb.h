/* eplb.h — the expert-parallel load balancer: where each MoE expert's replicas live.
 *
 * A C port of the algorithm of deepseek-ai/EPLB `eplb.py` (HEAD d52c72d) as specified in
 * serving.md §8.1: replicate heavy experts into redundant slots and pack the replicas onto GPUs so
 * that the per-GPU load is balanced, keeping expert groups on one node when the node count
 * divides the group count (hierarchical policy), else treating the cluster as one node with one
 * group (global policy, the reference's behaviour since commit e1100fe).
 *
 * The public types (DiEplbPlan) and entry points are declared in include/deepinfer_cluster.h; this
 * header adds the two primitives, exposed so tests can pin them down separately. */
#ifndef DI_CLUSTER_EPLB_H
#define DI_CLUSTER_EPLB_H

#include "deepinfer_cluster.h"

#include <stdint.h>

/* balanced_packing (§8.1): put n items into m packs of exactly n/m items each.  Items are taken
 * by weight descending (stable: equal weights keep index order) and each goes to the lightest
 * pack that is not full (ties: lowest pack index).  Pack sums accumulate in float, as the
 * reference does after its .float() conversion.  Weights must be >= 0 (not NaN).  `scratch`
 * holds 4n + 3m 32-bit words and must be 8-byte aligned.
 * Fails when n or m is not positive or m does not divide n. */
int di_eplb_balanced_packing(const float *weight, int n, int m, int32_t *pack_index,
                             int32_t *rank_in_pack, int32_t *scratch);

/* replicate_experts (§8.1): slots 0..e-1 hold experts 0..e-1; each further slot goes to the
 * expert with the largest weight / replica count (ties: lowest expert index).  Outputs: the
 * expert of each of the r slots, the replica rank of each slot, the replica count of each
 * expert.  `scratch` holds e ints.  Fails unless 0 < e <= r. */
int di_eplb_replicate(const float *weight, int e, int r, int32_t *phy2log, int32_t *rank,
                      int32_t *logcnt, int32_t *scratch);

#endif
