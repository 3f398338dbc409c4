"""Request parameters end to end (issue 19 item 6): `deepinfer serve` on the built-in tiny V4.1
model through the official OpenAI and Anthropic SDKs.  Every parameter is honoured (a test shows
its effect) or refused with a 400 that names it (README "Request parameters").

The tiny model's weights are random, so the tests compare runs with each other (greedy against
top_k=1, one seed against another), with the Python LLM API on the same prompt ids and seed
(the logprob oracle: the engine without the server), with Hugging Face `tokenizers` on the
model's tokenizer.json (token ids and bytes), and with `deepseek-recipe` (which values it
refuses)."""
import json
import math
import os
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from server_fixture import MODEL, Harness, Serve  # noqa: E402

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")
tokenizers = pytest.importorskip("tokenizers")
dr = pytest.importorskip("deepseek_recipe")

USER = [{"role": "user", "content": "hello tiny"}]
NO_THINK = {"thinking": {"type": "disabled"}}
BOS = "<\uff5cbegin\u2581of\u2581sentence\uff5c>"
EOS = "<\uff5cend\u2581of\u2581sentence\uff5c>"


@pytest.fixture(scope="module")
def server():
    with tempfile.TemporaryDirectory(prefix="deepinfer-params-") as cache:
        s = Serve(cache, "--context-limit", 4096)
        yield s
        assert s.stop() == 0


@pytest.fixture(scope="module")
def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def claude(server):
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def hf(server):
    return tokenizers.Tokenizer.from_file(os.path.join(server.model_dir, "tokenizer.json"))


def chat(oai, **kw):
    kw.setdefault("messages", USER)
    return oai.chat.completions.create(model=MODEL, **kw)


def complete(oai, **kw):
    kw.setdefault("prompt", "hello tiny")
    return oai.completions.create(model=MODEL, **kw)


def refused(call, *names):
    with pytest.raises(openai.BadRequestError) as e:
        call()
    for name in names:
        assert name in str(e.value), (name, str(e.value))


# ---- logprobs ------------------------------------------------------------------------------

def check_entry(e, top_n):
    """One Chat / Responses logprob entry: a log probability, the token's bytes, the n best in
    descending order whose probabilities sum to at most 1."""
    assert e.logprob <= 0 and len(e.top_logprobs) == top_n
    assert bytes(e.bytes).decode("utf-8", "replace") == e.token
    tops = [t.logprob for t in e.top_logprobs]
    assert tops == sorted(tops, reverse=True)
    assert sum(math.exp(x) for x in tops) <= 1 + 1e-5
    assert e.logprob <= tops[0] + 1e-6 if top_n else True


