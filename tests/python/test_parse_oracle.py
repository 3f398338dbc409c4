"""test_parse_oracle.py — deepinfer's streaming output parser (di_output_parser_*) against the official
deepseek-recipe StreamProcessor (Chat Completions generator + response accumulation) on generated
model outputs: reasoning, stray </think>, both DSML dialects (well-formed, truncated and mangled),
typed and escaped arguments, JSON mode, stop sequences, leading newlines; fed in random chunks on
both sides.  Compared: content, reasoning_content, tool calls (name, arguments), finish_reason."""
import ctypes
import json
import random

import pytest

dr = pytest.importorskip("deepseek_recipe")

import test_render_oracle as ro  # noqa: E402

LIB = ro.LIB
LIB.di_output_parser_new.restype = ctypes.c_void_p
LIB.di_output_parser_new.argtypes = [ctypes.c_char_p]
LIB.di_output_parser_feed.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
LIB.di_output_parser_finish.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
LIB.di_output_parser_free.argtypes = [ctypes.c_void_p]

STAGES = {
    "content": None,
    "start": dr.ThinkingInitialStage.ReasoningStart,
    "reasoning": dr.ThinkingInitialStage.ReasoningContinuation,
    "content_continuation": dr.ThinkingInitialStage.ContentContinuation,
}


def c_parse(options, chunks):
    p = LIB.di_output_parser_new(json.dumps(options).encode())
    assert p, LIB.di_last_error().decode()
    try:
        for c in chunks:
            b = c.encode()
            assert LIB.di_output_parser_feed(p, b, len(b)) == 0, LIB.di_last_error().decode()
        out = ctypes.c_void_p()
        assert LIB.di_output_parser_finish(p, ctypes.byref(out)) == 0, LIB.di_last_error().decode()
        try:
            return json.loads(ctypes.string_at(out.value).decode())
        finally:
            ro.LIBC.free(out)
    finally:
        LIB.di_output_parser_free(p)


def oracle_parse(options, chunks):
    body = {"model": "DeepSeek-V4.1-Flash", "messages": [{"role": "user", "content": "json"}]}
    request = dr.ChatCompletionRequest(body).convert(dr.ConversionOptions())
    generator = dr.ChatCompletionRequest.chunk_generator(request, "id", "m")
    po = dr.ParsingOptions(parse_tool_calls=options.get("tools", True),
                           starts_in_tool_calls=options.get("tool_stage", False),
                           parse_json_output=options.get("json_mode", False),
                           thinking_initial_stage=STAGES[options.get("initial", "content")],
                           stop_sequences=options.get("stop", []))
    sp = dr.StreamProcessor(generator, po)
    resp = dr.ChatCompletionResponse("id", "m", 0, 1, 0)
    events = sp.push(dr.InferenceChunk.ready(prompt_usage=dr.PromptUsage(prompt_tokens=1)))
    for c in chunks:
        if sp.finished:
            break
        events += sp.push(dr.InferenceChunk.text(c, 1))
    if not sp.finished:
        events += sp.push(dr.InferenceChunk.finish(dr.InferenceFinishReason.Length if options.get("finish") == "length"
                                                   else dr.InferenceFinishReason.Stop))
    events += sp.finish()
    for e in events:
        resp.accumulate(e)
    choice = json.loads(resp.to_json())["choices"][0]
    msg = choice["message"]
    return {"content": msg.get("content") or "", "reasoning_content": msg.get("reasoning_content") or "",
            "tool_calls": [{"name": t["function"]["name"], "arguments": t["function"]["arguments"]}
                           for t in msg.get("tool_calls") or []],
            "finish_reason": choice["finish_reason"]}


def dsml_block(rng, v41):
    blk, inv, par = (" calls", " invoke", " parameter") if v41 else ("tool_calls", "invoke", "parameter")
    d = "｜DSML｜"
    out = "\n" * rng.randint(0, 3) + "<%s%s>\n" % (d, blk)
    for _ in range(rng.randint(1, 3)):
        out += '<%s%s name="%s">\n' % (d, inv, rng.choice(["get_weather", "f", "a b", ""]))
        for _ in range(rng.randint(0, 3)):
            string = rng.random() < 0.5
            value = rng.choice(["Paris", 'x "y" \\z', "line\nbreak", "日本", "\t", "", "[1, 2]", "{\"k\": null}",
                                "3", "true"])
            out += '<%s%s name="%s" string="%s">%s</%s%s>\n' % (
                # keys without spaces or quotes: deepseek-recipe 0.2.0 ends a key at its first space
                # (keeping the closing quote only when it comes right before it: {"a: 1} for "a b",
                # {"a"b": 1} for a"b); deepinfer keeps the upstream state machine, which ends it at
                # the quote (see the report and test_param_key_with_space_upstream)
                d, par, rng.choice(["city", "n", "", "k\tv", "日本"]), "true" if string else "false", value, d, par)
        out += "</%s%s>\n" % (d, inv)
    out += "</%s%s>" % (d, blk)
    return out


def truncated(rng, block):
    """The block cut at a line end (a cut inside a parameter name meets the key rule above)."""
    ends = [i + 1 for i, ch in enumerate(block) if ch == "\n"]
    return block[:rng.choice(ends)] if ends else block


PIECES = ["Hello", " world", "\n", "\n\n", "</think>", "<think>", "STOP", "ST", "```json\n", "```\n", "\n```",
          "{\"a\": 1}", "[", "{", " ", "日本", "😀", "<｜DSML｜", "</｜DSML｜", "invoke name=\"", "\"", "ok."]


