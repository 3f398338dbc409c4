#!/usr/bin/env bash
# Live EPLB flags of `deepinfer generate` (tools/deepinfer/cli_eplb.c) on the built-in tiny model:
# --help lists them, bad values and flags without --eplb-ranks are usage errors (exit 2), ranks
# that do not divide the experts are refused with the cause (exit 1), and a run reports its
# steps and replans, the replans following the schedule: window W, period P (no warm-up) replan
# at step W and every multiple of P.  Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
bin=build/deepinfer
passed=0; failed=0
cache=$(mktemp -d); trap 'rm -rf "$cache"' EXIT
export XDG_CACHE_HOME=$cache DEEPINFER_HF_MODEL_DIR=
expect() { # description, expected exit, expected output substring, args...
    local what=$1 code=$2 needle=$3; shift 3
    local out rc
    out=$(timeout 120 "$bin" generate "$@" 2>&1); rc=$?
    if [ "$rc" = "$code" ] && [[ "$out" == *"$needle"* ]]; then passed=$((passed + 1))
    else failed=$((failed + 1)); echo "FAIL: $what: exit $rc, output: $out"; fi
}
expect "help" 0 "--eplb-redundant N" --help
expect "ranks range" 2 "invalid value '0' for --eplb-ranks" --prompt-ids 1,2 --eplb-ranks 0
expect "phase choice" 2 "invalid value 'both' for --eplb-phase" --prompt-ids 1,2 --eplb-ranks 2 --eplb-phase both
expect "window without ranks" 2 "need --eplb-ranks N" --prompt-ids 1,2 --eplb-window 4
expect "not with a model loop" 2 "--mode ref only" --prompt-ids 1,2 --eplb-ranks 2 --mode exact
expect "ranks must divide the experts" 1 "8 experts do not spread evenly over 3 GPUs" --prompt-ids 1,2 --eplb-ranks 3
expect "window above the period" 1 "must not exceed the period" --prompt-ids 1,2 --eplb-ranks 2 --eplb-window 9 --eplb-period 4
# 24 tokens, no speculation: one prefill step and 23 decode steps; window 3, period 5 ->
# replans at 3, 5, 10, 15, 20
out=$(timeout 120 "$bin" generate --prompt-ids 1,2,3,4,5 --max-tokens 24 --ignore-eos 1 --draft-max 0 --eplb-ranks 4 \
      --eplb-window 3 --eplb-period 5 2>&1); rc=$?
if [ $rc = 0 ] && [[ "$out" == *"eplb: steps 24 replans 5 "* ]]; then passed=$((passed + 1))
else failed=$((failed + 1)); echo "FAIL: eplb summary: exit $rc, output: $out"; fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