def test_chat_logprobs_cover_every_token_streamed_or_not(oai):
    kw = dict(max_tokens=12, seed=7, logprobs=True, top_logprobs=3)
    full = chat(oai, **kw)
    entries = full.choices[0].logprobs.content
    assert len(entries) == full.usage.completion_tokens  # reasoning and answer tokens
    for e in entries:
        check_entry(e, 3)
    streamed = [e for chunk in chat(oai, stream=True, **kw) if chunk.choices and chunk.choices[0].logprobs
                for e in chunk.choices[0].logprobs.content]
    assert [(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in entries]
    assert chat(oai, max_tokens=4, seed=7).choices[0].logprobs is None


def test_greedy_token_is_the_best_alternative(oai):
    out = chat(oai, max_tokens=8, temperature=0, logprobs=True, top_logprobs=1, extra_body=NO_THINK)
    for e in out.choices[0].logprobs.content:
        assert e.token == e.top_logprobs[0].token and e.logprob == e.top_logprobs[0].logprob


def test_completions_logprobs_match_the_python_llm_api(oai, server, hf):
    from deepinfer import LLM, SamplingParams
    out = complete(oai, max_tokens=6, seed=11, logprobs=4, extra_body={"ignore_eos": True})
    lp = out.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 6
    offsets = [0]
    for t in lp.tokens[:-1]:
        offsets.append(offsets[-1] + len(t))
    assert lp.text_offset == offsets
    ids = [hf.token_to_id(BOS)] + hf.encode("hello tiny", add_special_tokens=False).ids
    with LLM(server.model_dir) as llm:
        ref = llm.generate({"prompt_token_ids": ids},
                           SamplingParams(max_tokens=6, seed=11, logprobs=4, ignore_eos=True))[0].outputs[0]
    for k, (tok, entry) in enumerate(zip(ref.token_ids, ref.logprobs)):
        assert lp.token_logprobs[k] == pytest.approx(entry[tok].logprob, abs=1e-5)
        assert lp.tokens[k] == hf.decode([tok], skip_special_tokens=False)
        best = max(x.logprob for x in entry.values() if x.rank is not None)
        assert max(lp.top_logprobs[k].values()) == pytest.approx(best, abs=1e-5)


def test_responses_logprobs_on_output_text(oai):
    r = oai.responses.create(model=MODEL, input="hello tiny", max_output_tokens=10, top_logprobs=2,
                             reasoning={"effort": "none"}, extra_body={"seed": 3})
    texts = [c for item in r.output if item.type == "message" for c in item.content if c.type == "output_text"]
    assert texts and texts[0].logprobs
    for e in texts[0].logprobs:
        check_entry(e, 2)
    assert bytes(b for e in texts[0].logprobs for b in e.bytes).decode("utf-8", "replace").startswith(texts[0].text)
    deltas = [e for ev in oai.responses.create(model=MODEL, input="hello tiny", max_output_tokens=10, top_logprobs=2,
                                               reasoning={"effort": "none"}, stream=True, extra_body={"seed": 3})
              if ev.type == "response.output_text.delta" for e in ev.logprobs]
    assert [(e.token, e.logprob) for e in deltas] == [(e.token, e.logprob) for e in texts[0].logprobs]


def test_logprob_ranges_follow_deepseek_recipe(oai):
    def official(cls, body):
        try:
            cls(json.dumps(body)).convert(dr.ConversionOptions())
            return None
        except (dr.ConversionError, ValueError) as e:
            return str(e)
    for extra in ({"logprobs": True, "top_logprobs": 20}, {"logprobs": True, "top_logprobs": 21},
                  {"top_logprobs": 2}, {"logprobs": False, "top_logprobs": 0}):
        if official(dr.ChatCompletionRequest, {"model": MODEL, "messages": USER, **extra}) is None:
            assert chat(oai, max_tokens=1, **extra).choices
        else:
            refused(lambda: chat(oai, max_tokens=1, **extra), "top_logprobs")
    for top in (0, 20, 21):
        call = lambda: oai.responses.create(model=MODEL, input="x", max_output_tokens=1, top_logprobs=top)  # noqa: E731
        if official(dr.ResponsesRequest, {"model": MODEL, "input": "x", "top_logprobs": top}) is None:
            assert call().output is not None
        else:
            refused(call, "top_logprobs")


# ---- output limit and sampling fields ------------------------------------------------------

def test_max_completion_tokens_caps_the_output(oai):
    out = chat(oai, max_completion_tokens=3, extra_body={"ignore_eos": True})
    assert out.usage.completion_tokens == 3 and out.choices[0].finish_reason == "length"
    assert chat(oai, max_tokens=5, max_completion_tokens=2).usage.completion_tokens <= 2


def test_seed_reproduces_and_seeds_differ(oai):
    a = [complete(oai, max_tokens=12, seed=s, extra_body={"ignore_eos": True}).choices[0].text for s in (1, 1, 2)]
    assert a[0] == a[1] and a[0] != a[2]


def test_top_k_1_and_min_p_1_are_greedy(oai):
    greedy = complete(oai, max_tokens=12, temperature=0, extra_body={"ignore_eos": True}).choices[0].text
    for seed in (1, 2):
        for extra in ({"top_k": 1}, {"min_p": 1.0}):
            out = complete(oai, max_tokens=12, temperature=1, seed=seed, extra_body={"ignore_eos": True, **extra})
            assert out.choices[0].text == greedy, extra
    sampled = {complete(oai, max_tokens=12, temperature=1, seed=s, extra_body={"ignore_eos": True}).choices[0].text
               for s in (1, 2)}
    assert sampled != {greedy}


def test_repetition_penalty_changes_greedy_output(oai):
    base = complete(oai, max_tokens=24, temperature=0, extra_body={"ignore_eos": True})
    pen = complete(oai, max_tokens=24, temperature=0, extra_body={"ignore_eos": True, "repetition_penalty": 1.9})
    assert base.choices[0].text != pen.choices[0].text


def test_logit_bias_forces_a_token(oai, hf):
    tid = hf.token_to_id("a")
    assert tid is not None
    out = complete(oai, max_tokens=5, seed=4, logit_bias={str(tid): 100}, logprobs=0,
                   extra_body={"ignore_eos": True})
    assert out.choices[0].text == "a" * 5
    out = chat(oai, max_tokens=4, seed=4, logit_bias={str(tid): 100}, extra_body=NO_THINK)
    assert out.choices[0].message.content == "a" * 4
    refused(lambda: complete(oai, max_tokens=1, logit_bias={"99999999": 5}), "logit_bias", "vocabulary")
    refused(lambda: complete(oai, max_tokens=1, logit_bias={str(tid): 101}), "logit_bias")


def test_min_tokens_suppresses_eos_and_ignore_eos_runs_to_the_limit(oai, hf):
    eos = {str(hf.token_to_id(EOS)): 100}  # EOS at once unless suppressed
    first = complete(oai, max_tokens=10, logit_bias=eos)
    assert first.usage.completion_tokens == 1 and first.choices[0].finish_reason == "stop"
    later = complete(oai, max_tokens=10, logit_bias=eos, extra_body={"min_tokens": 4})
    assert later.usage.completion_tokens == 5 and later.choices[0].finish_reason == "stop"
    never = complete(oai, max_tokens=6, logit_bias=eos, extra_body={"ignore_eos": True})
    assert never.usage.completion_tokens == 6 and never.choices[0].finish_reason == "length"


def test_stop_token_ids_end_the_output(oai, hf):
    a = hf.token_to_id("a")
    forced = {"logit_bias": {str(a): 100}}  # every token is "a" unless masked
    out = complete(oai, max_tokens=8, extra_body={**forced, "stop_token_ids": [a]})
    assert (out.choices[0].text, out.usage.completion_tokens, out.choices[0].finish_reason) == ("", 1, "stop")
    # min_tokens masks the stop ids as it masks EOS: 3 other tokens, then "a" ends the output
    out = complete(oai, max_tokens=8, logprobs=0, extra_body={**forced, "stop_token_ids": [a], "min_tokens": 3})
    assert out.usage.completion_tokens == 4 and out.choices[0].finish_reason == "stop"
    assert "a" not in out.choices[0].logprobs.tokens[:3] and len(out.choices[0].text) > 0
    out = chat(oai, max_tokens=8, extra_body={**forced, **NO_THINK, "stop_token_ids": [a]})
    assert out.choices[0].message.content == "" and out.usage.completion_tokens == 1
    # without the stop id the same request runs to its limit
    assert complete(oai, max_tokens=8, extra_body={**forced, "ignore_eos": True}).choices[0].text == "a" * 8
    refused(lambda: complete(oai, max_tokens=1, extra_body={"stop_token_ids": [99999999]}),
            "stop_token_ids", "vocabulary")
    refused(lambda: complete(oai, max_tokens=1, extra_body={"stop_token_ids": ["a"]}), "stop_token_ids[0]")


def test_vllm_detokenizer_switches_only_at_this_servers_behaviour(oai):
    ok = {"skip_special_tokens": True, "spaces_between_special_tokens": True, "include_stop_str_in_output": False}
    assert complete(oai, max_tokens=1, extra_body=ok).choices
    for key, value in (("skip_special_tokens", False), ("spaces_between_special_tokens", False),
                       ("include_stop_str_in_output", True)):
        refused(lambda: complete(oai, max_tokens=1, extra_body={key: value}), key)


def test_fake_backend_refuses_token_level_fields():
    """The scripted test backend has no vocabulary: it refuses what it cannot honour by name."""
    h = Harness()
    try:
        client = openai.OpenAI(base_url=h.url + "/v1", api_key="unused", max_retries=0, timeout=30)
        refused(lambda: chat(client, max_tokens=4, logprobs=True), "logprobs", "tokenizer")
        refused(lambda: complete(client, max_tokens=4, logprobs=1), "logprobs")
        refused(lambda: complete(client, max_tokens=4, logit_bias={"1": 5}), "logit_bias")
        refused(lambda: complete(client, max_tokens=4, extra_body={"stop_token_ids": [1]}), "stop_token_ids")
        refused(lambda: chat(client, max_tokens=4, extra_body={"thinking": {"type": "enabled", "budget_tokens": 2}}),
                "budget_tokens")
        assert chat(client, max_tokens=4).choices[0].message.reasoning_content == "Thinking about: hello tiny"
    finally:
        assert h.stop()[0] == 0


def test_anthropic_top_k_1_is_greedy(claude):
    def text(**extra):  # this SDK has no temperature / top_k arguments: the body carries them
        m = claude.messages.create(model=MODEL, max_tokens=10, messages=USER, thinking={"type": "disabled"},
                                   extra_body=extra)
        return "".join(b.text for b in m.content if b.type == "text")
    greedy = text(temperature=0)
    assert text(temperature=1, top_k=1, seed=1) == greedy
    assert text(temperature=1, top_k=1, seed=2) == greedy
    assert {text(temperature=1, seed=1), text(temperature=1, seed=2)} != {greedy}


def test_anthropic_tool_choice_any_renders_a_required_call(claude, hf):
    """tool_choice any = required: the prompt is the one deepseek-recipe renders for a required
    call (the tool-call block opened after the assistant header), counted in tokens; the call
    itself is constrained to the tool's schema (test_server_tool_grammar.py)."""
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}

    def served(choice):
        m = claude.messages.create(model=MODEL, max_tokens=1, messages=USER, thinking={"type": "disabled"},
                                   tools=[{"name": "get_weather", "description": "w", "input_schema": schema}],
                                   tool_choice=choice)
        return m.usage.input_tokens

    def recipe(choice):
        body = {"model": MODEL, "messages": USER, "thinking": {"type": "disabled"}, "tool_choice": choice,
                "tools": [{"type": "function", "function": {"name": "get_weather", "description": "w",
                                                            "parameters": schema}}]}
        conv = dr.ChatCompletionRequest(body).convert(dr.ConversionOptions()).conversation
        assert conv.tool_choice == choice
        prompt = dr.DeepseekV41Encoding().render_conversation(conv).prompt
        return len(hf.encode(prompt, add_special_tokens=False).ids)

    required, auto = recipe("required"), recipe("auto")
    assert required > auto
    assert served({"type": "any"}) == required
    assert served({"type": "auto"}) == auto


