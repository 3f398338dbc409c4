/* bench_tokenizer_pretok.c — the pre-tokenizer: deepinfer's hand-written scanner (pretok.c)
 * against the same three Split stages run by PCRE2 with JIT (recipe.md §1.3, "PCRE2
 * alternative": PCRE2_UTF | PCRE2_UCP, \s / \S replaced by the explicit White_Space class).
 *
 * Why: the brief asks for whichever is faster while exact.  This measures both on the same
 * text in the same run (medians of interleaved rounds, CPU time) and counts the pieces on
 * which they disagree (PCRE2 10.42 has Unicode 14 tables, so a text with newer characters may
 * differ; the bench text has none).  Text: the spec documents under SHARED_DIR repeated to
 * >= 1 MB. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "base/file.h"
#include "recipe/pretok.h"

#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WS "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
static const char *const PATTERNS[3] = {
    "\\p{N}{1,3}",
    "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+",
};

typedef struct {
    size_t *off; /* piece i = [off[2i], off[2i+1]) */
    size_t n, cap;
} PieceList;

static void push(PieceList *l, size_t a, size_t b) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 1 << 16;
        l->off = realloc(l->off, 2 * l->cap * sizeof *l->off);
        if (!l->off) abort();
    }
    l->off[2 * l->n] = a;
    l->off[2 * l->n + 1] = b;
    l->n++;
}

/* ---- PCRE2: three Isolated splits ---- */

static pcre2_code *code[3];
static pcre2_match_data *md;

static void split_stage(int stage, const uint8_t *text, size_t a, size_t b, PieceList *out) {
    size_t pos = a;
    while (pos < b) {
        int rc = pcre2_jit_match(code[stage], text, b, pos, 0, md, NULL);
        if (rc < 0) break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[0] > pos) push(out, pos, ov[0]);
        push(out, ov[0], ov[1]);
        pos = ov[1];
    }
    if (pos < b) push(out, pos, b);
}

static void pcre2_split(const uint8_t *text, size_t len, PieceList *tmp1, PieceList *tmp2, PieceList *out) {
    tmp1->n = tmp2->n = out->n = 0;
    split_stage(0, text, 0, len, tmp1);
    for (size_t i = 0; i < tmp1->n; i++) split_stage(1, text, tmp1->off[2 * i], tmp1->off[2 * i + 1], tmp2);
    for (size_t i = 0; i < tmp2->n; i++) split_stage(2, text, tmp2->off[2 * i], tmp2->off[2 * i + 1], out);
}

/* ---- the scanner ---- */

typedef struct {
    const uint8_t *base;
    PieceList *out;
} ScanCtx;

static int on_piece(void *ctx, const uint8_t *piece, size_t len) {
    ScanCtx *c = ctx;
    push(c->out, (size_t)(piece - c->base), (size_t)(piece - c->base) + len);
    return 0;
}

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static char *bench_text(size_t *len) {
    const char *shared = getenv("SHARED_DIR");
    const char *names[] = {"recipe.md", "architecture.md", "model-v41.md", "serving.md", "engine-features.md"};
    size_t cap = 1 << 21, n = 0;
    char *buf = malloc(cap + 1);
    while (n < (1u << 20)) {
        size_t before = n;
        for (size_t i = 0; i < 5; i++) {
            char path[4096], *data = NULL;
            size_t size = 0;
            snprintf(path, sizeof path, "%s/spec/%s", shared ? shared : "../shared", names[i]);
            if (di_read_file(path, &data, &size) != 0) continue;
            if (n + size > cap) size = cap - n;
            memcpy(buf + n, data, size);
            n += size;
            free(data);
        }
        if (n == before) {
            fprintf(stderr, "bench_tokenizer_pretok: no spec documents under SHARED_DIR\n");
            exit(1);
        }
    }
    while (n > 0 && (buf[n - 1] & 0xC0) == 0x80) n--; /* never end inside a character */
    if (n > 0 && (uint8_t)buf[n - 1] >= 0xC0) n--;
    buf[n] = '\0';
    *len = n;
    return buf;
}

int main(void) {
    size_t len;
    char *text = bench_text(&len);
    if (di_utf8_check((const uint8_t *)text, len) != 0) {
        fprintf(stderr, "bench text is not UTF-8\n");
        return 1;
    }
    for (int s = 0; s < 3; s++) {
        int err;
        PCRE2_SIZE off;
        code[s] = pcre2_compile((PCRE2_SPTR)PATTERNS[s], PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &off, NULL);
        if (!code[s] || pcre2_jit_compile(code[s], PCRE2_JIT_COMPLETE) != 0) {
            fprintf(stderr, "PCRE2 pattern %d does not compile (offset %zu)\n", s, (size_t)off);
            return 1;
        }
    }
    md = pcre2_match_data_create(4, NULL);
    PieceList a = {0}, b = {0}, tmp1 = {0}, tmp2 = {0};
    enum { ROUNDS = 7 };
    double t_scan[ROUNDS], t_pcre[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) { /* interleaved, so machine noise hits both alike */
        double t0 = cpu_now();
        a.n = 0;
        ScanCtx ctx = {(const uint8_t *)text, &a};
        di_pretok_split((const uint8_t *)text, len, on_piece, &ctx);
        double t1 = cpu_now();
        pcre2_split((const uint8_t *)text, len, &tmp1, &tmp2, &b);
        double t2 = cpu_now();
        t_scan[r] = t1 - t0;
        t_pcre[r] = t2 - t1;
    }
    size_t differ = a.n == b.n ? 0 : (a.n > b.n ? a.n - b.n : b.n - a.n);
    for (size_t i = 0; i < a.n && i < b.n; i++)
        if (a.off[2 * i] != b.off[2 * i] || a.off[2 * i + 1] != b.off[2 * i + 1]) differ++;
    qsort(t_scan, ROUNDS, sizeof(double), cmp_double);
    qsort(t_pcre, ROUNDS, sizeof(double), cmp_double);
    double mb = (double)len / 1e6, ms = t_scan[ROUNDS / 2], mp = t_pcre[ROUNDS / 2];
    printf("pre-tokenizer: %.2f MB, %zu pieces, median CPU time of %d interleaved rounds\n", mb, a.n, ROUNDS);
    printf("  scanner (utf8proc)   %8.1f MB/s\n", mb / ms);
    printf("  PCRE2 JIT (3 splits) %8.1f MB/s\n", mb / mp);
    printf("ratio scanner/pcre2 %.2fx; pieces that differ: %zu\n", mp / ms, differ);
    pcre2_match_data_free(md);
    for (int s = 0; s < 3; s++) pcre2_code_free(code[s]);
    free(a.off);
    free(b.off);
    free(tmp1.off);
    free(tmp2.off);
    free(text);
    return differ == 0 ? 0 : 1;
}
