"""test_engine.py — the Python binding over the engine's mock runner (deepinfer.testing.mock_llm):
outputs against Python's own UTF-8 decoder, seeded determinism independent of the batch, stop
strings and stop tokens, logprobs, n samples, sync == async, errors with their cause."""
import pytest

from deepinfer import LLM, DeepInferError, SamplingParams
from deepinfer.testing import MOCK_EOS, mock_llm


def piece_bytes(token):
    """The mock's byte-level detokenisation, written independently of the C code."""
    if token < 256:
        return bytes([token])
    if token == MOCK_EOS:
        return b""
    return f" w{token}".encode()


@pytest.fixture(scope="module")
def llm():
    engine = mock_llm(vocab_size=512, model_seed=3)
    yield engine
    engine.close()


def test_llm_runs_the_builtin_tiny_model(tmp_path, monkeypatch):
    # LLM() generates the built-in tiny model (into a scratch cache here) and loads its tokenizer
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("DEEPINFER_HF_MODEL_DIR", raising=False)
    llm = LLM()
    assert llm.tokenizer is not None
    greedy = SamplingParams(max_tokens=6, temperature=0, ignore_eos=True)
    a = llm.generate(["Hello", "The capital of France is"], greedy)
    assert a[0].prompt_token_ids == [llm.tokenizer.bos_id] + llm.tokenizer.encode("Hello")
    assert all(len(o.outputs[0].token_ids) == 6 for o in a)
    # the same request alone and with a different neighbour: the same tokens (batch invariance)
    b = llm.generate(["Hello", "something else entirely"], greedy)
    assert b[0].outputs[0].token_ids == a[0].outputs[0].token_ids
    out = llm.chat([{"role": "user", "content": "Hi"}], SamplingParams(max_tokens=3, seed=1))[0]
    assert out.prompt.endswith("</think>") and len(out.outputs[0].token_ids) == 3
    assert llm.metrics()["pages_used"] == 0
    llm.close()
    with pytest.raises(DeepInferError, match="nonexistent"):
        LLM(model=str(tmp_path / "nonexistent"))


def test_generate_single_and_list(llm):
    one = llm.generate("Hello", SamplingParams(max_tokens=5, seed=1))
    assert len(one) == 1 and one[0].prompt == "Hello"
    assert one[0].prompt_token_ids == list(b"Hello")
    many = llm.generate(["a", "bb", {"prompt_token_ids": [1, 2, 3]}], SamplingParams(max_tokens=7, seed=2))
    assert [o.prompt_token_ids for o in many] == [[97], [98, 98], [1, 2, 3]]
    for o in many:
        c = o.outputs[0]
        assert o.finished and c.finish_reason in ("length", "stop")
        assert 1 <= len(c.token_ids) <= 7
        if c.finish_reason == "length":
            assert len(c.token_ids) == 7


def test_text_equals_python_utf8_decoding_of_the_pieces(llm):
    outs = llm.generate([f"prompt {i}" for i in range(8)],
                        SamplingParams(max_tokens=40, seed=11, ignore_eos=True))
    for o in outs:
        c = o.outputs[0]
        raw = b"".join(piece_bytes(t) for t in c.token_ids)
        assert c.text == raw.decode("utf-8", "replace")


def test_seeded_output_does_not_depend_on_the_batch(llm):
    params = SamplingParams(max_tokens=24, seed=1234, temperature=0.9, top_p=0.95, top_k=50)
    alone = llm.generate("the same prompt", params)[0].outputs[0].token_ids
    others = [f"other prompt {i}" * (i + 1) for i in range(9)]
    batch = llm.generate(others[:4] + ["the same prompt"] + others[4:], params)
    assert batch[4].outputs[0].token_ids == alone
    reversed_batch = llm.generate(["the same prompt"] + others[::-1], params)
    assert reversed_batch[0].outputs[0].token_ids == alone
    different = llm.generate("the same prompt", SamplingParams(max_tokens=24, seed=1235, temperature=0.9,
                                                               top_p=0.95, top_k=50))
    assert different[0].outputs[0].token_ids != alone


