"""`deepinfer serve` end to end on the built-in tiny V4.1 model (fresh, in a temporary
XDG_CACHE_HOME), through the official OpenAI and Anthropic SDKs on loopback.

The tiny model's weights are random, so its text is noise: these tests assert the protocol
shapes, the token accounting and seeded determinism, never the content.  The prompt-token
oracle is independent of the server: the prompt string that `deepinfer render` prints, encoded
by Hugging Face `tokenizers` with the model's own tokenizer.json (added tokens recognized), and
for raw prompts BOS + the plain encoding (Hugging Face add_special_tokens)."""
import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from server_fixture import DEEPINFER, MODEL, Serve, engine_idle, wait_until  # noqa: E402

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")
tokenizers = pytest.importorskip("tokenizers")

CONTEXT = 16384  # large enough that CONTEXT // 2 tokens take seconds even on the fast tiny model
USER = [{"role": "user", "content": "hello tiny"}]


@pytest.fixture(scope="module")
def server():
    with tempfile.TemporaryDirectory(prefix="deepinfer-serve-") as cache:
        s = Serve(cache, "--context-limit", CONTEXT)
        yield s
        assert s.stop() == 0


@pytest.fixture(scope="module")
def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def claude(server):
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def hf_tok(server):
    return tokenizers.Tokenizer.from_file(os.path.join(server.model_dir, "tokenizer.json"))


def rendered_token_count(hf_tok, conversation):
    """The oracle: `deepinfer render`'s prompt string, tokenized by Hugging Face."""
    out = subprocess.run([DEEPINFER, "render"], input=json.dumps(conversation), capture_output=True, text=True,
                         timeout=30, check=True)
    return len(hf_tok.encode(json.loads(out.stdout)["prompt"], add_special_tokens=False).ids)


def chat_render_input(messages, thinking):
    return {"encoding": "v41", "messages": messages, "tools": [], "thinking_mode": "thinking" if thinking else "chat"}


# ---- OpenAI Chat Completions -------------------------------------------------------------------

def test_chat_usage_counts_the_rendered_prompt_and_seed_repeats(oai, hf_tok):
    kw = dict(model=MODEL, messages=USER, max_tokens=12, seed=11, extra_body={"thinking": {"type": "disabled"}})
    a = oai.chat.completions.create(**kw)
    b = oai.chat.completions.create(**kw)
    assert a.object == "chat.completion" and a.choices[0].message.role == "assistant"
    assert a.choices[0].finish_reason in ("stop", "length")
    assert a.usage.prompt_tokens == rendered_token_count(hf_tok, chat_render_input(USER, False))
    assert 1 <= a.usage.completion_tokens <= 12
    assert a.usage.total_tokens == a.usage.prompt_tokens + a.usage.completion_tokens
    if a.choices[0].finish_reason == "length":
        assert a.usage.completion_tokens == 12
    assert (a.choices[0].message.content, a.usage.completion_tokens) == (b.choices[0].message.content,
                                                                         b.usage.completion_tokens)


def test_thinking_chat_counts_its_longer_prompt(oai, hf_tok):
    r = oai.chat.completions.create(model=MODEL, messages=USER, max_tokens=4, seed=1,
                                    extra_body={"thinking": {"type": "enabled"}})
    assert r.usage.prompt_tokens == rendered_token_count(hf_tok, chat_render_input(USER, True))


def test_streamed_chat_equals_the_plain_one_with_the_same_seed(oai):
    kw = dict(model=MODEL, messages=USER, max_tokens=10, seed=5)
    plain = oai.chat.completions.create(**kw)
    chunks = list(oai.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasoning = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices)
    msg = plain.choices[0].message
    assert text == (msg.content or "")
    assert reasoning == (getattr(msg, "reasoning_content", None) or "")
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == \
        [plain.choices[0].finish_reason]
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == plain.usage.prompt_tokens


