#!/usr/bin/env bash
# test_replay.sh — decoder SWA bounded replay through the engine (`deepinfer generate` on the
# built-in tiny model, window 8): compact mode prefills and decodes; a prompt of at most K tokens
# gives the tokens of off mode (the replay covers it whole); K below the window is refused when
# the model loads, naming the variable, by the engine and by the model API (--mode exact).  The
# numerics of the replay are specified by build/tests/test_replay.  Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
. tests/support/cli_test.sh
long=$(seq 10 45 | paste -sd,)
short=$(seq 60 67 | paste -sd,)
compact() { DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE=compact DEEPINFER_YOCO_PREFILL_KEEP_TOKENS=8 "$@"; }

got=$(compact "$BIN" generate --prompt-ids "$long" --max-tokens 6 2>"$tmp/err")
[ $? -eq 0 ] && [ "$(wc -w <<<"$got")" -eq 6 ] && ok || bad "compact generate of a 36-token prompt: '$got' ($(cat "$tmp/err"))"

off=$("$BIN" generate --prompt-ids "$short" --max-tokens 6 2>/dev/null)
got=$(compact "$BIN" generate --prompt-ids "$short" --max-tokens 6 2>/dev/null)
[ -n "$off" ] && [ "$got" = "$off" ] && ok || bad "8-token prompt: compact '$got' vs off '$off'"

for extra in "" "--mode exact"; do
    DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE=compact DEEPINFER_YOCO_PREFILL_KEEP_TOKENS=7 \
        "$BIN" generate --prompt-ids "$short" --max-tokens 1 $extra >/dev/null 2>"$tmp/err"
    rc=$?
    [ $rc -ne 0 ] && grep -qF "DEEPINFER_YOCO_PREFILL_KEEP_TOKENS=7 is less than the model's sliding window of 8" "$tmp/err" && ok ||
        bad "K 7 ${extra:-(engine)}: exit $rc, $(cat "$tmp/err")"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
