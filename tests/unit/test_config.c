/* test_config.c — config.json parsing, derivation (§2.5), validation (§2.6) and layer roles (§2.7)
 * against independent references: the golden tiny-a config (golden-v41/README.md §3), the §9 tiny
 * config and the release config transcribed from model-v41.md §1–§2 (tests/data/model/), with the
 * expected values (primes, offsets, roles, state bytes) copied from the spec tables, and one
 * mutation per validation rule whose error must name the offending field. */
#include "test.h"

#include "base/error.h"
#include "base/json.h"
#include "model/config.h"

#include <stdio.h>
#include <string.h>

#define TINY_JSON "tests/data/model/tiny-config.json"
#define RELEASE_JSON "tests/data/model/release-config.json"

static char golden_dir[512];

static void check_list(const int64_t *got, size_t n_got, const int64_t *want, size_t n_want, const char *what) {
    CHECK_MSG(n_got == n_want, "%s: %zu entries, want %zu", what, n_got, n_want);
    for (size_t i = 0; i < n_got && i < n_want; i++)
        CHECK_MSG(got[i] == want[i], "%s[%zu] = %lld, want %lld", what, i, (long long)got[i], (long long)want[i]);
}

/* Expected role of one layer: role, kv source, index source, pool. */
static void check_layer(const DiModelConfig *c, int i, DiLayerRole role, int kv, int idx, bool pool) {
    const DiLayerPlan *L = &c->layers[i];
    CHECK_MSG(L->role == role, "layer %d role %s, want %s", i, di_layer_role_name(L->role), di_layer_role_name(role));
    CHECK_MSG(L->kv_source == kv, "layer %d kv_source %d, want %d", i, L->kv_source, kv);
    CHECK_MSG(L->index_source == idx, "layer %d index_source %d, want %d", i, L->index_source, idx);
    CHECK_MSG(L->uses_candidate_pool == pool, "layer %d uses_candidate_pool %d", i, L->uses_candidate_pool);
}

