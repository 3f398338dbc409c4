/* tiny.c — write synthetic V4.1 checkpoints in the official format (see tiny.h): the presets'
 * config.json, the §3.6 inventory filled with deterministic, plausibly scaled values, two
 * safetensors shards + index, and the built-in model cache. */
#include "model/tiny.h"

#include "deepinfer.h"

#include "base/env.h"
#include "base/error.h"
#include "base/file.h"
#include "base/json.h"
#include "base/log.h"
#include "base/mem.h"
#include "kernels/numformats.h"
#include "model/checkpoint_inventory.h"
#include "model/config.h"
#include "model/tiny_planted.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- presets ----------------------------------------------------------------------------- */

/* Shared tail of the text_config of every preset: the release's behavioural constants (§2.3). */
#define RELEASE_CONSTANTS                                                                              \
    "\"rope_theta\": 10000, \"compress_rope_theta\": 160000,"                                          \
    "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 16, \"beta_fast\": 32, \"beta_slow\": 1," \
    " \"original_max_position_embeddings\": 65536},"                                                   \
    "\"max_position_embeddings\": 1048576, \"rms_norm_eps\": 1e-20,"                                   \
    "\"hc_mult\": 4, \"hc_sinkhorn_iters\": 20, \"hc_eps\": 1e-6,"                                     \
    "\"scoring_func\": \"sqrtsoftplus\", \"topk_method\": \"noaux_tc\", \"norm_topk_prob\": true,"     \
    "\"routed_scaling_factor\": 1.5, \"swiglu_limit\": 10.0, \"hidden_act\": \"silu\","

#define TOP_LEVEL(image_id)                                                                                       \
    "\"architectures\": [\"DeepseekV41ForCausalLM\"], \"model_type\": \"deepseek_v41\", \"dtype\": \"bfloat16\"," \
    "\"bos_token_id\": 0, \"eos_token_id\": 1, \"pad_token_id\": 2, \"image_token_id\": " #image_id ","           \
    "\"tie_word_embeddings\": false,"                                                                             \
    "\"quantization_config\": {\"quant_method\": \"fp8\", \"activation_scheme\": \"dynamic\","                    \
    " \"weight_block_size\": [32, 32], \"scale_fmt\": \"ue8m0\", \"expert_dtype\": \"fp4\"},"

/* §9.2 shapes; vocab / image / noise passed in (see tiny.h for why "tiny" differs from §9). */
#define TINY_TEXT_CONFIG(vocab, noise, cvocab)                                                                     \
    "\"text_config\": {\"model_type\": \"deepseek_v41_text\", \"vocab_size\": " #vocab ", \"hidden_size\": 96,"    \
    "\"num_hidden_layers\": 8, \"num_attention_heads\": 4, \"num_key_value_heads\": 1,"                            \
    "\"head_dim\": 64, \"qk_rope_head_dim\": 16, \"q_lora_rank\": 160, \"o_groups\": 2, \"o_lora_rank\": 48,"      \
    "\"sliding_window\": 8, \"compress_ratios\": [0, 0, 2, 2, 1, 1, 1, 1, 0, 0, 0],"                               \
    "\"kv_source_layer_ids\": [2, 4], \"index_source_layer_ids\": [2, 4, 6],"                                      \
    "\"candidate_source_layer_id\": 4, \"candidate_topk_blocks\": 2, \"candidate_block_size\": 4,"                 \
    "\"index_n_heads\": 2, \"index_head_dim\": 32, \"index_topk\": 4," RELEASE_CONSTANTS                           \
    "\"n_routed_experts\": 8, \"num_experts_per_tok\": 2, \"n_shared_experts\": 1, \"moe_intermediate_size\": 32," \
    "\"engram_layer_ids\": [1], \"engram_num_embeddings\": [384], \"engram_max_ngram_size\": 4,"                   \
    "\"engram_vocab_size\": 50, \"engram_n_heads\": 2, \"engram_head_dim\": 32,"                                   \
    "\"engram_pad_token_id\": 2, \"engram_compressed_vocab_size\": " #cvocab ","                                   \
    "\"num_nextn_predict_layers\": 3, \"dspark_block_size\": 5, \"dspark_noise_token_id\": " #noise ","            \
    "\"dspark_target_layer_ids\": [5, 6, 7], \"dspark_markov_rank\": 16,"                                          \
    "\"dspark_n_routed_experts\": 4, \"dspark_num_experts_per_tok\": 3},"                                          \
    "\"vision_config\": {\"model_type\": \"deepseek_v41_vision\", \"num_hidden_layers\": 0}"

