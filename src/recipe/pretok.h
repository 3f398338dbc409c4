/* pretok.h — the DeepSeek V3/V4/V4.1 pre-tokenizer as a hand-written scanner (recipe.md §1.3).
 *
 * The tokenizer.json pre-tokenizer is Sequence[Split(A), Split(B), Split(C), ByteLevel], every
 * Split "Isolated": each regex match is a piece and each run of unmatched characters between
 * matches is a piece.  Instead of three regexes this module scans the text once per stage over
 * Unicode general categories (utf8proc), which is exact, linear in the input and needs no regex
 * engine (no backtracking blow-up on adversarial whitespace runs).  The ByteLevel stage is only
 * the byte->char mapping; BPE works on raw bytes, so it has no code here.
 *
 * The module also knows where a long text may be cut so that pre-tokenizing the parts gives
 * exactly the pieces of the whole (recipe.md §5.4): the parallel encoder cuts only there. */
#ifndef DI_RECIPE_PRETOK_H
#define DI_RECIPE_PRETOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Called once per piece, in order; a non-zero return stops the scan and is returned. */
typedef int (*DiPieceFn)(void *ctx, const uint8_t *piece, size_t len);

/* Split valid UTF-8 `text` into pre-tokenizer pieces.  The caller guarantees validity
 * (di_utf8_check); returns 0, or the first non-zero value returned by `fn`. */
int di_pretok_split(const uint8_t *text, size_t len, DiPieceFn fn, void *ctx);

/* True when cutting valid UTF-8 `text` at byte `pos` (0 < pos < len) leaves every piece
 * unchanged: pieces(text) == pieces(text[:pos]) ++ pieces(text[pos:]). */
bool di_pretok_safe_cut(const uint8_t *text, size_t len, size_t pos);

/* 0 when `text` is valid UTF-8 (RFC 3629: no overlongs, surrogates or code points above
 * U+10FFFF); otherwise -1 with an error naming the byte offset of the first bad sequence. */
int di_utf8_check(const uint8_t *text, size_t len);

/* Length of the valid UTF-8 sequence at text[0..len) (1..4), or 0 when the bytes there do
 * not start a valid sequence (also when it is truncated by len). */
size_t di_utf8_seq_len(const uint8_t *text, size_t len);

/* Length of the longest prefix of text[0..len) that could still be completed into one valid
 * sequence ("maximal subpart", Unicode §3.9 / Rust from_utf8_lossy); at least 1. */
size_t di_utf8_invalid_len(const uint8_t *text, size_t len);

/* The scanner's character classes, exposed for tests (bit set of DI_CC_*). */
enum {
    DI_CC_L = 1 << 0,      /* letters Lu Ll Lt Lm Lo */
    DI_CC_M = 1 << 1,      /* marks Mn Mc Me */
    DI_CC_N = 1 << 2,      /* numbers Nd Nl No */
    DI_CC_P = 1 << 3,      /* punctuation Pc Pd Ps Pe Pi Pf Po */
    DI_CC_S = 1 << 4,      /* symbols Sm Sc Sk So */
    DI_CC_WS = 1 << 5,     /* regex \s (Oniguruma: the White_Space property) */
    DI_CC_NL = 1 << 6,     /* CR, LF */
    DI_CC_CJK = 1 << 7,    /* Split B's class: U+4E00-9FA5, U+3040-309F, U+30A0-30FF */
    DI_CC_APUNCT = 1 << 8, /* the 32 ASCII punctuation characters of Split C alternative 1 */
    DI_CC_ALPHA = 1 << 9,  /* A-Z a-z */
};
unsigned di_pretok_class(uint32_t cp);

/* Code points utf8proc (Unicode 15.0) leaves unassigned but Unicode 16.0 assigns, with their
 * class (pretok_unicode16.c): the categories HF tokenizers' Oniguruma uses. */
typedef struct {
    uint32_t first, last;
    unsigned cls;
} DiCpRange;
extern const DiCpRange DI_PRETOK_UNICODE16[];
extern const size_t DI_PRETOK_UNICODE16_COUNT;

#endif
