/* tiny_planted.c — `make-tiny --planted`: a drafter that agrees with its target (tiny_planted.h). */
#include "model/tiny_planted.h"

#include "base/error.h"
#include "base/mem.h"
#include "kernels/numformats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PLANT_SHRINK_LOG2 16 /* blocks write 2^-16 of their random-weight output */
#define PLANT_SPECIALS 3     /* BOS, EOS, pad: never a planted next token */

static int64_t map_modulus(int64_t vocab) { return vocab - PLANT_SPECIALS; }

/* A multiplier coprime with the modulus, so the map permutes the non-special tokens. */
static int64_t map_mult(int64_t mod) {
    static const int64_t primes[] = {5, 7, 11, 13, 17, 19, 23, 29, 31, 37};
    for (size_t i = 0; i < sizeof primes / sizeof primes[0]; i++)
        if (mod % primes[i] != 0) return primes[i] % mod;
    return 1;
}

int32_t di_tiny_planted_next(int32_t t, int64_t vocab) {
    int64_t mod = map_modulus(vocab);
    if (t < PLANT_SPECIALS) return (int32_t)(PLANT_SPECIALS + t % mod);
    return (int32_t)(PLANT_SPECIALS + (map_mult(mod) * (t - PLANT_SPECIALS) + 17) % mod);
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int find(const DiInventory *inv, const char *name) {
    for (size_t i = 0; i < inv->n; i++)
        if (strcmp(inv->entries[i].name, name) == 0) return (int)i;
    return di_errorf("planted: the checkpoint has no %s", name);
}

static float get(const DiInventoryEntry *e, const uint8_t *data, int64_t k) {
    if (e->dtype == DI_DTYPE_F32) {
        float v;
        memcpy(&v, data + 4 * k, 4);
        return v;
    }
    uint16_t h;
    memcpy(&h, data + 2 * k, 2);
    return di_bf16_to_f32(h);
}

/* Stores v and returns what was stored (BF16 rounds). */
static float put(const DiInventoryEntry *e, uint8_t *data, int64_t k, float v) {
    if (e->dtype == DI_DTYPE_F32) {
        memcpy(data + 4 * k, &v, 4);
        return v;
    }
    uint16_t h = di_f32_to_bf16(v);
    memcpy(data + 2 * k, &h, 2);
    return di_bf16_to_f32(h);
}

/* Every block's output projection writes 2^-16 of what it did: lower its UE8M0 block scales. */
static void shrink_blocks(const DiInventory *inv, uint8_t **data) {
    static const char *outputs[] = {".attn.wo_b.scale", ".w2.scale", ".engram.wkv.scale"};
    for (size_t i = 0; i < inv->n; i++) {
        const DiInventoryEntry *e = &inv->entries[i];
        int hit = 0;
        for (size_t j = 0; j < sizeof outputs / sizeof outputs[0]; j++) hit |= ends_with(e->name, outputs[j]);
        if (!hit) continue;
        int64_t n = e->shape[0] * (e->ndim == 2 ? e->shape[1] : 1);
        for (int64_t k = 0; k < n; k++) data[i][k] = data[i][k] > PLANT_SHRINK_LOG2 ? (uint8_t)(data[i][k] - PLANT_SHRINK_LOG2) : 0;
    }
}

static int set_ones(const DiInventory *inv, uint8_t **data, const char *name) {
    int i = find(inv, name);
    if (i < 0) return -1;
    for (int64_t k = 0; k < inv->entries[i].shape[0]; k++) put(&inv->entries[i], data[i], k, 1.0f);
    return 0;
}

/* head[v] = embed[f^-1(v)] / sqrt(D); the specials' rows are zero.  Returns max |head row|·sqrt(D),
 * a bound on any base logit (the head reads an RMS-normalised hidden, |x| = sqrt(D)). */
static int plant_head(const DiInventory *inv, uint8_t **data, int64_t V, int64_t D, double *bound) {
    int ie = find(inv, "embed.weight"), ih = find(inv, "head.weight");
    if (ie < 0 || ih < 0) return -1;
    const DiInventoryEntry *ee = &inv->entries[ie], *eh = &inv->entries[ih];
    double scale = 1.0 / sqrt((double)D), worst = 0;
    for (int64_t v = 0; v < V; v++)
        for (int64_t c = 0; c < D; c++) put(eh, data[ih], v * D + c, 0.0f);
    for (int64_t t = 0; t < V; t++) {
        int64_t v = di_tiny_planted_next((int32_t)t, V);
        if (t < PLANT_SPECIALS) continue; /* v is also some non-special token's image */
        double sq = 0;
        for (int64_t c = 0; c < D; c++) {
            float h = put(eh, data[ih], v * D + c, (float)(get(ee, data[ie], t * D + c) * scale));
            sq += (double)h * h;
        }
        worst = fmax(worst, sqrt(sq));
    }
    *bound = worst * sqrt((double)D);
    return 0;
}

/* W2 rows: unit directions in the first R-1 coordinates (the generated rows, normalised); W1[t]:
 * M w_{f(t)} + e_{R-1}; the confidence head: e_{R-1}.  Checks, on the stored values, that the
 * Markov bias alone picks f(t) by more than twice the base logits' bound. */
static int plant_markov(const DiInventory *inv, uint8_t **data, int64_t V, int64_t D, int64_t R, double bound) {
    int i1 = find(inv, "mtp.2.markov_head.embed.weight"), i2 = find(inv, "mtp.2.markov_head.head.weight");
    int ic = find(inv, "mtp.2.confidence_head.proj.weight");
    if (i1 < 0 || i2 < 0 || ic < 0) return -1;
    const DiInventoryEntry *e1 = &inv->entries[i1], *e2 = &inv->entries[i2], *ec = &inv->entries[ic];
    float *w2 = di_calloc((size_t)(V * R), sizeof(float), "planted Markov rows"), *w1 = di_calloc((size_t)(V * R), sizeof(float), "planted Markov rows");
    if (!w1 || !w2) {
        free(w1);
        free(w2);
        return -1;
    }
    double maxcos = 0;
    for (int64_t v = PLANT_SPECIALS; v < V; v++) {
        double sq = 0;
        for (int64_t c = 0; c + 1 < R; c++) sq += (double)get(e2, data[i2], v * R + c) * get(e2, data[i2], v * R + c);
        for (int64_t c = 0; c + 1 < R; c++) w2[v * R + c] = (float)(get(e2, data[i2], v * R + c) / sqrt(sq));
    }
    for (int64_t v = 0; v < V * R; v++) w2[v] = put(e2, data[i2], v, w2[v]);
    for (int64_t a = PLANT_SPECIALS; a < V; a++)
        for (int64_t b = PLANT_SPECIALS; b < a; b++) {
            double dot = 0;
            for (int64_t c = 0; c < R; c++) dot += (double)w2[a * R + c] * w2[b * R + c];
            maxcos = fmax(maxcos, dot);
        }
    double M = 4.0 * bound / (1.0 - fmin(maxcos, 0.99)) + 4.0;
    for (int64_t t = 0; t < V; t++) {
        int64_t f = di_tiny_planted_next((int32_t)t, V);
        for (int64_t c = 0; c < R; c++) w1[t * R + c] = put(e1, data[i1], t * R + c, c + 1 == R ? 1.0f : (float)(M * w2[f * R + c]));
    }
    for (int64_t c = 0; c < D + R; c++) put(ec, data[ic], c, c + 1 == D + R ? 1.0f : 0.0f);
    int rc = 0;
    for (int64_t t = 0; t < V && rc == 0; t++) { /* the margin, on the stored values */
        int64_t f = di_tiny_planted_next((int32_t)t, V);
        double best = -INFINITY, right = 0;
        for (int64_t v = 0; v < V; v++) {
            double dot = 0;
            for (int64_t c = 0; c < R; c++) dot += (double)w2[v * R + c] * w1[t * R + c];
            if (v == f) right = dot;
            else best = fmax(best, dot);
        }
        if (right - best <= 2.0 * bound) rc = di_errorf("planted: the Markov margin after token %lld is %.3g, under %.3g", (long long)t, right - best, 2.0 * bound);
    }
    free(w1);
    free(w2);
    return rc;
}

int di_tiny_plant(const DiModelConfig *cfg, const DiInventory *inv, uint8_t **data) {
    if (!cfg || !inv || !data) return di_errorf("planted: invalid arguments");
    int64_t V = cfg->vocab_size, D = cfg->hidden_size, R = cfg->dspark_markov_rank;
    if (V <= 2 * PLANT_SPECIALS || R < 2 || cfg->n_draft_stages < 1) return di_errorf("planted: needs DSpark stages, Markov rank >= 2 and a vocabulary");
    double bound = 0;
    shrink_blocks(inv, data);
    if (set_ones(inv, data, "norm.weight") != 0 || set_ones(inv, data, "mtp.2.norm.weight") != 0 || plant_head(inv, data, V, D, &bound) != 0 ||
        plant_markov(inv, data, V, D, R, bound) != 0)
        return di_error_wrap("planted checkpoint");
    return 0;
}
