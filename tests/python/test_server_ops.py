"""Server operations found by an independent audit (issue 19, items 7-10), on the fake-backend
harness (tests/support) and on `deepinfer serve` with the built-in tiny model:
  - clients that leave while their request is queued free its slot at once, counted as 499;
  - slow-loris connections are cut at the read deadline, and a client looping 8 MB bodies does
    not stall other streams (parsing and tokenizing run on worker threads);
  - response ids differ across restarts, a pipelined request after a GET is answered, /health
    answers 503 while draining, 405s carry Allow, streamed events match /openapi.json;
  - vLLM's /tokenize, /detokenize, /version, /v1/models/{id} and metric names."""
import json
import os
import re
import socket
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import jsonschema
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from server_fixture import MODEL, Harness, Serve, wait_until  # noqa: E402


def post(url, body, timeout=30):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def get(url, timeout=10):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def chat(text, stream=False, **extra):
    return {"model": MODEL, "stream": stream, "thinking": {"type": "disabled"},
            "messages": [{"role": "user", "content": text}], **extra}


def open_request(port, body, path="/v1/chat/completions"):
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    s.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    return s


def recv_until_closed(s, timeout=10):
    s.settimeout(timeout)
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    return data


# ---- item 7: clients that leave while queued ------------------------------------------------

def test_queued_clients_that_leave_free_their_slots_at_once():
    h = Harness("--max-running", 1, "--max-queue", 64, "--step-us", 5000)
    try:
        running = open_request(h.port, chat("count to 100000", stream=True))
        assert wait_until(lambda: h.metrics()["deepinfer_running_requests"] == 1)
        streams = [open_request(h.port, chat(f"stream {i}", stream=True)) for i in range(20)]
        plain = [open_request(h.port, chat(f"plain {i}")) for i in range(5)]
        assert wait_until(lambda: h.metrics()["deepinfer_queue_length"] == 25)
        t0 = time.time()
        for s in streams + plain:
            s.close()
        assert wait_until(lambda: h.metrics()["deepinfer_queue_length"] == 0, 5), h.metrics()
        freed = time.time() - t0
        assert freed < 1.0, f"queued requests held their slots {freed:.2f} s after their clients left"
        m = h.metrics()
        ep = 'deepinfer_requests_total{endpoint="/v1/chat/completions",status='
        assert m.get(ep + '"499"}') == 25, m
        assert ep + '"503"}' not in m and m[ep + '"200"}'] == 1  # none as shutdown; 200: the running one
        assert m["deepinfer_requests_aborted_total"] == 25
        assert m['deepinfer_request_success_total{finished_reason="abort"}'] == 25
        assert m["deepinfer_running_requests"] == 1  # the running stream is untouched
        running.close()
    finally:
        assert h.stop()[0] == 0
    assert "shutting down" not in h.stderr and "503" not in h.stderr, h.stderr


# ---- item 8: slow clients and big bodies -----------------------------------------------------

class StreamWatch:
    """Sequential streaming requests in a thread, recording every gap between the request and
    its first bytes and between successive chunks: the latency other clients see."""

    def __init__(self, port, body):
        self.port, self.body, self.gaps, self.done, self.errors = port, body, [], 0, []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            try:
                s = open_request(self.port, self.body)
                last, data = time.time(), b""
                while not data.endswith(b"0\r\n\r\n"):
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    now = time.time()
                    self.gaps.append(now - last)
                    last, data = now, data + chunk
                s.close()
                if b"data: [DONE]" in data:
                    self.done += 1
                else:
                    self.errors.append(data[:200])
            except OSError as e:
                self.errors.append(repr(e))

    def finish(self):
        self.stop.set()
        self.thread.join(60)
        return max(self.gaps) if self.gaps else float("inf")


