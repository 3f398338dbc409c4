/* test_checkpoint.c — opening the golden tiny-a checkpoint (golden-v41/README.md §1–3: 1131
 * tensors, index total_size 5,097,468 bytes) with and without its config, the checked accessors,
 * and corrupted copies written to /tmp (truncated shard, header length past EOF, bad dtype,
 * overlapping offsets, shape/byte mismatch, missing shard, index naming a missing tensor, missing
 * and unknown tensors): each must give an error naming the file and tensor, never a crash. */
#include "test.h"

#include "base/error.h"
#include "base/file.h"
#include "base/json.h"
#include "base/log.h"
#include "kernels/numformats.h"
#include "model/checkpoint.h"
#include "model/checkpoint_inventory.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SHARD1 "model-00001-of-00002.safetensors"
#define SHARD2 "model-00002-of-00002.safetensors"
#define INDEX "model.safetensors.index.json"

static char golden[512];
static char work[256];

/* ---- scratch copies ----------------------------------------------------------------------- */

static int copy_file(const char *from_dir, const char *to_dir, const char *name) {
    char a[768], b[768];
    snprintf(a, sizeof a, "%s/%s", from_dir, name);
    snprintf(b, sizeof b, "%s/%s", to_dir, name);
    char *data;
    size_t n;
    if (di_read_file(a, &data, &n) < 0) return -1;
    int rc = di_write_file_atomic(b, data, n);
    free(data);
    return rc;
}

/* A fresh copy of the golden checkpoint in `work`. */
static int fresh_copy(void) {
    const char *names[] = {"config.json", SHARD1, SHARD2, INDEX};
    for (int i = 0; i < 4; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", work, names[i]);
        unlink(p);
        if (copy_file(golden, work, names[i]) < 0) {
            fprintf(stderr, "copy failed: %s\n", di_error_message());
            return -1;
        }
    }
    return 0;
}

static char *work_path(const char *name) {
    static char p[512];
    snprintf(p, sizeof p, "%s/%s", work, name);
    return p;
}

/* Rewrite a shard with its header JSON transformed by `mutate` (data bytes unchanged). */
static int rewrite_header(const char *shard, void (*mutate)(json_t *hdr)) {
    char *buf;
    size_t n;
    if (di_read_file(work_path(shard), &buf, &n) < 0) return -1;
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | (uint8_t)buf[i];
    json_t *hdr = json_loadb(buf + 8, (size_t)hl, 0, NULL);
    mutate(hdr);
    char *text = json_dumps(hdr, JSON_COMPACT | JSON_SORT_KEYS);
    size_t tl = strlen(text), padded = (tl + 7) / 8 * 8, data_len = n - 8 - (size_t)hl;
    uint8_t *out = calloc(8 + padded + data_len, 1);
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    memcpy(out + 8, text, tl);
    memset(out + 8 + tl, ' ', padded - tl);
    memcpy(out + 8 + padded, buf + 8 + hl, data_len);
    int rc = di_write_file_atomic(work_path(shard), out, 8 + padded + data_len);
    free(out);
    free(text);
    json_decref(hdr);
    free(buf);
    return rc;
}

static void rewrite_index(void (*mutate)(json_t *map)) {
    json_t *idx = json_load_file(work_path(INDEX), 0, NULL);
    mutate(json_object_get(idx, "weight_map"));
    json_dump_file(idx, work_path(INDEX), JSON_INDENT(1));
    json_decref(idx);
}

/* Open the scratch copy (with its config) and expect failure naming both substrings. */
static void expect_open_error(const char *want1, const char *want2, int line) {
    DiModelConfig cfg;
    if (di_config_load(work, &cfg) < 0) {
        fprintf(stderr, "  line %d: config: %s\n", line, di_error_message());
        test_current_failed = 1;
        return;
    }
    DiCheckpoint *ck = di_checkpoint_open(work, &cfg);
    const char *msg = di_error_message();
    if (ck || !strstr(msg, want1) || (want2 && !strstr(msg, want2))) {
        fprintf(stderr, "  line %d: opened=%d, message \"%s\", want \"%s\" and \"%s\"\n", line, ck != NULL, msg, want1,
                want2 ? want2 : "");
        test_current_failed = 1;
    }
    di_checkpoint_close(ck);
    di_config_free(&cfg);
}
#define EXPECT_OPEN_ERROR(a, b) expect_open_error(a, b, __LINE__)