# ---- reasoning budget ----------------------------------------------------------------------

def test_thinking_budget_ends_the_reasoning(oai, claude):
    def run(**extra):
        out = chat(oai, max_tokens=40, seed=5, logprobs=True, extra_body=extra)
        tokens = [e for e in out.choices[0].logprobs.content]
        at = next((i for i, e in enumerate(tokens) if e.token == "</think>"), len(tokens))
        return out, tokens, at
    _, _, free = run()
    assert free > 3  # without a budget the tiny model reasons longer (the test can fail)
    out, tokens, at = run(thinking={"type": "enabled", "budget_tokens": 3})
    assert at == 3 and out.usage.completion_tokens_details.reasoning_tokens <= 3
    reasoning = bytes(b for e in tokens[:at] for b in e.bytes).decode("utf-8", "replace")
    assert out.choices[0].message.reasoning_content == reasoning
    # Anthropic: the same conversation, seed and budget give the same thinking block
    m = claude.messages.create(model=MODEL, max_tokens=40, messages=USER,
                               thinking={"type": "enabled", "budget_tokens": 3}, extra_body={"seed": 5})
    assert [b.thinking for b in m.content if b.type == "thinking"] == [reasoning]
    # vLLM's spelling (Chat, Responses): the same budget, the same reasoning; the lower of two wins
    vllm, _, at = run(thinking_token_budget=3)
    assert at == 3 and vllm.choices[0].message.reasoning_content == reasoning
    _, _, at = run(thinking={"type": "enabled", "budget_tokens": 9}, thinking_token_budget=3)
    assert at == 3
    r = oai.responses.create(model=MODEL, input=USER, max_output_tokens=40,
                             extra_body={"seed": 5, "thinking_token_budget": 3})
    assert [c.text for o in r.output if o.type == "reasoning" for c in o.content] == [reasoning]
    refused(lambda: complete(oai, max_tokens=1, extra_body={"thinking_token_budget": 3}), "thinking_token_budget")
    refused(lambda: chat(oai, max_tokens=1, extra_body={"thinking_token_budget": -1}), "thinking_token_budget")


