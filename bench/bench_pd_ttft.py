"""PD over the gateway against one server, for a long prompt (issue 35 item 3): time to first token
of a ~20k-token completion through `deepinfer gateway` in front of one `--role prefill` and one
`--role decode` worker, against the same request sent straight to a `deepinfer serve` (role both,
prompt cache off), on the built-in tiny model.  The prefill worker streams its state while it
prefills, so the decode worker only imports it and computes the last position: the target is a
ratio <= 1.1.  Every round uses a prompt no worker has seen (no cache hit on either path), direct
and gateway alternate, and the prefill worker's `streamed_bytes` share and CPU time are printed
beside the wall times (the machine is shared: the three servers compete for its cores)."""
import http.client
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
from server_fixture import MODEL, Gateway, Serve, cpu_model, cpu_seconds, stop_all  # noqa: E402

ROUNDS = 3
FILLER = "the quick brown fox jumps over the lazy dog "
REPEAT = 560  # ~20k tokens of the tiny model's tokenizer (counted and printed)


def ttft(port, prompt):
    """(seconds to the first text event, prompt tokens) of a streamed completion."""
    body = json.dumps({"model": MODEL, "prompt": prompt, "max_tokens": 4, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
    first, tokens = None, None
    for line in r:
        if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if first is None and ev.get("choices") and ev["choices"][0].get("text"):
            first = time.perf_counter() - t0
        if ev.get("usage"):
            tokens = ev["usage"]["prompt_tokens"]
    conn.close()
    if first is None:
        raise RuntimeError("no text event")
    return first, tokens


def main():
    print(f"CPU: {cpu_model()} ({os.cpu_count()} logical CPUs)")
    with tempfile.TemporaryDirectory(prefix="di-bench-pd-") as cache:
        dirs = [os.path.join(cache, n) for n in ("ref", "pre", "dec")]
        for d in dirs:
            os.makedirs(d)
        servers = []
        try:
            ref = Serve(dirs[0], "--prefix-cache", "off")
            servers.append(ref)
            pre = Serve(dirs[1], "--role", "prefill")
            servers.append(pre)
            dec = Serve(dirs[2], "--role", "decode")
            servers.append(dec)
            gw = Gateway(cache, "--prefill", pre.url, "--decode", dec.url, "--heartbeat-ms", 500)
            servers.append(gw)
            ttft(ref.port, "warm up " + FILLER)
            ttft(gw.port, "warm up " + FILLER)
            direct, via, cpu_pre = [], [], 0.0
            for r in range(ROUNDS):
                prompt = f"Round {r}. " + FILLER * REPEAT
                d, n = ttft(ref.port, prompt)
                c0 = cpu_seconds(pre.proc.pid)
                g, n_g = ttft(gw.port, prompt + " ")  # another prompt: the prefill worker's cache never hits
                cpu_pre += cpu_seconds(pre.proc.pid) - c0
                direct.append(d)
                via.append(g)
                print(f"round {r}: {n} prompt tokens, TTFT direct {d:.3f} s, gateway {g:.3f} s, ratio {g / d:.3f}")
            streamed = pre.metrics().get("deepinfer_pd_state_bytes_streamed_total", 0)
            sent = pre.metrics().get("deepinfer_pd_state_bytes_sent_total", 0)
            d, g = statistics.median(direct), statistics.median(via)
            print(f"p50 TTFT direct {d:.3f} s, gateway (PD) {g:.3f} s: ratio {g / d:.3f} (target <= 1.1; {ROUNDS} rounds)")
            print(f"prefill worker: {cpu_pre / ROUNDS:.2f} CPU s per request; state bytes streamed while prefilling: "
                  f"{streamed / sent * 100 if sent else 0:.1f}% of {sent / ROUNDS / 1e6:.1f} MB per request")
        finally:
            stop_all(servers)


if __name__ == "__main__":
    main()
