"""Protocol conversion and output encoding against the official `deepseek-recipe` package:
the same request bodies through both converters must be accepted or rejected alike and give
the same conversation and options; the same parsed output through both encoders must give
the same SSE events and complete responses (ids and timestamps aside)."""
import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from server_fixture import MODEL, ROOT, build_harness  # noqa: E402
import test_render_oracle as ro  # noqa: E402  (the renderer through libdeepinfer.so)

dr = pytest.importorskip("deepseek_recipe")  # installed by tools/install-deps.sh

TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
U = [{"role": "user", "content": "hi"}]
CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}


def chat(**kw):
    body = {"model": MODEL, "messages": U}
    body.update(kw)
    return ("chat", body)


def resp(**kw):
    body = {"model": MODEL, "input": "hi"}
    body.update(kw)
    return ("responses", body)


def msgs(**kw):
    body = {"model": MODEL, "max_tokens": 100, "messages": U}
    body.update(kw)
    return ("messages", body)


RTOOL = {"type": "function", "name": "get_weather", "parameters": TOOL["function"]["parameters"]}
MTOOL = {"name": "get_weather", "description": "Weather", "input_schema": TOOL["function"]["parameters"]}

CASES = [
    chat(), chat(stream=True), chat(reasoning_effort="low"), chat(reasoning_effort="medium"),
    chat(reasoning_effort="minimal"), chat(reasoning_effort="none"), chat(reasoning_effort="xhigh"),
    chat(reasoning_effort="max"), chat(reasoning_effort="bogus"), chat(thinking={"type": "disabled"}),
    chat(thinking={"type": "disabled"}, temperature=0.3, top_p=0.5), chat(temperature=0.3, top_p=0.5),
    chat(top_p=0.97), chat(temperature=3), chat(temperature=-0.1), chat(top_p=0), chat(top_p=1.5), chat(n=2), chat(n=1),
    chat(max_tokens=0), chat(max_tokens=100), chat(max_tokens=400000),
    chat(stop="x"), chat(stop=["a", "b"]), chat(stop=["a"] * 17), chat(stop=["", "z"]), chat(messages=[]),
    chat(messages=[{"role": "developer", "content": "x"}, {"role": "user", "content": "y"}]),
    chat(response_format={"type": "json_object"}),
    chat(response_format={"type": "json_object"}, messages=[{"role": "user", "content": "reply in JSON"}]),
    chat(response_format={"type": "text"}), chat(stream_options={"include_usage": True}),
    chat(stream=True, stream_options={"include_usage": True}), chat(frequency_penalty=3), chat(presence_penalty=-3),
    chat(seed=-1), chat(seed=42),
    chat(messages=[{"role": "system", "content": ""}, {"role": "user", "content": [{"type": "text", "text": "a"},
                                                                                   {"type": "text", "text": "b"}]}]),
    chat(messages=[{"role": "system", "content": "sys"}, {"role": "user", "content": "q"}]),
    chat(tools=[TOOL]), chat(tools=[TOOL], tool_choice="none"), chat(tools=[TOOL], tool_choice="auto"),
    chat(tools=[TOOL], tool_choice="required"), chat(tools=[TOOL], tool_choice="required", thinking={"type": "disabled"}),
    chat(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "get_weather"}}, reasoning_effort="none"),
    chat(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "nope"}}, reasoning_effort="none"),
    chat(tools=[TOOL, TOOL]), chat(tools=[{"type": "function", "function": {"name": "a b"}}]),
    chat(messages=U + [{"role": "assistant", "content": None}]),
    chat(messages=U + [{"role": "assistant", "content": "x", "tool_calls": [CALL]},
                       {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]),
    chat(messages=U + [{"role": "assistant", "content": "x", "reasoning_content": "because", "tool_calls": [CALL]},
                       {"role": "tool", "tool_call_id": "c1", "content": "sunny"}, {"role": "user", "content": "ok"}]),
    chat(messages=U + [{"role": "assistant", "content": "x", "tool_calls": [CALL]},
                       {"role": "tool", "tool_call_id": "c2", "content": "r"}]),
    chat(messages=U + [{"role": "assistant", "content": "x", "tool_calls": [CALL]}]),
    chat(messages=U + [{"role": "assistant", "content": "x", "tool_calls": [CALL]}, {"role": "user", "content": "y"}]),
    chat(messages=[{"role": "user", "content": 5}]), chat(messages=[{"role": "tool", "tool_call_id": "c", "content": "x"}]),
    chat(messages=U + [{"role": "assistant", "content": "done"}, {"role": "user", "content": "more"}]),
    resp(), resp(instructions="be brief"), resp(instructions=""), resp(reasoning={"effort": "none"}),
    resp(reasoning={"effort": "low"}), resp(reasoning={"effort": "medium"}), resp(reasoning={"effort": "xhigh"}),
    resp(max_output_tokens=50), resp(max_output_tokens=0), resp(temperature=5),
    resp(input=[]), resp(input=[{"role": "user", "content": "a"}, {"role": "developer", "content": "d"}]),
    resp(input=[{"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]}]),
    resp(input=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a1"},
                {"role": "assistant", "content": "a2"}, {"role": "user", "content": "q2"}]),
    resp(tools=[RTOOL]), resp(tools=[RTOOL], tool_choice="none"),
    resp(tools=[RTOOL], input=[{"role": "user", "content": "q"},
                               {"type": "function_call", "call_id": "b", "name": "get_weather", "arguments": "{}"},
                               {"type": "function_call", "call_id": "a", "name": "get_weather", "arguments": "{\"x\":1}"},
                               {"type": "function_call_output", "call_id": "b", "output": "rb"},
                               {"type": "function_call_output", "call_id": "a", "output": "ra"}]),
    resp(tools=[RTOOL], input=[{"role": "user", "content": "q"},
                               {"type": "function_call_output", "call_id": "zz", "output": "r"}]),
    resp(text={"format": {"type": "json_object"}}),
    resp(input="give json", text={"format": {"type": "json_object"}}),
    msgs(), msgs(stream=True), msgs(thinking={"type": "disabled"}), msgs(thinking={"type": "enabled", "budget_tokens": 2048}),
    msgs(max_tokens=500000), msgs(max_tokens=0), msgs(system="sys"), msgs(system=[{"type": "text", "text": "s1"},
                                                                                 {"type": "text", "text": "s2"}]),
    msgs(stop_sequences=["END"]), msgs(stop_sequences=[""]), msgs(temperature=3), msgs(top_p=0.5),
    msgs(output_config={"effort": "low"}), msgs(output_config={"effort": "max"}, thinking={"type": "disabled"}),
    msgs(tools=[MTOOL]), msgs(tools=[MTOOL], tool_choice={"type": "none"}),
    msgs(tools=[MTOOL], tool_choice={"type": "tool", "name": "get_weather"}, thinking={"type": "disabled"}),
    msgs(tools=[MTOOL], tool_choice={"type": "tool", "name": "get_weather"}),
    msgs(tools=[{"name": "x"}]),
    msgs(messages=[{"role": "user", "content": "q"},
                   {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"},
                                                     {"type": "text", "text": "let me"},
                                                     {"type": "tool_use", "id": "u1", "name": "get_weather",
                                                      "input": {"city": "Paris", "n": 1}}]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "u1", "content": "sunny"},
                                                {"type": "text", "text": "and?"}]}]),
    msgs(messages=[{"role": "user", "content": "q"},
                   {"role": "assistant", "content": [{"type": "tool_use", "id": "u1", "name": "f", "input": {}}]},
                   {"role": "user", "content": "no result"}]),
    msgs(messages=[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "u9", "content": "x"}]}]),
    msgs(messages=[]), msgs(messages=[{"role": "user", "content": [{"type": "text", "text": "a"},
                                                                    {"type": "text", "text": "b"}]}]),
    resp(input=[{"role": "user", "content": "q"}, {"type": "reasoning", "summary": [],
                                                   "content": [{"type": "reasoning_text", "text": "r1"}]},
                {"role": "assistant", "content": [{"type": "output_text", "text": "a"}]}, {"role": "user", "content": "q2"}]),
    resp(tools=[{"type": "custom", "name": "apply_patch", "description": "patch"}],
         input=[{"role": "user", "content": "q"}, {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch",
                                                   "input": "*** patch"},
                {"type": "custom_tool_call_output", "call_id": "c1", "output": "done"}]),
    resp(tools=[{"type": "web_search"}]), resp(tools=[RTOOL], tool_choice="required"),
    resp(tools=[RTOOL], tool_choice={"type": "function", "name": "get_weather"}, reasoning={"effort": "none"}),
    resp(input=[{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]),
    msgs(messages=[{"role": "user", "content": "q"}, {"role": "system", "content": "late"}]),
    msgs(messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": [
        {"type": "redacted_thinking", "data": "x"}, {"type": "text", "text": "a"}]}, {"role": "user", "content": "q2"}]),
    msgs(messages=[{"role": "user", "content": "q"},
                   {"role": "assistant", "content": [{"type": "tool_use", "id": "u1", "name": "get_weather",
                                                      "input": {"a": "\u00e9", "b": [1, 2]}}]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "u1",
                                                 "content": [{"type": "text", "text": "r1"}, {"type": "text", "text": "r2"}]}]}]),
    msgs(tools=[{"type": "web_search_20250305", "name": "web_search"}]),
    msgs(messages=[{"role": "assistant", "content": "prefill"}]),
    chat(messages=[{"role": "latest_reminder", "content": "r"}, {"role": "user", "content": "u"}]),
    chat(messages=[{"role": "assistant", "content": "a"}]),
    chat(messages=U + [{"role": "assistant", "content": "", "tool_calls": [
        CALL, {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c2", "content": "r2"}, {"role": "tool", "tool_call_id": "c1", "content": "r1"}]),
    # assistant prefixes (issue 19 item 11): continued, not closed and answered afresh
    chat(messages=U + [{"role": "assistant", "content": "The answer", "prefix": True}]),
    chat(messages=U + [{"role": "assistant", "content": "", "reasoning_content": "hmm", "prefix": True}]),
    chat(messages=U + [{"role": "assistant", "content": "", "prefix": True}]),
    chat(messages=U + [{"role": "assistant", "content": "x", "reasoning_content": "r", "prefix": True}],
         thinking={"type": "disabled"}),
    chat(messages=U + [{"role": "assistant", "content": "x", "prefix": False}]),
    chat(messages=U + [{"role": "assistant", "content": "x", "reasoning_content": "r"}, {"role": "user", "content": "y"}],
         thinking={"type": "disabled"}),
    msgs(thinking={"type": "disabled"}, messages=[
        {"role": "user", "content": "q"}, {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"},
                                                                            {"type": "text", "text": "a"}]},
        {"role": "user", "content": "q2"}]),
    chat(messages=U + [{"role": "assistant", "content": "x", "prefix": None}]),
    chat(messages=U + [{"role": "assistant", "content": "x", "prefix": "yes"}]),
    chat(messages=U + [{"role": "assistant", "content": "x", "prefix": True}, {"role": "user", "content": "y"}]),
    chat(messages=U + [{"role": "assistant", "content": None, "prefix": True}]),
    chat(messages=U + [{"role": "assistant", "content": "x", "prefix": True}], tools=[TOOL]),
    chat(messages=U + [{"role": "assistant", "content": "x", "prefix": True}], tools=[TOOL], tool_choice="none"),
    chat(messages=U + [{"role": "assistant", "content": "x", "prefix": True}], tools=[]),
    chat(messages=[{"role": "user", "content": "q", "prefix": False}]),
]

def fn_tool(params=None, name="f", **kw):
    fn = {"name": name, **kw}
    if params is not None:
        fn["parameters"] = params
    return {"type": "function", "function": fn}


OBJ = {"type": "object", "properties": {"a": {"type": "string"}}}
STRICT_SCHEMAS = [  # issue 19 item 14: strict schemas rebuilt from the subset the model knows
    OBJ, {"type": "object"}, None, {"type": "object", "properties": {}, "required": []},
    {"type": "object", "properties": {"a": {"type": "array"}}},
    {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer", "minimum": 0}}}},
    {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}, "required": ["a"]},
    {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}, "required": ["b", "a"]},
    {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "a"]},
    {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["z"]},
    {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": True},
    {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}},
    {"type": "object", "properties": {"a": {"type": "object", "properties": {"x": {"type": "number"}}}}},
    {"type": "object", "properties": {"a": {"type": "object", "description": "d"}}},
    {"type": "object", "properties": {"a": {"type": "string", "description": "d", "title": "t", "minLength": 1,
                                            "pattern": "^x", "format": "email", "enum": ["x", "y"], "const": "x"}}},
    {"type": "object", "properties": {"a": {"type": "string", "format": "date"}}},
    {"type": "object", "properties": {"a": {"type": "string", "enum": ["x", 1]}}},
    {"type": "object", "properties": {"a": {"multipleOf": 2, "type": "integer", "maximum": 5, "default": 1, "enum": [1],
                                            "description": "d", "exclusiveMinimum": 0}}},
    {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0.5}}},
    {"type": "object", "properties": {"a": {"type": "number", "minimum": 0.5, "const": 1, "default": "x"}}},
    {"type": "object", "properties": {"a": {"type": "number", "minimum": 0.5, "const": 1, "title": "t"}}},
    {"type": "object", "properties": {"a": {"type": "boolean", "default": True, "description": "d"}}},
    {"type": "object", "properties": {"a": {"type": ["string", "null"], "description": "d", "enum": ["x"]}}},
    {"type": "object", "properties": {"a": {"type": ["object", "null"]}}},
    {"type": "object", "properties": {"a": {"anyOf": [{"type": "string", "minLength": 1}, {"type": "null"}],
                                            "title": "t", "description": "d"}}},
    {"type": "object", "properties": {"a": {"$ref": "#/$defs/x", "description": "d"}}, "$defs": {"x": {"type": "string"}}},
    {"type": "object", "properties": {"a": {"oneOf": [{"type": "string"}]}}},
    {"type": "object", "properties": {"a": {"type": "foo"}}},
    {"type": "object", "properties": {"a": {"type": "array", "items": True}}},
    {"type": "object", "properties": {"a": {"type": "string", "description": None}}, "description": "top", "title": "T"},
    {"type": "string"}, {"anyOf": [OBJ]}, {"properties": {"a": {"type": "string"}}},
]
CASES += [chat(tools=[fn_tool(p, strict=True)]) for p in STRICT_SCHEMAS]
CASES += [
    chat(tools=[fn_tool()]), chat(tools=[fn_tool({})]), chat(tools=[fn_tool({"type": "object"})]),
    chat(tools=[fn_tool({"type": "string"})]), chat(tools=[fn_tool({"type": ["object", "null"]})]),
    chat(tools=[fn_tool([])]), chat(tools=[fn_tool({"type": "object", "properties": 5})]),
    chat(tools=[fn_tool({"type": "object", "properties": {"a": {"type": "array"}}})]),
    chat(tools=[fn_tool(OBJ, strict=False)]), chat(tools=[fn_tool(OBJ, strict="yes")]),
    chat(tools=[fn_tool(OBJ, strict=True), fn_tool(OBJ, name="g")]),
    chat(tools=[fn_tool(OBJ, strict=True), fn_tool(OBJ, name="g", strict=True)]),
    chat(tools=[fn_tool(OBJ, strict=True)], tool_choice="none"),
    resp(tools=[{"type": "function", "name": "f"}]), resp(tools=[{"type": "function", "name": "f", "parameters": {}}]),
    resp(tools=[{"type": "function", "name": "f", "parameters": OBJ, "strict": True}]),
    resp(tools=[{"type": "function", "name": "f", "parameters": OBJ, "strict": True},
                {"type": "function", "name": "g", "parameters": OBJ}]),
    msgs(tools=[{"name": "f", "input_schema": {}}]),
    # integers past 64 bits are doubles (issue 19 item 15), in ignored fields and in schemas
    chat(metadata={"n": 2 ** 64}), chat(metadata={"n": -2 ** 63 - 1, "m": [10 ** 30]}), chat(seed=2 ** 64),
    chat(max_tokens=10 ** 20), chat(tools=[fn_tool({"type": "object", "properties": {"a": {
        "type": "integer", "maximum": 2 ** 64, "minimum": -2 ** 63 - 1, "x": [12345678901234567890123, "2**64"]}}})]),
    chat(tools=[fn_tool({"type": "object", "properties": {"a": {"type": "number", "maximum": 10 ** 25}}}, strict=True)]),
    # "\u0000" anywhere is text (issue 19 item 15), the prompt carries the NUL byte
    chat(messages=[{"role": "system", "content": "s\x00"}, {"role": "user", "content": "a\x00b \U0010FFFF0"}]),
    chat(messages=U + [{"role": "assistant", "content": "x\x00", "reasoning_content": "\x00r",
                        "tool_calls": [dict(CALL, id="c\x00")]},
                       {"role": "tool", "tool_call_id": "c\x00", "content": "\x00"}],
         tools=[fn_tool({"type": "object", "properties": {"a": {"type": "string", "description": "d\x00",
                                                                  "enum": ["\x00", "\U0010FFFF0"]}}}, description="t\x00")]),
    chat(messages=U, tools=[fn_tool({"type": "object", "properties": {"a": {"type": "string", "enum": ["\x00"]}}},
                                    strict=True)]),
    chat(messages=U, response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"const": "\x00"}}}),
    chat(messages=U, user="\x00"),
    resp(input="q\x00", instructions="i\x00"), msgs(system="s\x00", messages=[{"role": "user", "content": "\x00"}]),
    # json_schema: the schema is written into the prompt; without one the request is refused
    chat(response_format={"type": "json_schema"}), chat(response_format={"type": "json_schema", "json_schema": {"name": "x"}}),
    chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": OBJ}}),
    chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": OBJ, "strict": False}},
         thinking={"type": "disabled"}),
    chat(response_format={"type": "json_schema", "json_schema": {"schema": {"type": "number", "minimum": 1e-7}}},
         tools=[TOOL]),
    chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}),
    chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": 5}}),
    resp(text={"format": {"type": "json_schema", "name": "x", "schema": OBJ}}),
    resp(text={"format": {"type": "json_schema", "name": "x"}}), resp(text={"format": {"type": "json_schema", "schema": OBJ}}),
    chat(messages=U + [{"role": "assistant", "content": "", "tool_calls": [dict(CALL, id="")]},
                       {"role": "tool", "tool_call_id": "", "content": "r"}]),
    chat(messages=U + [{"role": "assistant", "content": "", "tool_calls": [{k: v for k, v in CALL.items() if k != "id"}]},
                       {"role": "tool", "content": "r"}]),
]
# Deliberate divergence (not in CASES): "prefix": true on a user or system message is refused
# (test_prefix_on_other_roles_refused); the official conversion drops it silently.
# Deliberate divergences (not in CASES): images (image_url / input_image / image blocks) are
# rejected with 400 here, since the engine has no vision encoder; the official conversion turns
# them into placeholders.  previous_response_id is rejected (recipe.md §4.2, as ds4 does); the
# official conversion ignores it, which would answer without the earlier turns.
# max_completion_tokens limits the output here (as vLLM does; the official conversion drops it),
# and Anthropic tool_choice {"type": "any"} is a required tool call here (the official conversion
# makes it auto): tests/python/test_server_params.py and tests/unit/test_api.c test both.
# Top-level fields neither API defines are refused here (the official conversion ignores them).


