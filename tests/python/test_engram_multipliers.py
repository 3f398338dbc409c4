"""test_engram_multipliers.py - the C re-statement of numpy's default_rng(...).integers (SeedSequence +
PCG64 + Lemire, src/model/engram_rng.c) against numpy itself, the reference's own tool for the
Engram hash multipliers (model-v41.md §5.2 d), over many layer ids and compressed vocab sizes."""
import ctypes
import os

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIB = os.path.join(ROOT, "build", "libdeepinfer_internal.so")  # di_engram_hash_multipliers is internal


@pytest.fixture(scope="module")
def lib():
    if not os.path.exists(LIB):
        pytest.skip("build/libdeepinfer_internal.so not built")
    lib = ctypes.CDLL(LIB)
    lib.di_engram_hash_multipliers.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(ctypes.c_int64)]
    lib.di_engram_hash_multipliers.restype = ctypes.c_int
    return lib


def numpy_multipliers(layer, vocab, n):
    bound = max(1, (2**63 - 1) // vocab // 2)
    return (np.random.default_rng(10007 * layer).integers(0, bound, size=n, dtype=np.int64) * 2 + 1).tolist()


# 1 << 30 and above take numpy's 32-bit buffered path (bound - 1 < 2^32)
@pytest.mark.parametrize("vocab", [1, 2, 128, 800, 99092, 129280, 1 << 20, (1 << 30) - 1, 1 << 30, (1 << 33) + 7])
def test_matches_numpy(lib, vocab):
    for layer in [0, 1, 2, 4, 14, 39, 100, 1023]:
        n = 8
        out = (ctypes.c_int64 * n)()
        assert lib.di_engram_hash_multipliers(layer, vocab, n, out) == 0
        assert list(out) == numpy_multipliers(layer, vocab, n), (layer, vocab)


def test_invalid_arguments_are_an_error(lib):
    out = (ctypes.c_int64 * 4)()
    assert lib.di_engram_hash_multipliers(-1, 128, 4, out) == -1
    assert lib.di_engram_hash_multipliers(1, 0, 4, out) == -1
    assert lib.di_engram_hash_multipliers(1, 128, 0, out) == -1
