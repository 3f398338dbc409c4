"""test_server_structured.py — structured outputs over HTTP (`deepinfer serve` on the built-in
random tiny model): OpenAI response_format json_object / json_schema / regex, vLLM's
structured_outputs extra (regex, json, grammar, choice) and Responses text.format; every
answer that ends is accepted by an independent checker (json + jsonschema, re.fullmatch, lark),
in chat mode and after </think> in thinking mode; bad constraints (tool schemas included) are a
400 naming the problem.  Constrained tool calls: test_server_tool_grammar.py."""
import json
import os
import re
import sys

import jsonschema
import lark
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from server_fixture import MODEL, post_json as post, serving  # noqa: E402

NO_THINK = {"thinking": {"type": "disabled"}}
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}, "tag": {"enum": ["a", "b", 3]},
                                           "list": {"type": "array", "items": {"type": "integer"}, "maxItems": 2}},
          "required": ["ok", "tag"], "additionalProperties": False}


@pytest.fixture(scope="module")
def server():
    with serving("deepinfer-serve-so-") as s:
        yield s


def chat(server, seed, max_tokens=64, mode=NO_THINK, **kw):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "reply in json"}], "seed": seed,
            "max_tokens": max_tokens, **mode, **kw}
    status, out = post(server, "/v1/chat/completions", body)
    assert status == 200, out
    return out["choices"][0]["message"]["content"] or "", out["choices"][0]["finish_reason"]


def test_json_schema_and_json_object(server):
    ended = 0
    for seed in range(12):
        text, finish = chat(server, seed, response_format={"type": "json_schema",
                                                           "json_schema": {"name": "r", "schema": SCHEMA}})
        if finish == "stop":
            ended += 1
            jsonschema.validate(json.loads(text), SCHEMA)
        text, finish = chat(server, seed, response_format={"type": "json_object"})
        if finish == "stop":  # an object: what the JSON-mode output parser shows (backend_engine.c)
            assert isinstance(json.loads(text), dict), text
    assert ended >= 8


def test_regex_response_format_and_vllm_extras(server):
    grammar = lark.Lark('start: ("ab" | "c")~1..3 "!"', parser="earley", lexer="dynamic")
    for seed in range(8):
        text, finish = chat(server, seed, response_format={"type": "regex", "regex": "[a-d]{2,5}-[0-9]"})
        assert finish == "stop" and re.fullmatch("[a-d]{2,5}-[0-9]", text), text
        text, finish = chat(server, seed, structured_outputs={"regex": "(yes|no)[.!]"})
        assert finish == "stop" and re.fullmatch("(yes|no)[.!]", text), text
        text, finish = chat(server, seed, structured_outputs={"grammar": 'root ::= ("ab" | "c"){1,3} "!"'})
        assert finish == "stop"
        grammar.parse(text)
        text, finish = chat(server, seed, structured_outputs={"choice": ["red", "green", 'bl"ue']})
        assert finish == "stop" and text in ("red", "green", 'bl"ue'), text


def test_constraint_starts_after_think_in_thinking_mode(server):
    for seed in range(6):
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "seed": seed, "max_tokens": 48,
                "thinking": {"type": "enabled", "budget_tokens": 4},
                "response_format": {"type": "regex", "regex": "[xyz]{3}"}}
        status, out = post(server, "/v1/chat/completions", body)
        assert status == 200, out
        msg = out["choices"][0]["message"]
        assert out["choices"][0]["finish_reason"] == "stop" and re.fullmatch("[xyz]{3}", msg["content"]), msg


def test_responses_text_format(server):
    for seed in range(4):
        body = {"model": MODEL, "input": "json please", "seed": seed, "max_output_tokens": 64,
                "reasoning": {"effort": "none"},
                "text": {"format": {"type": "json_schema", "name": "r", "schema": SCHEMA}}}
        status, out = post(server, "/v1/responses", body)
        assert status == 200, out
        if out["status"] == "completed":
            text = "".join(c["text"] for item in out["output"] if item["type"] == "message" for c in item["content"])
            jsonschema.validate(json.loads(text), SCHEMA)


def test_bad_constraints_are_400(server):
    base = {"model": MODEL, "messages": [{"role": "user", "content": "json"}], "max_tokens": 8, **NO_THINK}
    tool = {"type": "function", "function": {"name": "f", "strict": True,
                                             "parameters": {"type": "object", "properties": {"x": {"type": "integer"}},
                                                            "required": ["x"], "additionalProperties": False}}}
    cases = [
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object",
                                                                                           "patternProperties": {}}}}},
         "patternProperties"),
        ({"response_format": {"type": "regex", "regex": "(open"}}, "regex"),
        ({"structured_outputs": {"grammar": "root ::= missing"}}, "missing"),
        ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "exactly one"),
        ({"tools": [dict(tool, function=dict(tool["function"], strict=False, parameters={
            "type": "object", "properties": {"x": {"type": "string", "format": "uri"}}}))], "tool_choice": "required"},
         "unsupported format 'uri'"),
    ]
    for extra, needle in cases:
        status, out = post(server, "/v1/chat/completions", {**base, **extra})
        assert status == 400 and needle in json.dumps(out), (extra, out)
    # the server still answers
    assert chat(server, 1, structured_outputs={"regex": "ok"}) == ("ok", "stop")
