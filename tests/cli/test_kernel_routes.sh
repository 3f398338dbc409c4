#!/usr/bin/env bash
# test_kernel_routes.sh — every kernel route this CPU can run, tested on purpose, so a green run on
# one CPU class says something about the others (CI lands on one of AMD Zen 3, Zen 4, Intel Xeon):
#   1. each kernel file compiles under the weakest -march it claims to support (gcc: plain x86-64,
#      the SIMD files enable what they use with their own target pragmas; clang, the fuzz build's
#      compiler: the build's x86-64-v3 baseline);
#   2. for each DEEPINFER_KERNELS route the CPU has (ref, avx2, avx512): the kernel and forward
#      unit tests, and check-golden tiny-a (ref: every case on the reference route; avx2/avx512:
#      the exact and kvq cases, which run on that route — `ref`-mode cases always take the scalar
#      reference kernel, see check-golden --help), with the route named in the log checked;
#   3. the default binary on emulated CPUs (qemu-x86_64): an AVX2-only Haswell runs it and picks the
#      AVX2 route, refuses DEEPINFER_KERNELS=avx512 with a message; a Westmere (no AVX) gets the
#      start-up message naming AVX2 and exit 1, not an illegal instruction.
# Prints the route matrix, then "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
. tests/support/cli_test.sh
SHARED_DIR="${SHARED_DIR:-$(tools/shared-dir.sh)}"
GOLDEN="$SHARED_DIR/golden-v41/tiny-a"
KERNEL_TESTS="test_backend test_matmul test_matmul_avx512 test_matmul_qa test_attn_kernels test_expf_row test_mhc
test_moe test_rope test_wo_a test_forward test_forward_paged test_tiny_forward"
matrix=()
row() { matrix+=("$(printf '%-10s %-44s %s' "$1" "$2" "$3")"); }

if [ "$(uname -m)" != x86_64 ]; then
    echo "not an x86-64 machine: no x86 kernel route to test here"
    echo "0 passed, 0 failed"
    exit 0
fi