TEST(golden_tiny_a_config) {
    DiModelConfig c;
    int rc = di_config_load(golden_dir, &c);
    CHECK_MSG(rc == 0, "%s", di_error_message());
    if (rc) return;
    CHECK_EQ_INT(c.vocab_size, 1024);
    CHECK_EQ_INT(c.hidden_size, 128);
    CHECK_EQ_INT(c.n_layers, 12);
    CHECK_EQ_INT(c.n_total_layers, 15);
    CHECK_EQ_INT(c.q_lora_rank, 64);
    CHECK_EQ_INT(c.o_lora_rank, 32);
    CHECK_EQ_INT(c.sliding_window, 16);
    CHECK_EQ_INT(c.index_n_heads, 8);
    CHECK_EQ_INT(c.index_topk, 8);
    CHECK_EQ_INT(c.candidate_source, 6);
    CHECK_EQ_INT(c.image_token_id, 1022);
    CHECK_EQ_INT(c.max_position_embeddings, 4096);
    CHECK_EQ_INT(c.original_max_position_embeddings, 65536);
    CHECK_NEAR(c.rope_factor, 16, 0);
    CHECK_NEAR(c.rms_norm_eps, 1e-20, 1e-30);
    CHECK_NEAR(c.gate_temp, 1.0, 0); /* absent => 1.0 (§2.3) */
    CHECK(!c.vision.present);
    CHECK_STR(c.quant_fmt, "e4m3");
    /* golden README §3 roles */
    check_layer(&c, 0, DI_ROLE_WINDOW, -1, -1, false);
    check_layer(&c, 1, DI_ROLE_WINDOW, -1, -1, false);
    check_layer(&c, 2, DI_ROLE_FULL, 2, 2, false);
    check_layer(&c, 3, DI_ROLE_REUSE, 2, 2, false);
    check_layer(&c, 4, DI_ROLE_FULL, 4, 4, false);
    check_layer(&c, 5, DI_ROLE_REUSE, 4, 4, false);
    check_layer(&c, 6, DI_ROLE_FULL, 6, 6, false);
    check_layer(&c, 7, DI_ROLE_REUSE, 6, 6, false);
    check_layer(&c, 8, DI_ROLE_REUSE, 6, 6, false);
    check_layer(&c, 9, DI_ROLE_REINDEX, 6, 9, true);
    check_layer(&c, 10, DI_ROLE_REUSE, 6, 9, false);
    check_layer(&c, 11, DI_ROLE_REUSE, 6, 9, false);
    CHECK(c.layers[6].is_candidate_source);
    /* CED: midpoint 12 / 2 = 6, the candidate source; encoder 0-5, decoder 6-11, stages neither */
    for (int i = 0; i < 15; i++) {
        CHECK_MSG(di_layer_is_decoder(&c.layers[i]) == (i >= 6 && i < 12), "layer %d decoder", i);
        CHECK_MSG(c.layers[i].stack == (i < 6 ? DI_STACK_ENCODER : i < 12 ? DI_STACK_DECODER : DI_STACK_DRAFT), "layer %d", i);
    }
    /* KV sources 2, 4, 6 get dense slots 0, 1, 2 in layer order; nothing else has one */
    for (int i = 0; i < 15; i++) CHECK_EQ_INT(c.layers[i].kv_slot, i == 2 ? 0 : i == 4 ? 1 : i == 6 ? 2 : -1);
    CHECK(c.layers[2].has_compressor_gate && c.layers[4].has_compressor_gate && !c.layers[6].has_compressor_gate);
    CHECK_EQ_INT(c.layers[1].engram_slot, 0);
    CHECK_EQ_INT(c.layers[4].engram_slot, 1);
    CHECK_EQ_INT(c.layers[9].dspark_tap_slot, 0);
    CHECK_EQ_INT(c.layers[11].dspark_tap_slot, 2);
    for (int s = 0; s < 3; s++) {
        const DiLayerPlan *L = &c.layers[12 + s];
        CHECK(di_layer_is_draft(L) && L->draft_stage == s && L->role == DI_ROLE_WINDOW);
        CHECK_EQ_INT(L->n_routed_experts, 4);
        CHECK_EQ_INT(L->n_experts_per_tok, 2);
    }
    CHECK_EQ_INT(c.layers[0].n_routed_experts, 8);
    CHECK(c.layers[2].rope_compress && !c.layers[1].rope_compress);
    /* Primes restart at engram_vocab_size - 1 = 60 per (layer, order); rows 272 and 348 (§5.2 e). */
    static const int64_t primes[] = {61, 67, 71, 73, 79, 83, 89, 97};
    static const int64_t offsets[] = {0, 61, 128, 199, 0, 79, 162, 251};
    CHECK_EQ_INT(c.engram_n_columns, 4);
    check_list(c.engram_primes, 8, primes, 8, "engram_primes");
    check_list(c.engram_offsets, 8, offsets, 8, "engram_offsets");
    di_config_free(&c);
}

/* golden.bin arrays (golden-v41/README.md §5) named in golden.json: i64, read by offset. */
static int read_golden_i64(const char *name, int64_t *out, size_t n) {
    char path[600];
    snprintf(path, sizeof path, "%s/golden-v41/tiny-a/golden.json", test_shared_dir());
    json_t *root = di_json_load_file(path);
    if (!root) return -1;
    json_t *a = json_object_get(json_object_get(root, "arrays"), name);
    int64_t off = json_integer_value(json_object_get(a, "offset")),
            nb = json_integer_value(json_object_get(a, "nbytes"));
    json_decref(root);
    if (!a || nb != (int64_t)(n * 8)) return -1;
    snprintf(path, sizeof path, "%s/golden-v41/tiny-a/golden.bin", test_shared_dir());
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    int ok = fseek(f, (long)off, SEEK_SET) == 0 && fread(out, 8, n, f) == n; /* little-endian host */
    fclose(f);
    return ok ? 0 : -1;
}

