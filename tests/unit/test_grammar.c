/* test_grammar.c — the grammar engine (src/engine/grammar): EBNF parsing and its errors, string
 * acceptance against hand-derived cases, and the token mask against brute force (every token's
 * bytes run through the matcher one by one) on a synthetic vocabulary whose multi-byte tokens
 * straddle grammar boundaries, plus rollback restoring masks and the thinking-mode gate. */
#include "test.h"

#include "base/error.h"
#include "engine/grammar/grammar.h"
#include "test_grammar_helpers.h"

static DiGrammar *ebnf(const char *s) { return di_grammar_compile_ebnf(s, strlen(s), NULL); }

static int accepts(const DiGrammar *g, const char *s) { return grammar_accepts(g, s); }

static void check_error(const char *grammar, const char *needle) {
    di_error_clear();
    DiGrammar *g = ebnf(grammar);
    CHECK_MSG(g == NULL, "grammar %s compiled", grammar);
    CHECK_MSG(strstr(di_error_message(), needle) != NULL, "error '%s' lacks '%s'", di_error_message(), needle);
    di_grammar_free(g);
}

TEST(ebnf_errors_name_the_problem) {
    check_error("root ::= foo", "rule 'foo' is referenced but not defined");
    check_error("root ::= root \"a\" | \"b\"", "rule 'root' is left-recursive");
    check_error("root ::= a\na ::= \"x\"? root", "left-recursive");
    check_error("root ::= \"abc", "unterminated string literal");
    check_error("root ::= [a-", "unterminated");
    check_error("root ::= \"a\"{3,2}", "n < m");
    check_error("root ::= \"a\"{99999}", "too large");
    check_error("x ::= \"a\"", "no rule named 'root'");
    check_error("root ::= \"a\"\nroot ::= \"b\"", "defined twice");
    check_error("root ::= (\"a\"", "expected ')'");
    check_error("root ::= \"\\q\"", "unknown escape");
    check_error("root ::= [z-a]", "reversed");
    check_error("root ::= \"a\"*??*??*??*", "more than 8 repetition operators");
    check_error("root ::= \"a\"{10000} \"b\"{10000} (\"cdefghijklmnopqrstuvwxyz\"{10000}){10000}", "");
}

TEST(ebnf_accepts_hand_derived_strings) {
    DiGrammar *g = ebnf("root ::= \"(\" list? \")\"\n"
                        "list ::= item (\",\" item)*   # comma separated\n"
                        "item ::= [0-9]+ | root\n");
    CHECK(g != NULL);
    if (!g) return;
    CHECK(accepts(g, "()"));
    CHECK(accepts(g, "(1,22,(3,()))"));
    CHECK(!accepts(g, "(1,)"));
    CHECK(!accepts(g, "(1"));
    CHECK(!accepts(g, ""));
    di_grammar_free(g);
    g = ebnf("root ::= [^\"\\\\]{2,3} \"é\" [α-ω]? \"\\u00e9\\x41\"");
    CHECK(g != NULL);
    if (!g) return;
    CHECK(accepts(g, "ab\xc3\xa9\xc3\xa9" "A"));
    CHECK(accepts(g, "\xe4\xb8\xad\xf0\x9f\x98\x80z\xc3\xa9\xce\xb2\xc3\xa9" "A")); /* 中😀z é β éA */
    CHECK(!accepts(g, "a\xc3\xa9\xc3\xa9" "A"));      /* too few */
    CHECK(!accepts(g, "a\"b\xc3\xa9\xc3\xa9" "A"));   /* excluded char */
    CHECK(!accepts(g, "ab\xc3\xa9\xc3\xa9" "B"));
    di_grammar_free(g);
    /* nullable repeated items (rewritten to B'{0,n}): the language is unchanged */
    g = ebnf("root ::= (\"a\" | ){2,3} ([bc]{0,2}){2} (\"\")* \"x\"");
    CHECK(g != NULL);
    if (!g) return;
    CHECK(accepts(g, "x"));
    CHECK(accepts(g, "aaax"));
    CHECK(!accepts(g, "aaaax"));
    CHECK(accepts(g, "abcbcx"));
    CHECK(accepts(g, "aabbx"));
    CHECK(!accepts(g, "bcbcbx"));
    di_grammar_free(g);
    g = ebnf("root ::= a{2} b{1,} c{0,2}\na ::= \"a\"\nb ::= \"b\" | \"\"\nc ::= \"c\"");
    CHECK(g != NULL);
    if (!g) return;
    CHECK(accepts(g, "aa"));
    CHECK(accepts(g, "aabbbcc"));
    CHECK(!accepts(g, "aabccc"));
    CHECK(!accepts(g, "a"));
    di_grammar_free(g);
}