def rand_output(rng):
    parts = []
    for _ in range(rng.randint(0, 8)):
        r = rng.random()
        if r < 0.12:
            parts.append(dsml_block(rng, rng.random() < 0.5))
        else:
            parts.append(rng.choice(PIECES))
    if rng.random() < 0.3:  # a stream cut inside a tool-call block
        parts.append(truncated(rng, dsml_block(rng, rng.random() < 0.5)))
    return "".join(parts)


def rand_chunks(rng, text):
    cuts = sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, rng.randint(0, 6))))
    chunks, last = [], 0
    for c in cuts:
        chunks.append(text[last:c])
        last = c
    chunks.append(text[last:])
    return [c for c in chunks if c]


def rand_options(rng):
    o = {"initial": rng.choice(list(STAGES)), "tools": rng.random() < 0.8}
    if rng.random() < 0.1:
        o["tool_stage"] = True
    if rng.random() < 0.2:
        o["json_mode"] = True
    if rng.random() < 0.3:
        o["stop"] = rng.sample(["STOP", "\n\n", "wor", "ST"], rng.randint(1, 2))
    if rng.random() < 0.3:  # the backend stopped at max_tokens (often inside a tool call)
        o["finish"] = "length"
    return o


@pytest.mark.parametrize("seed", range(4))
def test_generated_outputs_match_oracle(seed):
    rng = random.Random(seed)
    for _ in range(150):
        options, text = rand_options(rng), rand_output(rng)
        # The oracle gets the whole text: in JSON mode it writes one space per *segment*, so its
        # result depends on the split; deepinfer's must not (recipe.md §3), so it gets a random one.
        want = oracle_parse(options, [text])
        chunks = rand_chunks(rng, text)
        got = c_parse(options, chunks)
        got = {k: got[k] for k in ("content", "reasoning_content", "finish_reason")} | {
            "tool_calls": [{"name": t["name"], "arguments": t["arguments"]} for t in got["tool_calls"]]}
        assert got == want, json.dumps({"options": options, "chunks": chunks}, ensure_ascii=False)


def test_state_machine_cases_match_oracle():
    # the vector file is a port of the same state machine: check it against the package too
    with open(ro.os.path.join(ro.SHARED, "recipe-data", "stream", "state_machine_cases.json"), encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    for case in cases:
        want = oracle_parse(case["options"], case["chunks"])
        exp = case["expected"]
        if case["name"] != "json_fenced":  # official: one space per run (test_parse.c)
            assert want["content"] == exp["content"], case["name"]
        assert want["reasoning_content"] == exp["reasoning_content"], case["name"]
        if not case["name"].startswith("upstream_quoted_param_names"):  # key-with-space truncation
            assert want["tool_calls"] == exp["tool_calls"], case["name"]


def test_param_key_with_space_upstream():
    # The upstream repository's own test (deepseek-recipe/tests/stream_tool_calls.rs, in
    # state_machine_cases.json) keeps "shipping address"; the 0.2.0 wheel yields {"shipping: ...
    # which is not JSON.  deepinfer follows the upstream state machine: arguments stay JSON.
    text = ('<｜DSML｜tool_calls>\n<｜DSML｜invoke name="submit">\n<｜DSML｜parameter name="shipping address" '
            'string="true">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>')
    got = c_parse({}, [text])
    assert json.loads(got["tool_calls"][0]["arguments"]) == {"shipping address": "Paris"}
    assert oracle_parse({}, [text])["tool_calls"][0]["arguments"] == '{"shipping: "Paris"}'


EVENT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char), ctypes.c_size_t)
LIB.di_output_parser_set_callback.argtypes = [ctypes.c_void_p, EVENT_FN, ctypes.c_void_p]


def test_streamed_events_rebuild_the_result():
    # The deltas a server would send, rebuilt, equal the final parse, for random outputs and splits.
    rng = random.Random(77)
    for _ in range(200):
        options, text = rand_options(rng), rand_output(rng)
        rebuilt = {"reasoning_content": b"", "content": b"", "calls": []}

        def on_event(ctx, kind, data, length):
            chunk = ctypes.string_at(data, length)
            if kind == 0:
                rebuilt["reasoning_content"] += chunk
            elif kind == 1:
                rebuilt["content"] += chunk
            elif kind == 2:
                rebuilt["calls"].append([chunk, b""])
            else:
                rebuilt["calls"][-1][1] += chunk
            return 0

        callback = EVENT_FN(on_event)
        p = LIB.di_output_parser_new(json.dumps(options).encode())
        assert LIB.di_output_parser_set_callback(p, callback, None) == 0
        for c in rand_chunks(rng, text):
            b = c.encode()
            assert LIB.di_output_parser_feed(p, b, len(b)) == 0
        out = ctypes.c_void_p()
        assert LIB.di_output_parser_finish(p, ctypes.byref(out)) == 0
        result = json.loads(ctypes.string_at(out.value).decode())
        ro.LIBC.free(out)
        LIB.di_output_parser_free(p)
        assert rebuilt["reasoning_content"].decode() == result["reasoning_content"]
        assert rebuilt["content"].decode() == result["content"]
        assert [[n.decode(), a.decode()] for n, a in rebuilt["calls"]] == \
            [[t["name"], t["arguments"]] for t in result["tool_calls"]]
