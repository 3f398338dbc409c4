/* prefill_cost.h — the prefill step-cost model and chunk solver (serving.md §6.3).
 *
 * cost(q, c) = a·q² + b·q·c + d·q + e·c + f nanoseconds for q new tokens of a request with c
 * tokens already in its KV: a·q² causal attention among the new tokens, b·q·c attention/indexing
 * against the prefix, d·q projections and MoE GEMMs, e·c reading prefix state, f the fixed
 * launch/sync overhead, paid once per step (not per request).  The coefficients are fitted by
 * least squares from measured step times; the chunk solver inverts the model in closed form to
 * give each request the largest block-aligned chunk that fits a nanosecond budget.
 *
 * The types and entry points are public (include/deepinfer_cluster.h): an operator
 * embedding the control plane fits the model from its own profiled steps and plans chunks. */
#ifndef DI_CLUSTER_PREFILL_COST_H
#define DI_CLUSTER_PREFILL_COST_H

#include "deepinfer_cluster.h"

#endif