/* ---- synthetic vocabulary ---- */

static const char *const SYN_TOKENS[] = {
    "{", "}", "[", "]", ",", ":", "\"", " ", "\n", "a", "b", "c", "1", "2", "0", "-", ".", "e", "t", "r", "u",
    "n", "l", "f", "s", "x", "\\", "{\"", "\":", "\",\"", "\"}", "},", "ab", "abc", "true", "tr", "ue", "null",
    "12", "0.", ".5", "e-", "1e", "\":\"", "\": ", ", \"", "[\"", "\"]", "\xc3", "\xa9", "\xc3\xa9", "\xc3\xa9\"",
    "\xe4\xb8", "\xad", "\xe4\xb8\xad", "a\xc3", "\\\"", "\\n", "\\u00", "e9", "((", "(", ")", "))", "x)", "(x",
};
#define SYN_N (sizeof SYN_TOKENS / sizeof *SYN_TOKENS)
/* plus three specials: EOS, </think>, another control token */

static DiGrammarVocab *syn_vocab(int32_t *eos, int32_t *think) {
    size_t n = SYN_N + 3;
    uint32_t off[SYN_N + 4];
    uint8_t bytes[1024], special[SYN_N + 3] = {0};
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        off[i] = (uint32_t)at;
        const char *s = i < SYN_N ? SYN_TOKENS[i] : i == SYN_N ? "<eos>" : i == SYN_N + 1 ? "</think>" : "<|ctl|>";
        memcpy(bytes + at, s, strlen(s));
        at += strlen(s);
        if (i >= SYN_N) special[i] = 1;
    }
    off[n] = (uint32_t)at;
    *eos = (int32_t)SYN_N;
    *think = (int32_t)SYN_N + 1;
    return di_grammar_vocab_new(n, off, bytes, special, eos, 1);
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* The allowed set by brute force: accept each token, then roll it back. */
static void brute_mask(DiGrammarMatcher *m, size_t n, uint32_t *mask) {
    memset(mask, 0, (n + 31) / 32 * 4);
    for (size_t t = 0; t < n; t++)
        if (di_grammar_matcher_accept_token(m, (int32_t)t) == 0) {
            mask[t >> 5] |= 1u << (t & 31);
            di_grammar_matcher_rollback(m, 1);
        }
}

/* Random walks: at every step the trie mask equals brute force; at the end, rolling back k
 * tokens gives back the mask seen k steps earlier.  Returns the number of steps checked. */