# ---- tools on the tiny model ---------------------------------------------------------------------
# The tiny tokenizer has every added token the V4.1 renderer writes (｜DSML｜ in the tools block,
# tool calls and tool results; <think>, </think>; the turn tokens), so requests with tools are
# served.  The random weights never produce a real call, so these assert what is deterministic:
# status, response shapes, seeded stream = plain, and the prompt-token count, checked against the
# official `deepseek-recipe` converting the same body and rendering + tokenizing it with the tiny
# tokenizer.json (and, for chat, against `deepinfer render` + HF tokenizers as above).

PARAMS = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
          "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather by city",
                                           "parameters": PARAMS}}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
TOOL_HISTORY = [{"role": "user", "content": "weather in Paris? answer in json"},
                {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'}]


@pytest.fixture(scope="module")
def recipe_v41(server):
    dr = pytest.importorskip("deepseek_recipe")
    tok = dr.Tokenizer.from_file(os.path.join(server.model_dir, "tokenizer.json"))
    return dr, dr.DeepseekV41Encoding().with_tokenizer(tok)


def recipe_prompt_tokens(recipe_v41, protocol, body):
    """The official package's prompt for this request body, in tiny-tokenizer ids."""
    dr, enc = recipe_v41
    cls = {"chat": dr.ChatCompletionRequest, "responses": dr.ResponsesRequest, "messages": dr.MessagesRequest}[protocol]
    return len(enc.encode(cls(json.dumps(body)).convert(dr.ConversionOptions()).conversation))


def check_tool_calls(message):
    for call in message.tool_calls or []:  # only if the noise happened to parse as one
        assert call.type == "function" and call.function.name == "get_weather"
        json.loads(call.function.arguments)


@pytest.mark.parametrize("name, extra", [
    ("chat", {"thinking": {"type": "disabled"}}),
    ("thinking", {"thinking": {"type": "enabled"}}),
    ("required", {"thinking": {"type": "disabled"}, "tool_choice": "required"}),
    ("history+json", {"thinking": {"type": "disabled"}, "response_format": {"type": "json_object"}}),
    ("history thinking", {"thinking": {"type": "enabled"}, "reasoning_effort": "high"}),
])
def test_chat_with_tools_is_served_and_counts_the_rendered_prompt(oai, hf_tok, recipe_v41, name, extra):
    messages = TOOL_HISTORY if name.startswith("history") else USER
    body = dict(model=MODEL, messages=messages, tools=TOOLS, max_tokens=6, **extra)
    kw = {k: v for k, v in body.items() if k != "thinking"}
    kw.update(seed=3, extra_body={"thinking": extra["thinking"]})
    r = oai.chat.completions.create(**kw)
    assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    check_tool_calls(r.choices[0].message)
    want = recipe_prompt_tokens(recipe_v41, "chat", body)
    assert r.usage.prompt_tokens == want
    thinking = extra["thinking"]["type"] == "enabled"
    conv = chat_render_input(messages, thinking)
    conv["tools"] = TOOLS
    if name == "required":
        conv["tool_choice"] = "required"
    if "response_format" in extra:
        conv["response_format"] = extra["response_format"]
    if "reasoning_effort" in extra:
        conv["reasoning_effort"] = extra["reasoning_effort"]
    assert rendered_token_count(hf_tok, conv) == want
    assert 1 <= r.usage.completion_tokens <= 6
    chunks = list(oai.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == (r.choices[0].message.content or "")
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == \
        [r.choices[0].finish_reason]
    assert chunks[-1].usage.prompt_tokens == want
    assert chunks[-1].usage.completion_tokens == r.usage.completion_tokens


RTOOLS = [{"type": "function", "name": "get_weather", "description": "Weather by city", "parameters": PARAMS}]


def test_responses_with_tools_is_served_and_counts_the_rendered_prompt(oai, recipe_v41):
    inputs = [
        "weather in Paris?",
        [{"role": "user", "content": "weather in Paris?"},
         {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
         {"type": "function_call_output", "call_id": "call_1", "output": '{"temp": 21}'}],
    ]
    for inp in inputs:
        body = dict(model=MODEL, input=inp, tools=RTOOLS, max_output_tokens=6, reasoning={"effort": "low"})
        r = oai.responses.create(**body)
        assert r.object == "response" and r.status in ("completed", "incomplete")
        assert r.usage.input_tokens == recipe_prompt_tokens(recipe_v41, "responses", body)
        assert 1 <= r.usage.output_tokens <= 6
        assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
        for item in r.output:
            assert item.type in ("message", "reasoning", "function_call")
        events = list(oai.responses.create(**body, stream=True))
        assert events[0].type == "response.created"
        assert events[-1].type in ("response.completed", "response.incomplete")
        assert events[-1].response.usage.input_tokens == r.usage.input_tokens


def anthropic_prompt_tokens(usage):
    """Anthropic counts cache reads apart from input_tokens; the prompt is their sum."""
    return usage.input_tokens + (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0)


MTOOLS = [{"name": "get_weather", "description": "Weather by city", "input_schema": PARAMS}]


def test_messages_with_tools_is_served_and_counts_the_rendered_prompt(claude, recipe_v41):
    conversations = [
        [{"role": "user", "content": "weather in Paris?"}],
        [{"role": "user", "content": "weather in Paris?"},
         {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                            "input": {"city": "Paris"}}]},
         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "21 C"}]}],
    ]
    for messages in conversations:
        body = dict(model=MODEL, max_tokens=6, messages=messages, tools=MTOOLS)
        m = claude.messages.create(**body)
        assert m.type == "message" and m.role == "assistant"
        assert m.stop_reason in ("end_turn", "max_tokens", "tool_use")
        assert anthropic_prompt_tokens(m.usage) == recipe_prompt_tokens(recipe_v41, "messages", body)
        assert 1 <= m.usage.output_tokens <= 6
        for block in m.content:
            assert block.type in ("text", "thinking", "tool_use")
        with claude.messages.stream(**body) as s:
            final = s.get_final_message()
        # The same prompt again: the prompt cache may serve all but its last token.
        assert anthropic_prompt_tokens(final.usage) == anthropic_prompt_tokens(m.usage)
        assert final.usage.input_tokens >= 1 and 1 <= final.usage.output_tokens <= 6


