/* grammar_driver.c — a command-line driver of the grammar engine for the Python oracle tests
 * (tests/python/test_grammar*.py) and the bench (bench/bench_grammar.py).
 *
 *   grammar_driver MODE (--ebnf F | --regex F | --json F) (--vocab F | --tokenizer F)
 *                  [--eos ID]... [--seed N] [--samples N] [--max-tokens N] [--cache 0|1]
 *
 * --cache 1 (default): masks through the shared per-position cache; 0: full trie walks.
 * --vocab F: one token per line, its bytes in hex ("*" before the hex marks a special token).
 * MODE compile: prints {"ok":true,"ebnf":...} or {"ok":false,"error":...} (exit 0 either way).
 * MODE gen: random-logit generation under the mask, one JSON line per sample:
 *           {"hex":"<text bytes>","finished":true|false,"tokens":[...]}.
 * MODE walk: one random walk; per step {"mask":"<hex of the mask words>","token":id}.
 * MODE brute: random walks; at every step the mask must equal brute force (each token
 *             accepted and rolled back); prints {"steps":N,"mismatches":M} (exit 1 if M > 0).
 * MODE dumpvocab: the vocabulary in the --vocab file format (for the xgrammar comparison).
 * MODE bench: compile time and per-token fill_mask time over random walks (JSON line). */
#include "base/error.h"
#include "engine/grammar/grammar.h"
#include "deepinfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = 0, *len = (size_t)n;
    return buf;
}

static DiGrammarVocab *load_vocab_file(const char *path, const int32_t *eos, size_t n_eos) {
    size_t len;
    char *txt = slurp(path, &len);
    if (!txt) return di_errorf("cannot read %s", path), NULL;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) n += txt[i] == '\n';
    uint32_t *off = calloc(n + 1, sizeof *off);
    uint8_t *bytes = malloc(len + 1), *special = calloc(n + 1, 1);
    size_t at = 0, t = 0;
    for (char *line = txt; t < n; t++) {
        char *end = strchr(line, '\n');
        *end = 0;
        off[t] = (uint32_t)at;
        if (*line == '*') special[t] = 1, line++;
        for (; line[0] && line[1]; line += 2) {
            unsigned v;
            sscanf(line, "%2x", &v);
            bytes[at++] = (uint8_t)v;
        }
        line = end + 1;
    }
    off[n] = (uint32_t)at;
    DiGrammarVocab *v = di_grammar_vocab_new(n, off, bytes, special, eos, n_eos);
    free(txt), free(off), free(bytes), free(special);
    return v;
}

/* The grammar vocabulary of a tokenizer, through the public API: each id's exact bytes; added
 * tokens (their spelling maps back to them as a special id) and unused ids are specials. */
static DiGrammarVocab *vocab_from_tokenizer(const DiTokenizer *tok, const int32_t *eos, size_t n_eos) {
    size_t n = di_tokenizer_vocab_size(tok), total = 0;
    uint32_t *off = calloc(n + 1, sizeof *off);
    uint8_t *special = calloc(n + 1, 1), *bytes = NULL;
    for (int pass = 0; pass < 2; pass++) { /* sizes, then bytes */
        size_t at = 0;
        for (size_t i = 0; i < n; i++) {
            size_t len = 0;
            const char *b = di_tokenizer_token_bytes(tok, (int32_t)i, &len);
            const char *spelling = b ? di_tokenizer_id_to_token(tok, (int32_t)i) : NULL;
            bool added = spelling && di_tokenizer_special_id(tok, spelling) == (int32_t)i;
            if (!b || added) len = 0;
            off[i] = (uint32_t)at;
            special[i] = !b || added;
            if (pass && len) memcpy(bytes + at, b, len);
            at += len;
        }
        off[n] = (uint32_t)at;
        total = at;
        if (!pass) bytes = malloc(total + 1);
    }
    di_error_clear();
    DiGrammarVocab *v = di_grammar_vocab_new(n, off, bytes, special, eos, n_eos);
    free(off), free(special), free(bytes);
    return v;
}

static uint64_t rng;
static uint64_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static bool allowed(const uint32_t *mask, size_t t) { return mask[t >> 5] >> (t & 31) & 1; }

/* A random allowed token (uniform, as argmax of i.i.d. random logits); EOS, when allowed, is
 * taken with probability 1/4, always past half the budget, so outputs end. */
