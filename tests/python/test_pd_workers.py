"""Prefill/decode workers (issue 24, the PD contract): `deepinfer serve --role prefill` and
`--role decode` on the built-in tiny model, on loopback, driven by the test as the gateway would
drive them: POST /internal/prefill to the prefill worker and, concurrently, the client's request
with X-DI-Room to the decode worker.

The prefill worker sends the request's exact state (the prompt less its last token: tokens and
state pages), the decode worker imports it and computes the last position itself, so every PD
answer must equal a COLD single `deepinfer serve` (role both, no prompt cache): greedy and seeded,
completions and chat, prompts of several blocks and shorter than one block, and the local-prefill
fallback after a failed transfer.  Prefill workers with test-only faults in their control
messages (DEEPINFER_TEST_PD_FAULTS): a dropped DONE ends in a local prefill at the deadline, a
delayed STATE within it is still imported, duplicated messages import once."""
import json
import os
import re
import signal
import socket
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from server_fixture import DEEPINFER, MODEL, Serve, engine_idle, post_json, stop_all, wait_until  # noqa: E402

BLOCK = 256  # the engine's default block; the roles' default RAM cache uses it
FILLER = "the quick brown fox jumps over the lazy dog "


def transfer_address(srv):
    m = re.search(r"kv transfer: listening on (\S+)", open(srv.log_path).read())
    assert m, open(srv.log_path).read()
    return m.group(1)


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    started = []

    def start(name, *args, extra_env=None):
        s = Serve(str(tmp_path_factory.mktemp(name)), *args, extra_env=extra_env)
        started.append(s)
        return s

    try:
        ref = start("ref", "--prefix-cache", "off")  # every answer a cold one
        pre = start("prefill", "--role", "prefill")
        dec = start("decode", "--role", "decode")
        yield {"ref": ref, "pre": pre, "dec": dec, "start": start}
    finally:
        stop_all(started)


def envelope(room, dec, path, body, deadline_ms=20000):
    return {"room": str(room), "decode": transfer_address(dec), "path": path, "body": body,
            "deadline_ms": deadline_ms}


