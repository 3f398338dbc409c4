/* fuzz_tokenizer.c — libFuzzer target: arbitrary bytes through every tokenizer entry point.
 *
 * The first byte picks what to exercise; the rest is the input.  Checks, beyond "no crash,
 * leak or hang": valid UTF-8 round-trips byte-exactly; invalid UTF-8 is an error, never ids;
 * parallel encoding (forced into tiny parts) equals sequential; the flat and heap BPE loops
 * agree; the stream decoder releases only whole characters.  The tokenizer is the shared V3
 * file (SHARED_DIR, default ../shared) or DI_FUZZ_TOKENIZER. */
#include "base/error.h"
#include "base/threadpool.h"
#include "recipe/bpe.h"
#include "recipe/pretok.h"
#include "recipe/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static DiTokenizer *tok;
static DiThreadPool *pool;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *path = getenv("DI_FUZZ_TOKENIZER");
    char buf[4096];
    if (!path) {
        const char *shared = getenv("SHARED_DIR");
        snprintf(buf, sizeof buf, "%s/recipe-data/tokenizer/deepseek_v3_tokenizer.json", shared ? shared : "../shared");
        path = buf;
    }
    tok = di_tokenizer_load_table(path, DI_ADDED_TABLE_V41);
    if (!tok) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", di_error_message());
        abort();
    }
    pool = di_pool_create(2);
    return 0;
}

static void check_round_trip(const uint8_t *data, size_t size, const int32_t *ids, size_t n) {
    char *back = NULL;
    size_t len = 0;
    if (di_tokenizer_decode(tok, ids, n, &back, &len) != 0 || len != size || memcmp(back, data, size) != 0) abort();
    free(back);
}

static void fuzz_encode(const uint8_t *data, size_t size) {
    int32_t *ids = NULL;
    size_t n = 0;
    int valid = di_utf8_check(data, size) == 0;
    int rc = di_tokenizer_encode(tok, (const char *)data, size, &ids, &n);
    if ((rc == 0) != valid) abort();
    if (rc == 0) {
        check_round_trip(data, size, ids, n);
        DiIdVec par = {0};
        if (di_tokenizer_encode_chunked(tok, data, size, 1 + size % 13, pool, &par) != 0) abort();
        if (par.n != n || (n && memcmp(par.v, ids, n * sizeof *ids) != 0)) abort();
        di_idvec_free(&par);
    }
    free(ids);
    ids = NULL;
    rc = di_tokenizer_encode_with_added(tok, (const char *)data, size, &ids, &n);
    if ((rc == 0) != valid) abort();
    if (rc == 0) check_round_trip(data, size, ids, n);
    free(ids);
}

static void fuzz_bpe(const uint8_t *data, size_t size) {
    DiBpeScratch scratch = {0};
    DiIdVec a = {0}, b = {0};
    if (size > 4096) size = 4096;
    di_bpe_encode_piece(&tok->bpe, data, size, &a, &scratch, false);
    di_bpe_encode_piece(&tok->bpe, data, size, &b, &scratch, true);
    if (a.n != b.n || (a.n && memcmp(a.v, b.v, a.n * sizeof *a.v) != 0)) abort();
    di_idvec_free(&a);
    di_idvec_free(&b);
    di_bpe_scratch_free(&scratch);
}

static void fuzz_stream(const uint8_t *data, size_t size) {
    DiDecodeStream *s = di_decode_stream_new(tok);
    for (size_t i = 0; i + 1 < size; i += 2) {
        /* Ids from pairs of bytes, biased to the single-byte and short tokens. */
        int32_t id = (int32_t)(((unsigned)data[i] << 8 | data[i + 1]) % (data[i] & 1 ? 300 : di_tokenizer_vocab_size(tok) + 5));
        const char *t;
        size_t len;
        if (di_decode_stream_push(s, id, &t, &len) == 0 && di_utf8_check((const uint8_t *)t, len) != 0) abort();
    }
    di_decode_stream_free(s);
}

static void fuzz_load(const uint8_t *data, size_t size) {
    DiTokenizer *t = di_tokenizer_load_buffer((const char *)data, size, "fuzz.json", DI_ADDED_TABLE_FILE);
    di_tokenizer_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    uint8_t mode = data[0];
    data++;
    size--;
    switch (mode % 5) {
    case 0: case 1: fuzz_encode(data, size); break;
    case 2: fuzz_bpe(data, size); break;
    case 3: fuzz_stream(data, size); break;
    default: fuzz_load(data, size); break;
    }
    return 0;
}
