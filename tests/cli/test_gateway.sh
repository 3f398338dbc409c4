#!/usr/bin/env bash
# test_gateway.sh — `deepinfer gateway` options: bad usage exits 2 naming the problem (no workers,
# prefill workers without decode workers, a URL that is not http://, a bad number, an unknown
# --config setting, the step-time policy it cannot honour), --help documents every flag, and a
# --config file is read (a gateway on it starts with no worker answering: /health says 503).
set -u
cd "$(dirname "$0")/../.."
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
GW=build/deepinfer
tmp=$(mktemp -d); pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT

usage_error() { # expected text, then the arguments
    local want=$1; shift
    err=$($GW gateway "$@" 2>&1); rc=$?
    [ $rc -eq 2 ] && ok || bad "gateway $* exit $rc, expected 2"
    case "$err" in *"$want"*) ok ;; *) bad "gateway $*: '$err' does not say '$want'" ;; esac
}
usage_error "no workers" --port 0
usage_error "need --decode workers" --prefill http://127.0.0.1:1
usage_error "must start with http://" --both ftp://127.0.0.1:1
usage_error "expected one or more worker URLs" --both --port 0
usage_error "--heartbeat-ms: expected an integer" --both http://127.0.0.1:1 --heartbeat-ms 10
usage_error "step-time" --both http://127.0.0.1:1 --decode-policy step-time
usage_error "unknown decode balancer" --both http://127.0.0.1:1 --decode-policy fastest
usage_error "secures the KV transfer between --prefill and --decode workers" --both http://127.0.0.1:1 --cluster-key "$tmp/none"
printf short > "$tmp/short.key"
usage_error "5 bytes, expected 16 to 4096" --prefill http://127.0.0.1:1 --decode http://127.0.0.1:2 --cluster-key "$tmp/short.key"
echo '{"both":["http://127.0.0.1:1"],"colour":"red"}' > "$tmp/bad.json"
usage_error "unknown setting 'colour'" --config "$tmp/bad.json"

help=$($GW gateway --help); [ $? -eq 0 ] && ok || bad "--help must exit 0"
for flag in --prefill --decode --both --model --served-model-name --host --port --heartbeat-ms --connect-timeout \
            --idle-timeout --request-timeout --room-deadline-ms --decode-policy --api-key --config; do
    case "$help" in *"$flag"*) ok ;; *) bad "--help does not document $flag" ;; esac
done

# a config file alone is enough; nothing answers at port 1, so the gateway has no worker yet
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
echo "{\"both\":[\"http://127.0.0.1:1\"],\"port\":$port,\"heartbeat_ms\":100}" > "$tmp/gw.json"
$GW gateway --config "$tmp/gw.json" > "$tmp/log" 2>&1 & pid=$!
for _ in $(seq 1 100); do grep -q "listening on" "$tmp/log" && break; sleep 0.1; done
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")
[ "$code" = 503 ] && ok || bad "/health with no worker answering: $code, expected 503"
code=$(curl -s -o "$tmp/out" -w '%{http_code}' "http://127.0.0.1:$port/v1/completions" \
       -d '{"model":"DeepSeek-V4.1-Flash","prompt":"hi"}')
[ "$code" = 503 ] && grep -q "No worker could take the request" "$tmp/out" && ok || bad "no worker: $code $(cat "$tmp/out")"
kill "$pid"; wait "$pid"; rc=$?; pid=""
[ $rc -eq 0 ] && ok || bad "SIGTERM exit $rc"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
