#!/usr/bin/env bash
# test_check_golden.sh — `deepinfer check-golden` end to end: every case of the golden set
# tiny-a must pass (golden-v41/README.md §6 tolerances), usage errors exit 2, a bad directory
# exits 1 naming the cause.  Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
SHARED_DIR="${SHARED_DIR:-$(cd .. && pwd)/shared}"
BIN=build/deepinfer
GOLDEN="$SHARED_DIR/golden-v41/tiny-a"
export DEEPINFER_LOG_LEVEL=warn
passed=0
failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 1. the whole golden set (default --kernels auto: `ref`-mode cases on the reference kernel)
"$BIN" check-golden "$GOLDEN" >"$tmp/out" 2>"$tmp/err"
rc=$?
cat "$tmp/out"
n_cases=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['cases']))" "$GOLDEN/golden.json")
n_ok=$(grep -cE '^case=[^ ]+ max_abs=[^ ]+ max_rel=[^ ]+ ok$' "$tmp/out")
[ "$rc" -eq 0 ] && ok || { bad "check-golden exit $rc"; cat "$tmp/err"; }
[ "$n_ok" -eq "$n_cases" ] && [ "$n_cases" -gt 0 ] && ok || bad "$n_ok of $n_cases cases ok"
grep -q "^$n_cases passed, 0 failed$" "$tmp/out" && ok || bad "summary line"

# 2. a filter runs only the matching cases
"$BIN" check-golden "$GOLDEN" --case exact.dspark_p10_g >"$tmp/out" 2>/dev/null
[ $? -eq 0 ] && [ "$(grep -c '^case=' "$tmp/out")" -eq 2 ] && ok || bad "--case filter"

# 3. usage and input errors
"$BIN" check-golden >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "no DIR must exit 2"
"$BIN" check-golden "$GOLDEN" --bogus >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "unknown flag must exit 2"
"$BIN" check-golden "$GOLDEN" --mode fast >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "bad mode must exit 2"
"$BIN" check-golden "$GOLDEN" --kernels fast >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "bad --kernels must exit 2"
"$BIN" check-golden --help | grep -q "usage: deepinfer check-golden" && ok || bad "--help"
"$BIN" check-golden "$tmp/nowhere" >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q "nowhere" "$tmp/err" && ok || bad "missing dir: exit $rc, $(cat "$tmp/err")"

# 4. a corrupted golden file is an error naming the file, not a crash
mkdir -p "$tmp/broken" && ln -s "$GOLDEN/checkpoint" "$tmp/broken/checkpoint" && cp "$GOLDEN/golden.bin" "$tmp/broken/"
head -c 500 "$GOLDEN/golden.json" >"$tmp/broken/golden.json"
"$BIN" check-golden "$tmp/broken" >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q "golden.json" "$tmp/err" && ok || bad "truncated golden.json: exit $rc, $(cat "$tmp/err")"

# 5. a vision set (tiny-v): every image's ViT layers, norm, aligner input and rows in every mode
VGOLDEN="$SHARED_DIR/golden-v41/tiny-v"
"$BIN" check-golden "$VGOLDEN" --case vision >"$tmp/out" 2>"$tmp/err"; rc=$?
n_img=$(python3 -c "import json,sys; g=json.load(open(sys.argv[1])); print(len(g['images'])*len(g['modes']))" "$VGOLDEN/golden.json")
n_ok=$(grep -cE '^case=image[0-9]+\.vision\.(exact|kvq|ref) max_abs=[^ ]+ max_rel=[^ ]+ ok$' "$tmp/out")
[ "$rc" -eq 0 ] && [ "$n_ok" -eq "$n_img" ] && [ "$n_img" -gt 0 ] && ok || { bad "vision: exit $rc, $n_ok of $n_img ok"; cat "$tmp/out" "$tmp/err"; }
"$BIN" check-golden "$VGOLDEN" --case prompt.span >"$tmp/out" 2>"$tmp/err"; rc=$?
[ "$rc" -eq 0 ] && [ "$(grep -cE '^case=prompt\.span\.[a-z]+ max_abs=[^ ]+ max_rel=[^ ]+ ok$' "$tmp/out")" -eq 3 ] && ok || { bad "prompt.span: exit $rc"; cat "$tmp/out" "$tmp/err"; }
"$BIN" check-golden "$VGOLDEN" --case image2.vision --mode kvq >"$tmp/out" 2>/dev/null
[ $? -eq 0 ] && [ "$(grep -c '^case=' "$tmp/out")" -eq 1 ] && ok || bad "vision --case/--mode filter"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
