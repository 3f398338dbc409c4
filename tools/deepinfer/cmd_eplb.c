/* cmd_eplb.c — `deepinfer eplb`: an EPLB plan for a load matrix (architecture.md, serving.md §8.1).
 * stdin {"weight":[[...]], "num_replicas":R, "num_groups":G, "num_nodes":N, "num_gpus":P}
 * -> stdout {"phy2log":[[...]],"log2phy":[[[...]]],"logcnt":[[...]]} on one line. */
#include "commands.h"

#include "deepinfer.h"
#include "cluster/eplb_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void eplb_usage(FILE *out) {
    fprintf(out,
            "usage: deepinfer eplb [--stats] < request.json\n\n"
            "Reads {\"weight\":[[...]], \"num_replicas\":R, \"num_groups\":G, \"num_nodes\":N, \"num_gpus\":P}\n"
            "(weight[layer][expert] = estimated load) on stdin and prints the plan\n"
            "{\"phy2log\":[[...]],\"log2phy\":[[[...]]],\"logcnt\":[[...]]} as one JSON line.\n"
            "Hierarchical policy when num_nodes divides num_groups, else global (deepseek-ai/EPLB).\n\n"
            "  --stats   also print the policy and moe_lb (max/mean GPU load) per layer on stderr\n"
            "  --help    this text\n");
}

/* All of stdin into a heap buffer. */
static char *read_stdin(size_t *size) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, stdin);
        n += got;
        if (got == 0) break;
        if (n == cap) {
            char *bigger = realloc(buf, cap * 2);
            if (!bigger) {
                free(buf);
                return NULL;
            }
            buf = bigger;
            cap *= 2;
        }
    }
    *size = n;
    return buf;
}

static void print_stats(const DiEplbPlan *plan, const float *weight) {
    double *per_layer = calloc((size_t)plan->num_layers, sizeof(double)), total = 0.0;
    if (!per_layer || di_eplb_moe_lb(plan, weight, per_layer, &total) != 0) {
        free(per_layer);
        return;
    }
    fprintf(stderr, "policy=%s max_replicas=%d moe_lb=%.4f\n", plan->hierarchical ? "hierarchical" : "global",
            plan->max_replicas, total);
    for (int l = 0; l < plan->num_layers; l++) fprintf(stderr, "layer=%d moe_lb=%.4f\n", l, per_layer[l]);
    free(per_layer);
}

int cmd_eplb(int argc, char **argv) {
    int stats = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            eplb_usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--stats") == 0) {
            stats = 1;
        } else {
            fprintf(stderr, "deepinfer eplb: unknown option '%s'\n\n", argv[i]);
            eplb_usage(stderr);
            return 2;
        }
    }
    size_t size = 0;
    char *input = read_stdin(&size);
    if (!input) {
        fprintf(stderr, "deepinfer eplb: out of memory reading stdin\n");
        return 1;
    }
    DiEplbRequest req;
    DiEplbPlan plan;
    int rc = di_eplb_request_parse(input, size, &req);
    free(input);
    if (rc == 0)
        rc = di_eplb_rebalance(req.weight, req.num_layers, req.num_logical, req.num_replicas, req.num_groups,
                               req.num_nodes, req.num_gpus, &plan);
    if (rc != 0) {
        fprintf(stderr, "deepinfer eplb: %s\n", di_last_error());
        di_eplb_request_free(&req);
        return 1;
    }
    char *json = di_eplb_plan_to_json(&plan);
    if (json) {
        puts(json);
        free(json);
    } else {
        fprintf(stderr, "deepinfer eplb: %s\n", di_last_error());
        rc = 1;
    }
    if (stats) print_stats(&plan, req.weight);
    di_eplb_plan_free(&plan);
    di_eplb_request_free(&req);
    return rc == 0 ? 0 : 1;
}
