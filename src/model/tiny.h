/* tiny.h — synthetic V4.1 checkpoints in the official on-disk format (`deepinfer make-tiny`), and
 * the built-in model used when no checkpoint is given.
 *
 * A written directory holds config.json (nested, §2), two safetensors shards +
 * model.safetensors.index.json with exactly the §3.6 inventory of the config
 * (checkpoint_inventory.h), FP8 E4M3 weights with 32x32 UE8M0 block scales, FP4 E2M1 experts with
 * UE8M0 per 32, BF16/F32 where the release has them, Engram tables and DSpark stages, and (for the
 * presets with a tokenizer) a byte-level BPE tokenizer.json that HF `tokenizers` loads.
 *
 * Values: Gaussian weights with std 1/sqrt(fan_in), quantised exactly as the release is (block
 * scale 2^ceil(log2(amax / max_code))), so activations stay O(1) through the layers; the other
 * parameters follow model-v41.md §9.6.  Deterministic: every tensor draws from its own SplitMix64
 * stream seeded with seed ^ FNV-1a(name), so the bytes depend only on (preset, seed).
 *
 * Presets:
 *   "tiny"   §9 (8 layers + 3 DSpark stages, hidden 96) with one deliberate change: vocab_size 297
 *            instead of 256, because a byte-level tokenizer needs 256 byte tokens plus BOS/EOS/pad
 *            and every added token the V4.1 prompt renderer emits (turns, thinking, ｜DSML｜ for
 *            tools, task tokens); image_token_id and dspark_noise_token_id are moved onto the
 *            matching added tokens, and engram_compressed_vocab_size is 259, the size of the
 *            §5.2 (a) compressed token map of that tokenizer.  Writes tokenizer.json.
 *   "spec9"  §9.2 verbatim (vocab 256; 809 tensors, 2,562,692 bytes), no tokenizer.
 *   "medium" benchmark size: hidden 1024, 64 routed experts, ~520 MB; otherwise like tiny.
 */
#ifndef DI_MODEL_TINY_H
#define DI_MODEL_TINY_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* The config.json text of a preset; NULL (with error) for an unknown name. */
const char *di_tiny_config_json(const char *preset);

/* Write the preset into `out_dir` (created if needed).  Each file is written atomically (temp +
 * rename); config.json is written last, so a directory with config.json is complete.  Progress is
 * logged at info level when `progress` is non-zero. */
int di_tiny_write(const char *out_dir, const char *preset, uint64_t seed, int progress);

/* The same weights rewritten so that the DSpark drafter agrees with the target (greedy next token
 * di_tiny_planted_next(t), drafts accepted; engine-features.md §1.7 item 2, tiny_planted.h). */
int di_tiny_write_planted(const char *out_dir, const char *preset, uint64_t seed, int progress);

/* The default seed of the built-in model. */
#define DI_TINY_DEFAULT_SEED 1

/* The built-in model's directory: $XDG_CACHE_HOME/deepinfer/tiny-v41, else
 * $HOME/.cache/deepinfer/tiny-v41. */
int di_tiny_default_dir(char *buf, size_t n);

/* Make sure `dir` holds the built-in tiny model: reuse it when every file is there and its
 * config.json, tokenizer.json and engram_token_map.json equal what this build writes (a model
 * cached by a build with another tokenizer or config is regenerated, never used), else generate
 * it (preset "tiny", DI_TINY_DEFAULT_SEED) into a temporary sibling directory and rename it into
 * place, so concurrent first uses never see a half-written model. */
int di_tiny_ensure(const char *dir);

/* The same for any preset (the benchmarks' "medium"); `progress` as in di_tiny_write. */
int di_tiny_ensure_preset(const char *dir, const char *preset, int progress);

/* The byte-level BPE tokenizer.json of the tiny presets (tiny_tokenizer.c), as a new JSON
 * reference (NULL with error); di_tiny_write_tokenizer writes it to `path`. */
json_t *di_tiny_tokenizer_json(void);
int di_tiny_write_tokenizer(const char *path);
/* The Engram compressed token map (§5.2 a) of that tokenizer: DI_TINY_VOCAB entries with
 * DI_TINY_COMPRESSED_VOCAB distinct values.  make-tiny also writes it to engram_token_map.json
 * ({"compressed_vocab_size": C, "token_map": [...]}) next to tokenizer.json. */
int di_tiny_engram_token_map(const int32_t **map, int64_t *n);
#define DI_TINY_COMPRESSED_VOCAB 259

/* Ids of the tiny tokenizer's special tokens (fixed layout, see tiny_tokenizer.c). */
enum {
    DI_TINY_TOK_BOS = 0,
    DI_TINY_TOK_EOS = 1,
    DI_TINY_TOK_PAD = 2,
    DI_TINY_TOK_FIRST_BYTE = 3,    /* byte b is token 3 + b */
    DI_TINY_TOK_FIRST_MERGE = 259, /* 24 merges: 259 .. 282 */
    DI_TINY_TOK_USER = 283,
    DI_TINY_TOK_ASSISTANT = 284,
    DI_TINY_TOK_THINK = 285,
    DI_TINY_TOK_END_THINK = 286,
    DI_TINY_TOK_SYSTEM = 287,
    DI_TINY_TOK_LATEST_REMINDER = 288,
    DI_TINY_TOK_ACTION = 289,
    DI_TINY_TOK_IMAGE = 290,
    /* appended later (ids above stay as they were): the rest of what the V4.1 renderer emits */
    DI_TINY_TOK_DSML = 291, /* ｜DSML｜, the tool-call markup of tools blocks, calls and results */
    DI_TINY_TOK_QUERY = 292, /* the task tokens of render.c task_token() besides <｜action｜> */
    DI_TINY_TOK_AUTHORITY = 293,
    DI_TINY_TOK_DOMAIN = 294,
    DI_TINY_TOK_TITLE = 295,
    DI_TINY_TOK_READ_URL = 296,
    DI_TINY_VOCAB = 297
};

#endif
