"""test_abi.py — the Python binding's ctypes mirrors against the C library's own description of
its structs (di_abi_struct / di_abi_field), checked at import: the real mirrors pass, every
Structure of _lib.py is checked, and deliberately wrong mirrors (a retyped, missing, extra,
reordered or inserted field, an unknown struct) are refused with an error naming the struct and
the field."""
import ctypes
import importlib
import pkgutil
from ctypes import Structure, c_float, c_int, c_int32

import pytest

import deepinfer
from deepinfer import _lib


def mirror(base, fields):
    return type(base.__name__, (Structure,), {"_fields_": fields})


def fields_of(cls):
    return list(cls._fields_)


def test_real_mirrors_match():
    _lib.check_abi(_lib.lib)


def test_every_structure_is_checked():
    # Every ctypes Structure of the package, in any module, is one that _lib checks at import.
    structures = set()
    for info in pkgutil.iter_modules(deepinfer.__path__):
        module = importlib.import_module(f"deepinfer.{info.name}")
        structures |= {v for v in vars(module).values()
                       if isinstance(v, type) and issubclass(v, Structure) and v.__module__ == module.__name__}
    assert structures == {cls for cls, _ in _lib.MIRRORS}


def expect_mismatch(cls, cname, *needles):
    with pytest.raises(_lib.AbiMismatch) as err:
        _lib.check_abi(_lib.lib, [(cls, cname)])
    for needle in needles:
        assert needle in str(err.value), str(err.value)
    return str(err.value)


def test_retyped_field_is_refused():
    f = fields_of(_lib.EngineOptions)
    i = [name for name, _ in f].index("prefix_cache_bytes")
    f[i] = ("prefix_cache_bytes", c_int)  # size_t in C
    expect_mismatch(mirror(_lib.EngineOptions, f), "DiEngineOptions",
                    "EngineOptions.prefix_cache_bytes is at offset", "with size 4",
                    "DiEngineOptions.prefix_cache_bytes", "with size 8")


def test_missing_trailing_field_is_refused():
    f = fields_of(_lib.RequestOutputC)
    expect_mismatch(mirror(_lib.RequestOutputC, f[:-1]), "DiRequestOutput", f"lacks field '{f[-1][0]}'")


def test_missing_field_hidden_by_padding_is_refused():
    # An int added after DiRequestInput.n_prompt_ids would sit in padding: size and offsets agree.
    f = fields_of(_lib.RequestInput)
    assert f[1][0] == "n_prompt_ids"
    padded = f[:2] + [("pad_user", c_int)] + f[2:]
    assert ctypes.sizeof(mirror(_lib.RequestInput, padded)) == ctypes.sizeof(_lib.RequestInput)
    expect_mismatch(mirror(_lib.RequestInput, padded), "DiRequestInput", "field #2 is 'pad_user'", "'prompt_text'")


def test_extra_field_is_refused():
    f = fields_of(_lib.EngineMetrics) + [("from_another_tree", ctypes.c_uint64)]
    expect_mismatch(mirror(_lib.EngineMetrics, f), "DiEngineMetrics",
                    "field 'from_another_tree'", "DiEngineMetrics does not have")


def test_reordered_fields_are_refused():
    f = fields_of(_lib.TokenLogprobs)
    f[0], f[1] = f[1], f[0]  # logprob before token: same sizes, same offsets
    expect_mismatch(mirror(_lib.TokenLogprobs, f), "DiTokenLogprobs", "field #0 is 'logprob'", "'token'")


def test_inserted_field_is_refused():
    f = fields_of(_lib.CSamplingParams)
    f.insert(4, ("typical_p", c_float))
    expect_mismatch(mirror(_lib.CSamplingParams, f), "DiSamplingParams", "field #4 is 'typical_p'",
                    "'presence_penalty'")


def test_unknown_struct_is_refused():
    expect_mismatch(mirror(_lib.TextHooks, [("x", c_int32)]), "DiTextHook", "does not describe DiTextHook",
                    "'DiTextHook'")


def test_load_refuses_a_wrong_mirror(monkeypatch):
    f = fields_of(_lib.StreamDelta)
    f[2] = ("n_new_tokens", ctypes.c_int64)  # int in C
    wrong = tuple((mirror(cls, f) if cls is _lib.StreamDelta else cls, name) for cls, name in _lib.MIRRORS)
    monkeypatch.setattr(_lib, "MIRRORS", wrong)
    with pytest.raises(ImportError) as err:
        _lib._load()
    assert "StreamDelta.n_new_tokens" in str(err.value)