TEST(golden_engram_arrays) {
    /* The golden's engram.hash_multipliers / primes / offsets (computed by the golden generator
     * with numpy) against the config's derived values, layer-major. */
    DiModelConfig c;
    if (di_config_load(golden_dir, &c) < 0) {
        CHECK_MSG(0, "%s", di_error_message());
        return;
    }
    int64_t mult[6], primes[8], offsets[8];
    CHECK(read_golden_i64("engram.hash_multipliers", mult, 6) == 0);
    CHECK(read_golden_i64("engram.hash_primes", primes, 8) == 0);
    CHECK(read_golden_i64("engram.hash_offsets", offsets, 8) == 0);
    check_list(c.engram_multipliers, 6, mult, 6, "multipliers");
    check_list(c.engram_primes, 8, primes, 8, "primes");
    check_list(c.engram_offsets, 8, offsets, 8, "offsets");
    di_config_free(&c);
}

TEST(release_and_tiny_multipliers) {
    /* §5.2 (d) table and §9.3 values */
    static const int64_t l1[] = {76632096046245, 4839876093313, 35959672319349, 73987337458391};
    static const int64_t l14[] = {67716810739261, 51510806800915, 30921347202721, 82619226485591};
    static const int64_t tiny[] = {59325216104801821, 3746820326864245, 27838405073976279, 57277759714273633};
    int64_t m[4];
    CHECK(di_engram_hash_multipliers(1, 99092, 4, m) == 0);
    check_list(m, 4, l1, 4, "layer 1");
    CHECK(di_engram_hash_multipliers(14, 99092, 4, m) == 0);
    check_list(m, 4, l14, 4, "layer 14");
    CHECK(di_engram_hash_multipliers(1, 128, 4, m) == 0);
    check_list(m, 4, tiny, 4, "tiny layer 1");
    /* a vocabulary of 2^40 takes numpy's 32-bit draw path; values from numpy 1.26/2.x */
    static const int64_t wide[] = {1258255, 6906363, 5200569, 436187};
    CHECK(di_engram_hash_multipliers(1, (int64_t)1 << 40, 4, m) == 0);
    check_list(m, 4, wide, 4, "32-bit path");
    CHECK(di_engram_hash_multipliers(1, 128, 0, m) == -1);
    DiModelConfig c;
    CHECK(di_config_load(RELEASE_JSON, &c) == 0);
    check_list(c.engram_multipliers, 4, l1, 4, "release config layer 1");
    check_list(c.engram_multipliers + 4, 4, l14, 4, "release config layer 14");
    di_config_free(&c);
}

TEST(tiny_spec_config) {
    DiModelConfig c;
    int rc = di_config_load(TINY_JSON, &c);
    CHECK_MSG(rc == 0, "%s", di_error_message());
    if (rc) return;
    CHECK_EQ_INT(c.n_total_layers, 11);
    check_layer(&c, 2, DI_ROLE_FULL, 2, 2, false);
    check_layer(&c, 3, DI_ROLE_REUSE, 2, 2, false);
    check_layer(&c, 4, DI_ROLE_FULL, 4, 4, false);
    check_layer(&c, 5, DI_ROLE_REUSE, 4, 4, false);
    check_layer(&c, 6, DI_ROLE_REINDEX, 4, 6, true);
    check_layer(&c, 7, DI_ROLE_REUSE, 4, 6, false);
    CHECK(c.vision.present && c.vision.num_hidden_layers == 0);
    /* §9.3: primes 53, 59; 61, 67; 71, 73; offsets 0, 53, 112, 173, 240, 311 */
    static const int64_t primes[] = {53, 59, 61, 67, 71, 73}, offsets[] = {0, 53, 112, 173, 240, 311};
    check_list(c.engram_primes, (size_t)c.engram_n_columns, primes, 6, "primes");
    check_list(c.engram_offsets, (size_t)c.engram_n_columns, offsets, 6, "offsets");
    CHECK_EQ_INT(c.layers[8].n_routed_experts, 4);
    CHECK_EQ_INT(c.layers[8].n_experts_per_tok, 3);
    di_config_free(&c);
}

