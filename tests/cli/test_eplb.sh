#!/usr/bin/env bash
# test_eplb.sh — `deepinfer eplb` end to end: the deepseek-ai/EPLB README example (serving.md
# §8.1), --help, usage errors (exit 2) and bad requests (exit 1 with the cause on stderr).
set -u
cd "$(dirname "$0")/../.."
BIN=build/deepinfer
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

req='{"weight":[[90,132,40,61,104,165,39,4,73,56,183,86],[20,107,104,64,19,197,187,157,172,86,16,27]],"num_replicas":16,"num_groups":4,"num_nodes":2,"num_gpus":8}'
out=$(echo "$req" | $BIN eplb)
[ $? -eq 0 ] && ok || bad "README example exit status"
expect='"phy2log":[[5,6,5,7,8,4,3,4,10,9,10,2,0,1,11,1],[7,10,6,8,6,11,8,9,2,4,5,1,5,0,3,1]]'
case "$out" in *"$expect"*) ok ;; *) bad "README phy2log: $out" ;; esac
case "$out" in *'"logcnt":[[1,2,1,1,2,2,1,1,1,1,2,1],[1,2,1,1,1,2,2,1,2,1,1,1]]'*) ok ;; *) bad "logcnt: $out" ;; esac
[ "$(echo "$out" | wc -l)" -eq 1 ] && ok || bad "one JSON line"

stats=$(echo "$req" | $BIN eplb --stats 2>&1 >/dev/null)
case "$stats" in *"layer=0 moe_lb=1.208"*"layer=1 moe_lb=1.242"*) ok ;; *) bad "--stats: $stats" ;; esac

$BIN eplb --help | grep -q "num_replicas" && ok || bad "--help"
$BIN eplb --bogus </dev/null >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "unknown option must exit 2"

err=$(echo '{"weight":[[1,2]],"num_replicas":2,"num_groups":1,"num_nodes":1,"num_gpus":"x"}' | $BIN eplb 2>&1 >/dev/null)
rc=$?
[ $rc -eq 1 ] && ok || bad "bad request exit $rc"
case "$err" in *"num_gpus"*) ok ;; *) bad "error names the field: $err" ;; esac
err=$(printf '\xff\xfe' | $BIN eplb 2>&1 >/dev/null); [ $? -eq 1 ] && ok || bad "binary input"
err=$(: | $BIN eplb 2>&1 >/dev/null); [ $? -eq 1 ] && ok || bad "empty input"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
