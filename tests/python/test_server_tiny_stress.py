"""The fake-backend stress tests again, on `deepinfer serve` with the built-in tiny V4.1 model
(the real engine, tokenizer and renderer behind the HTTP layer): schemathesis against the
server's own /openapi.json, hundreds of concurrent SSE streams over three rounds (0 errors, no
RSS growth between the last two), and a disconnect storm that must leave no request behind
(/metrics).  Small max_tokens and a small context keep the run short; the fake-backend versions
are test_server_schema.py and test_server_limits.py."""
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from server_fixture import MODEL, Serve, engine_idle, rss_kb, wait_until  # noqa: E402

STREAMS = 300
ROUNDS = 3


@pytest.fixture(scope="module")
def cache():
    with tempfile.TemporaryDirectory(prefix="deepinfer-stress-") as d:
        yield d


def test_openapi_conformance_and_no_server_errors_on_tiny(cache, tmp_path):
    pytest.importorskip("schemathesis")
    exe = shutil.which("schemathesis") or shutil.which("st")
    if not exe:
        pytest.skip("schemathesis CLI not on PATH")
    # A small context bounds what generated max_tokens can ask of the real model.
    s = Serve(cache, "--context-limit", 512, "--request-timeout", 20)
    try:
        out = subprocess.run([exe, "run", s.url + "/openapi.json", "--checks",
                              "not_a_server_error,response_schema_conformance,status_code_conformance,"
                              "content_type_conformance", "--max-examples", "15", "--request-timeout", "20",
                              "--seed", "1"], capture_output=True, text=True, timeout=240, cwd=tmp_path)
        assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
        assert " passed" in out.stdout and "failed" not in out.stdout.split("SUMMARY")[-1]
    finally:
        assert s.stop() == 0


async def one_stream(port, i, max_tokens):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps({"model": MODEL, "stream": True, "max_tokens": max_tokens, "seed": i,
                       "thinking": {"type": "disabled"},
                       "messages": [{"role": "user", "content": f"load {i}"}]}).encode()
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
    data = await reader.read()
    writer.close()
    return data.startswith(b"HTTP/1.1 200") and b"data: [DONE]" in data and b'"finish_reason"' in data


async def round_(port, first_seed):
    return await asyncio.gather(*[one_stream(port, first_seed + i, 4) for i in range(STREAMS)])


async def storm(port, n, max_tokens):
    """n streams that each read their first event and then drop the connection."""
    async def leave(i):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        body = json.dumps({"model": MODEL, "stream": True, "max_tokens": max_tokens, "seed": i,
                           "messages": [{"role": "user", "content": f"storm {i}"}]}).encode()
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        got = b""
        while b"data:" not in got:
            piece = await reader.read(4096)
            if not piece:
                break
            got += piece
        writer.transport.abort()  # RST, no goodbye
        return got.startswith(b"HTTP/1.1 200") and b"data:" in got
    return await asyncio.gather(*[leave(i) for i in range(n)])


def test_load_hundreds_of_concurrent_streams_and_a_disconnect_storm_on_tiny(cache):
    # the prefix cache keeps every finished request's state by design (RSS grows until the state
    # pool is touched through); a leak check must not count it
    s = Serve(cache, "--context-limit", 4096, "--max-queue", 1024, "--max-connections", 2048, "--prefix-cache", "off")
    try:
        rss = []
        for r in range(ROUNDS):
            results = asyncio.run(asyncio.wait_for(round_(s.port, r * STREAMS), 120))
            assert sum(results) == STREAMS, f"round {r}: {STREAMS - sum(results)} streams failed"
            assert wait_until(lambda: s.metrics()["deepinfer_requests_in_flight"] == 0, 20)
            rss.append(rss_kb(s.proc.pid))
        assert rss[2] - rss[1] < 8 * 1024, f"RSS grew across rounds: {rss} kB"
        m = s.metrics()
        assert m.get('deepinfer_requests_total{endpoint="/v1/chat/completions",status="200"}', 0) >= ROUNDS * STREAMS

        # Disconnect storm: 100 long streams dropped after their first event are all aborted.
        aborted = m["deepinfer_requests_aborted_total"]
        left = asyncio.run(asyncio.wait_for(storm(s.port, 100, 3000), 60))
        assert all(left)
        assert wait_until(lambda: engine_idle(s.metrics), 30)
        m = s.metrics()
        # Each was aborted unless the random model sampled EOS (1 of 297 ids) in the few steps
        # before its client left: ~1 of the 100 on average, so most are aborts.
        assert aborted + 90 <= m["deepinfer_requests_aborted_total"] <= aborted + 100
        assert asyncio.run(one_stream(s.port, 0, 4))  # still serving
    finally:
        assert s.stop() == 0
