"""The HTTP server against the official OpenAI and Anthropic Python SDKs as real clients
(server over the deterministic test backend, see tests/support/fake_backend.h)."""
import json
import os
import socket
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from server_fixture import MODEL, Harness, engine_idle, wait_until  # noqa: E402

openai = pytest.importorskip("openai")  # required: tools/install-deps.sh installs it
anthropic = pytest.importorskip("anthropic")

KEY = "test-key-123"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]


@pytest.fixture(scope="module")
def server():
    h = Harness("--api-key", KEY, "--step-us", 200)
    yield h
    h.stop()


@pytest.fixture(scope="module")
def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=20)


@pytest.fixture(scope="module")
def ant(server):
    return anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0, timeout=20)


def test_chat_plain_thinking_default(oai):
    r = oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hello world"}])
    msg = r.choices[0].message
    assert msg.content == "Echo: hello world"
    assert msg.model_extra["reasoning_content"] == "Thinking about: hello world"
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens == 7  # 4 reasoning words + 3 answer words, one token each
    assert r.usage.total_tokens == r.usage.prompt_tokens + 7
    assert r.usage.model_extra["prompt_cache_miss_tokens"] == r.usage.prompt_tokens - r.usage.model_extra["prompt_cache_hit_tokens"]


def test_chat_prompt_cache_hits_reported(oai):
    msgs = [{"role": "user", "content": "cache me please"}]
    first = oai.chat.completions.create(model=MODEL, messages=msgs)
    second = oai.chat.completions.create(model=MODEL, messages=msgs)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert second.usage.prompt_tokens_details.cached_tokens == second.usage.prompt_tokens // 2 > 0


def test_chat_stream_non_thinking_with_usage(oai):
    chunks = list(oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "a b c"}],
                                              stream=True, stream_options={"include_usage": True},
                                              extra_body={"thinking": {"type": "disabled"}}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == "Echo: a b c"
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert chunks[-1].usage.completion_tokens == 4
    assert all(c.usage is None for c in chunks[:-1])


def test_chat_stream_reasoning_deltas(oai):
    chunks = list(oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "why"}], stream=True))
    reasoning = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for c in chunks)
    content = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert reasoning == "Thinking about: why"
    assert content == "Echo: why"


def test_chat_tools_plain_and_stream(oai):
    msgs = [{"role": "user", "content": "what is the weather in Paris?"}]
    r = oai.chat.completions.create(model=MODEL, messages=msgs, tools=TOOLS, reasoning_effort="none")
    call = r.choices[0].message.tool_calls[0]
    assert r.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    assert call.id.startswith("call_")
    stream = list(oai.chat.completions.create(model=MODEL, messages=msgs, tools=TOOLS, stream=True))
    deltas = [tc for c in stream for tc in (c.choices[0].delta.tool_calls or [])]
    assert deltas[0].function.name == "get_weather" and deltas[0].id
    assert json.loads("".join(d.function.arguments or "" for d in deltas)) == {"city": "Paris"}
    assert stream[-1].choices[0].finish_reason == "tool_calls"


def test_chat_tool_result_round_trip(oai):
    msgs = [{"role": "user", "content": "weather?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    r = oai.chat.completions.create(model=MODEL, messages=msgs, tools=TOOLS, reasoning_effort="none")
    assert r.choices[0].message.content == "Echo: sunny"


def test_chat_max_tokens_and_stop(oai):
    r = oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "count to 50"}],
                                    max_tokens=5, reasoning_effort="none")
    assert r.choices[0].finish_reason == "length" and r.choices[0].message.content == "1 2 3 4 5"
    r = oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "count to 50"}],
                                    stop=[" 7"], reasoning_effort="none")
    assert r.choices[0].finish_reason == "stop" and r.choices[0].message.content == "1 2 3 4 5 6"


def test_completions(oai):
    r = oai.completions.create(model=MODEL, prompt="once upon a time", max_tokens=3)
    assert r.choices[0].text == "once upon a" and r.choices[0].finish_reason == "length"
    text = "".join(c.choices[0].text for c in oai.completions.create(model=MODEL, prompt="x y", stream=True))
    assert text == "x y"


def test_models(oai):
    assert [m.id for m in oai.models.list().data] == [MODEL]


def test_responses_plain_and_stream(oai):
    r = oai.responses.create(model=MODEL, input="hi there", instructions="be brief")
    assert r.status == "completed"
    assert r.output_text == "Echo: hi there"
    assert [o.type for o in r.output] == ["reasoning", "message"]
    assert r.usage.output_tokens == 7
    events = list(oai.responses.create(model=MODEL, input="hi", stream=True))
    types = [e.type for e in events]
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Echo: hi"
    assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") == "Thinking about: hi"
    assert events[-1].response.output_text == "Echo: hi"


def test_responses_tools_and_incomplete(oai):
    tools = [{"type": "function", "name": "get_weather", "parameters": TOOLS[0]["function"]["parameters"]}]
    r = oai.responses.create(model=MODEL, input="weather in Paris?", tools=tools, reasoning={"effort": "none"})
    calls = [o for o in r.output if o.type == "function_call"]
    assert calls and calls[0].name == "get_weather" and json.loads(calls[0].arguments) == {"city": "Paris"}
    r = oai.responses.create(model=MODEL, input="count to 40", max_output_tokens=3, reasoning={"effort": "none"})
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"


