/* test_tiny.c — make-tiny output: the presets' configs against the §9.2 transcription
 * (tests/data/model/tiny-config.json), the written checkpoint loading through the config +
 * checkpoint readers with zero warnings and the full §3.6 inventory, determinism per seed,
 * value ranges that keep activations O(1) (§9.6), and the built-in model cache. */
#include "test.h"

#include "deepinfer.h"

#include "base/error.h"
#include "base/file.h"
#include "base/json.h"
#include "base/log.h"
#include "kernels/matmul.h"
#include "kernels/numformats.h"
#include "model/checkpoint.h"
#include "model/checkpoint_inventory.h"
#include "model/tiny.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char base[256];

static const char *files[] = {"config.json",
                              "tokenizer.json",
                              "engram_token_map.json",
                              "model.safetensors.index.json",
                              "model-00001-of-00002.safetensors",
                              "model-00002-of-00002.safetensors"};
#define N_FILES (sizeof files / sizeof files[0])

static void rm_dir(const char *dir) {
    for (size_t i = 0; i < N_FILES; i++) {
        char *p = di_path_join(dir, files[i]);
        unlink(p);
        free(p);
    }
    rmdir(dir);
}

static char *dir_for(const char *name) {
    static char buf[4][400];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", base, name);
    return buf[k];
}

static int same_file(const char *a_dir, const char *b_dir, const char *name) {
    char *a = di_path_join(a_dir, name), *b = di_path_join(b_dir, name), *da = NULL, *db = NULL;
    size_t na = 0, nb = 0;
    int same = di_read_file(a, &da, &na) == 0 && di_read_file(b, &db, &nb) == 0 && na == nb && memcmp(da, db, na) == 0;
    free(a), free(b), free(da), free(db);
    return same;
}

TEST(preset_configs_match_spec) {
    /* spec9 must be §9.2 value for value; tiny differs only in vocab_size, the image and noise ids
     * and the compressed vocabulary of its tokenizer (tiny.h). */
    json_t *spec = di_json_load_file("tests/data/model/tiny-config.json");
    const char *text = di_tiny_config_json("spec9");
    json_t *spec9 = text ? json_loads(text, 0, NULL) : NULL;
    CHECK(spec && spec9 && json_equal(spec, spec9));
    json_t *tiny = json_loads(di_tiny_config_json("tiny"), 0, NULL);
    CHECK(tiny != NULL);
    if (spec && tiny) {
        json_t *t = json_object_get(tiny, "text_config");
        CHECK_EQ_INT(json_integer_value(json_object_get(t, "vocab_size")), DI_TINY_VOCAB);
        CHECK_EQ_INT(json_integer_value(json_object_get(tiny, "image_token_id")), DI_TINY_TOK_IMAGE);
        CHECK_EQ_INT(json_integer_value(json_object_get(t, "dspark_noise_token_id")), DI_TINY_TOK_SYSTEM);
        json_t *copy = json_deep_copy(spec), *ct = json_object_get(copy, "text_config");
        json_object_set_new(ct, "vocab_size", json_integer(DI_TINY_VOCAB));
        json_object_set_new(ct, "dspark_noise_token_id", json_integer(DI_TINY_TOK_SYSTEM));
        json_object_set_new(ct, "engram_compressed_vocab_size", json_integer(DI_TINY_COMPRESSED_VOCAB));
        json_object_set_new(copy, "image_token_id", json_integer(DI_TINY_TOK_IMAGE));
        CHECK(json_equal(copy, tiny));
        json_decref(copy);
    }
    CHECK(di_tiny_config_json("huge") == NULL);
    CHECK_MSG(strstr(di_error_message(), "unknown preset 'huge'"), "%s", di_error_message());
    json_decref(spec), json_decref(spec9), json_decref(tiny);
}

TEST(medium_preset_shape) {
    json_t *root = json_loads(di_tiny_config_json("medium"), 0, NULL);
    DiModelConfig c;
    int rc = di_config_parse_json(root, &c);
    CHECK_MSG(rc == 0, "%s", di_error_message());
    if (rc == 0) {
        CHECK(c.hidden_size >= 1024 && c.n_routed_experts >= 64);
        /* medium writes the tiny tokenizer: same vocabulary and compressed map */
        CHECK_EQ_INT(c.vocab_size, DI_TINY_VOCAB);
        CHECK_EQ_INT(c.engram_compressed_vocab_size, DI_TINY_COMPRESSED_VOCAB);
        DiInventory inv;
        CHECK(di_inventory_build(&c, &inv) == 0);
        CHECK_MSG(inv.total_bytes > 200000000 && inv.total_bytes < 1000000000, "%lld", (long long)inv.total_bytes);
        di_inventory_free(&inv);
        di_config_free(&c);
    }
    json_decref(root);
}