def test_slow_loris_connections_are_cut_and_other_streams_keep_flowing():
    # 20 slow clients and a few slots more: without a read deadline they hold the slots for as
    # long as they dribble; with it they are cut after 1.5 s and new clients get in.
    h = Harness("--max-connections", 24, "--read-timeout", 1.5, "--step-us", 2000, "--idle-timeout", 60)
    loris = []
    try:
        watch = StreamWatch(h.port, chat("count to 200", stream=True))
        for _ in range(20):
            s = socket.create_connection(("127.0.0.1", h.port), timeout=5)
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\n")
            loris.append(s)
        t0, cut = time.time(), set()
        while time.time() - t0 < 6 and len(cut) < len(loris):
            for i, s in enumerate(loris):
                if i in cut:
                    continue
                try:
                    s.sendall(b"X")  # a header byte every 0.25 s: the idle timeout never fires
                    s.setblocking(False)
                    if s.recv(1) == b"":
                        cut.add(i)
                except BlockingIOError:
                    pass
                except OSError:
                    cut.add(i)
                finally:
                    s.setblocking(True)
            time.sleep(0.25)
        elapsed = time.time() - t0
        # New clients are served while (and after) the slow ones held slots.
        extra = [post(h.url + "/v1/chat/completions", chat(f"after {i}"), timeout=10)[0] for i in range(6)]
        worst = watch.finish()
        assert len(cut) == 20, f"only {len(cut)} of 20 slow-loris connections were closed in {elapsed:.1f} s"
        assert elapsed < 4.0
        assert extra == [200] * 6
        assert not watch.errors and watch.done >= 3, watch.errors[:3]
        assert worst < 0.5, f"a stream stalled {worst:.2f} s"
        assert h.metrics()['deepinfer_requests_total{endpoint="other",status="408"}'] == 20
    finally:
        for s in loris:
            s.close()
        assert h.stop()[0] == 0


@pytest.fixture(scope="module")
def tiny():
    with tempfile.TemporaryDirectory(prefix="deepinfer-ops-") as d:
        s = Serve(d, "--context-limit", 4096, "--max-body-bytes", 40 << 20)
        yield s
        assert s.stop() == 0


def test_big_bodies_do_not_stall_other_streams(tiny):
    # Big chat bodies take seconds to parse, render and tokenize (then 400: over the context);
    # on the HTTP or the engine thread that froze every other stream for as long.  The tiny
    # model's tokenizer is fast, so the bodies are ~32 MB to take over a second each.
    big = json.dumps(chat("hello world " * 2700000, max_tokens=4)).encode()
    url = tiny.url + "/v1/chat/completions"
    watch = StreamWatch(tiny.port, chat("tell me a story", stream=True, max_tokens=64, seed=3))
    time.sleep(1.0)
    statuses, durations, t0 = [], [], time.time()
    while time.time() - t0 < 20 and len(statuses) < 3:
        req = urllib.request.Request(url, data=big, headers={"Content-Type": "application/json"})
        t = time.time()
        try:
            urllib.request.urlopen(req, timeout=60)
            statuses.append(200)
        except urllib.error.HTTPError as e:
            statuses.append(e.code)
            assert b"maximum context length" in e.read()
        durations.append(time.time() - t)
    time.sleep(0.5)
    worst = watch.finish()
    assert statuses and set(statuses) == {400}, statuses
    assert not watch.errors and watch.done >= 3, watch.errors[:3]
    took = sorted(durations)[len(durations) // 2]
    assert took > 0.5, f"a big body took only {took:.2f} s: the test shows nothing"
    # On the HTTP or engine thread a body stalls the stream for its whole time (measured 2.19 s
    # for 2.00 s bodies); off them, the worst gap was 0.13 s idle and 0.48 s for 0.93 s bodies
    # with a second test run on the same 2 cores, so the bound leaves room for such load.
    assert worst < 0.7 * took, f"a stream stalled {worst:.2f} s while big bodies took {took:.2f} s each"
    print(f"big bodies: {took:.2f} s each (median of {len(durations)}), worst stream gap {worst:.3f} s")


# ---- item 9: smaller ones ----------------------------------------------------------------------

def response_id():
    h = Harness()
    try:
        status, _, body = post(h.url + "/v1/chat/completions", chat("hi"))
        assert status == 200
        return json.loads(body)["id"]
    finally:
        assert h.stop()[0] == 0


def test_response_ids_differ_across_restarts():
    a, b = response_id(), response_id()
    assert a.startswith("chatcmpl-") and b.startswith("chatcmpl-")
    assert a != b


def test_pipelined_requests_after_a_get_are_answered():
    h = Harness()
    try:
        s = socket.create_connection(("127.0.0.1", h.port), timeout=10)
        body = json.dumps(chat("hi")).encode()
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
                  b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
                  b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
                  b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + str(len(body)).encode() +
                  b"\r\nConnection: close\r\n\r\n" + body)
        data = recv_until_closed(s).decode()
        statuses = re.findall(r"HTTP/1.1 (\d+) ", data)
        assert statuses == ["200", "200", "404", "200"], data
        assert data.lower().count("connection: close") <= 1  # only the last, which asked for it
        assert "Echo: hi" in data
    finally:
        assert h.stop()[0] == 0