TEST(release_config) {
    DiModelConfig c;
    int rc = di_config_load(RELEASE_JSON, &c);
    CHECK_MSG(rc == 0, "%s", di_error_message());
    if (rc) return;
    CHECK_EQ_INT(c.n_total_layers, 43);
    CHECK(c.vision.present && c.vision.num_hidden_layers == 32 && c.vision.max_wh_ratio < 0);
    /* §2.7 role table */
    int full[] = {2, 8, 14, 20}, reindex[] = {24, 28, 32, 36};
    for (int i = 0; i < 4; i++) CHECK_MSG(c.layers[full[i]].role == DI_ROLE_FULL, "layer %d", full[i]);
    for (int i = 0; i < 4; i++) {
        CHECK_MSG(c.layers[reindex[i]].role == DI_ROLE_REINDEX, "layer %d", reindex[i]);
        CHECK_EQ_INT(c.layers[reindex[i]].kv_source, 20);
        CHECK(c.layers[reindex[i]].uses_candidate_pool);
    }
    check_layer(&c, 13, DI_ROLE_REUSE, 8, 8, false);
    /* §1: layers 0-19 causal encoder, 20-39 decoder; layer 20 is the decoder's only KV source */
    for (int i = 0; i < 43; i++) CHECK_MSG(di_layer_is_decoder(&c.layers[i]) == (i >= 20 && i < 40), "layer %d", i);
    CHECK(c.layers[20].is_kv_source && c.layers[20].is_candidate_source && c.layers[20].kv_slot == 3);
    for (int i = 21; i < 40; i++) CHECK_MSG(!c.layers[i].is_kv_source && c.layers[i].kv_source == 20, "layer %d", i);
    check_layer(&c, 23, DI_ROLE_REUSE, 20, 20, false);
    check_layer(&c, 39, DI_ROLE_REUSE, 20, 36, false);
    CHECK(!c.layers[20].has_compressor_gate && c.layers[14].has_compressor_gate);
    CHECK_EQ_INT(c.layers[14].engram_slot, 1);
    /* §5.2 (e) release primes (first and last of each row) and offsets */
    CHECK_EQ_INT(c.engram_n_columns, 24);
    CHECK_EQ_INT(c.engram_primes[0], 16000057);
    CHECK_EQ_INT(c.engram_primes[7], 16000183);
    CHECK_EQ_INT(c.engram_primes[8], 16000189);
    CHECK_EQ_INT(c.engram_primes[23], 16000463);
    CHECK_EQ_INT(c.engram_primes[24], 16000477);
    CHECK_EQ_INT(c.engram_primes[47], 16000889);
    CHECK_EQ_INT(c.engram_offsets[23], 368005705);
    CHECK_EQ_INT(c.engram_offsets[24 + 23], 368015793);
    /* §6: fixed per request 2,703,360 + 12,288 + 202,752 packed; REF 5,242,880 + 24,576 + 393,216;
     * global KV 890 B/token packed, 3200 B/token REF (§6.2). */
    DiStateBytes s0, s1, r0, r1;
    CHECK(di_config_state_bytes(&c, 0, true, &s0) == 0 && di_config_state_bytes(&c, 1000, true, &s1) == 0);
    CHECK(di_config_state_bytes(&c, 0, false, &r0) == 0 && di_config_state_bytes(&c, 1000, false, &r1) == 0);
    CHECK_EQ_INT(s0.window_rings, 2703360);
    CHECK_EQ_INT(s0.pending_rows, 12288);
    CHECK_EQ_INT(s0.dspark_rings, 202752);
    CHECK_EQ_INT(r0.window_rings, 5242880);
    CHECK_EQ_INT(r0.pending_rows, 24576);
    CHECK_EQ_INT(r0.dspark_rings, 393216);
    CHECK_EQ_INT(s0.dspark_inputs, 30720);
    CHECK_EQ_INT(s1.compressed_kv + s1.index_keys, 890 * 1000);
    CHECK_EQ_INT(s1.compressed_kv, 720 * 1000);
    CHECK_EQ_INT(r1.compressed_kv + r1.index_keys, 3200 * 1000);
    CHECK_EQ_INT(s1.total - s0.total, 890 * 1000);
    di_config_free(&c);
}