/* ---- the golden checkpoint ----------------------------------------------------------------- */

TEST(open_golden_with_config) {
    DiModelConfig cfg;
    CHECK(di_config_load(golden, &cfg) == 0);
    DiCheckpoint *ck = di_checkpoint_open(golden, &cfg);
    CHECK_MSG(ck != NULL, "%s", di_error_message());
    if (!ck) return;
    CHECK_EQ_INT(di_checkpoint_n_tensors(ck), 1131);
    CHECK_EQ_INT(di_checkpoint_n_files(ck), 2);
    CHECK_EQ_INT(di_checkpoint_n_warnings(ck), 0);
    CHECK_EQ_INT(di_checkpoint_tensor_bytes(ck), 5097468); /* index metadata.total_size */
    CHECK_EQ_INT(di_checkpoint_mapped_bytes(ck), 2025308 + 3182688);

    /* FP8 block-scaled: layers.0.attn.wq_a [q_lora_rank 64, hidden 128] + scale [2, 4] */
    DiMatrix m;
    CHECK_MSG(di_checkpoint_matrix(ck, "layers.0.attn.wq_a.weight", 64, 128, &m) == 0, "%s", di_error_message());
    CHECK_EQ_INT(m.format, DI_MAT_FP8_BLOCK);
    const DiTensorInfo *s = di_checkpoint_lookup(ck, "layers.0.attn.wq_a.scale");
    CHECK(s && m.scale == s->data && s->shape[0] == 2 && s->shape[1] == 4);
    /* golden README §2: E4M3 codes 0x7F/0xFF never present; UE8M0 scales are finite */
    const uint8_t *codes = m.data;
    int nan_codes = 0;
    for (int i = 0; i < 64 * 128; i++) nan_codes += (codes[i] & 0x7F) == 0x7F;
    CHECK_EQ_INT(nan_codes, 0);
    for (int i = 0; i < 8; i++) CHECK(m.scale[i] != 0xFF);
    float row[128];
    CHECK(di_matrix_row(&m, 0, row) == 0);
    CHECK_NEAR(row[0], di_e4m3_to_f32(codes[0]) * di_ue8m0_to_f32(m.scale[0]), 0);

    /* FP4 experts: w1 [F 64, D 128] stored I8 [64, 64] + scale [64, 4]; w2 [128, 64] */
    CHECK_MSG(di_checkpoint_matrix(ck, "layers.3.ffn.experts.7.w1.weight", 64, 128, &m) == 0, "%s", di_error_message());
    CHECK_EQ_INT(m.format, DI_MAT_FP4_ROW32);
    CHECK(di_checkpoint_matrix(ck, "layers.3.ffn.experts.7.w2.weight", 128, 64, &m) == 0);
    CHECK(di_checkpoint_matrix(ck, "mtp.1.ffn.experts.3.w3.weight", 64, 128, &m) == 0);
    /* BF16 and the Engram table */
    CHECK(di_checkpoint_matrix(ck, "head.weight", 1024, 128, &m) == 0 && m.format == DI_MAT_BF16);
    const uint8_t *tab, *tsc;
    CHECK_MSG(di_checkpoint_engram_table(ck, "layers.4.engram.embed", 348, 32, &tab, &tsc) == 0, "%s",
              di_error_message());
    const void *v;
    CHECK(di_checkpoint_vector(ck, "layers.0.attn.attn_sink", 4, DI_DTYPE_F32, &v) == 0);
    CHECK(di_checkpoint_vector(ck, "norm.weight", 128, DI_DTYPE_BF16, &v) == 0);
    int64_t fn_shape[2] = {24, 512};
    CHECK(di_checkpoint_tensor(ck, "layers.0.hc_attn_fn", DI_DTYPE_F32, 2, fn_shape, &v) == 0);
    /* unused accounting: everything but the tensors touched above */
    size_t unused = di_checkpoint_report_unused(ck, false);
    CHECK_MSG(unused > 1000 && unused < 1131, "%zu", unused);

    DiMemoryReport mem;
    CHECK(di_checkpoint_memory(ck, &cfg, 100, 2, &mem) == 0);
    CHECK_EQ_INT(mem.weights, 5097468);
    CHECK_EQ_INT(mem.total, 5097468 + 2 * mem.per_request.total);
    di_checkpoint_close(ck);
    di_config_free(&cfg);
}

