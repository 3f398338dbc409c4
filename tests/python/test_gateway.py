"""`deepinfer gateway` over `deepinfer serve` workers on loopback (serving.md §5, issue 24):
outputs through the gateway equal a worker's own (greedy and seeded: the engine is exact and
batch-invariant, so a single worker is the reference), streaming through the gateway with the
official OpenAI and Anthropic SDKs, the workers' GET /internal/load, the PD flow (scripted
prefill and decode workers get the same room; 2 `--role prefill` + 2 `--role decode` workers
answer as a single server does), a client that leaves aborts the
worker's request, a worker failing before any byte (retried) or mid-stream (error event), and
kill -9 of a worker: the gateway keeps serving with the other, then the restarted worker rejoins.
Gateway + 1 prefill + 1 decode (+ a second decode worker): greedy and seeded chat and completions
equal a cold single server; kill -9 of the decode worker mid-stream ends the client's stream with
an error event, the prefill worker returns to idle, the other decode worker serves on, and the
restarted one rejoins with its new transfer address.  Cache-aware choice over `--both` workers
with a block cache: a request sharing a long prefix with what one worker holds goes to it, while
unrelated ones still spread."""
import json
import os
import signal
import socket
import sys
import threading
import tempfile
import time
import urllib.request

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from server_fixture import MODEL, Gateway, Serve, engine_idle, post_json, wait_until  # noqa: E402

openai = pytest.importorskip("openai")  # required: tools/install-deps.sh installs it
anthropic = pytest.importorskip("anthropic")

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "tell me about the sea"}], "max_tokens": 12,
        "temperature": 0, "thinking": {"type": "disabled"}}  # thinking would fix temperature at 1
SEEDED = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 12, "temperature": 0.9, "seed": 1234}


@pytest.fixture(scope="module")
def cluster():
    with tempfile.TemporaryDirectory(prefix="di-gw-") as cache:
        workers = [Serve(cache), Serve(cache)]
        gw = None
        try:
            gw = Gateway(cache, "--both", workers[0].url, workers[1].url, "--heartbeat-ms", 200)
            yield cache, workers, gw
        finally:
            if gw:
                assert gw.stop() == 0
            for w in workers:
                w.stop()


def answer(body):
    """What must not depend on the route: the generated text, finish reason and token counts."""
    c = body["choices"][0]
    text = c["message"]["content"] + (c["message"].get("reasoning_content") or "") if "message" in c else c["text"]
    return text, c["finish_reason"], body["usage"]["completion_tokens"], body["usage"]["prompt_tokens"]


def test_internal_load_reports_the_worker(cluster):
    _, workers, _ = cluster
    st, body = post_json(workers[0], "/v1/completions", dict(SEEDED, max_tokens=3))
    assert st == 200
    prompt = body["usage"]["prompt_tokens"]
    load = json.loads(urllib.request.urlopen(workers[0].url + "/internal/load", timeout=10).read())
    assert load["role"] == "both" and load["model"] == MODEL
    assert load["running"] == 0 and load["kv_tokens"] == 0 and load["transfer"] is None
    assert load["prefill_tokens"] >= prompt and load["prefill_seconds"] > 0 and load["decode_tokens"] >= 2
    q, c, s = load["prefill_samples"][-1]
    assert q + c == prompt and s > 0 and load["prefill_samples_total"] >= 1


def test_greedy_and_seeded_outputs_equal_direct(cluster):
    _, workers, gw = cluster
    for path, body in (("/v1/chat/completions", CHAT), ("/v1/completions", SEEDED)):
        st, direct = post_json(workers[1], path, body)
        assert st == 200
        for _ in range(3):  # several routes: either worker answers the same
            st, via = post_json(gw, path, body)
            assert st == 200, via
            assert answer(via) == answer(direct)
    st, err = post_json(gw, "/v1/chat/completions", dict(CHAT, max_tokens=-1))
    assert st == 400 and "max_tokens" in err["error"]["message"]  # the worker's own refusal, passed through


