"""Prompt caching through `deepinfer serve` on the built-in tiny model: a request whose prompt
extends a finished request's prompt starts from its cached state, and the usage the SDK sees
(prompt_tokens_details.cached_tokens, streamed and not) and /metrics report exactly the reused
tokens, which the test derives independently with Hugging Face `tokenizers` from the model's
tokenizer.json.  With --prefix-cache off nothing is reused."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from server_fixture import MODEL  # noqa: E402
from test_server_tiny import Serve  # noqa: E402

openai = pytest.importorskip("openai")
tokenizers = pytest.importorskip("tokenizers")

PROMPTS = ["The quick brown fox", "The quick brown fox jumps over the lazy dog",
           "The quick brown fox jumps over the lazy dog and the cat"]


@pytest.mark.parametrize("cache", ["on", "off"])
def test_a_prompt_extending_a_finished_one_reuses_its_state(tmp_path, cache):
    srv = Serve(str(tmp_path), "--prefix-cache", cache)
    try:
        tok = tokenizers.Tokenizer.from_file(os.path.join(srv.model_dir, "tokenizer.json"))
        bos = tok.token_to_id("<｜begin▁of▁sentence｜>")  # a raw prompt is BOS + its plain encoding
        ids = [[bos] + tok.encode(p, add_special_tokens=False).ids for p in PROMPTS]
        for shorter, longer in zip(ids, ids[1:]):
            assert longer[:len(shorter)] == shorter  # the oracle's precondition
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused")
        # one output token each: a finished request's state then holds exactly its prompt
        r1 = client.completions.create(model=MODEL, prompt=PROMPTS[0], max_tokens=1, temperature=0)
        assert (r1.usage.prompt_tokens, r1.usage.prompt_tokens_details.cached_tokens) == (len(ids[0]), 0)
        chunks = list(client.completions.create(model=MODEL, prompt=PROMPTS[1], max_tokens=1, temperature=0,
                                                stream=True, stream_options={"include_usage": True}))
        streamed = chunks[-1].usage
        r3 = client.completions.create(model=MODEL, prompt=PROMPTS[2], max_tokens=2, temperature=0)
        hit = (lambda n: n) if cache == "on" else (lambda n: 0)
        assert streamed.prompt_tokens == len(ids[1])
        assert streamed.prompt_tokens_details.cached_tokens == hit(len(ids[0]))
        assert r3.usage.prompt_tokens == len(ids[2])
        assert r3.usage.prompt_tokens_details.cached_tokens == hit(len(ids[1]))
        assert srv.metrics()["deepinfer_prompt_cache_hit_tokens_total"] == hit(len(ids[0]) + len(ids[1]))
    finally:
        srv.stop()


@pytest.mark.parametrize("thinking", [False, True])
def test_the_next_chat_turn_reuses_the_previous_prompt(tmp_path, thinking):
    """A chat's second turn re-renders the first (in thinking mode without its reasoning), so the
    first turn's prompt up to its final token (the thinking tag) is a prefix of the second's: the
    copy the engine kept before that token serves it, whatever the first answer was."""
    srv = Serve(str(tmp_path))
    try:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused")
        extra = {"thinking": {"type": "enabled" if thinking else "disabled"}}
        system = {"role": "system", "content": "You are a terse assistant that answers in one short line. " * 3}
        first = [system, {"role": "user", "content": "Name a colour."}]
        r1 = client.chat.completions.create(model=MODEL, messages=first, max_tokens=4, temperature=0, extra_body=extra)
        assert r1.usage.prompt_tokens >= 33 and r1.usage.prompt_tokens_details.cached_tokens == 0
        second = first + [{"role": "assistant", "content": r1.choices[0].message.content or ""},
                          {"role": "user", "content": "Another one."}]
        r2 = client.chat.completions.create(model=MODEL, messages=second, max_tokens=4, temperature=0, extra_body=extra)
        assert r2.usage.prompt_tokens > r1.usage.prompt_tokens
        assert r2.usage.prompt_tokens_details.cached_tokens >= r1.usage.prompt_tokens - 1
    finally:
        srv.stop()


def test_cached_states_give_way_in_a_small_state_pool(tmp_path):
    """With a state pool of a few MB, hundreds of distinct requests fill the cache over and over:
    every request is still served (the cache is evicted, nobody waits on it or fails)."""
    srv = Serve(str(tmp_path), "--state-memory-mb", 4, "--max-num-seqs", 8)
    try:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused")
        for i in range(150):
            r = client.completions.create(model=MODEL, prompt=f"request number {i} of many", max_tokens=2,
                                          temperature=0)
            assert r.choices[0].finish_reason in ("length", "stop")
        m = srv.metrics()
        assert m['deepinfer_requests_total{endpoint="/v1/completions",status="200"}'] == 150
    finally:
        srv.stop()


def exact_length_prompt(tok, bos, n_tokens):
    """Text whose raw prompt is exactly n_tokens ids (BOS + its plain encoding), checked by
    re-encoding it with the model's own tokenizer (the oracle)."""
    words = [f" item{i % 97}" for i in range(4 * n_tokens)]
    text = "Count:"
    ids = tok.encode(text, add_special_tokens=False).ids
    for w in words:
        more = tok.encode(text + w, add_special_tokens=False).ids
        if 1 + len(more) > n_tokens:
            break
        text, ids = text + w, more
    while 1 + len(ids) < n_tokens:  # pad with single-token characters
        text += "."
        ids = tok.encode(text, add_special_tokens=False).ids
    assert 1 + len(tok.encode(text, add_special_tokens=False).ids) == n_tokens
    return text


@pytest.mark.parametrize("n_tokens", [513, 1025])
def test_a_prompt_one_token_past_the_prefill_chunk_is_found_again(tmp_path, n_tokens):
    """The serve budget is 512 tokens a step: a 513- or 1,025-token prompt's chunk before its last
    token ends exactly there, and the copy kept at that position serves the same prompt again
    (all but its last token cached)."""
    srv = Serve(str(tmp_path))
    try:
        tok = tokenizers.Tokenizer.from_file(os.path.join(srv.model_dir, "tokenizer.json"))
        bos = tok.token_to_id("<｜begin▁of▁sentence｜>")
        prompt = exact_length_prompt(tok, bos, n_tokens)
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused")
        r1 = client.completions.create(model=MODEL, prompt=prompt, max_tokens=3, temperature=0)
        assert (r1.usage.prompt_tokens, r1.usage.prompt_tokens_details.cached_tokens) == (n_tokens, 0)
        r2 = client.completions.create(model=MODEL, prompt=prompt, max_tokens=3, temperature=0, logprobs=1)
        assert (r2.usage.prompt_tokens, r2.usage.prompt_tokens_details.cached_tokens) == (n_tokens, n_tokens - 1)
        assert r2.choices[0].text == r1.choices[0].text
    finally:
        srv.stop()
