#!/usr/bin/env bash
# test_generate_text.sh — `deepinfer generate --prompt TEXT [--chat [--thinking]]` on the built-in
# tiny model (generated fresh in a temporary XDG_CACHE_HOME).  Oracles: the HF `tokenizers`
# package (prompt token counts), the `render` command (chat prompt lengths), the --prompt-ids
# path decoded with Python's UTF-8 codec (greedy text equals the ids path), seeded
# reproducibility, the Engram map built from tokenizer.json equal to the shipped one, and
# usage / model errors (exit 2 / 1 with the cause).  Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
. tests/support/cli_test.sh
SHARED_DIR="${SHARED_DIR:-$(cd .. && pwd)/shared}"
unset DEEPINFER_HF_MODEL_DIR
MODEL="$tmp/cache/deepinfer/tiny-v41"
# "prompt N tokens; generated M tokens" of the summary line
field() { sed -n "s/.*$1 \([0-9]*\) tokens.*/\1/p" "$2" | head -n 1; }

# plain text: BOS + the HF encoding of the text
out=$("$BIN" generate --prompt "Hello world" --max-tokens 8 2>"$tmp/err")
rc=$?
[ $rc -eq 0 ] && grep -q "tokens/s" "$tmp/err" && grep -q "finish length" "$tmp/err" && ok || bad "text prompt: rc $rc $(cat "$tmp/err")"
want=$(python3 -c 'import sys; from tokenizers import Tokenizer; print(len(Tokenizer.from_file(sys.argv[1]).encode("Hello world", add_special_tokens=False).ids) + 1)' "$MODEL/tokenizer.json")
[ -n "$want" ] && [ "$(field prompt "$tmp/err")" = "$want" ] && ok || bad "text prompt tokens: $(field prompt "$tmp/err"), HF tokenizers + BOS: $want"

# greedy text equals the ids path: encode like the engine (BOS + plain BPE), generate ids, decode
ids=$(printf '%s' "Hello world" | "$BIN" tokenize --tokenizer "$MODEL/tokenizer.json" --plain | python3 -c 'import json,sys; print(",".join(map(str, [0] + json.load(sys.stdin)["ids"])))')
gen=$("$BIN" generate --prompt-ids "$ids" --max-tokens 24 --ignore-eos 1 2>/dev/null)
txt=$("$BIN" generate --prompt "Hello world" --max-tokens 24 --ignore-eos 1 2>/dev/null; echo x)
python3 - "$MODEL/tokenizer.json" "$gen" "${txt%x}" "$BIN" <<'PY' && ok || bad "greedy text differs from the decoded ids path"
import json, subprocess, sys
tok, gen, txt, binary = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
added = {t["id"] for t in json.load(open(tok))["added_tokens"]}
ids = [int(x) for x in gen.split() if int(x) not in added]
raw = subprocess.run([binary, "detokenize", "--tokenizer", tok], input=json.dumps({"ids": ids}).encode(),
                     capture_output=True, check=True).stdout
# an incomplete UTF-8 tail at the end of the stream (a lead byte followed only by continuation
# bytes, fewer than its sequence needs) is dropped (recipe.md §1.5)
for k in range(1, 4):
    if len(raw) >= k and raw[-k] & 0xC0 == 0xC0 and all(b & 0xC0 == 0x80 for b in raw[len(raw) - k + 1:]) \
            and k < (2 if raw[-k] < 0xE0 else 3 if raw[-k] < 0xF0 else 4):
        raw = raw[:-k]
        break
want = raw.decode("utf-8", "replace") + "\n"
assert txt == want, (txt, want)
PY

# --chat and --chat --thinking: the prompt is the rendered user turn
for mode in chat thinking; do
    flag=""; [ $mode = thinking ] && flag="--thinking"
    "$BIN" generate --chat $flag --prompt "Hi there" --max-tokens 12 >"$tmp/out" 2>"$tmp/err"
    rc=$?
    want=$(echo "{\"encoding\":\"v41\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi there\"}],\"thinking_mode\":\"$mode\"}" |
        "$BIN" render --tokenizer "$MODEL/tokenizer.json" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["ids"]))')
    [ $rc -eq 0 ] && [ -n "$want" ] && [ "$(field prompt "$tmp/err")" = "$want" ] && ok || bad "--chat ($mode): rc $rc, prompt $(field prompt "$tmp/err") tokens, render says $want: $(cat "$tmp/err")"
