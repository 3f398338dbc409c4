/* pretok.c — the three-stage Split pre-tokenizer of DeepSeek V3/V4/V4.1 (see pretok.h).
 *
 * The patterns (recipe.md §1.1), each applied with the "Isolated" rule to every piece the
 * previous stage produced:
 *   A  \p{N}{1,3}
 *   B  [一-龥぀-ゟ゠-ヿ]+
 *   C  [ASCII punct][A-Za-z]+ | [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ | ?[\p{P}\p{S}]+[\r\n]*
 *      | \s*[\r\n]+ | \s+(?!\S) | \s+
 * Stage C is a leftmost search whose alternatives are tried in order at each position (Perl
 * semantics, as Oniguruma runs it); match_c() below resolves each alternative's backtracking
 * in closed form, as derived in recipe.md §1.3.  A stage never sees across the end of its
 * piece: the look-ahead of `\s+(?!\S)` stops at the piece end like at the end of a string. */
#include "recipe/pretok.h"

#include "base/error.h"

#include <pthread.h>
#include <string.h>
#include <utf8proc.h>

/* ---- UTF-8 -------------------------------------------------------------------------- */

size_t di_utf8_seq_len(const uint8_t *s, size_t n) {
    if (n == 0) return 0;
    uint8_t b0 = s[0];
    if (b0 < 0x80) return 1;
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte (Unicode Table 3-7) */
    if (b0 >= 0xC2 && b0 <= 0xDF) need = 2;
    else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 3;
        if (b0 == 0xE0) lo = 0xA0;      /* no overlongs */
        else if (b0 == 0xED) hi = 0x9F; /* no surrogates */
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 4;
        if (b0 == 0xF0) lo = 0x90;      /* no overlongs */
        else if (b0 == 0xF4) hi = 0x8F; /* nothing above U+10FFFF */
    } else
        return 0;
    if (n < need || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < need; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return need;
}

size_t di_utf8_invalid_len(const uint8_t *s, size_t n) {
    /* The maximal subpart: the lead byte plus the continuation bytes that are still allowed
     * at their position.  A byte that cannot start a sequence is a subpart of length 1. */
    uint8_t b0 = s[0];
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) need = 2;
    else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 3;
        if (b0 == 0xE0) lo = 0xA0;
        else if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 4;
        if (b0 == 0xF0) lo = 0x90;
        else if (b0 == 0xF4) hi = 0x8F;
    } else
        return 1;
    size_t i = 1;
    if (i < n && i < need && s[1] >= lo && s[1] <= hi) {
        i++;
        while (i < n && i < need && (s[i] & 0xC0) == 0x80) i++;
    }
    return i;
}

int di_utf8_check(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = di_utf8_seq_len(s + i, n - i);
        if (k == 0) return di_errorf("invalid UTF-8 at byte %zu (0x%02X)", i, s[i]);
        i += k;
    }
    return 0;
}