/* §3.8: wo_a FP8 -> BF16 and head BF16 -> F32, exact, element for element. */
TEST(load_time_conversions) {
    DiCheckpoint *ck = di_checkpoint_open(golden, NULL);
    if (!ck) {
        CHECK_MSG(0, "%s", di_error_message());
        return;
    }
    DiMatrix fp8, bf;
    DiOwnedMatrix conv;
    /* wo_a [o_groups * o_lora_rank = 64, n_heads * head_dim / o_groups = 128] */
    CHECK(di_checkpoint_matrix(ck, "layers.3.attn.wo_a.weight", 64, 128, &fp8) == 0);
    CHECK_MSG(di_checkpoint_matrix_as(ck, "layers.3.attn.wo_a.weight", 64, 128, DI_MAT_BF16, &conv) == 0, "%s",
              di_error_message());
    CHECK(conv.m.format == DI_MAT_BF16 && conv.m.rows == 64 && conv.m.cols == 128 && conv.m.scale == NULL);
    float a[128], b[128];
    int diff = 0;
    for (int r = 0; r < 64; r++) {
        di_matrix_row(&fp8, r, a);
        di_matrix_row(&conv.m, r, b);
        diff += memcmp(a, b, sizeof a) != 0;
    }
    CHECK_EQ_INT(diff, 0);
    di_owned_matrix_free(&conv);
    CHECK(di_checkpoint_matrix(ck, "head.weight", 1024, 128, &bf) == 0);
    CHECK(di_checkpoint_matrix_as(ck, "head.weight", 1024, 128, DI_MAT_F32, &conv) == 0);
    di_matrix_row(&bf, 1000, a);
    CHECK(memcmp(a, (const float *)conv.m.data + 1000 * 128, sizeof a) == 0);
    di_owned_matrix_free(&conv);
    CHECK(di_checkpoint_matrix_as(ck, "head.weight", 1024, 128, DI_MAT_FP8_BLOCK, &conv) == -1);
    CHECK(di_checkpoint_matrix_as(ck, "head.weight", 1024, 100, DI_MAT_F32, &conv) == -1);
    di_checkpoint_close(ck);
}

TEST(accessor_mismatches_name_file_and_tensor) {
    DiCheckpoint *ck = di_checkpoint_open(golden, NULL);
    CHECK_MSG(ck != NULL, "%s", di_error_message());
    if (!ck) return;
    DiMatrix m;
    CHECK(di_checkpoint_matrix(ck, "layers.0.attn.wq_a.weight", 64, 96, &m) == -1);
    CHECK_MSG(
        strstr(di_error_message(), SHARD1) &&
            strstr(di_error_message(), "'layers.0.attn.wq_a.weight' is F8_E4M3 [64, 128], expected F8_E4M3 [64, 96]"),
        "%s", di_error_message());
    CHECK(di_checkpoint_matrix(ck, "layers.0.ffn.experts.0.w1.weight", 64, 100, &m) == -1);
    CHECK_MSG(strstr(di_error_message(), "divisible by 32"), "%s", di_error_message());
    CHECK(di_checkpoint_matrix(ck, "layers.0.attn.attn_sink", 4, 1, &m) == -1);
    CHECK_MSG(strstr(di_error_message(), "expected F32 [4, 1]"), "%s", di_error_message());
    CHECK(di_checkpoint_matrix(ck, "layers.0.ffn.gate.bias", 8, 1, &m) == -1);
    CHECK(di_checkpoint_matrix(ck, "layers.0.attn.wq_a.scale", 2, 4, &m) == -1);
    CHECK_MSG(strstr(di_error_message(), "not a weight matrix format"), "%s", di_error_message());
    CHECK(di_checkpoint_matrix(ck, "layers.0.attn.nope.weight", 4, 4, &m) == -1);
    CHECK_MSG(strstr(di_error_message(), "no tensor 'layers.0.attn.nope.weight'"), "%s", di_error_message());
    const void *v;
    CHECK(di_checkpoint_vector(ck, "norm.weight", 128, DI_DTYPE_F32, &v) == -1);
    CHECK_MSG(strstr(di_error_message(), SHARD2) && strstr(di_error_message(), "is BF16 [128], expected F32 [128]"),
              "%s", di_error_message());
    const uint8_t *a, *b;
    CHECK(di_checkpoint_engram_table(ck, "layers.1.engram.embed", 271, 32, &a, &b) == -1);
    CHECK(di_checkpoint_engram_table(ck, "layers.1.engram.embed", 272, 30, &a, &b) == -1);
    CHECK(di_checkpoint_matrix(NULL, "x", 1, 1, &m) == -1);
    CHECK(di_checkpoint_matrix(ck, NULL, 1, 1, &m) == -1);
    CHECK(di_checkpoint_matrix(ck, "head.weight", 0, 1, &m) == -1);
    CHECK(di_checkpoint_find(ck, NULL) == NULL);
    di_checkpoint_close(ck);
    CHECK(di_checkpoint_open(NULL, NULL) == NULL);
    CHECK(di_checkpoint_open("/nonexistent-dir", NULL) == NULL);
    CHECK_MSG(strstr(di_error_message(), "/nonexistent-dir"), "%s", di_error_message());
}

