"""test_server_tool_grammar.py — constrained DSML tool calls over HTTP (`deepinfer serve` on
the built-in random tiny model, the hardest client): with tool_choice required, a named tool,
or a strict tool under auto, every answer that ends parses (the server's own parser) into
calls of the offered tools whose arguments validate with jsonschema; required / named answers
are calls and nothing else, auto answers may be plain text instead; the model's own ｜DSML｜
token is allowed as the marker."""
import json
import os
import sys

import jsonschema
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from server_fixture import MODEL, post_json as post, serving  # noqa: E402

NO_THINK = {"thinking": {"type": "disabled"}}
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Rome", "Oslo"]}, "hot": {"type": "boolean"},
                                            "days": {"type": "array", "items": {"type": "integer", "minimum": 0},
                                                     "maxItems": 2}},
           "required": ["city"], "additionalProperties": False}
NOTE = {"type": "object", "properties": {"text": {"type": "string", "maxLength": 3}}, "required": ["text"],
        "additionalProperties": False}
STRICT = {**WEATHER, "required": ["city", "hot", "days"]}  # strict tools require every property
SCHEMAS = {"get_weather": WEATHER, "note": NOTE, "strict_weather": STRICT}


def tool(name, strict=None):
    fn = {"name": name, "description": name, "parameters": SCHEMAS[name]}
    if strict is not None:
        fn["strict"] = strict
    return {"type": "function", "function": fn}


@pytest.fixture(scope="module")
def server():
    with serving("deepinfer-serve-tools-") as s:
        yield s


def answer(server, seed, **kw):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "weather?"}], "seed": seed,
            "max_tokens": 160, **NO_THINK, **kw}
    status, out = post(server, "/v1/chat/completions", body)
    assert status == 200, out
    return out["choices"][0]


def check_calls(message, allowed):
    calls = message.get("tool_calls") or []
    for call in calls:
        name = call["function"]["name"]
        assert name in allowed, call
        jsonschema.validate(json.loads(call["function"]["arguments"]), SCHEMAS[name])
    return calls


def test_required_and_named_answers_are_schema_valid_calls(server):
    ended = markers = 0
    for seed in range(10):
        for choice, allowed in (("required", {"get_weather", "note"}),
                                ({"type": "function", "function": {"name": "note"}}, {"note"})):
            c = answer(server, seed, tools=[tool("get_weather"), tool("note")], tool_choice=choice, logprobs=True)
            markers += sum(t["token"] == "\uff5cDSML\uff5c" for t in c["logprobs"]["content"])
            if c["finish_reason"] == "length":
                continue
            ended += 1
            assert c["finish_reason"] == "tool_calls", c
            assert check_calls(c["message"], allowed), c
            assert not (c["message"]["content"] or "").strip(), c
    assert ended >= 10
    # the model's ｜DSML｜ token is grammar text (serve/backend_text.c), not only its pieces
    assert markers > 0


def test_strict_tool_under_auto_gives_text_or_valid_calls(server):
    ended = 0
    for seed in range(10):
        c = answer(server, seed, tools=[tool("strict_weather", strict=True)])
        if c["finish_reason"] == "length":
            continue
        ended += 1
        check_calls(c["message"], {"strict_weather"})
        assert "\uff5c" not in (c["message"]["content"] or ""), c
    assert ended >= 5


def test_anthropic_tool_choice_any_gives_schema_valid_tool_use(server):
    ended = 0
    for seed in range(6):
        status, out = post(server, "/v1/messages", {
            "model": MODEL, "max_tokens": 400, "messages": [{"role": "user", "content": "weather?"}],
            "thinking": {"type": "disabled"}, "temperature": 1.0, "metadata": {"user_id": str(seed)},
            "tools": [{"name": "get_weather", "description": "w", "input_schema": WEATHER}],
            "tool_choice": {"type": "any"}})
        assert status == 200, out
        if out["stop_reason"] == "max_tokens":
            continue
        ended += 1
        uses = [b for b in out["content"] if b["type"] == "tool_use"]
        assert out["stop_reason"] == "tool_use" and uses, out
        for use in uses:
            assert use["name"] == "get_weather"
            jsonschema.validate(use["input"], WEATHER)
    assert ended >= 2  # no seed in this protocol: the sampler draws freshly each time
