/* config.c — config.json of DeepSeek-V4.1: parse (§2.1–2.4), derive absent fields (§2.5),
 * validate (§2.6) and resolve the per-layer roles (§2.7).  See config.h.
 *
 * Section numbers refer to /work/shared/spec/model-v41.md.  Every error names the field as it is
 * spelled in config.json ("text_config.kv_source_layer_ids[1]: ..."), because a user with a bad
 * config has only that file in front of them. */
#include "model/config.h"

#include "base/error.h"
#include "base/file.h"
#include "base/json.h"
#include "base/mem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TC "text_config"

/* Sanity bounds: far above the release (§1) and tiny (§9) values, low enough that no product of
 * two of them overflows int64 and no derivation loop runs long on a hostile config. */
#define MAX_DIM ((int64_t)1 << 24)
#define MAX_VOCAB ((int64_t)1 << 31)
#define MAX_LAYERS 1024
#define MAX_EXPERTS 65536
#define MAX_ENGRAM_VOCAB ((int64_t)1 << 40)
#define MAX_ENGRAM_ROWS ((int64_t)1 << 44)
#define MAX_ENGRAM_PRIMES 4096 /* hash tables over all Engram layers; release: 2 x 24 */

/* ---- small field readers -------------------------------------------------------------- */

static int read_str(const json_t *obj, const char *ctx, const char *key, bool required, const char *dflt, char *dst) {
    const char *s = NULL;
    int st = di_json_string(obj, ctx, key, required, &s);
    if (st < 0) return -1;
    if (st == 1) s = dflt;
    if (strlen(s) >= DI_CONFIG_STR_MAX)
        return di_errorf("%s.%s: string longer than %d characters", ctx, key, DI_CONFIG_STR_MAX - 1);
    strcpy(dst, s);
    return 0;
}

/* An integer in [lo, hi]; absent -> dflt when not required. */
static int read_int(const json_t *obj, const char *ctx, const char *key, bool required, int64_t dflt, int64_t lo,
                    int64_t hi, int64_t *out) {
    int st = di_json_int(obj, ctx, key, required, out);
    if (st < 0) return -1;
    if (st == 1) {
        *out = dflt;
        return 0;
    }
    if (*out < lo || *out > hi)
        return di_errorf("%s.%s: %lld is out of range [%lld, %lld]", ctx, key, (long long)*out, (long long)lo,
                         (long long)hi);
    return 0;
}

/* A finite number > 0 (or >= 0 when allow_zero). */
static int read_num(const json_t *obj, const char *ctx, const char *key, bool required, double dflt, bool allow_zero,
                    double *out) {
    int st = di_json_number(obj, ctx, key, required, out);
    if (st < 0) return -1;
    if (st == 1) *out = dflt;
    if (!isfinite(*out) || *out < 0 || (!allow_zero && *out == 0))
        return di_errorf("%s.%s: %g is not a %s finite number", ctx, key, *out,
                         allow_zero ? "non-negative" : "positive");
    return 0;
}

static int read_bool(const json_t *obj, const char *ctx, const char *key, bool required, bool dflt, bool *out) {
    int st = di_json_bool(obj, ctx, key, required, out);
    if (st < 0) return -1;
    if (st == 1) *out = dflt;
    return 0;
}

static int expect_str(const char *ctx, const char *key, const char *got, const char *want) {
    if (strcmp(got, want) != 0)
        return di_errorf("%s.%s: \"%s\" is not supported (expected \"%s\")", ctx, key, got, want);
    return 0;
}

/* An optional list of integers; *present tells whether it was given. */
static int read_list(const json_t *obj, const char *ctx, const char *key, int64_t **out, size_t *n, bool *present) {
    int st = di_json_int_array(obj, ctx, key, false, out, n);
    if (st < 0) return -1;
    *present = (st == 0);
    if (st == 1) {
        *out = NULL;
        *n = 0;
    }
    return 0;
}

/* ---- §2.1, §2.2, §2.4 ------------------------------------------------------------------- */

static int parse_top_level(const json_t *root, DiModelConfig *c) {
    json_t *arch;
    if (di_json_array(root, "", "architectures", true, &arch) < 0) return -1;
    if (json_array_size(arch) < 1 || !json_is_string(json_array_get(arch, 0)))
        return di_errorf("architectures: expected a non-empty array of strings");
    const char *a = json_string_value(json_array_get(arch, 0));
    if (strlen(a) >= DI_CONFIG_STR_MAX) return di_errorf("architectures[0]: name too long");
    strcpy(c->architecture, a);
    if (expect_str("config", "architectures[0]", c->architecture, "DeepseekV41ForCausalLM") < 0) return -1;
    if (read_str(root, "config", "model_type", true, NULL, c->model_type) < 0) return -1;
    if (expect_str("config", "model_type", c->model_type, "deepseek_v41") < 0) return -1;
    if (read_str(root, "config", "dtype", false, "bfloat16", c->dtype) < 0) return -1;
    if (read_int(root, "config", "bos_token_id", false, 0, 0, MAX_VOCAB, &c->bos_token_id) < 0) return -1;
    if (read_int(root, "config", "eos_token_id", false, 1, 0, MAX_VOCAB, &c->eos_token_id) < 0) return -1;
    if (read_int(root, "config", "pad_token_id", false, 2, 0, MAX_VOCAB, &c->pad_token_id) < 0) return -1;
    if (read_int(root, "config", "image_token_id", false, -1, -1, MAX_VOCAB, &c->image_token_id) < 0) return -1;
    if (read_bool(root, "config", "tie_word_embeddings", false, false, &c->tie_word_embeddings) < 0) return -1;
    if (c->tie_word_embeddings)
        return di_errorf("config.tie_word_embeddings: true is not supported (V4.1 has a separate head.weight, §2.1)");
    return 0;
}

