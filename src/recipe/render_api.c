/* render_api.c — the public rendering entry point di_render_json (include/deepinfer.h): JSON in,
 * prompt (and optionally its segments) out, for the CLI and the Python tests. */
#include "deepinfer.h"

#include "base/error.h"
#include "base/json.h"
#include "recipe/conversation.h"
#include "recipe/render.h"

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

int di_render_json(const char *json, size_t len, int flags, char **result_json) {
    if (!json || !result_json) return di_errorf("render: invalid argument");
    *result_json = NULL;
    json_t *root = di_json_load_buffer(json, len, "conversation");
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
        if (out && (flags & DI_RENDER_WITH_SEGMENTS)) {
            json_t *arr = segments_json(&segs);
            if (!arr || json_object_set_new(out, "segments", arr) != 0) {
                json_decref(out);
                out = NULL;
            }
        }
        if (out) *result_json = json_dumps(out, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
        if (out) json_decref(out);
        if (!*result_json) rc = di_errorf("render: out of memory writing the result");
    }
    di_segments_free(&segs);
    return rc;
}