/* 297 = DI_TINY_VOCAB, the ids of the tiny tokenizer (tiny_tokenizer.c).  287 = <｜System｜> (the
 * release's noise token 128799 is its System token), 290 = image.  259 = DI_TINY_COMPRESSED_VOCAB,
 * the number of distinct keys of the §5.2 (a) compressed token map over the tiny tokenizer (REF
 * asserts engram_compressed_vocab_size equals it; tests/python/test_tiny_checkpoint.py recomputes
 * it with HF tokenizers).  The numbers are literals because they are pasted into the JSON text;
 * tests/unit/test_tiny.c checks them against the enum. */
static const char tiny_config[] = "{" TOP_LEVEL(290) TINY_TEXT_CONFIG(297, 287, 259) "}";
static const char spec9_config[] = "{" TOP_LEVEL(254) TINY_TEXT_CONFIG(256, 255, 128) "}";

/* Benchmark size: the tiny layer plan at hidden 1024 with 64 experts, the tiny tokenizer (vocab 297,
 * compressed 259, noise 287, image 290 as above).  Engram rows 4062 =
 * 1009 + 1013 + 1019 + 1021 (primes from engram_vocab_size 1000, §5.2 e). */
/* clang-format off */
static const char medium_config[] =
    "{" TOP_LEVEL(290)
    "\"text_config\": {\"model_type\": \"deepseek_v41_text\", \"vocab_size\": 297, \"hidden_size\": 1024,"
    "\"num_hidden_layers\": 8, \"num_attention_heads\": 8, \"num_key_value_heads\": 1,"
    "\"head_dim\": 128, \"qk_rope_head_dim\": 32, \"q_lora_rank\": 256, \"o_groups\": 2, \"o_lora_rank\": 256,"
    "\"sliding_window\": 64, \"compress_ratios\": [0, 0, 2, 2, 1, 1, 1, 1, 0, 0, 0],"
    "\"kv_source_layer_ids\": [2, 4], \"index_source_layer_ids\": [2, 4, 6],"
    "\"candidate_source_layer_id\": 4, \"candidate_topk_blocks\": 8, \"candidate_block_size\": 8,"
    "\"index_n_heads\": 4, \"index_head_dim\": 64, \"index_topk\": 16," RELEASE_CONSTANTS
    "\"n_routed_experts\": 64, \"num_experts_per_tok\": 4, \"n_shared_experts\": 1, \"moe_intermediate_size\": 512,"
    "\"engram_layer_ids\": [1], \"engram_num_embeddings\": [4062], \"engram_max_ngram_size\": 3,"
    "\"engram_vocab_size\": 1000, \"engram_n_heads\": 2, \"engram_head_dim\": 64,"
    "\"engram_pad_token_id\": 2, \"engram_compressed_vocab_size\": 259,"
    "\"num_nextn_predict_layers\": 3, \"dspark_block_size\": 5, \"dspark_noise_token_id\": 287,"
    "\"dspark_target_layer_ids\": [5, 6, 7], \"dspark_markov_rank\": 64,"
    "\"dspark_n_routed_experts\": 16, \"dspark_num_experts_per_tok\": 2},"
    "\"vision_config\": {\"model_type\": \"deepseek_v41_vision\", \"num_hidden_layers\": 0}}";
/* clang-format on */

