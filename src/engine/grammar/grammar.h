/* grammar.h — structured outputs (spec engine-features.md §5): compiled grammars, the token
 * vocabulary they are matched against, and the per-request matcher that produces token masks.
 *
 * The pipeline: a front-end (EBNF in grammar_ebnf.c, regex in grammar_regex.c, JSON Schema in
 * grammar_json.c) builds an AST (DiGNode); grammar_ir.c compiles it into one byte-level NFA per
 * rule whose edges are byte ranges, epsilon moves or rule references, and refuses grammars the
 * matcher cannot run (undefined rules, left recursion, oversize expansions).  The matcher
 * (grammar_matcher.c) is a pushdown automaton over bytes: its state is a set of stacks, each
 * (NFA position, parent frame), with parent frames hash-consed so equal stacks compare equal.
 * grammar_vocab.c lays the tokenizer's exact token bytes out as a trie in DFS order and fills a
 * mask by walking it, skipping every subtree whose prefix the matcher rejects.
 *
 * Everything returns 0 / a pointer on success and -1 / NULL with a di_errorf message naming the
 * problem (the rule, the keyword, the offset) on failure. */
#ifndef DI_ENGINE_GRAMMAR_H
#define DI_ENGINE_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Limits that bound compile time and memory for hostile input (also what the fuzzers rely on). */
#define DI_GRAMMAR_MAX_POSITIONS (1u << 20) /* NFA positions in one compiled grammar */
#define DI_GRAMMAR_MAX_REPEAT 10000         /* largest m / n of {m,n} */
#define DI_GRAMMAR_MAX_DEPTH 200            /* nesting of groups / schemas in a front-end */
#define DI_GRAMMAR_MAX_STACKS 4096          /* live stacks of one matcher state (ambiguity bound) */

/* ---- AST shared by the front-ends ---- */

typedef enum {
    DI_GN_EMPTY,  /* matches "" */
    DI_GN_BYTES,  /* a literal byte string */
    DI_GN_CLASS,  /* one code point from a set of ranges (UTF-8 encoded), or one byte in byte mode */
    DI_GN_RULE,   /* a reference to a named rule */
    DI_GN_SEQ,    /* children one after another */
    DI_GN_ALT,    /* one of the children */
    DI_GN_REPEAT, /* child repeated min..max times (max < 0: unbounded) */
} DiGNodeKind;

typedef struct DiGNode DiGNode;
struct DiGNode {
    DiGNodeKind kind;
    int32_t min, max;      /* REPEAT */
    char *name;            /* RULE: the referenced name (resolved at compile time) */
    uint8_t *bytes;        /* BYTES */
    size_t n_bytes;
    uint32_t *ranges;      /* CLASS: pairs [lo, hi] of code points, inclusive */
    size_t n_ranges;
    DiGNode **kids;        /* SEQ, ALT, REPEAT (one kid) */
    size_t n_kids;
};

DiGNode *di_gnode_new(DiGNodeKind kind);
DiGNode *di_gnode_bytes(const void *bytes, size_t n);
DiGNode *di_gnode_rule(const char *name, size_t len);
DiGNode *di_gnode_repeat(DiGNode *kid, int32_t min, int32_t max);
/* Append kid to a SEQ / ALT (takes ownership even on failure). */
int di_gnode_add(DiGNode *parent, DiGNode *kid);
/* Add [lo, hi] to a CLASS. */
int di_gnode_class_add(DiGNode *cls, uint32_t lo, uint32_t hi);
/* Replace a CLASS's ranges by their complement within the Unicode scalar values. */
int di_gnode_class_negate(DiGNode *cls);
void di_gnode_free(DiGNode *node);
/* Decode one UTF-8 scalar value from s[0..left): its length, or 0 when invalid (overlong,
 * surrogate, truncated, beyond U+10FFFF).  Shared by the EBNF and regex front-ends. */
int di_grammar_utf8_decode(const uint8_t *s, size_t left, uint32_t *cp);

/* A grammar under construction: named rules, each an AST. */
typedef struct {
    char **names;
    DiGNode **bodies;
    size_t n, cap;
} DiGRules;

/* Add a rule (takes ownership of body); an error when the name is already defined. */
int di_grules_add(DiGRules *rules, const char *name, size_t len, DiGNode *body);
int di_grules_find(const DiGRules *rules, const char *name);
void di_grules_free(DiGRules *rules);
/* Substitute references to small non-recursive rules by their bodies (grammar_inline.c). */
int di_grules_inline(DiGRules *rules);