def test_streaming_through_the_gateway_with_the_sdks(cluster):
    _, workers, gw = cluster
    msgs = [{"role": "user", "content": "a short poem"}]
    direct = openai.OpenAI(base_url=workers[0].url + "/v1", api_key="x", max_retries=0, timeout=30)
    via = openai.OpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=0, timeout=30)

    def chat_text(client):
        out = []
        for ch in client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=10, temperature=0,
                                                 stream=True, extra_body={"thinking": {"type": "disabled"}}):
            if ch.choices:
                d = ch.choices[0].delta
                out.append((d.content or "") + (d.model_extra.get("reasoning_content") or ""))
        return "".join(out)

    assert chat_text(via) == chat_text(direct) != ""
    ant_direct = anthropic.Anthropic(base_url=workers[0].url, api_key="x", max_retries=0, timeout=30)
    ant_via = anthropic.Anthropic(base_url=gw.url, api_key="x", max_retries=0, timeout=30)

    def messages_events(client):
        with client.messages.stream(model=MODEL, max_tokens=10, messages=msgs,
                                    extra_body={"temperature": 0, "thinking": {"type": "disabled"}}) as s:
            events = [e.type for e in s]
            return events, s.get_final_message().content

    assert messages_events(ant_via) == messages_events(ant_direct)
    m = gw.metrics()
    assert m['deepinfer_gateway_worker_healthy{worker="%s",role="both"}' % workers[0].url] == 1
    assert m["deepinfer_gateway_tier_requests_total{tier=\"0\"}"] >= 2
    assert m["deepinfer_gateway_prefill_cost_fit{method=\"none\"}"] == 0  # fitted from the workers' measurements
    assert m["deepinfer_gateway_prefill_cost_ns{coef=\"d\"}"] > 0


def open_stream(port):
    """A raw HTTP/1.1 streamed completion that runs for long, read until its first data event."""
    body = json.dumps({"model": MODEL, "prompt": "go on", "max_tokens": 100000, "ignore_eos": True,
                       "stream": True}).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    got = b""
    while b"data:" not in got and len(got) < 65536:
        chunk = s.recv(4096)
        assert chunk, got
        got += chunk
    return s


def read_to_end(s):
    """What is left of a chunked answer up to its last chunk, reading for 30 s at most."""
    got, end = b"", time.time() + 30
    while not got.endswith(b"0\r\n\r\n") and time.time() < end:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    s.close()
    return got[-4096:]


def test_client_disconnect_aborts_the_worker_request(cluster):
    _, workers, gw = cluster
    aborted = sum(w.metrics()["deepinfer_requests_aborted_total"] for w in workers)
    open_stream(gw.port).close()
    assert wait_until(lambda: all(engine_idle(w.metrics) for w in workers), timeout=15)
    assert sum(w.metrics()["deepinfer_requests_aborted_total"] for w in workers) == aborted + 1
    assert wait_until(lambda: gw.metrics()["deepinfer_gateway_client_aborts_total"] >= 1, timeout=5)


def test_pd_pools_of_plain_workers_take_whole_requests(cluster):
    """Workers that report role both (plain `serve`) in the prefill and decode pools: no split (they
    have no /internal/prefill and refuse X-DI-Room); the decode pool serves whole requests."""
    cache, workers, _ = cluster
    gw = Gateway(cache, "--prefill", workers[0].url, "--decode", workers[1].url, "--heartbeat-ms", 200)
    try:
        st, direct = post_json(workers[1], "/v1/chat/completions", CHAT)
        for _ in range(2):
            st, via = post_json(gw, "/v1/chat/completions", CHAT)
            assert st == 200 and answer(via) == answer(direct)
        m = gw.metrics()
        assert m["deepinfer_gateway_pd_requests_total"] == 0
        assert m['deepinfer_gateway_worker_routed_total{worker="%s",role="prefill"}' % workers[0].url] == 0
        assert m['deepinfer_gateway_worker_routed_total{worker="%s",role="decode"}' % workers[1].url] == 2
    finally:
        assert gw.stop() == 0