static const struct {
    const char *name;
    const char *json;
    int has_tokenizer;
} presets[] = {{"tiny", tiny_config, 1}, {"spec9", spec9_config, 0}, {"medium", medium_config, 1}};

static int find_preset(const char *name) {
    for (int i = 0; i < (int)(sizeof presets / sizeof presets[0]); i++)
        if (name && strcmp(name, presets[i].name) == 0) return i;
    return di_errorf("unknown preset '%s' (expected tiny, spec9 or medium)", name ? name : "(null)");
}

const char *di_tiny_config_json(const char *preset) {
    int p = find_preset(preset);
    return p < 0 ? NULL : presets[p].json;
}

/* ---- deterministic values ---------------------------------------------------------------- */

/* SplitMix64 (Steele, Lea, Flood 2014): one 64-bit state, passes BigCrush; plenty for weights. */
typedef struct {
    uint64_t s;
    float spare; /* Box-Muller makes two normals; the second waits here */
    int has_spare;
} Rng;

static uint64_t rng_next(Rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static double rng_uniform(Rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; } /* [0, 1) */

/* Standard normal by Box-Muller (both values of each pair used). */
static float rng_normal(Rng *r) {
    if (r->has_spare) {
        r->has_spare = 0;
        return r->spare;
    }
    double u = rng_uniform(r), v = rng_uniform(r);
    double rad = sqrt(-2.0 * log(1.0 - u)), ang = 6.283185307179586 * v;
    r->spare = (float)(rad * sin(ang));
    r->has_spare = 1;
    return (float)(rad * cos(ang));
}

/* Every tensor has its own stream: seed ^ FNV-1a 64 of its name. */
static Rng rng_for(uint64_t seed, const char *name) {
    uint64_t h = 0xCBF29CE484222325ULL;
    for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 0x100000001B3ULL;
    Rng r = {.s = seed ^ h};
    rng_next(&r);
    return r;
}

/* A block of `n` values quantised with one power-of-two scale: s = 2^ceil(log2(amax / max_code))
 * (the weight-side rule of §3.4/§3.5); returns the UE8M0 byte.  Codes written by `encode`. */
static uint8_t quantise_block(const float *x, size_t n, size_t stride, float max_code, uint8_t (*encode)(float),
                              uint8_t *codes, size_t code_stride) {
    float amax = 1e-30f;
    for (size_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i * stride]));
    uint8_t sb = di_ue8m0_ceil(amax / max_code);
    float inv = 1.0f / di_ue8m0_to_f32(sb);
    for (size_t i = 0; i < n; i++) codes[i * code_stride] = encode(x[i * stride] * inv);
    return sb;
}

/* FP8 [out, in] with 32x32 UE8M0 blocks (§3.4): Gaussian std 1/sqrt(fan_in). */
static void fill_fp8(Rng *r, int64_t out, int64_t in, uint8_t *codes, uint8_t *scales, float *tmp) {
    float std = 1.0f / sqrtf((float)in);
    for (int64_t i = 0; i < out * in; i++) tmp[i] = rng_normal(r) * std;
    int64_t sc = (in + 31) / 32;
    for (int64_t br = 0; br < (out + 31) / 32; br++)
        for (int64_t bc = 0; bc < sc; bc++) {
            int64_t r0 = br * 32, c0 = bc * 32, nr = out - r0 < 32 ? out - r0 : 32, nc = in - c0 < 32 ? in - c0 : 32;
            float amax = 1e-30f;
            for (int64_t y = 0; y < nr; y++)
                for (int64_t x = 0; x < nc; x++) amax = fmaxf(amax, fabsf(tmp[(r0 + y) * in + c0 + x]));
            uint8_t sb = di_ue8m0_ceil(amax / DI_E4M3_MAX);
            float inv = 1.0f / di_ue8m0_to_f32(sb);
            for (int64_t y = 0; y < nr; y++)
                for (int64_t x = 0; x < nc; x++)
                    codes[(r0 + y) * in + c0 + x] = di_f32_to_e4m3(tmp[(r0 + y) * in + c0 + x] * inv);
            scales[br * sc + bc] = sb;
        }
}