def run_tool(mode, payload):
    build_harness()
    out = subprocess.run([os.path.join(ROOT, "build/tests-support/api_tool"), mode], input=payload,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def oracle_convert(protocol, body):
    req_cls = {"chat": dr.ChatCompletionRequest, "responses": dr.ResponsesRequest, "messages": dr.MessagesRequest}[protocol]
    try:
        r = req_cls(json.dumps(body)).convert(dr.ConversionOptions())
    except (dr.ConversionError, ValueError) as e:
        return None, str(e)
    return r, None


def oracle_messages(conv):
    out = []
    for m in conv.messages:
        d = {"role": m.role, "content": m.content}
        if m.reasoning_content is not None:
            d["reasoning_content"] = m.reasoning_content
        if m.tool_calls:
            d["tool_calls"] = [(t.id, t.name, t.arguments) for t in m.tool_calls]
        if m.tool_call_id is not None:
            d["tool_call_id"] = m.tool_call_id
        if m.prefix:
            d["prefix"] = True
        out.append(d)
    return out


def our_messages(conv):
    out = []
    for m in conv["messages"]:
        d = {"role": m["role"], "content": m["content"]}
        if "reasoning_content" in m:
            d["reasoning_content"] = m["reasoning_content"]
        if m.get("tool_calls"):
            d["tool_calls"] = [(t["id"], t["function"]["name"], t["function"]["arguments"]) for t in m["tool_calls"]]
        if "tool_call_id" in m:
            d["tool_call_id"] = m["tool_call_id"]
        if m.get("prefix"):
            d["prefix"] = True
        out.append(d)
    return out


def params_of(body, name, parameters):
    """A tool's schema as compared.  Not for Responses custom tools: the official conversion takes
    only apply_patch, with its own description and schema; deepinfer takes any custom tool."""
    custom = {t.get("name") for t in body.get("tools") or [] if t.get("type") == "custom"}
    return "(custom tool)" if name in custom else parameters


def test_conversion_matches_official_recipe():
    # bodies as raw text: the harness's own line reader (jansson) cannot hold every number
    payload = "".join(json.dumps({"protocol": p, "body": json.dumps(b)}) + "\n" for p, b in CASES)
    ours = [json.loads(line) for line in run_tool("convert", payload).splitlines()]
    assert len(ours) == len(CASES)
    mismatches = []
    for (protocol, body), mine in zip(CASES, ours):
        ref, err = oracle_convert(protocol, body)
        case = f"{protocol} {json.dumps(body)[:160]}"
        if ref is None:
            if mine["ok"]:
                mismatches.append(f"{case}: official rejects ({err[:120]}), we accept")
            continue
        if not mine["ok"]:
            mismatches.append(f"{case}: official accepts, we reject: {mine['message']}")
            continue
        conv, opt, io = ref.conversation, mine["options"], ref.inference_options
        expect = {
            "messages": oracle_messages(conv), "thinking": conv.thinking_mode,
            "effort": conv.reasoning_effort if conv.thinking_mode else None,
            "tools": [(t.name, params_of(body, t.name, t.parameters)) for t in conv.tools], "tool_choice": conv.tool_choice,
            "max_tokens": io.max_tokens or 0, "stop": list(ref.parsing_options.stop_sequences),
            "json": conv.response_format == "json_object", "stream": ref.stream,
        }
        got = {
            "messages": our_messages(mine["conversation"]), "thinking": opt["thinking"],
            "effort": mine["conversation"]["reasoning_effort"],
            "tools": [(t["function"]["name"], params_of(body, t["function"]["name"], t["function"]["parameters"]))
                      for t in mine["conversation"]["tools"]],
            "tool_choice": opt["tool_choice"],
            "max_tokens": opt["max_tokens"], "stop": opt["stop"], "json": opt["json_mode"], "stream": opt["stream"],
        }
        for k in expect:
            if expect[k] != got[k]:
                mismatches.append(f"{case}: {k}: official {expect[k]!r}, ours {got[k]!r}")
        # the prompt both conversations render to (custom tools aside, see params_of)
        if not any(t.get("type") == "custom" for t in body.get("tools") or []):
            want_prompt = dr.DeepseekV41Encoding().render_conversation(conv).prompt
            if ro.render(mine["conversation"])["prompt"] != want_prompt:
                mismatches.append(f"{case}: the rendered prompts differ")
        if abs(io.temperature - opt["temperature"]) > 1e-6 or abs(io.top_p - opt["top_p"]) > 1e-6:
            mismatches.append(f"{case}: sampling: official {io.temperature}/{io.top_p}, ours {opt['temperature']}/{opt['top_p']}")
    assert not mismatches, "\n".join(mismatches)


# ---- output encoding --------------------------------------------------------------------

DSML_CALL = ("\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
             "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
             "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
             "</｜DSML｜invoke>\n</｜DSML｜tool_calls>")
OUTPUTS = {
    "plain": ["Hello", " world", "!"],
    "think": ["Let me", " think", "</think>", "Hello", " there"],
    "tool": ["I will", " check", DSML_CALL],
    "think_tool": ["hmm", "</think>", "ok", DSML_CALL],
}


def oracle_run(protocol, body, chunks, finish="stop"):
    """The official processor on raw model text: its protocol events, and the parsed segments
    (recovered from its Chat Completions stream) that our encoder takes as input."""
    req_cls = {"chat": dr.ChatCompletionRequest, "responses": dr.ResponsesRequest, "messages": dr.MessagesRequest}[protocol]
    resp_cls = {"chat": dr.ChatCompletionResponse, "responses": dr.ResponsesResponse, "messages": dr.MessagesResponse}[protocol]
    r = req_cls(json.dumps(body)).convert(dr.ConversionOptions())
    sp = dr.StreamProcessor(req_cls.chunk_generator(r, "rid", MODEL), r.parsing_options)
    events = sp.push(dr.InferenceChunk.ready(prompt_usage=dr.PromptUsage(prompt_tokens=10, prompt_cache_hit_tokens=4)))
    stopped = False
    for c in chunks:
        events += sp.push(dr.InferenceChunk.text(c, 1))
        if sp.finished:  # a stop sequence finished the stream: the backend stops here
            stopped = True
            break
    if not stopped:
        events += sp.push(dr.InferenceChunk.finish(dr.InferenceFinishReason.Stop if finish == "stop"
                                                   else dr.InferenceFinishReason.Length))
        events += sp.finish()
    full = resp_cls("rid", MODEL, 123, 10, 4)
    payloads = [json.loads(e.to_json()) for e in events]
    for e in events:
        full.accumulate(e)
    return payloads, json.loads(full.to_json())


def segments_from_chat(chunks):
    out = [{"kind": "ready", "prompt_tokens": 10, "cache_hit_tokens": 4}]
    for c in chunks:
        ch = c["choices"][0]
        d = ch["delta"]
        if d.get("reasoning_content"):
            out.append({"kind": "reasoning", "text": d["reasoning_content"], "tokens": 1})
        if d.get("content"):
            out.append({"kind": "content", "text": d["content"], "tokens": 1})
        for tc in d.get("tool_calls") or []:
            if tc["function"].get("name"):
                out.append({"kind": "tool_begin", "text": tc["function"]["name"]})
            if tc["function"].get("arguments"):
                out.append({"kind": "tool_args", "text": tc["function"]["arguments"], "tokens": 1})
        if ch.get("finish_reason"):
            out.append({"kind": "finish", "finish": "length" if ch["finish_reason"] == "length" else "stop"})
    return out


VOLATILE = {"id", "created", "created_at", "completed_at", "call_id", "signature", "encrypted_content", "item_id",
            "system_fingerprint", "usage", "output_tokens", "completion_tokens", "total_tokens", "reasoning_tokens",
            "phase"}


def normalize(x):
    if isinstance(x, dict):
        return {k: normalize(v) for k, v in x.items() if k not in VOLATILE}
    if isinstance(x, list):
        return [normalize(v) for v in x]
    return x


def parse_sse(text):
    events = []
    for block in text.split("\n\n"):
        data = [line[6:] for line in block.split("\n") if line.startswith("data: ")]
        if data and data[0] != "[DONE]":
            events.append(json.loads(data[0]))
    return events


@pytest.mark.parametrize("name", sorted(OUTPUTS))
@pytest.mark.parametrize("protocol", ["chat", "responses", "messages"])
@pytest.mark.parametrize("thinking", [True, False])
def test_stream_and_response_match_official_generators(protocol, name, thinking):
    chunks = OUTPUTS[name]
    if not thinking:
        chunks = [c for c in chunks if c != "</think>"]
    if protocol == "chat":
        body = {"model": MODEL, "messages": U, "tools": [TOOL], "stream": True,
                "thinking": {"type": "enabled" if thinking else "disabled"}}
    elif protocol == "responses":
        body = {"model": MODEL, "input": "hi", "tools": [RTOOL], "stream": True,
                "reasoning": {"effort": "high" if thinking else "none"}}
    else:
        body = {"model": MODEL, "max_tokens": 100, "messages": U, "tools": [MTOOL], "stream": True,
                "thinking": {"type": "enabled" if thinking else "disabled"}}
    chat_body = {"model": MODEL, "messages": U, "tools": [TOOL], "stream": True,
                 "thinking": {"type": "enabled" if thinking else "disabled"}}
    segments = segments_from_chat(oracle_run("chat", chat_body, chunks)[0])
    ref_events, ref_full = oracle_run(protocol, body, chunks)
    mine = json.loads(run_tool("stream", json.dumps({"protocol": protocol, "body": body, "id": "rid", "created": 123,
                                                      "events": segments})))
    my_events = parse_sse(mine["sse"])
    ref_events = [e for e in ref_events if e.get("type") != "ping"]
    my_events = [e for e in my_events if e.get("type") != "ping"]
    assert normalize(my_events) == normalize(ref_events)
    assert normalize(mine["response"]) == normalize(ref_full)


# ---- raw model text end to end: the output parser + event projection + encoders ------------

def split_every_char(chunks):
    return [ch for c in chunks for ch in c]


TEXT_CASES = {
    "think_tool_stop": (["I should", " call.", "</think>", "Sure.", DSML_CALL], {}),
    "stop_in_answer": (["thinking STOP here", "</think>", "The answer ", "is 4", "2. STOP and more"],
                       {"chat": {"stop": ["STOP"]}, "messages": {"stop_sequences": ["STOP"]}}),
    "leading_newlines": (["\n\nplan", "\n</think>", "\n\nresult\n"], {}),
    "length": (["a", "b", "c"], {"finish": "length"}),
    # the limit inside a call, after its name / after a whole call: "length", not tool calls
    "length_in_call": (["I will", DSML_CALL[:DSML_CALL.index("<｜DSML｜parameter name=\"days\"")]], {"finish": "length"}),
    "length_after_call": (["I will", DSML_CALL], {"finish": "length"}),
    "custom_tool": (["Patching.", "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"apply_patch\">\n<｜DSML｜parameter "
                     "name=\"input\" string=\"true\">*** Begin Patch\n\"q\" \\ caf\u00e9 \U0001F600\n*** End"
                     "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"], {}),
}


TEXT_PARAMS = [(c, p, s) for c in sorted(TEXT_CASES) for p in ("chat", "responses", "messages")
               for s in ("chunks", "chars") if not (p == "responses" and c == "stop_in_answer")]  # no stop there


@pytest.mark.parametrize("case,protocol,split", TEXT_PARAMS)
def test_raw_text_through_parser_matches_official_processor(case, protocol, split):
    chunks, extra = TEXT_CASES[case]
    if split == "chars":
        chunks = split_every_char(chunks)
    finish = extra.get("finish", "stop")
    if protocol == "chat":
        body = {"model": MODEL, "messages": U, "tools": [TOOL], "stream": True, **extra.get("chat", {})}
    elif protocol == "responses":
        body = {"model": MODEL, "input": "hi", "tools": [RTOOL, {"type": "custom", "name": "apply_patch"}],
                "stream": True}
    else:
        body = {"model": MODEL, "max_tokens": 100, "messages": U, "tools": [MTOOL], "stream": True,
                **extra.get("messages", {})}
    compare_text_run(protocol, body, chunks, finish)


def compare_text_run(protocol, body, chunks, finish):
    """Raw model text through our parser + encoders and through the official processor."""
    ref_events, ref_full = oracle_run(protocol, body, chunks, finish)
    mine = json.loads(run_tool("text", json.dumps({"protocol": protocol, "body": body, "id": "rid", "created": 123,
                                                    "prompt_tokens": 10, "cache_hit_tokens": 4, "chunks": chunks,
                                                    "finish": finish})))
    drop = VOLATILE - {"usage", "output_tokens", "completion_tokens", "total_tokens"}

    def norm(x):
        if isinstance(x, dict):
            return {k: norm(v) for k, v in x.items() if k not in drop and k != "reasoning_tokens"
                    and k != "completion_tokens_details"}
        if isinstance(x, list):
            return [norm(v) for v in x]
        return x
    my_events = merge_deltas([e for e in parse_sse(mine["sse"]) if e.get("type") != "ping"])
    ref_events = merge_deltas([e for e in ref_events if e.get("type") != "ping"])
    assert norm(my_events) == norm(ref_events)
    assert norm(mine["response"]) == norm(ref_full)


PREFIX_MESSAGES = [{"role": "assistant", "content": "The answer", "prefix": True},
                   {"role": "assistant", "content": "", "reasoning_content": "Let me", "prefix": True},
                   {"role": "assistant", "content": "", "prefix": True},
                   {"role": "assistant", "content": "", "reasoning_content": "", "prefix": True}]


@pytest.mark.parametrize("thinking", ["enabled", "disabled"])
@pytest.mark.parametrize("prefix", range(len(PREFIX_MESSAGES)))
def test_prefix_continuation_matches_official_processor(prefix, thinking):
    # Issue 19 item 11: the output of a prefix continues it; a leading newline is kept there and
    # a reasoning prefix goes on as reasoning until </think>.
    body = {"model": MODEL, "messages": U + [PREFIX_MESSAGES[prefix]], "stream": True, "thinking": {"type": thinking}}
    for chunks in (["\n\n is", " 42", "</think>", "\nok"], ["\nmore", " thought", "</think>", "\n\nanswer"]):
        compare_text_run("chat", body, chunks, "stop")


def test_integers_between_2_63_and_2_64_refused():
    # deliberate divergence: the official parser keeps them exact (u64); jansson cannot hold
    # them, and turning them into doubles would change their digits, so they are refused
    body = {"model": MODEL, "messages": U, "tools": [fn_tool({"type": "object", "properties": {"a": {
        "type": "integer", "maximum": 2 ** 63}}})]}
    mine = json.loads(run_tool("convert", json.dumps({"protocol": "chat", "body": json.dumps(body)}) + "\n"))
    assert not mine["ok"] and "2^63 to 2^64-1" in mine["message"], mine


def test_nul_limits():
    # deliberate divergences: a NUL in an object key (jansson cannot hold it) or in a stop
    # sequence (the output matcher works on C strings) is refused with a message saying so;
    # the official conversion accepts both
    bodies = [{"model": MODEL, "messages": U, "metadata": {"k\x00": 1}},
              {"model": MODEL, "messages": U, "stop": ["a\x00"]}]
    lines = run_tool("convert", "".join(json.dumps({"protocol": "chat", "body": json.dumps(b)}) + "\n" for b in bodies))
    got = [json.loads(line) for line in lines.splitlines()]
    assert not got[0]["ok"] and "NUL" in got[0]["message"], got[0]
    assert not got[1]["ok"] and "\\u0000" in got[1]["message"], got[1]


def test_responses_echo_keeps_nul():
    body = {"model": MODEL, "input": "hi", "instructions": "i\x00j\U0010FFFF0", "stream": False}
    _, ref_full = oracle_run("responses", body, ["ok"])
    mine = json.loads(run_tool("text", json.dumps({"protocol": "responses", "body": json.dumps(body), "id": "rid",
                                                    "created": 123,
                                                    "prompt_tokens": 10, "cache_hit_tokens": 4, "chunks": ["ok"],
                                                    "finish": "stop"})))
    assert mine["response"]["instructions"] == ref_full["instructions"] == "i\x00j\U0010FFFF0"


def test_strict_flags_without_effect_refused():
    # a deliberate divergence: the official conversion accepts a Messages tool's strict and does
    # nothing with it; deepinfer refuses a flag it cannot honour, naming it.  (A json_schema's
    # strict is honoured: the output is constrained to the schema, test_api_constraint.py.)
    bodies = [("messages", {"model": MODEL, "max_tokens": 10, "messages": U,
                            "tools": [{"name": "f", "input_schema": OBJ, "strict": True}]})]
    lines = run_tool("convert", "".join(json.dumps({"protocol": p, "body": json.dumps(b)}) + "\n" for p, b in bodies))
    for line in lines.splitlines():
        mine = json.loads(line)
        assert not mine["ok"] and "strict" in mine["message"], mine


def test_prefix_on_other_roles_refused():
    # deliberate divergence: the official conversion drops "prefix" here without a word
    bodies = [{"model": MODEL, "messages": [{"role": "user", "content": "q", "prefix": True}]},
              {"model": MODEL, "messages": [{"role": "system", "content": "s", "prefix": True}] + U}]
    for line in run_tool("convert", "".join(json.dumps({"protocol": "chat", "body": b}) + "\n" for b in bodies)).splitlines():
        mine = json.loads(line)
        assert not mine["ok"] and "prefix" in mine["message"], mine


def delta_key(e):
    """(kind, field) of a pure text delta event whose consecutive runs may be merged, else None.
    How finely text is cut into deltas is not part of any protocol: clients concatenate them."""
    if "choices" in e:
        ch = e["choices"][0]
        d = ch["delta"]
        if ch["finish_reason"] is not None or "role" in d:
            return None
        if set(d) <= {"content", "reasoning_content"}:
            if d.get("reasoning_content"):
                return ("chat", "reasoning_content")
            if d.get("content"):
                return ("chat", "content")
            return None
        calls = d.get("tool_calls")
        if calls and set(d) == {"tool_calls"} and set(calls[0]) == {"index", "function"}:
            return ("chat_args", calls[0]["index"])
        return None
    t = e.get("type", "")
    if t in ("response.output_text.delta", "response.reasoning_text.delta", "response.function_call_arguments.delta"):
        return (t, e.get("output_index"))
    if t == "content_block_delta" and e["delta"]["type"] in ("text_delta", "thinking_delta", "input_json_delta"):
        return (t, e["index"], e["delta"]["type"])
    return None


def merge_deltas(events):
    out = []
    for e in events:
        k = delta_key(e)
        if k is not None and out and delta_key(out[-1]) == k:
            prev = json.loads(json.dumps(out[-1]))
            if k[0] == "chat":
                prev["choices"][0]["delta"][k[1]] += e["choices"][0]["delta"][k[1]]
            elif k[0] == "chat_args":
                prev["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"] += \
                    e["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
            elif k[0] == "content_block_delta":
                field = {"text_delta": "text", "thinking_delta": "thinking", "input_json_delta": "partial_json"}[k[2]]
                prev["delta"][field] += e["delta"][field]
            else:
                prev["delta"] += e["delta"]
            out[-1] = prev
        else:
            out.append(e)
    for i, e in enumerate(out):  # sequence numbers are renumbered after merging
        if "sequence_number" in e:
            e["sequence_number"] = i
    return out