/* Decode the valid sequence at s (the caller checked validity); *len gets its length. */
static inline uint32_t decode_valid(const uint8_t *s, size_t *len) {
    uint8_t b0 = s[0];
    if (b0 < 0x80) {
        *len = 1;
        return b0;
    }
    if (b0 < 0xE0) {
        *len = 2;
        return ((uint32_t)(b0 & 0x1F) << 6) | (s[1] & 0x3F);
    }
    if (b0 < 0xF0) {
        *len = 3;
        return ((uint32_t)(b0 & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    }
    *len = 4;
    return ((uint32_t)(b0 & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
           ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
}

/* ---- character classes -------------------------------------------------------------- */

static bool is_white_space(uint32_t cp) {
    /* Oniguruma's Unicode \s is the White_Space property (recipe.md §1.3). */
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

/* The class Unicode 16.0 gives a code point that utf8proc's Unicode 15.0 leaves unassigned. */
static unsigned unicode16_class(uint32_t cp) {
    size_t lo = 0, hi = DI_PRETOK_UNICODE16_COUNT;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < DI_PRETOK_UNICODE16[mid].first) hi = mid;
        else if (cp > DI_PRETOK_UNICODE16[mid].last) lo = mid + 1;
        else return DI_PRETOK_UNICODE16[mid].cls;
    }
    return 0;
}

static unsigned compute_class(uint32_t cp) {
    unsigned c = 0;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: c |= DI_CC_L; break;
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: c |= DI_CC_M; break;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO: c |= DI_CC_N; break;
    case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE: case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO: c |= DI_CC_P; break;
    case UTF8PROC_CATEGORY_SM: case UTF8PROC_CATEGORY_SC: case UTF8PROC_CATEGORY_SK:
    case UTF8PROC_CATEGORY_SO: c |= DI_CC_S; break;
    case UTF8PROC_CATEGORY_CN: c |= unicode16_class(cp); break;
    default: break;
    }
    if (is_white_space(cp)) c |= DI_CC_WS;
    if (cp == '\r' || cp == '\n') c |= DI_CC_NL;
    if ((cp >= 0x4E00 && cp <= 0x9FA5) || (cp >= 0x3040 && cp <= 0x309F) || (cp >= 0x30A0 && cp <= 0x30FF))
        c |= DI_CC_CJK;
    if (cp < 0x80 && (c & (DI_CC_P | DI_CC_S))) c |= DI_CC_APUNCT; /* all 32 are P or S */
    if ((cp >= 'A' && cp <= 'Z') || (cp >= 'a' && cp <= 'z')) c |= DI_CC_ALPHA;
    return c;
}

/* The Basic Multilingual Plane is looked up in a table built once (128 KiB); the rarer
 * astral code points go to utf8proc each time. */
static uint16_t bmp_class[0x10000];
static pthread_once_t bmp_once = PTHREAD_ONCE_INIT;

static void build_bmp_table(void) {
    for (uint32_t cp = 0; cp < 0x10000; cp++) bmp_class[cp] = (uint16_t)compute_class(cp);
}

unsigned di_pretok_class(uint32_t cp) {
    if (cp < 0x10000) {
        pthread_once(&bmp_once, build_bmp_table);
        return bmp_class[cp];
    }
    return compute_class(cp);
}

static inline unsigned class_at(const uint8_t *s, size_t *len) {
    uint32_t cp = decode_valid(s, len);
    return cp < 0x10000 ? bmp_class[cp] : compute_class(cp);
}

/* End of the run of characters whose class intersects `mask`, starting at p. */
static size_t run_end(const uint8_t *s, size_t n, size_t p, unsigned mask) {
    while (p < n) {
        size_t k;
        if (!(class_at(s + p, &k) & mask)) break;
        p += k;
    }
    return p;
}

/* ---- stage C ------------------------------------------------------------------------ */

/* Length of the stage-C match at p, or 0 when no alternative matches there. */
static size_t match_c(const uint8_t *s, size_t n, size_t p) {
    size_t k0;
    unsigned c0 = class_at(s + p, &k0);
    size_t q = p + k0;
    unsigned c1 = 0;
    size_t k1 = 0;
    if (q < n) c1 = class_at(s + q, &k1);

    /* 1: one ASCII punctuation character, then ASCII letters. */
    if ((c0 & DI_CC_APUNCT) && (c1 & DI_CC_ALPHA)) return run_end(s, n, q, DI_CC_ALPHA) - p;
    /* 2: an optional character outside NL|L|P|S, then letters/marks. */
    if (!(c0 & (DI_CC_NL | DI_CC_L | DI_CC_P | DI_CC_S)) && (c1 & (DI_CC_L | DI_CC_M)))
        return run_end(s, n, q, DI_CC_L | DI_CC_M) - p;
    if (c0 & (DI_CC_L | DI_CC_M)) return run_end(s, n, q, DI_CC_L | DI_CC_M) - p;
    /* 3: an optional U+0020, punctuation/symbols, then CR/LF. */
    if (s[p] == ' ' && (c1 & (DI_CC_P | DI_CC_S))) {
        size_t e = run_end(s, n, q, DI_CC_P | DI_CC_S);
        return run_end(s, n, e, DI_CC_NL) - p;
    }
    if (c0 & (DI_CC_P | DI_CC_S)) {
        size_t e = run_end(s, n, q, DI_CC_P | DI_CC_S);
        return run_end(s, n, e, DI_CC_NL) - p;
    }
    if (!(c0 & DI_CC_WS)) return 0;

    /* 4-6 all start with the maximal whitespace run W = s[p..w_end). */
    size_t w_end = p, last_start = p, after_last_nl = 0;
    while (w_end < n) {
        size_t k;
        unsigned c = class_at(s + w_end, &k);
        if (!(c & DI_CC_WS)) break;
        last_start = w_end;
        w_end += k;
        if (c & DI_CC_NL) after_last_nl = w_end;
    }
    /* 4: \s*[\r\n]+ backtracks to the last CR/LF of W. */
    if (after_last_nl) return after_last_nl - p;
    /* 5: \s+(?!\S): all of W at the end of the piece, else W minus its last character. */
    if (w_end == n) return w_end - p;
    if (last_start > p) return last_start - p;
    /* 6: \s+ — a single whitespace character before a non-space. */
    return w_end - p;
}

static int scan_c(const uint8_t *s, size_t n, DiPieceFn fn, void *ctx) {
    size_t p = 0, gap = 0;
    while (p < n) {
        size_t m = match_c(s, n, p);
        if (m == 0) {
            size_t k;
            decode_valid(s + p, &k);
            p += k;
            continue;
        }
        int rc;
        if (gap < p && (rc = fn(ctx, s + gap, p - gap)) != 0) return rc;
        if ((rc = fn(ctx, s + p, m)) != 0) return rc;
        p += m;
        gap = p;
    }
    return gap < n ? fn(ctx, s + gap, n - gap) : 0;
}

/* ---- stages A and B ----------------------------------------------------------------- */

/* B: maximal runs of CJK characters are pieces; the runs between them go on to C. */
static int scan_b(const uint8_t *s, size_t n, DiPieceFn fn, void *ctx) {
    size_t p = 0, gap = 0;
    while (p < n) {
        size_t k;
        if (!(class_at(s + p, &k) & DI_CC_CJK)) {
            p += k;
            continue;
        }
        size_t e = run_end(s, n, p, DI_CC_CJK);
        int rc;
        if (gap < p && (rc = scan_c(s + gap, p - gap, fn, ctx)) != 0) return rc;
        /* A CJK run is Lo/Lm/Mn/Sk/Pd/Po characters; stage C splits it further. */
        if ((rc = scan_c(s + p, e - p, fn, ctx)) != 0) return rc;
        p = gap = e;
    }
    return gap < n ? scan_c(s + gap, n - gap, fn, ctx) : 0;
}

int di_pretok_split(const uint8_t *s, size_t n, DiPieceFn fn, void *ctx) {
    pthread_once(&bmp_once, build_bmp_table);
    /* A: every run of N characters is cut into chunks of three from its start. */
    size_t p = 0, gap = 0;
    while (p < n) {
        size_t k;
        if (!(class_at(s + p, &k) & DI_CC_N)) {
            p += k;
            continue;
        }
        int rc;
        if (gap < p && (rc = scan_b(s + gap, p - gap, fn, ctx)) != 0) return rc;
        size_t start = p;
        for (int count = 0; count < 3 && p < n; count++) {
            if (!(class_at(s + p, &k) & DI_CC_N)) break;
            p += k;
        }
        /* A chunk of N characters has no CJK character (B) and no C alternative matches in
         * it (N is not L/M/P/S/space; the optional first character of alternative 2 needs a
         * letter after it), so it is a piece as it is. */
        if ((rc = fn(ctx, s + start, p - start)) != 0) return rc;
        gap = p;
    }
    return gap < n ? scan_b(s + gap, n - gap, fn, ctx) : 0;
}

/* ---- safe cut points ---------------------------------------------------------------- */

static bool is_ascii_alpha(uint8_t b) { return (b >= 'A' && b <= 'Z') || (b >= 'a' && b <= 'z'); }

bool di_pretok_safe_cut(const uint8_t *s, size_t n, size_t pos) {
    if (pos == 0 || pos >= n) return false;
    pthread_once(&bmp_once, build_bmp_table);
    /* "a b" cut before the space: the letter run ends at the space under alternatives 1/2,
     * the space starts a fresh match, and neither letters nor space are N or CJK. */
    if (s[pos] == ' ' && is_ascii_alpha(s[pos - 1]) && pos + 1 < n && is_ascii_alpha(s[pos + 1]))
        return true;
    /* After a LF whose whitespace run continues (if at all) without another CR/LF: whatever
     * match covers the LF (alternative 3's [\r\n]* or alternative 4, which backtracks to the
     * last CR/LF of the run) ends exactly at pos, in the whole text and in the head alike. */
    if (s[pos - 1] != '\n') return false;
    size_t p = pos;
    while (p < n) {
        size_t k;
        unsigned c = class_at(s + p, &k);
        if (!(c & DI_CC_WS)) break;
        if (c & DI_CC_NL) return false;
        p += k;
    }
    return true;
}