def test_kill_a_worker_then_it_rejoins():
    with tempfile.TemporaryDirectory(prefix="di-gw-kill-") as cache:
        a, b = Serve(cache), Serve(cache)
        gw = Gateway(cache, "--both", a.url, b.url, "--heartbeat-ms", 200)
        try:
            assert post_json(gw, "/v1/completions", SEEDED)[0] == 200
            # a long stream on a (both idle: the balancer's tie goes to the first), then a dies
            # mid-stream: the client gets an error event and the end of the stream, no hang
            s = open_stream(gw.port)
            a.proc.send_signal(signal.SIGKILL)
            a.proc.wait(timeout=10)
            rest = read_to_end(s)
            assert b"the worker failed in the middle of the answer" in rest and rest.endswith(b"0\r\n\r\n")
            assert gw.metrics()["deepinfer_gateway_stream_errors_total"] == 1
            t0 = time.time()
            for _ in range(4):  # the first may still be routed to the dead one: retried on b
                st, body = post_json(gw, "/v1/completions", SEEDED, timeout=30)
                assert st == 200, body
            assert time.time() - t0 < 20
            healthy_a = 'deepinfer_gateway_worker_healthy{worker="%s",role="both"}' % a.url
            assert wait_until(lambda: gw.metrics()[healthy_a] == 0, timeout=5)
            a2 = Serve(cache, "--port", a.port)  # the same address again
            try:
                assert wait_until(lambda: gw.metrics()[healthy_a] == 1, timeout=10)
                routed_a = 'deepinfer_gateway_worker_routed_total{worker="%s",role="both"}' % a.url
                before = gw.metrics()[routed_a]
                for _ in range(3):
                    assert post_json(gw, "/v1/completions", SEEDED)[0] == 200
                assert gw.metrics()[routed_a] > before  # back in rotation (idle ties go to it)
            finally:
                a2.stop()
        finally:
            assert gw.stop() == 0
            b.stop()
            if a.proc.poll() is None:
                a.proc.kill()
            a.log.close()


class FakeWorker:
    """A scripted worker: answers GET /internal/load as a `role` worker (transfer address
    127.0.0.1:7777 for decode), records every POST (path, headers, JSON body) and answers it by
    `mode`: "ok" (a fixed chat completion), "close" (drops the connection, no byte), "hang"
    (holds it without a byte for 10 s); `hang_load` holds heartbeats without an answer.  A decode worker given `room_from` (the prefill worker)
    answers only once that one got its POST (with `after_reply`: once it answered it), as a real
    one waits for the room's KV."""

    def __init__(self, role="both", mode="ok", room_from=None):
        import http.server
        import threading
        self.role, self.mode, self.posts = role, mode, []
        self.reply_body = None  # set: the JSON answer to every POST (e.g. a prefill reply)
        self.delay = 0  # seconds before answering a POST
        self.hang_load = False  # set: heartbeats get no answer (a hung worker)
        self.after_reply = False  # set (decode): wait until room_from has answered its POST
        self.replied = 0  # POSTs answered
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                if fake.hang_load:
                    time.sleep(3)
                    return
                if self.path != "/internal/load":
                    self.send_error(404)
                    return
                load = {"role": fake.role, "model": MODEL, "queued": 0, "running": 0, "kv_tokens": 0,
                        "transfer": "127.0.0.1:7777" if fake.role == "decode" else None}
                self.reply(200, json.dumps(load).encode())

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.posts.append((self.path, dict(self.headers), body))
                if fake.mode == "close":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if fake.mode == "hang":
                    time.sleep(10)
                    return
                if room_from is not None:
                    wait_until(lambda: room_from.replied if fake.after_reply else room_from.posts, timeout=30)
                time.sleep(fake.delay)
                self.reply(200, json.dumps(fake.reply_body or {"choices": [{"message": {"content": "fake"}}]}).encode())
                fake.replied += 1

            def reply(self, status, data):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("mode", ["close", "hang"])
def test_a_worker_failing_before_any_byte_is_retried_on_another(cluster, mode):
    cache, workers, _ = cluster
    fake = FakeWorker(mode=mode)  # first in the list: the balancer's tie between idle workers picks it
    gw = Gateway(cache, "--both", fake.url, workers[0].url, "--heartbeat-ms", 200, "--idle-timeout", 1)
    try:
        t0 = time.time()
        st, body = post_json(gw, "/v1/chat/completions", CHAT, timeout=30)
        assert st == 200 and answer(body) == answer(post_json(workers[0], "/v1/chat/completions", CHAT)[1])
        assert time.time() - t0 < 15
        assert len(fake.posts) == 1
        m = gw.metrics()
        assert m["deepinfer_gateway_retries_total"] == 1
        assert m['deepinfer_gateway_worker_failures_total{worker="%s",role="both"}' % fake.url] == 1
        # it still answers heartbeats: back in rotation at once (no sticky failure)
        healthy = 'deepinfer_gateway_worker_healthy{worker="%s",role="both"}' % fake.url
        assert wait_until(lambda: gw.metrics()[healthy] == 1, timeout=5)
    finally:
        assert gw.stop() == 0
        fake.stop()


