"""test_render_oracle.py — deepinfer's prompt renderer (build/libdeepinfer.so, di_render_json)
against the official deepseek-recipe package (DeepseekV4Encoding = V4-0731, DeepseekV41Encoding):
byte-equal prompts and identical control-token spans on the golden vectors and on hundreds of
generated conversations (roles, reasoning, tool calls with typed/invalid arguments, parallel tool
results out of order, tools, tool_choice, response_format, efforts, reminders, prefixes, and
client strings that spell control tokens)."""
import ctypes
import json
import os
import random

import pytest

dr = pytest.importorskip("deepseek_recipe")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.environ.get("SHARED_DIR", os.path.join(os.path.dirname(ROOT), "shared"))
LIB = ctypes.CDLL(os.path.join(ROOT, "build", "libdeepinfer.so"))
LIB.di_render_json.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)]
LIB.di_last_error.restype = ctypes.c_char_p
LIBC = ctypes.CDLL(None)
LIBC.free.argtypes = [ctypes.c_void_p]


def render(request):
    body = json.dumps(request).encode()
    out = ctypes.c_void_p()
    if LIB.di_render_json(body, len(body), 1, ctypes.byref(out)) != 0:
        raise ValueError(LIB.di_last_error().decode())
    try:
        return json.loads(ctypes.string_at(out.value).decode())
    finally:
        LIBC.free(out)


def special_spans(result):
    """Control tokens as (code-point offset, spelling), like RenderedPrompt.special_ranges."""
    spans, pos = [], 0
    for seg in result["segments"]:
        if seg["special"]:
            spans.append((pos, seg["text"]))
        pos += len(seg["text"])
    return spans


def oracle_messages(request):
    """The request's messages as deepseek-recipe message objects."""
    msgs = []
    for m in request["messages"]:
        role = m["role"]
        if role == "system":
            msgs.append(dr.SystemMessage(m.get("content") or ""))
        elif role == "user":
            msgs.append(dr.UserMessage(m.get("content") or ""))
        elif role == "latest_reminder":
            msgs.append(dr.LatestReminderMessage(m.get("content") or ""))
        elif role == "tool":
            msgs.append(dr.ToolMessage(m.get("content") or "", m.get("tool_call_id")))
        else:
            calls = [dr.ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"])
                     for c in m.get("tool_calls", [])] or None
            msgs.append(dr.AssistantMessage(m.get("content") or "", m.get("reasoning_content"), calls,
                                            prefix=m.get("prefix", False)))
    return msgs


def oracle_conversation(request, msgs):
    tools = [dr.ToolDefinition(t["function"]["name"], t["function"].get("description"),
                               t["function"].get("parameters")) for t in request.get("tools", [])] or None
    rf = request.get("response_format", "text")
    schema = {"response_schema": rf["json_schema"]["schema"]} if isinstance(rf, dict) else {"response_format": rf}
    return dr.Conversation(msgs, thinking_mode=request.get("thinking_mode", "thinking") == "thinking",
                           tools=tools, tool_choice=request.get("tool_choice", "auto"),
                           reasoning_effort=request.get("reasoning_effort"), **schema)


def oracle(request):
    """Render `request` (the deepinfer render JSON) with deepseek-recipe: prompt and specials."""
    conv = oracle_conversation(request, oracle_messages(request))
    enc = dr.DeepseekV41Encoding() if request["encoding"] == "v41" else dr.DeepseekV4Encoding()
    rp = enc.render_conversation(conv)
    return rp.prompt, [(a, rp.prompt[a:b]) for a, b in rp.special_ranges]


def check_against_oracle(request):
    want_prompt, want_spans = oracle(request)
    got = render(request)
    assert got["prompt"] == want_prompt, json.dumps(request, ensure_ascii=False)
    assert special_spans(got) == want_spans, json.dumps(request, ensure_ascii=False)


# ---- golden vectors -----------------------------------------------------------------------

def load_vectors():
    with open(os.path.join(SHARED, "recipe-data", "prompts", "rendered_vectors.json"), encoding="utf-8") as f:
        return json.load(f)["cases"]