/* ---- mutation helpers ---------------------------------------------------------------- */

static json_t *load_tiny(void) {
    json_t *root = di_json_load_file(TINY_JSON);
    CHECK_MSG(root != NULL, "%s", di_error_message());
    return root;
}

/* Set text_config[key] = value (JSON text; NULL deletes the key) on the tiny config; parse. */
static int parse_with(json_t *root, const char *key, const char *value) {
    json_t *t = json_object_get(root, "text_config");
    if (value) {
        json_error_t e;
        json_t *v = json_loads(value, JSON_DECODE_ANY, &e);
        if (!v) {
            fprintf(stderr, "bad test JSON %s\n", value);
            return 99;
        }
        json_object_set_new(t, key, v);
    } else {
        json_object_del(t, key);
    }
    DiModelConfig c;
    int rc = di_config_parse_json(root, &c);
    di_config_free(&c);
    return rc;
}

/* One mutation must fail with a message containing both substrings. */
static void expect_error(const char *key, const char *value, const char *want1, const char *want2, int line) {
    json_t *root = load_tiny();
    if (!root) return;
    int rc = parse_with(root, key, value);
    const char *msg = di_error_message();
    if (rc != -1 || !strstr(msg, want1) || (want2 && !strstr(msg, want2))) {
        fprintf(stderr, "  line %d: %s = %s: rc %d, message \"%s\" (want \"%s\"%s%s)\n", line, key,
                value ? value : "(deleted)", rc, msg, want1, want2 ? " and " : "", want2 ? want2 : "");
        test_current_failed = 1;
    }
    json_decref(root);
}
#define EXPECT_ERROR(key, value, w1, w2) expect_error(key, value, w1, w2, __LINE__)

TEST(hf_validation_rules) {
    EXPECT_ERROR("kv_source_layer_ids", "[2, 9]", "text_config.kv_source_layer_ids[1]", "9");
    EXPECT_ERROR("kv_source_layer_ids", "[1, 4]", "text_config.kv_source_layer_ids[0]", "ratio 0");
    EXPECT_ERROR("index_source_layer_ids", "[0, 2, 4, 6]", "text_config.index_source_layer_ids[0]", "ratio 0");
    /* KV [4], index [2,4,6]: 2 is an index source with no KV source before it. */
    json_t *root = load_tiny();
    json_object_set_new(json_object_get(root, "text_config"), "kv_source_layer_ids", json_pack("[i]", 4));
    CHECK(parse_with(root, "index_source_layer_ids", "[2, 4, 6]") == -1);
    CHECK_MSG(strstr(di_error_message(), "index_source_layer_ids[0]: 2 is not a KV source"), "%s", di_error_message());
    /* KV [4], index [4, 6]: layer 2 has ratio 2 and no KV source at or before it. */
    CHECK(parse_with(root, "index_source_layer_ids", "[4, 6]") == -1);
    CHECK_MSG(strstr(di_error_message(), "compress_ratios[2]") && strstr(di_error_message(), "no KV source"), "%s",
              di_error_message());
    json_decref(root);
    EXPECT_ERROR("candidate_source_layer_id", "5", "text_config.candidate_source_layer_id", "not an index source");
    EXPECT_ERROR("engram_num_embeddings", "[384, 10]", "text_config.engram_num_embeddings", "engram_layer_ids");
}

