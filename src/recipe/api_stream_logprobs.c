/* api_stream_logprobs.c — token logprobs in each protocol's form.
 *
 * The backend hands each event the logprobs of the tokens it accounts for (api_stream.h
 * DiApiLogprob); they are kept in the Chat Completions form, which the Responses API shares:
 *   {"token": text, "logprob": x, "bytes": [..], "top_logprobs": [{"token","logprob","bytes"}..]}
 * and turned into the legacy Completions form on output:
 *   {"tokens": [..], "token_logprobs": [..], "top_logprobs": [{text: x}..], "text_offset": [..]}.
 * A token may end inside a UTF-8 character: its text then shows U+FFFD and `bytes` holds the
 * exact bytes (as OpenAI reports them). */
#include "recipe/api_stream_internal.h"

#include "base/error.h"

#include <math.h>
#include <string.h>

/* -inf (a token the model gives no chance) is not JSON: the lowest float stands in (vLLM: -9999). */
static double finite_logprob(float x) { return isfinite(x) ? (double)x : -9999.0; }

static json_t *token_prob(const DiApiTokenProb *t) {
    json_t *bytes = json_array();
    for (size_t i = 0; bytes && i < t->len; i++) json_array_append_new(bytes, json_integer((unsigned char)t->bytes[i]));
    return json_pack("{s:o, s:f, s:o}", "token", di_api_text(t->bytes, t->len), "logprob", finite_logprob(t->logprob),
                     "bytes", bytes);
}

json_t *di_api_logprob_entries(const DiApiLogprob *lp, size_t n) {
    json_t *out = json_array();
    for (size_t i = 0; out && i < n; i++) {
        json_t *e = token_prob(&lp[i].token), *top = json_array();
        for (int k = 0; top && k < lp[i].n_top && k < DI_API_MAX_TOP_LOGPROBS; k++)
            json_array_append_new(top, token_prob(&lp[i].top[k]));
        if (!e || !top || json_object_set_new(e, "top_logprobs", top) != 0 || json_array_append_new(out, e) != 0) {
            json_decref(out);
            return NULL;
        }
    }
    return out;
}

json_t *di_api_completions_logprobs(const json_t *entries, size_t *text_offset) {
    json_t *tokens = json_array(), *values = json_array(), *tops = json_array(), *offsets = json_array();
    size_t i;
    json_t *e;
    json_array_foreach(entries, i, e) {
        json_t *token = json_object_get(e, "token"), *top = json_object(), *t;
        size_t k;
        json_array_foreach(json_object_get(e, "top_logprobs"), k, t) { /* tokens spelt alike keep the best */
            const char *text = json_string_value(json_object_get(t, "token"));
            if (!json_object_get(top, text)) json_object_set(top, text, json_object_get(t, "logprob"));
        }
        json_array_append(tokens, token);
        json_array_append(values, json_object_get(e, "logprob"));
        json_array_append_new(tops, top);
        json_array_append_new(offsets, json_integer((json_int_t)*text_offset));
        /* offsets count characters of the text, as OpenAI's (Python str) do */
        for (const unsigned char *c = (const unsigned char *)json_string_value(token); c && *c; c++)
            *text_offset += (*c & 0xC0) != 0x80;
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", values, "top_logprobs", tops,
                     "text_offset", offsets);
}

int di_api_logprobs_accumulate(DiApiStream *s, const DiApiEvent *ev) {
    json_decref(s->ev_logprobs);
    s->ev_logprobs = NULL;
    if (s->req->logprobs < 0 || !ev->n_logprobs) return 0;
    if (!ev->logprobs) return di_errorf("output event: %zu logprobs but no array", ev->n_logprobs);
    DiApiOutput *o = &s->out;
    if (!o->logprobs && !(o->logprobs = json_array())) return di_errorf("logprobs: out of memory");
    if (!o->content_logprobs && !(o->content_logprobs = json_array())) return di_errorf("logprobs: out of memory");
    if (!(s->ev_logprobs = di_api_logprob_entries(ev->logprobs, ev->n_logprobs)) ||
        json_array_extend(o->logprobs, s->ev_logprobs) != 0 ||
        (ev->kind == DI_API_EV_CONTENT && json_array_extend(o->content_logprobs, s->ev_logprobs) != 0))
        return di_errorf("logprobs: out of memory");
    return 0;
}