/* The written tiny checkpoint: loads with zero warnings, every inventory tensor bound. */
TEST(tiny_loads_cleanly) {
    const char *dir = dir_for("a");
    CHECK_MSG(di_tiny_write(dir, "tiny", 7, 0) == 0, "%s", di_error_message());
    DiModelConfig cfg;
    CHECK_MSG(di_config_load(dir, &cfg) == 0, "%s", di_error_message());
    DiCheckpoint *ck = di_checkpoint_open(dir, &cfg);
    CHECK_MSG(ck != NULL, "%s", di_error_message());
    if (!ck) return;
    CHECK_EQ_INT(di_checkpoint_n_warnings(ck), 0);
    CHECK_EQ_INT(di_checkpoint_n_tensors(ck), 809);
    CHECK_EQ_INT(di_checkpoint_n_files(ck), 2);
    /* Bind every tensor of the inventory through the checked accessors: nothing left unused. */
    DiInventory inv;
    CHECK(di_inventory_build(&cfg, &inv) == 0);
    for (size_t i = 0; i < inv.n; i++) {
        const DiInventoryEntry *e = &inv.entries[i];
        DiMatrix m;
        const void *v;
        int r = 0;
        if (e->kind == DI_INV_FP8_WEIGHT || e->kind == DI_INV_FP4_WEIGHT)
            r = di_checkpoint_matrix(ck, e->name, e->shape[0], e->fan_in, &m);
        else if (e->kind == DI_INV_ENGRAM_TABLE) {
            const uint8_t *a, *b;
            char prefix[96];
            snprintf(prefix, sizeof prefix, "%.*s", (int)(strlen(e->name) - 7), e->name);
            r = di_checkpoint_engram_table(ck, prefix, e->shape[0], e->shape[1], &a, &b);
        } else if (e->kind != DI_INV_FP8_SCALE && e->kind != DI_INV_FP4_SCALE && e->kind != DI_INV_ENGRAM_SCALE)
            r = di_checkpoint_tensor(ck, e->name, e->dtype, e->ndim, e->shape, &v);
        CHECK_MSG(r == 0, "%s: %s", e->name, di_error_message());
    }
    CHECK_EQ_INT(di_checkpoint_report_unused(ck, true), 0);
    di_inventory_free(&inv);
    di_checkpoint_close(ck);
    di_config_free(&cfg);
}

/* The shipped §5.2 (a) map: values dense in [0, C) with C = the config's compressed vocabulary,
 * and written next to the tokenizer. */
TEST(engram_token_map) {
    const int32_t *map;
    int64_t n;
    CHECK(di_tiny_engram_token_map(&map, &n) == 0);
    CHECK_EQ_INT(n, DI_TINY_VOCAB);
    int next = 0, ok = 1;
    for (int64_t t = 0; t < n; t++) {
        if (map[t] < 0 || map[t] > next) ok = 0; /* first appearance order */
        if (map[t] == next) next++;
    }
    CHECK(ok);
    CHECK_EQ_INT(next, DI_TINY_COMPRESSED_VOCAB);
    CHECK_EQ_INT(map[DI_TINY_TOK_PAD], 2); /* engram_pad_token_id 2 keeps id 2 */
    DiModelConfig c;
    CHECK(di_config_load(dir_for("a"), &c) == 0);
    CHECK_EQ_INT(c.engram_compressed_vocab_size, DI_TINY_COMPRESSED_VOCAB);
    di_config_free(&c);
    char *path = di_path_join(dir_for("a"), "engram_token_map.json");
    json_t *root = di_json_load_file(path);
    free(path);
    CHECK(root != NULL);
    json_t *list = json_object_get(root, "token_map");
    CHECK_EQ_INT(json_array_size(list), DI_TINY_VOCAB);
    CHECK_EQ_INT(json_integer_value(json_object_get(root, "compressed_vocab_size")), DI_TINY_COMPRESSED_VOCAB);
    for (size_t t = 0; t < json_array_size(list); t++)
        if (json_integer_value(json_array_get(list, t)) != map[t]) {
            CHECK_MSG(0, "token_map[%zu] differs", t);
            break;
        }
    json_decref(root);
}

