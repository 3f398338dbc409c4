/* fuzz_eplb_json.c — libFuzzer target for the `deepinfer eplb` request parser and the planner
 * behind it: any byte string must give either a valid plan or a clean error, never a crash,
 * hang or sanitizer report.  Requests are capped (eplb_json.h) so plans stay small. */
#include "cluster/eplb_json.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    DiEplbRequest req;
    if (di_eplb_request_parse((const char *)data, size, &req) != 0) return 0;
    DiEplbPlan plan;
    /* keep each run fast: the planner is O(L * R log E); cap the work per input */
    if ((long)req.num_layers * req.num_replicas <= 200000 &&
        di_eplb_rebalance(req.weight, req.num_layers, req.num_logical, req.num_replicas, req.num_groups,
                          req.num_nodes, req.num_gpus, &plan) == 0) {
        char *json = di_eplb_plan_to_json(&plan);
        free(json);
        di_eplb_plan_free(&plan);
    }
    di_eplb_request_free(&req);
    return 0;
}
