"""test_engine_tokenizer.py — the engine's text path over a real tokenizer (the DeepSeek V3
tokenizer.json of shared/recipe-data), checked against the official Hugging Face `tokenizers`
package: text prompts become BOS + the tokenizer's ids, generated text is the decode of the
generated ids (added tokens hidden), stop strings cut that text, and chat prompts are rendered
with control tokens as single ids.  The model is the engine's mock (random ids over the whole
vocabulary: every byte-level edge case of decoding shows up)."""
import json
import os

import pytest
from tokenizers import Tokenizer as HfTokenizer

from deepinfer import SamplingParams
from deepinfer.testing import mock_llm
from deepinfer.text import Tokenizer

SHARED = os.environ.get("SHARED_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared"))
TOKENIZER = os.path.join(SHARED, "recipe-data", "tokenizer", "deepseek_v3_tokenizer.json")
V4_ADDED = os.path.join(SHARED, "recipe-data", "tokenizer", "v4_added_tokens.json")

pytestmark = pytest.mark.skipif(not os.path.exists(TOKENIZER), reason="shared tokenizer data missing")


@pytest.fixture(scope="module")
def hf():
    return HfTokenizer.from_file(TOKENIZER)


@pytest.fixture(scope="module")
def llm():
    vocab = Tokenizer(TOKENIZER).vocab_size
    engine = mock_llm(vocab_size=vocab, model_seed=11, tokenizer=TOKENIZER)
    yield engine
    engine.close()


def expected_text(hf, ids):
    """Added tokens are not shown: those of the file, and the V4.1 additions beyond its ids."""
    added = set(hf.get_added_tokens_decoder().keys())
    size = hf.get_vocab_size(with_added_tokens=True)
    return hf.decode([t for t in ids if t not in added and t < size], skip_special_tokens=False)


def test_text_prompt_is_bos_plus_the_tokenizer_ids(llm, hf):
    text = "Hello, world! Ünïcödé and 中文 text."
    out = llm.generate(text, SamplingParams(max_tokens=1, seed=1))[0]
    bos = hf.token_to_id("<｜begin▁of▁sentence｜>")
    assert out.prompt_token_ids == [bos] + hf.encode(text, add_special_tokens=False).ids


def test_generated_text_is_the_decode_of_the_generated_ids(llm, hf):
    outs = llm.generate([f"prompt {i}" for i in range(3)],
                        SamplingParams(max_tokens=12, seed=5, ignore_eos=True))
    for o in outs:
        c = o.outputs[0]
        assert len(c.token_ids) == 12
        assert c.text == expected_text(hf, c.token_ids)


def test_stop_string_cuts_the_decoded_text(llm, hf):
    params = dict(max_tokens=16, temperature=0, ignore_eos=True)
    full = llm.generate("stop here", SamplingParams(**params))[0].outputs[0]
    if len(full.text) < 6:
        pytest.skip("generated text too short to cut")
    stop = full.text[3:5]
    cut = llm.generate("stop here", SamplingParams(stop=[stop], **params))[0].outputs[0]
    assert cut.finish_reason == "stop" and cut.stop_reason == stop
    assert cut.text == full.text[:full.text.index(stop)]


def test_chat_prompt_uses_control_token_ids(llm, hf):
    out = llm.chat([{"role": "user", "content": "Hi there"}], SamplingParams(max_tokens=1, seed=2))[0]
    assert out.prompt == "<｜begin▁of▁sentence｜><｜User｜>Hi there<｜Assistant｜></think>"
    # control tokens by id: V3's own from the HF file, </think> (a V4 addition the V3 file lacks)
    # from the reconstructed V4 table
    with open(V4_ADDED) as f:
        v4 = json.load(f)
    end_think = next(e["id"] for e in v4["v4_named_additions"] if e["content"] == "</think>")
    ids = out.prompt_token_ids
    assert ids[:2] == [hf.token_to_id("<｜begin▁of▁sentence｜>"), hf.token_to_id("<｜User｜>")]
    assert ids[-2:] == [hf.token_to_id("<｜Assistant｜>"), end_think]
    assert ids[2:-2] == hf.encode("Hi there", add_special_tokens=False).ids
