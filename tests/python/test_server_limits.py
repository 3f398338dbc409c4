"""Server behaviour under load, limits and shutdown: 429 with Retry-After when the queue is
full, the per-request timeout, SIGTERM draining in-flight streams, and a bounded load test
(hundreds of concurrent SSE streams, 0 errors, no memory growth across rounds)."""
import asyncio
import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from server_fixture import MODEL, Harness, rss_kb, wait_until  # noqa: E402


def open_stream(port, text, path="/v1/chat/completions"):
    body = json.dumps({"model": MODEL, "stream": True, "thinking": {"type": "disabled"},
                       "messages": [{"role": "user", "content": text}]}).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    s.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    return s


def read_all(s):
    data = b""
    while not data.endswith(b"0\r\n\r\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_full_queue_gets_429_with_retry_after():
    h = Harness("--max-running", 1, "--max-queue", 2, "--step-us", 5000)
    try:
        socks = [open_stream(h.port, "count to 100000")]
        assert wait_until(lambda: h.metrics()["deepinfer_running_requests"] == 1)
        socks += [open_stream(h.port, "count to 100000") for _ in range(2)]
        assert wait_until(lambda: h.metrics()["deepinfer_queue_length"] == 2)
        s = open_stream(h.port, "hi")
        head = s.recv(4096).decode()
        assert head.startswith("HTTP/1.1 429") and "Retry-After: 1" in head
        assert "rate_limit_error" in head
        for x in socks + [s]:
            x.close()
        assert wait_until(lambda: h.metrics()["deepinfer_requests_in_flight"] == 0)
    finally:
        assert h.stop()[0] == 0


def test_request_timeout_ends_generation():
    h = Harness("--request-timeout", 0.5, "--step-us", 2000)
    try:
        import urllib.request
        t0 = time.time()
        req = urllib.request.Request(h.url + "/v1/chat/completions", data=json.dumps(
            {"model": MODEL, "messages": [{"role": "user", "content": "count to 100000"}],
             "reasoning_effort": "none"}).encode(), headers={"Content-Type": "application/json"})
        r = json.loads(urllib.request.urlopen(req, timeout=20).read())
        assert time.time() - t0 < 5
        assert r["choices"][0]["finish_reason"] == "length"
        assert r["choices"][0]["message"]["content"].startswith("1 2 3")
    finally:
        assert h.stop()[0] == 0


def test_sigterm_drains_in_flight_streams():
    h = Harness("--step-us", 2000, "--grace", 1)
    short = open_stream(h.port, "count to 150")      # ~0.3 s: finishes within the grace period
    longer = open_stream(h.port, "count to 100000")  # aborted at the deadline, told so
    assert wait_until(lambda: h.metrics()["deepinfer_running_requests"] == 2)
    h.proc.terminate()
    a, b = read_all(short), read_all(longer)
    assert b'"finish_reason":"stop"' in a and b"data: [DONE]" in a and b" 150" in a
    assert b"aborted" in b and b"data: [DONE]" in b
    status, out = h.stop()
    assert status == 0 and "stopped" in out
    try:  # no longer accepting
        socket.create_connection(("127.0.0.1", h.port), timeout=1).close()
        assert False, "server still accepting after SIGTERM"
    except OSError:
        pass


async def one_stream(port, n):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps({"model": MODEL, "stream": True, "thinking": {"type": "disabled"},
                       "messages": [{"role": "user", "content": f"count to {n}"}]}).encode()
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
    data = await reader.read()
    writer.close()
    ok = data.startswith(b"HTTP/1.1 200") and b"data: [DONE]" in data and f" {n}\"".encode() in data
    return ok


def test_load_hundreds_of_concurrent_streams():
    h = Harness("--step-us", 1000, "--max-running", 512, "--max-queue", 1024)
    try:
        async def round_(streams=300, duration=2.0):
            ok = fail = 0
            end = time.time() + duration
            while time.time() < end:
                results = await asyncio.gather(*[one_stream(h.port, 20) for _ in range(streams)])
                ok += sum(results)
                fail += len(results) - sum(results)
            return ok, fail
        rss = []
        for _ in range(3):
            ok, fail = asyncio.run(round_())
            assert fail == 0 and ok >= 300
            rss.append(rss_kb(h.proc.pid))
        assert rss[2] - rss[1] < 8 * 1024, f"RSS grew across rounds: {rss} kB"
        m = h.metrics()
        assert m["deepinfer_requests_in_flight"] == 0
        assert m.get('deepinfer_requests_total{endpoint="/v1/chat/completions",status="200"}', 0) >= 900
    finally:
        assert h.stop()[0] == 0


def test_slow_reader_does_not_stall_others_and_idle_connections_close():
    h = Harness("--step-us", 1000, "--idle-timeout", 1)
    try:
        stalled = open_stream(h.port, "count to 100000")  # never read: its bytes pile up server-side
        idle = socket.create_connection(("127.0.0.1", h.port), timeout=10)  # connects, sends nothing
        t0 = time.time()
        results = asyncio.run(_many(h.port, 20, 30))
        assert all(results) and time.time() - t0 < 10
        idle.settimeout(5)
        assert idle.recv(1) == b""  # closed by the server's idle timeout
        stalled.close()
        assert wait_until(lambda: h.metrics()["deepinfer_requests_in_flight"] == 0, 15)
    finally:
        assert h.stop()[0] == 0


async def _many(port, n, tokens):
    return await asyncio.gather(*[one_stream(port, tokens) for _ in range(n)])
