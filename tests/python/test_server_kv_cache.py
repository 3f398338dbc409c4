"""The KV block cache through `deepinfer serve` on the built-in tiny model (V4.1 runner): two
requests sharing a long system prompt, the second restores the whole blocks of the shared prefix
(usage reports exactly those tokens, derived here with Hugging Face `tokenizers` from the
model's tokenizer.json), and a server restarted on the same --kv-cache-dir reads the same hit
from the directory and gives the same completion."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from server_fixture import MODEL, Serve  # noqa: E402

openai = pytest.importorskip("openai")
tokenizers = pytest.importorskip("tokenizers")

BLOCK = 128
SYSTEM = "You are a careful assistant. Answer briefly, cite nothing, and never repeat the question. " * 8
PROMPTS = [SYSTEM + "Question one: what colour is the sky?", SYSTEM + "Question two: how many legs has a cat?"]


def expected_hit(model_dir, window):
    """Whole blocks of the common prefix, restorable when longer than the replayed window (the
    engine keeps at least the prompt's last token to compute)."""
    tok = tokenizers.Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    bos = tok.token_to_id("<｜begin▁of▁sentence｜>")
    a, b = ([bos] + tok.encode(p, add_special_tokens=False).ids for p in PROMPTS)
    common = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    hit = min(common, len(b) - 1) // BLOCK * BLOCK
    return hit if hit > window else 0


def ask(srv, prompt):
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused")
    r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=6, temperature=0)
    return r.usage.prompt_tokens_details.cached_tokens, r.choices[0].text


def test_a_shared_system_prompt_is_restored_from_ram_then_from_disk(tmp_path):
    kv_dir = tmp_path / "kv"
    kv_dir.mkdir()
    flags = ("--kv-cache-dir", str(kv_dir), "--kv-block-tokens", BLOCK)
    srv = Serve(str(tmp_path), *flags)
    try:
        hit = expected_hit(srv.model_dir, 8)  # the built-in tiny model's sliding window
        assert hit >= 2 * BLOCK  # the oracle's precondition: a prompt long enough to cache blocks
        assert ask(srv, PROMPTS[0])[0] == 0
        cached, text_ram = ask(srv, PROMPTS[1])
        assert cached == hit
        m = srv.metrics()
        assert m['deepinfer_kv_cache_hit_tokens_total{tier="ram"}'] == hit
    finally:
        assert srv.stop() == 0
    srv = Serve(str(tmp_path), *flags)
    try:
        cached, text_disk = ask(srv, PROMPTS[1])
        assert cached == hit
        assert text_disk == text_ram  # the same blocks and the same replay: the same completion
        m = srv.metrics()  # read from the directory at lookup, or into RAM by the prefetch at arrival
        hits = m['deepinfer_kv_cache_hit_tokens_total{tier="disk"}'] + m['deepinfer_kv_cache_hit_tokens_total{tier="ram"}']
        assert hits == hit and m['deepinfer_kv_cache_disk_bytes_total{op="read"}'] > 0
    finally:
        srv.stop()
