/* request.c — creating and freeing requests (deep copies of the caller's inputs; the grammar
 * matcher is attached and detached by the engine, constraint.h). */
#include "engine/request.h"

#include "base/error.h"
#include "base/mem.h"

#include <stdlib.h>
#include <string.h>

static int copy_stops(DiRequest *req, const DiSamplingParams *params) {
    if (params->n_stop > 0) {
        req->stop_copy = di_calloc((size_t)params->n_stop, sizeof *req->stop_copy, "stop strings");
        if (!req->stop_copy) return -1;
        for (int i = 0; i < params->n_stop; i++) {
            req->stop_copy[i] = di_strdup(params->stop[i]);
            if (!req->stop_copy[i]) return -1;
            size_t len = strlen(params->stop[i]);
            if (len > req->longest_stop) req->longest_stop = len;
        }
    }
    if (params->n_stop_token_ids > 0) {
        req->stop_ids_copy = di_calloc((size_t)params->n_stop_token_ids, sizeof *req->stop_ids_copy, "stop ids");
        if (!req->stop_ids_copy) return -1;
        memcpy(req->stop_ids_copy, params->stop_token_ids,
               (size_t)params->n_stop_token_ids * sizeof *req->stop_ids_copy);
    }
    if (params->n_logit_bias > 0) { /* the caller's array need not outlive the call */
        req->logit_bias_copy = di_calloc((size_t)params->n_logit_bias, sizeof *req->logit_bias_copy, "logit bias");
        if (!req->logit_bias_copy) return -1;
        memcpy(req->logit_bias_copy, params->logit_bias, (size_t)params->n_logit_bias * sizeof *req->logit_bias_copy);
    }
    if (params->constraint) {
        req->constraint_copy = di_strdup(params->constraint);
        if (!req->constraint_copy) return -1;
    }
    req->params.constraint = req->constraint_copy;
    req->params.stop = (const char *const *)req->stop_copy;
    req->params.stop_token_ids = req->stop_ids_copy;
    req->params.logit_bias = req->logit_bias_copy;
    return 0;
}

DiRequest *di_request_create(uint64_t id, const int32_t *prompt, int n_prompt, const DiSamplingParams *params,
                             uint64_t seed, DiStreamCallback callback, void *user) {
    if (!prompt || n_prompt <= 0 || !params) {
        di_errorf("request: empty prompt or missing parameters");
        return NULL;
    }
    DiRequest *req = di_calloc(1, sizeof *req, "request");
    if (!req) return NULL;
    req->id = id;
    req->params = *params;
    req->seed = seed;
    req->callback = callback;
    req->user = user;
    req->n_prompt = n_prompt;
    req->stop_token = -1;
    req->stop_string = -1;
    di_text_stream_init(&req->text);
    size_t cap = (size_t)n_prompt + (size_t)params->max_tokens;
    req->tokens = di_calloc(cap, sizeof *req->tokens, "request tokens");
    if (!req->tokens || copy_stops(req, params) != 0) goto fail;
    memcpy(req->tokens, prompt, (size_t)n_prompt * sizeof *prompt);
    if (params->logprobs >= 0) {
        req->logprobs = di_calloc((size_t)params->max_tokens, sizeof *req->logprobs, "request logprobs");
        if (!req->logprobs) goto fail;
    }
    return req;
fail:
    di_request_free(req);
    return NULL;
}

void di_request_free(DiRequest *req) {
    if (!req) return;
    free(req->cache_salt);
    free(req->error);
    free(req->kv_keys);
    if (req->stop_copy)
        for (int i = 0; i < req->params.n_stop; i++) free(req->stop_copy[i]);
    free(req->stop_copy);
    free(req->stop_ids_copy);
    free(req->logit_bias_copy);
    free(req->constraint_copy);
    free(req->tokens);
    free(req->logprobs);
    di_page_table_free(&req->pages);
    di_text_stream_free(&req->text);
    free(req);
}