TEST(determinism) {
    const char *a = dir_for("a"), *b = dir_for("b"), *c = dir_for("c");
    CHECK(di_tiny_write(b, "tiny", 7, 0) == 0);
    CHECK(di_tiny_write(c, "tiny", 8, 0) == 0);
    for (size_t i = 0; i < N_FILES; i++) CHECK_MSG(same_file(a, b, files[i]), "%s differs for the same seed", files[i]);
    CHECK(same_file(a, c, "config.json") && same_file(a, c, "tokenizer.json"));
    CHECK(!same_file(a, c, "model-00001-of-00002.safetensors"));
    CHECK(!same_file(a, c, "model-00002-of-00002.safetensors"));
    rm_dir(b);
    rm_dir(c);
}

static double rms(const float *x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s / (double)n);
}

/* §9.6: weights scaled so that a unit-RMS input gives a unit-order output through every
 * projection kind (FP8 blocks, FP4 experts, BF16), and E4M3 codes are never NaN. */
TEST(values_keep_activations_order_one) {
    DiCheckpoint *ck = di_checkpoint_open(dir_for("a"), NULL);
    CHECK(ck != NULL);
    if (!ck) return;
    struct {
        const char *name;
        int64_t rows, cols;
    } mats[] = {{"layers.0.attn.wq_a.weight", 160, 96},       {"layers.3.attn.wq_b.weight", 256, 160},
                {"layers.5.ffn.experts.3.w1.weight", 32, 96}, {"layers.5.ffn.experts.3.w2.weight", 96, 32},
                {"layers.1.engram.wkv.weight", 480, 192},     {"head.weight", DI_TINY_VOCAB, 96},
                {"mtp.0.main_proj.weight", 96, 288},          {"layers.2.attn.compressor.wkv.weight", 64, 96}};
    float x[288], y[480];
    for (int i = 0; i < 288; i++) x[i] = (i % 2 ? 1.0f : -1.0f) * (float)(0.5 + (i % 7) / 6.0); /* RMS ~ 1 */
    for (size_t k = 0; k < sizeof mats / sizeof mats[0]; k++) {
        DiMatrix m;
        int rc = di_checkpoint_matrix(ck, mats[k].name, mats[k].rows, mats[k].cols, &m);
        CHECK_MSG(rc == 0, "%s", di_error_message());
        if (rc) continue;
        CHECK(di_matmul_ref(&m, x, 1, y) == 0);
        double in_rms = rms(x, mats[k].cols), out_rms = rms(y, mats[k].rows);
        CHECK_MSG(out_rms > 0.3 * in_rms && out_rms < 3 * in_rms, "%s: output RMS %.3f for input RMS %.3f",
                  mats[k].name, out_rms, in_rms);
        if (m.format == DI_MAT_FP8_BLOCK) {
            const uint8_t *codes = m.data;
            for (int64_t i = 0; i < m.rows * m.cols; i++)
                if ((codes[i] & 0x7F) == 0x7F) {
                    CHECK_MSG(0, "%s: NaN code at %lld", mats[k].name, (long long)i);
                    break;
                }
        }
    }
    const void *v;
    CHECK(di_checkpoint_vector(ck, "layers.0.attn_norm.weight", 96, DI_DTYPE_BF16, &v) == 0);
    double mean = 0;
    for (int i = 0; i < 96; i++) mean += di_bf16_to_f32(((const uint16_t *)v)[i]) / 96.0;
    CHECK_NEAR(mean, 1.0, 0.1);
    di_checkpoint_close(ck);
}

