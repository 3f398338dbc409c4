"""The HTTP server over the real engine adapter (serve/backend_engine.h) and the engine's mock
model (byte-level text from a hash: deterministic, not a language model), through the official
OpenAI SDK: greedy output is reproducible and identical streamed or not, limits and usage are
reported, over-long requests get 400, and a disconnect storm leaves no request in the engine."""
import json
import os
import socket
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from server_fixture import MODEL, Harness, engine_idle, wait_until  # noqa: E402

openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def server():
    h = Harness("--backend", "mock-engine", "--context", 4096)
    yield h
    status, _ = h.stop()
    assert status == 0


@pytest.fixture(scope="module")
def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=30)


def test_greedy_completion_is_reproducible_and_streams_the_same(oai):
    a = oai.completions.create(model=MODEL, prompt="hello engine", max_tokens=24, temperature=0)
    b = oai.completions.create(model=MODEL, prompt="hello engine", max_tokens=24, temperature=0)
    assert a.choices[0].text == b.choices[0].text and a.choices[0].text
    chunks = list(oai.completions.create(model=MODEL, prompt="hello engine", max_tokens=24, temperature=0,
                                         stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == a.choices[0].text
    usage = chunks[-1].usage
    assert usage.completion_tokens == a.usage.completion_tokens <= 24
    assert usage.prompt_tokens == a.usage.prompt_tokens == len("hello engine")  # byte-level mock tokenizer
    if a.choices[0].finish_reason == "length":
        assert a.usage.completion_tokens == 24


def test_seeded_sampling_is_reproducible(oai):
    a = oai.completions.create(model=MODEL, prompt="x", max_tokens=16, temperature=1.0, seed=5)
    b = oai.completions.create(model=MODEL, prompt="x", max_tokens=16, temperature=1.0, seed=5)
    assert a.choices[0].text == b.choices[0].text


def test_over_long_request_is_400(oai):
    with pytest.raises(openai.BadRequestError) as e:
        oai.completions.create(model=MODEL, prompt="y" * 5000, max_tokens=10)
    assert "maximum context length is 4096" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:  # the stream is refused before it starts
        list(oai.completions.create(model=MODEL, prompt="y", max_tokens=5000, stream=True))
    assert "maximum context length" in str(e.value)


def test_chat_states_what_the_engine_lacks_until_it_renders(oai):
    """The engine takes conversations as chat_json once it has the prompt renderer; until then
    the refusal names the cause (never a silent wrong prompt)."""
    try:
        r = oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=8)
    except openai.BadRequestError as e:
        assert "prompt renderer" in str(e)
    else:
        assert r.choices[0].finish_reason in ("stop", "length", "tool_calls") and r.usage.prompt_tokens > 0


def test_disconnect_storm_frees_engine_requests(server):
    body = json.dumps({"model": MODEL, "prompt": "z", "max_tokens": 3000, "stream": True}).encode()
    socks = []
    for _ in range(30):
        s = socket.create_connection(("127.0.0.1", server.port))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                  str(len(body)).encode() + b"\r\n\r\n" + body)
        socks.append(s)
    for s in socks:
        assert s.recv(64).startswith(b"HTTP/1.1 200")
        s.close()
    assert wait_until(lambda: engine_idle(server.metrics), 20)
    m = server.metrics()
    assert m["deepinfer_requests_aborted_total"] >= 1


def test_completion_stop_sequence_cuts_the_text(oai):
    full = oai.completions.create(model=MODEL, prompt="stop test", max_tokens=24, temperature=0).choices[0].text
    stop = full[5:8]  # a piece from the middle of the greedy text
    r = oai.completions.create(model=MODEL, prompt="stop test", max_tokens=24, temperature=0, stop=[stop])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == full[:full.index(stop)]
