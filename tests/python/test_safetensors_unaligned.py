"""test_safetensors_unaligned.py - a checkpoint whose BF16 and F32 tensors start at odd file
offsets loads and gives the golden results.  The safetensors format puts no alignment on
data_offsets; a writer that orders tensors by name instead of element size produces such files.
The golden tiny-a shards are rewritten here with a 1-byte U8 tensor first and the rest in name
order, contiguous, so every BF16 / F32 tensor lands off its alignment.  The official reader
(PyPI `safetensors`, its Rust validator through safetensors.deserialize) is the oracle that the
files are valid and hold the original bytes; deepinfer must then pass the golden cases on them
and log, per shard, how many bytes it copied into aligned memory."""
import json
import os
import shutil
import struct
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.path.join(ROOT, "build", "deepinfer")
SHARED = os.environ.get("SHARED_DIR", os.path.join(ROOT, "..", "shared"))
GOLDEN = os.path.join(SHARED, "golden-v41", "tiny-a")

safetensors = pytest.importorskip("safetensors")

ELEM = {"BF16": 2, "F32": 4}


def read_shard(path):
    """name -> (dtype, shape, bytes), read with the format's own layout (independent of deepinfer)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    data = blob[8 + n:]
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}


def write_unaligned(path, tensors, pad_name):
    """The pad tensor (U8, 1 byte) first, then every tensor in name order, no gaps.  Returns the
    names and byte total of the BF16 / F32 tensors that start off their alignment in the file."""
    order = [(pad_name, ("U8", [1], b"\x2a"))] + sorted(tensors.items())
    header, pos = {}, 0
    for name, (dtype, shape, raw) in order:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [pos, pos + len(raw)]}
        pos += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data section starts 8-aligned: only the order misaligns
    start = 8 + len(text)
    off = {name: start + header[name]["data_offsets"][0] for name, _ in order}
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(raw for _, (_, _, raw) in order))
    moved = [n for n, (d, _, raw) in tensors.items() if d in ELEM and raw and off[n] % ELEM[d]]
    return moved, sum(len(tensors[n][2]) for n in moved)


@pytest.fixture(scope="module")
def unaligned(tmp_path_factory):
    root = tmp_path_factory.mktemp("unaligned")
    src, dst = os.path.join(GOLDEN, "checkpoint"), root / "checkpoint"
    dst.mkdir()
    shutil.copy(os.path.join(src, "config.json"), dst / "config.json")
    with open(os.path.join(src, "model.safetensors.index.json"), encoding="utf-8") as f:
        index = json.load(f)
    expect = {}
    for i, shard in enumerate(sorted(set(index["weight_map"].values()))):
        tensors = read_shard(os.path.join(src, shard))
        pad = f"unaligned_pad_{i}"
        moved, nbytes = write_unaligned(dst / shard, tensors, pad)
        index["weight_map"][pad] = shard
        index["metadata"]["total_size"] += 1
        expect[shard] = (tensors, moved, nbytes)
    with open(dst / "model.safetensors.index.json", "w", encoding="utf-8") as f:
        json.dump(index, f)
    for name in ("golden.json", "golden.bin"):
        os.symlink(os.path.join(GOLDEN, name), root / name)
    return root, expect


def test_official_reader_accepts_the_files(unaligned):
    root, expect = unaligned
    kinds = set()
    for shard, (tensors, moved, _) in expect.items():
        with open(root / "checkpoint" / shard, "rb") as f:
            got = dict(safetensors.deserialize(f.read()))
        assert set(got) == set(tensors) | {f"unaligned_pad_{sorted(expect).index(shard)}"}
        for name, (dtype, shape, raw) in tensors.items():
            assert got[name]["dtype"] == dtype and list(got[name]["shape"]) == shape
            assert bytes(got[name]["data"]) == raw, name
        kinds |= {tensors[n][0] for n in moved}
    assert kinds == {"BF16", "F32"}  # both element sizes really are off their alignment


def test_golden_cases_pass_and_copies_are_logged(unaligned):
    root, expect = unaligned
    res = subprocess.run([CLI, "check-golden", str(root), "--mode", "exact"], capture_output=True, text=True,
                         env={**os.environ, "DEEPINFER_LOG_LEVEL": "info"})
    assert res.returncode == 0, res.stdout + res.stderr
    assert "12 passed, 0 failed" in res.stdout
    for shard, (tensors, moved, nbytes) in expect.items():
        line = (f"{root / 'checkpoint' / shard}: {len(moved)} tensor(s) not aligned to their element size in the "
                f"file: {nbytes} bytes copied into aligned memory, the other {len(tensors) + 1 - len(moved)} "
                "tensor(s) stay mapped")
        assert line in res.stderr, res.stderr[-3000:]
