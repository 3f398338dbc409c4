#!/usr/bin/env bash
# test_ep_mpi.sh — `mpirun -n N deepinfer generate --expert-parallel` (include/deepinfer_ep.h)
# against the single-process engine as the reference: greedy and seeded outputs (ids) identical
# for 1, 2, 3 and 4 ranks on the built-in tiny model and on the medium checkpoint, identical
# again with replans forced mid-generation (--ep-test-replan-steps, and the live EPLB driver's
# plans with --eplb-ranks), serve answering as one process does, and a rank that is killed
# (SIGKILL) or hangs (SIGSTOP) ends the job with an error naming it, in bounded time.  Rows are
# dispatched as FP8 by default (exact under the ref numerics) and as float32 with --ep-dispatch f32.
set -u
cd "$(dirname "$0")/../.."
BIN=build/deepinfer
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
TMP=$(mktemp -d)
JOB=""
cleanup() { [ -n "$JOB" ] && kill -9 "$JOB" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT

run1() { timeout 60 "$BIN" generate "$@" 2>"$TMP/err1"; }
runN() { local n=$1; shift; timeout 60 mpirun -n "$n" --oversubscribe "$BIN" generate --expert-parallel "$@" 2>"$TMP/errN"; }

# same ids for N = 1..4; $1: a label, the rest: generate's flags
same_for_all() {
    local label=$1; shift
    local want; want=$(run1 "$@") || { bad "$label: single process failed: $(tail -2 "$TMP/err1")"; return; }
    [ -n "$want" ] && ok || bad "$label: no output"
    for n in 1 2 3 4; do
        local got; got=$(runN "$n" "$@")
        local rc=$?
        [ $rc -eq 0 ] && [ "$got" = "$want" ] && ok || bad "$label, $n ranks (exit $rc): '$got' != '$want' $(grep -v 'deepinfer info' "$TMP/errN" | tail -3)"
    done
}

same_for_all "tiny greedy" --prompt-ids 1,2,3,4,5,6,7 --max-tokens 12
same_for_all "tiny seeded" --prompt-ids 9,8,7 --max-tokens 12 --temperature 0.8 --seed 42
# the expert ranks really served: rank 3's line, the traffic line
grep -q "expert-parallel: rank 3: .* [1-9][0-9]* layers served" "$TMP/errN" && ok || bad "rank 3 served no layer: $(cat "$TMP/errN")"

# replans mid-generation: same ids, and the plans were applied
want=$(run1 --prompt-ids 5,6,7 --max-tokens 16 --temperature 0.7 --seed 3)
for n in 3 4; do
    got=$(runN "$n" --prompt-ids 5,6,7 --max-tokens 16 --temperature 0.7 --seed 3 --ep-test-replan-steps 2)
    [ "$got" = "$want" ] && ok || bad "replan, $n ranks: '$got' != '$want' $(tail -3 "$TMP/errN")"
    grep -Eq "; [1-9][0-9]* replans" "$TMP/errN" && ok || bad "replan, $n ranks: no replan counted: $(tail -2 "$TMP/errN")"
done

# the live EPLB driver (--eplb-ranks) applies its plans through di_ep_apply_plan: same ids
got=$(runN 3 --prompt-ids 5,6,7 --max-tokens 16 --temperature 0.7 --seed 3 --eplb-ranks 2 --eplb-window 2 --eplb-period 2)
[ "$got" = "$want" ] && ok || bad "live EPLB, 3 ranks: '$got' != '$want' $(tail -3 "$TMP/errN")"
grep -Eq "eplb: steps [0-9]+ replans [1-9]" "$TMP/errN" && grep -Eq "; [1-9][0-9]* replans" "$TMP/errN" && ok ||
    bad "live EPLB, 3 ranks: no plan applied: $(grep -E 'eplb:|replans' "$TMP/errN")"
runN 3 --prompt-ids 5 --eplb-ranks 3 >/dev/null
grep -q -- "--eplb-ranks 3: this job has 2 expert ranks" "$TMP/errN" && ok || bad "--eplb-ranks must match the expert ranks: $(grep -v 'deepinfer info' "$TMP/errN" | head -3)"

# the medium checkpoint (short generations: 4 ranks on a loaded 2-core machine)
MED=${XDG_CACHE_HOME:-$HOME/.cache}/deepinfer/ep-medium
if [ ! -f "$MED/config.json" ]; then
    "$BIN" make-tiny --config medium --out "$MED" >/dev/null 2>&1 || bad "make-tiny --config medium"
fi
same_for_all "medium greedy" --model "$MED" --prompt-ids 11,12,13,14,15,16 --max-tokens 3
# rows sent as FP8 (the default: exact under the ref numerics) and as float32: the same ids, and
# FP8 moves under a third of float32's dispatch bytes for the same routing
med_ids="--model $MED --prompt-ids 21,22,23,24,25,26,27,28 --max-tokens 3"
want=$(run1 $med_ids)
dispatch_bytes() { sed -n 's/.*dispatch format \([a-z0-9]*\) .*bytes per token per layer: dispatch \([0-9]*\),.*/\1 \2/p' "$TMP/errN"; }
for n in 2 4; do
    got=$(runN "$n" $med_ids); fp8=$(dispatch_bytes)
    [ "$got" = "$want" ] && [ "${fp8%% *}" = fp8 ] && ok || bad "medium fp8 rows, $n ranks: '$got' != '$want' ($fp8)"
    got=$(runN "$n" $med_ids --ep-dispatch f32); f32=$(dispatch_bytes)
    [ "$got" = "$want" ] && [ "${f32%% *}" = f32 ] && ok || bad "medium f32 rows, $n ranks: '$got' != '$want' ($f32)"
    [ -n "$fp8" ] && [ -n "$f32" ] && [ $((3 * ${fp8#* })) -lt "${f32#* }" ] && ok || bad "fp8 rows: $fp8 bytes vs $f32"
done
want=$(run1 --model "$MED" --prompt-ids 3,1,4,1,5 --max-tokens 3 --temperature 0.9 --seed 5)
got=$(runN 3 --model "$MED" --prompt-ids 3,1,4,1,5 --max-tokens 3 --temperature 0.9 --seed 5 --ep-test-replan-steps 1 --ep-prefault)
[ "$got" = "$want" ] && ok || bad "medium seeded with replans and --ep-prefault, 3 ranks: '$got' != '$want'"
grep -Eq "[1-9][0-9.]* MB given back" "$TMP/errN" && ok || bad "medium replans gave back no expert pages: $(grep 'given back' "$TMP/errN")"

# flags
"$BIN" generate --help | grep -q -- "--expert-parallel" && ok || bad "--help documents --expert-parallel"
"$BIN" generate --prompt-ids 1 --ep-test-replan-steps 2 >/dev/null 2>"$TMP/e"; rc=$?
[ $rc -eq 1 ] && grep -q "need --expert-parallel" "$TMP/e" && ok || bad "replan flag without --expert-parallel: exit $rc $(cat "$TMP/e")"
"$BIN" generate --prompt-ids 1 --expert-parallel --ep-timeout 0 >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "--ep-timeout 0 must exit 2"
"$BIN" generate --prompt-ids 1 --expert-parallel --ep-dispatch bf16 >/dev/null 2>"$TMP/e"; rc=$?
[ $rc -eq 2 ] && grep -q "invalid value 'bf16' for --ep-dispatch" "$TMP/e" && ok || bad "--ep-dispatch bf16: exit $rc $(cat "$TMP/e")"
"$BIN" generate --help | grep -q -- "--ep-dispatch" && ok || bad "--help documents --ep-dispatch"

# serve: the same completion from a 3-rank job as from one process; SIGTERM to rank 0 ends the job
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
complete() { # port -> the completion's text, waiting up to 30 s for the server
    python3 - "$1" <<'PY'
import json, sys, time, urllib.request
url = "http://127.0.0.1:%s/v1/completions" % sys.argv[1]
body = json.dumps({"model": "DeepSeek-V4.1-Flash", "prompt": "Hello there", "max_tokens": 8, "temperature": 0}).encode()
for _ in range(300):
    try:
        r = urllib.request.urlopen(urllib.request.Request(url, body, {"Content-Type": "application/json"}), timeout=20)
        print(json.load(r)["choices"][0]["text"]); break
    except OSError:
        time.sleep(0.1)
PY
}
P1=$(free_port)
"$BIN" serve --port "$P1" 2>/dev/null &
S1=$!
want=$(complete "$P1")
kill -TERM "$S1"; wait "$S1"
P2=$(free_port)
mpirun -n 3 --oversubscribe "$BIN" serve --expert-parallel --port "$P2" 2>"$TMP/serve" &
JOB=$!
got=$(complete "$P2")
[ -n "$want" ] && [ "$got" = "$want" ] && ok || bad "serve, 3 ranks: '$got' != '$want' $(grep -v 'deepinfer info' "$TMP/serve" | tail -3)"
root=""
for p in $(pgrep -f "$BIN serve --expert-parallel"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=0" && root=$p
done
[ -n "$root" ] && kill -TERM "$root"
for _ in $(seq 1 300); do kill -0 "$JOB" 2>/dev/null || break; sleep 0.1; done
kill -0 "$JOB" 2>/dev/null && kill -9 "$JOB"
wait "$JOB"; rc=$?
JOB=""
[ $rc -eq 0 ] && grep -q "expert-parallel: rank 2: .* [1-9][0-9]* layers served" "$TMP/serve" && ok || bad "serve shutdown: exit $rc $(grep -v 'deepinfer info' "$TMP/serve" | tail -4)"

# the pid of rank $2 among mpirun $1's children (Open MPI puts the rank in the environment)
rank_pid() {
    local p
    for p in $(pgrep -f "$BIN generate --expert-parallel"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$p"; return; }
    done
}

# a rank that dies or hangs: the job ends with an error naming the rank, well before the timeout
for sig in KILL STOP; do
    start=$(date +%s)
    mpirun -n 3 --oversubscribe "$BIN" generate --expert-parallel --ep-timeout 5 --prompt-ids 1,2,3 --max-tokens 100000 \
        --ignore-eos 1 >/dev/null 2>"$TMP/dead" &
    JOB=$!
    victim=""
    for _ in $(seq 1 100); do
        victim=$(rank_pid "$JOB" 2)
        [ -n "$victim" ] && grep -q "workspace" "$TMP/dead" && break
        sleep 0.1
    done
    sleep 1
    [ -n "$victim" ] && kill -"$sig" "$victim"
    for _ in $(seq 1 300); do kill -0 "$JOB" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$JOB" 2>/dev/null; then
        bad "SIG$sig of rank 2: the job still runs after 30 s"
        [ -n "$victim" ] && kill -9 "$victim" 2>/dev/null
        kill -9 "$JOB" 2>/dev/null
    fi
    wait "$JOB"; rc=$?
    JOB=""
    [ -n "$victim" ] && kill -9 "$victim" 2>/dev/null
    elapsed=$(( $(date +%s) - start ))
    [ $rc -ne 0 ] && ok || bad "SIG$sig of rank 2: exit 0"
    grep -Eiq "rank 2" "$TMP/dead" && ok || bad "SIG$sig of rank 2: no message naming rank 2: $(grep -v 'deepinfer info' "$TMP/dead" | tail -5)"
    [ "$elapsed" -lt 40 ] && ok || bad "SIG$sig of rank 2: took $elapsed s"
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