def test_health_answers_503_while_draining():
    h = Harness("--step-us", 2000, "--grace", 3)
    try:
        stream = open_request(h.port, chat("count to 100000", stream=True))
        assert wait_until(lambda: h.metrics()["deepinfer_running_requests"] == 1)
        h.proc.terminate()
        time.sleep(0.3)
        status, _, body = get(h.url + "/health")
        assert status == 503 and json.loads(body) == {"status": "stopping"}
        status, _, body = post(h.url + "/v1/chat/completions", chat("hi"))
        assert status == 503 and b"shutting down" in body
        stream.close()
    finally:
        assert h.stop()[0] == 0


def test_405_carries_allow():
    h = Harness()
    try:
        for path, allow in [("/v1/chat/completions", "POST"), ("/health", "GET"), ("/tokenize", "POST"),
                            ("/v1/models/x", "GET")]:
            method = "GET" if allow == "POST" else "DELETE"
            req = urllib.request.Request(h.url + path, method=method)
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(req, timeout=10)
            assert e.value.code == 405 and e.value.headers["Allow"] == allow, (path, dict(e.value.headers))
    finally:
        assert h.stop()[0] == 0


def test_new_endpoints_follow_the_api_key():
    h = Harness("--api-key", "k1")
    try:
        assert get(h.url + "/version")[0] == 200  # open, like /health and /openapi.json
        assert get(h.url + "/v1/models/" + MODEL)[0] == 401
        assert post(h.url + "/tokenize", {"prompt": "hi"})[0] == 401
        assert post(h.url + "/detokenize", {"tokens": [104, 105]})[0] == 401
        req = urllib.request.Request(h.url + "/detokenize", data=json.dumps({"tokens": [256, 104, 105]}).encode(),
                                     headers={"Authorization": "Bearer k1"})
        assert json.loads(urllib.request.urlopen(req, timeout=10).read()) == {"prompt": "<s>hi"}  # the fake's bytes
    finally:
        assert h.stop()[0] == 0


def schema_of(doc, ref_or_schema):
    """A schema of the document as JSON Schema: $refs resolvable, OpenAPI 3.0's nullable and
    boolean exclusiveMinimum spelled the JSON Schema way."""
    def fix(node):
        if isinstance(node, dict):
            node = {k: fix(v) for k, v in node.items() if k != "x-event-schema"}
            if node.pop("nullable", False) and "type" in node:
                node["type"] = [node["type"], "null"]
            if node.get("exclusiveMinimum") is True:
                node["exclusiveMinimum"] = node.pop("minimum")
            if "$ref" in node:
                node["$ref"] = node["$ref"].replace("#/components/schemas/", "#/$defs/")
            return node
        if isinstance(node, list):
            return [fix(v) for v in node]
        return node
    schema = fix(ref_or_schema)
    schema["$defs"] = {k: fix(v) for k, v in doc["components"]["schemas"].items()}
    return schema


def sse_events(data):
    return [json.loads(line[6:]) for line in data.decode().split("\n")
            if line.startswith("data: ") and line != "data: [DONE]"]


