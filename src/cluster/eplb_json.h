/* eplb_json.h — the JSON contract of `deepinfer eplb` (architecture.md, "Command line"):
 * request {"weight":[[...]], "num_replicas":R, "num_groups":G, "num_nodes":N, "num_gpus":P}
 * -> plan {"phy2log":[[...]], "log2phy":[[[...]]], "logcnt":[[...]]}.
 * Kept apart from the algorithm so the parser can be fuzzed on its own (fuzz/fuzz_eplb_json.c). */
#ifndef DI_CLUSTER_EPLB_JSON_H
#define DI_CLUSTER_EPLB_JSON_H

#include "deepinfer_cluster.h"

#include <stddef.h>

/* Upper bounds on a request, so a tiny input cannot ask for gigabytes: the slots of all layers
 * (num_layers * num_replicas) and the experts per layer.  Far above any real model (V4.1-Flash:
 * 384 experts; 40 layers x 448 slots = 17,920). */
#define DI_EPLB_MAX_TOTAL_SLOTS (1 << 24)
#define DI_EPLB_MAX_EXPERTS (1 << 16)

typedef struct {
    float *weight; /* [num_layers][num_logical] */
    int num_layers, num_logical;
    int num_replicas, num_groups, num_nodes, num_gpus;
} DiEplbRequest;

/* Parse and validate a request; errors name the field ("weight[3][7]: expected a number"). */
int di_eplb_request_parse(const char *data, size_t size, DiEplbRequest *out);
void di_eplb_request_free(DiEplbRequest *req);

/* The plan as one compact JSON object (heap string, free with free()). */
char *di_eplb_plan_to_json(const DiEplbPlan *plan);

#endif
