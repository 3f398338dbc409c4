"""test_engine_spec.py — speculative decoding through the Python binding, over the mock runner's
drafter (deepinfer.testing.mock_llm(draft_agree_rate=...)): greedy tokens equal those of the same
mock without speculation (both schedules), seeded sampling with fixed lengths gives the same
tokens alone and in a small-budget batch, RequestOutput.metrics
counts the drafts as the mock's agreement rate implies, the knobs are checked, and seq_seed is
the seed under its other name."""
import pytest

from deepinfer import DeepInferError, SamplingParams
from deepinfer.testing import mock_llm

PROMPTS = ["speculative", "decoding is", {"prompt_token_ids": [7, 8, 9, 10]}, "x"]


def tokens(llm, params):
    return [o.outputs[0].token_ids for o in llm.generate(PROMPTS, params)]


@pytest.mark.parametrize("schedule", ["fixed", "confidence"])
def test_greedy_speculation_gives_the_plain_tokens(schedule):
    params = SamplingParams(max_tokens=30, temperature=0, ignore_eos=True)
    plain = mock_llm(vocab_size=400, model_seed=2)
    spec = mock_llm(vocab_size=400, model_seed=2, draft_agree_rate=0.7, draft_schedule=schedule)
    want, got = tokens(plain, params), tokens(spec, params)
    assert got == want and all(len(t) == 30 for t in got)
    plain.close()
    spec.close()


def test_seeded_sampling_with_fixed_lengths_does_not_depend_on_the_batch():
    # T > 0 verifies by rejection sampling: the tokens depend on where drafts are verified, which
    # fixed lengths keep independent of the load
    params = SamplingParams(max_tokens=30, temperature=0.8, top_k=50, seed=5, ignore_eos=True)
    alone = mock_llm(vocab_size=400, model_seed=2, draft_agree_rate=0.7, draft_schedule="fixed", max_num_seqs=1)
    crowd = mock_llm(vocab_size=400, model_seed=2, draft_agree_rate=0.7, draft_schedule="fixed", max_num_seqs=4,
                     max_batch_tokens=13, max_prefill_chunk=3)
    a = [o.outputs[0] for o in alone.generate(PROMPTS, params)]
    b = [o.outputs[0] for o in crowd.generate(PROMPTS, params)]
    assert [x.token_ids for x in a] == [y.token_ids for y in b] and all(len(x.token_ids) == 30 for x in a)
    alone.close()
    crowd.close()


def test_metrics_count_the_drafts():
    always = mock_llm(vocab_size=400, draft_agree_rate=1.0, draft_max=5, draft_schedule="fixed")
    never = mock_llm(vocab_size=400, draft_agree_rate=0.0, draft_max=5, draft_schedule="fixed")
    greedy = SamplingParams(max_tokens=13, temperature=0, ignore_eos=True)
    m = always.generate("abc", greedy)[0].metrics
    # 1 token from the prefill, then two verify steps of 5 drafts + 1: 13 tokens
    assert (m["spec_num_drafts"], m["spec_num_draft_tokens"], m["spec_num_accepted_tokens"]) == (2, 10, 10)
    m = never.generate("abc", greedy)[0].metrics
    # every step verifies 5 wrong drafts (fewer near max_tokens) and emits 1 token
    assert m["spec_num_accepted_tokens"] == 0 and m["spec_num_drafts"] == 11
    assert m["spec_num_draft_tokens"] == 5 * 7 + 4 + 3 + 2 + 1
    off = mock_llm(vocab_size=400, draft_agree_rate=1.0, draft_max=0)
    assert off.generate("abc", greedy)[0].metrics["spec_num_drafts"] == 0
    for llm in (always, never, off):
        llm.close()


def test_knobs_are_checked():
    with pytest.raises(ValueError, match="draft_schedule"):
        mock_llm(draft_agree_rate=1.0, draft_schedule="sometimes")
    with pytest.raises(DeepInferError, match="draft_max"):
        mock_llm(draft_agree_rate=1.0, draft_max=17)
    with pytest.raises(DeepInferError, match="has no drafter"):
        mock_llm(draft_max=2)


def test_seq_seed_is_the_seed():
    assert SamplingParams(seq_seed=7).seed == 7
    assert SamplingParams(seed=7, seq_seed=7).seed == 7
    with pytest.raises(ValueError, match="seq_seed"):
        SamplingParams(seed=7, seq_seed=8)
    llm = mock_llm(vocab_size=400)
    a = llm.generate("seeded", SamplingParams(max_tokens=12, seq_seed=99))[0].outputs[0]
    b = llm.generate("seeded", SamplingParams(max_tokens=12, seed=99))[0].outputs[0]
    assert a.token_ids == b.token_ids and a.seed == 99
    llm.close()