static int32_t pick(const uint32_t *mask, size_t n, const int32_t *eos, size_t n_eos, int step, int max_tokens) {
    for (size_t i = 0; i < n_eos; i++)
        if (allowed(mask, (size_t)eos[i]) && (step > max_tokens / 2 || rnd() % 4 == 0)) return eos[i];
    size_t count = 0;
    for (size_t t = 0; t < n; t++) count += allowed(mask, t);
    if (!count) return -1;
    size_t k = rnd() % count;
    for (size_t t = 0; t < n; t++)
        if (allowed(mask, t) && k-- == 0) return (int32_t)t;
    return -1;
}

/* MODE brute (see the header). */
static int brute(const DiGrammar *g, const DiGrammarVocab *v, DiGrammarMaskCache *cache, const int32_t *eos,
                 size_t n_eos, int walks, int steps) {
    size_t n = di_grammar_vocab_size(v), words = (n + 31) / 32;
    uint32_t *mask = calloc(words, 4), *bf = calloc(words, 4);
    long checked = 0, bad = 0;
    for (int w = 0; w < walks; w++) {
        DiGrammarMatcher *m = di_grammar_matcher_new(g, v, -1);
        if (m) di_grammar_matcher_set_cache(m, cache);
        for (int s = 0; m && s < steps && !di_grammar_matcher_is_terminated(m); s++) {
            di_grammar_matcher_fill_mask(m, mask);
            memset(bf, 0, words * 4);
            for (size_t t = 0; t < n; t++)
                if (di_grammar_matcher_accept_token(m, (int32_t)t) == 0) {
                    bf[t >> 5] |= 1u << (t & 31);
                    di_grammar_matcher_rollback(m, 1);
                }
            checked++;
            if (memcmp(mask, bf, words * 4)) bad++;
            int32_t t = pick(mask, n, eos, n_eos, s, steps);
            if (t < 0 || di_grammar_matcher_accept_token(m, t) != 0) break;
        }
        di_grammar_matcher_free(m);
    }
    printf("{\"steps\":%ld,\"mismatches\":%ld}\n", checked, bad);
    free(mask), free(bf);
    return bad ? 1 : 0;
}