def test_openapi_admits_only_what_the_server_accepts_and_types_stream_events():
    h = Harness()
    try:
        doc = json.loads(get(h.url + "/openapi.json")[2])
        chat_schema = schema_of(doc, {"$ref": "#/components/schemas/ChatRequest"})
        for bad in [dict(chat("hi"), model=""), dict(chat("hi"), thinking={})]:
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate(bad, chat_schema)
            assert post(h.url + "/v1/chat/completions", bad)[0] in (400, 404)
        jsonschema.validate(chat("hi"), chat_schema)
        requests = {
            "/v1/chat/completions": dict(chat("hi", stream=True), stream_options={"include_usage": True}),
            "/v1/completions": {"model": MODEL, "prompt": "hi there", "stream": True},
            "/v1/responses": {"model": MODEL, "input": "hi", "stream": True},
            "/v1/messages": {"model": MODEL, "max_tokens": 50, "stream": True,
                             "messages": [{"role": "user", "content": "hi"}]},
        }
        for path, body in requests.items():
            media = doc["paths"][path]["post"]["responses"]["200"]["content"]["text/event-stream"]
            event_schema = schema_of(doc, media["x-event-schema"])
            status, headers, data = post(h.url + path, body)
            assert status == 200 and headers["Content-Type"] == "text/event-stream"
            events = sse_events(data)
            assert len(events) >= 3, data
            for ev in events:
                jsonschema.validate(ev, event_schema)
        assert doc["paths"]["/v1/chat/completions"]["post"]["responses"]["200"]["content"]["text/event-stream"][
            "schema"]["type"] == "string"
    finally:
        assert h.stop()[0] == 0


# ---- item 10: what vLLM users expect -----------------------------------------------------------

def test_tokenize_and_detokenize_agree_with_the_models_tokenizer(tiny):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(tiny.model_dir, "tokenizer.json"))
    bos = tok.token_to_id("<\uff5cbegin\u2581of\u2581sentence\uff5c>")
    assert bos is not None
    for text in ["Hello world, h\u00e9llo", "  spaces\tand\nnew lines 123", "\u65e5\u672c\u8a9e \U0001f600!"]:
        want = tok.encode(text, add_special_tokens=False).ids
        status, _, body = post(tiny.url + "/tokenize", {"model": MODEL, "prompt": text})
        assert status == 200, body
        r = json.loads(body)
        assert r == {"count": len(want) + 1, "max_model_len": 4096, "tokens": [bos] + want}
        status, _, body = post(tiny.url + "/tokenize", {"prompt": text, "add_special_tokens": False})
        assert json.loads(body)["tokens"] == want
        status, _, body = post(tiny.url + "/detokenize", {"model": MODEL, "tokens": [bos] + want})
        assert status == 200 and json.loads(body) == {"prompt": tok.decode([bos] + want, skip_special_tokens=False)}
    # A chat: the ids a chat completion is given (its usage counts them), rendered with the template.
    messages = [{"role": "user", "content": "What is 2+2?"}]
    status, _, body = post(tiny.url + "/tokenize", {"model": MODEL, "messages": messages,
                                                    "thinking": {"type": "disabled"}})
    ids = json.loads(body)["tokens"]
    usage = json.loads(post(tiny.url + "/v1/chat/completions", chat("What is 2+2?", max_tokens=2))[2])["usage"]
    assert status == 200 and len(ids) == usage["prompt_tokens"] and ids[0] == bos
    assert "What is 2+2?" in tok.decode(ids, skip_special_tokens=False)


def test_tokenize_refuses_what_it_cannot_honour(tiny):
    cases = [({"prompt": "x", "return_token_strs": True}, 400, "return_token_strs"),
             ({"prompt": "x", "model": "other"}, 404, "other"),
             ({"prompt": "x", "messages": [{"role": "user", "content": "x"}]}, 400, "exactly one"),
             ({"prompt": 5}, 400, "prompt"),
             ({"messages": [{"role": "user", "content": "x"}], "add_special_tokens": True}, 400, "add_special_tokens")]
    for body, status, needle in cases:
        got, _, text = post(tiny.url + "/tokenize", body)
        assert got == status and needle in json.loads(text)["error"]["message"], (body, got, text)
    for tokens, needle in [([1, 10 ** 6], "10000"), ([-1], "tokens[0]"), ("abc", "tokens")]:
        got, _, text = post(tiny.url + "/detokenize", {"tokens": tokens})
        assert got == 400 and needle in json.loads(text)["error"]["message"], (tokens, text)


