"""test_structured_outputs.py — SamplingParams(so_args=...) / structured_outputs= through the
Python LLM API on the built-in random tiny model (random weights: the hardest client), for many
seeds and randomly generated regexes, JSON Schemas and grammars.  Every output that ends (EOS)
must be accepted by an independent checker: Python `re.fullmatch`, `jsonschema`, `lark`."""
import json
import random
import re

import jsonschema
import lark
import pytest

from deepinfer import LLM, SamplingParams
from deepinfer.llm import DeepInferError


@pytest.fixture(scope="module")
def llm():
    engine = LLM(seed=3)
    yield engine
    engine.close()


def generate(llm, seed, max_tokens=48, **so):
    sp = SamplingParams(max_tokens=max_tokens, seed=seed, temperature=1.0, **so)
    return llm.generate("Answer:", sp)[0].outputs[0]


# ---- regex ----------------------------------------------------------------------------------

def random_regex(rng):
    atoms = ["[a-f]", "[0-9]", "x", "(ab|cd)", "[A-Z]", "-", "\\.", "(yes|no)"]
    parts = []
    for _ in range(rng.randint(1, 4)):
        atom = rng.choice(atoms)
        lo = rng.randint(0, 2)
        parts.append(rng.choice([atom, f"{atom}{{{lo},{lo + rng.randint(0, 3)}}}", f"{atom}?"]))
    return "".join(parts)


def test_random_regexes_fullmatch(llm):
    rng = random.Random(1)
    ended = 0
    for seed in range(60):
        pattern = random_regex(rng)
        out = generate(llm, seed, so_args={"schema_type": "regex", "schema": pattern})
        assert out.finish_reason in ("stop", "length"), (pattern, out)
        if out.finish_reason == "stop":
            ended += 1
            assert re.fullmatch(pattern, out.text), (pattern, out.text)
    assert ended >= 50  # every pattern is bounded: EOS is forced once the match is complete


# ---- JSON Schema ----------------------------------------------------------------------------

def random_schema(rng, depth=0):
    kinds = ["boolean", "enum", "string", "integer", "const"] + (["object", "array"] if depth < 2 else [])
    kind = rng.choice(kinds)
    if kind == "boolean":
        return {"type": "boolean"}
    if kind == "enum":
        return {"enum": rng.sample(["red", "green", 1, 2.5, None, True], rng.randint(1, 3))}
    if kind == "const":
        return {"const": rng.choice(["k", 7, False])}
    if kind == "string":
        return {"type": "string", "maxLength": rng.randint(0, 4)}
    if kind == "integer":
        return {"type": "integer"}
    if kind == "array":
        lo = rng.randint(0, 2)
        return {"type": "array", "items": random_schema(rng, depth + 1), "minItems": lo, "maxItems": lo + 1}
    names = rng.sample(["a", "b", "c", "d"], rng.randint(1, 3))
    return {"type": "object", "properties": {n: random_schema(rng, depth + 1) for n in names},
            "required": rng.sample(names, rng.randint(0, len(names))), "additionalProperties": False}


def test_random_json_schemas_validate(llm):
    rng = random.Random(2)
    ended = 0
    for seed in range(40):
        schema = random_schema(rng)
        out = generate(llm, seed, max_tokens=96, so_args={"schema_type": "json_schema", "schema": schema})
        assert out.finish_reason in ("stop", "length"), (schema, out)
        if out.finish_reason == "stop":
            ended += 1
            jsonschema.validate(json.loads(out.text), schema)
    assert ended >= 30


def test_json_object_outputs_are_objects(llm):
    for seed in range(10):
        out = generate(llm, seed, max_tokens=64, structured_outputs={"json_object": True})
        assert out.text.startswith("{")
        if out.finish_reason == "stop":
            assert isinstance(json.loads(out.text), dict)


# ---- EBNF, checked by lark ------------------------------------------------------------------

