#!/usr/bin/env bash
# test_generate.sh — `deepinfer generate --prompt-ids` end to end.  Oracles: the golden set
# tiny-a (the first greedy token after a prompt prefix is the argmax of the golden exact-mode
# logits at the prefix's last position), determinism of seeded sampling, the built-in tiny
# model, and usage/input errors (exit 2 / 1 with the cause).  Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
. tests/support/cli_test.sh
SHARED_DIR="${SHARED_DIR:-$(cd .. && pwd)/shared}"
GOLDEN="$SHARED_DIR/golden-v41/tiny-a"

# golden oracle: token map as JSON, prompt prefixes and the expected argmax tokens
python3 - "$GOLDEN" "$tmp" <<'PY'
import json, sys, numpy as np
g, out = sys.argv[1], sys.argv[2]
meta = json.load(open(g + "/golden.json"))
raw = open(g + "/golden.bin", "rb").read()
def arr(name):
    a = meta["arrays"][name]
    dt = {"f32": "<f4", "i32": "<i4", "i64": "<i8"}[a["dtype"]]
    return np.frombuffer(raw[a["offset"]:a["offset"] + a["nbytes"]], dtype=dt).reshape(a["shape"])
json.dump([int(x) for x in arr("engram.token_map")], open(out + "/map.json", "w"))
ids, logits = arr("input_ids"), arr("exact.prefill.logits")
with open(out + "/cases.txt", "w") as f:
    for k in (1, 17, 40):
        f.write("%s %d\n" % (",".join(str(int(x)) for x in ids[:k]), int(np.argmax(logits[k - 1]))))
PY
[ -s "$tmp/cases.txt" ] && ok || bad "golden oracle"

while read -r prompt want; do
    got=$("$BIN" generate --model "$GOLDEN/checkpoint" --engram-map "$tmp/map.json" --mode exact --prompt-ids "$prompt" --max-tokens 1 2>"$tmp/err")
    [ "$got" = "$want" ] && ok || bad "first token after ${prompt:0:20}...: got '$got', golden argmax $want ($(cat "$tmp/err"))"
done <"$tmp/cases.txt"

# greedy decode continues exactly like teacher-forced prefill: the 3rd greedy token equals the
# first greedy token after prompt + the first two
p=$(head -n 2 "$tmp/cases.txt" | tail -n 1 | cut -d' ' -f1)
three=$("$BIN" generate --model "$GOLDEN/checkpoint" --engram-map "$tmp/map.json" --mode exact --prompt-ids "$p" --max-tokens 3 2>/dev/null)
set -- $three
one=$("$BIN" generate --model "$GOLDEN/checkpoint" --engram-map "$tmp/map.json" --mode exact --prompt-ids "$p,$1,$2" --max-tokens 1 2>/dev/null)
[ "$#" -eq 3 ] && [ "$3" = "$one" ] && ok || bad "decode vs prefill: '$three' then '$one'"

# seeded sampling is reproducible, different seeds differ somewhere
s1=$("$BIN" generate --model "$GOLDEN/checkpoint" --engram-map "$tmp/map.json" --prompt-ids 0,5,7 --max-tokens 12 --temperature 1.5 --seed 7 2>/dev/null)
s2=$("$BIN" generate --model "$GOLDEN/checkpoint" --engram-map "$tmp/map.json" --prompt-ids 0,5,7 --max-tokens 12 --temperature 1.5 --seed 7 2>/dev/null)
s3=$("$BIN" generate --model "$GOLDEN/checkpoint" --engram-map "$tmp/map.json" --prompt-ids 0,5,7 --max-tokens 12 --temperature 1.5 --seed 8 2>/dev/null)
[ -n "$s1" ] && [ "$s1" = "$s2" ] && ok || bad "same seed gave '$s1' and '$s2'"
[ "$s1" != "$s3" ] && ok || bad "seeds 7 and 8 gave the same 12 samples"
# top-k 1 is greedy whatever the temperature
g1=$("$BIN" generate --model "$GOLDEN/checkpoint" --engram-map "$tmp/map.json" --prompt-ids 0,5,7 --max-tokens 6 2>/dev/null)
k1=$("$BIN" generate --model "$GOLDEN/checkpoint" --engram-map "$tmp/map.json" --prompt-ids 0,5,7 --max-tokens 6 --temperature 3 --top-k 1 --seed 3 2>/dev/null)
[ "$g1" = "$k1" ] && ok || bad "top-k 1 '$k1' != greedy '$g1'"

