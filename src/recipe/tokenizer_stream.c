/* tokenizer_stream.c — incremental decoding of generated ids for streaming (recipe.md §1.5).
 *
 * A token's bytes can end in the middle of a UTF-8 character (🦀 is [f0 9f] [a6] [80]), so a
 * stream keeps a valid-but-incomplete tail (at most 3 bytes) until the next id completes it.
 * Bytes that can never become valid are released at once as U+FFFD, one per maximal invalid
 * subpart, exactly as Rust's String::from_utf8_lossy (which HF decode uses) would print them.
 * Usage accounting follows recipe's StreamProcessor: an id counts once text containing its
 * bytes has been released; ids still held at the end produce neither text nor usage. */
#include "recipe/tokenizer.h"

#include "base/error.h"
#include "base/mem.h"
#include "recipe/pretok.h"

#include <stdlib.h>
#include <string.h>

struct DiDecodeStream {
    const DiTokenizer *tok;
    uint8_t pending[4];
    size_t n_pending;      /* bytes of an incomplete character, <= 3 */
    size_t pending_ids;    /* ids whose bytes have not reached the output yet */
    uint8_t *work;         /* pending + the new token's bytes */
    char *out;             /* released text, NUL-terminated */
    size_t cap;            /* capacity of work; out has 3 * cap + 1 */
};

DiDecodeStream *di_decode_stream_new(const DiTokenizer *tok) {
    if (!tok) {
        di_errorf("decode stream: NULL tokenizer");
        return NULL;
    }
    DiDecodeStream *s = di_calloc(1, sizeof *s, "decode stream");
    if (s) s->tok = tok;
    return s;
}

void di_decode_stream_free(DiDecodeStream *s) {
    if (!s) return;
    free(s->work);
    free(s->out);
    free(s);
}

size_t di_decode_stream_pending_ids(const DiDecodeStream *s) { return s ? s->pending_ids : 0; }

/* Bytes a sequence starting with lead byte b needs, 0 when b cannot start one. */
static size_t lead_need(uint8_t b) {
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b >= 0xE0 && b <= 0xEF) return 3;
    if (b >= 0xF0 && b <= 0xF4) return 4;
    return 0;
}

static int reserve(DiDecodeStream *s, size_t n) {
    if (n <= s->cap) return 0;
    size_t cap = s->cap ? s->cap : 256;
    while (cap < n) cap *= 2;
    uint8_t *work = di_malloc(cap, "decode stream buffer");
    char *out = work ? di_malloc(3 * cap + 1, "decode stream output") : NULL;
    if (!out) {
        free(work);
        return -1;
    }
    free(s->work);
    free(s->out);
    s->work = work;
    s->out = out;
    s->cap = cap;
    return 0;
}

int di_decode_stream_push(DiDecodeStream *s, int32_t id, const char **text, size_t *len) {
    if (!s || !text || !len) return di_errorf("decode stream: invalid argument");
    *text = "";
    *len = 0;
    size_t tlen;
    const char *tb = di_tokenizer_token_bytes(s->tok, id, &tlen);
    if (!tb) return di_error_wrap("decode stream");
    size_t n = s->n_pending + tlen;
    if (reserve(s, n + 1) != 0) return -1; /* +1: never a NULL buffer, even for an empty token */
    memcpy(s->work, s->pending, s->n_pending);
    memcpy(s->work + s->n_pending, tb, tlen);
    const uint8_t *w = s->work;
    size_t i = 0, o = 0;
    s->n_pending = 0;
    while (i < n) {
        size_t k = di_utf8_seq_len(w + i, n - i);
        if (k > 0) {
            memcpy(s->out + o, w + i, k);
            o += k;
            i += k;
            continue;
        }
        size_t sub = di_utf8_invalid_len(w + i, n - i);
        if (i + sub == n && sub < lead_need(w[i])) { /* may still be completed: hold it */
            memcpy(s->pending, w + i, sub);
            s->n_pending = sub;
            break;
        }
        memcpy(s->out + o, "\xEF\xBF\xBD", 3); /* U+FFFD */
        o += 3;
        i += sub;
    }
    s->out[o] = '\0';
    s->pending_ids = o > 0 ? 0 : s->pending_ids + 1;
    *text = s->out;
    *len = o;
    return 0;
}