static int parse_quantization(const json_t *root, DiModelConfig *c) {
    const char *q = "quantization_config";
    json_t *qc;
    if (di_json_object(root, "", q, true, &qc) < 0) return -1;
    if (read_str(qc, q, "quant_method", true, NULL, c->quant_method) < 0 ||
        expect_str(q, "quant_method", c->quant_method, "fp8") < 0)
        return -1;
    if (read_str(qc, q, "activation_scheme", false, "dynamic", c->activation_scheme) < 0 ||
        expect_str(q, "activation_scheme", c->activation_scheme, "dynamic") < 0)
        return -1;
    if (read_str(qc, q, "fmt", false, "e4m3", c->quant_fmt) < 0 || expect_str(q, "fmt", c->quant_fmt, "e4m3") < 0)
        return -1;
    if (read_str(qc, q, "scale_fmt", true, NULL, c->scale_fmt) < 0 ||
        expect_str(q, "scale_fmt", c->scale_fmt, "ue8m0") < 0)
        return -1;
    if (read_str(qc, q, "expert_dtype", false, "fp4", c->expert_dtype) < 0 ||
        expect_str(q, "expert_dtype", c->expert_dtype, "fp4") < 0)
        return -1;
    int64_t *bs = NULL;
    size_t n = 0;
    if (di_json_int_array(qc, q, "weight_block_size", true, &bs, &n) < 0) return -1;
    int ok = (n == 2 && bs[0] == 32 && bs[1] == 32);
    if (n == 2) {
        c->weight_block_size[0] = bs[0];
        c->weight_block_size[1] = bs[1];
    }
    free(bs);
    if (!ok) return di_errorf("%s.weight_block_size: expected [32, 32] (§2.2)", q);
    return 0;
}

static int parse_vision(const json_t *root, DiVisionConfig *v) {
    const char *ctx = "vision_config";
    json_t *vc;
    int st = di_json_object(root, "", ctx, false, &vc);
    if (st < 0) return -1;
    v->max_wh_ratio = -1;
    if (st == 1) return 0;
    v->present = true;
    if (read_str(vc, ctx, "model_type", false, "deepseek_v41_vision", v->model_type) < 0) return -1;
    if (read_int(vc, ctx, "num_hidden_layers", false, 0, 0, MAX_LAYERS, &v->num_hidden_layers) < 0) return -1;
    if (read_int(vc, ctx, "hidden_size", false, 0, 0, MAX_DIM, &v->hidden_size) < 0) return -1;
    if (read_int(vc, ctx, "num_attention_heads", false, 0, 0, MAX_DIM, &v->num_attention_heads) < 0) return -1;
    if (read_int(vc, ctx, "intermediate_size", false, 0, 0, MAX_DIM, &v->intermediate_size) < 0) return -1;
    if (read_int(vc, ctx, "patch_size", false, 0, 0, MAX_DIM, &v->patch_size) < 0) return -1;
    if (read_num(vc, ctx, "rope_theta", false, 10000, false, &v->rope_theta) < 0) return -1;
    if (read_int(vc, ctx, "downsample_ratio", false, 0, 0, MAX_DIM, &v->downsample_ratio) < 0) return -1;
    if (read_int(vc, ctx, "max_image_tokens", false, 0, 0, MAX_VOCAB, &v->max_image_tokens) < 0) return -1;
    if (read_int(vc, ctx, "min_pixels", false, 0, 0, MAX_VOCAB, &v->min_pixels) < 0) return -1;
    int st2 = di_json_number(vc, ctx, "max_wh_ratio", false, &v->max_wh_ratio); /* null in the release */
    if (st2 < 0) return -1;
    if (st2 == 1) v->max_wh_ratio = -1;
    return 0;
}

/* ---- §2.3 text_config scalars ----------------------------------------------------------- */

static int parse_text_shapes(const json_t *t, DiModelConfig *c) {
    if (read_str(t, TC, "model_type", false, "deepseek_v41_text", c->text_model_type) < 0 ||
        expect_str(TC, "model_type", c->text_model_type, "deepseek_v41_text") < 0)
        return -1;
    struct {
        const char *key;
        int64_t *dst;
        int64_t lo, hi;
    } req[] = {
        {"vocab_size", &c->vocab_size, 1, MAX_VOCAB},
        {"hidden_size", &c->hidden_size, 1, MAX_DIM},
        {"num_hidden_layers", &c->n_layers, 1, MAX_LAYERS},
        {"num_attention_heads", &c->n_heads, 1, 4096},
        {"num_key_value_heads", &c->n_kv_heads, 1, 4096},
        {"head_dim", &c->head_dim, 1, MAX_DIM},
        {"qk_rope_head_dim", &c->rope_head_dim, 0, MAX_DIM},
        {"q_lora_rank", &c->q_lora_rank, 1, MAX_DIM},
        {"o_groups", &c->o_groups, 1, 4096},
        {"o_lora_rank", &c->o_lora_rank, 1, MAX_DIM},
        {"sliding_window", &c->sliding_window, 1, MAX_DIM},
        {"candidate_topk_blocks", &c->n_candidate_blocks, 1, MAX_DIM},
        {"candidate_block_size", &c->candidate_block_size, 1, MAX_DIM},
        {"index_n_heads", &c->index_n_heads, 1, 4096},
        {"index_head_dim", &c->index_head_dim, 1, MAX_DIM},
        {"index_topk", &c->index_topk, 1, MAX_DIM},
        {"max_position_embeddings", &c->max_position_embeddings, 1, (int64_t)1 << 40},
        {"hc_mult", &c->hc_mult, 1, 64},
        {"hc_sinkhorn_iters", &c->hc_sinkhorn_iters, 0, 10000},
        {"n_routed_experts", &c->n_routed_experts, 1, MAX_EXPERTS},
        {"num_experts_per_tok", &c->n_experts_per_tok, 1, MAX_EXPERTS},
        {"n_shared_experts", &c->n_shared_experts, 0, 64},
        {"moe_intermediate_size", &c->moe_intermediate_size, 1, MAX_DIM},
    };
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++)
        if (read_int(t, TC, req[i].key, true, 0, req[i].lo, req[i].hi, req[i].dst) < 0) return -1;
    if (read_int(t, TC, "num_nextn_predict_layers", false, 0, 0, 64, &c->n_draft_stages) < 0) return -1;
    return 0;
}

