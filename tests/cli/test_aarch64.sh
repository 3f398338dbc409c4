#!/usr/bin/env bash
# test_aarch64.sh — the aarch64 build (make aarch64: Debian's cross compiler, the NEON kernels of
# src/kernels/neon/) run under qemu-aarch64, the second backend's proof (issue 31):
#   1. the kernel and forward unit tests of $AARCH64_BUILD/tests: every registered table (the
#      reference and NEON, di_backend_cpu_tables) against the reference and against the lane
#      order of kernels/cpu/matmul_simd.h written out in scalar fmaf code, bit for bit where the
#      contracts say so (the x86 tables are held to the same definition by the same tests);
#   2. deepinfer check-golden on golden-v41/tiny-a, every case of every mode on the NEON table
#      (the log must name it; the case count of each mode is checked against golden.json);
#   3. the `ref`-mode cases must print the x86-64 build's figures exactly (build/deepinfer): the
#      scalar reference route gives the same bits on both architectures.  The exact and kvq cases
#      differ from x86's only through the AVX2 tables' libmvec expf (within 3 ulp of expf, in
#      SwiGLU): NEON takes expf's own bits there.
# On an aarch64 host there is nothing to emulate: the plain unit tests run the NEON table.
# The build's dynamic loader and libc are the cross toolchain's (/usr/aarch64-linux-gnu/lib:
# mixing its ld.so with libc6:arm64's libc hangs pthread_create), the other libraries the :arm64
# packages' and those tools/install-deps.sh unpacks into AARCH64_EXTRA.
# Prints one row per step, then "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
. tests/support/cli_test.sh
build=${AARCH64_BUILD:-build-aarch64}
extra=${AARCH64_EXTRA:-/opt/deepinfer-arm64}/usr/lib/aarch64-linux-gnu
SHARED_DIR=${SHARED_DIR:-$(tools/shared-dir.sh)} || exit 2
export SHARED_DIR # the unit tests read it (qemu passes the environment on)
GOLDEN="$SHARED_DIR/golden-v41/tiny-a"
KERNEL_TESTS="test_backend test_matmul test_matmul_avx512 test_matmul_qa test_attn_kernels test_expf_row test_numformats test_vec test_rope
test_mhc test_moe test_wo_a test_forward test_forward_paged test_tiny_forward"

if [ "$(uname -m)" = aarch64 ]; then
    echo "an aarch64 machine: its own unit tests run the NEON table; nothing to emulate"
    echo "0 passed, 0 failed"
    exit 0
fi
QEMU=$(command -v qemu-aarch64-static || command -v qemu-aarch64) ||
    { bad "no qemu-aarch64 (tools/install-deps.sh installs qemu-user-static)"; echo "$passed passed, $failed failed"; exit 1; }
# ELF e_machine (bytes 18-19) 0xB7: AArch64, so nothing here runs a host binary by mistake
if [ "$(od -An -tx1 -j18 -N2 "$build/deepinfer" 2>/dev/null | tr -d ' ')" != b700 ]; then
    bad "$build/deepinfer is no aarch64 binary (make aarch64; make test builds it first)"
    echo "$passed passed, $failed failed"
    exit 1
fi
on_aarch64=("$QEMU" -L /usr/aarch64-linux-gnu -E LD_LIBRARY_PATH="/usr/aarch64-linux-gnu/lib:$extra:$extra/openmpi/lib")
rows=()
row() { rows+=("$(printf '%-52s %s' "$1" "$2")"); }

# 1. unit tests (they choose their tables themselves: DEEPINFER_KERNELS unset)
unset DEEPINFER_KERNELS
for t in $KERNEL_TESTS; do
    start=$SECONDS
    timeout 600 "${on_aarch64[@]}" "$build/tests/$t" >"$tmp/$t.log" 2>&1
    rc=$?
    summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$tmp/$t.log" | tail -1)
    if [ $rc -eq 0 ] && grep -qE '^[1-9][0-9]* passed, 0 failed$' <<<"$summary"; then ok; row "$t" "$summary ($((SECONDS - start))s)"
    else bad "$build/tests/$t under qemu: exit $rc, '$summary'"; tail -20 "$tmp/$t.log"; row "$t" "FAIL (exit $rc) $summary"; fi
