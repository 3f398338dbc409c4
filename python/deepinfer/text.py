"""text.py — the model's tokenizer and prompt renderer for an engine.

The engine (C) never calls the tokenizer itself (the recipe layer sits above it); this module
loads tokenizer.json through the library's tokenizer API and installs it as the engine's text
hooks (C function pointers: no Python runs per token), and renders chat conversations with the
library's V4.1 renderer into prompt ids (control tokens by id, text by plain BPE: recipe.md §5.2).
"""
import ctypes
import json
import os
from typing import List, Optional, Tuple

from . import _lib
from ._lib import lib, libc

BOS_SPELLING = "<｜begin▁of▁sentence｜>"


class Tokenizer:
    """A loaded tokenizer.json (freed with close()).  A file without the V4 control tokens (a V3
    tokenizer.json) gets the V4.1 added-token table on top (recipe-data/README.md); a file that
    has them (a V4.1 checkpoint's, the built-in tiny model's) is used as it is."""

    def __init__(self, path: str):
        handle = lib.di_tokenizer_load_table(path.encode(), _lib.ADDED_TABLE_FILE)
        if handle and lib.di_tokenizer_special_id(handle, "</think>".encode()) < 0:
            lib.di_tokenizer_free(handle)
            handle = lib.di_tokenizer_load_table(path.encode(), _lib.ADDED_TABLE_V41)
        if not handle:
            raise RuntimeError(_lib.last_error())
        self._handle = handle
        bos = lib.di_tokenizer_special_id(handle, BOS_SPELLING.encode())
        self.bos_id = bos if bos >= 0 else None

    @classmethod
    def from_model_dir(cls, model_dir: Optional[str]) -> Optional["Tokenizer"]:
        if not model_dir:
            return None
        path = os.path.join(model_dir, "tokenizer.json")
        return cls(path) if os.path.exists(path) else None

    def close(self):
        if self._handle:
            lib.di_tokenizer_free(self._handle)
            self._handle = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def vocab_size(self) -> int:
        return lib.di_tokenizer_vocab_size(self._handle)

    def encode(self, text: str) -> List[int]:
        data = text.encode("utf-8")
        ids = ctypes.POINTER(ctypes.c_int32)()
        n = ctypes.c_size_t()
        if lib.di_tokenizer_encode(self._handle, data, len(data), ctypes.byref(ids), ctypes.byref(n)) != 0:
            raise RuntimeError(_lib.last_error())
        try:
            return list(ids[:n.value]) if n.value else []
        finally:
            libc.free(ctypes.cast(ids, ctypes.c_void_p))

    def special_id(self, spelling: str) -> int:
        tid = lib.di_tokenizer_special_id(self._handle, spelling.encode("utf-8"))
        if tid < 0:
            raise RuntimeError(_lib.last_error())
        return tid

    def hooks(self, add_bos: bool = True) -> _lib.TextHooks:
        """The engine's text hooks over this tokenizer (the library's own functions)."""
        def address(fn):
            return ctypes.cast(fn, ctypes.c_void_p).value
        bos = self.bos_id if (add_bos and self.bos_id is not None) else -1
        return _lib.TextHooks(address(lib.di_tokenizer_encode), address(lib.di_tokenizer_token_bytes),
                              address(lib.di_tokenizer_is_added), None, self._handle, bos)

    def render_chat(self, request: dict) -> Tuple[str, List[int]]:
        """A `deepinfer render` request -> (prompt string, prompt ids)."""
        data = json.dumps(request, ensure_ascii=False).encode("utf-8")
        out = ctypes.c_void_p()
        if lib.di_render_json(data, len(data), _lib.RENDER_WITH_SEGMENTS, ctypes.byref(out)) != 0:
            raise RuntimeError(_lib.last_error())
        try:
            result = json.loads(ctypes.string_at(out.value).decode("utf-8"))
        finally:
            libc.free(out)
        ids: List[int] = []
        for seg in result.get("segments", []):
            if seg["special"]:
                ids.append(self.special_id(seg["text"]))
            else:
                ids.extend(self.encode(seg["text"]))
        return result["prompt"], ids