static int parse_text_scalars(const json_t *t, DiModelConfig *c) {
    if (read_num(t, TC, "rope_theta", true, 0, false, &c->rope_theta) < 0) return -1;
    if (read_num(t, TC, "compress_rope_theta", true, 0, false, &c->compress_rope_theta) < 0) return -1;
    if (read_num(t, TC, "rms_norm_eps", true, 0, false, &c->rms_norm_eps) < 0) return -1;
    if (read_num(t, TC, "hc_eps", true, 0, true, &c->hc_eps) < 0) return -1;
    if (read_num(t, TC, "routed_scaling_factor", true, 0, false, &c->routed_scaling_factor) < 0) return -1;
    if (read_num(t, TC, "gate_temp", false, 1.0, false, &c->gate_temp) < 0) return -1;
    if (read_num(t, TC, "swiglu_limit", true, 0, false, &c->swiglu_limit) < 0) return -1;
    if (read_bool(t, TC, "norm_topk_prob", true, false, &c->norm_topk_prob) < 0) return -1;
    if (read_bool(t, TC, "attention_bias", false, false, &c->attention_bias) < 0) return -1;
    if (c->attention_bias) return di_errorf(TC ".attention_bias: true is not supported (V4.1 has no attention biases)");
    if (read_str(t, TC, "scoring_func", true, NULL, c->scoring_func) < 0 ||
        expect_str(TC, "scoring_func", c->scoring_func, "sqrtsoftplus") < 0)
        return -1;
    if (read_str(t, TC, "topk_method", false, "noaux_tc", c->topk_method) < 0 ||
        expect_str(TC, "topk_method", c->topk_method, "noaux_tc") < 0)
        return -1;
    if (read_str(t, TC, "hidden_act", false, "silu", c->hidden_act) < 0 ||
        expect_str(TC, "hidden_act", c->hidden_act, "silu") < 0)
        return -1;

    /* rope_scaling: YaRN for ratio>0 layers; betas default 32 / 1 (§8 row 20). */
    json_t *rs;
    int st = di_json_object(t, TC, "rope_scaling", false, &rs);
    if (st < 0) return -1;
    c->rope_factor = 1.0;
    c->beta_fast = 32;
    c->beta_slow = 1;
    c->original_max_position_embeddings = c->max_position_embeddings;
    if (st == 0) {
        const char *rctx = TC ".rope_scaling";
        if (read_str(rs, rctx, "rope_type", false, "yarn", c->rope_type) < 0 ||
            expect_str(rctx, "rope_type", c->rope_type, "yarn") < 0)
            return -1;
        if (read_num(rs, rctx, "factor", true, 0, false, &c->rope_factor) < 0) return -1;
        if (read_num(rs, rctx, "beta_fast", false, 32, false, &c->beta_fast) < 0) return -1;
        if (read_num(rs, rctx, "beta_slow", false, 1, false, &c->beta_slow) < 0) return -1;
        if (read_int(rs, rctx, "original_max_position_embeddings", true, 0, 1, (int64_t)1 << 40,
                     &c->original_max_position_embeddings) < 0)
            return -1;
    }
    return 0;
}

static int parse_engram_dspark_scalars(const json_t *t, DiModelConfig *c) {
    bool need_engram = c->n_engram_layers > 0, need_dspark = c->n_draft_stages > 0;
    if (read_int(t, TC, "engram_max_ngram_size", need_engram, 0, need_engram ? 2 : 0, 8, &c->engram_max_ngram_size) < 0)
        return -1;
    if (read_int(t, TC, "engram_n_heads", need_engram, 0, need_engram ? 1 : 0, 64, &c->engram_n_heads) < 0) return -1;
    if (read_int(t, TC, "engram_head_dim", need_engram, 0, need_engram ? 1 : 0, MAX_DIM, &c->engram_head_dim) < 0)
        return -1;
    if (read_int(t, TC, "engram_vocab_size", need_engram, 0, 0, MAX_ENGRAM_VOCAB, &c->engram_vocab_size) < 0) return -1;
    /* < 2^30: keeps the multiplier range of §5.2 (d) on numpy's 64-bit draw path */
    if (read_int(t, TC, "engram_compressed_vocab_size", need_engram, 0, need_engram ? 1 : 0, ((int64_t)1 << 30) - 1,
                 &c->engram_compressed_vocab_size) < 0)
        return -1;
    /* Both spellings of the pad key (§2.3 "Key-name disagreement", §8 row 1); default 2 as HF. */
    const char *pad_key = json_object_get(t, "engram_pad_token_id") ? "engram_pad_token_id" : "engram_pad_id";
    if (read_int(t, TC, pad_key, false, 2, 0, MAX_VOCAB, &c->engram_pad_token_id) < 0) return -1;

    if (read_int(t, TC, "dspark_block_size", need_dspark, 0, need_dspark ? 1 : 0, 4096, &c->dspark_block_size) < 0)
        return -1;
    if (read_int(t, TC, "dspark_noise_token_id", need_dspark, 0, 0, MAX_VOCAB, &c->dspark_noise_token_id) < 0)
        return -1;
    if (read_int(t, TC, "dspark_markov_rank", need_dspark, 0, need_dspark ? 1 : 0, MAX_DIM, &c->dspark_markov_rank) < 0)
        return -1;
    if (read_int(t, TC, "dspark_n_routed_experts", need_dspark, 0, need_dspark ? 1 : 0, MAX_EXPERTS,
                 &c->dspark_n_routed_experts) < 0)
        return -1;
    if (read_int(t, TC, "dspark_num_experts_per_tok", need_dspark, 0, need_dspark ? 1 : 0, MAX_EXPERTS,
                 &c->dspark_n_experts_per_tok) < 0)
        return -1;
    return 0;
}

