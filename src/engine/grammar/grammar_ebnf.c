/* grammar_ebnf.c — the EBNF front-end: GBNF-style text (the syntax of llama.cpp and xgrammar)
 * parsed into named-rule ASTs for grammar_ir.c.
 *
 *   rule    ::= name "::=" alt
 *   alt     ::= seq ("|" seq)*
 *   seq     ::= (atom postfix*)*          postfix: * + ? {m} {m,} {m,n}
 *   atom    ::= "lit" | 'lit' | [class] | [^class] | name | "(" alt ")"
 *
 * Newlines carry no meaning: a rule body ends where the next `name ::=` begins, so bodies may
 * span lines.  Escapes: \n \r \t \\ \" \' \] \- \xHH \uHHHH \UHHHHHHHH.  Errors name the
 * line and column and what was expected there. */
#include "engine/grammar/grammar.h"

#include "base/error.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *s;
    size_t n, i;
    int depth;
} P;

static int perr(const P *p, const char *what) {
    size_t line = 1, col = 1;
    for (size_t k = 0; k < p->i && k < p->n; k++) {
        if (p->s[k] == '\n') line++, col = 1;
        else col++;
    }
    return di_errorf("EBNF %zu:%zu: %s", line, col, what);
}

static void skip_ws(P *p) {
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') p->i++;
        else if (c == '#')
            while (p->i < p->n && p->s[p->i] != '\n') p->i++;
        else break;
    }
}

static bool is_name_char(char c, bool first) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
           (!first && ((c >= '0' && c <= '9') || c == '-' || c == '.'));
}

static size_t name_len(const P *p, size_t at) {
    size_t k = at;
    while (k < p->n && is_name_char(p->s[k], k == at)) k++;
    return k - at;
}

/* Is there `name ::=` at the cursor (the start of the next rule)? */
static bool at_rule_start(const P *p) {
    size_t len = name_len(p, p->i);
    if (!len) return false;
    P q = *p;
    q.i += len;
    skip_ws(&q);
    return q.n - q.i >= 3 && memcmp(q.s + q.i, "::=", 3) == 0;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int utf8_next(P *p, uint32_t *cp) {
    int len = di_grammar_utf8_decode((const uint8_t *)p->s + p->i, p->n - p->i, cp);
    if (!len) return perr(p, "invalid UTF-8 in the grammar text");
    p->i += (size_t)len;
    return 0;
}

/* One character of a literal or class: an escape or a UTF-8 code point. */
static int read_char(P *p, uint32_t *cp) {
    if (p->i >= p->n) return perr(p, "unterminated literal or class");
    if (p->s[p->i] != '\\') return utf8_next(p, cp);
    p->i++;
    if (p->i >= p->n) return perr(p, "unterminated escape");
    char c = p->s[p->i++];
    int digits = 0;
    switch (c) {
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 't': *cp = '\t'; return 0;
    case '0': *cp = 0; return 0;
    case '\\': case '"': case '\'': case ']': case '[': case '-': case '^': case '/': *cp = (uint8_t)c; return 0;
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    default: p->i--; return perr(p, "unknown escape (known: \\n \\r \\t \\\\ \\\" \\' \\] \\- \\xHH \\uHHHH)");
    }
    uint32_t v = 0;
    for (int k = 0; k < digits; k++) {
        int h = p->i < p->n ? hexval(p->s[p->i]) : -1;
        if (h < 0) return perr(p, "bad hex digit in escape");
        v = v << 4 | (uint32_t)h;
        p->i++;
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return perr(p, "escape is not a Unicode scalar value");
    *cp = v;
    return 0;
}

static size_t utf8_put(uint32_t cp, uint8_t *out) {
    if (cp < 0x80) return out[0] = (uint8_t)cp, 1;
    if (cp < 0x800) return out[0] = (uint8_t)(0xC0 | cp >> 6), out[1] = (uint8_t)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | cp >> 12);
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | cp >> 18);
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

static DiGNode *parse_literal(P *p) {
    char quote = p->s[p->i++];
    size_t cap = 64, len = 0;
    uint8_t *buf = malloc(cap);
    if (!buf) return di_errorf("out of memory for an EBNF literal"), NULL;
    while (p->i < p->n && p->s[p->i] != quote) {
        uint32_t cp;
        if (read_char(p, &cp) != 0) return free(buf), NULL;
        if (len + 4 > cap) {
            uint8_t *b2 = realloc(buf, cap *= 2);
            if (!b2) return free(buf), di_errorf("out of memory for an EBNF literal"), NULL;
            buf = b2;
        }
        len += utf8_put(cp, buf + len);
    }
    if (p->i >= p->n) return free(buf), perr(p, "unterminated string literal"), NULL;
    p->i++;
    DiGNode *n = di_gnode_bytes(buf, len);
    free(buf);
    return n;
}

static DiGNode *parse_class(P *p) {
    p->i++; /* [ */
    bool neg = p->i < p->n && p->s[p->i] == '^';
    if (neg) p->i++;
    DiGNode *cls = di_gnode_new(DI_GN_CLASS);
    if (!cls) return NULL;
    while (p->i < p->n && p->s[p->i] != ']') {
        uint32_t lo, hi;
        if (read_char(p, &lo) != 0) goto fail;
        hi = lo;
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            if (read_char(p, &hi) != 0) goto fail;
            if (hi < lo) {
                perr(p, "character class range is reversed");
                goto fail;
            }
        }
        if (di_gnode_class_add(cls, lo, hi) != 0) goto fail;
    }
    if (p->i >= p->n) {
        perr(p, "unterminated character class");
        goto fail;
    }
    p->i++;
    if (neg && di_gnode_class_negate(cls) != 0) goto fail;
    return cls;
fail:
    di_gnode_free(cls);
    return NULL;
}