TEST(builtin_model_cache) {
    char dir[512];
    const char *old_xdg = getenv("XDG_CACHE_HOME");
    char *saved = old_xdg ? strdup(old_xdg) : NULL;
    setenv("XDG_CACHE_HOME", base, 1);
    CHECK(di_tiny_default_dir(dir, sizeof dir) == 0);
    char want[512];
    snprintf(want, sizeof want, "%s/deepinfer/tiny-v41", base);
    CHECK_STR(dir, want);
    unsetenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    if (home && *home) {
        char d2[512];
        CHECK(di_tiny_default_dir(d2, sizeof d2) == 0);
        snprintf(want, sizeof want, "%s/.cache/deepinfer/tiny-v41", home);
        CHECK_STR(d2, want);
    }
    char small[8];
    setenv("XDG_CACHE_HOME", base, 1);
    CHECK(di_tiny_default_dir(small, sizeof small) == -1);

    char via_api[512];
    CHECK_MSG(di_builtin_model_dir(via_api, sizeof via_api) == 0, "%s", di_error_message()); /* deepinfer.h */
    CHECK_STR(via_api, dir);
    struct stat st1, st2;
    char *cfg = di_path_join(dir, "config.json");
    CHECK(stat(cfg, &st1) == 0);
    CHECK(same_file(dir, dir_for("a"), "tokenizer.json"));
    CHECK_MSG(di_tiny_ensure(dir) == 0, "%s", di_error_message()); /* reused, not rewritten */
    CHECK(stat(cfg, &st2) == 0 && st1.st_ino == st2.st_ino && st1.st_mtime == st2.st_mtime);
    DiModelConfig c;
    CHECK(di_config_load(dir, &c) == 0);
    DiCheckpoint *ck = di_checkpoint_open(dir, &c);
    CHECK(ck && di_checkpoint_n_warnings(ck) == 0);
    di_checkpoint_close(ck);
    di_config_free(&c);

    /* A complete cache written by an older build (a tokenizer without ｜DSML｜, as before the
     * tool tokens) is regenerated, not used. */
    char *tok_path = di_path_join(dir, "tokenizer.json");
    json_t *tok = di_json_load_file(tok_path);
    json_t *added = json_object_get(tok, "added_tokens");
    size_t before = json_array_size(added);
    for (size_t i = 0; i < json_array_size(added); i++)
        if (strcmp(json_string_value(json_object_get(json_array_get(added, i), "content")), "｜DSML｜") == 0)
            json_array_remove(added, i--);
    CHECK_EQ_INT(json_array_size(added), before - 1);
    CHECK(tok && json_dump_file(tok, tok_path, 0) == 0);
    json_decref(tok);
    CHECK(!same_file(dir, dir_for("a"), "tokenizer.json"));
    CHECK_MSG(di_tiny_ensure(dir) == 0, "%s", di_error_message());
    CHECK(same_file(dir, dir_for("a"), "tokenizer.json"));
    /* the same for a config of another vocabulary */
    json_t *conf = di_json_load_file(cfg);
    CHECK(conf && json_object_set_new(json_object_get(conf, "text_config"), "vocab_size", json_integer(291)) == 0);
    CHECK(conf && json_dump_file(conf, cfg, 0) == 0);
    json_decref(conf);
    CHECK_MSG(di_tiny_ensure(dir) == 0, "%s", di_error_message());
    CHECK(same_file(dir, dir_for("a"), "config.json"));
    free(tok_path);
    free(cfg);
    rm_dir(dir);
    char parent[512];
    snprintf(parent, sizeof parent, "%s/deepinfer", base);
    rmdir(parent);
    if (saved)
        setenv("XDG_CACHE_HOME", saved, 1);
    else
        unsetenv("XDG_CACHE_HOME");
    free(saved);
    CHECK(di_tiny_ensure(NULL) == -1);
    CHECK(di_tiny_write(NULL, "tiny", 1, 0) == -1);
    CHECK(di_tiny_write(dir_for("z"), "nope", 1, 0) == -1);
}

int main(void) {
    di_log_set_level(DI_LOG_ERROR);
    snprintf(base, sizeof base, "/tmp/di_test_tiny_%d", (int)getpid());
    if (di_make_dirs(base) < 0) return 1;
    RUN_TEST(preset_configs_match_spec);
    RUN_TEST(medium_preset_shape);
    RUN_TEST(tiny_loads_cleanly);
    RUN_TEST(engram_token_map);
    RUN_TEST(determinism);
    RUN_TEST(values_keep_activations_order_one);
    RUN_TEST(builtin_model_cache);
    rm_dir(dir_for("a"));
    rmdir(base);
    return TEST_SUMMARY();
}
