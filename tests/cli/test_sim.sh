#!/usr/bin/env bash
# test_sim.sh — `deepinfer sim` end to end: --help, usage errors (exit 2), a bad trace (exit 1
# with the cause), a full Mooncake trace replay whose JSON summary has every section and counts
# every request, and byte-identical output for the same seed.
set -u
cd "$(dirname "$0")/../.."
BIN=build/deepinfer
SHARED=${SHARED_DIR:-../shared}
TRACE=$SHARED/data/mooncake-traces/synthetic_trace.jsonl
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

$BIN sim --help | grep -q -- "--trace" && ok || bad "--help"
$BIN sim >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "no workload must exit 2"
$BIN sim --synthetic --trace x >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "both workloads must exit 2"
$BIN sim --synthetic --speedup -1 >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "bad number must exit 2"
$BIN sim --synthetic --tier-mix 1,2 >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "bad tier mix must exit 2"
$BIN sim --bogus >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "unknown option must exit 2"
$BIN sim --synthetic --decode-lb fastest >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "unknown decode balancer must exit 2"
$BIN sim --synthetic --tier-slo-ms 1000,0,1,1 >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "non-positive TTFT objective must exit 2"
$BIN sim --synthetic --tier-overtake -0.5 >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "negative overtaking allowance must exit 2"
out=$($BIN sim --synthetic --requests 200 --tier-slo-ms 500,1000,1500,2000 --tier-overtake 0.5 --no-baselines 2>/dev/null)
case "$out" in *'"tier_slo_ms":[500.0,1000.0,1500.0,2000.0]'*'"tier_overtake":0.5'*) ok ;; *) bad "tier flags not in the config echo" ;; esac
$BIN sim --synthetic --requests 300 --rate 20 --decode-lb step-time --no-baselines 2>/dev/null | grep -q '"decode_lb":"step-time"' && ok || bad "--decode-lb step-time"

printf '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}\n{"timestamp": 1}\n' > "$tmp/bad.jsonl"
err=$($BIN sim --trace "$tmp/bad.jsonl" 2>&1 >/dev/null); rc=$?
[ $rc -eq 1 ] && ok || bad "bad trace exit $rc"
case "$err" in *"line 2"*"input_length"*) ok ;; *) bad "bad trace cause: $err" ;; esac
err=$($BIN sim --trace "$tmp/missing.jsonl" 2>&1 >/dev/null); [ $? -eq 1 ] && ok || bad "missing trace"

if [ -f "$TRACE" ]; then
    $BIN sim --trace "$TRACE" --speedup 4 --seed 7 > "$tmp/a.json" 2>/dev/null && ok || bad "trace replay failed"
    python3 - "$tmp/a.json" <<'PY' && ok || bad "summary content"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["requests"] == 3993, d["requests"]
for run in ("control_plane", "baseline_fifo_count", "baseline_round_robin"):
    r = d[run]
    assert r["completed"] + r["rejected"] == 3993, (run, r["completed"])
    assert set(r["ttft_ms"]) == {"lt16k", "16k_64k", "64k_256k", "ge256k", "all"}
    assert r["ttft_ms"]["all"]["n"] == 3993
    assert 0.0 < r["cache_hit_rate"]["all"] < 1.0
    assert r["decode_imbalance"] >= 1.0 and r["prefill_imbalance"] >= 1.0
m = d["control_plane"]["moe_lb"]
assert len(m["decode"]["eplb_over_time"]) == 10
assert m["prefill"]["eplb"] >= 1.0 and m["decode"]["no_eplb"] >= 1.0
assert "ttft_p99_tiered_vs_fifo" in d["ratios"] and "decode_imbalance_vs_count_only" in d["ratios"]
PY
    $BIN sim --trace "$TRACE" --speedup 4 --seed 7 > "$tmp/b.json" 2>/dev/null
    cmp -s "$tmp/a.json" "$tmp/b.json" && ok || bad "same seed, different output"
else
    bad "trace $TRACE not found (set SHARED_DIR)"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
