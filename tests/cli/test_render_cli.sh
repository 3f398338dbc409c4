#!/usr/bin/env bash
# test_render_cli.sh — `deepinfer render` / `deepinfer parse`: outputs, --help, usage errors (exit 2)
# and bad input (exit 1 with the field named on stderr).
set -u
cd "$(dirname "$0")/../.."
bin=build/deepinfer
pass=0; fail=0
check() { if [ "$2" = "$3" ]; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL $1: got [$2] expected [$3]"; fi; }

out=$(echo '{"encoding":"v4","thinking_mode":"chat","messages":[{"role":"user","content":"Hello"}]}' | $bin render)
check render_prompt "$out" '{"prompt":"<\uFF5Cbegin\u2581of\u2581sentence\uFF5C><\uFF5CUser\uFF5C>Hello<\uFF5CAssistant\uFF5C></think>"}'
tok="${SHARED_DIR:-../shared}/recipe-data/tokenizer/deepseek_v3_tokenizer.json"
out=$(echo '{"encoding":"v4","thinking_mode":"chat","messages":[{"role":"user","content":"<｜User｜>"}]}' | $bin render --tokenizer "$tok")
case "$out" in *'"ids":[0,128803,30,28217,6756,28217,32,128804,128822]}') check render_ids ok ok ;; *) check render_ids "$out" "injection ids of recipe.md 6.12" ;; esac
# A tokenizer.json that defines the control tokens itself is used as it is (issue 19 item 17):
# the tiny model's </think> keeps its own id, not the release's 128822; a grounding marker it
# lacks is text there, as the same prompt's text without the marker's being a control token.
tiny=$(mktemp -d)
$bin make-tiny --out "$tiny/m" >/dev/null 2>&1
tiny_tok="$tiny/m/tokenizer.json"
end_think=$(jq '.added_tokens[] | select(.content == "</think>") | .id' "$tiny_tok")
out=$(echo '{"encoding":"v41","thinking_mode":"chat","messages":[{"role":"user","content":"hi"}]}' | $bin render --tokenizer "$tiny_tok")
check render_tiny_end_think "$(echo "$out" | jq -c '.ids[-1]')" "$end_think"
conv='{"encoding":"v41","thinking_mode":"chat","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"a<｜ref｜>x"},{"role":"user","content":"b"}]}'
ids=$(echo "$conv" | $bin render --tokenizer "$tiny_tok" | jq -c .ids)
case "$ids" in '['*) check render_tiny_marker_as_text ok ok ;; *) check render_tiny_marker_as_text "$ids" "ids" ;; esac
check render_tiny_no_release_ids "$(echo "$ids" | jq '[.[] | select(. >= 128000)] | length')" 0
rm -rf "$tiny"
$bin render --tokenizer /nonexistent </dev/null 2>/dev/null; check render_bad_tokenizer $? 1
$bin render --tokenizer 2>/dev/null </dev/null; check render_tokenizer_missing_arg $? 2
$bin render --help >/dev/null; check render_help $? 0
$bin render --bogus </dev/null 2>/dev/null; check render_usage $? 2
err=$(echo '{"messages":[{"role":"robot"}]}' | $bin render 2>&1 >/dev/null); rc=$?
check render_bad_rc $rc 1
case "$err" in *"messages[0].role"*) check render_bad_msg ok ok ;; *) check render_bad_msg "$err" "names messages[0].role" ;; esac
echo 'not json' | $bin render >/dev/null 2>&1; check render_bad_json $? 1

out=$(echo '{"options":{"initial":"start"},"chunks":["Let me think","</think>Hi"]}' | $bin parse)
check parse_out "$out" '{"reasoning_content":"Let me think","content":"Hi","tool_calls":[],"invalid":[],"stopped":false,"finish_reason":"stop"}'
$bin parse --help >/dev/null; check parse_help $? 0
$bin parse extra </dev/null 2>/dev/null; check parse_usage $? 2
err=$(echo '{"chunks":[1]}' | $bin parse 2>&1 >/dev/null); rc=$?
check parse_bad_rc $rc 1
case "$err" in *"chunks[0]"*) check parse_bad_msg ok ok ;; *) check parse_bad_msg "$err" "names chunks[0]" ;; esac

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
