"""test_render_ids.py — prompt token ids (di_render_json_ids: renderer segments -> tokenizer) against
rendered_vectors.json expected_ids and against deepseek-recipe's own prompt encoding
(DeepseekV4Encoding / DeepseekV41Encoding .with_tokenizer(...).encode) on generated conversations.

The oracle needs a tokenizer.json that has the V4 / V4.1 added tokens; recipe-data ships the V3 file
plus the reconstructed V4 table, so the test writes V3 + that table to a temporary file for the
oracle, while deepinfer loads the V3 file with its built-in V4.1 table (DI_ADDED_TABLE_V41)."""
import ctypes
import json
import os
import random

import pytest

dr = pytest.importorskip("deepseek_recipe")

import test_render_oracle as ro  # noqa: E402  (same directory; pytest puts it on sys.path)

TOKENIZER = os.path.join(ro.SHARED, "recipe-data", "tokenizer", "deepseek_v3_tokenizer.json")
ADDED = os.path.join(ro.SHARED, "recipe-data", "tokenizer", "v4_added_tokens.json")
LIB = ro.LIB
LIB.di_tokenizer_load_table.restype = ctypes.c_void_p
LIB.di_tokenizer_load_table.argtypes = [ctypes.c_char_p, ctypes.c_int]
LIB.di_tokenizer_free.argtypes = [ctypes.c_void_p]
LIB.di_render_json_ids.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int,
                                   ctypes.POINTER(ctypes.c_void_p)]
DI_ADDED_TABLE_V41 = 2


@pytest.fixture(scope="module")
def c_tokenizer():
    tok = LIB.di_tokenizer_load_table(TOKENIZER.encode(), DI_ADDED_TABLE_V41)
    assert tok, LIB.di_last_error().decode()
    yield tok
    LIB.di_tokenizer_free(tok)


@pytest.fixture(scope="module")
def oracle_tokenizer(tmp_path_factory):
    with open(TOKENIZER, encoding="utf-8") as f:
        spec = json.load(f)
    with open(ADDED, encoding="utf-8") as f:
        table = json.load(f)
    have = {t["id"]: t for t in spec["added_tokens"]}
    have[128799]["content"] = "<｜System｜>"  # V4.1 (v41_changes)
    for t in table["v4_named_additions"]:
        have[t["id"]] = {"id": t["id"], "content": t["content"], "single_word": False, "lstrip": False,
                         "rstrip": False, "normalized": False, "special": True}
    # the multimodal span placeholders fill 128847..129261: without them the ids above the gap
    # (the grounding markers 129271-129278, <｜image｜>) would be renumbered down to close it
    for i in range(128847, 129262):
        have[i] = {"id": i, "content": "<|place_holder_mm_span_%04d|>" % (i - 128847 + 21), "single_word": False,
                   "lstrip": False, "rstrip": False, "normalized": False, "special": True}
    spec["added_tokens"] = [have[i] for i in sorted(have)]
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    path.write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    tok = dr.Tokenizer.from_file(str(path))
    assert tok.encode("<｜ref｜>") == [129278]  # the id the table gives, not a renumbered one
    return tok


def render_ids(tok, request):
    body = json.dumps(request).encode()
    out = ctypes.c_void_p()
    if LIB.di_render_json_ids(tok, body, len(body), 0, ctypes.byref(out)) != 0:
        raise ValueError(LIB.di_last_error().decode())
    try:
        return json.loads(ctypes.string_at(out.value).decode())
    finally:
        ro.LIBC.free(out)


def test_vector_ids(c_tokenizer):
    # ids of every vector whose prompt deepinfer reproduces (the three official-package
    # disagreements are covered by the oracle test below and tests/unit/test_render.c).
    matched = 0
    for case in ro.load_vectors():
        got = render_ids(c_tokenizer, case)
        if got["prompt"] == case["expected_prompt"]:
            assert got["ids"] == case["expected_ids"], case["name"]
            matched += 1
    assert matched >= 18


def test_injection_ids(c_tokenizer):
    # recipe.md §6 item 12, official API token counts 9 / 7 / 4
    chat = {"encoding": "v4", "thinking_mode": "chat"}
    assert render_ids(c_tokenizer, dict(chat, messages=[{"role": "user", "content": "<｜User｜>"}]))["ids"] == \
        [0, 128803, 30, 28217, 6756, 28217, 32, 128804, 128822]
    assert render_ids(c_tokenizer, dict(chat, messages=[{"role": "user", "content": "<think>"}]))["ids"] == \
        [0, 128803, 30, 37947, 32, 128804, 128822]
    assert render_ids(c_tokenizer, dict(chat, messages=[{"role": "user", "content": ""}]))["ids"] == \
        [0, 128803, 128804, 128822]


def test_generated_ids_match_oracle(c_tokenizer, oracle_tokenizer):
    # with_tokenizer copies the tokenizer (~0.1 s): one encoding per version
    encodings = {"v41": dr.DeepseekV41Encoding().with_tokenizer(oracle_tokenizer),
                 "v4_0731": dr.DeepseekV4Encoding().with_tokenizer(oracle_tokenizer)}
    rng = random.Random(1000)
    for _ in range(300):
        request = ro.rand_conversation(rng)
        want = encodings[request["encoding"]].encode(ro.oracle_conversation(request, ro.oracle_messages(request)))
        assert render_ids(c_tokenizer, request)["ids"] == want, json.dumps(request, ensure_ascii=False)
