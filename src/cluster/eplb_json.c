/* eplb_json.c — parse `deepinfer eplb` requests and print plans (see eplb_json.h). */
#include "cluster/eplb_json.h"

#include "base/error.h"
#include "base/json.h"
#include "base/mem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A positive int field, at most `max`. */
static int positive_field(const json_t *root, const char *key, int64_t max, int *out) {
    int64_t v;
    if (di_json_int(root, "", key, true, &v) != 0) return -1;
    if (v <= 0 || v > max) return di_errorf("%s: must be in 1..%lld, got %lld", key, (long long)max, (long long)v);
    *out = (int)v;
    return 0;
}

/* weight: a non-empty array of equally long, non-empty arrays of finite numbers >= 0. */
static int parse_weight(const json_t *root, DiEplbRequest *req) {
    json_t *rows;
    if (di_json_array(root, "", "weight", true, &rows) != 0) return -1;
    size_t L = json_array_size(rows);
    if (L == 0) return di_errorf("weight: expected at least one layer, got an empty array");
    const json_t *first = json_array_get(rows, 0);
    if (!json_is_array(first)) return di_errorf("weight[0]: expected an array, got %s", di_json_type_name(first));
    size_t E = json_array_size(first);
    if (E == 0 || E > DI_EPLB_MAX_EXPERTS)
        return di_errorf("weight[0]: expected 1..%d experts, got %zu", DI_EPLB_MAX_EXPERTS, E);
    if (L > DI_EPLB_MAX_TOTAL_SLOTS / E) return di_errorf("weight: %zu layers x %zu experts is too large", L, E);
    req->weight = di_calloc(L * E, sizeof(float), "EPLB weights");
    if (!req->weight) return -1;
    req->num_layers = (int)L;
    req->num_logical = (int)E;
    for (size_t l = 0; l < L; l++) {
        const json_t *row = json_array_get(rows, l);
        if (!json_is_array(row)) return di_errorf("weight[%zu]: expected an array, got %s", l, di_json_type_name(row));
        if (json_array_size(row) != E)
            return di_errorf("weight[%zu]: expected %zu experts like weight[0], got %zu", l, E, json_array_size(row));
        for (size_t e = 0; e < E; e++) {
            const json_t *v = json_array_get(row, e);
            if (!json_is_number(v)) return di_errorf("weight[%zu][%zu]: expected a number, got %s", l, e, di_json_type_name(v));
            double d = json_number_value(v);
            float f = (float)d;
            if (!isfinite(d) || d < 0.0 || !isfinite(f))
                return di_errorf("weight[%zu][%zu]: load must be finite, >= 0 and fit a float, got %g", l, e, d);
            req->weight[l * E + e] = f;
        }
    }
    return 0;
}

int di_eplb_request_parse(const char *data, size_t size, DiEplbRequest *out) {
    if (!out) return di_errorf("EPLB request: NULL output");
    memset(out, 0, sizeof *out);
    json_t *root = di_json_load_buffer(data, size, "EPLB request");
    if (!root) return -1;
    int rc = -1;
    if (!json_is_object(root)) {
        di_errorf("EPLB request: expected a JSON object, got %s", di_json_type_name(root));
        goto done;
    }
    if (parse_weight(root, out) != 0) goto done;
    int64_t max_r = DI_EPLB_MAX_TOTAL_SLOTS / out->num_layers;
    if (positive_field(root, "num_replicas", max_r, &out->num_replicas) != 0 ||
        positive_field(root, "num_groups", out->num_logical, &out->num_groups) != 0 ||
        positive_field(root, "num_gpus", out->num_replicas, &out->num_gpus) != 0 ||
        positive_field(root, "num_nodes", out->num_gpus, &out->num_nodes) != 0)
        goto done;
    rc = 0;
done:
    json_decref(root);
    if (rc != 0) {
        di_error_wrap("EPLB request");
        di_eplb_request_free(out);
    }
    return rc;
}

void di_eplb_request_free(DiEplbRequest *req) {
    if (!req) return;
    free(req->weight);
    memset(req, 0, sizeof *req);
}

/* rows x cols int32 matrix -> JSON array of arrays (NULL on allocation failure). */
static json_t *int_matrix(const int32_t *v, size_t rows, size_t cols) {
    json_t *outer = json_array();
    for (size_t r = 0; outer && r < rows; r++) {
        json_t *row = json_array();
        if (!row || json_array_append_new(outer, row) != 0) {
            json_decref(outer);
            return NULL;
        }
        for (size_t c = 0; c < cols; c++)
            if (json_array_append_new(row, json_integer(v[r * cols + c])) != 0) {
                json_decref(outer);
                return NULL;
            }
    }
    return outer;
}

char *di_eplb_plan_to_json(const DiEplbPlan *plan) {
    if (!plan || !plan->phy2log || !plan->log2phy || !plan->logcnt) {
        di_errorf("EPLB plan to JSON: empty plan");
        return NULL;
    }
    size_t L = (size_t)plan->num_layers, E = (size_t)plan->num_logical, X = (size_t)plan->max_replicas;
    json_t *root = json_object();
    json_t *phy2log = int_matrix(plan->phy2log, L, (size_t)plan->num_replicas);
    json_t *log2phy = json_array();
    for (size_t l = 0; log2phy && l < L; l++) {
        json_t *layer = int_matrix(plan->log2phy + l * E * X, E, X);
        if (!layer || json_array_append_new(log2phy, layer) != 0) {
            json_decref(log2phy);
            log2phy = NULL;
        }
    }
    json_t *logcnt = int_matrix(plan->logcnt, L, E);
    char *text = NULL;
    if (root && phy2log && log2phy && logcnt) {
        json_object_set_new(root, "phy2log", phy2log);
        json_object_set_new(root, "log2phy", log2phy);
        json_object_set_new(root, "logcnt", logcnt);
        text = json_dumps(root, JSON_COMPACT);
    } else {
        json_decref(phy2log);
        json_decref(log2phy);
        json_decref(logcnt);
    }
    json_decref(root);
    if (!text) di_errorf("EPLB plan to JSON: out of memory");
    return text;
}
