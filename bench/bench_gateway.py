"""Gateway overhead (issue 24): p50 time to first token through `deepinfer gateway` against the
same request sent straight to the worker, at 1 and at 64 concurrent streams, on the built-in
tiny model.  One `deepinfer serve` worker sits behind a gateway with it as its only (`--both`)
worker, so the two paths reach the same engine and the ratio is the gateway's cost (tokenizing
the prompt, the balancer, the extra loopback hop and the byte relay).  Direct and gateway rounds
alternate so drift on a shared machine hits both.  TTFT = request sent -> first SSE data event
carrying text.  Target: ratio <= 1.1."""
import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
from server_fixture import MODEL, Gateway, Serve, cpu_model, cpu_seconds  # noqa: E402

ROUNDS = {1: 20, 64: 3}  # requests per stream count and path: 20 single streams, 3 waves of 64


def ttft(port, i):
    """Seconds from sending a streamed completion to its first text event."""
    body = json.dumps({"model": MODEL, "prompt": f"request {i}: tell me a story", "max_tokens": 8,
                       "stream": True, "seed": i})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    first = None
    while True:
        line = r.readline()
        if not line:
            break
        if first is None and line.startswith(b"data: {") and b'"text":""' not in line:
            first = time.perf_counter() - t0
    conn.close()
    if first is None:
        raise RuntimeError(f"no text event from port {port}")
    return first


def wave(port, n, base):
    out = [None] * n
    threads = [threading.Thread(target=lambda k=k: out.__setitem__(k, ttft(port, base + k))) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    if any(v is None for v in out):
        raise RuntimeError("a stream did not finish")
    return out


def main():
    print(f"CPU: {cpu_model()} ({os.cpu_count()} logical CPUs)")
    with tempfile.TemporaryDirectory(prefix="di-bench-gw-") as cache:
        worker = Serve(cache)
        gw = Gateway(cache, "--both", worker.url, "--heartbeat-ms", 500)
        try:
            wave(worker.port, 4, 0)  # warm up both paths
            wave(gw.port, 4, 0)
            cpu, n_via = 0.0, 0
            for streams, rounds in ROUNDS.items():
                direct, via = [], []
                for r in range(rounds):
                    base = 1000 * streams + 100 * r
                    direct += wave(worker.port, streams, base)
                    c0 = cpu_seconds(gw.proc.pid)
                    via += wave(gw.port, streams, base)
                    cpu += cpu_seconds(gw.proc.pid) - c0
                    n_via += streams
                d, g = statistics.median(direct), statistics.median(via)
                print(f"{streams:2d} concurrent streams: p50 TTFT direct {d * 1e3:7.2f} ms, gateway {g * 1e3:7.2f} ms, "
                      f"ratio {g / d:.3f} (target <= 1.1; {len(direct)} requests each)")
            # utime + stime tick at 10 ms: summed over every gateway wave to be meaningful
            print(f"gateway CPU: {cpu / n_via * 1e3:.2f} ms per request ({n_via} requests)")
        finally:
            gw.stop()
            worker.stop()


if __name__ == "__main__":
    main()