static int walk_check(const DiGrammar *g, const DiGrammarVocab *v, int32_t think, uint64_t seed, int steps) {
    size_t n = di_grammar_vocab_size(v), words = (n + 31) / 32;
    DiGrammarMatcher *m = di_grammar_matcher_new(g, v, think);
    CHECK(m != NULL);
    if (!m) return 0;
    uint32_t *masks = calloc((size_t)(steps + 1) * words, 4), *bf = calloc(words, 4);
    DiGrammarMaskCache *cache = di_grammar_mask_cache_new(g, v);
    CHECK(cache != NULL);
    int done = 0;
    for (; done <= steps; done++) {
        uint32_t *mk = masks + (size_t)done * words;
        CHECK(di_grammar_matcher_fill_mask(m, mk) == 0);
        brute_mask(m, n, bf);
        CHECK_MSG(memcmp(mk, bf, words * 4) == 0, "seed %llu step %d: mask differs from brute force",
                  (unsigned long long)seed, done);
        CHECK(di_grammar_matcher_set_cache(m, cache) == 0); /* the cached mask is the same */
        CHECK(di_grammar_matcher_fill_mask(m, bf) == 0);
        CHECK(di_grammar_matcher_set_cache(m, NULL) == 0);
        CHECK_MSG(memcmp(mk, bf, words * 4) == 0, "seed %llu step %d: cached mask differs", (unsigned long long)seed, done);
        size_t allowed[256], na = 0;
        for (size_t t = 0; t < n && na < 256; t++)
            if (mk[t >> 5] >> (t & 31) & 1) allowed[na++] = t;
        if (na == 0 || done == steps) break;
        size_t pick = allowed[rng_next(&seed) % na];
        CHECK(di_grammar_matcher_accept_token(m, (int32_t)pick) == 0);
        if (di_grammar_matcher_is_terminated(m)) {
            CHECK(di_grammar_matcher_fill_mask(m, bf) == 0);
            for (size_t w = 0; w < words; w++) CHECK_EQ_INT(bf[w], 0); /* nothing after EOS */
            done++;
            break;
        }
    }
    for (int k = 1; k <= done && k <= 6; k++) { /* rollback restores earlier masks */
        CHECK(di_grammar_matcher_rollback(m, 1) == 0);
        CHECK(di_grammar_matcher_fill_mask(m, bf) == 0);
        CHECK_MSG(memcmp(bf, masks + (size_t)(done - k) * words, words * 4) == 0, "rollback %d differs", k);
    }
    CHECK(di_grammar_matcher_rollback(m, 1000) != 0);
    CHECK(strstr(di_error_message(), "cannot roll back") != NULL);
    free(masks);
    free(bf);
    di_grammar_matcher_free(m);
    di_grammar_mask_cache_free(cache);
    return done;
}

static const char *const JSONISH =
    "root ::= value\n"
    "value ::= object | array | string | number | \"true\" | \"null\"\n"
    "object ::= \"{\" ws (member (\",\" ws member)*)? \"}\"\n"
    "member ::= string \":\" ws value ws\n"
    "array ::= \"[\" (value (\", \" value)*)? \"]\"\n"
    "string ::= \"\\\"\" ([^\"\\\\] | \"\\\\\" [\"\\\\nu0-9a-f])* \"\\\"\"\n"
    "number ::= \"-\"? [0-9]+ (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)?\n"
    "ws ::= [ \\n]?\n";

TEST(mask_equals_brute_force_on_synthetic_vocab) {
    int32_t eos, think;
    DiGrammarVocab *v = syn_vocab(&eos, &think);
    CHECK(v != NULL);
    const char *grammars[] = {
        JSONISH,
        "root ::= \"(\" root* \")\" | \"x\"",
        "root ::= [\\u00e9\\u4e2d]+ \"\\\"\" | \"ab\" \"c\"?",
        "root ::= (\"a\" | \"ab\") (\"bc\" | \"c\")? \"1\"{0,3}", /* ambiguous */
        "root ::= (\"a\" | ){3,40} ([bc]{0,2}){2,5} (\"x\"? | \"(\")+ \"1\"", /* nullable repeats */
    };
    for (size_t gi = 0; v && gi < sizeof grammars / sizeof *grammars; gi++) {
        DiGrammar *g = ebnf(grammars[gi]);
        CHECK_MSG(g != NULL, "grammar %zu: %s", gi, di_error_message());
        if (!g) continue;
        int total = 0;
        for (uint64_t seed = 1; seed <= 12; seed++) total += walk_check(g, v, -1, seed * 7919 + gi, 30);
        CHECK(total > 12);
        di_grammar_free(g);
    }
    di_grammar_vocab_free(v);
}