/* ---- §2.5 derivation -------------------------------------------------------------------- */

static const int64_t release_ratios[40] = {0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
                                           1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
static const int64_t release_kv_sources[4] = {2, 8, 14, 20};
static const int64_t release_index_sources[8] = {2, 8, 14, 20, 24, 28, 32, 36};

static int64_t *copy_ints(const int64_t *src, size_t n, const char *what) {
    int64_t *dst = di_calloc(n ? n : 1, sizeof *dst, what);
    if (dst && n) memcpy(dst, src, n * sizeof *dst);
    return dst;
}

/* §2.5 rule 1: default ratios, then normalise to n + n_draft entries. */
static int derive_ratios(const json_t *t, DiModelConfig *c) {
    int64_t n = c->n_layers, total = n + c->n_draft_stages;
    int64_t *given = NULL;
    size_t n_given = 0;
    bool present;
    if (read_list(t, TC, "compress_ratios", &given, &n_given, &present) < 0) return -1;
    c->n_total_layers = total;
    c->compress_ratios = di_calloc((size_t)total, sizeof *c->compress_ratios, "compress_ratios");
    if (!c->compress_ratios) {
        free(given);
        return -1;
    }
    if (present) {
        if ((int64_t)n_given < n || (int64_t)n_given > total) {
            free(given);
            return di_errorf(TC ".compress_ratios: %zu entries, expected between num_hidden_layers (%lld) and "
                                "num_hidden_layers + num_nextn_predict_layers (%lld)",
                             n_given, (long long)n, (long long)total);
        }
        memcpy(c->compress_ratios, given, n_given * sizeof *given); /* missing draft entries stay 0 */
        free(given);
        for (int64_t i = 0; i < total; i++)
            if (c->compress_ratios[i] < 0 || c->compress_ratios[i] > 128)
                return di_errorf(TC ".compress_ratios[%lld]: %lld is out of range [0, 128]", (long long)i,
                                 (long long)c->compress_ratios[i]);
        return 0;
    }
    if (n == 40) {
        memcpy(c->compress_ratios, release_ratios, sizeof release_ratios);
        return 0;
    }
    int64_t n_slide = n < 2 ? n : 2;
    int64_t n_enc = (n - n_slide + 1) / 2;
    if (n_enc < 0) n_enc = 0;
    for (int64_t i = 0; i < n; i++) c->compress_ratios[i] = i < n_slide ? 0 : (i < n_slide + n_enc ? 2 : 1);
    return 0;
}

static bool release_prefix(const DiModelConfig *c) {
    for (int64_t i = 0; i < c->n_layers; i++)
        if (i >= 40 || c->compress_ratios[i] != release_ratios[i]) return false;
    return true;
}

/* §2.5 rules 2, 3, 5. */
static int derive_sources(const json_t *t, DiModelConfig *c) {
    bool present;
    if (read_list(t, TC, "kv_source_layer_ids", &c->kv_source_layer_ids, &c->n_kv_sources, &present) < 0) return -1;
    if (!present) {
        if (release_prefix(c)) {
            c->kv_source_layer_ids = copy_ints(release_kv_sources, 4, "kv sources");
            c->n_kv_sources = 4;
        } else {
            c->kv_source_layer_ids = di_calloc((size_t)c->n_layers, sizeof(int64_t), "kv sources");
            if (!c->kv_source_layer_ids) return -1;
            for (int64_t i = 0; i < c->n_layers; i++) {
                int64_t r = c->compress_ratios[i];
                if (r > 0 && (i == 0 || c->compress_ratios[i - 1] != r)) c->kv_source_layer_ids[c->n_kv_sources++] = i;
            }
        }
        if (!c->kv_source_layer_ids) return -1;
    }
    if (read_list(t, TC, "index_source_layer_ids", &c->index_source_layer_ids, &c->n_index_sources, &present) < 0)
        return -1;
    if (!present) {
        bool release_kv =
            c->n_kv_sources == 4 && memcmp(c->kv_source_layer_ids, release_kv_sources, 4 * sizeof(int64_t)) == 0;
        c->n_index_sources = release_kv ? 8 : c->n_kv_sources;
        c->index_source_layer_ids =
            copy_ints(release_kv ? release_index_sources : c->kv_source_layer_ids, c->n_index_sources, "index sources");
        if (!c->index_source_layer_ids) return -1;
    }
    int st = di_json_int(t, TC, "candidate_source_layer_id", false, &c->candidate_source);
    if (st < 0) return -1;
    if (st == 1) c->candidate_source = c->n_kv_sources ? c->kv_source_layer_ids[c->n_kv_sources - 1] : -1;
    if (c->candidate_source < -1 || c->candidate_source >= MAX_LAYERS)
        return di_errorf(TC ".candidate_source_layer_id: %lld is out of range", (long long)c->candidate_source);
    if (c->candidate_source < 0) c->candidate_source = -1;
    return 0;
}

/* §2.5 rules 4 and 6. */
static int derive_taps_and_engram(const json_t *t, DiModelConfig *c) {
    bool present;
    if (read_list(t, TC, "dspark_target_layer_ids", &c->dspark_target_layer_ids, &c->n_dspark_targets, &present) < 0)
        return -1;
    if (!present) {
        int64_t picked[3];
        size_t k = 0;
        for (int64_t i = c->n_layers - 1; i >= 0 && k < 3; i--)
            if (!di_layer_list_contains(c->kv_source_layer_ids, c->n_kv_sources, i)) picked[k++] = i;
        c->dspark_target_layer_ids = di_calloc(3, sizeof(int64_t), "dspark targets");
        if (!c->dspark_target_layer_ids) return -1;
        for (size_t j = 0; j < k; j++) c->dspark_target_layer_ids[j] = picked[k - 1 - j]; /* ascending */
        c->n_dspark_targets = k;
    }
    if (read_list(t, TC, "engram_layer_ids", &c->engram_layer_ids, &c->n_engram_layers, &present) < 0) return -1;
    size_t n_rows = 0;
    if (read_list(t, TC, "engram_num_embeddings", &c->engram_num_embeddings, &n_rows, &present) < 0) return -1;
    if (!present) {
        c->engram_num_embeddings =
            di_calloc(c->n_engram_layers ? c->n_engram_layers : 1, sizeof(int64_t), "engram rows");
        if (!c->engram_num_embeddings) return -1;
        n_rows = c->n_engram_layers;
    }
    if (n_rows != c->n_engram_layers)
        return di_errorf(TC ".engram_num_embeddings: %zu entries but engram_layer_ids has %zu (§2.6)", n_rows,
                         c->n_engram_layers);
    return 0;
}

/* ---- §5.2 (e) Engram primes: validation needs their sums -------------------------------- */

/* Deterministic Miller-Rabin: the first 12 prime bases decide every n < 3.3e24 (Sorenson and
 * Webster 2015), so any int64 config value is tested in microseconds (trial division would let a
 * hostile engram_vocab_size stall the loader). */
static uint64_t mul_mod(uint64_t a, uint64_t b, uint64_t m) { return (uint64_t)((unsigned __int128)a * b % m); }

static uint64_t pow_mod(uint64_t b, uint64_t e, uint64_t m) {
    uint64_t r = 1;
    for (b %= m; e; e >>= 1, b = mul_mod(b, b, m))
        if (e & 1) r = mul_mod(r, b, m);
    return r;
}

static bool is_prime(int64_t x) {
    static const uint64_t bases[12] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37};
    if (x < 2) return false;
    uint64_t n = (uint64_t)x, d = n - 1;
    for (int i = 0; i < 12; i++)
        if (n % bases[i] == 0) return n == bases[i];
    int s = 0;
    for (; (d & 1) == 0; d >>= 1) s++;
    for (int i = 0; i < 12; i++) {
        uint64_t y = pow_mod(bases[i], d, n);
        if (y == 1 || y == n - 1) continue;
        int r = 1;
        for (; r < s; r++) {
            y = mul_mod(y, y, n);
            if (y == n - 1) break;
        }
        if (r == s) return false;
    }
    return true;
}