/* ---- corrupted copies ---------------------------------------------------------------------- */

static void set_dtype_bad(json_t *h) {
    json_object_set_new(json_object_get(h, "layers.0.attn.wkv.weight"), "dtype", json_string("F8_E4M9"));
}
static void set_overlap(json_t *h) {
    /* make wkv.scale [2,4] (8 bytes) alias the first 8 bytes of wkv.weight */
    json_t *w = json_object_get(json_object_get(h, "layers.0.attn.wkv.weight"), "data_offsets");
    json_int_t b = json_integer_value(json_array_get(w, 0));
    json_object_set_new(json_object_get(h, "layers.0.attn.wkv.scale"), "data_offsets", json_pack("[I,I]", b, b + 8));
}
static void set_shape_bad(json_t *h) {
    json_object_set_new(json_object_get(h, "layers.0.attn.attn_sink"), "shape", json_pack("[i]", 5));
}
static void drop_tensor(json_t *h) { json_object_del(h, "layers.0.attn.attn_sink"); }
static void index_ghost(json_t *map) { json_object_set_new(map, "layers.0.ghost.weight", json_string(SHARD1)); }
static void index_drop(json_t *map) { json_object_del(map, "layers.0.attn.attn_sink"); }
static void index_escape(json_t *map) {
    json_object_set_new(map, "layers.0.attn.attn_sink", json_string("../x.safetensors"));
}
static void add_extra(json_t *h) {
    json_object_set_new(h, "layers.0.extra",
                        json_pack("{s:s,s:[i],s:[i,i]}", "dtype", "F32", "shape", 0, "data_offsets", 0, 0));
}
static void index_extra(json_t *map) { json_object_set_new(map, "layers.0.extra", json_string(SHARD1)); }