def test_messages_plain_stream_tools(ant):
    m = ant.messages.create(model=MODEL, max_tokens=100, messages=[{"role": "user", "content": "hey"}])
    assert [b.type for b in m.content] == ["thinking", "text"]
    assert m.content[1].text == "Echo: hey" and m.stop_reason == "end_turn"
    with ant.messages.stream(model=MODEL, max_tokens=100, messages=[{"role": "user", "content": "yo"}],
                             thinking={"type": "disabled"}) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == "Echo: yo" and final.stop_reason == "end_turn"
    tools = [{"name": "get_weather", "description": "w", "input_schema": TOOLS[0]["function"]["parameters"]}]
    m = ant.messages.create(model=MODEL, max_tokens=100, tools=tools, thinking={"type": "disabled"},
                            messages=[{"role": "user", "content": "weather in Paris?"}])
    assert m.stop_reason == "tool_use" and m.content[-1].input == {"city": "Paris"}
    with ant.messages.stream(model=MODEL, max_tokens=100, tools=tools,
                             messages=[{"role": "user", "content": "weather in Paris?"}]) as s:
        final = s.get_final_message()
    assert final.content[-1].type == "tool_use" and final.content[-1].input == {"city": "Paris"}
    m = ant.messages.create(model=MODEL, max_tokens=100, stop_sequences=[" 4"], thinking={"type": "disabled"},
                            messages=[{"role": "user", "content": "count to 9"}])
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == " 4" and m.content[0].text == "1 2 3"


def test_errors_as_sdk_exceptions(server, oai, ant):
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], temperature=5)
    assert "temperature" in str(e.value)
    with pytest.raises(openai.BadRequestError):
        oai.chat.completions.create(model=MODEL, messages=[])
    with pytest.raises(openai.NotFoundError) as e:
        oai.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    assert "no-such-model" in str(e.value)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0).models.list()
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=server.url, api_key="wrong", max_retries=0).messages.create(
            model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "x"}])
    with pytest.raises(anthropic.BadRequestError) as e:
        ant.messages.create(model=MODEL, max_tokens=5, messages=[{"role": "assistant", "content": [{"type": "bogus"}]}])
    assert "bogus" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:  # over-long prompt for the 8192-token context
        oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x " * 20000}])
    assert "context length" in str(e.value)


def raw(server, path, body, headers=None):
    """One raw HTTP/1.1 request; returns (status, headers, body text)."""
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    h = {"Authorization": "Bearer " + KEY, "Content-Type": "application/json"}
    h.update(headers or {})
    conn.request("POST", path, body=body, headers=h)
    r = conn.getresponse()
    data = r.read().decode()
    conn.close()
    return r.status, dict(r.getheaders()), data


@pytest.mark.parametrize("path,body,needle", [
    ("/v1/chat/completions", b"{not json", "Invalid JSON"),
    ("/v1/chat/completions", b"[1,2]", "expected a JSON object"),
    ("/v1/chat/completions", json.dumps({"model": MODEL, "messages": "hi"}).encode(), "messages"),
    ("/v1/chat/completions", json.dumps({"model": MODEL, "messages": [{"role": "user", "content": 5}]}).encode(), "content"),
    ("/v1/chat/completions", json.dumps({"model": 7, "messages": []}).encode(), "model"),
    ("/v1/responses", json.dumps({"model": MODEL, "input": 3}).encode(), "input"),
    ("/v1/messages", json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x"}]}).encode(), "max_tokens"),
    ("/v1/chat/completions", b"\xff\xfe\x00", "Invalid JSON"),
])
def test_malformed_requests_get_protocol_errors(server, path, body, needle):
    status, _, text = raw(server, path, body)
    assert status == 400
    err = json.loads(text)
    if path == "/v1/messages":
        assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
        assert needle in err["error"]["message"]
    else:
        assert err["error"]["type"] == "invalid_request_error" and needle in err["error"]["message"]


def test_too_large_body_is_413(server):
    status, _, text = raw(server, "/v1/chat/completions", b"{" + b" " * (9 << 20) + b"}")
    assert status == 413 and "too large" in json.loads(text)["error"]["message"]


def test_unknown_path_and_method(server):
    status, _, _ = raw(server, "/v1/nope", b"{}")
    assert status == 404
    status, _, _ = raw(server, "/v1/models", b"{}")
    assert status == 405


def test_disconnect_mid_stream_aborts(server):
    before = server.metrics(KEY)
    body = json.dumps({"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "count to 100000"}],
                       "thinking": {"type": "disabled"}}).encode()
    socks = []
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", server.port))
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
                  b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
        socks.append(s)
    for s in socks:
        s.close()
    assert wait_until(lambda: engine_idle(lambda: server.metrics(KEY)), 15)
    after = server.metrics(KEY)
    assert after["deepinfer_requests_aborted_total"] - before["deepinfer_requests_aborted_total"] == 20