# ---- refusals ------------------------------------------------------------------------------

def test_unsupported_fields_are_refused_by_name(oai, claude):
    refused(lambda: complete(oai, max_tokens=1, echo=True), "echo")
    refused(lambda: complete(oai, max_tokens=1, best_of=2), "best_of")
    refused(lambda: complete(oai, max_tokens=1, suffix="end"), "suffix")
    refused(lambda: complete(oai, max_tokens=1, n=2), "n = 1")
    refused(lambda: chat(oai, max_tokens=1, n=2), "n = 1")
    refused(lambda: chat(oai, max_tokens=1, extra_body={"use_beam_search": True}), "use_beam_search")
    refused(lambda: chat(oai, max_tokens=1, store=True), "store")
    refused(lambda: chat(oai, max_tokens=1, modalities=["audio"]), "modalities")
    refused(lambda: oai.responses.create(model=MODEL, input="x", max_output_tokens=1, background=True), "background")
    refused(lambda: oai.responses.create(model=MODEL, input="x", max_output_tokens=1,
                                         include=["file_search_call.results"]), "include")
    for kw in ({"extra_body": {"bogus": 1}}, {"extra_body": {"min_p": 0.5}}):
        with pytest.raises(anthropic.BadRequestError) as e:
            claude.messages.create(model=MODEL, max_tokens=1, messages=USER, **kw)
        assert next(iter(kw["extra_body"])) in str(e.value)
    # accepted at the values that ask for nothing
    assert complete(oai, max_tokens=1, echo=False, best_of=1).choices
    assert chat(oai, max_tokens=1, user="u", store=False, parallel_tool_calls=True).choices