TEST(eos_only_when_accepting_and_specials_never_text) {
    int32_t eos, think;
    DiGrammarVocab *v = syn_vocab(&eos, &think);
    DiGrammar *g = ebnf("root ::= \"ab\" \"c\"?");
    DiGrammarMatcher *m = di_grammar_matcher_new(g, v, -1);
    CHECK(m != NULL);
    if (!m) return;
    CHECK(di_grammar_matcher_accept_token(m, eos) != 0);
    CHECK(strstr(di_error_message(), "before the grammar is complete") != NULL);
    CHECK(di_grammar_matcher_accept_token(m, eos + 2) != 0);
    CHECK(strstr(di_error_message(), "special token") != NULL);
    CHECK(di_grammar_matcher_accept_token(m, 9) == 0);  /* "a" */
    CHECK(di_grammar_matcher_accept_token(m, 10) == 0); /* "b" */
    CHECK(di_grammar_matcher_can_end(m));
    CHECK(di_grammar_matcher_accept_token(m, eos) == 0);
    CHECK(di_grammar_matcher_is_terminated(m));
    CHECK(di_grammar_matcher_accept_token(m, 11) != 0);
    di_grammar_matcher_free(m);
    di_grammar_free(g);
    di_grammar_vocab_free(v);
}

TEST(thinking_mode_applies_grammar_after_think_end) {
    int32_t eos, think;
    DiGrammarVocab *v = syn_vocab(&eos, &think);
    DiGrammar *g = ebnf("root ::= \"ab\"");
    DiGrammarMatcher *m = di_grammar_matcher_new(g, v, think);
    size_t words = (di_grammar_vocab_size(v) + 31) / 32;
    uint32_t mask[8];
    CHECK(m != NULL && words <= 8);
    if (!m) return;
    CHECK(di_grammar_matcher_fill_mask(m, mask) == 0);
    CHECK(mask[0] == 0xFFFFFFFFu);                      /* free text while thinking */
    CHECK(di_grammar_matcher_accept_token(m, 25) == 0); /* "x": not grammar text, fine here */
    CHECK(di_grammar_matcher_accept_token(m, think) == 0);
    CHECK(di_grammar_matcher_accept_token(m, 25) != 0); /* now the grammar applies */
    CHECK(walk_check(g, v, think, 5, 6) >= 1);
    di_grammar_matcher_free(m);
    di_grammar_free(g);
    di_grammar_vocab_free(v);
}

TEST(store_compiles_once_and_evicts_unused) {
    int32_t eos, think;
    DiGrammarVocab *v = syn_vocab(&eos, &think);
    DiGrammarStore *s = di_grammar_store_new(v, 2);
    DiGrammarRef a, a2, b, c;
    const char *schema = "{\"type\":\"string\"}", *re = "ab+";
    CHECK(s != NULL);
    if (!s) return;
    CHECK(di_grammar_store_get(s, DI_GRAMMAR_JSON_SCHEMA, schema, strlen(schema), &a) == 0);
    CHECK(di_grammar_store_get(s, DI_GRAMMAR_JSON_SCHEMA, schema, strlen(schema), &a2) == 0);
    CHECK(a.grammar == a2.grammar && a.cache == a2.cache); /* compiled once */
    CHECK(di_grammar_store_get(s, DI_GRAMMAR_REGEX, schema, strlen(schema), &b) == 0);
    CHECK(b.grammar != a.grammar); /* same text, other kind: another grammar */
    CHECK(di_grammar_store_get(s, DI_GRAMMAR_REGEX, re, strlen(re), &c) == 0);
    CHECK_EQ_INT(di_grammar_store_size(s), 3); /* all held: over the limit until released */
    CHECK(di_grammar_store_release(s, b.grammar) == 0);
    CHECK_EQ_INT(di_grammar_store_size(s), 2); /* b was the only unreferenced one */
    CHECK(di_grammar_store_release(s, b.grammar) != 0);
    DiGrammarMatcher *m = di_grammar_matcher_new(c.grammar, v, -1); /* what admission does */
    CHECK(m && di_grammar_matcher_set_cache(m, c.cache) == 0);
    CHECK(m && di_grammar_matcher_set_cache(m, a.cache) != 0); /* another grammar's cache */
    di_grammar_matcher_free(m);
    CHECK(di_grammar_store_get(s, DI_GRAMMAR_EBNF, "root ::= nope", 13, &b) != 0);
    CHECK(strstr(di_error_message(), "rule 'nope'") != NULL);
    CHECK(di_grammar_store_release(s, a.grammar) == 0 && di_grammar_store_release(s, a2.grammar) == 0);
    CHECK(di_grammar_store_release(s, c.grammar) == 0);
    di_grammar_store_free(s);
    di_grammar_vocab_free(v);
}

