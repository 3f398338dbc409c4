r"""Masks of the grammar engine (src/engine/grammar, through tests/support/grammar_driver) equal
those of xgrammar (PyPI, its C++ core) on the same grammar, vocabulary and states, along random
walks chosen by our engine and replayed into xgrammar's matcher.  Vocabularies: synthetic (all
bytes plus boundary-straddling tokens), the tiny model's tokenizer and the real V4 tokenizer.

xgrammar is installed without its torch dependency (tools/install-deps.sh): its Python
package imports torch only for tensor helpers we do not use, so a stand-in module is put in
sys.modules when torch is absent; masks go through numpy arrays, which xgrammar accepts.

Where the two legitimately differ, the test says so: JSON Schema is compiled in xgrammar with
the same fixed whitespace policy as ours (any_whitespace=False, separators "," and ":",
strict_mode=True).  Two differences remain and are handled explicitly:
- length-bounded strings (minLength/maxLength): xgrammar's rule is [^"\\\r\n]{m,n}, which admits raw
  control characters (invalid JSON, RFC 8259 section 7) and no escapes; ours is JSON's own string
  character.  The comparison drops minLength/maxLength from the schema given to both engines;
  test_grammar.py checks the bounded case against jsonschema.
- regex \s: xgrammar's is Unicode whitespace (ECMAScript), ours ASCII (Python's re.ASCII, which
  the generation test checks); xgrammar is given [ \t\n\r\f\v] in its place.
- xgrammar's mask leaves out some tokens its own matcher accepts (a token that completes a
  recursive root, e.g. "))" after "(("); for every differing token we ask xgrammar's matcher
  (accept, then rollback) and require agreement with it."""
import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_grammar import (EBNF_CASES, REGEXES, SCHEMAS, V4_VOCAB, build_driver, run,  # noqa: E402
                          synth_vocab, tiny_vocab, write)


def import_xgrammar():
    import transformers  # noqa: F401  (imported before any stand-in: it probes for torch)
    import tvm_ffi  # noqa: F401
    try:
        import torch  # noqa: F401
    except ImportError:
        t = types.ModuleType("torch")
        t.int32 = np.int32
        t.Tensor = t.LongTensor = t.FloatTensor = np.ndarray
        t.tensor = lambda v, dtype=None: np.array(v, dtype=dtype)
        t.full = lambda shape, v, dtype=None: np.full(shape, v, dtype=dtype)
        sys.modules["torch"] = t
    import xgrammar
    return xgrammar


xgr = import_xgrammar()


@pytest.fixture(scope="session")
def driver():
    return build_driver()


def load_vocab(driver, vocab):
    """The exact token bytes our engine uses; specials as b"" (xgrammar's special marker)."""
    out = run(driver, "dumpvocab", "--regex", "/dev/null", *vocab).stdout
    return [b"" if line.startswith("*") else bytes.fromhex(line) for line in out.splitlines()]


def compile_xgr(compiler, kind, text):
    if kind == "ebnf":
        return compiler.compile_grammar(text)
    if kind == "regex":  # xgrammar's \s is Unicode whitespace (ECMAScript), ours ASCII (re.ASCII)
        return compiler.compile_regex(text.replace("\\s", "[ \\t\\n\\r\\f\\v]"))
    return compiler.compile_json_schema(text, any_whitespace=False, separators=(",", ":"), strict_mode=True)


STATS = {"mask_only": 0}


def xgr_accepts(matcher, t):
    if not matcher.accept_token(t):
        return False
    matcher.rollback(1)
    return True


def compare_walks(driver, kind, src_text, vocab, tmp_path, walks=3, steps=25):
    toks = load_vocab(driver, vocab)
    n = len(toks)
    eos = int(vocab[vocab.index("--eos") + 1])
    info = xgr.TokenizerInfo(toks, vocab_type=xgr.VocabType.RAW, vocab_size=n, stop_token_ids=[eos])
    compiled = compile_xgr(xgr.GrammarCompiler(info, max_threads=1), kind, src_text)
    src = write(tmp_path, "src", src_text)
    words = (n + 31) // 32
    valid = np.ones(words * 32, dtype=bool)
    valid[n:] = False
    checked = 0
    for seed in range(walks):
        out = run(driver, "walk", f"--{kind}", src, *vocab, "--max-tokens", steps, "--seed", seed + 1).stdout
        matcher = xgr.GrammarMatcher(compiled)
        bm = np.zeros((1, words), dtype=np.int32)
        text = b""
        for i, step in enumerate(json.loads(out)):
            ours = np.array([int(step["mask"][8 * k:8 * k + 8], 16) for k in range(words)], dtype=np.uint32)
            matcher.fill_next_token_bitmask(bm)
            ours_bits = np.unpackbits(ours.view(np.uint8), bitorder="little").astype(bool) & valid
            xgr_bits = np.unpackbits(bm[0].view(np.uint32).view(np.uint8), bitorder="little").astype(bool) & valid
            diff = np.nonzero(ours_bits != xgr_bits)[0]
            # xgrammar's mask leaves out some tokens that its own matcher accepts (seen: a token
            # that completes a recursive root, "))" after "(("): ask its matcher, token by token
            diff = [t for t in diff if xgr_accepts(matcher, int(t)) != bool(ours_bits[t])]
            STATS["mask_only"] += int(np.count_nonzero(ours_bits != xgr_bits)) - len(diff)
            assert not diff, (f"{kind} walk {seed} step {i} after {text!r}: {len(diff)} tokens differ, e.g. "
                              f"{[(int(t), toks[t], bool(ours_bits[t])) for t in diff[:5]]}")
            checked += 1
            if step["token"] < 0:
                break
            assert matcher.accept_token(step["token"]), (kind, seed, i, step["token"])
            text += toks[step["token"]]
    return checked


def without_lengths(schema):
    if isinstance(schema, dict):
        return {k: without_lengths(v) for k, v in schema.items() if k not in ("minLength", "maxLength")}
    if isinstance(schema, list):
        return [without_lengths(v) for v in schema]
    return schema


CASES = ([("regex", r) for r in REGEXES] + [("ebnf", g) for g, _ in EBNF_CASES] +
         [("json", json.dumps(without_lengths(s))) for s in SCHEMAS])


@pytest.mark.parametrize("case", range(len(CASES)))
def test_masks_equal_xgrammar_synthetic_and_tiny(driver, synth_vocab, tiny_vocab, tmp_path, case):
    kind, text = CASES[case]
    for vocab in (synth_vocab, tiny_vocab):
        assert compare_walks(driver, kind, text, vocab, tmp_path) >= 6


@pytest.mark.parametrize("case", [0, len(REGEXES) + 1, len(REGEXES) + len(EBNF_CASES)])
def test_masks_equal_xgrammar_real_v4_vocabulary(driver, tmp_path, case):
    kind, text = CASES[case]
    assert compare_walks(driver, kind, text, V4_VOCAB, tmp_path, walks=2, steps=12) >= 4