static DiGNode *parse_alt(P *p);

static int read_int(P *p, int32_t *out) {
    skip_ws(p);
    if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return perr(p, "expected a number in {m,n}");
    int64_t v = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        v = v * 10 + (p->s[p->i++] - '0');
        if (v > DI_GRAMMAR_MAX_REPEAT) return perr(p, "repetition count too large (at most 10000)");
    }
    *out = (int32_t)v;
    skip_ws(p);
    return 0;
}

static DiGNode *parse_postfix(P *p, DiGNode *atom) {
    for (int count = 0;; count++) {
        skip_ws(p);
        if (count > 8) return di_gnode_free(atom), perr(p, "more than 8 repetition operators on one item"), NULL;
        if (p->i >= p->n) return atom;
        char c = p->s[p->i];
        int32_t mn, mx;
        if (c == '*') mn = 0, mx = -1;
        else if (c == '+') mn = 1, mx = -1;
        else if (c == '?') mn = 0, mx = 1;
        else if (c == '{') {
            p->i++;
            if (read_int(p, &mn) != 0) return di_gnode_free(atom), NULL;
            mx = mn;
            if (p->i < p->n && p->s[p->i] == ',') {
                p->i++;
                skip_ws(p);
                mx = -1;
                if (p->i < p->n && p->s[p->i] != '}' && read_int(p, &mx) != 0) return di_gnode_free(atom), NULL;
            }
            if (p->i >= p->n || p->s[p->i] != '}') return di_gnode_free(atom), perr(p, "expected '}'"), NULL;
            if (mx >= 0 && mx < mn) return di_gnode_free(atom), perr(p, "repetition {m,n} with n < m"), NULL;
        } else return atom;
        p->i++;
        atom = di_gnode_repeat(atom, mn, mx);
        if (!atom) return NULL;
    }
}

static DiGNode *parse_atom(P *p) {
    char c = p->s[p->i];
    if (c == '"' || c == '\'') return parse_literal(p);
    if (c == '[') return parse_class(p);
    if (c == '(') {
        if (++p->depth > DI_GRAMMAR_MAX_DEPTH) return perr(p, "groups nested too deeply"), NULL;
        p->i++;
        DiGNode *n = parse_alt(p);
        if (!n) return NULL;
        skip_ws(p);
        if (p->i >= p->n || p->s[p->i] != ')') return di_gnode_free(n), perr(p, "expected ')'"), NULL;
        p->i++;
        p->depth--;
        return n;
    }
    size_t len = name_len(p, p->i);
    if (len) {
        DiGNode *n = di_gnode_rule(p->s + p->i, len);
        p->i += len;
        return n;
    }
    return perr(p, "expected a literal, a [class], a rule name or '('"), NULL;
}

static DiGNode *parse_seq(P *p) {
    DiGNode *seq = di_gnode_new(DI_GN_SEQ);
    for (;;) {
        skip_ws(p);
        if (!seq || p->i >= p->n) return seq;
        char c = p->s[p->i];
        if (c == '|' || c == ')' || at_rule_start(p)) return seq;
        DiGNode *a = parse_atom(p);
        if (a) a = parse_postfix(p, a);
        if (di_gnode_add(seq, a) != 0) return di_gnode_free(seq), NULL;
    }
}

static DiGNode *parse_alt(P *p) {
    DiGNode *alt = di_gnode_new(DI_GN_ALT);
    if (!alt || di_gnode_add(alt, parse_seq(p)) != 0) return di_gnode_free(alt), NULL;
    for (;;) {
        skip_ws(p);
        if (p->i >= p->n || p->s[p->i] != '|') return alt;
        p->i++;
        if (di_gnode_add(alt, parse_seq(p)) != 0) return di_gnode_free(alt), NULL;
    }
}

int di_grammar_parse_ebnf(const char *text, size_t len, DiGRules *rules) {
    if (!text || !rules) return di_errorf("di_grammar_parse_ebnf: NULL argument");
    P p = {text, len, 0, 0};
    for (;;) {
        skip_ws(&p);
        if (p.i >= p.n) break;
        size_t nl = name_len(&p, p.i);
        if (!nl) return perr(&p, "expected a rule name");
        size_t name_at = p.i;
        p.i += nl;
        skip_ws(&p);
        if (p.n - p.i < 3 || memcmp(p.s + p.i, "::=", 3) != 0) return perr(&p, "expected '::='");
        p.i += 3;
        DiGNode *body = parse_alt(&p);
        if (!body) return -1;
        skip_ws(&p);
        if (p.i < p.n && !at_rule_start(&p)) {
            di_gnode_free(body);
            return perr(&p, p.s[p.i] == ')' ? "unbalanced ')'" : "expected the next rule");
        }
        if (di_grules_add(rules, text + name_at, nl, body) != 0) return -1;
    }
    return 0;
}

DiGrammar *di_grammar_compile_ebnf(const char *text, size_t len, const char *root) {
    DiGRules rules = {0};
    if (di_grammar_parse_ebnf(text, len, &rules) != 0) {
        di_grules_free(&rules);
        return NULL;
    }
    return di_grammar_build(&rules, root);
}