TEST(corrupted_copies) {
    if (fresh_copy() < 0) {
        test_current_failed = 1;
        return;
    }
    /* truncated shard: the last tensors end past EOF */
    char *buf;
    size_t n;
    CHECK(di_read_file(work_path(SHARD2), &buf, &n) == 0);
    CHECK(di_write_file_atomic(work_path(SHARD2), buf, n / 2) == 0);
    EXPECT_OPEN_ERROR(SHARD2, "past the data section (");
    EXPECT_OPEN_ERROR("tensor '", "truncated?");
    /* header length past EOF */
    uint8_t bad_len[8] = {0xF0, 0xFF, 0xFF, 0x03, 0, 0, 0, 0};
    memcpy(buf, bad_len, 8);
    CHECK(di_write_file_atomic(work_path(SHARD2), buf, n) == 0);
    EXPECT_OPEN_ERROR(SHARD2, "header length");
    free(buf);

    CHECK(fresh_copy() == 0 && rewrite_header(SHARD1, set_dtype_bad) == 0);
    EXPECT_OPEN_ERROR(SHARD1, "tensor 'layers.0.attn.wkv.weight': dtype 'F8_E4M9' is not a safetensors dtype");
    CHECK(fresh_copy() == 0 && rewrite_header(SHARD1, set_overlap) == 0);
    EXPECT_OPEN_ERROR(SHARD1, "overlaps");
    EXPECT_OPEN_ERROR("layers.0.attn.wkv.", "overlaps tensor 'layers.0.attn.wkv.");
    CHECK(fresh_copy() == 0 && rewrite_header(SHARD1, set_shape_bad) == 0);
    EXPECT_OPEN_ERROR(SHARD1,
                      "tensor 'layers.0.attn.attn_sink': F32 shape product 5 x 4 bytes = 20, but data_offsets span 16");

    /* missing shard */
    CHECK(fresh_copy() == 0 && unlink(work_path(SHARD1)) == 0);
    EXPECT_OPEN_ERROR(SHARD1, "cannot open");
    EXPECT_OPEN_ERROR("tensor 'layers.", "(weight_map)");
    /* index naming a tensor the shard lacks */
    CHECK(fresh_copy() == 0);
    rewrite_index(index_ghost);
    EXPECT_OPEN_ERROR(SHARD1, "tensor 'layers.0.ghost.weight' is named by model.safetensors.index.json");
    /* index pointing outside the directory */
    CHECK(fresh_copy() == 0);
    rewrite_index(index_escape);
    EXPECT_OPEN_ERROR("../x.safetensors", "not a file name");
    /* a tensor of the §3.6 inventory missing from shard and index */
    CHECK(fresh_copy() == 0 && rewrite_header(SHARD1, drop_tensor) == 0);
    rewrite_index(index_drop);
    EXPECT_OPEN_ERROR("missing tensor 'layers.0.attn.attn_sink'", "§3.6");
    /* in the shard but not in the index: a warning, and then missing for the inventory */
    CHECK(fresh_copy() == 0);
    rewrite_index(index_drop);
    EXPECT_OPEN_ERROR("missing tensor 'layers.0.attn.attn_sink'", NULL);
    DiCheckpoint *ck = di_checkpoint_open(work, NULL);
    /* warnings: the unmapped tensor, and metadata.total_size no longer matching the mapped tensors */
    CHECK(ck && di_checkpoint_n_warnings(ck) == 2);
    CHECK(ck && strstr(di_checkpoint_warning(ck, 0), "'layers.0.attn.attn_sink' is not mapped to this shard"));
    CHECK(ck && strstr(di_checkpoint_warning(ck, 1), "total_size is 5097468 but the tensors hold 5097452 bytes"));
    di_checkpoint_close(ck);
}

TEST(unknown_tensor_is_a_warning) {
    CHECK(fresh_copy() == 0 && rewrite_header(SHARD1, add_extra) == 0);
    rewrite_index(index_extra);
    DiModelConfig cfg;
    CHECK(di_config_load(work, &cfg) == 0);
    DiCheckpoint *ck = di_checkpoint_open(work, &cfg);
    CHECK_MSG(ck != NULL, "%s", di_error_message());
    if (ck) {
        CHECK_EQ_INT(di_checkpoint_n_tensors(ck), 1132);
        CHECK_EQ_INT(di_checkpoint_n_warnings(ck), 1); /* the 0-byte extra tensor leaves total_size intact */
        int found = 0;
        for (size_t i = 0; i < di_checkpoint_n_warnings(ck); i++)
            found += strstr(di_checkpoint_warning(ck, i), "'layers.0.extra' is not used by the text model") != NULL;
        CHECK_EQ_INT(found, 1);
    }
    di_checkpoint_close(ck);
    di_config_free(&cfg);
}

TEST(single_file_checkpoint) {
    /* model.safetensors without an index: shard 2 alone renamed */
    char dir[300];
    snprintf(dir, sizeof dir, "%s-single", work);
    CHECK(di_make_dirs(dir) == 0);
    char *buf;
    size_t n;
    char from[768], to[400];
    snprintf(from, sizeof from, "%s/%s", golden, SHARD2);
    snprintf(to, sizeof to, "%s/model.safetensors", dir);
    CHECK(di_read_file(from, &buf, &n) == 0);
    CHECK(di_write_file_atomic(to, buf, n) == 0);
    free(buf);
    DiCheckpoint *ck = di_checkpoint_open(dir, NULL);
    CHECK_MSG(ck != NULL, "%s", di_error_message());
    CHECK_EQ_INT(di_checkpoint_n_tensors(ck), 641);
    CHECK(di_checkpoint_lookup(ck, "embed.weight") != NULL);
    di_checkpoint_close(ck);
    unlink(to);
    rmdir(dir);
}