# 1. the target pragmas against the intrinsics each file uses
# gcc (the build's compiler) from plain x86-64: the floor the pragmas claim.  clang (only the fuzz
# build uses it) from the Makefile's default x86-64-v3: most AVX2 files carry GCC's pragma alone,
# which clang ignores, so under clang they rely on the build's baseline.
for cc_march in gcc:x86-64 clang:x86-64-v3; do
    cc=${cc_march%%:*} march=${cc_march#*:}
    bad_files=""
    for f in $(find src/kernels -name '*.c' | sort); do
        "$cc" -std=c11 -D_GNU_SOURCE -O2 -march="$march" -mtune=generic -Wall -Wextra -Werror -Wno-unused-parameter \
            -Iinclude -Isrc -c "$f" -o /dev/null 2>"$tmp/cc.err" || { bad_files="$bad_files $f"; head -5 "$tmp/cc.err"; }
    done
    if [ -z "$bad_files" ]; then ok; row compile "$cc -march=$march, every src/kernels file" ok
    else bad "$cc -march=$march cannot compile:$bad_files"; row compile "$cc -march=$march" "FAIL:$bad_files"; fi
done

# 2. the routes this CPU has (the same features backend_cpu.c asks cpuid for)
flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { grep -qw "$1" <<<"$flags"; }
routes="ref"
has avx2 && has fma && has f16c && routes="$routes avx2"
has avx512f && has avx512bw && has avx512vl && routes="$routes avx512"
declare -A table_name=([ref]=reference [avx2]=avx2-fma [avx512]=avx512)

for r in $routes; do
    failed_tests=""
    for t in $KERNEL_TESTS; do
        DEEPINFER_KERNELS=$r timeout 600 "build/tests/$t" >"$tmp/unit.log" 2>&1 || { failed_tests="$failed_tests $t"; tail -20 "$tmp/unit.log"; }
    done
    if [ -z "$failed_tests" ]; then ok; row "$r" "unit tests ($(wc -w <<<"$KERNEL_TESTS") kernel + forward binaries)" ok
    else bad "DEEPINFER_KERNELS=$r:$failed_tests"; row "$r" "unit tests" "FAIL:$failed_tests"; fi

    if [ "$r" = ref ]; then modes="all"; else modes="exact kvq"; fi
    for m in $modes; do
        args=(); [ "$m" = all ] || args=(--mode "$m")
        DEEPINFER_KERNELS=$r DEEPINFER_LOG_LEVEL=info timeout 900 "$BIN" check-golden "$GOLDEN" "${args[@]}" \
            >"$tmp/golden.out" 2>"$tmp/golden.err"
        rc=$?
        summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$tmp/golden.out" | tail -1)
        if [ $rc -eq 0 ] && grep -q "${table_name[$r]} kernels" "$tmp/golden.err" && grep -qE '^[1-9][0-9]* passed, 0 failed$' <<<"$summary"; then
            ok; row "$r" "check-golden tiny-a ($m cases)" "$summary"
        else
            bad "DEEPINFER_KERNELS=$r check-golden $m: exit $rc, '$summary'"; grep FAIL "$tmp/golden.out" | head; tail -3 "$tmp/golden.err"
            row "$r" "check-golden tiny-a ($m cases)" "FAIL (exit $rc) $summary"
        fi
    done
done

# 3. emulated CPUs below and at the baseline (qemu-user-static, installed by tools/install-deps.sh)
QEMU=$(command -v qemu-x86_64-static || command -v qemu-x86_64 || true)
if [ -z "$QEMU" ]; then
    bad "qemu-x86_64 not found (tools/install-deps.sh installs qemu-user-static): the emulated CPUs were not tested"
    row qemu "emulated Haswell / Westmere" "NOT RUN"
else
    q() { "$QEMU" -cpu "$@" 2>&1 | grep -v "TCG doesn't support requested feature"; return "${PIPESTATUS[0]}"; }
    out=$(q Haswell "$BIN" --version); rc=$?
    [ $rc -eq 0 ] && grep -q '^deepinfer ' <<<"$out" && ok || bad "Haswell --version: exit $rc: $out"
    out=$(DEEPINFER_LOG_LEVEL=info q Haswell "$BIN" check-golden "$GOLDEN" --mode exact); rc=$?
    if [ $rc -eq 0 ] && grep -q 'avx2-fma kernels' <<<"$out" && grep -qE '^[1-9][0-9]* passed, 0 failed$' <<<"$out"; then
        ok; row qemu "Haswell (AVX2, no AVX-512): check-golden exact" "$(grep -E '^[0-9]+ passed' <<<"$out")"
    else bad "Haswell check-golden: exit $rc"; echo "$out" | tail -5; row qemu "Haswell check-golden exact" "FAIL"; fi
    out=$(q Haswell build/tests/test_matmul_avx512); rc=$? # auto must take AVX2 where there is no AVX-512
    [ $rc -eq 0 ] && ok || { bad "Haswell test_matmul_avx512: exit $rc"; echo "$out" | tail -5; }
    out=$(DEEPINFER_KERNELS=avx512 q Haswell "$BIN" check-golden "$GOLDEN" --case exact.prefill); rc=$?
    [ $rc -ne 0 ] && grep -q 'DEEPINFER_KERNELS=avx512, but this CPU lacks AVX-512' <<<"$out" && ok \
        || bad "Haswell with DEEPINFER_KERNELS=avx512: exit $rc: $(tail -2 <<<"$out")"
    out=$(q Westmere "$BIN" --version); rc=$?
    if [ $rc -eq 1 ] && grep -q 'this CPU lacks AVX.*AVX2' <<<"$out"; then
        ok; row qemu "Westmere (no AVX): start-up refusal" "ok: $(cut -c1-60 <<<"$out")..."
    else bad "Westmere --version: exit $rc (want 1 with a message): $out"; row qemu "Westmere start-up refusal" "FAIL (exit $rc)"; fi
fi

echo "== kernel route matrix on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //') (routes: $routes)"
printf '%s\n' "${matrix[@]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