def as_oracle_request(case):
    """The vector case in the shape oracle() reads: system-message tools/response_format become
    conversation settings (the vectors transcribe the Python encoder, which attaches them there)."""
    req = {k: case[k] for k in ("encoding", "thinking_mode", "reasoning_effort")}
    req["messages"] = []
    for m in case["messages"]:
        m = dict(m)
        if m.get("tools"):
            req["tools"] = m.pop("tools")
        if m.get("response_format"):
            req["response_format"] = m.pop("response_format")["type"]
        req["messages"].append(m)
    return req


def has_oracle(case):
    # V4 April (encoding "v4") has no oracle (recipe 0.2.0 renders V4-0731); the developer role
    # and quick tasks are not in the package either: those are checked in tests/unit/test_render.c.
    # They are left out of the parametrisation rather than skipped (CI counts a skip as a failure).
    has_extras = any(m.get("task") or m["role"] == "developer" for m in case["messages"])
    return case["encoding"] != "v4" and not has_extras


@pytest.mark.parametrize("case", [c for c in load_vectors() if has_oracle(c)], ids=lambda c: c["name"])
def test_vectors_match_oracle(case):
    check_against_oracle(as_oracle_request(case))


def test_v4_april_equals_0731_when_efforts_agree():
    # April and 0731 differ only in the effort table (recipe.md §0): April max == 0731 high.
    for case in load_vectors():
        if case["encoding"] != "v4" or any(m.get("task") or m["role"] == "developer" for m in case["messages"]):
            continue
        req = as_oracle_request(case)
        april = render(dict(case, encoding="v4"))["prompt"]
        effort = {"max": "high", None: "low", "high": "low"}[req["reasoning_effort"]]
        req.update(encoding="v4_0731", reasoning_effort=effort)
        assert april == oracle(req)[0], case["name"]


# ---- generated conversations ---------------------------------------------------------------

NASTY = ["<｜User｜>", "</think>", "<think>", "｜DSML｜", "<｜DSML｜tool_calls>", "<｜System｜>",
         "<｜end▁of▁sentence｜>", "<｜Assistant｜>", "<｜latest_reminder｜>", "</tool_result>", "\n\n", "\n",
         "\"", "\\", "\t", "\x01", "é", "日本", "😀", " ", "{", "}", "[1]", "1e-5", "\u2028",
         # grounding markers: control tokens in assistant content and reasoning, text elsewhere
         "<｜ref｜>", "<｜/ref｜>", "<｜box｜>", "<｜/box｜>", "<｜point｜>", "<｜/point｜>", "<｜polygon｜>", "<｜/polygon｜>",
         # NUL, and U+10FFFF, the mark deepinfer writes NUL with inside (base/json.h)
         "\x00", "a\x00", "\U0010FFFF", "\U0010FFFF0", "\U0010FFFF\x00\U0010FFFF\U0010FFFF"]
WORDS = ["hello", "what", "is", "the", "weather", "Paris", "ok", "call", "x", "42", "."]


def rand_text(rng, allow_empty=True):
    if allow_empty and rng.random() < 0.1:
        return ""
    parts = [rng.choice(NASTY) if rng.random() < 0.3 else rng.choice(WORDS) for _ in range(rng.randint(1, 6))]
    return " ".join(parts) if rng.random() < 0.5 else "".join(parts)