/* §9.5 and §3.7 give per-layer tensor counts and byte totals computed from the spec tables. */
static void check_counts(const char *config, const int *per_layer, int n_layers, size_t want_n, int64_t want_bytes) {
    DiModelConfig cfg;
    CHECK_MSG(di_config_load(config, &cfg) == 0, "%s", di_error_message());
    DiInventory inv;
    CHECK(di_inventory_build(&cfg, &inv) == 0);
    CHECK_EQ_INT(inv.n, want_n);
    CHECK_EQ_INT(inv.total_bytes, want_bytes);
    int counts[64] = {0};
    for (size_t i = 0; i < inv.n; i++)
        if (inv.entries[i].layer >= 0 && inv.entries[i].layer < 64) counts[inv.entries[i].layer]++;
    for (int l = 0; l < n_layers; l++)
        CHECK_MSG(counts[l] == per_layer[l], "%s layer %d: %d tensors, want %d", config, l, counts[l], per_layer[l]);
    di_inventory_free(&inv);
    di_config_free(&cfg);
}

TEST(inventory_counts) {
    /* §9.5: layers 0-7 = 77, 83, 85, 77, 84, 77, 80, 77; stages 56, 53, 57; 809 tensors, 2,562,692 B */
    const int tiny[] = {77, 83, 85, 77, 84, 77, 80, 77, 56, 53, 57};
    check_counts("tests/data/model/tiny-config.json", tiny, 11, 809, 2562692);
    /* §3.7: 2334 plain, 2340 layer 1, 2342 ratio-2 Full, 2348 layer 14, 2341 layer 20, 2337 Reindex;
     * stages 801 (main_proj, main_norm), 798, 802 (norm, Markov, confidence heads);
     * 95,819 tensors, 509,315,486,040 bytes. */
    int rel[43];
    for (int l = 0; l < 40; l++) rel[l] = 2334;
    rel[1] = 2340, rel[2] = rel[8] = 2342, rel[14] = 2348, rel[20] = 2341;
    rel[24] = rel[28] = rel[32] = rel[36] = 2337;
    rel[40] = 801, rel[41] = 798, rel[42] = 802;
    check_counts("tests/data/model/release-config.json", rel, 43, 95819, 509315486040LL);
}

/* §3.10: real release bytes (FP8 row of layers.0.attn.wkv, FP4 row of an expert) written into a
 * one-file checkpoint and decoded through di_checkpoint_matrix + di_matrix_row. */
