"""test_api_constraint.py — the output constraint the server derives from a request equals the
official deepseek-recipe package's InferenceOptions.output_constraint (kind and schema text, key
order included) over every request of the conversion oracle plus constraint-specific ones; and
vLLM's structured_outputs extra, which the official conversion does not know, is read as vLLM
reads it."""
import json

import pytest

from test_api_oracle import CASES, MODEL, TOOL, RTOOL, MTOOL, chat, msgs, oracle_convert, resp, run_tool

dr = pytest.importorskip("deepseek_recipe")

J = [{"role": "user", "content": "answer in json"}]
OBJ = {"type": "object", "properties": {"a": {"type": "string"}, "n": {"type": "integer"}}}
NESTED = {"type": "object", "properties": {"p": {"type": "object", "properties": {"q": {"type": "boolean"}}},
                                           "r": {"type": "array", "items": {"enum": [1, "x"]}}}}
STRICT_TOOL = {"type": "function", "function": {"name": "f", "strict": True, "description": "d",
                                                "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}
NO_THINK = {"thinking": {"type": "disabled"}}

CONSTRAINT_CASES = [
    chat(messages=J, response_format={"type": "json_object"}),
    chat(messages=J, response_format={"type": "json_object"}, **NO_THINK),
    chat(messages=J, response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": OBJ}}),
    chat(messages=J, response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": NESTED}}),
    chat(messages=J, response_format={"type": "json_schema", "json_schema": {"name": "n", "strict": True, "schema": OBJ}}),
    chat(messages=J, response_format={"type": "json_schema", "json_schema": {"name": "n", "strict": True,
                                                                           "schema": NESTED}}),
    chat(messages=J, response_format={"type": "json_schema", "json_schema": {"name": "n", "strict": False, "schema": OBJ}}),
    chat(response_format={"type": "regex", "regex": "[a-z]+ [0-9]{2}"}),
    chat(response_format={"type": "text"}),
    chat(tools=[TOOL]), chat(tools=[TOOL], tool_choice="none"), chat(tools=[TOOL], tool_choice="auto"),
    chat(tools=[TOOL], tool_choice="required", **NO_THINK),
    chat(tools=[TOOL, STRICT_TOOL], **NO_THINK),
    chat(tools=[STRICT_TOOL], tool_choice={"type": "function", "function": {"name": "f"}}, **NO_THINK),
    chat(tools=[{"type": "function", "function": {"name": "g"}}]),
    resp(input="json please", text={"format": {"type": "json_object"}}),
    resp(input="json please", text={"format": {"type": "json_schema", "name": "n", "schema": OBJ}}),
    resp(input="json please", text={"format": {"type": "json_schema", "name": "n", "schema": OBJ, "strict": True}}),
    chat(messages=J, response_format={"type": "json_schema", "json_schema": {"name": "n", "strict": True,
                                                                           "schema": {"type": "object"}}}),
    resp(text={"format": {"type": "text"}}), resp(tools=[RTOOL]), resp(tools=[dict(RTOOL, strict=True)]),
    resp(tools=[RTOOL], tool_choice="required", reasoning={"effort": "none"}),
    # (not tool_choice {"type": "any"}: the official conversion serves it as auto, deepinfer requires a
    # call, in the prompt as well; a conversion difference left to test_api_oracle's owners)
    msgs(tools=[MTOOL]),
    msgs(tools=[MTOOL], tool_choice={"type": "tool", "name": "get_weather"}, thinking={"type": "disabled"}),
]


def ordered(kind, text):
    """JSON texts compared as parsed, key order included; a regex as written."""
    if kind == "regex" or not text:
        return text
    return json.loads(text, object_pairs_hook=lambda pairs: [list(p) for p in pairs])


def convert(cases):
    payload = "".join(json.dumps({"protocol": p, "body": json.dumps(b)}) + "\n" for p, b in cases)
    return [json.loads(line) for line in run_tool("convert", payload).splitlines()]


def test_constraint_matches_official_output_constraint():
    cases = CASES + CONSTRAINT_CASES
    ours = convert(cases)
    compared, constrained, mismatches = 0, 0, []
    for i, ((protocol, body), mine) in enumerate(zip(cases, ours)):
        ref, err = oracle_convert(protocol, body)
        if i >= len(CASES) and (ref is not None) != mine["ok"]:
            mismatches.append(f"{protocol} {json.dumps(body)[:200]}: official {err or 'accepts'}, ours "
                              f"{mine.get('message') or 'accepts'}")
        if ref is None or not mine["ok"]:
            continue  # acceptance of the oracle's own cases is test_api_oracle's subject
        if any(t.get("type") == "custom" for t in body.get("tools") or []):
            continue  # the official conversion takes only apply_patch, with its own schema (params_of there)
        compared += 1
        want = ref.inference_options.output_constraint
        want = None if want is None else (want.kind, ordered(want.kind, want.schema))
        got = mine["options"]["output_constraint"]
        got = None if got is None else (got["kind"], ordered(got["kind"], got["schema"]))
        constrained += want is not None
        if want != got:
            mismatches.append(f"{protocol} {json.dumps(body)[:200]}:\n  official {want}\n  ours     {got}")
    assert not mismatches, "\n".join(mismatches)
    assert compared > 100 and constrained > 20


def test_vllm_structured_outputs_extra():
    cases = [chat(structured_outputs={"regex": "a|b"}),
             chat(structured_outputs={"json": OBJ}),
             chat(structured_outputs={"json": json.dumps(OBJ)}),
             chat(structured_outputs={"grammar": 'root ::= "x"'}),
             chat(structured_outputs={"choice": ["yes", 'say "no"\\']}),
             ("completions", {"model": MODEL, "prompt": "p", "structured_outputs": {"regex": "[0-9]+"}}),
             chat(structured_outputs={"regex": "a", "grammar": "root ::= \"a\""}),
             chat(structured_outputs={"yaml": "a"}),
             chat(structured_outputs={"choice": []}),
             chat(messages=J, structured_outputs={"regex": "a"}, response_format={"type": "json_object"})]
    out = convert(cases)
    so = [o["options"]["structured_outputs"] if o["ok"] else o["message"] for o in out]
    assert so[0] == {"type": 1, "text": "a|b"}
    assert so[1] == {"type": 2, "text": json.dumps(OBJ, separators=(",", ":"))}
    assert so[2] == {"type": 2, "text": json.dumps(OBJ)}
    assert so[3] == {"type": 3, "text": 'root ::= "x"'}
    assert so[4] == {"type": 3, "text": 'root ::= "yes" | "say \\"no\\"\\\\"'}
    assert so[5] == {"type": 1, "text": "[0-9]+"}
    assert "exactly one" in so[6] and out[6]["status"] == 400
    assert "unsupported key 'yaml'" in so[7]
    assert "choice" in so[8]
    assert "already constrains" in so[9]