done
c1=$("$BIN" generate --chat --prompt "Hi there" --max-tokens 12 2>&1)
c2=$("$BIN" generate --chat --thinking --prompt "Hi there" --max-tokens 12 2>&1)
[ "$c1" != "$c2" ] && ok || bad "--thinking changed nothing"

# seeded sampling is reproducible, seeds differ; min-p runs
s1=$("$BIN" generate --prompt "Hi" --max-tokens 16 --temperature 1 --seed 5 --ignore-eos 1 2>/dev/null)
s2=$("$BIN" generate --prompt "Hi" --max-tokens 16 --temperature 1 --seed 5 --ignore-eos 1 2>/dev/null)
s3=$("$BIN" generate --prompt "Hi" --max-tokens 16 --temperature 1 --seed 6 --ignore-eos 1 2>/dev/null)
[ -n "$s1" ] && [ "$s1" = "$s2" ] && ok || bad "same seed gave different text"
[ "$s1" != "$s3" ] && ok || bad "seeds 5 and 6 gave the same text"
# min-p 1 keeps only the most likely token: greedy whatever the temperature
m1=$("$BIN" generate --prompt-ids 0,5,7 --max-tokens 6 --temperature 2 --min-p 1 --seed 9 2>/dev/null)
g1=$("$BIN" generate --prompt-ids 0,5,7 --max-tokens 6 2>/dev/null)
[ -n "$m1" ] && [ "$m1" = "$g1" ] && ok || bad "min-p 1 '$m1' != greedy '$g1'"

# a checkpoint without engram_token_map.json gets its map built from tokenizer.json (§5.2 a);
# the tiny model's shipped map is the HF-derived one, so the output is identical
mkdir -p "$tmp/real"
for f in "$MODEL"/*; do [ "$(basename "$f")" = engram_token_map.json ] || ln -s "$f" "$tmp/real/"; done
a=$("$BIN" generate --model "$tmp/real" --prompt-ids 0,5,7,9 --max-tokens 8 2>"$tmp/err")
b=$("$BIN" generate --model "$MODEL" --prompt-ids 0,5,7,9 --max-tokens 8 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "map from tokenizer.json: '$a' vs '$b' $(cat "$tmp/err")"

# usage errors exit 2 with a message
for args in "--chat" "--prompt x --prompt-ids 1" "--prompt x --thinking" "--prompt-ids 1 --chat" \
    "--prompt x --min-p 2" "--prompt x --top-p 0" "--prompt x --mode fast" "--prompt-ids 1 --mode exact --temperature 1" \
    "--prompt x --max-tokens 0" "--prompt"; do
    "$BIN" generate $args >/dev/null 2>"$tmp/err"
    rc=$?
    [ $rc -eq 2 ] && [ -s "$tmp/err" ] && ok || bad "'generate $args' exit $rc (want 2)"
done
"$BIN" generate --help | grep -q -- "--min-p" && ok || bad "--help lacks --min-p"

# model errors exit 1 with the cause
"$BIN" generate --model "$tmp/nowhere" --prompt hi >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "$tmp/nowhere" "$tmp/err" && ok || bad "missing model dir: $(cat "$tmp/err")"
mkdir -p "$tmp/notok"
for f in "$MODEL"/*; do [ "$(basename "$f")" = tokenizer.json ] || ln -s "$f" "$tmp/notok/"; done
"$BIN" generate --model "$tmp/notok" --prompt hi >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "tokenizer.json" "$tmp/err" && ok || bad "no tokenizer: $(cat "$tmp/err")"

mkdir -p "$tmp/empty"
"$BIN" generate --model "$tmp/empty" --prompt hi >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "config.json" "$tmp/err" && ok || bad "empty model dir: $(cat "$tmp/err")"
echo '[0, 1, "x"]' >"$tmp/badmap.json"
"$BIN" generate --prompt-ids 0,1 --engram-map "$tmp/badmap.json" >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "badmap.json: entry 2" "$tmp/err" && ok || bad "bad --engram-map: $(cat "$tmp/err")"
"$BIN" generate --chat --prompt $'\xff' >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "not valid UTF-8" "$tmp/err" && ok || bad "invalid UTF-8 prompt: $(cat "$tmp/err")"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