def test_pd_request_carries_the_room_to_both_halves():
    with tempfile.TemporaryDirectory(prefix="di-gw-pd-") as cache:
        pre = FakeWorker("prefill")
        dec = FakeWorker("decode", room_from=pre)
        gw = None
        try:
            # the gateway needs the tiny model's tokenizer: a worker generates it
            Serve(cache).stop()
            gw = Gateway(cache, "--prefill", pre.url, "--decode", dec.url, "--heartbeat-ms", 200,
                         "--room-deadline-ms", 4000)
            st, body = post_json(gw, "/v1/chat/completions", CHAT)
            assert st == 200 and body["choices"][0]["message"]["content"] == "fake"
            assert wait_until(lambda: len(pre.posts) == 1, timeout=5)
            (ppath, _, pbody), (dpath, dhdr, dbody) = pre.posts[0], dec.posts[0]
            assert ppath == "/internal/prefill" and dpath == "/v1/chat/completions"
            assert dbody == CHAT and pbody["body"] == CHAT and pbody["path"] == "/v1/chat/completions"
            assert pbody["room"] == dhdr["X-DI-Room"] and int(pbody["room"]) >= 0
            assert pbody["decode"] == "127.0.0.1:7777"  # the decode worker's transfer address
            assert pbody["deadline_ms"] == 4000 and dhdr["X-DI-Room-Deadline-Ms"] == "4000"
        finally:
            if gw:
                assert gw.stop() == 0
            pre.stop()
            dec.stop()


def test_a_prefill_longer_than_the_idle_timeout_is_waited_for():
    """The decode worker answers only once the prefill ends, so while the prefill half is in
    flight the gateway's --idle-timeout does not run on the decode half (issue 35: a prefill longer
    than the idle timeout got a 502).  Once the prefill answered, the idle timeout applies again: a
    decode worker that then sends nothing is cut."""
    with tempfile.TemporaryDirectory(prefix="di-gw-pd-") as cache:
        pre = FakeWorker("prefill")
        dec = FakeWorker("decode", room_from=pre)
        gw = None
        try:
            Serve(cache).stop()
            pre.delay, dec.after_reply = 4, True
            pre.reply_body = {"state_tokens": 10, "cached_tokens": 0, "prefill_s": 4.0}
            gw = Gateway(cache, "--prefill", pre.url, "--decode", dec.url, "--heartbeat-ms", 200,
                         "--idle-timeout", 1)
            t0 = time.monotonic()
            st, body = post_json(gw, "/v1/chat/completions", CHAT)
            assert st == 200 and body["choices"][0]["message"]["content"] == "fake", (st, body)
            assert time.monotonic() - t0 >= 4
            pre.delay, dec.delay = 0, 4  # the prefill is over at once; the decode half then idles 4 s
            t0 = time.monotonic()
            st, body = post_json(gw, "/v1/chat/completions", CHAT)
            assert st == 503 and time.monotonic() - t0 < 3.5, (st, body)  # cut, the worker left rotation
            assert "no byte from the worker for 1 s" in open(gw.log_path).read()
        finally:
            if gw:
                assert gw.stop() == 0
            pre.stop()
            dec.stop()


def test_a_prefill_reply_whose_sample_overflows_is_not_taken():
    """The gateway takes (state_tokens - cached_tokens, cached_tokens, prefill_s) from each
    /internal/prefill reply into its cost fit; a reply with state_tokens = -2^63 must be refused,
    not wrapped into a sample of 2^63 - 1 tokens."""
    with tempfile.TemporaryDirectory(prefix="di-gw-pd-") as cache:
        pre = FakeWorker("prefill")
        dec = FakeWorker("decode", room_from=pre)
        dec.delay = 0.5  # the prefill reply is in before the request ends (else it is not waited for)
        gw = None
        try:
            Serve(cache).stop()  # the gateway needs the tiny model's tokenizer: a worker generates it
            gw = Gateway(cache, "--prefill", pre.url, "--decode", dec.url, "--heartbeat-ms", 200)
            pre.reply_body = {"state_tokens": -2**63, "cached_tokens": 1, "prefill_s": 0.5}
            assert post_json(gw, "/v1/chat/completions", CHAT)[0] == 200
            pre.reply_body = {"state_tokens": 9, "cached_tokens": 1, "prefill_s": 0.5}  # a good one is taken
            assert post_json(gw, "/v1/chat/completions", CHAT)[0] == 200
            samples = "deepinfer_gateway_prefill_reply_samples_total"
            assert wait_until(lambda: gw.metrics()[samples] >= 1, timeout=5)
            time.sleep(0.3)
            assert gw.metrics()[samples] == 1
        finally:
            if gw:
                assert gw.stop() == 0
            pre.stop()
            dec.stop()