static void print_json_string(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20) printf("\\u%04x", *s);
        else putchar(*s);
    }
    putchar('"');
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "", *kind = NULL, *src = NULL, *vocab = NULL, *tokpath = NULL;
    int32_t eos[8];
    size_t n_eos = 0;
    int samples = 10, max_tokens = 200, use_cache = 1;
    rng = 88172645463325252ull;
    for (int i = 2; i + 1 < argc; i += 2) {
        const char *k = argv[i], *val = argv[i + 1];
        if (!strcmp(k, "--ebnf") || !strcmp(k, "--regex") || !strcmp(k, "--json")) kind = k + 2, src = val;
        else if (!strcmp(k, "--vocab")) vocab = val;
        else if (!strcmp(k, "--tokenizer")) tokpath = val;
        else if (!strcmp(k, "--eos") && n_eos < 8) eos[n_eos++] = atoi(val);
        else if (!strcmp(k, "--seed")) rng = 0x9E3779B97F4A7C15ull ^ (uint64_t)atoll(val) * 2654435761ull;
        else if (!strcmp(k, "--samples")) samples = atoi(val);
        else if (!strcmp(k, "--max-tokens")) max_tokens = atoi(val);
        else if (!strcmp(k, "--cache")) use_cache = atoi(val);
        else return fprintf(stderr, "grammar_driver: unknown option %s\n", k), 2;
    }
    if (!kind) return fprintf(stderr, "grammar_driver: need --ebnf, --regex or --json\n"), 2;
    size_t len;
    char *text = slurp(src, &len), *ebnf = NULL;
    if (!text) return fprintf(stderr, "grammar_driver: cannot read %s\n", src), 2;
    double t0 = now_s();
    DiGrammar *g = !strcmp(kind, "ebnf")    ? di_grammar_compile_ebnf(text, len, NULL)
                   : !strcmp(kind, "regex") ? di_grammar_compile_regex(text, len)
                                            : di_grammar_compile_json_schema(text, len, &ebnf);
    double compile_s = now_s() - t0;
    if (!strcmp(mode, "compile")) {
        printf(g ? "{\"ok\":true,\"ebnf\":" : "{\"ok\":false,\"error\":");
        print_json_string(g ? (ebnf ? ebnf : "") : di_error_message());
        printf("}\n");
        return free(ebnf), free(text), di_grammar_free(g), 0;
    }
    if (!g) return fprintf(stderr, "grammar_driver: %s\n", di_error_message()), 1;
    DiTokenizer *tok = NULL;
    DiGrammarVocab *v = NULL;
    if (tokpath) {
        tok = di_tokenizer_load_table(tokpath, DI_ADDED_TABLE_V4);
        v = tok ? vocab_from_tokenizer(tok, eos, n_eos) : NULL;
    } else if (vocab) v = load_vocab_file(vocab, eos, n_eos);
    if (!v) return fprintf(stderr, "grammar_driver: vocabulary: %s\n", di_error_message()), 1;
    size_t n = di_grammar_vocab_size(v), words = (n + 31) / 32;
    if (!strcmp(mode, "dumpvocab")) {
        for (size_t t = 0; t < n; t++) {
            if (v->special[t]) putchar('*');
            for (uint32_t b = v->off[t]; b < v->off[t + 1]; b++) printf("%02x", v->bytes[b]);
            putchar('\n');
        }
        return 0;
    }
    DiGrammarMaskCache *cache = use_cache ? di_grammar_mask_cache_new(g, v) : NULL;
    if (use_cache && !cache) return fprintf(stderr, "grammar_driver: %s\n", di_error_message()), 1;
    if (!strcmp(mode, "brute")) return brute(g, v, cache, eos, n_eos, samples, max_tokens);
    uint32_t *mask = malloc(words * 4);
    int32_t *toks = malloc(((size_t)max_tokens + 1) * sizeof *toks);
    double mask_s = 0, cold_s = 0;
    long masks = 0, cold_masks = 0;
    uint64_t rng0 = rng;
    /* bench: the walks twice with the same seed; the second pass sees a warm cache (the cache
     * is shared by all requests of a grammar, so that is the steady state) */
    int passes = !strcmp(mode, "bench") ? 2 : 1;
    for (int s = 0; s < passes * (!strcmp(mode, "walk") ? 1 : samples); s++) {
        if (s == samples && passes == 2) {
            rng = rng0;
            cold_s = mask_s, cold_masks = masks;
            mask_s = 0, masks = 0;
        }
        DiGrammarMatcher *m = di_grammar_matcher_new(g, v, -1);
        if (!m) return fprintf(stderr, "grammar_driver: %s\n", di_error_message()), 1;
        di_grammar_matcher_set_cache(m, cache);
        int nt = 0;
        if (!strcmp(mode, "walk")) printf("[");
        for (; nt < max_tokens && !di_grammar_matcher_is_terminated(m); nt++) {
            double a = now_s();
            if (di_grammar_matcher_fill_mask(m, mask) != 0)
                return fprintf(stderr, "grammar_driver: %s\n", di_error_message()), 1;
            mask_s += now_s() - a;
            masks++;
            int32_t t = pick(mask, n, eos, n_eos, nt, max_tokens);
            if (!strcmp(mode, "walk")) {
                printf("%s{\"mask\":\"", nt ? "," : "");
                for (size_t w = 0; w < words; w++) printf("%08x", mask[w]);
                printf("\",\"token\":%d}", t);
            }
            if (t < 0) break;
            if (di_grammar_matcher_accept_token(m, t) != 0)
                return fprintf(stderr, "grammar_driver: masked token refused: %s\n", di_error_message()), 1;
            toks[nt] = t;
        }
        if (!strcmp(mode, "walk")) printf("]\n");
        if (!strcmp(mode, "gen")) {
            bool fin = di_grammar_matcher_is_terminated(m);
            printf("{\"finished\":%s,\"hex\":\"", fin ? "true" : "false");
            for (int k = 0; k < nt; k++) {
                if (v->special[toks[k]]) continue; /* EOS */
                for (uint32_t b = v->off[toks[k]]; b < v->off[toks[k] + 1]; b++) printf("%02x", v->bytes[b]);
            }
            printf("\",\"tokens\":[");
            for (int k = 0; k < nt; k++) printf("%s%d", k ? "," : "", toks[k]);
            printf("]}\n");
        }
        di_grammar_matcher_free(m);
    }
    if (!strcmp(mode, "bench")) {
        size_t cache_bytes, cache_pos = di_grammar_mask_cache_positions(cache, &cache_bytes);
        printf("{\"compile_ms\":%.3f,\"mask_us\":%.2f,\"cold_mask_us\":%.2f,\"masks\":%ld,\"vocab\":%zu,"
               "\"trie_nodes\":%zu,\"cache_positions\":%zu,\"cache_bytes\":%zu}\n",
               compile_s * 1e3, masks ? mask_s * 1e6 / (double)masks : 0,
               cold_masks ? cold_s * 1e6 / (double)cold_masks : 0, masks, n, v->n_nodes, cache_pos, cache_bytes);
    }
    di_grammar_mask_cache_free(cache);
    free(mask), free(toks), free(text), free(ebnf);
    di_grammar_vocab_free(v);
    di_tokenizer_free(tok);
    di_grammar_free(g);
    return 0;
}
