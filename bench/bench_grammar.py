"""Structured-output masks on the V4 vocabulary (129,280 ids): per-token mask time at batch 1 and
grammar compile time, deepinfer's grammar engine (src/engine/grammar via
tests/support/grammar_driver, C timing) against xgrammar (PyPI, Python timing of its C++
core: fill_next_token_bitmask into a numpy bitmask, compile_json_schema with its compile cache
off).  Both follow the same random walks (chosen by our engine, replayed into xgrammar), so
they mask the same states.  Our mask time is reported warm (the per-position cache is shared
by every request of a grammar) and cold (first pass, cache entries built on first use).
Target: mask time <= 1.0x xgrammar's."""
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
from test_grammar import V4_VOCAB, build_driver, run  # noqa: E402
from test_grammar_xgrammar import load_vocab, xgr  # noqa: E402

WALKS, STEPS = 4, 60

# The usual API kind: a tool call's arguments / a structured answer.
SCHEMAS = {
    "tool_args": {"type": "object", "properties": {
        "location": {"type": "string"},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer"},
        "include_hourly": {"type": "boolean"},
        "coordinates": {"type": "object", "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
                        "required": ["lat", "lon"]}},
        "required": ["location", "unit"]},
    "answer_list": {"type": "object", "properties": {
        "answers": {"type": "array", "items": {"type": "object", "properties": {
            "title": {"type": "string"}, "score": {"type": "number"},
            "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["title", "score"]}},
        "done": {"type": "boolean"}}, "required": ["answers"]},
}


def ours(driver, path):
    out = run(driver, "bench", "--json", path, *V4_VOCAB, "--samples", WALKS, "--max-tokens", STEPS).stdout
    return json.loads(out)


def xgrammar_times(driver, path, schema_text, toks, eos):
    info = xgr.TokenizerInfo(toks, vocab_type=xgr.VocabType.RAW, vocab_size=len(toks), stop_token_ids=[eos])
    compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    t0 = time.perf_counter()
    compiled = compiler.compile_json_schema(schema_text, any_whitespace=False, separators=(",", ":"))
    compile_ms = (time.perf_counter() - t0) * 1e3
    bm = np.zeros((1, (len(toks) + 31) // 32), dtype=np.int32)
    per = []
    for seed in range(WALKS):
        walk = json.loads(run(driver, "walk", "--json", path, *V4_VOCAB, "--max-tokens", STEPS,
                              "--seed", seed + 1).stdout)
        m = xgr.GrammarMatcher(compiled)
        for step in walk:
            t0 = time.perf_counter()
            m.fill_next_token_bitmask(bm)
            per.append(time.perf_counter() - t0)
            if step["token"] < 0 or not m.accept_token(step["token"]) or m.is_terminated():
                break
    return compile_ms, statistics.mean(per) * 1e6, len(per)


def main():
    driver = build_driver()
    toks = load_vocab(driver, V4_VOCAB)
    eos = int(V4_VOCAB[V4_VOCAB.index("--eos") + 1])
    print(f"bench_grammar: V4 vocabulary {len(toks)} ids, {WALKS} walks x <= {STEPS} tokens, batch 1")
    print(f"{'schema':<12} {'ours warm us':>12} {'ours cold us':>12} {'xgr us':>8} {'ratio':>6} "
          f"{'ours compile ms':>15} {'xgr compile ms':>14}")
    for name, schema in SCHEMAS.items():
        text = json.dumps(schema)
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            f.write(text)
        o = ours(driver, f.name)
        xc, xm, n = xgrammar_times(driver, f.name, text, toks, eos)
        os.unlink(f.name)
        print(f"{name:<12} {o['mask_us']:>12.2f} {o['cold_mask_us']:>12.1f} {xm:>8.2f} {o['mask_us'] / xm:>6.2f} "
              f"{o['compile_ms']:>15.3f} {xc:>14.3f}")


if __name__ == "__main__":
    main()