TEST(ref_validation_rules) {
    EXPECT_ERROR("index_source_layer_ids", "[2, 6]", "text_config.kv_source_layer_ids[1]", "not an index source");
    EXPECT_ERROR("compress_ratios", "[0,0,2,1,1,1,1,1,0,0,0]", "text_config.compress_ratios[3]", "KV source 2");
    EXPECT_ERROR("index_source_layer_ids", "[2, 6, 4]", "text_config.index_source_layer_ids[2]", "ascending");
    EXPECT_ERROR("index_source_layer_ids", "[2, 2, 4, 6]", "text_config.index_source_layer_ids[1]", "ascending");
    EXPECT_ERROR("candidate_source_layer_id", "2", "text_config.kv_source_layer_ids[1]", "after the candidate source");
    EXPECT_ERROR("num_key_value_heads", "2", "text_config.num_key_value_heads", "must be 1");
    EXPECT_ERROR("o_groups", "3", "text_config.o_groups", "not divisible");
    EXPECT_ERROR("qk_rope_head_dim", "15", "text_config.qk_rope_head_dim", "even");
    EXPECT_ERROR("qk_rope_head_dim", "48", "text_config.qk_rope_head_dim", "min(head_dim, index_head_dim) = 32");
    EXPECT_ERROR("head_dim", "80", "text_config.head_dim", "multiple of 32");
    EXPECT_ERROR("index_head_dim", "48", "text_config.index_head_dim", "multiple of 32");
    EXPECT_ERROR("engram_head_dim", "48", "text_config.engram_head_dim", "multiple of 32");
    EXPECT_ERROR("hidden_size", "100", "text_config.hidden_size", "multiple of 32");
    EXPECT_ERROR("q_lora_rank", "100", "text_config.q_lora_rank", "multiple of 32");
    EXPECT_ERROR("o_lora_rank", "40", "text_config.o_lora_rank", "multiple of 32");
    EXPECT_ERROR("moe_intermediate_size", "48", "text_config.moe_intermediate_size", "multiple of 32");
    EXPECT_ERROR("dspark_target_layer_ids", "[5, 6, 8]", "text_config.dspark_target_layer_ids[2]", "outside");
    EXPECT_ERROR("dspark_noise_token_id", "256", "text_config.dspark_noise_token_id", "vocab_size");
    EXPECT_ERROR("compress_ratios", "[0,0,2,2,1,1,1,1,0,1,0]", "text_config.compress_ratios[9]", "DSpark stage 1");
    EXPECT_ERROR("engram_num_embeddings", "[385]", "text_config.engram_num_embeddings[0]", "sum to 384");
    EXPECT_ERROR("candidate_topk_blocks", "1", "text_config.candidate_topk_blocks", "index_topk");
    EXPECT_ERROR("compress_ratios", "[0,0,2,2,1,1,1]", "text_config.compress_ratios", "7 entries");
    EXPECT_ERROR("compress_ratios", "[0,0,2,2,1,1,1,1,0,0,0,0]", "text_config.compress_ratios", "12 entries");
    EXPECT_ERROR("num_experts_per_tok", "9", "text_config.num_experts_per_tok", "n_routed_experts");
    EXPECT_ERROR("engram_pad_token_id", "256", "text_config.engram_pad_token_id", "vocab_size");
    /* a huge prime search start must answer at once (Miller-Rabin), with the row-count error */
    EXPECT_ERROR("engram_vocab_size", "1099511627776", "text_config.engram_num_embeddings[0]", "sum to 6597069767");
}