static int derive_engram_primes(DiModelConfig *c) {
    size_t L = c->n_engram_layers;
    if (L == 0) return 0;
    int64_t orders = c->engram_max_ngram_size - 1, heads = c->engram_n_heads;
    c->engram_n_columns = orders * heads;
    size_t total = L * (size_t)c->engram_n_columns;
    if (total > MAX_ENGRAM_PRIMES)
        return di_errorf(TC ".engram_layer_ids: %zu layers x %lld hash columns exceed %d hash tables", L,
                         (long long)c->engram_n_columns, MAX_ENGRAM_PRIMES);
    c->engram_primes = di_calloc(total, sizeof(int64_t), "engram primes");
    c->engram_offsets = di_calloc(total, sizeof(int64_t), "engram offsets");
    if (!c->engram_primes || !c->engram_offsets) return -1;
    size_t used = 0; /* primes are handed out in increasing order per (layer, order) */
    for (size_t l = 0; l < L; l++) {
        int64_t offset = 0;
        for (int64_t o = 0; o < orders; o++) {
            int64_t cand = c->engram_vocab_size - 1; /* restarts for every (layer, order) */
            for (int64_t j = 0; j < heads; j++) {
                do {
                    cand++;
                } while (!is_prime(cand) || di_layer_list_contains(c->engram_primes, used, cand));
                size_t col = l * (size_t)c->engram_n_columns + (size_t)(o * heads + j);
                c->engram_primes[col] = cand;
                c->engram_offsets[col] = offset;
                offset += cand;
                used++;
            }
        }
    }
    c->engram_multipliers = di_calloc(L * (size_t)c->engram_max_ngram_size, sizeof(int64_t), "engram multipliers");
    if (!c->engram_multipliers) return -1;
    for (size_t l = 0; l < L; l++)
        if (di_engram_hash_multipliers(c->engram_layer_ids[l], c->engram_compressed_vocab_size,
                                       c->engram_max_ngram_size,
                                       c->engram_multipliers + l * (size_t)c->engram_max_ngram_size) < 0)
            return di_error_wrap(TC ".engram_layer_ids[%zu]", l);
    return 0;
}

