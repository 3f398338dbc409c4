/* test_engram_map.c — the Engram compressed-token map of a tokenizer (src/recipe/engram_map.c,
 * model-v41.md §5.2 a).  Oracles: hand-derived keys of the normalisation chain (NFKC, NFD,
 * marks dropped, lowercase, whitespace folded, stripped, lone space kept), and the built-in tiny
 * model's map, which make-tiny writes from data produced with the HF `tokenizers` package
 * running the reference converter (src/model/tiny_tokenizer.c). */
#include "test.h"

#include "deepinfer.h"
#include "recipe/engram_map.h"

#include <jansson.h>
#include <stdint.h>
#include <unistd.h>

static void check_key(const char *text, const char *want) {
    char *got = di_engram_key(text, strlen(text));
    CHECK_MSG(got && strcmp(got, want) == 0, "key of '%s': got '%s', want '%s'", text, got ? got : "(null)", want);
    free(got);
}

TEST(keys_follow_the_normalisation_chain) {
    check_key("Hello", "hello");
    check_key(" Hello", "hello");                      /* surrounding whitespace stripped */
    check_key("\xef\xbc\xa8\xef\xbd\x89", "hi");       /* fullwidth "Ｈｉ": NFKC folds it */
    check_key("Cafe\xcc\x81", "cafe");                 /* combining acute (Mn) dropped */
    check_key("\xc3\x89t\xc3\xa9", "ete");             /* precomposed É/é: NFD then marks dropped */
    check_key("\xef\xac\x81", "fi");                   /* the "ﬁ" ligature: NFKC */
    check_key(" ", " ");                               /* a lone space is kept (the sentinel) */
    check_key("\t\n", " ");                            /* folded to one space, then kept */
    check_key("a \t\n b", "a b");                      /* a run of [ \t\r\n] becomes one space */
    check_key("\xe3\x80\x80", " ");                    /* ideographic space: NFKC -> " ", kept */
    check_key("\xc2\xa0x", "x");                       /* NBSP: NFKC -> space, stripped */
    check_key("\xcc\x81", "\xcc\x81");                 /* only a mark: empty -> the text itself */
    check_key("", "");
}

TEST(key_rejects_null) {
    CHECK(di_engram_key(NULL, 0) == NULL);
    CHECK(strstr(di_last_error(), "NULL") != NULL);
}

TEST(map_rejects_null_arguments) {
    int32_t *cid = NULL;
    int64_t n = 0, k = 0;
    CHECK(di_tokenizer_engram_map(NULL, &cid, &n, &k) == -1);
    CHECK(strstr(di_last_error(), "NULL") != NULL);
}

/* The map built from the tiny model's tokenizer.json equals the HF-derived map make-tiny ships. */
TEST(tiny_tokenizer_map_equals_the_reference_map) {
    char dir[] = "/tmp/di_test_engram_map_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK(di_make_tiny(dir, "tiny", 0) == 0);
    char path[256];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    DiTokenizer *tok = di_tokenizer_load(path);
    CHECK(tok != NULL);
    int32_t *cid = NULL;
    int64_t n = 0, keys = 0;
    CHECK(tok && di_tokenizer_engram_map(tok, &cid, &n, &keys) == 0);
    snprintf(path, sizeof path, "%s/engram_token_map.json", dir);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    json_t *want = json_object_get(root, "token_map");
    CHECK(json_is_array(want));
    CHECK_EQ_INT(n, (long long)json_array_size(want));
    CHECK_EQ_INT(keys, 259); /* the tiny config's engram_compressed_vocab_size (model/tiny.c) */
    int64_t mismatches = 0;
    for (int64_t t = 0; cid && t < n && t < (int64_t)json_array_size(want); t++)
        mismatches += cid[t] != (int32_t)json_integer_value(json_array_get(want, (size_t)t));
    CHECK_EQ_INT(mismatches, 0);
    /* "A" (byte 65) and "a" (97) share one compressed id, first-appearance numbering */
    int32_t A = di_tokenizer_token_to_id(tok, "A"), a = di_tokenizer_token_to_id(tok, "a");
    CHECK(cid && A >= 0 && a >= 0 && cid[A] == cid[a]);
    json_decref(root);
    free(cid);
    di_tokenizer_free(tok);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

int main(void) {
    RUN_TEST(keys_follow_the_normalisation_chain);
    RUN_TEST(key_rejects_null);
    RUN_TEST(map_rejects_null_arguments);
    RUN_TEST(tiny_tokenizer_map_equals_the_reference_map);
    return TEST_SUMMARY();
}