# ---- nested fields -------------------------------------------------------------------------

TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}


def anthropic_refused(call, name):
    with pytest.raises(anthropic.BadRequestError) as e:
        call()
    assert name in str(e.value), (name, str(e.value))


def test_nested_fields_are_refused_by_full_path(oai):
    refused(lambda: chat(oai, max_tokens=1, stream=True, stream_options={"include_obfuscation": True}),
            "stream_options.include_obfuscation")
    refused(lambda: chat(oai, max_tokens=1, messages=[{"role": "user", "content": "hi", "name": "bob"}]),
            "messages[0].name")
    refused(lambda: chat(oai, max_tokens=1, messages=[{"role": "user", "content": [
        {"type": "text", "text": "hi", "bogus": 1}]}]), "messages[0].content[0].bogus")
    # a strict json_schema is normalised as the official conversion does (an object needs properties)
    refused(lambda: chat(oai, max_tokens=1, response_format={
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}, "strict": True}}),
        "An object with no properties is not allowed")
    refused(lambda: chat(oai, max_tokens=1, extra_body={"thinking": {"type": "enabled", "bogus": 1}}),
            "thinking.bogus")
    refused(lambda: chat(oai, max_tokens=1, tools=[TOOL], extra_body=NO_THINK,
                         tool_choice={"type": "function", "function": {"name": "f", "bogus": 1}}),
            "tool_choice.function.bogus")
    refused(lambda: complete(oai, max_tokens=1, stream=True, stream_options={"bogus": True}), "stream_options.bogus")
    respond = oai.responses.create
    refused(lambda: respond(model=MODEL, input="x", max_output_tokens=1, text={"verbosity": "low"}), "text.verbosity")
    refused(lambda: respond(model=MODEL, input="x", max_output_tokens=1, reasoning={"summary": "detailed"}),
            "reasoning.summary")
    refused(lambda: respond(model=MODEL, input=[{"role": "user", "content": "x", "bogus": 1}], max_output_tokens=1),
            "input[0].bogus")
    refused(lambda: respond(model=MODEL, input="x", max_output_tokens=1, text={"format": {
        "type": "json_schema", "name": "x", "schema": {"type": "object"}, "strict": True}}),
        "An object with no properties is not allowed")
    # the values that ask for nothing pass, and the honoured ones (json_schema outputs are
    # constrained, strict ones normalised as the official conversion does)
    assert chat(oai, max_tokens=1, stream=True, stream_options={"include_usage": True, "include_obfuscation": False})
    assert chat(oai, max_tokens=1, tools=[{**TOOL, "function": {**TOOL["function"], "strict": False}}]).choices
    assert chat(oai, max_tokens=1, tools=[{**TOOL, "function": {**TOOL["function"], "strict": True}}]).choices
    assert respond(model=MODEL, input="x", max_output_tokens=1, tools=[
        {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}, "strict": True}]).output
    assert chat(oai, max_tokens=1, response_format={
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}).choices
    assert chat(oai, max_tokens=1, response_format={"type": "json_schema", "json_schema": {
        "name": "x", "strict": True, "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}}).choices
    assert respond(model=MODEL, input="x", max_output_tokens=1, text={"verbosity": "medium"},
                   reasoning={"effort": "low", "summary": "auto"}).output


def test_anthropic_nested_fields_are_refused_by_full_path(claude):
    def create(**kw):
        kw.setdefault("messages", USER)
        return claude.messages.create(model=MODEL, max_tokens=1, **kw)
    anthropic_refused(lambda: create(metadata={"user_id": "u", "bogus": "x"}), "metadata.bogus")
    anthropic_refused(lambda: create(extra_body={"thinking": {"type": "enabled", "budget_tokens": 1024,
                                                              "display": "omitted"}}), "thinking.display")
    anthropic_refused(lambda: create(messages=[{"role": "user", "content": [
        {"type": "text", "text": "hi", "bogus": 1}]}]), "messages.0.content.0.bogus")
    anthropic_refused(lambda: create(tools=[{"name": "f", "input_schema": {"type": "object"}, "strict": True}]),
                      "tools.0.strict")
    history = [{"role": "user", "content": "q"},
               {"role": "assistant", "content": [{"type": "tool_use", "id": "u1", "name": "f", "input": {}}]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "u1", "content": "boom",
                                             "is_error": True}]}]
    tools = [{"name": "f", "input_schema": {"type": "object"}}]
    anthropic_refused(lambda: create(messages=history, tools=tools), "messages.2.content.0.is_error")
    history[2]["content"][0]["is_error"] = False
    history[2]["content"][0]["cache_control"] = {"type": "ephemeral"}
    assert create(messages=history, tools=tools, metadata={"user_id": "u"}).content is not None


def test_sdk_round_trips_are_accepted(oai, claude):
    """What the SDKs send back from a response (the assistant message, output items, content
    blocks, with every field the server returned) is accepted."""
    out = chat(oai, max_tokens=4, seed=1)
    again = chat(oai, max_tokens=2, messages=USER + [out.choices[0].message, {"role": "user", "content": "more"}])
    assert again.choices[0].finish_reason in ("stop", "length")
    r = oai.responses.create(model=MODEL, input="hello tiny", max_output_tokens=8, top_logprobs=2,
                             extra_body={"seed": 1})
    assert {o.type for o in r.output} >= {"reasoning"}
    r2 = oai.responses.create(model=MODEL, input=[{"role": "user", "content": "hello tiny"}] + r.output +
                              [{"role": "user", "content": "more"}], max_output_tokens=2)
    assert r2.output
    m = claude.messages.create(model=MODEL, max_tokens=8, messages=USER,
                               thinking={"type": "enabled", "budget_tokens": 2}, extra_body={"seed": 1})
    m2 = claude.messages.create(model=MODEL, max_tokens=2, messages=USER + [
        {"role": "assistant", "content": m.content}, {"role": "user", "content": "more"}])
    assert m2.content is not None
    # the SDKs' streaming helpers send their own defaults
    with oai.chat.completions.stream(model=MODEL, messages=USER, max_tokens=2) as s:
        assert any(e.type == "chunk" for e in s)  # (the helper's final parse refuses a length stop)
    with oai.responses.stream(model=MODEL, input="hello tiny", max_output_tokens=2) as s:
        assert [e.type for e in s][-1] == "response.incomplete"  # (max_output_tokens reached)
    with claude.messages.stream(model=MODEL, max_tokens=2, messages=USER) as s:
        assert s.get_final_message().stop_reason == "max_tokens"