def test_a_hung_worker_leaves_after_two_missed_heartbeats_and_rejoins(cluster):
    cache, workers, _ = cluster
    fake = FakeWorker()
    gw = Gateway(cache, "--both", fake.url, workers[0].url, "--heartbeat-ms", 200)
    healthy = 'deepinfer_gateway_worker_healthy{worker="%s",role="both"}' % fake.url
    try:
        assert gw.metrics()[healthy] == 1
        fake.hang_load = True
        t0 = time.time()
        assert wait_until(lambda: gw.metrics()[healthy] == 0, timeout=5)
        assert time.time() - t0 < 2  # two 200 ms periods, each bounded by its own deadline
        st, body = post_json(gw, "/v1/chat/completions", CHAT)
        assert st == 200 and not fake.posts  # served by the other
        fake.hang_load = False
        assert wait_until(lambda: gw.metrics()[healthy] == 1, timeout=5)
    finally:
        assert gw.stop() == 0
        fake.stop()


def test_api_key_is_required_and_sent_on_heartbeats():
    key = "gw-key-42"
    with tempfile.TemporaryDirectory(prefix="di-gw-key-") as cache:
        w = Serve(cache, "--api-key", key)
        gw = Gateway(cache, "--both", w.url, "--heartbeat-ms", 200, "--api-key", key)
        try:
            assert urllib.request.urlopen(gw.url + "/health", timeout=10).status == 200  # open; worker joined
            st, err = post_json(gw, "/v1/chat/completions", CHAT)
            assert st == 401 and "API key" in err["error"]["message"]
            via = openai.OpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0, timeout=30)
            r = via.chat.completions.create(model=MODEL, messages=CHAT["messages"], max_tokens=4, temperature=0,
                                            extra_body={"thinking": {"type": "disabled"}})
            assert r.usage.completion_tokens == 4  # the client's key reached the worker too
        finally:
            assert gw.stop() == 0
            w.stop()