def test_version_and_model_by_id(tiny):
    import subprocess
    from server_fixture import DEEPINFER
    version = subprocess.run([DEEPINFER, "--version"], capture_output=True, text=True).stdout.split()[1]
    assert json.loads(get(tiny.url + "/version")[2]) == {"version": version}
    listed = json.loads(get(tiny.url + "/v1/models")[2])["data"][0]
    status, _, body = get(tiny.url + "/v1/models/" + MODEL)
    assert status == 200 and json.loads(body) == listed
    status, _, body = get(tiny.url + "/v1/models/gpt-4")
    err = json.loads(body)["error"]
    assert status == 404 and "gpt-4" in err["message"] and set(err) >= {"message", "type", "param", "code"}


def histograms(text):
    """{name: (count, sum, [(le, cumulative)])} of every histogram, read with Prometheus' own
    parser, after checking what it does not: cumulative buckets ending at +Inf == count."""
    from prometheus_client.parser import text_string_to_metric_families
    out = {}
    for fam in text_string_to_metric_families(text):
        if fam.type != "histogram":
            continue
        buckets = [(s.labels["le"], s.value) for s in fam.samples if s.name.endswith("_bucket")]
        count = next(s.value for s in fam.samples if s.name.endswith("_count"))
        total = next(s.value for s in fam.samples if s.name.endswith("_sum"))
        values = [v for _, v in buckets]
        assert values == sorted(values) and buckets[-1] == ("+Inf", count), fam.name
        out[fam.name] = (count, total, buckets)
    return out


def scalars(text):
    from prometheus_client.parser import text_string_to_metric_families
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) if fam.type in ("counter", "gauge") for s in fam.samples}


def test_metrics_have_vllms_histograms_and_counters(tiny):
    names = ["time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds",
             "request_queue_time_seconds", "request_prefill_time_seconds", "request_decode_time_seconds"]
    text0 = get(tiny.url + "/metrics")[2].decode()
    h0, c0 = histograms(text0), scalars(text0)
    for n in names:
        assert "deepinfer_" + n in h0, n
    completion_tokens = 0
    for i in range(3):
        r = json.loads(post(tiny.url + "/v1/chat/completions", chat(f"metrics {i}", max_tokens=8, seed=i))[2])
        completion_tokens += r["usage"]["completion_tokens"]
    text1 = get(tiny.url + "/metrics")[2].decode()
    h1, c1 = histograms(text1), scalars(text1)
    for n in ["time_to_first_token_seconds", "e2e_request_latency_seconds", "request_queue_time_seconds",
              "request_prefill_time_seconds", "request_decode_time_seconds"]:
        count0, sum0, _ = h0["deepinfer_" + n]
        count1, sum1, _ = h1["deepinfer_" + n]
        assert count1 - count0 == 3 and sum1 >= sum0, n
    # speculative decoding: vLLM's counters and the accepted-length histogram (one bucket per count)
    spec = {n: c1[("deepinfer_spec_decode_num_" + n + "_total", ())] for n in ("drafts", "draft_tokens", "accepted_tokens")}
    count, total, buckets = h1["deepinfer_spec_decode_acceptance_length"]
    assert count == spec["drafts"] and total == spec["accepted_tokens"] <= spec["draft_tokens"]
    assert [le for le, _ in buckets] == [str(k) for k in range(17)] + ["+Inf"]
    itl = h1["deepinfer_inter_token_latency_seconds"][0] - h0["deepinfer_inter_token_latency_seconds"][0]
    assert 0 < itl <= completion_tokens
    e2e = h1["deepinfer_e2e_request_latency_seconds"][1] - h0["deepinfer_e2e_request_latency_seconds"][1]
    phases = sum(h1["deepinfer_" + n][1] - h0["deepinfer_" + n][1] for n in names[3:])
    assert 0 < phases <= e2e + 0.05  # the engine's phases fit inside the HTTP view of the request

    def moved(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return c1.get(key, 0) - c0.get(key, 0)
    assert moved("deepinfer_request_success_total", finished_reason="stop") + \
        moved("deepinfer_request_success_total", finished_reason="length") == 3
    assert moved("deepinfer_generation_tokens_total") == completion_tokens
    assert ("deepinfer_num_preemptions_total", ()) in c1
    usage = c1[("deepinfer_kv_cache_usage_perc", ())]
    assert 0 <= usage <= 1