def post_with_headers(srv, path, body, headers, timeout=60):
    import urllib.error
    import urllib.request
    req = urllib.request.Request(srv.url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def pd_request(pre, dec, room, path, body, deadline_ms=20000):
    """The gateway's two requests, concurrently: (prefill answer, decode answer)."""
    out = {}
    t = threading.Thread(target=lambda: out.update(p=post_json(pre, "/internal/prefill",
                                                               envelope(room, dec, path, body, deadline_ms))))
    t.start()
    d = post_with_headers(dec, path, body, {"X-DI-Room": str(room), "X-DI-Room-Deadline-Ms": str(deadline_ms)})
    t.join(timeout=60)
    return out.get("p"), d


def text_of(path, answer):
    c = answer["choices"][0]
    return c["text"] if path == "/v1/completions" else (c["message"].get("reasoning_content"), c["message"]["content"])


def hit_tokens(m):
    return m.get('deepinfer_kv_cache_hit_tokens_total{tier="ram"}', 0)  # rendered once the engine reported


def chat(content, **kw):
    return ("/v1/chat/completions", dict({"messages": [{"role": "user", "content": content}], "max_tokens": 16}, **kw))


# (path, body, whole blocks the prompt must span at least (0: shorter than one block))
CASES = [
    ("/v1/completions", {"prompt": "Greedy. " + FILLER * 30, "max_tokens": 16, "temperature": 0}, 3),
    ("/v1/completions", {"prompt": "Seeded. " + FILLER * 27, "max_tokens": 16, "temperature": 0.9, "seed": 7}, 3),
    chat("Chat. " + FILLER * 28, seed=11) + (3,),
    chat("Greedy chat. " + FILLER * 9, temperature=0, thinking={"type": "disabled"}) + (1,),  # greedy: no thinking
    ("/v1/completions", {"prompt": "Short. " + FILLER * 2, "max_tokens": 16, "temperature": 0.8, "seed": 3}, 0),
    chat("Hi!", seed=5) + (0,),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_decode_from_the_transferred_state_matches_a_cold_single_server(workers, case):
    ref, pre, dec = workers["ref"], workers["pre"], workers["dec"]
    path, body, min_blocks = CASES[case]
    body = dict(body, model=MODEL)
    before = dec.metrics()
    p, d = pd_request(pre, dec, 100 + case, path, body)
    assert p[0] == 200, p
    assert d[0] == 200, d
    n = p[1]["prompt_tokens"]
    assert n // BLOCK >= min_blocks and (min_blocks > 0 or n < BLOCK) and n % BLOCK != 0, n
    assert p[1]["room"] == str(100 + case)
    assert p[1]["state_tokens"] == n - 1 and p[1]["blocks"] == 0 and p[1]["bytes"] > 0
    assert p[1]["cached_tokens"] // BLOCK == p[1]["cached_blocks"] and 0 <= p[1]["cached_tokens"] < n
    assert d[1]["usage"]["prompt_tokens"] == n
    assert d[1]["usage"]["prompt_tokens_details"]["cached_tokens"] == n - 1  # only the last position computed
    after = dec.metrics()
    assert after['deepinfer_pd_rooms_total{state="done"}'] == before['deepinfer_pd_rooms_total{state="done"}'] + 1
    assert after["deepinfer_pd_states_received_total"] == before["deepinfer_pd_states_received_total"] + 1
    assert after["deepinfer_pd_states_imported_total"] == before["deepinfer_pd_states_imported_total"] + 1
    assert after["deepinfer_pd_state_import_failures_total"] == before["deepinfer_pd_state_import_failures_total"]
    assert after["deepinfer_pd_local_prefills_total"] == before["deepinfer_pd_local_prefills_total"]
    assert after["deepinfer_pd_bytes_received_total"] == before["deepinfer_pd_bytes_received_total"] + p[1]["bytes"]
    assert hit_tokens(after) == hit_tokens(before)  # nothing restored from KV blocks (a bounded replay)
    s, cold = post_json(ref, path, body)
    assert s == 200
    assert cold["usage"]["prompt_tokens_details"]["cached_tokens"] == 0 and cold["usage"]["prompt_tokens"] == n
    assert text_of(path, d[1]) == text_of(path, cold)
    assert d[1]["usage"]["completion_tokens"] == cold["usage"]["completion_tokens"]


def test_a_long_prefill_streams_its_state_and_outlives_an_idle_deadline(workers):
    """A prompt whose prefill takes several times the room deadline: the deadline is an idle one
    on both sides (each chunk's progress restarts it), so the state is imported, never prefilled
    twice; its final pages went out while the prefill ran (streamed_bytes), and the answer is the
    cold one."""
    ref, pre, dec = workers["ref"], workers["pre"], workers["dec"]
    deadline_ms = 2000  # a chunk of 512 tokens takes well under a second here, even on a loaded machine
    body = {"model": MODEL, "prompt": "Long. " + FILLER * 500, "max_tokens": 8, "temperature": 0}
    before = dec.metrics()
    p, d = pd_request(pre, dec, 7100, "/v1/completions", body, deadline_ms)
    assert p[0] == 200, p
    assert d[0] == 200, d
    assert p[1]["prefill_s"] > 1.5 * deadline_ms / 1000, p[1]  # else this test proves nothing
    assert p[1]["streamed_bytes"] > p[1]["bytes"] // 2, p[1]
    assert p[1]["transfer_s"] < p[1]["prefill_s"] / 4, p[1]  # what is left at the end is small
    after = dec.metrics()
    assert after["deepinfer_pd_states_imported_total"] == before["deepinfer_pd_states_imported_total"] + 1
    assert after["deepinfer_pd_local_prefills_total"] == before["deepinfer_pd_local_prefills_total"]
    assert after["deepinfer_pd_bytes_received_total"] == before["deepinfer_pd_bytes_received_total"] + p[1]["bytes"]
    assert d[1]["usage"]["prompt_tokens_details"]["cached_tokens"] == p[1]["prompt_tokens"] - 1
    s, cold = post_json(ref, "/v1/completions", body)
    assert s == 200 and d[1]["choices"][0]["text"] == cold["choices"][0]["text"]


def test_a_state_for_other_tokens_is_not_used(workers):
    """A room whose state covers other tokens (a gateway that sent the prefill another body): the
    state is imported but the request does not extend it, so it prefills from 0, exactly."""
    ref, pre, dec = workers["ref"], workers["pre"], workers["dec"]
    path = "/v1/completions"
    body = {"model": MODEL, "prompt": "Mine. " + FILLER * 12, "max_tokens": 12, "temperature": 0}
    other = dict(body, prompt="Other. " + FILLER * 12)
    before = dec.metrics()
    out = {}
    t = threading.Thread(target=lambda: out.update(p=post_json(pre, "/internal/prefill", envelope(606, dec, path, other))))
    t.start()
    d = post_with_headers(dec, path, body, {"X-DI-Room": "606", "X-DI-Room-Deadline-Ms": "20000"})
    t.join(timeout=60)
    assert out["p"][0] == 200 and d[0] == 200, (out, d)
    assert d[1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert dec.metrics()["deepinfer_pd_states_imported_total"] == before["deepinfer_pd_states_imported_total"] + 1
    s, cold = post_json(ref, path, body)
    assert s == 200 and d[1]["choices"][0]["text"] == cold["choices"][0]["text"]


def test_prefill_killed_mid_transfer_decode_prefills_locally(workers):
    ref, dec = workers["ref"], workers["dec"]
    victim = workers["start"]("victim", "--role", "prefill")
    path = "/v1/completions"
    body = {"model": MODEL, "prompt": "Killed. " + FILLER * 110, "max_tokens": 12, "temperature": 0}
    s, cold = post_json(ref, path, body)  # the single server's cold answer, before any hit
    assert s == 200
    before = dec.metrics()
    out = {}

    def prefill():
        try:
            out["p"] = post_json(victim, "/internal/prefill", envelope(777, dec, path, body), timeout=30)
        except OSError as e:  # killed: no answer
            out["p"] = e

    def kill_when_connected():  # the victim registered with the decode worker and is prefilling
        wait_until(lambda: dec.metrics()["deepinfer_pd_transfer_connections"] == 1, timeout=10)
        out["killed"] = time.time()
        os.kill(victim.proc.pid, signal.SIGKILL)

    t = threading.Thread(target=prefill, daemon=True)
    t.start()
    killer = threading.Thread(target=kill_when_connected)
    killer.start()
    d = post_with_headers(dec, path, body, {"X-DI-Room": "777", "X-DI-Room-Deadline-Ms": "30000"})
    killer.join()
    assert d[0] == 200, d
    assert time.time() - out["killed"] < 15  # the broken connection aborted the room, not the 30 s deadline
    assert victim.proc.wait(timeout=10) == -signal.SIGKILL
    t.join(timeout=10)
    assert isinstance(out["p"], OSError)  # it died before answering
    after = dec.metrics()
    assert after["deepinfer_pd_local_prefills_total"] == before["deepinfer_pd_local_prefills_total"] + 1
    assert after['deepinfer_pd_rooms_total{state="done"}'] == before['deepinfer_pd_rooms_total{state="done"}']
    assert after['deepinfer_pd_rooms_total{state="aborted"}'] == before['deepinfer_pd_rooms_total{state="aborted"}'] + 1
    assert wait_until(lambda: dec.metrics()["deepinfer_pd_transfer_connections"] == 0)
    assert d[1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 0  # partial blocks were dropped
    assert d[1]["choices"][0]["text"] == cold["choices"][0]["text"]
    assert wait_until(lambda: dec.metrics()["deepinfer_pd_pinned_blocks"] == 0)


def raw_post(srv, path, body, headers):
    """Send a POST and return the open socket (the test closes it: a client that leaves)."""
    data = json.dumps(body).encode()
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{head}"
                 f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return sock


def test_client_leaving_the_decode_frees_the_room(workers):
    pre, dec = workers["pre"], workers["dec"]
    path = "/v1/completions"
    body = {"model": MODEL, "prompt": "Leaving. " + FILLER * 30, "max_tokens": 8, "temperature": 0}
    before = dec.metrics()
    sock = raw_post(dec, path, body, {"X-DI-Room": "4242", "X-DI-Room-Deadline-Ms": "30000"})
    assert wait_until(lambda: dec.metrics()["deepinfer_pd_rooms_waiting"] == 1)
    sock.close()
    t0 = time.time()
    assert wait_until(lambda: dec.metrics()["deepinfer_pd_rooms_waiting"] == 0, timeout=5)
    assert time.time() - t0 < 2  # noticed at the next 50 ms poll, not at the 30 s deadline
    # the prefill for the abandoned room arrives late: its blocks are not kept
    s, p = post_json(pre, "/internal/prefill", envelope(4242, dec, path, body))
    assert s == 200 and p["state_tokens"] > 0
    time.sleep(0.3)
    m = dec.metrics()
    assert m["deepinfer_pd_pinned_blocks"] == 0
    assert m["deepinfer_pd_bytes_received_total"] == before["deepinfer_pd_bytes_received_total"]
    assert m['deepinfer_pd_rooms_total{state="aborted"}'] == before['deepinfer_pd_rooms_total{state="aborted"}'] + 1
    assert wait_until(lambda: engine_idle(dec.metrics))


def test_client_leaving_the_prefill_aborts_the_room(workers):
    pre, dec = workers["pre"], workers["dec"]
    path = "/v1/completions"
    body = {"model": MODEL, "prompt": "Prefill client leaves. " + FILLER * 110, "max_tokens": 4, "temperature": 0}
    before = dec.metrics()
    out = {}
    t = threading.Thread(target=lambda: out.update(
        d=post_with_headers(dec, path, body, {"X-DI-Room": "5151", "X-DI-Room-Deadline-Ms": "30000"})))
    t.start()
    sock = raw_post(pre, "/internal/prefill", envelope(5151, dec, path, body, 30000), {})
    # connected and claimed the room: the prefill of ~4,800 tokens is running
    assert wait_until(lambda: dec.metrics()["deepinfer_pd_transfer_connections"] == 1)
    sock.close()  # the prefill is aborted and ABORT(room) reaches the decode worker
    t.join(timeout=40)
    assert out["d"][0] == 200, out
    m = dec.metrics()
    assert m['deepinfer_pd_rooms_total{state="aborted"}'] == before['deepinfer_pd_rooms_total{state="aborted"}'] + 1
    assert m["deepinfer_pd_local_prefills_total"] == before["deepinfer_pd_local_prefills_total"] + 1
    assert wait_until(lambda: engine_idle(pre.metrics), timeout=10)  # the prefill's request was aborted
    assert wait_until(lambda: dec.metrics()["deepinfer_pd_pinned_blocks"] == 0)


def test_bad_envelopes_and_headers_are_refused(workers):
    pre, dec, ref = workers["pre"], workers["dec"], workers["ref"]
    body = {"model": MODEL, "prompt": "x", "max_tokens": 1}
    s, e = post_json(pre, "/internal/prefill", {"room": "1", "decode": "nowhere", "path": "/v1/completions",
                                                 "body": body})
    assert s == 400 and "HOST:PORT" in e["error"]["message"]
    s, e = post_json(pre, "/internal/prefill", {"room": "1", "decode": "127.0.0.1:1", "path": "/v1/completions",
                                                 "body": body})
    assert s == 502 and "127.0.0.1:1" in e["error"]["message"]  # nobody listens there
    s, e = post_json(pre, "/internal/prefill", {"room": "-1", "decode": "127.0.0.1:1", "path": "/v1/x", "body": body})
    assert s == 400 and "room" in e["error"]["message"]
    s, e = post_json(pre, "/internal/prefill", {"room": str(2**64), "decode": "127.0.0.1:1", "path": "/v1/completions",
                                                 "body": body})
    assert s == 400 and "room" in e["error"]["message"]  # past u64: refused, not taken as 2^64 - 1
    s, e = post_json(pre, "/internal/prefill", dict(envelope(1, dec, "/v1/completions", body), extra=1))
    assert s == 400 and "extra" in e["error"]["message"]
    s, e = post_json(dec, "/internal/prefill", envelope(1, dec, "/v1/completions", body))
    assert s == 404 and "--role prefill" in e["error"]["message"]
    s, e = post_with_headers(dec, "/v1/completions", body, {"X-DI-Room": "abc"})
    assert s == 400 and "X-DI-Room" in e["error"]["message"]
    s, e = post_with_headers(ref, "/v1/completions", body, {"X-DI-Room": "5"})
    assert s == 400 and "--role decode" in e["error"]["message"]


# (faults, the decode's deadline in ms, whether the state is imported)
FAULTS = [("drop:DONE", 2000, False), ("delay:STATE:500ms", 20000, True),
          ("dup:BEGIN,dup:STATE,dup:DONE", 20000, True)]


@pytest.mark.parametrize("case", range(len(FAULTS)))
def test_faulty_control_messages_still_give_the_cold_answer(workers, case):
    faults, deadline_ms, imported = FAULTS[case]
    ref, dec = workers["ref"], workers["dec"]
    pre = workers["start"](f"faulty{case}", "--role", "prefill", extra_env={"DEEPINFER_TEST_PD_FAULTS": faults})
    path = "/v1/completions"
    body = {"model": MODEL, "prompt": f"Fault {case}. " + FILLER * 20, "max_tokens": 12, "temperature": 0.7, "seed": 4}
    before = dec.metrics()
    t0 = time.time()
    p, d = pd_request(pre, dec, 8800 + case, path, body, deadline_ms)
    took = time.time() - t0
    assert p[0] == 200, p  # the sender believes every message went out
    assert d[0] == 200, d
    s, cold = post_json(ref, path, body)
    assert s == 200 and d[1]["choices"][0]["text"] == cold["choices"][0]["text"]
    after = dec.metrics()
    done = 'deepinfer_pd_rooms_total{state="done"}'
    assert after[done] == before[done] + imported
    assert after["deepinfer_pd_states_received_total"] == before["deepinfer_pd_states_received_total"] + 1
    assert after["deepinfer_pd_states_imported_total"] == before["deepinfer_pd_states_imported_total"] + imported
    assert after["deepinfer_pd_local_prefills_total"] == before["deepinfer_pd_local_prefills_total"] + (not imported)
    assert (d[1]["usage"]["prompt_tokens_details"]["cached_tokens"] > 0) == imported
    # a duplicated chunk is stored once
    assert after["deepinfer_pd_bytes_received_total"] == before["deepinfer_pd_bytes_received_total"] + p[1]["bytes"]
    aborted = 'deepinfer_pd_rooms_total{state="aborted"}'
    assert after[aborted] == before[aborted] + (not imported)
    # without DONE the room ends when the sender closes its connection (or at the deadline: the
    # unit test test_kv_transfer keeps the sender connected), then the decode prefills locally
    assert took < deadline_ms / 1000 + 15
    assert wait_until(lambda: dec.metrics()["deepinfer_pd_pinned_blocks"] == 0)
    assert wait_until(lambda: dec.metrics()["deepinfer_pd_rooms_waiting"] == 0)
    assert wait_until(lambda: engine_idle(dec.metrics)) and wait_until(lambda: engine_idle(pre.metrics))
    pre.stop()


def test_a_malformed_fault_list_is_refused_at_startup():
    import subprocess
    env = dict(os.environ, DEEPINFER_TEST_PD_FAULTS="drop:BLOCK")
    r = subprocess.run([DEEPINFER, "serve", "--port", "0"], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r
    assert "DEEPINFER_TEST_PD_FAULTS" in r.stderr and "unknown message 'BLOCK'" in r.stderr, r.stderr
