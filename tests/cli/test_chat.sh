#!/usr/bin/env bash
# test_chat.sh — `deepinfer chat` on the built-in tiny model (generated fresh in a temporary
# XDG_CACHE_HOME), driven through a pipe: one user turn per line.  Oracles: the `render` command
# (each turn's prompt length is the whole conversation rendered), /reset returning to the first
# turn's prompt, determinism, SIGINT stopping a long reply while the program goes on (bounded
# in time), usage errors (exit 2).  Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
. tests/support/cli_test.sh
. tests/support/wait_for.sh
unset DEEPINFER_HF_MODEL_DIR
pid=""
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
MODEL="$tmp/cache/deepinfer/tiny-v41"
# the prompt sizes of the turns, from the per-reply summary lines on stderr
prompts() { sed -n 's/^\[prompt \([0-9]*\) tokens.*/\1/p' "$1" | tr '\n' ' '; }

# two turns through a pipe, then /reset and the first line again
printf 'Hello\nHow are you?\n/reset\nHello\n' | "$BIN" chat --system "Be brief." --max-tokens 6 >"$tmp/out" 2>"$tmp/err"
rc=$?
set -- $(prompts "$tmp/err")
[ $rc -eq 0 ] && [ $# -eq 3 ] && ok || bad "3 replies expected: rc $rc, prompts '$*': $(cat "$tmp/err")"
# the first turn's prompt is the rendered [system, user] conversation
want=$(echo '{"encoding":"v41","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello"}],"thinking_mode":"chat"}' |
    "$BIN" render --tokenizer "$MODEL/tokenizer.json" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["ids"]))')
[ -n "$want" ] && [ "${1:-}" = "$want" ] && ok || bad "turn 1 prompt ${1:-} tokens, render says $want"
# turn 2 carries turn 1 and its reply: longer than turn 1 + the new user text
[ "${2:-0}" -gt "$(( ${1:-0} + 4 ))" ] && ok || bad "turn 2 prompt ${2:-} tokens does not hold turn 1 (${1:-})"
[ "${3:-}" = "${1:-}" ] && grep -q "conversation reset" "$tmp/err" && ok || bad "after /reset: ${3:-} tokens, want ${1:-}"
[ "$(wc -l <"$tmp/out")" -ge 3 ] && ok || bad "replies on stdout: $(cat "$tmp/out")"

# the same input gives the same replies
printf 'Hello\nHow are you?\n/reset\nHello\n' | "$BIN" chat --system "Be brief." --max-tokens 6 >"$tmp/out2" 2>/dev/null
cmp -s "$tmp/out" "$tmp/out2" && ok || bad "chat is not deterministic"
printf 'Hi\n/quit\nnever read\n' | "$BIN" chat --thinking --max-tokens 4 >/dev/null 2>"$tmp/err"
[ $? -eq 0 ] && [ "$(prompts "$tmp/err" | wc -w)" -eq 1 ] && ok || bad "/quit: $(cat "$tmp/err")"

# (files of their own, which exist only once the program under test writes them)
reply_started() { [ -s "$tmp/long.out" ]; }
reply_stopped() { grep -q "\[stopped\]" "$tmp/long.err" 2>/dev/null; }
turn_done() { grep -q "^\[prompt " "$tmp/prompt.err" 2>/dev/null; }
exited() { ! kill -0 "$pid" 2>/dev/null; }

# SIGINT during a long reply stops it; the program goes on reading (it then sees /reset, /quit)
mkfifo "$tmp/in"
"$BIN" chat --max-tokens 200000 --ignore-eos 1 <"$tmp/in" >"$tmp/long.out" 2>"$tmp/long.err" &
pid=$!
exec 3<>"$tmp/in" # read-write: opening never blocks, even if chat already exited
echo "Tell me a long story" >&3
wait_for 60 reply_started || bad "no reply text 60 s after the first line: $(cat "$tmp/long.err")"
kill -INT "$pid"
wait_for 20 reply_stopped || bad "the reply did not stop within 20 s of SIGINT: $(cat "$tmp/long.err")"
printf '/reset\n/quit\n' >&3
exec 3>&-
if ! wait_for 10 exited; then
    bad "chat still running 10 s after SIGINT and /quit"
    kill -9 "$pid"
fi
wait "$pid"
rc=$?
pid=""
[ $rc -eq 0 ] && grep -q "finish abort" "$tmp/long.err" && grep -q "\[stopped\]" "$tmp/long.err" &&
    grep -q "conversation reset" "$tmp/long.err" && ok || bad "SIGINT: rc $rc: $(cat "$tmp/long.err")"

# Ctrl-C at the prompt exits (status 0): after a first reply, chat is back at the prompt
"$BIN" chat --max-tokens 2 <"$tmp/in" >/dev/null 2>"$tmp/prompt.err" &
pid=$!
exec 3<>"$tmp/in"
echo "Hi" >&3
wait_for 60 turn_done || bad "no reply to the first line within 60 s: $(cat "$tmp/prompt.err")"
kill -INT "$pid"
if ! wait_for 5 exited; then
    bad "chat still waiting 5 s after SIGINT at the prompt"
    kill -9 "$pid"
fi
wait "$pid"
rc=$?
pid=""
exec 3>&-
[ $rc -eq 0 ] && ok || bad "SIGINT at the prompt: rc $rc: $(cat "$tmp/prompt.err")"
# a bad line is reported, the chat goes on, the status says a turn failed
printf '\xff\nHi\n' | "$BIN" chat --max-tokens 3 >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "not valid UTF-8" "$tmp/err" && [ "$(prompts "$tmp/err" | wc -w)" -eq 1 ] && ok || bad "bad line: $(cat "$tmp/err")"

# usage and model errors
"$BIN" chat --bogus 1 </dev/null >/dev/null 2>"$tmp/err"; [ $? -eq 2 ] && [ -s "$tmp/err" ] && ok || bad "unknown flag must exit 2"
"$BIN" chat --temperature -1 </dev/null >/dev/null 2>"$tmp/err"; [ $? -eq 2 ] && ok || bad "bad temperature must exit 2"
"$BIN" chat --help | grep -q -- "--system" && ok || bad "--help"
"$BIN" chat --model "$tmp/nowhere" </dev/null >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "$tmp/nowhere" "$tmp/err" && ok || bad "missing model dir: $(cat "$tmp/err")"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