/* Packed FP4 [out, in/2] with a UE8M0 scale per row per 32 (§3.5): low nibble = even column. */
static void fill_fp4(Rng *r, int64_t out, int64_t in, uint8_t *packed, uint8_t *scales, float *tmp) {
    float std = 1.0f / sqrtf((float)in);
    uint8_t nib[32];
    for (int64_t row = 0; row < out; row++) {
        for (int64_t c = 0; c < in; c++) tmp[c] = rng_normal(r) * std;
        for (int64_t b = 0; b < in / 32; b++) {
            scales[row * (in / 32) + b] = quantise_block(tmp + b * 32, 32, 1, DI_E2M1_MAX, di_f32_to_e2m1, nib, 1);
            for (int k = 0; k < 16; k++)
                packed[row * (in / 2) + b * 16 + k] = (uint8_t)((nib[2 * k] & 0xF) | ((nib[2 * k + 1] & 0xF) << 4));
        }
    }
}

/* Engram table [rows, hd] F8_E4M3 with a UE8M0 scale per row per 32; N(0,1) rows (§9.6). */
static void fill_engram(Rng *r, int64_t rows, int64_t hd, uint8_t *codes, uint8_t *scales, float *tmp) {
    for (int64_t row = 0; row < rows; row++) {
        for (int64_t c = 0; c < hd; c++) tmp[c] = rng_normal(r);
        for (int64_t b = 0; b < hd / 32; b++)
            scales[row * (hd / 32) + b] =
                quantise_block(tmp + b * 32, 32, 1, DI_E4M3_MAX, di_f32_to_e4m3, codes + row * hd + b * 32, 1);
    }
}

/* Plain BF16/F32 tensors by kind (§9.6 value ranges). */
static float plain_value(Rng *r, const DiInventoryEntry *e) {
    switch (e->kind) {
    case DI_INV_EMBED: return rng_normal(r);
    case DI_INV_NORM:
    case DI_INV_HC_SCALE:
    case DI_INV_ENGRAM_QK: return 1.0f + 0.1f * rng_normal(r);
    case DI_INV_BF16_MATRIX: return rng_normal(r) / sqrtf((float)(e->fan_in > 0 ? e->fan_in : 1));
    case DI_INV_HC_FN: return 0.1f * rng_normal(r);
    case DI_INV_HC_BASE: return 0.5f * rng_normal(r);
    case DI_INV_SINK:
    case DI_INV_GATE_BIAS: return rng_normal(r);
    default: return 0.0f;
    }
}

static int64_t entry_bytes(const DiInventoryEntry *e) {
    return e->shape[0] * (e->ndim == 2 ? e->shape[1] : 1) * (int64_t)di_dtype_size(e->dtype);
}

/* Fill data[i] for every entry.  Quantised weights are generated together with their scale
 * (the next entry).  tmp holds one float matrix. */