/* ---- §2.6 validation -------------------------------------------------------------------- */

static int check_ascending(const char *key, const int64_t *v, size_t n, int64_t lo, int64_t hi) {
    for (size_t i = 0; i < n; i++) {
        if (v[i] < lo || v[i] >= hi)
            return di_errorf(TC ".%s[%zu]: %lld is outside [%lld, %lld)", key, i, (long long)v[i], (long long)lo,
                             (long long)hi);
        if (i > 0 && v[i] <= v[i - 1])
            return di_errorf(TC ".%s[%zu]: %lld is not greater than the previous entry %lld (lists must be strictly "
                                "ascending, §2.6)",
                             key, i, (long long)v[i], (long long)v[i - 1]);
    }
    return 0;
}

/* The most recent entry of the sorted list that is <= layer (or < layer when strict); -1 if none. */
static int validate_sources(const DiModelConfig *c) {
    const int64_t n = c->n_layers, *r = c->compress_ratios;
    if (check_ascending("kv_source_layer_ids", c->kv_source_layer_ids, c->n_kv_sources, 0, n) < 0) return -1;
    if (check_ascending("index_source_layer_ids", c->index_source_layer_ids, c->n_index_sources, 0, n) < 0) return -1;
    for (size_t i = 0; i < c->n_kv_sources; i++) {
        int64_t k = c->kv_source_layer_ids[i];
        if (r[k] == 0)
            return di_errorf(TC ".kv_source_layer_ids[%zu]: layer %lld has compress ratio 0", i, (long long)k);
        if (!di_layer_list_contains(c->index_source_layer_ids, c->n_index_sources, k))
            return di_errorf(TC ".kv_source_layer_ids[%zu]: layer %lld is not an index source (every KV source must "
                                "also be in index_source_layer_ids, §2.6)",
                             i, (long long)k);
    }
    for (size_t i = 0; i < c->n_index_sources; i++) {
        int64_t k = c->index_source_layer_ids[i];
        if (r[k] == 0)
            return di_errorf(TC ".index_source_layer_ids[%zu]: layer %lld has compress ratio 0", i, (long long)k);
        if (!di_layer_list_contains(c->kv_source_layer_ids, c->n_kv_sources, k) &&
            di_layer_list_latest(c->kv_source_layer_ids, c->n_kv_sources, k, true) < 0)
            return di_errorf(TC ".index_source_layer_ids[%zu]: %lld is not a KV source and no KV source precedes it", i,
                             (long long)k);
    }
    for (int64_t l = 0; l < n; l++) {
        if (r[l] == 0) continue;
        int64_t src = di_layer_list_latest(c->kv_source_layer_ids, c->n_kv_sources, l, false);
        if (src < 0)
            return di_errorf(TC ".compress_ratios[%lld]: layer %lld has ratio %lld but no KV source at or before it",
                             (long long)l, (long long)l, (long long)r[l]);
        if (r[src] != r[l])
            return di_errorf(TC ".compress_ratios[%lld]: layer %lld has ratio %lld but its KV source %lld has ratio "
                                "%lld (§2.6)",
                             (long long)l, (long long)l, (long long)r[l], (long long)src, (long long)r[src]);
    }
    for (int64_t s = 0; s < c->n_draft_stages; s++)
        if (r[n + s] != 0)
            return di_errorf(TC ".compress_ratios[%lld]: DSpark stage %lld must have ratio 0, got %lld",
                             (long long)(n + s), (long long)s, (long long)r[n + s]);
    if (c->candidate_source >= 0) {
        if (!di_layer_list_contains(c->index_source_layer_ids, c->n_index_sources, c->candidate_source))
            return di_errorf(TC ".candidate_source_layer_id: %lld is not an index source",
                             (long long)c->candidate_source);
        for (size_t i = 0; i < c->n_kv_sources; i++)
            if (c->kv_source_layer_ids[i] > c->candidate_source)
                return di_errorf(TC ".kv_source_layer_ids[%zu]: KV source %lld comes after the candidate source %lld "
                                    "(§2.6)",
                                 i, (long long)c->kv_source_layer_ids[i], (long long)c->candidate_source);
        if ((c->n_candidate_blocks - 1) * c->candidate_block_size + 1 < c->index_topk)
            return di_errorf(TC ".candidate_topk_blocks: pool (%lld - 1) * %lld + 1 is smaller than index_topk %lld "
                                "(§2.6)",
                             (long long)c->n_candidate_blocks, (long long)c->candidate_block_size,
                             (long long)c->index_topk);
    }
    return 0;
}

static int check_multiple(const char *what, int64_t value, int64_t of) {
    if (value % of != 0)
        return di_errorf(TC ".%s: %lld is not a multiple of %lld (FP8/FP4 block tiling, §2.6)", what, (long long)value,
                         (long long)of);
    return 0;
}