TEST(field_type_and_value_errors) {
    EXPECT_ERROR("hidden_size", "\"96\"", "text_config.hidden_size", "expected an integer, got a string");
    EXPECT_ERROR("hidden_size", NULL, "text_config.hidden_size", "required field is missing");
    EXPECT_ERROR("scoring_func", "\"softmax\"", "text_config.scoring_func", "softmax");
    EXPECT_ERROR("vocab_size", "0", "text_config.vocab_size", "out of range");
    EXPECT_ERROR("rms_norm_eps", "-1", "text_config.rms_norm_eps", "positive");
    EXPECT_ERROR("compress_ratios", "[0,0,\"2\"]", "text_config.compress_ratios[2]", "expected an integer");
    json_t *root = load_tiny();
    json_object_set_new(json_object_get(root, "quantization_config"), "weight_block_size",
                        json_pack("[i,i]", 128, 128));
    DiModelConfig c;
    CHECK(di_config_parse_json(root, &c) == -1);
    CHECK_MSG(strstr(di_error_message(), "quantization_config.weight_block_size"), "%s", di_error_message());
    json_object_set_new(json_object_get(root, "quantization_config"), "weight_block_size", json_pack("[i,i]", 32, 32));
    json_object_set_new(json_object_get(root, "quantization_config"), "quant_method", json_string("int8"));
    CHECK(di_config_parse_json(root, &c) == -1);
    CHECK_MSG(strstr(di_error_message(), "quantization_config.quant_method: \"int8\""), "%s", di_error_message());
    json_object_set_new(json_object_get(root, "quantization_config"), "quant_method", json_string("fp8"));
    json_object_set_new(root, "model_type", json_string("deepseek_v4"));
    CHECK(di_config_parse_json(root, &c) == -1);
    CHECK_MSG(strstr(di_error_message(), "model_type"), "%s", di_error_message());
    json_object_set_new(root, "model_type", json_string("deepseek_v41"));
    json_object_set_new(root, "image_token_id", json_integer(300));
    CHECK(di_config_parse_json(root, &c) == -1);
    CHECK_MSG(strstr(di_error_message(), "config.image_token_id: 300"), "%s", di_error_message());
    json_object_set_new(root, "image_token_id", json_integer(254));
    CHECK(di_config_parse_json(root, &c) == 0);
    di_config_free(&c);
    json_object_del(root, "text_config");
    CHECK(di_config_parse_json(root, &c) == -1);
    CHECK_MSG(strstr(di_error_message(), "text_config: required field is missing"), "%s", di_error_message());
    json_decref(root);
    CHECK(di_config_parse_json(NULL, &c) == -1);
    CHECK(di_config_parse_json(root, NULL) == -1);
}

TEST(pad_key_spellings) {
    /* §8 row 1: engram_pad_token_id (release) and engram_pad_id (REF/HF) mean the same. */
    json_t *root = load_tiny();
    json_t *t = json_object_get(root, "text_config");
    json_object_del(t, "engram_pad_token_id");
    json_object_set_new(t, "engram_pad_id", json_integer(7));
    DiModelConfig c;
    CHECK(di_config_parse_json(root, &c) == 0);
    CHECK_EQ_INT(c.engram_pad_token_id, 7);
    di_config_free(&c);
    json_object_del(t, "engram_pad_id");
    CHECK(di_config_parse_json(root, &c) == 0);
    CHECK_EQ_INT(c.engram_pad_token_id, 2); /* HF default */
    di_config_free(&c);
    json_decref(root);
}

/* §2.5 examples: n = 6 and n = 8 with every derivable list absent. */
static void derive_for(int n, const int64_t *ratios, const int64_t *kv, size_t n_kv, int64_t cand,
                       const int64_t *taps) {
    json_t *root = load_tiny();
    json_t *t = json_object_get(root, "text_config");
    const char *dels[] = {"compress_ratios", "kv_source_layer_ids", "index_source_layer_ids",
                          "candidate_source_layer_id", "dspark_target_layer_ids"};
    for (size_t i = 0; i < 5; i++) json_object_del(t, dels[i]);
    json_object_set_new(t, "num_hidden_layers", json_integer(n));
    DiModelConfig c;
    int rc = di_config_parse_json(root, &c);
    CHECK_MSG(rc == 0, "n=%d: %s", n, di_error_message());
    if (rc == 0) {
        check_list(c.compress_ratios, (size_t)c.n_total_layers, ratios, (size_t)n + 3, "ratios");
        check_list(c.kv_source_layer_ids, c.n_kv_sources, kv, n_kv, "kv");
        check_list(c.index_source_layer_ids, c.n_index_sources, kv, n_kv, "index");
        CHECK_EQ_INT(c.candidate_source, cand);
        check_list(c.dspark_target_layer_ids, c.n_dspark_targets, taps, 3, "taps");
    }
    di_config_free(&c);
    json_decref(root);
}