static int generate(const DiInventory *inv, uint64_t seed, uint8_t **data, int progress) {
    int64_t max_elems = 1, done = 0, next_report = 0;
    for (size_t i = 0; i < inv->n; i++) {
        int64_t n = inv->entries[i].shape[0] * (inv->entries[i].ndim == 2 ? inv->entries[i].shape[1] : 1);
        if (inv->entries[i].kind == DI_INV_FP4_WEIGHT) n *= 2;
        if (n > max_elems) max_elems = n;
    }
    float *tmp = di_malloc((size_t)max_elems * sizeof(float), "make-tiny scratch");
    if (!tmp) return -1;
    for (size_t i = 0; i < inv->n; i++) {
        const DiInventoryEntry *e = &inv->entries[i];
        Rng r = rng_for(seed, e->name);
        switch (e->kind) {
        case DI_INV_FP8_WEIGHT: fill_fp8(&r, e->shape[0], e->shape[1], data[i], data[i + 1], tmp); break;
        case DI_INV_FP4_WEIGHT: fill_fp4(&r, e->shape[0], e->fan_in, data[i], data[i + 1], tmp); break;
        case DI_INV_ENGRAM_TABLE: fill_engram(&r, e->shape[0], e->shape[1], data[i], data[i + 1], tmp); break;
        case DI_INV_FP8_SCALE:
        case DI_INV_FP4_SCALE:
        case DI_INV_ENGRAM_SCALE: break; /* written with its weight */
        default: {
            int64_t n = e->shape[0] * (e->ndim == 2 ? e->shape[1] : 1);
            for (int64_t k = 0; k < n; k++) {
                float v = plain_value(&r, e);
                if (e->dtype == DI_DTYPE_F32)
                    memcpy(data[i] + 4 * k, &v, 4);
                else {
                    uint16_t h = di_f32_to_bf16(v);
                    memcpy(data[i] + 2 * k, &h, 2);
                }
            }
        }
        }
        done += entry_bytes(e);
        if (progress && done >= next_report) {
            DI_INFO("make-tiny: generated %.0f / %.0f MB", (double)done / 1e6, (double)inv->total_bytes / 1e6);
            next_report = done + 50000000;
        }
    }
    free(tmp);
    return 0;
}

/* ---- safetensors writing ----------------------------------------------------------------- */

/* Data order inside a shard: larger elements first, so every tensor stays aligned to its element
 * size (the header is padded to 8 bytes, as the official writer does). */
static int cmp_by_elem_size(const void *a, const void *b, void *ctx) {
    const DiInventory *inv = ctx;
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    size_t sx = di_dtype_size(inv->entries[x].dtype), sy = di_dtype_size(inv->entries[y].dtype);
    if (sx != sy) return sx > sy ? -1 : 1;
    return (x > y) - (x < y);
}

