#!/usr/bin/env bash
# test_generate_constrained.sh — `deepinfer generate --json-schema FILE | --regex R | --grammar FILE`
# on the built-in random tiny model (generated fresh in a temporary XDG_CACHE_HOME), for several
# seeds at temperature 1.  Oracles: Python's json + jsonschema for the schema, re.fullmatch for
# the regex, lark for the grammar (the text printed, less the newline that ends it); bad constraints and flag combinations exit 1 / 2 naming the problem.  Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
. tests/support/cli_test.sh
unset DEEPINFER_HF_MODEL_DIR
gen() { "$BIN" generate --prompt "answer:" --temperature 1 --max-tokens 64 "$@"; }
nl=$'\n'
# the text a command printed: $(...; echo x) keeps its trailing newline, which ends the output
text() { local t="${1%x}"; printf '%s' "${t%"$nl"}"; }

cat >"$tmp/schema.json" <<'J'
{"type": "object", "properties": {"id": {"type": "integer"}, "ok": {"type": "boolean"},
 "tags": {"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 3}}, "required": ["ok", "tags"],
 "additionalProperties": false}
J
printf 'root ::= item ("," item){0,2}\nitem ::= "a" | "bc" | "[" root "]"\n' >"$tmp/g.ebnf"

for seed in 1 2 3 4 5; do
    gen --seed $seed --json-schema "$tmp/schema.json" >"$tmp/out" 2>"$tmp/err" || bad "json seed $seed: $(cat "$tmp/err")"
    if grep -q "finish stop" "$tmp/err"; then
        python3 -c 'import json, sys, jsonschema; jsonschema.validate(json.load(open(sys.argv[1])), json.load(open(sys.argv[2])))' \
            "$tmp/out" "$tmp/schema.json" 2>/dev/null && ok || bad "json seed $seed: '$(cat "$tmp/out")' fails the schema"
    fi
    out=$(text "$(gen --seed $seed --regex '[a-f]{2,4}-[0-9]{1,3}' 2>"$tmp/err"; echo x)")
    python3 -c 'import re, sys; sys.exit(not re.fullmatch(sys.argv[1], sys.argv[2]))' '[a-f]{2,4}-[0-9]{1,3}' "$out" &&
        grep -q "finish stop" "$tmp/err" && ok || bad "regex seed $seed: '$out' $(cat "$tmp/err")"
    out=$(text "$(gen --seed $seed --grammar "$tmp/g.ebnf" 2>"$tmp/err"; echo x)")
    if grep -q "finish stop" "$tmp/err"; then
        python3 -c '
import sys, lark
g = lark.Lark("start: item (\",\" item)~0..2\nitem: \"a\" | \"bc\" | \"[\" start \"]\"", parser="earley", lexer="dynamic")
g.parse(sys.argv[1])' "$out" 2>/dev/null && ok || bad "grammar seed $seed: '$out' not in the language"
    fi
done

# errors: the problem named, exit 1 (a bad constraint) or 2 (usage)
echo '{"type": "object", "patternProperties": {}}' >"$tmp/bad.json"
gen --json-schema "$tmp/bad.json" >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q patternProperties "$tmp/err" && ok || bad "bad schema: $(cat "$tmp/err")"
gen --regex '(open' >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q regex "$tmp/err" && ok || bad "bad regex: $(cat "$tmp/err")"
gen --grammar "$tmp/missing.ebnf" >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "missing.ebnf" "$tmp/err" && ok || bad "missing grammar file: $(cat "$tmp/err")"
gen --regex a --grammar "$tmp/g.ebnf" >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "at most one" "$tmp/err" && ok || bad "two constraints: $(cat "$tmp/err")"
gen --regex a --ignore-eos 1 >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "ignore_eos" "$tmp/err" && ok || bad "ignore-eos: $(cat "$tmp/err")"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