static int validate_shapes(const DiModelConfig *c) {
    if (c->n_kv_heads != 1)
        return di_errorf(TC ".num_key_value_heads: %lld, must be 1 (§2.6)", (long long)c->n_kv_heads);
    if (c->n_heads % c->o_groups != 0)
        return di_errorf(TC ".o_groups: num_attention_heads %lld is not divisible by %lld", (long long)c->n_heads,
                         (long long)c->o_groups);
    int64_t min_dim = c->head_dim < c->index_head_dim ? c->head_dim : c->index_head_dim;
    if (c->rope_head_dim % 2 != 0 || c->rope_head_dim > min_dim)
        return di_errorf(TC ".qk_rope_head_dim: %lld must be even and <= min(head_dim, index_head_dim) = %lld",
                         (long long)c->rope_head_dim, (long long)min_dim);
    if (c->n_experts_per_tok > c->n_routed_experts)
        return di_errorf(TC ".num_experts_per_tok: %lld exceeds n_routed_experts %lld", (long long)c->n_experts_per_tok,
                         (long long)c->n_routed_experts);
    if (check_multiple("head_dim", c->head_dim, 32) < 0 ||
        check_multiple("index_head_dim", c->index_head_dim, 32) < 0 ||
        check_multiple("hidden_size", c->hidden_size, 32) < 0 ||
        check_multiple("q_lora_rank", c->q_lora_rank, 32) < 0 ||
        check_multiple("moe_intermediate_size", c->moe_intermediate_size, 32) < 0)
        return -1;
    if ((c->o_groups * c->o_lora_rank) % 32 != 0)
        return di_errorf(TC ".o_lora_rank: o_groups * o_lora_rank = %lld is not a multiple of 32 (§2.6)",
                         (long long)(c->o_groups * c->o_lora_rank));
    return 0;
}

static int validate_engram(const DiModelConfig *c) {
    if (check_ascending("engram_layer_ids", c->engram_layer_ids, c->n_engram_layers, 0, c->n_layers) < 0) return -1;
    if (c->n_engram_layers == 0) return 0;
    if (check_multiple("engram_head_dim", c->engram_head_dim, 32) < 0) return -1;
    /* wkv input width (max_ngram-1) * n_heads * head_dim is then a multiple of 32 too. */
    if (c->engram_pad_token_id >= c->vocab_size)
        return di_errorf(TC ".engram_pad_token_id: %lld is not below vocab_size %lld",
                         (long long)c->engram_pad_token_id, (long long)c->vocab_size);
    for (size_t l = 0; l < c->n_engram_layers; l++) {
        int64_t sum = 0;
        for (int64_t k = 0; k < c->engram_n_columns; k++)
            sum += c->engram_primes[l * (size_t)c->engram_n_columns + (size_t)k];
        if (c->engram_num_embeddings[l] != sum)
            return di_errorf(TC ".engram_num_embeddings[%zu]: %lld rows, but the hash primes of layer %lld sum to %lld "
                                "(§5.2 e)",
                             l, (long long)c->engram_num_embeddings[l], (long long)c->engram_layer_ids[l],
                             (long long)sum);
    }
    return 0;
}

static int validate_dspark(const DiModelConfig *c) {
    if (c->n_draft_stages == 0) return 0;
    if (c->n_dspark_targets == 0)
        return di_errorf(TC ".dspark_target_layer_ids: DSpark stages need at least one tap layer");
    if (check_ascending("dspark_target_layer_ids", c->dspark_target_layer_ids, c->n_dspark_targets, 0, c->n_layers) < 0)
        return -1;
    if (c->dspark_noise_token_id >= c->vocab_size)
        return di_errorf(TC ".dspark_noise_token_id: %lld is not below vocab_size %lld",
                         (long long)c->dspark_noise_token_id, (long long)c->vocab_size);
    if (c->dspark_n_experts_per_tok > c->dspark_n_routed_experts)
        return di_errorf(TC ".dspark_num_experts_per_tok: %lld exceeds dspark_n_routed_experts %lld",
                         (long long)c->dspark_n_experts_per_tok, (long long)c->dspark_n_routed_experts);
    return 0;
}

static int validate_tokens(const DiModelConfig *c) {
    const struct {
        const char *key;
        int64_t v;
    } ids[] = {{"bos_token_id", c->bos_token_id},
               {"eos_token_id", c->eos_token_id},
               {"pad_token_id", c->pad_token_id},
               {"image_token_id", c->image_token_id}};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if (ids[i].v >= c->vocab_size)
            return di_errorf("config.%s: %lld is not below text_config.vocab_size %lld", ids[i].key,
                             (long long)ids[i].v, (long long)c->vocab_size);
    return 0;
}

/* ---- §2.7 roles ------------------------------------------------------------------------- */

static int fill_roles(DiModelConfig *c) {
    c->layers = di_calloc((size_t)c->n_total_layers, sizeof *c->layers, "layer plan");
    if (!c->layers) return -1;
    const DiLayerPlanSpec spec = {
        .n_layers = c->n_layers, .n_draft_stages = c->n_draft_stages, .compress_ratios = c->compress_ratios,
        .kv_sources = c->kv_source_layer_ids, .n_kv_sources = c->n_kv_sources,
        .index_sources = c->index_source_layer_ids, .n_index_sources = c->n_index_sources,
        .engram_layers = c->engram_layer_ids, .n_engram_layers = c->n_engram_layers,
        .dspark_taps = c->dspark_target_layer_ids, .n_dspark_taps = c->n_dspark_targets,
        .candidate_source = c->candidate_source,
        .n_routed_experts = c->n_routed_experts, .n_experts_per_tok = c->n_experts_per_tok,
        .dspark_n_routed_experts = c->dspark_n_routed_experts, .dspark_n_experts_per_tok = c->dspark_n_experts_per_tok};
    return di_layer_plan_build(&spec, c->layers);
}