def test_sync_and_async_engines_agree():
    prompts = [f"request number {i} " * (i % 5 + 1) for i in range(20)]
    params = [SamplingParams(max_tokens=5 + i % 13, seed=i, temperature=0.7 if i % 2 else 0.0,
                             repetition_penalty=1.1, presence_penalty=0.2) for i in range(20)]
    results = []
    for async_scheduling in (False, True):
        engine = mock_llm(vocab_size=400, model_seed=9, async_scheduling=async_scheduling,
                          max_batch_tokens=37, max_num_seqs=6, state_memory_bytes=40 * 256)
        results.append([(o.outputs[0].token_ids, o.outputs[0].text, o.outputs[0].finish_reason)
                        for o in engine.generate(prompts, params)])
        assert engine.metrics()["pages_used"] == 0
        engine.close()
    assert results[0] == results[1]



def test_async_scheduling_with_a_small_state_pool():
    # issue 19 item 4: six 64 KiB pages on the built-in tiny model hold about one request at a time;
    # async scheduling planned the next step before the step in flight returned its pages and gave
    # up ("no progress possible").  Async must finish and give exactly the synchronous outputs.
    import random
    rng = random.Random(19)
    prompts = [{"prompt_token_ids": [rng.randrange(3, 200) for _ in range(rng.randrange(40, 321))]}
               for _ in range(12)]
    params = SamplingParams(max_tokens=8, seed=5, temperature=0.8, ignore_eos=True)
    results = []
    for async_scheduling in (False, True):
        # draft_max=0: speculation (the tiny model has a drafter) would run every step synchronously
        engine = LLM(state_memory_bytes=6 * 65536, async_scheduling=async_scheduling, draft_max=0)
        outs = engine.generate(prompts, params)
        results.append([o.outputs[0].token_ids for o in outs])
        assert all(len(t) == 8 for t in results[-1])
        assert engine.metrics()["pages_used"] == 0
        engine.close()
    assert results[0] == results[1]