done

# 2. check-golden on the NEON table, every mode, as five processes at once: the `ref` cases take
# the scalar reference matmul, which qemu runs slowest (~95 s of the ~150 s of CPU), so they are
# split three ways by name.  Each mode's case count is summed and checked.
start=$SECONDS
parts="exact:--mode=exact kvq:--mode=kvq ref:--case=ref.prefill ref:--case=ref.chunked ref:--case=ref.dspark"
i=0
for p in $parts; do
    i=$((i + 1))
    opt=${p#*:}
    DEEPINFER_KERNELS=neon DEEPINFER_LOG_LEVEL=info timeout 600 "${on_aarch64[@]}" "$build/deepinfer" check-golden "$GOLDEN" \
        "${opt%%=*}" "${opt#*=}" >"$tmp/golden_$i.out" 2>"$tmp/golden_$i.err" &
    echo $! >"$tmp/golden_$i.pid"
done
declare -A mode_passed=() mode_bad=()
i=0
for p in $parts; do
    i=$((i + 1))
    m=${p%%:*}
    wait "$(cat "$tmp/golden_$i.pid")"
    rc=$?
    summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$tmp/golden_$i.out" | tail -1)
    if [ $rc -eq 0 ] && grep -q 'neon kernels' "$tmp/golden_$i.err" && grep -qE '^[1-9][0-9]* passed, 0 failed$' <<<"$summary"; then
        mode_passed[$m]=$(( ${mode_passed[$m]:-0} + ${summary%% passed*} ))
    else
        mode_bad[$m]="${mode_bad[$m]:-} ${p#*:} (exit $rc, '$summary')"
        grep FAIL "$tmp/golden_$i.out" | head; grep -E 'workspace|error' "$tmp/golden_$i.err" | tail -3
    fi
done
for m in exact kvq ref; do
    want=$(python3 -c 'import json, sys; print(sum(c["name"].startswith(sys.argv[2] + ".") for c in json.load(open(sys.argv[1]))["cases"]))' \
        "$GOLDEN/golden.json" "$m") # the set's cases of this mode (12 each in tiny-a)
    if [ -z "${mode_bad[$m]:-}" ] && [ "${mode_passed[$m]:-0}" -eq "$want" ] && [ "$want" -gt 0 ]; then
        ok; row "check-golden tiny-a ($m cases, neon)" "${mode_passed[$m]} passed, 0 failed"
    else
        bad "check-golden $m cases under qemu: ${mode_passed[$m]:-0} of $want passed;${mode_bad[$m]:-}"
        row "check-golden tiny-a ($m cases, neon)" "FAIL: ${mode_passed[$m]:-0} of $want"
    fi
done
row "  (five processes at once)" "$((SECONDS - start))s"
cat "$tmp"/golden_*.out | grep -E '^case=' | sed 's/^/    /'
grep -hE '^case=ref\.' "$tmp"/golden_*.out | sort >"$tmp/golden_ref.cases"

# 3. the reference route: the same figures as the x86-64 build
if [ -x "$BIN" ]; then
    DEEPINFER_LOG_LEVEL=warn timeout 600 "$BIN" check-golden "$GOLDEN" --mode ref >"$tmp/x86_ref.out" 2>&1
    if diff <(grep -E '^case=' "$tmp/x86_ref.out" | sort) "$tmp/golden_ref.cases" >"$tmp/ref.diff" &&
        [ -s "$tmp/x86_ref.out" ] && grep -qE '^case=' "$tmp/x86_ref.out"; then
        ok; row "ref cases: aarch64 == x86-64 figures" "$(grep -cE '^case=' "$tmp/x86_ref.out") cases the same"
    else bad "ref-mode figures differ between aarch64 and x86-64:"; cat "$tmp/ref.diff"; row "ref cases: aarch64 == x86-64" FAIL; fi
else
    bad "$BIN missing: the ref-mode figures were not compared with x86-64 (make)"; row "ref cases: aarch64 == x86-64" "NOT RUN"
fi

echo "== aarch64 (NEON under $(basename "$QEMU"))"
printf '%s\n' "${rows[@]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