TEST(derivation_rules) {
    const int64_t r6[] = {0, 0, 2, 2, 1, 1, 0, 0, 0}, kv6[] = {2, 4}, taps6[] = {1, 3, 5};
    derive_for(6, r6, kv6, 2, 4, taps6);
    const int64_t r8[] = {0, 0, 2, 2, 2, 1, 1, 1, 0, 0, 0}, kv8[] = {2, 5}, taps8[] = {4, 6, 7};
    derive_for(8, r8, kv8, 2, 5, taps8);
    /* The release config without the lists derives the release lists (§2.5 rules 2, 3, 4, 5). */
    json_t *root = di_json_load_file(RELEASE_JSON);
    CHECK(root != NULL);
    if (!root) return;
    json_t *t = json_object_get(root, "text_config");
    const char *dels[] = {"compress_ratios", "kv_source_layer_ids", "index_source_layer_ids",
                          "candidate_source_layer_id", "dspark_target_layer_ids"};
    for (size_t i = 0; i < 5; i++) json_object_del(t, dels[i]);
    DiModelConfig c;
    int rc = di_config_parse_json(root, &c);
    CHECK_MSG(rc == 0, "%s", di_error_message());
    if (rc == 0) {
        const int64_t kv[] = {2, 8, 14, 20}, idx[] = {2, 8, 14, 20, 24, 28, 32, 36}, taps[] = {37, 38, 39};
        check_list(c.kv_source_layer_ids, c.n_kv_sources, kv, 4, "kv");
        check_list(c.index_source_layer_ids, c.n_index_sources, idx, 8, "index");
        check_list(c.dspark_target_layer_ids, c.n_dspark_targets, taps, 3, "taps");
        CHECK_EQ_INT(c.candidate_source, 20);
        CHECK_EQ_INT(c.compress_ratios[19], 2);
        CHECK_EQ_INT(c.compress_ratios[20], 1);
        CHECK_EQ_INT(c.compress_ratios[42], 0);
    }
    di_config_free(&c);
    json_decref(root);
}

TEST(load_errors_name_the_file) {
    DiModelConfig c;
    CHECK(di_config_load("/nonexistent/dir/config.json", &c) == -1);
    CHECK_MSG(strstr(di_error_message(), "/nonexistent/dir/config.json"), "%s", di_error_message());
    const char *path = "/tmp/di_test_config_bad.json";
    FILE *f = fopen(path, "w");
    fputs("{\n  \"model_type\": \"deepseek_v41\",\n  oops\n}\n", f);
    fclose(f);
    CHECK(di_config_load(path, &c) == -1);
    CHECK_MSG(strstr(di_error_message(), path) && strstr(di_error_message(), ":3:"), "%s", di_error_message());
    remove(path);
    CHECK(di_config_load(NULL, &c) == -1);
    CHECK(di_config_load("x", NULL) == -1);
}

int main(void) {
    snprintf(golden_dir, sizeof golden_dir, "%s/golden-v41/tiny-a/checkpoint", test_shared_dir());
    RUN_TEST(golden_tiny_a_config);
    RUN_TEST(golden_engram_arrays);
    RUN_TEST(release_and_tiny_multipliers);
    RUN_TEST(tiny_spec_config);
    RUN_TEST(release_config);
    RUN_TEST(hf_validation_rules);
    RUN_TEST(ref_validation_rules);
    RUN_TEST(field_type_and_value_errors);
    RUN_TEST(pad_key_spellings);
    RUN_TEST(derivation_rules);
    RUN_TEST(load_errors_name_the_file);
    return TEST_SUMMARY();
}