def test_stop_string_cuts_the_text(llm):
    base = llm.generate("stop test", SamplingParams(max_tokens=60, temperature=0, ignore_eos=True))[0]
    text = base.outputs[0].text
    assert len(text) > 10
    stop = text[len(text) // 2:len(text) // 2 + 3]
    out = llm.generate("stop test", SamplingParams(max_tokens=60, temperature=0, ignore_eos=True,
                                                   stop=[stop]))[0].outputs[0]
    assert out.finish_reason == "stop" and out.stop_reason == stop
    assert out.text == text[:text.index(stop)]


def test_stop_token_ids_and_min_tokens(llm):
    base = llm.generate("tokens", SamplingParams(max_tokens=30, temperature=0, ignore_eos=True))[0].outputs[0]
    stop_id = base.token_ids[3]
    first = base.token_ids.index(stop_id)
    out = llm.generate("tokens", SamplingParams(max_tokens=30, temperature=0, ignore_eos=True,
                                                stop_token_ids=[stop_id]))[0].outputs[0]
    assert out.finish_reason == "stop" and out.stop_reason == stop_id
    assert out.token_ids == base.token_ids[:first + 1]
    later = llm.generate("tokens", SamplingParams(max_tokens=30, temperature=0, ignore_eos=True,
                                                  stop_token_ids=[stop_id], min_tokens=first + 2))[0].outputs[0]
    assert stop_id not in later.token_ids[:first + 2]


def test_logprobs(llm):
    out = llm.generate("lp", SamplingParams(max_tokens=6, seed=5, logprobs=3))[0].outputs[0]
    assert len(out.logprobs) == len(out.token_ids)
    total = 0.0
    for token, entry in zip(out.token_ids, out.logprobs):
        assert token in entry
        ranked = sorted((lp.rank, lp.logprob) for lp in entry.values() if lp.rank is not None)
        assert [r for r, _ in ranked] == [1, 2, 3]
        assert all(a >= b for (_, a), (_, b) in zip(ranked, ranked[1:]))
        assert all(lp.logprob <= 0 for lp in entry.values())
        total += entry[token].logprob
    assert out.cumulative_logprob == pytest.approx(total, abs=1e-4)


def test_n_samples_use_consecutive_seeds(llm):
    two = llm.generate("n", SamplingParams(n=2, max_tokens=12, seed=40, ignore_eos=True))[0]
    assert [c.seed for c in two.outputs] == [40, 41]
    first = llm.generate("n", SamplingParams(max_tokens=12, seed=40, ignore_eos=True))[0].outputs[0]
    second = llm.generate("n", SamplingParams(max_tokens=12, seed=41, ignore_eos=True))[0].outputs[0]
    assert two.outputs[0].token_ids == first.token_ids
    assert two.outputs[1].token_ids == second.token_ids


def test_unseeded_requests_report_their_seed(llm):
    a = llm.generate("x", SamplingParams(max_tokens=16, ignore_eos=True))[0].outputs[0]
    again = llm.generate("x", SamplingParams(max_tokens=16, ignore_eos=True, seed=a.seed))[0].outputs[0]
    assert again.token_ids == a.token_ids


def test_errors_carry_their_cause(llm):
    with pytest.raises(DeepInferError, match="top_p"):
        llm.generate("x", SamplingParams(top_p=1.5))
    with pytest.raises(DeepInferError, match="outside the vocabulary"):
        llm.generate({"prompt_token_ids": [1, 10_000]})
    with pytest.raises(DeepInferError, match="renderer"):
        llm.chat([{"role": "user", "content": "hi"}])
    with pytest.raises(ValueError, match="schema_type"):
        SamplingParams(so_args={"schema_type": "json", "schema": {}})
    with pytest.raises(TypeError):
        llm.generate([3.5])
    with pytest.raises(DeepInferError, match="vocab_size"):
        mock_llm(vocab_size=10)
    with pytest.raises(DeepInferError, match="max_prefill_chunk must be >= 0, got -1"):
        mock_llm(max_prefill_chunk=-1)
    with pytest.raises(DeepInferError, match="max_batch_tokens must be >= 1, got 0"):
        mock_llm(max_batch_tokens=0)
    assert llm.metrics()["pages_used"] == 0
    assert llm.metrics()["requests_waiting"] == 0 and llm.metrics()["requests_running"] == 0


def test_ctrl_c_aborts_the_call_and_frees_its_state():
    engine = mock_llm(vocab_size=300, state_memory_bytes=64 * 256)
    steps = {"n": 0}
    real_step = engine._step

    def interrupted_step():
        steps["n"] += 1
        if steps["n"] == 3:
            raise KeyboardInterrupt
        return real_step()

    engine._step = interrupted_step
    with pytest.raises(KeyboardInterrupt):
        engine.generate([f"p{i}" for i in range(4)], SamplingParams(max_tokens=50, ignore_eos=True))
    m = engine.metrics()
    assert m["requests_aborted"] == 4 and m["requests_running"] == 0 and m["requests_waiting"] == 0
    assert m["pages_used"] == 0
    engine._step = real_step
    # the engine stays usable
    out = engine.generate("again", SamplingParams(max_tokens=3, seed=1))[0]
    assert len(out.outputs[0].token_ids) == 3
    engine.close()


def test_prefix_caching_starts_the_next_turn_from_the_cached_state():
    """The next turn (prompt + answer + new tokens) reuses the finished turn's state when prefix
    caching is on, and generates exactly what an engine without the cache generates."""
    turn1 = [5, 17, 99, 3, 250, 41, 7, 7, 300, 12, 64]
    outputs = {}
    for cache in (False, True):
        engine = mock_llm(vocab_size=512, model_seed=3, max_batch_tokens=8, enable_prefix_caching=cache)
        params = SamplingParams(max_tokens=6, seed=11, ignore_eos=True)
        first = engine.generate({"prompt_token_ids": turn1}, params)[0]
        turn2 = turn1 + first.outputs[0].token_ids + [400, 401, 402]
        second = engine.generate({"prompt_token_ids": turn2}, params)[0]
        outputs[cache] = (first.outputs[0].token_ids, second.outputs[0].token_ids)
        m = engine.metrics()
        if cache:
            # the first turn's state holds its prompt and all its outputs but the last
            assert first.num_cached_tokens == 0
            assert second.num_cached_tokens == len(turn1) + 5
            assert m["prefix_cache_enabled"] == 1 and m["prefix_cache_hits"] == 1
            assert m["prefix_cache_hit_tokens"] == len(turn1) + 5
            assert m["pages_used"] == m["pages_cached"] > 0
        else:
            assert second.num_cached_tokens == 0 and m["prefix_cache_enabled"] == 0
            assert m["pages_used"] == 0
        engine.close()
    assert outputs[True] == outputs[False]


def test_kv_block_cache_shares_a_system_prompt_across_questions(tmp_path):
    """Two questions after one 600-token system prompt: the second restores the prompt's two
    whole 256-token blocks (num_cached_tokens 512) and generates what a cache-less engine does;
    a new engine on the same directory finds them on disk."""
    system = [(i * 37 + 11) % 256 for i in range(600)]
    questions = [system + [q, q + 1, q + 2] * 10 for q in (1, 50)]
    params = SamplingParams(max_tokens=6, seed=11, ignore_eos=True)
    kv = {"kv_cache_dir": str(tmp_path), "kv_cache_ram_gb": 0.0625, "kv_block_tokens": 256}
    plain = mock_llm(vocab_size=512, model_seed=3)
    expected = [plain.generate({"prompt_token_ids": q}, params)[0].outputs[0].token_ids for q in questions]
    plain.close()
    engine = mock_llm(vocab_size=512, model_seed=3, kv_cache=kv)
    got = [engine.generate({"prompt_token_ids": q}, params)[0] for q in questions]
    assert [o.num_cached_tokens for o in got] == [0, 512]
    assert [o.outputs[0].token_ids for o in got] == expected
    m = engine.metrics()
    assert m["kv_cache_enabled"] == 1 and m["kv_hit_tokens_ram"] == 512 and m["kv_blocks_stored"] == 2
    engine.close()
    again = mock_llm(vocab_size=512, model_seed=3, kv_cache=kv)
    out = again.generate({"prompt_token_ids": questions[1]}, params)[0]
    assert out.num_cached_tokens == 512 and out.outputs[0].token_ids == expected[1]
    m = again.metrics()  # read from the directory (at lookup, or by the prefetch at arrival)
    assert m["kv_hit_tokens_disk"] + m["kv_hit_tokens_ram"] == 512 and m["kv_bytes_read"] >= 2 * 256 * 8
    again.close()
    with pytest.raises(DeepInferError, match="kv_block_tokens"):
        mock_llm(vocab_size=512, kv_cache={"kv_cache_ram_gb": 1, "kv_block_tokens": 100})
    with pytest.raises(ValueError, match="kv_cache_ram_gb"):
        mock_llm(vocab_size=512, kv_cache={"kv_cache_ram_gb": 0})
    with pytest.raises(ValueError, match="kv_cache_replay"):
        mock_llm(vocab_size=512, kv_cache={"kv_cache_ram_gb": 1, "kv_cache_replay": "fast"})
    approx = mock_llm(vocab_size=512, model_seed=3, kv_cache=dict(kv, kv_cache_replay="approx"))
    out = approx.generate({"prompt_token_ids": questions[1]}, params)[0]  # the mock's replay is exact either way
    assert out.num_cached_tokens == 512 and out.outputs[0].token_ids == expected[1]
    approx.close()


def test_kv_cache_salt_separates_tenants(tmp_path):
    """vLLM's cache_salt in the prompt dict: a prompt under another salt restores nothing of what
    the first salt stored (and stores its own blocks); under the same salt it restores both whole
    256-token blocks of the 600-token shared prefix, with the cold run's tokens."""
    system = [(i * 37 + 11) % 256 for i in range(600)]
    a, b = (system + [q, q + 1, q + 2] * 10 for q in (1, 50))
    params = SamplingParams(max_tokens=6, seed=11, ignore_eos=True)
    engine = mock_llm(vocab_size=512, model_seed=3,
                      kv_cache={"kv_cache_dir": str(tmp_path), "kv_cache_ram_gb": 0.0625, "kv_block_tokens": 256})
    try:
        def run(ids, salt):
            return engine.generate({"prompt_token_ids": ids, "cache_salt": salt}, params)[0]

        cold = engine.generate({"prompt_token_ids": b}, params)[0].outputs[0].token_ids  # unsalted
        assert run(a, "tenant-1").num_cached_tokens == 0  # the unsalted blocks are not tenant-1's
        other = run(b, "tenant-2")
        assert other.num_cached_tokens == 0 and other.outputs[0].token_ids == cold
        same = run(b, "tenant-1")
        assert same.num_cached_tokens == 512 and same.outputs[0].token_ids == cold
        assert engine.generate({"prompt": "x" * 4, "cache_salt": "t"}, params)[0].num_cached_tokens == 0
        with pytest.raises(TypeError, match="cache_salt"):
            engine.generate({"prompt_token_ids": a, "cache_salt": ""}, params)
    finally:
        engine.close()


def test_logit_bias(llm):
    base = llm.generate("bias", SamplingParams(max_tokens=8, temperature=0, ignore_eos=True))[0].outputs[0]
    token = next(t for t in range(300, 512) if t not in base.token_ids)
    out = llm.generate("bias", SamplingParams(max_tokens=8, seed=2, ignore_eos=True,
                                              logit_bias={token: 100}))[0].outputs[0]
    assert out.token_ids == [token] * 8
    # -100 on the greedy token: greedy picks another one at that step
    out = llm.generate("bias", SamplingParams(max_tokens=1, temperature=0, ignore_eos=True,
                                              logit_bias={base.token_ids[0]: -100}))[0].outputs[0]
    assert out.token_ids[0] != base.token_ids[0]
    with pytest.raises(DeepInferError, match="logit_bias"):
        llm.generate("bias", SamplingParams(max_tokens=1, logit_bias={512: 1.0}))
    for bad in ({-1: 1.0}, {"7": 1.0}, {7: 101}, {7: float("nan")}, {7: True}, [(7, 1.0)]):
        with pytest.raises(ValueError, match="logit_bias"):
            SamplingParams(logit_bias=bad)


def test_thinking_token_budget(monkeypatch):
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="thinking_token_budget"):
            SamplingParams(thinking_token_budget=bad)
    mock = mock_llm(vocab_size=300, model_seed=1)  # no tokenizer: no </think> to force
    try:
        with pytest.raises(ValueError, match="thinking_token_budget"):
            mock.generate("x", SamplingParams(max_tokens=4, thinking_token_budget=2))
    finally:
        mock.close()
    monkeypatch.delenv("DEEPINFER_HF_MODEL_DIR", raising=False)
    llm = LLM()  # the built-in tiny model and its tokenizer
    try:
        end = llm.tokenizer.special_id("</think>")
        user = [{"role": "user", "content": "hello tiny"}]
        free = llm.chat(user, SamplingParams(max_tokens=12, seed=5), thinking=True)[0].outputs[0]
        assert end not in free.token_ids[:4]  # it reasons longer on its own (the test can fail)
        for budget in (0, 3):
            out = llm.chat(user, SamplingParams(max_tokens=12, seed=5, thinking_token_budget=budget),
                           thinking=True)[0].outputs[0]
            assert out.token_ids.index(end) == budget
            assert out.token_ids[:budget] == free.token_ids[:budget]  # the same reasoning up to the budget
    finally:
        llm.close()