def random_grammar(rng):
    """The same small grammar in GBNF (the constraint) and Lark (the checker) syntax."""
    words = ["a", "bc", "d", "ef", "-"]
    gbnf_items, lark_items = [], []
    for i in range(rng.randint(1, 3)):
        alts = rng.sample(words, rng.randint(1, 3))
        g_alt = "(" + " | ".join(json.dumps(w) for w in alts) + ")"
        l_alt = "(" + " | ".join(json.dumps(w) for w in alts) + ")"
        lo = rng.randint(0, 2)
        hi = lo + rng.randint(0, 2)
        form = rng.choice(["one", "opt", "rep"])
        if form == "one":
            gbnf_items.append(g_alt)
            lark_items.append(l_alt)
        elif form == "opt":
            gbnf_items.append(g_alt + "?")
            lark_items.append(l_alt + "?")
        else:
            gbnf_items.append(f"{g_alt}{{{lo},{hi}}}")
            lark_items.append(f"{l_alt}~{lo}..{hi}" if hi > 0 else "")
    gbnf = "root ::= item (\",\" item)?\nitem ::= " + " ".join(gbnf_items) + " \"!\""
    lark_src = "start: item (\",\" item)?\nitem: " + " ".join(x for x in lark_items if x) + " \"!\""
    return gbnf, lark.Lark(lark_src, parser="earley", lexer="dynamic")


def test_random_grammars_parse_with_lark(llm):
    rng = random.Random(3)
    ended = 0
    for seed in range(40):
        gbnf, checker = random_grammar(rng)
        out = generate(llm, seed, so_args={"schema_type": "ebnf", "schema": gbnf})
        if out.finish_reason == "stop":
            ended += 1
            checker.parse(out.text)  # raises on text outside the language
    assert ended >= 30


# ---- vLLM spelling, choice, errors -----------------------------------------------------------

def test_choice_picks_one_of_the_strings(llm):
    choices = ["positive", "negative", 'say "hi"\\n']
    seen = set()
    for seed in range(20):
        out = generate(llm, seed, structured_outputs={"choice": choices})
        assert out.finish_reason == "stop" and out.text in choices
        seen.add(out.text)
    assert len(seen) >= 2


def test_vllm_spelling_equals_so_args(llm):
    schema = {"type": "object", "properties": {"x": {"type": "boolean"}}, "required": ["x"]}
    for seed in range(5):
        a = generate(llm, seed, so_args={"schema_type": "json_schema", "schema": schema})
        b = generate(llm, seed, structured_outputs={"json": schema})
        assert a.token_ids == b.token_ids


def test_bad_inputs_are_clear_errors(llm):
    with pytest.raises(ValueError, match="not both"):
        SamplingParams(so_args={"schema_type": "regex", "schema": "a"}, structured_outputs={"regex": "a"})
    with pytest.raises(ValueError, match="schema_type"):
        SamplingParams(so_args={"schema_type": "yaml", "schema": "a"})
    with pytest.raises(ValueError, match="exactly one"):
        SamplingParams(structured_outputs={"regex": "a", "grammar": "root ::= \"a\""})
    with pytest.raises(ValueError, match="ignore_eos"):
        SamplingParams(ignore_eos=True, so_args={"schema_type": "regex", "schema": "a"})
    with pytest.raises(DeepInferError, match="patternProperties"):
        generate(llm, 0, so_args={"schema_type": "json_schema", "schema": {"patternProperties": {}}})
    with pytest.raises(DeepInferError, match="regex"):
        generate(llm, 0, so_args={"schema_type": "regex", "schema": "(unclosed"})
    with pytest.raises(DeepInferError, match="nope"):
        generate(llm, 0, so_args={"schema_type": "ebnf", "schema": "root ::= nope"})
    assert generate(llm, 0, so_args={"schema_type": "regex", "schema": "fine"}).text == "fine"


def llm_eos(llm):
    return {llm.tokenizer.special_id("<｜end▁of▁sentence｜>")}


def test_thinking_mode_constrains_the_answer_after_think(llm):
    """chat(thinking=True): the reasoning is free, the constraint starts after </think> (here
    forced after 3 reasoning tokens by the thinking budget)."""
    think_end = llm.tokenizer.special_id("</think>")
    for seed in range(6):
        sp = SamplingParams(max_tokens=32, seed=seed, thinking_token_budget=3,
                            so_args={"schema_type": "regex", "schema": "(yes|no)[.!]"})
        out = llm.chat([{"role": "user", "content": "ok?"}], sp, thinking=True)[0].outputs[0]
        ids = out.token_ids
        assert think_end in ids and ids.index(think_end) <= 3, ids
        assert out.finish_reason == "stop"
        # the answer's text: what follows the reasoning (the reasoning ids' own text comes first)
        assert re.search("(yes|no)[.!]$", out.text), out.text
        answer = ids[ids.index(think_end) + 1:-1]  # between </think> and EOS
        assert 1 <= len(answer) <= 4 and ids[-1] in llm_eos(llm), ids
