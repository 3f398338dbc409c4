/* textstream.c — incremental UTF-8 decoding with U+FFFD replacement (Unicode's "maximal subpart"
 * practice, which CPython follows), stop-string search and the streaming hold-back. */
#include "engine/textstream.h"

#include "base/mem.h"

#include <stdlib.h>
#include <string.h>

static const char REPLACEMENT[3] = {(char)0xEF, (char)0xBF, (char)0xBD}; /* U+FFFD */

void di_text_stream_init(DiTextStream *ts) { memset(ts, 0, sizeof *ts); }

void di_text_stream_free(DiTextStream *ts) {
    free(ts->text);
    memset(ts, 0, sizeof *ts);
}

static int put(DiTextStream *ts, const char *bytes, size_t n) {
    if (di_grow(&ts->text, &ts->cap, ts->len + n + 1, 64, 1, "generated text") != 0) return -1;
    memcpy(ts->text + ts->len, bytes, n);
    ts->len += n;
    ts->text[ts->len] = '\0';
    return 0;
}

/* Length of the sequence a lead byte starts (0: not a valid lead byte). */
static int sequence_length(uint8_t lead) {
    if (lead < 0x80) return 1;
    if (lead >= 0xC2 && lead <= 0xDF) return 2;
    if (lead >= 0xE0 && lead <= 0xEF) return 3;
    if (lead >= 0xF0 && lead <= 0xF4) return 4;
    return 0;
}

/* Whether byte b may follow the pending bytes (Unicode Table 3-7: the second byte's range depends
 * on the lead, excluding overlongs, surrogates and code points above U+10FFFF). */
static bool continues(const uint8_t *pending, int n_pending, uint8_t b) {
    if (n_pending == 1) {
        switch (pending[0]) {
        case 0xE0: return b >= 0xA0 && b <= 0xBF;
        case 0xED: return b >= 0x80 && b <= 0x9F;
        case 0xF0: return b >= 0x90 && b <= 0xBF;
        case 0xF4: return b >= 0x80 && b <= 0x8F;
        default: break;
        }
    }
    return b >= 0x80 && b <= 0xBF;
}

int di_text_stream_append(DiTextStream *ts, const char *bytes, size_t len) {
    for (size_t i = 0; i < len;) {
        uint8_t b = (uint8_t)bytes[i];
        if (ts->n_pending == 0) {
            int need = sequence_length(b);
            if (need == 1) {
                if (put(ts, (const char *)&b, 1)) return -1;
            } else if (need == 0) {
                if (put(ts, REPLACEMENT, 3)) return -1;
            } else {
                ts->pending[ts->n_pending++] = b;
            }
            i++;
            continue;
        }
        if (!continues(ts->pending, ts->n_pending, b)) {
            /* the pending prefix is a maximal invalid subpart: one U+FFFD, then retry b */
            ts->n_pending = 0;
            if (put(ts, REPLACEMENT, 3)) return -1;
            continue;
        }
        ts->pending[ts->n_pending++] = b;
        i++;
        if (ts->n_pending == sequence_length(ts->pending[0])) {
            if (put(ts, (const char *)ts->pending, (size_t)ts->n_pending)) return -1;
            ts->n_pending = 0;
        }
    }
    return 0;
}

int di_text_stream_flush(DiTextStream *ts) {
    if (ts->n_pending == 0) return 0;
    ts->n_pending = 0;
    return put(ts, REPLACEMENT, 3);
}

int di_text_stream_find_stop(DiTextStream *ts, const char *const *stops, int n_stops, size_t from) {
    if (!ts->text || n_stops <= 0) return -1;
    if (from > ts->len) from = ts->len;
    /* the earliest match wins; among matches at the same place, the lower index */
    size_t best_at = ts->len + 1;
    int best = -1;
    for (int i = 0; i < n_stops; i++) {
        const char *hit = memmem(ts->text + from, ts->len - from, stops[i], strlen(stops[i]));
        if (hit && (size_t)(hit - ts->text) < best_at) {
            best_at = (size_t)(hit - ts->text);
            best = i;
        }
    }
    if (best >= 0) {
        ts->len = best_at;
        ts->text[ts->len] = '\0';
        if (ts->delivered > ts->len) ts->delivered = ts->len; /* cannot happen with the hold-back */
    }
    return best;
}

size_t di_text_stream_ready(const DiTextStream *ts, size_t hold, bool final) {
    if (final) return ts->len;
    if (ts->len <= hold) return ts->delivered;
    size_t end = ts->len - hold;
    while (end > 0 && ((uint8_t)ts->text[end] & 0xC0) == 0x80) end--; /* not inside a character */
    return end > ts->delivered ? end : ts->delivered;
}
