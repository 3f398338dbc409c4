#!/usr/bin/env bash
# `deepinfer serve` option handling: --help, usage errors (exit 2, cause on stderr), and the
# refusal (exit 1, the cause) of a model that cannot load, and a graceful stop on SIGTERM.  Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
bin=build/deepinfer
passed=0; failed=0
expect() { # description, expected exit, expected stderr/stdout substring, args...
    local what=$1 code=$2 needle=$3; shift 3
    local out rc
    out=$("$bin" serve "$@" 2>&1); rc=$?
    if [ "$rc" = "$code" ] && [[ "$out" == *"$needle"* ]]; then passed=$((passed + 1))
    else failed=$((failed + 1)); echo "FAIL: $what: exit $rc, output: $out"; fi
}
expect "help" 0 "--api-key KEY" --help
expect "unknown option" 2 "unknown option '--bogus'" --bogus 1
expect "port range" 2 "--port: expected an integer in [0, 65535], got '70000'" --port 70000
expect "port not a number" 2 "got 'abc'" --port abc
expect "missing value" 2 "missing value for '--host'" --host
expect "bad timeout" 2 "--request-timeout: expected seconds" --request-timeout -1
expect "bad read timeout" 2 "--read-timeout: expected seconds" --read-timeout -1
expect "workers range" 2 "--workers: expected an integer in [1, 64], got '0'" --workers 0
expect "bad context limit" 2 "--context-limit: expected an integer" --context-limit 3
expect "bad prefix cache switch" 2 "--prefix-cache: expected on or off, got 'yes'" --prefix-cache yes
expect "state memory range" 2 "--state-memory-mb: expected an integer" --state-memory-mb 0
expect "max num seqs range" 2 "--max-num-seqs: expected an integer" --max-num-seqs 0
expect "max batch tokens range" 2 "--max-batch-tokens: expected an integer" --max-batch-tokens -5
expect "max prefill chunk range" 2 "--max-prefill-chunk: expected an integer in [0, 1048576], got '-1'" --max-prefill-chunk -1
expect "help names max prefill chunk" 0 "--max-prefill-chunk N" --help
expect "help names the KV block cache" 0 "--kv-cache-dir DIR" --help
expect "kv block tokens range" 2 "--kv-block-tokens: expected an integer in [128, 1048576], got '100'" --kv-block-tokens 100
expect "kv block tokens multiple of 128" 1 "kv_block_tokens must be 0 (256) or a positive multiple of 128, got 200" --kv-block-tokens 200 --kv-cache-ram 1 --port 0
expect "bad kv ttl" 2 "--kv-cache-ttl: expected a duration such as 3600, 90m, 24h or 7d, got '5x'" --kv-cache-ttl 5x
expect "bad kv ram" 2 "--kv-cache-ram: expected gigabytes > 0, got '0'" --kv-cache-ram 0
expect "two prompt caches" 2 "two prompt caches; choose one" --kv-cache-ram 1 --prefix-cache on
expect "kv ttl finer than a segment" 1 "kv_cache_ttl_s 10 is finer than the disk tier's retention granularity of 3600 s" --kv-cache-dir "${TMPDIR:-/tmp}/di-kv-ttl-refused" --kv-cache-ttl 10s --port 0
expect "bad kv replay mode" 2 "--kv-cache-replay: expected exact or approx, got 'fast'" --kv-cache-replay fast
expect "kv replay without a block cache" 1 "kv_cache_replay is set but the KV block cache is off" --kv-cache-replay approx --port 0
expect "draft max range" 2 "--draft-max: invalid value '17'" --draft-max 17
expect "draft schedule choice" 2 "--draft-schedule: invalid value 'sometimes'" --draft-schedule sometimes
expect "help names the draft flags" 0 "--draft-schedule S" --help
expect "help names the roles" 0 "--role R" --help
expect "bad role" 2 "--role: expected prefill, decode or both, got 'gateway'" --role gateway
expect "transfer port range" 2 "--transfer-port: expected an integer in [0, 65535], got '70000'" --transfer-port 70000
expect "transfer port needs decode" 2 "configure the KV transfer listener of --role decode" --role prefill --transfer-port 5000
expect "a role's cache is not the prefix cache" 2 "two prompt caches; choose one" --role decode --prefix-cache on
expect "missing model directory" 1 "/nonexistent-model-dir" --model /nonexistent-model-dir --port 0
# The built-in tiny model (fresh, in a temporary cache) comes up, answers /health, and SIGTERM
# stops it gracefully with exit 0.
cache=$(mktemp -d); log=$cache/serve.log
XDG_CACHE_HOME=$cache DEEPINFER_HF_MODEL_DIR= "$bin" serve --port 0 >"$log" 2>&1 & pid=$!
port=
for _ in $(seq 600); do
    port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$log")
    [ -n "$port" ] || ! kill -0 $pid 2>/dev/null && break
    sleep 0.1
done
health=$( [ -n "$port" ] && curl -s --max-time 10 "http://127.0.0.1:$port/health" )
kill -TERM $pid 2>/dev/null; wait $pid; rc=$?
if [ -n "$port" ] && [ -n "$health" ] && [ $rc = 0 ] && grep -q "SIGTERM, shutting down" "$log"; then passed=$((passed + 1))
else failed=$((failed + 1)); echo "FAIL: serve on the built-in model: exit $rc, health '$health', log: $(cat "$log")"; fi
rm -rf "$cache"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