# ---- OpenAI Completions --------------------------------------------------------------------------

def test_completion_prompt_is_bos_plus_plain_bpe(oai, hf_tok):
    prompt = "The quick brown fox"
    r = oai.completions.create(model=MODEL, prompt=prompt, max_tokens=6, temperature=0)
    assert r.usage.prompt_tokens == 1 + len(hf_tok.encode(prompt, add_special_tokens=False).ids)
    again = oai.completions.create(model=MODEL, prompt=prompt, max_tokens=6, temperature=0)
    assert r.choices[0].text == again.choices[0].text  # greedy
    streamed = list(oai.completions.create(model=MODEL, prompt=prompt, max_tokens=6, temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in streamed if c.choices) == r.choices[0].text


# ---- OpenAI Responses ----------------------------------------------------------------------------

def test_responses_plain_and_streamed(oai, hf_tok):
    r = oai.responses.create(model=MODEL, input="hello tiny", max_output_tokens=8, reasoning={"effort": "low"})
    assert r.object == "response" and r.status in ("completed", "incomplete")
    assert r.usage.input_tokens > 0 and 1 <= r.usage.output_tokens <= 8
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    events = list(oai.responses.create(model=MODEL, input="hello tiny", max_output_tokens=8, stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] in ("response.completed", "response.incomplete")
    assert events[-1].response.usage.output_tokens <= 8


# ---- Anthropic Messages --------------------------------------------------------------------------

def test_messages_plain_and_streamed(claude):
    kw = dict(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "hello tiny"}])
    m = claude.messages.create(**kw)
    assert m.type == "message" and m.role == "assistant"
    assert m.stop_reason in ("end_turn", "max_tokens")
    assert m.usage.input_tokens > 0 and 1 <= m.usage.output_tokens <= 8
    with claude.messages.stream(**kw) as s:
        final = s.get_final_message()
    assert anthropic_prompt_tokens(final.usage) == anthropic_prompt_tokens(m.usage)
    assert 1 <= final.usage.output_tokens <= 8


