/* render_api.c — the public rendering entry points di_render_json / di_render_json_ids
 * (include/deepinfer.h): JSON in, prompt (optionally its token ids and segments) out, for the
 * CLI, the Python tests and the server. */
#include "deepinfer.h"

#include "base/error.h"
#include "base/json.h"
#include "recipe/conversation.h"
#include "recipe/render.h"
#include "recipe/tokenizer.h"

#include <stdlib.h>

static json_t *segments_json(const DiSegmentList *segs) {
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < segs->n_segs; i++) {
        const DiSegment *s = &segs->segs[i];
        json_t *o = json_pack("{s:b,s:s%}", "special", s->kind == DI_SEGMENT_SPECIAL, "text",
                              segs->bytes + s->offset, s->len);
        if (!o || json_array_append_new(arr, o) != 0) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

static json_t *ids_json(const DiTokenizer *tok, const DiSegmentList *segs) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (di_tokenizer_encode_segments(tok, segs, &ids, &n) != 0) {
        di_error_wrap("render: encoding the prompt");
        return NULL;
    }
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++)
        if (json_array_append_new(arr, json_integer(ids[i])) != 0) {
            json_decref(arr);
            arr = NULL;
        }
    free(ids);
    if (!arr) di_errorf("render: out of memory writing ids");
    return arr;
}

int di_render_json(const char *json, size_t len, int flags, char **result_json) {
    return di_render_json_ids(NULL, json, len, flags, result_json);
}

int di_render_json_ids(const DiTokenizer *tok, const char *json, size_t len, int flags, char **result_json) {
    if (!json || !result_json) return di_errorf("render: invalid argument");
    *result_json = NULL;
    json_t *root = di_json_load_with_nul(json, len, "conversation"); /* "\u0000" is text (base/json.h) */
    if (!root) return -1;
    DiConversation conv;
    int rc = di_conversation_from_json(root, &conv);
    json_decref(root);
    if (rc != 0) return -1;
    DiSegmentList segs;
    di_segments_init(&segs);
    rc = di_render_conversation(&conv, &segs);
    di_conversation_free(&conv);
    if (rc == 0) {
        json_t *out = json_pack("{s:s%}", "prompt", segs.bytes ? segs.bytes : "", segs.n_bytes);
        if (out && tok) {
            json_t *ids = ids_json(tok, &segs);
            if (!ids || json_object_set_new(out, "ids", ids) != 0) {
                json_decref(out);
                out = NULL;
                rc = -1;
            }
        }
        if (out && (flags & DI_RENDER_WITH_SEGMENTS)) {
            json_t *arr = segments_json(&segs);
            if (!arr || json_object_set_new(out, "segments", arr) != 0) {
                json_decref(out);
                out = NULL;
            }
        }
        if (out) *result_json = json_dumps(out, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
        if (out) json_decref(out);
        if (!*result_json && rc == 0) rc = di_errorf("render: out of memory writing the result");
    }
    di_segments_free(&segs);
    return rc;
}
