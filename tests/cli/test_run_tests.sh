#!/usr/bin/env bash
# test_run_tests.sh — tests/run_tests.sh's tally of pytest (DI_TEST_ONLY=python on the sample files
# of tests/data/run_tests): skips are reported in the closing line ("N passed, N failed, N skipped"),
# count as failures with CI=true (exit 1), and a failing test fails the run.  Ends with
# "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
passed=0
failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() { # CI value, sample file -> closing line in $tmp/last, exit status in $rc
    CI=$1 DI_TEST_ONLY=python DI_PYTEST_PATHS=tests/data/run_tests/$2 tests/run_tests.sh >"$tmp/out" 2>&1
    rc=$?
    tail -n 1 "$tmp/out" >"$tmp/last"
}

run "" pass_and_skip.py
[ $rc -eq 0 ] && [ "$(cat "$tmp/last")" = "1 passed, 0 failed, 1 skipped" ] && ok || bad "local skip: exit $rc: $(cat "$tmp/out")"
grep -q "stand-in for a missing oracle" "$tmp/out" && ok || bad "the skip's reason is not shown: $(cat "$tmp/out")"
run true pass_and_skip.py
[ $rc -eq 1 ] && [ "$(cat "$tmp/last")" = "1 passed, 1 failed, 1 skipped" ] && ok || bad "CI skip: exit $rc: $(cat "$tmp/out")"
run true pass_and_fail.py
[ $rc -eq 1 ] && [ "$(cat "$tmp/last")" = "1 passed, 1 failed" ] && ok || bad "failure: exit $rc: $(cat "$tmp/out")"
run "" pass_and_fail.py
[ $rc -eq 1 ] && ok || bad "failure outside CI: exit $rc: $(cat "$tmp/out")"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