def test_anthropic_errors_are_sdk_exceptions(claude):
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.create(model="no-such-model", max_tokens=8, messages=[{"role": "user", "content": "x"}])
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.create(model=MODEL, max_tokens=CONTEXT * 2, messages=[{"role": "user", "content": "x"}])


# ---- limits, aborts, load ------------------------------------------------------------------------

def test_over_long_prompt_is_400(oai):
    with pytest.raises(openai.BadRequestError) as e:
        oai.completions.create(model=MODEL, prompt="word " * (CONTEXT + 10), max_tokens=4)
    assert f"maximum context length is {CONTEXT}" in str(e.value)
    with pytest.raises(openai.BadRequestError):  # refused before the stream starts
        list(oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "word " * CONTEXT}],
                                         max_tokens=4, stream=True))


def post_stream(port, path, body):
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: "
              f"{len(data)}\r\n\r\n".encode() + data)
    return s


def leave_a_long_request(server, stream):
    """Start a chat asking for CONTEXT // 2 tokens, close the socket while it runs, and return
    (aborted: whether the server counted an abort, seconds from close to an idle engine).  The
    tiny model's random weights can draw EOS early (~1 in 297 per token, and it generates
    thousands of tokens a second), in which case the request ends by itself first and the caller
    tries another seed."""
    aborted = server.metrics()["deepinfer_requests_aborted_total"]
    body = {"model": MODEL, "messages": USER, "max_tokens": CONTEXT // 2, "stream": stream,
            "seed": next(LONG_REQUEST_SEEDS)}
    s = post_stream(server.port, "/v1/chat/completions", body)
    if stream:
        got = b""
        while b"data:" not in got:
            piece = s.recv(4096)
            if not piece:
                break
            got += piece
        assert got.startswith(b"HTTP/1.1 200")
    else:
        wait_until(lambda: server.metrics()["deepinfer_running_requests"] >= 1, 10)
    t0 = time.time()
    s.close()
    assert wait_until(lambda: engine_idle(server.metrics), 20)
    idle_after = time.time() - t0
    m = server.metrics()
    assert m["deepinfer_requests_aborted_total"] - aborted in (0, 1)
    return m["deepinfer_requests_aborted_total"] == aborted + 1, idle_after


LONG_REQUEST_SEEDS = itertools.count(1000)


def test_disconnect_mid_stream_aborts_the_request(server):
    for _ in range(6):
        aborted, _ = leave_a_long_request(server, stream=True)
        if aborted:
            return
    pytest.fail("six long streams in a row ended before their client left")


def test_load_100_concurrent_streams_without_errors(server):
    """100 streaming chats at once for a fixed amount of work: every one completes with [DONE]."""
    results = []

    def one(i):
        try:
            s = post_stream(server.port, "/v1/chat/completions",
                            {"model": MODEL, "messages": [{"role": "user", "content": f"load {i}"}], "max_tokens": 6,
                             "seed": i, "stream": True})
            data = b""
            while True:  # Connection: close, so the stream ends at EOF
                piece = s.recv(65536)
                if not piece:
                    break
                data += piece
            s.close()
            results.append(data.startswith(b"HTTP/1.1 200") and b"data: [DONE]" in data)
        except OSError:
            results.append(False)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(results) == 100 and all(results)
    assert wait_until(lambda: server.metrics()["deepinfer_requests_in_flight"] == 0, 20)


def test_non_streaming_client_that_leaves_is_aborted_promptly(server):
    """A parked non-streaming request is aborted once its client closes the socket, long before
    its max_tokens would have run out (8192 tokens take several seconds on the tiny model)."""
    for _ in range(6):
        aborted, seconds = leave_a_long_request(server, stream=False)
        if aborted:
            assert seconds < 2.0
            return
    pytest.fail("six long requests in a row ended before their client left")
