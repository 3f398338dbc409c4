#!/usr/bin/env bash
# Runs every test deepinfer has and prints one closing line "N passed, N failed" (then
# ", N skipped" when pytest skipped some).
#   build/tests/test_*        unit tests (each prints its own "N passed, N failed")
#   build-asan/tests/test_*   the same unit tests under ASan+UBSan (when built)
#   tests/cli/test_*.sh       end-to-end tests of the CLI (same summary line, or exit status)
#   tests/python/test_*.py    pytest (Python binding, oracles, HTTP clients)
#   build-fuzz/fuzz_*         libFuzzer targets, each for DI_FUZZ_SECONDS seconds (when set; CI sets it)
# DI_TEST_ONLY=unit limits the run to the plain unit tests, DI_TEST_ONLY=fuzz to the fuzzers,
# DI_TEST_ONLY=python to pytest (over DI_PYTEST_PATHS, default tests/python).
# A skipped test is reported with its reason; with CI=true (where tools/install-deps.sh has put
# every oracle in place, so nothing has a reason to skip) each one also counts as a failure.
set -u
cd "$(dirname "$0")/.."
SHARED_DIR=$(tools/shared-dir.sh) || exit 2 # the golden sets and recipe data several tests read
export SHARED_DIR
passed=0
failed=0
skipped=0
failures=()

tally() { # name, log file, exit status
    local name=$1 log=$2 rc=$3 line p f
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    if [ -n "$line" ]; then
        p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')
        f=$(echo "$line" | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/')
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi   # crashed after printing
    elif [ "$rc" -eq 0 ]; then p=1; f=0
    else p=0; f=1
    fi
    passed=$((passed + p)); failed=$((failed + f))
    if [ "$f" -ne 0 ]; then
        failures+=("$name")
        echo "---- $name (exit $rc) ----"; tail -n 40 "$log"
    fi
    printf '%-48s %s passed, %s failed\n' "$name" "$p" "$f"
}

logdir=$(mktemp -d)
trap 'rm -rf "$logdir"' EXIT

run_fuzzers() {
    local seconds=$1 f name corpus log
    for f in build-fuzz/fuzz_*; do
        [ -x "$f" ] || continue
        name=$(basename "$f")
        corpus="$logdir/corpus_$name"
        mkdir -p "$corpus"
        # seed inputs, when the target has some, live in tests/data/fuzz/<name>/
        [ -d "tests/data/fuzz/$name" ] && cp -r "tests/data/fuzz/$name/." "$corpus/"
        log="$logdir/$name.log"
        timeout $((seconds + 120)) "$f" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 \
            -print_final_stats=1 "$corpus" >"$log" 2>&1
        local rc=$?
        tally "$f (${seconds}s, $(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo '?') runs)" "$log" $rc
    done
}

# pytest over DI_PYTEST_PATHS; its summary line ("N passed, N skipped, N failed in ...") is tallied.
run_pytest() {
    local log="$logdir/pytest.log" rc summary p f s
    # shellcheck disable=SC2086 # DI_PYTEST_PATHS is a list of paths
    PYTHONPATH=python timeout 1800 python3 -m pytest -q -rs ${DI_PYTEST_PATHS:-tests/python} >"$log" 2>&1
    rc=$?
    summary=$(grep -E '^[=]* ?[0-9]+ (passed|failed|skipped|errors?)' "$log" | tail -n 1)
    p=$(echo "$summary" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+' || true)
    f=$(echo "$summary" | grep -oE '[0-9]+ (failed|error|errors)' | grep -oE '[0-9]+' | paste -sd+ | bc 2>/dev/null || true)
    s=$(echo "$summary" | grep -oE '[0-9]+ skipped' | grep -oE '[0-9]+' || true)
    p=${p:-0}; f=${f:-0}; s=${s:-0}
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ] && [ "$f" -eq 0 ]; then f=1; fi
    skipped=$((skipped + s))
    if [ "$s" -ne 0 ]; then
        grep -E '^SKIPPED' "$log"
        if [ "${CI:-}" = true ]; then f=$((f + s)); fi
    fi
    passed=$((passed + p)); failed=$((failed + f))
    if [ "$f" -ne 0 ]; then failures+=("pytest"); tail -n 60 "$log"; fi
    printf '%-48s %s passed, %s failed, %s skipped\n' "tests/python (pytest)" "$p" "$f" "$s"
}

# The closing line: "N passed, N failed", then ", N skipped" when some were.
summary_line() {
    if [ ${#failures[@]} -gt 0 ]; then echo "failed: ${failures[*]}"; fi
    if [ "$skipped" -gt 0 ]; then
        [ "${CI:-}" = true ] && echo "CI=true: the $skipped skipped tests count as failures"
        echo "$passed passed, $failed failed, $skipped skipped"
    else
        echo "$passed passed, $failed failed"
    fi
    [ "$failed" -eq 0 ]
}

if [ "${DI_TEST_ONLY:-}" = python ]; then
    run_pytest
    summary_line
    exit
fi

if [ "${DI_TEST_ONLY:-}" = fuzz ]; then
    run_fuzzers "${DI_FUZZ_SECONDS:-30}"
    summary_line
    exit
fi

for dir in build/tests build-asan/tests; do
    [ -d "$dir" ] || continue
    [ "${DI_TEST_ONLY:-}" = unit ] && [ "$dir" = build-asan/tests ] && continue
    for t in "$dir"/test_*; do
        [ -x "$t" ] || continue
        log="$logdir/$(echo "$t" | tr / _).log"
        ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 timeout 900 "$t" >"$log" 2>&1
        tally "$t" "$log" $?
    done
done

if [ "${DI_TEST_ONLY:-}" != unit ]; then
    for t in tests/cli/test_*.sh; do
        [ -f "$t" ] || continue
        log="$logdir/$(basename "$t").log"
        timeout 1200 bash "$t" >"$log" 2>&1
        tally "$t" "$log" $?
    done
    if ls tests/python/test_*.py >/dev/null 2>&1; then run_pytest; fi
fi

if [ -n "${DI_FUZZ_SECONDS:-}" ] && [ "${DI_TEST_ONLY:-}" != unit ]; then
    run_fuzzers "$DI_FUZZ_SECONDS"
fi

summary_line