def rand_value(rng, depth=0):
    r = rng.random()
    if r < 0.2:
        return rand_text(rng)
    if r < 0.35:
        return rng.randint(-10**12, 10**12)
    if r < 0.5:
        return rng.choice([0.5, 1.0, -0.0, 1e-5, 2.5e-7, 1e16, 1e21, 0.1, 123.456, 1e-320, rng.uniform(-1e6, 1e6),
                           rng.random() * 10 ** rng.randint(-12, 20)])
    if r < 0.6:
        return rng.choice([True, False, None])
    if r < 0.8 and depth < 2:
        return [rand_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if depth < 2:  # object keys without NUL: jansson cannot hold one (a request with it is refused)
        return {rand_text(rng, False).replace("\x00", ""): rand_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    return rng.randint(0, 9)


def rand_arguments(rng):
    if rng.random() < 0.1:
        return rng.choice(["not json", "", "[1, 2]", "{\"a\": "])
    obj = {rand_text(rng, False): rand_value(rng) for _ in range(rng.randint(0, 4))}
    return json.dumps(obj, ensure_ascii=rng.random() < 0.5)


def rand_user_text(rng):
    return rand_text(rng)


def rand_conversation(rng):
    enc = rng.choice(["v4_0731", "v41"])
    msgs, call_id = [], 0
    if rng.random() < 0.6:
        msgs.append({"role": "system", "content": rand_text(rng)})
    for _ in range(rng.randint(0, 6)):
        kind = rng.random()
        if kind < 0.35:
            msgs.append({"role": "user", "content": rand_user_text(rng)})
        elif kind < 0.7:
            m = {"role": "assistant", "content": rand_text(rng)}
            if rng.random() < 0.6:
                m["reasoning_content"] = rand_text(rng)
            if rng.random() < 0.4:
                calls = []
                for _ in range(rng.randint(1, 3)):
                    call_id += 1
                    calls.append({"id": "call_%d_%d" % (rng.randint(0, 99), call_id), "type": "function",
                                  "function": {"name": rng.choice(["get_weather", "search", "f"]),
                                               "arguments": rand_arguments(rng)}})
                m["tool_calls"] = calls
                msgs.append(m)
                results = [{"role": "tool", "tool_call_id": c["id"], "content": rand_text(rng)} for c in calls]
                rng.shuffle(results)
                msgs.extend(results)
                continue
            msgs.append(m)
        elif kind < 0.8:
            msgs.append({"role": "latest_reminder", "content": rand_text(rng)})
        elif kind < 0.9:
            msgs.append({"role": "system", "content": rand_text(rng)})
        else:
            msgs.append({"role": "user", "content": rand_user_text(rng)})
    if msgs and msgs[-1]["role"] == "assistant" and rng.random() < 0.3:
        msgs[-1]["prefix"] = True
    req = {"encoding": enc, "messages": msgs, "thinking_mode": rng.choice(["chat", "thinking"]),
           "reasoning_effort": rng.choice([None, "low", "high", "xhigh", "max"])}
    if rng.random() < 0.5:
        req["tools"] = [{"type": "function", "function": {
            "name": name, **({"description": rand_text(rng)} if rng.random() < 0.7 else {}),
            **({"parameters": {"type": "object", "properties": {k: rand_value(rng) for k in ("a", "b")}}}
               if rng.random() < 0.8 else {})}} for name in rng.sample(["get_weather", "search", "f", "g"], rng.randint(1, 3))]
        req["tool_choice"] = rng.choice(["auto", "auto", "none", "required"])
    if rng.random() < 0.2:
        req["response_format"] = "json_object"
    elif rng.random() < 0.15:  # json_schema: the schema written into the prompt
        schema = rng.choice([{"type": "object", "properties": {k: rand_value(rng) for k in ("a", "b")}}, {}, True])
        req["response_format"] = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
    return req


@pytest.mark.parametrize("seed", range(6))
def test_generated_conversations_match_oracle(seed):
    rng = random.Random(seed)
    for _ in range(100):
        check_against_oracle(rand_conversation(rng))


def malformed(rng, request):
    """Tool results missing, answering no call, or without any call; empty user messages;
    consecutive reminders.  Protocol converters reject some of these, the renderer must not."""
    msgs = []
    for m in request["messages"]:
        if m["role"] == "tool" and rng.random() < 0.2:
            continue
        if m["role"] == "user" and rng.random() < 0.3:
            m = dict(m, content="")
        msgs.append(m)
        if m["role"] == "tool" and rng.random() < 0.3:
            msgs.append({"role": "tool", "tool_call_id": "unknown_%d" % rng.randint(0, 9), "content": rand_text(rng)})
        if m["role"] == "latest_reminder" and rng.random() < 0.5:
            msgs.append({"role": "latest_reminder", "content": rand_text(rng)})
    if rng.random() < 0.3:
        k = rng.randint(0, max(0, len(msgs) - 1))
        msgs[k:k] = [{"role": "tool", "tool_call_id": "orphan_%d" % i, "content": "o%d" % i} for i in (2, 1)]
    if any(m.get("prefix") for m in msgs[:-1]):
        msgs = [dict(m, prefix=False) for m in msgs]
    return dict(request, messages=msgs)


@pytest.mark.parametrize("seed", range(4))
def test_generated_malformed_match_oracle(seed):
    rng = random.Random(100 + seed)
    for _ in range(100):
        check_against_oracle(malformed(rng, rand_conversation(rng)))


# ---- assistant prefixes: every shape of the last message ------------------------------------

PREFIX_HISTORIES = [
    [], [{"role": "user", "content": "hi"}], [{"role": "system", "content": "s"}],
    [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a"}],
    [{"role": "user", "content": "hi"},
     {"role": "assistant", "content": "a", "tool_calls": [{"id": "c0", "type": "function",
                                                           "function": {"name": "f", "arguments": "{}"}}]},
     {"role": "tool", "tool_call_id": "c0", "content": "r"}],
]


@pytest.mark.parametrize("encoding", ["v41", "v4_0731"])
def test_prefix_shapes_match_oracle(encoding):
    # Issue 19 item 13: a V4.1 thinking prefix with tool calls and no content left </think> out,
    # so the tool-call block sat inside the reasoning.
    for mode in ("thinking", "chat"):
        for reasoning in (None, "", "r"):
            for content in ("", "c"):
                for history in PREFIX_HISTORIES:
                    for calls in (True, False):
                        for tools in (True, False):
                            m = {"role": "assistant", "content": content, "prefix": True}
                            if reasoning is not None:
                                m["reasoning_content"] = reasoning
                            if calls:
                                m["tool_calls"] = [{"id": "c1", "type": "function",
                                                    "function": {"name": "f", "arguments": "{\"a\": 1}"}}]
                            req = {"encoding": encoding, "thinking_mode": mode, "messages": history + [m]}
                            if tools:
                                req["tools"] = [{"type": "function", "function": {"name": "f"}}]
                            check_against_oracle(req)


# ---- tool-call arguments read as the official renderer reads them (serde_json) -------------

ARGUMENTS = [
    # issue 19 item 15: integers past 2^63, -0 and \u0000 no longer turn the call into one string
    '{"a": 18446744073709551616}', '{"a": 9223372036854775808}', '{"a": 18446744073709551615}',
    '{"a": -9223372036854775809}', '{"a": -9223372036854775808}', '{"a": 9223372036854775807}',
    '{"a": [1, 123456789012345678901234567890]}', '{"a": -0}', '{"a": -0.0}', '{"a": {"k": -0, "z": [0, -0]}}',
    '{"a": "x\\u0000y"}', '{"a\\u0000b": 1}', '{"a": ["\\u0000", "é"]}', '{"a": {"\\u0000k": "\\u0001"}}',
    # and everything around them
    '{"a": 1e400}', '{"a": -1e-400}', '{"a": 1.0}', '{"a": 0.1e1}', '{"a": 1E5}', '{"a": 1.5E+3}', '{"a": 100.0e-2}',
    '{"a": 10000000000000000000000.0}', '{"a": 0.30000000000000004}', '{"a": 1e-7}', '{"a": 2.5e-320}',
    '{"a": 01}', '{"a": 1.}', '{"a": .5}', '{"a": NaN}', '{"a": +1}', '{"a": 1} x', ' {"a": 1} ', '{"a": 1}\n',
    '{"a": 1, "a": 2}', '{"a": 1, "b": 2, "a": 3}', '{"a": {"x": 1, "x": 2}}', '{"a": "\\ud800"}', '{"a": "\\udc00"}',
    '{"a": "\\ud83d\\ude00"}', '{"a": "\\u00e9\\n\\t\\"\\\\\\/\\b\\f\\r"}', '{"a": "raw\ttab"}', '{"a":true,"b":null,"c":[],"d":{}}',
    '{}', ' { } ', '[]', '"s"', '', '{"a": tru}', '{"a": [1,]}', '{"a": {"b": 1,}}', '{"a" 1}', '{,}',
    '{"a": ' + '[' * 126 + ']' * 126 + '}', '{"a": ' + '[' * 127 + ']' * 127 + '}',
    '{"a": ' + '{"b": ' * 125 + '1' + '}' * 125 + '}', '{"a": ' + '{"b": ' * 126 + '1' + '}' * 126 + '}',
]


@pytest.mark.parametrize("encoding", ["v41", "v4_0731"])
def test_argument_values_match_oracle(encoding):
    for args in ARGUMENTS:
        call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": args}}
        check_against_oracle({"encoding": encoding, "thinking_mode": "chat", "messages": [
            {"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c", "content": "r"}]})
