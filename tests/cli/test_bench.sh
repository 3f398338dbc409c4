#!/usr/bin/env bash
# test_bench.sh — `deepinfer bench` end to end on a small shape: one line of figures per weight
# format (FP4 skipped, with the reason, when the columns are not a multiple of 32), the pointer
# to `make bench`, usage errors exit 2, a bad DEEPINFER_KERNELS exits 2 naming it (checked at start for every command).  No timing is
# judged here (benchmarks are for `make bench`).  Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
BIN=build/deepinfer
passed=0
failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
num='[0-9]+\.[0-9]'

"$BIN" bench --rows 64 --cols 96 --tokens 5 --threads 2 >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && ok || { bad "bench exit"; cat "$tmp/err"; }
for f in fp8 fp4 bf16 f32; do
    grep -qE "^$f +$num+ +$num+ +$num+$" "$tmp/out" && ok || bad "no figures for $f: $(cat "$tmp/out")"
done
grep -q "W \[64 x 96\], GEMM n = 5" "$tmp/out" && ok || bad "header"
grep -q "make bench" "$tmp/out" && ok || bad "pointer to make bench"

"$BIN" bench --rows 8 --cols 40 --tokens 3 >"$tmp/out" 2>&1
grep -q "^fp4 *skipped: FP4 needs a column count divisible by 32" "$tmp/out" && ok || bad "fp4 skip: $(cat "$tmp/out")"
DEEPINFER_KERNELS=ref "$BIN" bench --rows 8 --cols 32 --tokens 2 | grep -q "kernels reference" && ok || bad "ref kernels"

"$BIN" bench --help | grep -q "usage: deepinfer bench" && ok || bad "--help"
"$BIN" bench --bogus >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "unknown flag must exit 2"
"$BIN" bench --rows >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "missing value must exit 2"
"$BIN" bench --tokens 0 >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "zero tokens must exit 2"
"$BIN" bench --cols 12x >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "bad number must exit 2"
"$BIN" bench --rows 1048576 --cols 1048576 >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "huge shape must exit 2"
DEEPINFER_KERNELS=fast "$BIN" bench --rows 8 --cols 32 >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q "DEEPINFER_KERNELS='fast'" "$tmp/err" && ok || bad "bad DEEPINFER_KERNELS: exit $rc, $(cat "$tmp/err")"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