/* ---- compiled grammar (grammar_ir.c) ---- */

enum { DI_GE_BYTES = 0, DI_GE_RULE = 1, DI_GE_EPS = 2 };

typedef struct {
    uint8_t kind, lo, hi; /* BYTES: the byte range [lo, hi] */
    int32_t rule;         /* RULE: the referenced rule */
    int32_t target;
} DiGEdge;

typedef struct {
    uint32_t edge_off, n_edges;   /* byte and rule edges (epsilon edges are folded into eclose) */
    uint32_t eclose_off, n_eclose; /* positions reachable by epsilon moves, itself included */
    int32_t final_rule;           /* >= 0: this position ends that rule */
} DiGPos;

typedef struct DiGrammar {
    DiGPos *pos;
    size_t n_pos;
    DiGEdge *edges;
    size_t n_edges;
    uint32_t *eclose;
    size_t n_eclose;
    int32_t *rule_start;  /* per rule: its start position */
    char **rule_names;
    size_t n_rules;
    int32_t root;         /* the root rule */
    uint64_t hash;        /* of the source text and kind: the compile cache key */
} DiGrammar;

/* Compile rules (consumed, freed even on failure) with the given root rule name. */
DiGrammar *di_grammar_build(DiGRules *rules, const char *root);
void di_grammar_free(DiGrammar *g);

/* ---- front-ends ---- */

/* GBNF-style EBNF: `name ::= body`, "literals" with C-style escapes, [classes], (groups),
 * `* + ? {m} {m,} {m,n}`, `|`, `#` comments.  root names the start rule ("root" when NULL). */
DiGrammar *di_grammar_compile_ebnf(const char *text, size_t len, const char *root);
/* Parse EBNF text into rules (appended to *rules); what the JSON Schema front-end reuses. */
int di_grammar_parse_ebnf(const char *text, size_t len, DiGRules *rules);
/* A Python-`re`-compatible subset matched with fullmatch semantics. */
DiGrammar *di_grammar_compile_regex(const char *re, size_t len);
/* Parse a regex into an AST (for the JSON Schema `pattern` keyword). */
DiGNode *di_grammar_parse_regex(const char *re, size_t len);
/* JSON Schema (text) -> grammar; *ebnf_out (optional) receives the generated EBNF. */
DiGrammar *di_grammar_compile_json_schema(const char *schema, size_t len, char **ebnf_out);
/* DSML tool-call output (grammar_dsml.c): a JSON spec naming the dialect's tags and the tools ->
 * the calls a strict / required tool request may generate; *ebnf_out as above.  The marker is
 * DI_GRAMMAR_DSML_MARKER, matched as text: the server's text hooks leave its added token out
 * of is_special (serve/backend_text.c), so the model's own ｜DSML｜ id is allowed. */
#define DI_GRAMMAR_DSML_MARKER "\xef\xbd\x9c" "DSML" "\xef\xbd\x9c" /* ｜DSML｜ */
DiGrammar *di_grammar_compile_dsml(const char *spec, size_t len, char **ebnf_out);

/* ---- vocabulary (grammar_vocab.c) ---- */

/* The token trie is laid out in DFS order: node i has byte tbyte[i] at depth depth[i] (1 =
 * first byte), spans subtree[i] nodes (itself included) so a rejected prefix skips them all, and
 * ends the tokens tok_first[i], tok_next[tok_first[i]], ... (-1 ends the chain; several ids may
 * share the same bytes). */
typedef struct DiGrammarVocab {
    size_t n;
    uint32_t *off;
    uint8_t *bytes;
    uint8_t *special;
    int32_t *eos;
    size_t n_eos;
    size_t n_nodes, max_depth;
    uint8_t *tbyte;
    uint32_t *depth, *subtree;
    int32_t *tok_first, *tok_next;
} DiGrammarVocab;

/* n tokens; token i's bytes are bytes[off[i] .. off[i+1]); special[i] != 0 marks a special
 * (control) token that is never grammar text; eos: the ids that end the output (allowed only
 * where the grammar accepts).  Everything is copied.  The engine sits below the tokenizer
 * (README "Layout"), so the caller fills these from it: di_tokenizer_token_bytes for the bytes,
 * added tokens and unused ids as specials (tests/support/grammar_driver.c shows how). */
