/* segments.c — growable segment list (see segments.h). */
#include "recipe/segments.h"

#include "base/error.h"
#include "base/json.h"
#include "base/mem.h"

#include <stdlib.h>
#include <string.h>

void di_segments_init(DiSegmentList *list) { memset(list, 0, sizeof *list); }

void di_segments_free(DiSegmentList *list) {
    if (!list) return;
    free(list->bytes);
    free(list->segs);
    memset(list, 0, sizeof *list);
}

void di_segments_clear(DiSegmentList *list) {
    list->n_bytes = 0;
    list->n_segs = 0;
    if (list->bytes) list->bytes[0] = '\0';
}

static int reserve_bytes(DiSegmentList *list, size_t extra) {
    if (extra > ((size_t)-1) / 2 - list->n_bytes - 1) return di_errorf("prompt too large");
    return di_grow(&list->bytes, &list->cap_bytes, list->n_bytes + extra + 1, 256, 1, "prompt bytes");
}

static int push_segment(DiSegmentList *list, DiSegmentKind kind, const char *data, size_t len) {
    if (reserve_bytes(list, len) != 0) return -1;
    if (di_grow(&list->segs, &list->cap_segs, list->n_segs + 1, 16, sizeof *list->segs, "prompt segments") != 0) return -1;
    memcpy(list->bytes + list->n_bytes, data, len);
    list->segs[list->n_segs++] = (DiSegment){kind, list->n_bytes, len, false};
    list->n_bytes += len;
    list->bytes[list->n_bytes] = '\0';
    return 0;
}

/* Text arrives marked (client NULs, base/json.h): the prompt holds it unmarked. */
int di_segments_text(DiSegmentList *list, const char *text, size_t len) {
    if (!list || (!text && len)) return di_errorf("segments: invalid argument");
    if (len == 0) return 0;
    size_t at = list->n_bytes;
    if (list->n_segs > 0 && list->segs[list->n_segs - 1].kind == DI_SEGMENT_TEXT) {
        if (reserve_bytes(list, len) != 0) return -1;
        memcpy(list->bytes + list->n_bytes, text, len);
        list->n_bytes += len;
        list->segs[list->n_segs - 1].len += len;
    } else if (push_segment(list, DI_SEGMENT_TEXT, text, len) != 0) {
        return -1;
    }
    size_t kept = di_text_unmark(list->bytes + at, len);
    list->n_bytes -= len - kept;
    list->segs[list->n_segs - 1].len -= len - kept;
    list->bytes[list->n_bytes] = '\0';
    return 0;
}

int di_segments_special(DiSegmentList *list, const char *spelling) {
    if (!list || !spelling || !*spelling) return di_errorf("segments: empty special token");
    return push_segment(list, DI_SEGMENT_SPECIAL, spelling, strlen(spelling));
}

int di_segments_marker(DiSegmentList *list, const char *spelling) {
    if (di_segments_special(list, spelling) != 0) return -1;
    list->segs[list->n_segs - 1].text_fallback = true;
    return 0;
}
