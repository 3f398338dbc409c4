#!/usr/bin/env bash
# The HTTP server (over the test-only fake backend) built with ASan+UBSan and driven with curl:
# every endpoint and protocol, streaming and not, bad input, a client disconnect mid-stream,
# then SIGTERM.  The sanitizers (leak check included) must report nothing and the server must
# exit 0.  Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
passed=0; failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }
check() { if eval "$2"; then ok; else bad "$1"; fi; }
. tests/support/wait_for.sh

if [ ! -f build-asan/libdeepinfer.a ]; then
    echo "test_server: build-asan/libdeepinfer.a missing (run make test)"; echo "0 passed, 1 failed"; exit 1
fi
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null; rm -rf "$work"' EXIT
harness=$(BUILD=build-asan HARNESS_CFLAGS="-O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
          tests/support/build_harness.sh) || { echo "0 passed, 1 failed"; exit 1; }
ASAN_OPTIONS=detect_leaks=1 "$harness" --port 0 --api-key k1 --step-us 500 --max-body 65536 >"$work/out" 2>"$work/err" &
pid=$!
has_port() { grep -qs '^port' "$1"; } # -s: the background program may not have opened it yet
wait_for 10 has_port "$work/out"
port=$(awk '/^port/{print $2}' "$work/out")
[ -n "$port" ] || { cat "$work/err"; echo "0 passed, 1 failed"; exit 1; }
url=http://127.0.0.1:$port
M=DeepSeek-V4.1-Flash
post() { # path, body -> "status body" in $work/resp
    curl -s -m 20 -o "$work/resp" -w '%{http_code}' -H 'Authorization: Bearer k1' -H 'Content-Type: application/json' \
        --data-binary "$2" "$url$1"
}

check "health" '[ "$(curl -s -m 5 "$url/health")" = "{\"status\":\"ok\"}" ]'
check "openapi is JSON with our paths" 'curl -s -m 5 "$url/openapi.json" | python3 -c "import json,sys; d=json.load(sys.stdin); assert d[\"openapi\"].startswith(\"3\") and \"/v1/messages\" in d[\"paths\"]"'
check "401 without key" '[ "$(curl -s -m 5 -o /dev/null -w "%{http_code}" "$url/v1/models")" = 401 ]'
check "401 is Anthropic-shaped on /v1/messages" 'curl -s -m 5 -d "{}" "$url/v1/messages" | grep -q "\"type\":\"error\",\"error\":{\"type\":\"authentication_error\""'
check "models" '[ "$(curl -s -m 5 -H "x-api-key: k1" "$url/v1/models" | python3 -c "import json,sys; print(json.load(sys.stdin)[\"data\"][0][\"id\"])")" = $M ]'
check "chat" '[ "$(post /v1/chat/completions "{\"model\":\"$M\",\"messages\":[{\"role\":\"user\",\"content\":\"ping\"}]}")" = 200 ] && grep -q "\"content\":\"Echo: ping\"" "$work/resp"'
check "chat stream ends with DONE" '[ "$(post /v1/chat/completions "{\"model\":\"$M\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"ping\"}]}")" = 200 ] && tail -c 16 "$work/resp" | grep -q "data: \[DONE\]"'
check "completions" '[ "$(post /v1/completions "{\"model\":\"$M\",\"prompt\":\"a b c\"}")" = 200 ] && grep -q "\"text\":\"a b c\"" "$work/resp"'
check "responses stream" '[ "$(post /v1/responses "{\"model\":\"$M\",\"stream\":true,\"input\":\"ping\"}")" = 200 ] && grep -q "event: response.completed" "$work/resp"'
check "messages stream" '[ "$(post /v1/messages "{\"model\":\"$M\",\"stream\":true,\"max_tokens\":20,\"messages\":[{\"role\":\"user\",\"content\":\"ping\"}]}")" = 200 ] && grep -q "event: message_stop" "$work/resp"'
check "malformed JSON 400" '[ "$(post /v1/chat/completions "{\"model\":")" = 400 ] && grep -q "Invalid JSON" "$work/resp"'
check "invalid UTF-8 400" '[ "$(post /v1/messages "$(printf "{\"model\":\"\xff\"}")")" = 400 ]'
check "wrong type 400" '[ "$(post /v1/chat/completions "{\"model\":\"$M\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":\"hot\"}")" = 400 ] && grep -q temperature "$work/resp"'
check "unknown model 404" '[ "$(post /v1/responses "{\"model\":\"gpt-x\",\"input\":\"x\"}")" = 404 ] && grep -q "gpt-x" "$work/resp"'
big=$(head -c 100000 /dev/zero | tr "\0" " ")
check "too large 413" '[ "$(post /v1/chat/completions "{$big}")" = 413 ]'
# A client that goes away mid-stream: the request is aborted and freed (the server notices on a
# later write, so /metrics is polled until it counts the abort, for at most 10 s).
curl -s -m 1 -H 'Authorization: Bearer k1' -d "{\"model\":\"$M\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"count to 100000\"}]}" "$url/v1/chat/completions" >/dev/null
abort_counted() {
    metrics=$(curl -s -m 5 -H 'Authorization: Bearer k1' "$url/metrics")
    echo "$metrics" | grep -q "^deepinfer_requests_aborted_total 1$" && echo "$metrics" | grep -q "^deepinfer_requests_in_flight 0$"
}
wait_for 10 abort_counted
check "disconnect counted as abort" 'echo "$metrics" | grep -q "^deepinfer_requests_aborted_total 1$"'
check "nothing left in flight" 'echo "$metrics" | grep -q "^deepinfer_requests_in_flight 0$"'
check "ttft histogram" 'echo "$metrics" | grep -q "^deepinfer_time_to_first_token_seconds_count [1-9]"'
kill -TERM $pid
wait $pid; rc=$?
check "SIGTERM exits 0" '[ $rc = 0 ] && grep -q stopped "$work/out"'
check "no sanitizer reports" '! grep -qE "ERROR: (Address|Leak)Sanitizer|runtime error" "$work/err"'

