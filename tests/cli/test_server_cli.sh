#!/usr/bin/env bash
# `deepinfer serve` option handling: --help, usage errors (exit 2, cause on stderr), and the
# honest refusal (exit 1) while no engine is built in.  Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
bin=build/deepinfer
passed=0; failed=0
expect() { # description, expected exit, expected stderr/stdout substring, args...
    local what=$1 code=$2 needle=$3; shift 3
    local out rc
    out=$("$bin" serve "$@" 2>&1); rc=$?
    if [ "$rc" = "$code" ] && [[ "$out" == *"$needle"* ]]; then passed=$((passed + 1))
    else failed=$((failed + 1)); echo "FAIL: $what: exit $rc, output: $out"; fi
}
expect "help" 0 "--api-key KEY" --help
expect "unknown option" 2 "unknown option '--bogus'" --bogus 1
expect "port range" 2 "--port: expected an integer in [0, 65535], got '70000'" --port 70000
expect "port not a number" 2 "got 'abc'" --port abc
expect "missing value" 2 "missing value for '--host'" --host
expect "bad timeout" 2 "--request-timeout: expected seconds" --request-timeout -1
expect "bad context limit" 2 "--context-limit: expected an integer" --context-limit 3
# Without a loadable model the engine's own explanation and exit 1; once the model core lands,
# the server comes up (listening line) and SIGTERM stops it with exit 0.
out=$(timeout -s TERM 20 "$bin" serve --port 0 2>&1); rc=$?
if { [ $rc = 1 ] && [[ "$out" == *"model core"* ]]; } || { [ $rc = 0 ] && [[ "$out" == *"listening on"* ]]; } ||
   { [ $rc = 124 ] && [[ "$out" == *"listening on"* ]]; }; then passed=$((passed + 1))
else failed=$((failed + 1)); echo "FAIL: serve without a model: exit $rc, output: $out"; fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
