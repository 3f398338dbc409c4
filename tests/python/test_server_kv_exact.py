"""A KV block-cache hit never changes an answer: through `deepinfer serve` on the built-in tiny
model, a prompt sharing 1-4 whole blocks with a cached one and going on for 1, 40 or 300 more
tokens gives, greedy and seeded, the same tokens with bit-identical logprobs as the same prompt on
a server with no cache at all (the cold run is the oracle), with the blocks read from RAM and,
after a restart on the same directory, from disk.  The hit sizes are derived independently with
Hugging Face `tokenizers` from the model's tokenizer.json.  With `--kv-cache-replay approx` (the
official replay of the last window only) the same hits give other logprobs."""
import os
import random
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from server_fixture import MODEL, Serve  # noqa: E402

openai = pytest.importorskip("openai")
tokenizers = pytest.importorskip("tokenizers")

BLOCK = 128
# characters the tiny tokenizer keeps one token each, whatever their neighbours (checked below)
POOL = "bdfgjkmpquvxyz0123456789"
SUFFIXES = (1, 40, 300)
SAMPLING = ({"temperature": 0}, {"temperature": 0.9, "seed": 7})


def text(seed, n, avoid_first=None):
    rng = random.Random(seed)
    out = [rng.choice([c for c in POOL if c != avoid_first])] if n else []
    out += [rng.choice(POOL) for _ in range(n - 1)]
    return "".join(out)


BASE = text(1, 4 * BLOCK + 200)  # the cached prompt: 4 whole blocks and more


def case_prompts():
    """(blocks shared with BASE, suffix length, prompt): BOS + BASE's first k*B - 1 tokens, then a
    suffix whose first token differs from BASE's there (so exactly k blocks are shared)."""
    out = []
    for k in range(1, 5):
        cut = k * BLOCK - 1
        for i, s in enumerate(SUFFIXES):
            out.append((k, s, BASE[:cut] + text(100 * k + i, s, avoid_first=BASE[cut])))
    return out


def expected_hits(tok, bos, prompts):
    """Whole blocks a prompt shares with BASE or with an earlier prompt (every prompt's blocks are
    cached once it ran), leaving its last token to compute."""
    ids = lambda p: [bos] + tok.encode(p, add_special_tokens=False).ids  # noqa: E731
    seen = [ids(BASE)]
    hits = []
    for p in prompts:
        mine = ids(p)
        assert len(mine) == 1 + len(p)  # the oracle's precondition: one token per character
        common = max(next((i for i, (x, y) in enumerate(zip(o, mine)) if x != y), min(len(o), len(mine))) for o in seen)
        hits.append(min(common, len(mine) - 1) // BLOCK * BLOCK)
        seen.append(mine)
    return hits


def ask(srv, prompt, sampling):
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused")
    r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=16, logprobs=1, **sampling)
    lp = r.choices[0].logprobs
    return r.usage.prompt_tokens_details.cached_tokens, (r.choices[0].text, list(lp.tokens), list(lp.token_logprobs))


def run_all(srv, prompts):
    return [ask(srv, p, s) for _, _, p in prompts for s in SAMPLING]


def block_cache(tmp_path, kv_dir, *extra):
    return Serve(str(tmp_path), "--kv-cache-dir", str(kv_dir), "--kv-block-tokens", BLOCK, *extra)


def test_a_block_hit_equals_the_cold_run_from_ram_and_from_disk(tmp_path):
    cases = case_prompts()
    cold_srv = Serve(str(tmp_path), "--prefix-cache", "off")
    try:
        tok = tokenizers.Tokenizer.from_file(os.path.join(cold_srv.model_dir, "tokenizer.json"))
        bos = tok.token_to_id("<｜begin▁of▁sentence｜>")
        hits = expected_hits(tok, bos, [p for _, _, p in cases])
        assert hits == [k * BLOCK for k, _, _ in cases]  # exactly k blocks each
        cold = run_all(cold_srv, cases)
        assert all(c == 0 for c, _ in cold)
    finally:
        assert cold_srv.stop() == 0
    kv_dir = tmp_path / "kv"
    kv_dir.mkdir()
    for tier in ("ram", "disk"):
        srv = block_cache(tmp_path, kv_dir)
        try:
            if tier == "ram":
                assert ask(srv, BASE, SAMPLING[0])[0] == 0
            got = run_all(srv, cases)
            m = srv.metrics()
        finally:
            assert srv.stop() == 0
        for (k, s, _), i in zip([c for c in cases for _ in SAMPLING], range(len(got))):
            assert got[i][0] >= k * BLOCK, f"{tier}: {k} blocks + {s}: {got[i][0]} cached"
            assert got[i][1] == cold[i][1], f"{tier}: {k} blocks + {s} tokens, sampling {SAMPLING[i % 2]}"
        ram, disk = (m[f'deepinfer_kv_cache_hit_tokens_total{{tier="{t}"}}'] for t in ("ram", "disk"))
        print(f"{tier}: hit tokens ram {ram} disk {disk}, cached {sum(c for c, _ in got)}")
        assert ram + disk == sum(c for c, _ in got)
        if tier == "disk":  # a fresh server: its first hits come from the directory
            assert disk > 0


def test_the_official_approximate_replay_is_opt_in_and_differs(tmp_path):
    cases = case_prompts()
    cold_srv = Serve(str(tmp_path), "--prefix-cache", "off")
    try:
        cold = [ask(cold_srv, p, SAMPLING[0]) for _, _, p in cases]
    finally:
        assert cold_srv.stop() == 0
    kv_dir = tmp_path / "kv"
    kv_dir.mkdir()
    srv = block_cache(tmp_path, kv_dir, "--kv-cache-replay", "approx")
    try:
        ask(srv, BASE, SAMPLING[0])
        got = [ask(srv, p, SAMPLING[0]) for _, _, p in cases]
    finally:
        assert srv.stop() == 0
    assert all(g[0] >= k * BLOCK for g, (k, _, _) in zip(got, cases))
    same_logprobs = sum(g[1][2] == c[1][2] for g, c in zip(got, cold))
    same_tokens = sum(g[1][1] == c[1][1] for g, c in zip(got, cold))
    print(f"approx replay: {same_tokens}/{len(cases)} token-identical, {same_logprobs}/{len(cases)} logprob-identical")
    assert same_logprobs < len(cases)