/* Write one shard holding the entries idx[0..n-1]; records the shard name per entry in the index. */
static int write_shard(const char *path, const char *shard_name, const DiInventory *inv, uint8_t **data, size_t *idx,
                       size_t n, json_t *weight_map) {
    qsort_r(idx, n, sizeof *idx, cmp_by_elem_size, (void *)inv);
    json_t *hdr = json_object();
    json_object_set_new(hdr, "__metadata__", json_pack("{s:s}", "format", "pt"));
    int64_t off = 0;
    for (size_t k = 0; k < n; k++) {
        const DiInventoryEntry *e = &inv->entries[idx[k]];
        json_t *shape = e->ndim == 2 ? json_pack("[I,I]", (json_int_t)e->shape[0], (json_int_t)e->shape[1])
                                     : json_pack("[I]", (json_int_t)e->shape[0]);
        json_object_set_new(hdr, e->name,
                            json_pack("{s:s, s:o, s:[I,I]}", "dtype", di_dtype_name(e->dtype), "shape", shape,
                                      "data_offsets", (json_int_t)off, (json_int_t)(off + entry_bytes(e))));
        json_object_set_new(weight_map, e->name, json_string(shard_name));
        off += entry_bytes(e);
    }
    char *text = json_dumps(hdr, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(hdr);
    if (!text) return di_errorf("%s: could not serialise the header", path);
    size_t tl = strlen(text), hl = (tl + 7) / 8 * 8;
    char *tmp_path = NULL;
    int rc = -1;
    if (asprintf(&tmp_path, "%s.tmp.%d", path, (int)getpid()) < 0) {
        tmp_path = NULL;
        di_errorf("%s: out of memory", path);
        goto done;
    }
    FILE *f = fopen(tmp_path, "wb");
    if (!f) {
        di_errorf("cannot create %s: %s", tmp_path, strerror(errno));
        goto done;
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(text, 1, tl, f) == tl;
    for (size_t i = tl; ok && i < hl; i++) ok = fputc(' ', f) != EOF;
    for (size_t k = 0; ok && k < n; k++) {
        size_t nb = (size_t)entry_bytes(&inv->entries[idx[k]]);
        ok = fwrite(data[idx[k]], 1, nb, f) == nb;
    }
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (fclose(f) != 0) ok = 0;
    if (!ok || rename(tmp_path, path) != 0) {
        di_errorf("cannot write %s: %s", path, strerror(errno));
        unlink(tmp_path);
        goto done;
    }
    rc = 0;
done:
    free(tmp_path);
    free(text);
    return rc;
}

static int write_json_file(const char *dir, const char *name, json_t *value) {
    char *path = di_path_join(dir, name);
    char *text = json_dumps(value, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    int rc =
        (!path || !text) ? di_errorf("%s: could not serialise", name) : di_write_file_atomic(path, text, strlen(text));
    free(path);
    free(text);
    return rc;
}

/* engram_token_map.json: the §5.2 (a) map of the tiny tokenizer, which the release derives from
 * its tokenizer at load time and an engine ships as data.  A new reference, NULL with error. */
static json_t *token_map_json(int64_t compressed_vocab) {
    const int32_t *map;
    int64_t n;
    if (di_tiny_engram_token_map(&map, &n) < 0) return NULL;
    json_t *list = json_array();
    for (int64_t i = 0; i < n; i++) json_array_append_new(list, json_integer(map[i]));
    json_t *root = json_pack("{s:s, s:I, s:o}", "source", "model-v41.md 5.2 (a) over tokenizer.json",
                             "compressed_vocab_size", (json_int_t)compressed_vocab, "token_map", list);
    if (!root) di_errorf("engram_token_map.json: could not build the JSON");
    return root;
}

static int write_token_map(const char *dir, int64_t compressed_vocab) {
    json_t *root = token_map_json(compressed_vocab);
    char *path = di_path_join(dir, "engram_token_map.json");
    char *text = root ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    int rc = (path && text) ? di_write_file_atomic(path, text, strlen(text))
                            : di_errorf("engram_token_map.json: could not serialise");
    free(path);
    free(text);
    json_decref(root);
    return rc;
}

/* Shard 1: the first half of the backbone layers; shard 2: the rest, the stages and the globals
 * (the golden tiny-a layout, golden-v41/README.md §1). */
static int write_shards(const char *dir, const DiModelConfig *cfg, const DiInventory *inv, uint8_t **data) {
    static const char *names[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
    size_t *idx = di_calloc(inv->n, sizeof *idx, "shard lists");
    json_t *weight_map = json_object();
    int rc = idx ? 0 : -1;
    for (int s = 0; s < 2 && rc == 0; s++) {
        size_t n = 0;
        for (size_t i = 0; i < inv->n; i++) {
            int layer = inv->entries[i].layer;
            int first = layer >= 0 && layer < cfg->n_layers / 2;
            if (first == (s == 0)) idx[n++] = i;
        }
        char *path = di_path_join(dir, names[s]);
        rc = path ? write_shard(path, names[s], inv, data, idx, n, weight_map) : -1;
        free(path);
    }
    if (rc == 0) {
        json_t *index = json_pack("{s:{s:I}, s:O}", "metadata", "total_size", (json_int_t)inv->total_bytes,
                                  "weight_map", weight_map);
        char *text = json_dumps(index, JSON_INDENT(2) | JSON_SORT_KEYS);
        char *path = di_path_join(dir, "model.safetensors.index.json");
        rc = (text && path) ? di_write_file_atomic(path, text, strlen(text)) : di_errorf("index: could not serialise");
        free(text);
        free(path);
        json_decref(index);
    }
    json_decref(weight_map);
    free(idx);
    return rc;
}

static int write_preset(const char *out_dir, const char *preset, uint64_t seed, int progress, int planted) {
    if (!out_dir || !*out_dir) return di_errorf("make-tiny: no output directory given");
    int p = find_preset(preset);
    if (p < 0) return -1;
    json_t *root = di_json_load_buffer(presets[p].json, strlen(presets[p].json), preset);
    if (!root) return -1;
    DiModelConfig cfg;
    DiInventory inv = {0};
    uint8_t **data = NULL;
    int rc = di_config_parse_json(root, &cfg);
    if (rc == 0) rc = di_inventory_build(&cfg, &inv);
    if (rc == 0) rc = di_make_dirs(out_dir);
    if (rc == 0 && !(data = di_calloc(inv.n ? inv.n : 1, sizeof *data, "tensor buffers"))) rc = -1;
    for (size_t i = 0; rc == 0 && i < inv.n; i++)
        if (!(data[i] = di_malloc((size_t)entry_bytes(&inv.entries[i]) + 1, inv.entries[i].name))) rc = -1;
    if (rc == 0 && progress)
        DI_INFO("make-tiny: preset %s, seed %llu: %zu tensors, %.1f MB -> %s", preset, (unsigned long long)seed, inv.n,
                (double)inv.total_bytes / 1e6, out_dir);
    if (rc == 0) rc = generate(&inv, seed, data, progress);
    if (rc == 0 && planted) rc = di_tiny_plant(&cfg, &inv, data);
    if (rc == 0) rc = write_shards(out_dir, &cfg, &inv, data);
    if (rc == 0 && presets[p].has_tokenizer) {
        char *path = di_path_join(out_dir, "tokenizer.json");
        rc = path ? di_tiny_write_tokenizer(path) : -1;
        free(path);
        if (rc == 0) rc = write_token_map(out_dir, cfg.engram_compressed_vocab_size);
    }
    if (rc == 0) rc = write_json_file(out_dir, "config.json", root); /* last: marks the directory complete */
    for (size_t i = 0; data && i < inv.n; i++) free(data[i]);
    free(data);
    di_inventory_free(&inv);
    di_config_free(&cfg);
    json_decref(root);
    if (rc < 0) return di_error_wrap("make-tiny %s", out_dir);
    return 0;
}

int di_tiny_write(const char *out_dir, const char *preset, uint64_t seed, int progress) {
    return write_preset(out_dir, preset, seed, progress, 0);
}

int di_tiny_write_planted(const char *out_dir, const char *preset, uint64_t seed, int progress) {
    return write_preset(out_dir, preset, seed, progress, 1);
}

/* ---- the built-in model cache -------------------------------------------------------------- */

int di_tiny_default_dir(char *buf, size_t n) {
    if (!buf || n == 0) return di_errorf("di_tiny_default_dir: no buffer given");
    const char *xdg = di_env_xdg_cache_home(), *home = di_env_home();
    int len;
    if (xdg)
        len = snprintf(buf, n, "%s/deepinfer/tiny-v41", xdg);
    else if (home)
        len = snprintf(buf, n, "%s/.cache/deepinfer/tiny-v41", home);
    else
        return di_errorf("cannot place the built-in model: neither XDG_CACHE_HOME nor HOME is set");
    if (len < 0 || (size_t)len >= n) return di_errorf("built-in model path too long for the buffer");
    return 0;
}

/* Every file make-tiny writes for the tiny preset. */
static const char *const tiny_files[] = {"config.json", "tokenizer.json", "engram_token_map.json",
                                         "model.safetensors.index.json", "model-00001-of-00002.safetensors",
                                         "model-00002-of-00002.safetensors"};
#define N_TINY_FILES (sizeof tiny_files / sizeof tiny_files[0])

static void remove_tree_files(const char *dir) {
    const char *const *names = tiny_files;
    for (size_t i = 0; i < N_TINY_FILES; i++) {
        char *p = di_path_join(dir, names[i]);
        if (p) unlink(p);
        free(p);
    }
    rmdir(dir);
}

/* 1 when dir/name holds JSON equal to `want` (which is consumed), 0 when it differs or does not
 * parse, -1 when `want` could not be built. */
static int file_json_equals(const char *dir, const char *name, json_t *want) {
    if (!want) return -1;
    char *path = di_path_join(dir, name);
    json_t *have = path ? di_json_load_file(path) : NULL;
    int same = have && json_equal(have, want);
    json_decref(have);
    json_decref(want);
    free(path);
    return same;
}

/* Whether a complete cached model is the one this build writes: its config.json, tokenizer.json
 * and engram_token_map.json equal the preset's (the weights follow from the config, the seed and
 * the generator, which these files do not fingerprint).  A model cached by a build with an older
 * tokenizer (e.g. before the DSML tokens, 291 ids) fails this and is regenerated. */
static int cached_is_current(const char *dir, const char *preset) {
    int p = find_preset(preset);
    if (p < 0) return di_errorf("unknown preset '%s'", preset);
    json_t *config = di_json_load_buffer(presets[p].json, strlen(presets[p].json), preset);
    if (!config) return -1;
    json_t *cvocab = json_object_get(json_object_get(config, "text_config"), "engram_compressed_vocab_size");
    json_t *map = token_map_json(json_integer_value(cvocab));
    int same = file_json_equals(dir, "config.json", config);
    int tok = file_json_equals(dir, "tokenizer.json", di_tiny_tokenizer_json());
    int maps = file_json_equals(dir, "engram_token_map.json", map);
    if (same < 0 || tok < 0 || maps < 0) return -1;
    return same && tok && maps;
}

int di_tiny_ensure(const char *dir) {
    return di_tiny_ensure_preset(dir, "tiny", 0);
}

int di_tiny_ensure_preset(const char *dir, const char *preset, int progress) {
    if (!dir || !*dir) return di_errorf("di_tiny_ensure: no directory given");
    if (!preset || find_preset(preset) < 0) return di_errorf("di_tiny_ensure: unknown preset '%s'", preset ? preset : "(null)");
    /* complete: every file there (a directory left by an older version may lack newer files) */
    size_t present = 0;
    for (size_t i = 0; i < N_TINY_FILES; i++) {
        char *p = di_path_join(dir, tiny_files[i]);
        if (!p) return -1;
        present += di_file_exists(p) ? 1 : 0;
        free(p);
    }
    if (present == N_TINY_FILES) {
        int current = cached_is_current(dir, preset);
        if (current < 0) return di_error_wrap("built-in model %s", dir);
        if (current) return 0;
        DI_INFO("model cache: %s was written by a build with another tokenizer or config; regenerating it", dir);
        remove_tree_files(dir);
    } else if (present > 0) {
        DI_INFO("model cache: %s is incomplete (%zu of %zu files); regenerating it", dir, present, N_TINY_FILES);
        remove_tree_files(dir);
    }
    char *tmp = NULL;
    if (asprintf(&tmp, "%s.tmp.%d", dir, (int)getpid()) < 0) return di_errorf("out of memory");
    DI_INFO("model cache: generating %s (first use)", dir);
    int rc = di_tiny_write(tmp, preset, DI_TINY_DEFAULT_SEED, progress);
    if (rc == 0 && rename(tmp, dir) != 0) {
        /* Another process may have won the race: its directory is complete (renamed whole). */
        char *again = di_path_join(dir, "config.json");
        int done = again && di_file_exists(again);
        free(again);
        if (!done) rc = di_errorf("cannot move %s to %s: %s", tmp, dir, strerror(errno));
        remove_tree_files(tmp);
    } else if (rc < 0) {
        remove_tree_files(tmp);
    }
    free(tmp);
    return rc;
}

/* ---- public API (deepinfer.h) ------------------------------------------------------------ */

int di_make_tiny(const char *out_dir, const char *preset, uint64_t seed) {
    return di_tiny_write(out_dir, preset, seed, 1);
}

int di_builtin_model_dir(char *buf, size_t n) {
    if (di_tiny_default_dir(buf, n) < 0) return -1;
    return di_tiny_ensure(buf);
}