# The same server over the real engine adapter and the engine's mock model, under ASan too.
ASAN_OPTIONS=detect_leaks=1 "$harness" --port 0 --backend mock-engine --context 2048 >"$work/out2" 2>"$work/err2" &
pid=$!
wait_for 10 has_port "$work/out2"
url=http://127.0.0.1:$(awk '/^port/{print $2}' "$work/out2")
check "engine: completion" '[ "$(post /v1/completions "{\"model\":\"$M\",\"prompt\":\"hi\",\"max_tokens\":8,\"temperature\":0}")" = 200 ] && grep -q "\"completion_tokens\":" "$work/resp"'
check "engine: stream" '[ "$(post /v1/completions "{\"model\":\"$M\",\"prompt\":\"hi\",\"max_tokens\":8,\"stream\":true}")" = 200 ] && grep -q "data: \[DONE\]" "$work/resp"'
check "engine: over-long 400" '[ "$(post /v1/completions "{\"model\":\"$M\",\"prompt\":\"hi\",\"max_tokens\":4000}")" = 400 ]'
check "engine: chat refusal names the cause" '[ "$(post /v1/chat/completions "{\"model\":\"$M\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}")" != 500 ]'
curl -s -m 1 -d "{\"model\":\"$M\",\"prompt\":\"x\",\"max_tokens\":2000,\"stream\":true}" "$url/v1/completions" >/dev/null
# A request still running at SIGTERM: the engine aborts it, the stream ends with an error event.
# SIGTERM goes once its stream has started (polled, at most 10 s).
(curl -s -m 20 -d "{\"model\":\"$M\",\"prompt\":\"x\",\"max_tokens\":2000,\"stream\":true}" "$url/v1/completions" >"$work/last") &
stream_started() { [ -s "$work/last" ]; }
wait_for 10 stream_started || bad "engine: the last stream did not start within 10 s"
kill -TERM $pid
wait $pid; rc=$?
wait
check "engine: SIGTERM exits 0" '[ $rc = 0 ] && grep -q stopped "$work/out2"'
check "engine: no sanitizer reports" '! grep -qE "ERROR: (Address|Leak)Sanitizer|runtime error" "$work/err2"'
[ $failed = 0 ] || { echo "---- harness stderr"; tail -40 "$work/err" "$work/err2"; }
echo "$passed passed, $failed failed"
[ $failed = 0 ]
