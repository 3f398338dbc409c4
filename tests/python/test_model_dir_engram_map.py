"""A checkpoint directory without engram_token_map.json (as the real release ships) gets its Engram
compressed-token map from its tokenizer.json (model-v41.md §5.2 a), in the Python LLM and in the
server: the output must equal that of the same model with make-tiny's shipped map file."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, "build", "deepinfer")


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    if not os.path.exists(BIN):
        pytest.skip("build/deepinfer not built")
    base = tmp_path_factory.mktemp("engram")
    with_map = base / "with_map"
    subprocess.run([BIN, "make-tiny", "--out", str(with_map), "--seed", "3"], check=True, capture_output=True)
    without_map = base / "without_map"
    shutil.copytree(with_map, without_map)
    os.remove(without_map / "engram_token_map.json")
    return str(with_map), str(without_map)


def test_llm_builds_the_map_from_the_tokenizer(model_dirs):
    from deepinfer import LLM, SamplingParams
    params = SamplingParams(max_tokens=12, temperature=0.0, seed=5)
    outs = []
    for d in model_dirs:
        llm = LLM(model=d)
        outs.append(llm.generate(["Hello there", "A second prompt"], params))
        llm.close()
    for a, b in zip(*outs):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids


def test_missing_map_and_tokenizer_is_an_error(model_dirs, tmp_path):
    from deepinfer import LLM
    from deepinfer.llm import DeepInferError
    bare = tmp_path / "bare"
    shutil.copytree(model_dirs[1], bare)
    os.remove(bare / "tokenizer.json")
    with pytest.raises(DeepInferError, match="engram"):
        LLM(model=str(bare))


def test_generate_cli_agrees(model_dirs):
    outs = []
    for d in model_dirs:
        r = subprocess.run([BIN, "generate", "--model", d, "--prompt-ids", "0,5,9,11", "--max-tokens", "10"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout.split())
    assert outs[0] == outs[1] and len(outs[0]) == 10
