"""testing.py — test hooks, not models.

mock_llm() gives an LLM over the engine's deterministic mock runner (di_engine_create_mock): its
logits are a hash of (token history, position), its text is byte level (ids 0..255 are bytes, 256
is EOS, higher ids are the words " w<id>").  It exercises the whole engine — scheduling, pages,
sampling, streaming, stop strings — but it is not a language model.  LLM() runs the V4.1 model
core; today it refuses models whose Engram maps the model core cannot derive yet (the built-in
tiny model among them) and says so.
"""
from . import _lib
from ._lib import lib
from .llm import LLM, DeepInferError, _engine_options

MOCK_EOS = 256


def mock_llm(vocab_size: int = 512, model_seed: int = 0, *, max_num_seqs=None, max_batch_tokens=None,
             max_prefill_chunk=None, state_memory_bytes=1 << 24, async_scheduling=None,
             batch_invariant=None, seed: int = 0, tokenizer: str = None,
             enable_prefix_caching=None, kv_cache=None, draft_agree_rate=None, draft_max=None,
             draft_schedule=None) -> LLM:
    """An LLM over the mock runner; with `tokenizer` (a tokenizer.json path) its text goes through
    that tokenizer instead of the mock's byte-level text (vocab_size should then match it).  With
    draft_agree_rate (0..1) the mock has a drafter of 5 tokens whose drafts are its own greedy
    continuation at that rate (di_engine_create_mock_drafter), for speculative decoding."""
    import ctypes
    opts = _engine_options(max_num_seqs, max_batch_tokens, max_prefill_chunk, state_memory_bytes,
                           async_scheduling, batch_invariant, seed, enable_prefix_caching, draft_max,
                           draft_schedule)
    from .llm import _kv_cache_options
    kv_dir = _kv_cache_options(opts, **(kv_cache or {}))  # noqa: F841 (alive until created)
    if draft_agree_rate is None:
        handle = lib.di_engine_create_mock(vocab_size, model_seed, ctypes.byref(opts))
    else:
        handle = lib.di_engine_create_mock_drafter(vocab_size, model_seed, 5, draft_agree_rate, ctypes.byref(opts))
    if not handle:
        raise DeepInferError(_lib.last_error())
    return LLM(_engine_handle=handle, tokenizer=tokenizer)