# the built-in tiny model (generated on first use) and the summary line
out=$("$BIN" generate --prompt-ids 0,1,2 --max-tokens 5 2>"$tmp/err")
[ "$(echo "$out" | wc -w)" -ge 1 ] && grep -q "tokens/s" "$tmp/err" && ok || bad "built-in model: '$out' $(cat "$tmp/err")"

# the Engram compressed-token map built from the real DeepSeek tokenizer equals the reference
# algorithm (§5.2 a) run with the HF `tokenizers` package
TOKJ="$SHARED_DIR/recipe-data/tokenizer/deepseek_v3_tokenizer.json"
"$BIN" generate --print-engram-map "$TOKJ" >"$tmp/cmap.json" 2>"$tmp/err"
python3 - "$TOKJ" "$tmp/cmap.json" <<'PY' && ok || bad "engram map differs from the tokenizers oracle: $(cat "$tmp/err")"
import json, re, sys, unicodedata
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
got = json.load(open(sys.argv[2]))
def norm(s):
    s = unicodedata.normalize("NFD", unicodedata.normalize("NFKC", s))
    s = "".join(c for c in s if unicodedata.category(c) != "Mn").lower()
    s = re.sub(r"[ \t\r\n]+", " ", s)
    if s == " ":
        s = "\ue000"
    return s.strip().replace("\ue000", " ")
keys, want = {}, []
for t in range(tok.get_vocab_size(with_added_tokens=True)):
    text = tok.decode([t], skip_special_tokens=False)
    key = tok.id_to_token(t) if "\ufffd" in text else (norm(text) or text)
    want.append(keys.setdefault(key, len(keys)))
assert got["ids"] == len(want) and got["keys"] == len(keys), (got["ids"], got["keys"], len(want), len(keys))
bad = [i for i in range(len(want)) if got["map"][i] != want[i]]
assert not bad, bad[:10]
PY

# speculative decoding: greedy output is the same with the default drafts (when the model has a
# drafter) and with none; the summary reports the drafts; bad values are usage errors
plain=$("$BIN" generate --prompt-ids 5,6,7 --max-tokens 12 --draft-max 0 2>"$tmp/err0")
spec=$("$BIN" generate --prompt-ids 5,6,7 --max-tokens 12 --draft-schedule fixed 2>"$tmp/err1")
[ -n "$plain" ] && [ "$plain" = "$spec" ] && ok || bad "greedy output with and without drafts: '$plain' vs '$spec'"
grep -qx "draft: proposed 0 accepted 0 mean-accepted 0.00" "$tmp/err0" && ok || bad "draft summary: $(cat "$tmp/err0")"
grep -Eq "^draft: proposed [0-9]+ accepted [0-9]+ mean-accepted [0-9]+\.[0-9]{2}$" "$tmp/err1" && ok || bad "draft summary: $(cat "$tmp/err1")"
"$BIN" generate --prompt-ids 1 --draft-max 17 >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "invalid value '17' for --draft-max" "$tmp/err" && ok || bad "--draft-max 17 must exit 2"
"$BIN" generate --prompt-ids 1 --draft-schedule maybe >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "invalid value 'maybe' for --draft-schedule" "$tmp/err" && ok || bad "--draft-schedule maybe must exit 2"

# errors
"$BIN" generate >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "no --prompt-ids must exit 2"
"$BIN" generate --prompt-ids 1,x >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "bad id list must exit 2"
"$BIN" generate --prompt-ids 1 --temperature -1 >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "negative temperature must exit 2"
"$BIN" generate --prompt-ids 1 --bogus 3 >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "unknown flag must exit 2"
"$BIN" generate --help | grep -q -- "--prompt-ids" && ok || bad "--help"
"$BIN" generate --model "$GOLDEN/checkpoint" --engram-map "$tmp/map.json" --prompt-ids 0,99999 >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "outside the vocabulary" "$tmp/err" && ok || bad "token out of range: $(cat "$tmp/err")"
"$BIN" generate --model "$GOLDEN/checkpoint" --prompt-ids 0,1 >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "compressed-token map" "$tmp/err" && ok || bad "missing Engram map must be an error: $(cat "$tmp/err")"
"$BIN" generate --model "$tmp/none" --prompt-ids 0 >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "$tmp/none" "$tmp/err" && ok || bad "missing model dir: $(cat "$tmp/err")"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