TEST(release_byte_vectors) {
    static const uint8_t fp8_row[8] = {0xd8, 0x71, 0xf2, 0x79, 0x70, 0x69, 0xf0, 0xe5};
    static const float fp8_want[8] = {-0.00390625f, 0.03515625f, -0.0390625f,  0.0703125f,
                                      0.03125f,     0.017578125f, -0.03125f,   -0.0126953125f};
    static const uint8_t fp4_row[8] = {0xa0, 0xa8, 0xec, 0x4a, 0xad, 0xaf, 0x42, 0xaa};
    static const float fp4_want[16] = {0,        -0.0078125f, 0,          -0.0078125f, -0.015625f, -0.03125f,
                                       -0.0078125f, 0.015625f, -0.0234375f, -0.0078125f, -0.046875f, -0.0078125f,
                                       0.0078125f,  0.015625f, -0.0078125f, -0.0078125f};
    /* FP8 [1, 32] + scale [1, 1]; FP4 [1, 32 cols] = I8 [1, 16] + scale [1, 1] */
    const char *hdr = "{\"a.weight\":{\"dtype\":\"F8_E4M3\",\"shape\":[1,32],\"data_offsets\":[0,32]},"
                      "\"a.scale\":{\"dtype\":\"F8_E8M0\",\"shape\":[1,1],\"data_offsets\":[32,33]},"
                      "\"b.weight\":{\"dtype\":\"I8\",\"shape\":[1,16],\"data_offsets\":[33,49]},"
                      "\"b.scale\":{\"dtype\":\"F8_E8M0\",\"shape\":[1,1],\"data_offsets\":[49,50]},"
                      "\"c.weight\":{\"dtype\":\"F8_E4M3\",\"shape\":[1,32],\"data_offsets\":[50,82]},"
                      "\"c.scale\":{\"dtype\":\"F8_E8M0\",\"shape\":[1,1],\"data_offsets\":[82,83]}}";
    size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8;
    uint8_t file[1024] = {0};
    for (int i = 0; i < 8; i++) file[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    memcpy(file + 8, hdr, hl);
    memset(file + 8 + hl, ' ', padded - hl);
    uint8_t *d = file + 8 + padded;
    memcpy(d, fp8_row, 8);
    d[32] = 0x73; /* 2^-12 */
    memcpy(d + 33, fp4_row, 8);
    d[49] = 0x78; /* 2^-7 */
    d[50] = 0x01; /* c: E4M3 subnormal 2^-9 with scale byte 0 (2^-127): 2^-136, an fp32 but no bf16 value */
    d[82] = 0x00;
    char dir[300], path[400];
    snprintf(dir, sizeof dir, "%s-bytes", work);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(di_make_dirs(dir) == 0 && di_write_file_atomic(path, file, 8 + padded + 83) == 0);
    DiCheckpoint *ck = di_checkpoint_open(dir, NULL);
    CHECK_MSG(ck != NULL, "%s", di_error_message());
    DiMatrix m;
    float row[32];
    if (ck && di_checkpoint_matrix(ck, "a.weight", 1, 32, &m) == 0 && di_matrix_row(&m, 0, row) == 0)
        for (int i = 0; i < 8; i++) CHECK_NEAR(row[i], fp8_want[i], 0);
    else
        CHECK_MSG(0, "%s", di_error_message());
    if (ck && di_checkpoint_matrix(ck, "b.weight", 1, 32, &m) == 0 && di_matrix_row(&m, 0, row) == 0)
        for (int i = 0; i < 16; i++) CHECK_NEAR(row[i], fp4_want[i], 0);
    else
        CHECK_MSG(0, "%s", di_error_message());
    CHECK(!signbit(fp4_want[2]) && signbit(row[2])); /* the third value is -0 (§3.10) */
    DiOwnedMatrix conv;
    CHECK(ck && di_checkpoint_matrix_as(ck, "c.weight", 1, 32, DI_MAT_BF16, &conv) == -1);
    CHECK_MSG(strstr(di_error_message(), "'c.weight' element [0, 0]") && strstr(di_error_message(), "BF16"), "%s",
              di_error_message());
    CHECK(ck && di_checkpoint_matrix_as(ck, "c.weight", 1, 32, DI_MAT_F32, &conv) == 0);
    if (conv.owned) CHECK_EQ_INT(((const float *)conv.m.data)[0] == ldexpf(1.0f, -136), 1);
    di_owned_matrix_free(&conv);
    di_checkpoint_close(ck);
    unlink(path);
    rmdir(dir);
}

static void cleanup(void) {
    const char *names[] = {"config.json", SHARD1, SHARD2, INDEX};
    for (int i = 0; i < 4; i++) unlink(work_path(names[i]));
    rmdir(work);
}

int main(void) {
    di_log_set_level(DI_LOG_ERROR); /* the corrupt copies would otherwise log warnings */
    snprintf(golden, sizeof golden, "%s/golden-v41/tiny-a/checkpoint", test_shared_dir());
    snprintf(work, sizeof work, "/tmp/di_test_checkpoint_%d", (int)getpid());
    if (di_make_dirs(work) < 0) {
        fprintf(stderr, "%s\n", di_error_message());
        return 1;
    }
    RUN_TEST(open_golden_with_config);
    RUN_TEST(accessor_mismatches_name_file_and_tensor);
    RUN_TEST(load_time_conversions);
    RUN_TEST(corrupted_copies);
    RUN_TEST(unknown_tensor_is_a_warning);
    RUN_TEST(single_file_checkpoint);
    RUN_TEST(inventory_counts);
    RUN_TEST(release_byte_vectors);
    cleanup();
    return TEST_SUMMARY();
}
