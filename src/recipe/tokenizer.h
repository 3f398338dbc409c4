/* tokenizer.h — the tokenizer inside the library: the public API of include/deepinfer.h
 * ("recipe: tokenizer") plus what other modules and the tests need.
 *
 * Modules: tokenizer.c (loading tokenizer.json, lookups, plain and parallel encoding,
 * decoding), tokenizer_added.c (the built-in V4 / V4.1 added-token tables and added-token
 * matching for HF-compatible encoding), tokenizer_stream.c (incremental decoding),
 * pretok.c (pre-tokenizer), bpe.c (merging). */
#ifndef DI_RECIPE_TOKENIZER_H
#define DI_RECIPE_TOKENIZER_H

#include "deepinfer.h"
#include "recipe/bpe.h"
#include "recipe/segments.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct DiThreadPool DiThreadPool;

/* One entry of an added-token table (file or built-in). */
typedef struct {
    int32_t id;
    char *content;
    bool special, normalized;
} DiAddedToken;

/* A byte trie over added-token spellings for leftmost-longest matching. */
typedef struct {
    int32_t first_child, next_sibling, token; /* token: id ending here, or -1 */
    uint8_t byte;
} DiTrieNode;
typedef struct {
    DiTrieNode *nodes;
    size_t n, cap;
} DiTrie;

struct DiTokenizer {
    size_t n_ids;          /* highest id + 1 */
    uint32_t *bytes_off;   /* [n_ids + 1] into bytes: the decoded bytes of each id */
    uint8_t *bytes;
    uint32_t *spell_off;   /* [n_ids + 1] into spell: each id's spelling, NUL-terminated */
    char *spell;
    uint8_t *kind;         /* per id: TOK_NONE, TOK_VOCAB or TOK_ADDED */
    uint32_t *map;         /* open addressing spelling -> id + 1 (0 = empty) */
    size_t map_mask;
    DiBpe bpe;
    DiTrie trie_raw;       /* added tokens with normalized = false (matched first) */
    DiTrie trie_norm;      /* added tokens with normalized = true (matched in the gaps) */
    DiThreadPool *pool;    /* NULL: sequential */
    pthread_mutex_t pool_lock;
    size_t parallel_min_bytes; /* texts shorter than this are encoded on one thread */
};

enum { DI_TOK_NONE = 0, DI_TOK_VOCAB = 1, DI_TOK_ADDED = 2 };

/* The prompt hand-off (recipe.md §5.2): SPECIAL segment -> the id of its spelling (an error
 * when the spelling is not an added token), each TEXT run -> plain BPE with no added-token
 * recognition.  *ids is a fresh heap array (free with free()). */
int di_tokenizer_encode_segments(const DiTokenizer *tok, const DiSegmentList *segs, int32_t **ids, size_t *n_ids);

/* Plain encoding of valid UTF-8, appended to out.  chunk_bytes > 0 cuts the text into parts
 * of about that size at safe points and encodes them as separate tasks on `pool` (NULL: one
 * after another); 0 encodes it as one part.  Exposed so tests can force many cuts. */
int di_tokenizer_encode_chunked(const DiTokenizer *tok, const uint8_t *text, size_t len, size_t chunk_bytes,
                                DiThreadPool *pool, DiIdVec *out);

/* ---- tokenizer_added.c ---- */

/* Apply a built-in table to a file's added tokens (*list and *n: a heap array it may grow).
 * See DiAddedTable in deepinfer.h for the rule. */
int di_added_apply_table(DiAddedToken **list, size_t *n, DiAddedTable table);
void di_added_list_free(DiAddedToken *list, size_t n);
int di_trie_add(DiTrie *trie, const char *spelling, size_t len, int32_t id);
void di_trie_free(DiTrie *trie);
/* Longest token of the trie that starts at text[0..len): its length and id, or 0. */
size_t di_trie_match(const DiTrie *trie, const uint8_t *text, size_t len, int32_t *id);

#endif
