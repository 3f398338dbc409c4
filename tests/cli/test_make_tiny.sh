#!/usr/bin/env bash
# test_make_tiny.sh — `deepinfer make-tiny` end to end: usage errors exit 2 with a message, the
# written directory has the official layout, the same seed gives identical bytes, another seed
# different weights, --planted other weights of the same inventory, and a bad output path fails
# with its cause (exit 1).
set -u
cd "$(dirname "$0")/../.."
CLI=build/deepinfer
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
check() { # description, command...
    local what=$1
    shift
    if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: $what"; fi
}
exit_code() { "$@" >"$tmp/out" 2>"$tmp/err"; echo $?; }

check "--help exits 0 and documents the flags" bash -c "$CLI make-tiny --help | grep -q -- '--seed N'"
check "no --out is a usage error" test "$(exit_code $CLI make-tiny)" = 2
check "usage error says why" grep -q -- "--out DIR is required" "$tmp/err"
check "negative seed is a usage error" test "$(exit_code $CLI make-tiny --out "$tmp/x" --seed -1)" = 2
check "unknown preset is a usage error" test "$(exit_code $CLI make-tiny --out "$tmp/x" --config huge)" = 2
check "unknown preset message" grep -q "unknown preset 'huge'" "$tmp/err"
check "unknown flag is a usage error" test "$(exit_code $CLI make-tiny --out "$tmp/x" --colour red)" = 2

check "make-tiny seed 5" test "$(exit_code $CLI make-tiny --out "$tmp/a" --seed 5)" = 0
# §9.5 total 2,562,692 + 41 more vocab rows (297 - 256) in embed, head (96 BF16) and both Markov
# tables (16 BF16): 41 * 448 = 18,368 -> 2,581,060
check "summary line" grep -q "wrote $tmp/a: 809 tensors, 2581060 bytes of weights in 2 shards" "$tmp/out"
for f in config.json tokenizer.json engram_token_map.json model.safetensors.index.json model-00001-of-00002.safetensors model-00002-of-00002.safetensors; do
    check "$f written" test -s "$tmp/a/$f"
done
check "no temporary files left" bash -c "! ls '$tmp/a' | grep -q tmp"
check "make-tiny seed 5 again" test "$(exit_code $CLI make-tiny --out "$tmp/b" --seed 5)" = 0
check "same seed, identical shards" cmp -s "$tmp/a/model-00001-of-00002.safetensors" "$tmp/b/model-00001-of-00002.safetensors"
check "same seed, identical shard 2" cmp -s "$tmp/a/model-00002-of-00002.safetensors" "$tmp/b/model-00002-of-00002.safetensors"
check "make-tiny seed 6" test "$(exit_code $CLI make-tiny --out "$tmp/c" --seed 6)" = 0
check "other seed, other weights" bash -c "! cmp -s '$tmp/a/model-00001-of-00002.safetensors' '$tmp/c/model-00001-of-00002.safetensors'"
check "spec9 preset: §9.5 count and bytes" bash -c "$CLI make-tiny --out '$tmp/s' --config spec9 2>/dev/null | grep -q '809 tensors, 2562692 bytes'"
check "spec9 has no tokenizer" test ! -e "$tmp/s/tokenizer.json"
# --planted: same inventory and sizes, other weights (the drafter agrees with the target; the
# model-level checks are tests/unit/test_dspark_runner.c)
check "make-tiny --planted seed 5" test "$(exit_code $CLI make-tiny --out "$tmp/p" --seed 5 --planted)" = 0
check "planted summary line" grep -q "wrote $tmp/p: 809 tensors, 2581060 bytes of weights in 2 shards" "$tmp/out"
check "planted weights differ from random" bash -c "! cmp -s '$tmp/a/model-00002-of-00002.safetensors' '$tmp/p/model-00002-of-00002.safetensors'"
check "--help documents --planted" bash -c "$CLI make-tiny --help | grep -q -- '--planted'"
touch "$tmp/file"
check "unwritable output fails with exit 1" test "$(exit_code $CLI make-tiny --out "$tmp/file/sub")" = 1
check "failure names the path" grep -q "$tmp/file" "$tmp/err"

# The built-in model's cache: an incomplete directory (e.g. left by an older version without the
# Engram map file) is regenerated, not used half-made.
mkdir -p "$tmp/xdg"
check "built-in model generated on first use" bash -c "XDG_CACHE_HOME='$tmp/xdg' $CLI generate --prompt-ids 0,1 --max-tokens 2 >/dev/null 2>&1"
rm -f "$tmp/xdg/deepinfer/tiny-v41/engram_token_map.json"
check "incomplete built-in model is regenerated" bash -c "XDG_CACHE_HOME='$tmp/xdg' $CLI generate --prompt-ids 0,1 --max-tokens 2 >/dev/null 2>&1 && test -s '$tmp/xdg/deepinfer/tiny-v41/engram_token_map.json'"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