/* A grammar whose only sentence is "": the state has no stacks at all (fuzz_grammar_regex found
 * memcpy from a NULL state under UBSan on the empty pattern). */
TEST(empty_language_allows_only_eos) {
    int32_t eos, think;
    DiGrammarVocab *v = syn_vocab(&eos, &think);
    DiGrammar *gs[2] = {di_grammar_compile_regex("", 0), ebnf("root ::= # nothing but a comment\n")};
    for (int i = 0; i < 2; i++) {
        CHECK(gs[i] != NULL);
        CHECK(walk_check(gs[i], v, -1, 3, 3) >= 1); /* masks, cache, brute force, rollback */
        DiGrammarMatcher *m = di_grammar_matcher_new(gs[i], v, -1);
        uint32_t mask[4];
        CHECK(m && di_grammar_matcher_fill_mask(m, mask) == 0);
        CHECK(mask[eos >> 5] >> (eos & 31) & 1);
        CHECK(m && di_grammar_matcher_accept_token(m, 9) != 0);
        CHECK(m && di_grammar_matcher_accept_token(m, eos) == 0 && di_grammar_matcher_rollback(m, 1) == 0);
        di_grammar_matcher_free(m);
        di_grammar_free(gs[i]);
    }
    di_grammar_vocab_free(v);
}

/* One step whose closure visits thousands of (position, frame) pairs: the visited set must grow
 * mid-closure (it filled up and probed forever: a fuzz_grammar_regex timeout). */
TEST(wide_closure_grows_the_visited_set) {
    const char *re = "(|a|ab){0,400}c";
    DiGrammar *g = di_grammar_compile_regex(re, strlen(re));
    CHECK(g != NULL);
    if (!g) return;
    CHECK(accepts(g, "aababc"));
    CHECK(!accepts(g, "abba"));
    di_grammar_free(g);
}

TEST(bad_arguments_are_refused) {
    uint32_t off[2] = {0, 1};
    CHECK(di_grammar_vocab_new(0, off, NULL, NULL, NULL, 0) == NULL);
    int32_t bad_eos = 5;
    CHECK(di_grammar_vocab_new(1, off, (const uint8_t *)"a", NULL, &bad_eos, 1) == NULL);
    CHECK(strstr(di_error_message(), "EOS id 5") != NULL);
    CHECK(di_grammar_matcher_new(NULL, NULL, -1) == NULL);
    CHECK(di_grammar_compile_ebnf(NULL, 0, NULL) == NULL);
    CHECK(di_grammar_matcher_fill_mask(NULL, NULL) != 0);
}

int main(void) {
    RUN_TEST(ebnf_errors_name_the_problem);
    RUN_TEST(ebnf_accepts_hand_derived_strings);
    RUN_TEST(mask_equals_brute_force_on_synthetic_vocab);
    RUN_TEST(eos_only_when_accepting_and_specials_never_text);
    RUN_TEST(thinking_mode_applies_grammar_after_think_end);
    RUN_TEST(store_compiles_once_and_evicts_unused);
    RUN_TEST(empty_language_allows_only_eos);
    RUN_TEST(wide_closure_grows_the_visited_set);
    RUN_TEST(bad_arguments_are_refused);
    return TEST_SUMMARY();
}