/* ---- entry points ----------------------------------------------------------------------- */

static int parse_all(const json_t *root, DiModelConfig *c) {
    if (!json_is_object(root)) return di_errorf("config: expected a JSON object at the top level");
    json_t *t;
    if (parse_top_level(root, c) < 0 || parse_quantization(root, c) < 0 || parse_vision(root, &c->vision) < 0)
        return -1;
    if (di_json_object(root, "", TC, true, &t) < 0) return -1;
    if (parse_text_shapes(t, c) < 0 || parse_text_scalars(t, c) < 0) return -1;
    if (derive_ratios(t, c) < 0 || derive_sources(t, c) < 0 || derive_taps_and_engram(t, c) < 0) return -1;
    if (parse_engram_dspark_scalars(t, c) < 0) return -1;
    if (validate_tokens(c) < 0 || validate_shapes(c) < 0 || validate_sources(c) < 0) return -1;
    if (check_ascending("engram_layer_ids", c->engram_layer_ids, c->n_engram_layers, 0, c->n_layers) < 0) return -1;
    for (size_t l = 0; l < c->n_engram_layers; l++)
        if (c->engram_num_embeddings[l] < 1 || c->engram_num_embeddings[l] > MAX_ENGRAM_ROWS)
            return di_errorf(TC ".engram_num_embeddings[%zu]: %lld is out of range", l,
                             (long long)c->engram_num_embeddings[l]);
    if (derive_engram_primes(c) < 0 || validate_engram(c) < 0 || validate_dspark(c) < 0) return -1;
    return fill_roles(c);
}

int di_config_parse_json(const json_t *root, DiModelConfig *out) {
    if (!out) return di_errorf("di_config_parse_json: no output given");
    memset(out, 0, sizeof *out);
    if (!root) return di_errorf("di_config_parse_json: no JSON given");
    if (parse_all(root, out) < 0) {
        di_config_free(out);
        return -1;
    }
    return 0;
}

int di_config_load(const char *path, DiModelConfig *out) {
    if (!out) return di_errorf("di_config_load: no output given");
    memset(out, 0, sizeof *out);
    if (!path || !*path) return di_errorf("di_config_load: no path given");
    struct stat st;
    char *file = NULL;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        file = di_path_join(path, "config.json");
    else
        file = di_strdup(path);
    if (!file) return -1;
    json_t *root = di_json_load_file(file);
    int rc = -1;
    if (root) {
        rc = di_config_parse_json(root, out);
        json_decref(root);
    }
    if (rc < 0) di_error_wrap("%s", file);
    free(file);
    return rc;
}

void di_config_free(DiModelConfig *c) {
    if (!c) return;
    free(c->engram_layer_ids);
    free(c->engram_num_embeddings);
    free(c->engram_primes);
    free(c->engram_offsets);
    free(c->engram_multipliers);
    free(c->dspark_target_layer_ids);
    free(c->kv_source_layer_ids);
    free(c->index_source_layer_ids);
    free(c->compress_ratios);
    free(c->layers);
    memset(c, 0, sizeof *c);
}

/* ---- §6 per-request state --------------------------------------------------------------- */

/* Bytes of one cached row of `dim` values.  Packed (§4.4, §4.5): FP8 window rows = 1 B/value +
 * one UE8M0 byte per 32; FP4 compressed rows = 1/2 B/value + one E4M3 byte per 16; FP4 index
 * rows = 1/2 B/value + one UE8M0 byte per 32.  REF keeps bf16 (2 B/value). */
static int64_t window_row_bytes(int64_t dim, bool packed) { return packed ? dim + dim / 32 : 2 * dim; }
static int64_t compressed_row_bytes(int64_t dim, bool packed) { return packed ? dim / 2 + dim / 16 : 2 * dim; }
static int64_t index_row_bytes(int64_t dim, bool packed) { return packed ? dim / 2 + dim / 32 : 2 * dim; }

int di_config_state_bytes(const DiModelConfig *c, int64_t context_len, bool packed, DiStateBytes *out) {
    if (!c || !out || !c->layers) return di_errorf("di_config_state_bytes: no config or output given");
    if (context_len < 0)
        return di_errorf("di_config_state_bytes: negative context length %lld", (long long)context_len);
    memset(out, 0, sizeof *out);
    int64_t ring_rows = c->sliding_window;
    out->window_rings = c->n_layers * ring_rows * window_row_bytes(c->head_dim, packed);
    for (int64_t i = 0; i < c->n_layers; i++) {
        const DiLayerPlan *L = &c->layers[i];
        if (!L->is_kv_source) continue;
        int64_t m = L->compress_ratio, rows = context_len / m; /* complete groups only, §6.1 */
        out->compressed_kv += rows * compressed_row_bytes(c->head_dim, packed);
        out->index_keys += rows * index_row_bytes(c->index_head_dim, packed);
        /* κ and ζ (fp32, head_dim each) of the incomplete group: REF allocates m slots, packed m-1 */
        if (m > 1) out->pending_rows += (packed ? m - 1 : m) * 2 * c->head_dim * 4;
    }
    out->dspark_rings = c->n_draft_stages * ring_rows * window_row_bytes(c->head_dim, packed);
    out->dspark_inputs = c->n_draft_stages > 0 ? (int64_t)c->n_dspark_targets * c->hidden_size * 2 : 0;
    out->total = out->window_rings + out->compressed_kv + out->index_keys + out->pending_rows + out->dspark_rings +
                 out->dspark_inputs;
    return 0;
}