def post_concurrently(srv, path, bodies):
    """POST every body at once (one thread each); the (status, answer) pairs in order."""
    out = [None] * len(bodies)
    threads = [threading.Thread(target=lambda i=i: out.__setitem__(i, post_json(srv, path, bodies[i])))
               for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def test_pd_two_prefill_two_decode_workers_match_a_single_server():
    """Gateway + 2 `serve --role prefill` + 2 `serve --role decode`: concurrent requests are split
    (prefill half, the request's exact state over UCX, decode half), every answer equals a cold
    single `serve --prefix-cache off` (the decode worker continues from the transferred state and
    recomputes only the last prompt position), both decode workers take requests, each imports
    the states it was sent, none prefilled locally and no block stays pinned."""
    filler = "the quick brown fox jumps over the lazy dog "
    bodies = [{"model": MODEL, "prompt": f"Case {i}. " + filler * (26 + i), "max_tokens": 12, "temperature": 0}
              for i in range(4)]
    with tempfile.TemporaryDirectory(prefix="di-gw-pd2-") as cache:
        procs = [Serve(cache, "--prefix-cache", "off")]
        gw = None
        try:
            ref = procs[0]
            pre = [Serve(cache, "--role", "prefill") for _ in range(2)]
            dec = [Serve(cache, "--role", "decode") for _ in range(2)]
            procs += pre + dec
            gw = Gateway(cache, "--prefill", *[p.url for p in pre], "--decode", *[d.url for d in dec],
                         "--heartbeat-ms", 200)
            out = post_concurrently(gw, "/v1/completions", bodies)
            for i, body in enumerate(bodies):
                st, via = out[i]
                assert st == 200, via
                st, cold = post_json(ref, "/v1/completions", body)
                assert st == 200, cold
                assert cold["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
                prompt = via["usage"]["prompt_tokens"]
                assert prompt == cold["usage"]["prompt_tokens"]
                assert via["usage"]["prompt_tokens_details"]["cached_tokens"] == prompt - 1  # from the state
                assert answer(via) == answer(cold)
            m = gw.metrics()
            assert m["deepinfer_gateway_pd_requests_total"] == len(bodies)
            assert wait_until(lambda: gw.metrics()["deepinfer_gateway_pd_prefill_ok_total"] == len(bodies), timeout=10)
            for d in dec:
                assert m['deepinfer_gateway_worker_routed_total{worker="%s",role="decode"}' % d.url] >= 1
                dm = d.metrics()
                assert dm["deepinfer_pd_local_prefills_total"] == 0
                assert dm["deepinfer_pd_states_imported_total"] >= 1
                assert wait_until(lambda: d.metrics()["deepinfer_pd_pinned_blocks"] == 0, timeout=10)
        finally:
            if gw:
                assert gw.stop() == 0
            for p in procs:
                p.stop()


def pd_cases():
    filler = "the quick brown fox jumps over the lazy dog "
    chat = {"model": MODEL, "max_tokens": 12}
    return [("/v1/completions", {"model": MODEL, "prompt": "Greedy. " + filler * 26, "max_tokens": 12, "temperature": 0}),
            ("/v1/completions", {"model": MODEL, "prompt": "Seeded. " + filler * 22, "max_tokens": 12,
                                 "temperature": 0.9, "seed": 21}),
            ("/v1/chat/completions", dict(chat, messages=[{"role": "user", "content": "Greedy chat. " + filler * 24}],
                                          temperature=0, thinking={"type": "disabled"})),
            ("/v1/chat/completions", dict(chat, messages=[{"role": "user", "content": "Seeded chat. " + filler * 20}],
                                          seed=8))]


def check_pd_equals_cold(gw, ref):
    for path, body in pd_cases():
        st, via = post_json(gw, path, body, timeout=60)
        assert st == 200, via
        st, cold = post_json(ref, path, body)
        assert st == 200 and cold["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, cold
        assert via["usage"]["prompt_tokens_details"]["cached_tokens"] == via["usage"]["prompt_tokens"] - 1, via
        assert answer(via) == answer(cold)


def test_pd_one_prefill_one_decode_and_a_decode_killed_mid_stream():
    with tempfile.TemporaryDirectory(prefix="di-gw-pd1-") as cache:
        procs = [Serve(cache, "--prefix-cache", "off")]
        gw = None
        try:
            ref = procs[0]
            pre = Serve(cache, "--role", "prefill")
            dec = Serve(cache, "--role", "decode")
            procs += [pre, dec]
            gw = Gateway(cache, "--prefill", pre.url, "--decode", dec.url, "--heartbeat-ms", 200)
            check_pd_equals_cold(gw, ref)
            assert gw.metrics()["deepinfer_gateway_pd_requests_total"] == len(pd_cases())
            # every prefill reply's measured sample feeds the cost fit
            assert wait_until(lambda: gw.metrics()["deepinfer_gateway_prefill_reply_samples_total"] == len(pd_cases()))
            time.sleep(0.5)  # heartbeats after the replies: the prefill worker's own samples are not taken again
            m = gw.metrics()
            own = [json.loads(urllib.request.urlopen(w.url + "/internal/load", timeout=10).read())["prefill_samples_total"]
                   for w in (pre, dec)]
            assert own[0] == len(pd_cases())  # the same prefills the replies reported
            # the decode worker's samples (its one-token tails) come by heartbeat; the prefill
            # worker's not again, but for at most its first, taken before the first reply came
            taken = m["deepinfer_gateway_prefill_cost_samples_total"]
            assert len(pd_cases()) + own[1] <= taken <= len(pd_cases()) + own[1] + 1, (taken, own)
            assert dec.metrics()["deepinfer_pd_local_prefills_total"] == 0
            assert gw.stop() == 0
            # a second decode worker; the one that takes the stream dies mid-stream
            procs.append(Serve(cache, "--role", "decode"))
            gw = Gateway(cache, "--prefill", pre.url, "--decode", dec.url, procs[-1].url, "--heartbeat-ms", 200)
            pd_before = gw.metrics()["deepinfer_gateway_pd_requests_total"]
            s = open_stream(gw.port)
            running = []  # the engine's gauge follows its step loop: wait for it

            def one_running():
                running[:] = [d for d in (dec, procs[-1]) if d.metrics()["deepinfer_running_requests"] == 1]
                return len(running) == 1
            assert wait_until(one_running, timeout=10)
            victim = running[0]
            spare = procs[-1] if victim is dec else dec
            assert gw.metrics()["deepinfer_gateway_pd_requests_total"] == pd_before + 1  # a split request
            victim.proc.send_signal(signal.SIGKILL)
            victim.proc.wait(timeout=10)
            rest = read_to_end(s)
            assert b"the worker failed in the middle of the answer" in rest and rest.endswith(b"0\r\n\r\n")
            assert gw.metrics()["deepinfer_gateway_stream_errors_total"] == 1
            assert wait_until(lambda: engine_idle(pre.metrics), timeout=10)  # nothing left on the prefill side
            healthy = 'deepinfer_gateway_worker_healthy{worker="%s",role="decode"}' % victim.url
            assert wait_until(lambda: gw.metrics()[healthy] == 0, timeout=5)
            imported = spare.metrics()["deepinfer_pd_states_imported_total"]
            check_pd_equals_cold(gw, ref)  # the spare decodes, from transferred states
            assert spare.metrics()["deepinfer_pd_states_imported_total"] == imported + len(pd_cases())
            victim.log.close()
            restarted = Serve(cache, "--role", "decode", "--port", victim.port)  # a new transfer port
            procs.append(restarted)
            assert wait_until(lambda: gw.metrics()[healthy] == 1, timeout=10)
            spare.stop()
            procs.remove(spare)
            check_pd_equals_cold(gw, ref)
            assert restarted.metrics()["deepinfer_pd_states_imported_total"] == len(pd_cases())
            assert restarted.metrics()["deepinfer_pd_local_prefills_total"] == 0
            assert wait_until(lambda: engine_idle(pre.metrics) and restarted.metrics()["deepinfer_pd_pinned_blocks"] == 0)
        finally:
            if gw:
                gw.stop()
            for p in procs:
                if p.proc.poll() is None:
                    p.stop()


def test_cache_aware_choice_sends_a_shared_prefix_to_its_holder():
    filler = "the quick brown fox jumps over the lazy dog "
    shared = "Shared context. " + filler * 70  # ~2.5 blocks of 256 tokens
    with tempfile.TemporaryDirectory(prefix="di-gw-cache-") as cache:
        a, b = Serve(cache, "--kv-cache-ram", "0.25"), Serve(cache, "--kv-cache-ram", "0.25")
        gw = None
        try:
            gw = Gateway(cache, "--both", a.url, b.url, "--heartbeat-ms", 200)
            routed = 'deepinfer_gateway_worker_routed_total{worker="%s",role="both"}'
            # b holds the prefix (a direct request: the balancer's tie would send it to a)
            st, _ = post_json(b, "/v1/completions", {"model": MODEL, "prompt": shared + "Question one?",
                                                     "max_tokens": 4, "temperature": 0})
            assert st == 200

            def b_reports_keys():
                load = json.loads(urllib.request.urlopen(b.url + "/internal/load", timeout=10).read())
                return len(load["prefix_keys"]) >= 2 and load["kv_identity"]
            assert wait_until(b_reports_keys, timeout=10)
            time.sleep(0.6)  # the gateway's next heartbeats carry them
            before = gw.metrics()
            st, via = post_json(gw, "/v1/completions", {"model": MODEL, "prompt": shared + "Question two?",
                                                        "max_tokens": 4, "temperature": 0})
            assert st == 200, via
            after = gw.metrics()
            assert after[routed % b.url] == before[routed % b.url] + 1
            assert after["deepinfer_gateway_cache_aware_picks_total"] == before["deepinfer_gateway_cache_aware_picks_total"] + 1
            assert via["usage"]["prompt_tokens_details"]["cached_tokens"] >= 256  # the prefix was reused
            # unrelated prompts spread over both workers and are not cache-aware picks
            bodies = [{"model": MODEL, "prompt": f"Unrelated {i}. " + filler * 30, "max_tokens": 8, "temperature": 0}
                      for i in range(4)]
            out = post_concurrently(gw, "/v1/completions", bodies)
            assert all(o and o[0] == 200 for o in out), out
            end = gw.metrics()
            assert end[routed % a.url] > after[routed % a.url] and end[routed % b.url] > after[routed % b.url]
            assert end["deepinfer_gateway_cache_aware_picks_total"] == after["deepinfer_gateway_cache_aware_picks_total"]
        finally:
            if gw:
                assert gw.stop() == 0
            a.stop()
            b.stop()
