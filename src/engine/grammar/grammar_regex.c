/* grammar_regex.c — the regex front-end: a pattern becomes one grammar rule with full-match
 * semantics (the whole output must match, as Python's re.fullmatch).
 *
 * Supported: literals, `.` (any code point but \n), [classes] with ranges and ^, the escapes
 * \d \w \s \D \W \S (ASCII meaning, as ECMAScript and JSON Schema patterns: \d = [0-9]),
 * \n \r \t \f \v \xHH \uHHHH and escaped punctuation, groups ( ) (?: ) (?P<name> ), `|`,
 * quantifiers * + ? {m} {m,} {m,n} {,n} (a lazy or possessive suffix changes which match a
 * search prefers, never the language, so it is accepted), and ^ / $ at the very ends.
 * Everything else (backreferences, lookaround, \b, inline flags, anchors in the middle) is an
 * error naming the construct and its offset: constraining output with a pattern we would read
 * differently than its author is worse than refusing it. */
#include "engine/grammar/grammar.h"

#include "base/error.h"

#include <string.h>

typedef struct {
    const char *s;
    size_t n, i;
    int depth;
} R;

static int rerr(const R *r, const char *what) { return di_errorf("regex offset %zu: %s", r->i, what); }

static int hexv(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int add_ranges(DiGNode *cls, const uint32_t *r, size_t n) {
    for (size_t k = 0; k < n; k++)
        if (di_gnode_class_add(cls, r[2 * k], r[2 * k + 1]) != 0) return -1;
    return 0;
}

static const uint32_t DIGIT[] = {'0', '9'};
static const uint32_t WORD[] = {'0', '9', 'A', 'Z', '_', '_', 'a', 'z'};
static const uint32_t SPACE[] = {'\t', '\r', ' ', ' '}; /* \t \n \v \f \r and space */

/* An escape's class letter (d w s, upper case negated) into cls; 1 when c is not one. */
static int class_escape(char c, DiGNode *cls, bool *negate) {
    *negate = c == 'D' || c == 'W' || c == 'S';
    switch (c) {
    case 'd': case 'D': return add_ranges(cls, DIGIT, 1);
    case 'w': case 'W': return add_ranges(cls, WORD, 4);
    case 's': case 'S': return add_ranges(cls, SPACE, 2);
    }
    return 1;
}

static int next_cp(R *r, uint32_t *cp) {
    int len = di_grammar_utf8_decode((const uint8_t *)r->s + r->i, r->n - r->i, cp);
    if (!len) return rerr(r, "invalid UTF-8");
    r->i += (size_t)len;
    return 0;
}

/* A single-character escape (after the backslash): its code point, or an error. */
static int char_escape(R *r, uint32_t *cp) {
    char c = r->s[r->i++];
    int digits = 0;
    switch (c) {
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    case '0': *cp = 0; return 0;
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
            r->i--;
            return rerr(r, c == 'b' || c == 'B' ? "word boundaries (\\b \\B) are not supported"
                           : c >= '1' && c <= '9' ? "backreferences are not supported"
                                                  : "unsupported escape");
        }
        if ((unsigned char)c >= 0x80) return r->i--, rerr(r, "escaped non-ASCII character");
        *cp = (uint8_t)c;
        return 0;
    }
    uint32_t v = 0;
    for (int k = 0; k < digits; k++) {
        int h = r->i < r->n ? hexv(r->s[r->i]) : -1;
        if (h < 0) return rerr(r, "bad hex digit in escape");
        v = v << 4 | (uint32_t)h;
        r->i++;
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return rerr(r, "escape is not a Unicode scalar value");
    *cp = v;
    return 0;
}

/* One class member: a code point, or (for \d etc.) a set merged into cls; *is_set tells which. */
static int class_item(R *r, DiGNode *cls, uint32_t *cp, bool *is_set) {
    *is_set = false;
    if (r->s[r->i] != '\\') return next_cp(r, cp);
    if (++r->i >= r->n) return rerr(r, "unterminated escape");
    bool neg;
    DiGNode *sub = di_gnode_new(DI_GN_CLASS);
    if (!sub) return -1;
    int k = class_escape(r->s[r->i], sub, &neg);
    if (k == 1) {
        di_gnode_free(sub);
        return char_escape(r, cp);
    }
    r->i++;
    *is_set = true;
    if (k != 0 || (neg && di_gnode_class_negate(sub) != 0) || add_ranges(cls, sub->ranges, sub->n_ranges) != 0) k = -1;
    di_gnode_free(sub);
    return k;
}

static DiGNode *parse_class(R *r) {
    r->i++; /* [ */
    bool neg = r->i < r->n && r->s[r->i] == '^';
    if (neg) r->i++;
    DiGNode *cls = di_gnode_new(DI_GN_CLASS);
    bool first = true;
    while (cls && r->i < r->n && (r->s[r->i] != ']' || first)) {
        first = false;
        if (r->s[r->i] == '[' && r->i + 1 < r->n && r->s[r->i + 1] == ':') {
            rerr(r, "POSIX classes [:name:] are not supported");
            goto fail;
        }
        uint32_t lo, hi;
        bool set;
        if (class_item(r, cls, &lo, &set) != 0) goto fail;
        if (set) continue;
        hi = lo;
        if (r->i + 1 < r->n && r->s[r->i] == '-' && r->s[r->i + 1] != ']') {
            r->i++;
            bool set2;
            if (class_item(r, cls, &hi, &set2) != 0) goto fail;
            if (set2) {
                rerr(r, "a class escape cannot end a range");
                goto fail;
            }
            if (hi < lo) {
                rerr(r, "character class range is reversed");
                goto fail;
            }
        }
        if (di_gnode_class_add(cls, lo, hi) != 0) goto fail;
    }
    if (!cls) return NULL;
    if (r->i >= r->n) {
        rerr(r, "unterminated character class");
        goto fail;
    }
    r->i++;
    if (neg && di_gnode_class_negate(cls) != 0) goto fail;
    return cls;
fail:
    di_gnode_free(cls);
    return NULL;
}

static DiGNode *parse_alt(R *r);

static DiGNode *parse_group(R *r) {
    r->i++; /* ( */
    if (++r->depth > DI_GRAMMAR_MAX_DEPTH) return rerr(r, "groups nested too deeply"), NULL;
    if (r->i < r->n && r->s[r->i] == '?') {
        if (r->i + 1 < r->n && r->s[r->i + 1] == ':') r->i += 2;
        else if (r->i + 2 < r->n && r->s[r->i + 1] == 'P' && r->s[r->i + 2] == '<') {
            r->i += 3;
            while (r->i < r->n && r->s[r->i] != '>') r->i++;
            if (r->i >= r->n) return rerr(r, "unterminated group name"), NULL;
            r->i++;
        } else return rerr(r, "lookaround, inline flags and (?...) extensions other than (?: and (?P< are not supported"), NULL;
    }
    DiGNode *n = parse_alt(r);
    if (!n) return NULL;
    if (r->i >= r->n || r->s[r->i] != ')') return di_gnode_free(n), rerr(r, "missing ')'"), NULL;
    r->i++;
    r->depth--;
    return n;
}

static int read_num(R *r, int32_t *out) {
    int64_t v = 0;
    size_t start = r->i;
    while (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9') {
        v = v * 10 + (r->s[r->i++] - '0');
        if (v > DI_GRAMMAR_MAX_REPEAT) return rerr(r, "repetition count too large (at most 10000)");
    }
    *out = r->i > start ? (int32_t)v : -2; /* -2: no digits */
    return 0;
}

/* {m}, {m,}, {m,n}, {,n}; 1 when the brace is not a quantifier (Python treats it as a literal). */
static int parse_braces(R *r, int32_t *mn, int32_t *mx) {
    size_t save = r->i;
    r->i++;
    if (read_num(r, mn) != 0) return -1;
    *mx = *mn;
    if (r->i < r->n && r->s[r->i] == ',') {
        r->i++;
        if (read_num(r, mx) != 0) return -1;
        if (*mx == -2) *mx = -1;
        if (*mn == -2) *mn = 0;
    }
    if (*mn == -2 || r->i >= r->n || r->s[r->i] != '}') {
        r->i = save;
        return 1;
    }
    r->i++;
    if (*mx >= 0 && *mx < *mn) return rerr(r, "repetition {m,n} with n < m");
    return 0;
}

static DiGNode *parse_atom(R *r) {
    char c = r->s[r->i];
    if (c == '(') return parse_group(r);
    if (c == '[') return parse_class(r);
    if (c == '.') {
        r->i++;
        DiGNode *cls = di_gnode_new(DI_GN_CLASS);
        if (cls && (di_gnode_class_add(cls, '\n', '\n') != 0 || di_gnode_class_negate(cls) != 0))
            return di_gnode_free(cls), NULL;
        return cls;
    }
    if (c == '^' || c == '$') return rerr(r, "anchors are only supported at the start (^) and end ($)"), NULL;
    if (c == '*' || c == '+' || c == '?') return rerr(r, "nothing to repeat"), NULL;
    uint32_t cp;
    if (c == '\\') {
        if (++r->i >= r->n) return rerr(r, "trailing backslash"), NULL;
        DiGNode *cls = di_gnode_new(DI_GN_CLASS);
        bool neg;
        if (!cls) return NULL;
        int k = class_escape(r->s[r->i], cls, &neg);
        if (k == 0) {
            r->i++;
            if (neg && di_gnode_class_negate(cls) != 0) return di_gnode_free(cls), NULL;
            return cls;
        }
        di_gnode_free(cls);
        if (k < 0 || char_escape(r, &cp) != 0) return NULL;
    } else if (next_cp(r, &cp) != 0) return NULL;
    DiGNode *cls = di_gnode_new(DI_GN_CLASS);
    if (cls && di_gnode_class_add(cls, cp, cp) != 0) return di_gnode_free(cls), NULL;
    return cls;
}

static DiGNode *parse_seq(R *r) {
    DiGNode *seq = di_gnode_new(DI_GN_SEQ);
    while (seq && r->i < r->n && r->s[r->i] != '|' && r->s[r->i] != ')') {
        if (r->s[r->i] == '$' && r->i + 1 == r->n) { /* trailing anchor: fullmatch already */
            r->i++;
            break;
        }
        DiGNode *a = parse_atom(r);
        while (a && r->i < r->n) {
            char c = r->s[r->i];
            int32_t mn, mx;
            if (c == '*') mn = 0, mx = -1;
            else if (c == '+') mn = 1, mx = -1;
            else if (c == '?') mn = 0, mx = 1;
            else if (c == '{') {
                int k = parse_braces(r, &mn, &mx);
                if (k < 0) return di_gnode_free(a), di_gnode_free(seq), NULL;
                if (k == 1) break;
                r->i--; /* the common r->i++ below steps over the '}' again */
            } else break;
            r->i++;
            if (r->i < r->n && (r->s[r->i] == '?' || r->s[r->i] == '+')) r->i++; /* lazy / possessive */
            if (a->kind == DI_GN_REPEAT) {
                di_gnode_free(a);
                di_gnode_free(seq);
                return rerr(r, "multiple repeat"), NULL;
            }
            a = di_gnode_repeat(a, mn, mx);
        }
        if (di_gnode_add(seq, a) != 0) return di_gnode_free(seq), NULL;
    }
    return seq;
}

static DiGNode *parse_alt(R *r) {
    DiGNode *alt = di_gnode_new(DI_GN_ALT);
    if (!alt || di_gnode_add(alt, parse_seq(r)) != 0) return di_gnode_free(alt), NULL;
    while (r->i < r->n && r->s[r->i] == '|') {
        r->i++;
        if (di_gnode_add(alt, parse_seq(r)) != 0) return di_gnode_free(alt), NULL;
    }
    return alt;
}

DiGNode *di_grammar_parse_regex(const char *re, size_t len) {
    if (!re) return di_errorf("regex: NULL pattern"), NULL;
    R r = {re, len, 0, 0};
    if (r.n && r.s[0] == '^') r.i++;
    DiGNode *n = parse_alt(&r);
    if (n && r.i < r.n) {
        di_gnode_free(n);
        return rerr(&r, "unbalanced ')'"), NULL;
    }
    return n;
}

DiGrammar *di_grammar_compile_regex(const char *re, size_t len) {
    DiGNode *n = di_grammar_parse_regex(re, len);
    if (!n) return NULL;
    DiGRules rules = {0};
    if (di_grules_add(&rules, "root", 4, n) != 0) return di_grules_free(&rules), NULL;
    return di_grammar_build(&rules, "root");
}
