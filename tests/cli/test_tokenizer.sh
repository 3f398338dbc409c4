#!/usr/bin/env bash
# End-to-end tests of `deepinfer tokenize` and `deepinfer detokenize` (architecture.md CLI
# contracts): ids for stdin text, exact bytes back, the --plain / --encoding switches, and
# clear errors with the right exit codes (2 usage, 1 failure).
set -u
cd "$(dirname "$0")/../.."
BIN=${DEEPINFER_BIN:-build/deepinfer}
SHARED_DIR=${SHARED_DIR:-$(cd .. && pwd)/shared}
TOK="$SHARED_DIR/recipe-data/tokenizer/deepseek_v3_tokenizer.json"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

check() { # name, command (string), expected stdout, expected exit code
    local name=$1 cmd=$2 want=$3 want_rc=$4 got rc
    got=$(bash -c "$cmd" 2>"$tmp/err")
    rc=$?
    if [ "$got" == "$want" ] && [ "$rc" -eq "$want_rc" ]; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAIL $name: exit $rc (want $want_rc)"
        echo "  got:  $got"
        echo "  want: $want"
        sed 's/^/  stderr: /' "$tmp/err"
    fi
}

check_err() { # name, command, exit code, text the error message must contain
    local name=$1 cmd=$2 want_rc=$3 want_msg=$4 rc
    bash -c "$cmd" >/dev/null 2>"$tmp/err"
    rc=$?
    if [ "$rc" -eq "$want_rc" ] && grep -qF -- "$want_msg" "$tmp/err"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAIL $name: exit $rc (want $want_rc), stderr:"
        sed 's/^/  /' "$tmp/err"
    fi
}

# recipe.md §6 item 3 (README example)
check readme_example "printf 'Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ' | $BIN tokenize --tokenizer $TOK" \
    '{"ids":[19923,3,223,5464,5008,1175,19,940,223,19,438,223,20,6113,257,76589,131,100,76032,1628,76589,131,108,76589,131,98]}' 0
# Added tokens: recognized by default with the V4 table, plain text with --plain (encode_vectors special_literals).
check special_v4 "printf '<｜User｜> <think> </think> ｜DSML｜ <｜end▁of▁sentence｜>' | $BIN tokenize --tokenizer $TOK --encoding v4" \
    '{"ids":[128803,223,128821,223,128822,223,128825,223,1]}' 0
check special_plain "printf '<｜User｜>' | $BIN tokenize --tokenizer $TOK --encoding v4 --plain" \
    '{"ids":[30,28217,6756,28217,32]}' 0
check system_v41 "printf '<｜System｜>' | $BIN tokenize --tokenizer $TOK --encoding v41" '{"ids":[128799]}' 0
check empty_input "printf '' | $BIN tokenize --tokenizer $TOK" '{"ids":[]}' 0
check threads_same "printf 'a b\nc d\n%.0s' {1..3000} | $BIN tokenize --tokenizer $TOK --threads 2 | md5sum" \
    "$(printf 'a b\nc d\n%.0s' {1..3000} | $BIN tokenize --tokenizer $TOK --threads 1 | md5sum)" 0
# detokenize: exact bytes, including a token that ends inside a character (🦀 = 3574 102 225).
check detok_exact "echo '{\"ids\":[3574,102,225,19923]}' | $BIN detokenize --tokenizer $TOK | od -An -tx1 | tr -d ' \n'" \
    'f09fa68048656c6c6f' 0
check detok_partial "echo '{\"ids\":[3574]}' | $BIN detokenize --tokenizer $TOK | od -An -tx1 | tr -d ' \n'" 'f09f' 0
printf 'Tabs\tand  spaces \n\n\r\n 123456 ünïcödé 🦀 <｜User｜>' >"$tmp/in.txt"
check round_trip "$BIN tokenize --tokenizer $TOK --plain <$tmp/in.txt | $BIN detokenize --tokenizer $TOK | cmp - $tmp/in.txt && echo same" same 0

check help_tokenize "$BIN tokenize --help | head -c 27" 'usage: deepinfer tokenize -' 0
check help_detokenize "$BIN detokenize --help | head -c 29" 'usage: deepinfer detokenize -' 0
check_err no_tokenizer "echo hi | $BIN tokenize" 2 "--tokenizer FILE is required"
check_err bad_encoding "echo hi | $BIN tokenize --tokenizer $TOK --encoding v5" 2 "expected v4 or v41"
check_err bad_option "echo hi | $BIN detokenize --tokenizer $TOK --frobnicate" 2 "unknown or incomplete option"
check_err bad_threads "echo hi | $BIN tokenize --tokenizer $TOK --threads 0" 2 "--threads"
check_err invalid_utf8 "printf 'ok \\xc3\\x28' | $BIN tokenize --tokenizer $TOK" 1 "stdin: invalid UTF-8 at byte 3"
check_err missing_file "echo hi | $BIN tokenize --tokenizer /nonexistent/t.json" 1 "/nonexistent/t.json"
head -c 100000 "$TOK" >"$tmp/truncated.json"
check_err truncated_file "echo hi | $BIN tokenize --tokenizer $tmp/truncated.json" 1 "truncated.json"
check_err detok_bad_json "echo '{\"ids\":[1,' | $BIN detokenize --tokenizer $TOK" 1 "stdin:"
check_err detok_bad_id "echo '{\"ids\":[5,200000]}' | $BIN detokenize --tokenizer $TOK" 1 "200000 is out of range"
check_err detok_not_int "echo '{\"ids\":[\"a\"]}' | $BIN detokenize --tokenizer $TOK" 1 "ids"
check_err detok_negative "echo '{\"ids\":[-1]}' | $BIN detokenize --tokenizer $TOK" 1 "ids[0]"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