DiGrammarVocab *di_grammar_vocab_new(size_t n, const uint32_t *off, const uint8_t *bytes, const uint8_t *special,
                                     const int32_t *eos, size_t n_eos);
size_t di_grammar_vocab_size(const DiGrammarVocab *v);
void di_grammar_vocab_free(DiGrammarVocab *v);

/* ---- matcher (grammar_matcher.c) ---- */

typedef struct DiGrammarMatcher DiGrammarMatcher;

/* think_end: the id of `</think>` when the output starts in thinking mode (the grammar applies
 * only after it, §5.2 item 8), or -1.  g and v must outlive the matcher. */
DiGrammarMatcher *di_grammar_matcher_new(const DiGrammar *g, const DiGrammarVocab *v, int32_t think_end);
void di_grammar_matcher_free(DiGrammarMatcher *m);
/* Advance by one token; -1 (state unchanged) with an error when the grammar forbids it. */
int di_grammar_matcher_accept_token(DiGrammarMatcher *m, int32_t token);
/* Advance by raw bytes (no history entry); -1 (state unchanged) when rejected. */
int di_grammar_matcher_accept_bytes(DiGrammarMatcher *m, const uint8_t *bytes, size_t n);
/* mask: ceil(V/32) words, bit t set when token t is allowed next. */
int di_grammar_matcher_fill_mask(DiGrammarMatcher *m, uint32_t *mask);
/* True once an EOS token was accepted. */
bool di_grammar_matcher_is_terminated(const DiGrammarMatcher *m);
/* True when the bytes so far form a complete sentence (EOS would be allowed). */
bool di_grammar_matcher_can_end(const DiGrammarMatcher *m);
/* Undo the last k accepted tokens; an error when k exceeds the tokens accepted. */
int di_grammar_matcher_rollback(DiGrammarMatcher *m, size_t k);
size_t di_grammar_matcher_num_tokens(const DiGrammarMatcher *m);

/* ---- mask cache (grammar_cache.c) ---- */

/* Per NFA position, the tokens whose fate is decided inside the position's rule frame
 * (accepted / rejected without returning to the caller: "context-independent", §5.2 item 5)
 * and the few that reach the caller ("uncertain", checked against the live stacks).  Built
 * lazily, one position at a time, and shared by every matcher of the same grammar and
 * vocabulary (thread-safe).  Masks through the cache equal the full trie walk exactly. */
typedef struct DiGrammarMaskCache DiGrammarMaskCache;
DiGrammarMaskCache *di_grammar_mask_cache_new(const DiGrammar *g, const DiGrammarVocab *v);
void di_grammar_mask_cache_free(DiGrammarMaskCache *c);
/* Positions computed so far and their bytes (for benches and memory accounting). */
size_t di_grammar_mask_cache_positions(const DiGrammarMaskCache *c, size_t *bytes);
/* Use (or with NULL stop using) a cache for m's masks; it must be for m's grammar and
 * vocabulary and outlive m. */
int di_grammar_matcher_set_cache(DiGrammarMatcher *m, DiGrammarMaskCache *c);

/* ---- compiled-grammar store (grammar_store.c) ---- */

/* Compiled grammars cached by (kind, text) for one vocabulary, each with its mask cache; what
 * admission uses so that a repeated schema compiles once.  Reference-counted; least recently
 * used unreferenced entries go when more than max_entries are held. */
typedef enum { DI_GRAMMAR_EBNF = 0, DI_GRAMMAR_REGEX = 1, DI_GRAMMAR_JSON_SCHEMA = 2, DI_GRAMMAR_DSML = 3 } DiGrammarKind;
typedef struct {
    DiGrammar *grammar;
    DiGrammarMaskCache *cache;
} DiGrammarRef;
typedef struct DiGrammarStore DiGrammarStore;
DiGrammarStore *di_grammar_store_new(const DiGrammarVocab *v, size_t max_entries);
void di_grammar_store_free(DiGrammarStore *s);
/* The grammar of text (compiled now on a miss; the error names the problem on bad input);
 * hold it until di_grammar_store_release. */
int di_grammar_store_get(DiGrammarStore *s, DiGrammarKind kind, const char *text, size_t len, DiGrammarRef *out);
int di_grammar_store_release(DiGrammarStore *s, const DiGrammar *g);
size_t di_grammar_store_size(DiGrammarStore *s);

#endif
