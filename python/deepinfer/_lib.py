"""_lib.py — the ctypes declarations of the engine section of include/deepinfer.h.

Loads the shared library built by `make` (build/libdeepinfer.so at the repository root, or the
file named by DEEPINFER_LIB).  Nothing is compiled at import.  The Structure layouts mirror the C
structs field by field; keep them in step with include/deepinfer.h.  At import every mirror is
compared with the library's own description of the struct (di_abi_struct, di_abi_field): a
size, a field name, offset or size that differs is an ImportError naming the struct and field,
not a silent wrong read.
"""
import ctypes
import os
from ctypes import (POINTER, Structure, c_char_p, c_double, c_float, c_int, c_int32,
                    c_size_t, c_uint64, c_void_p)

MAX_DRAFT = 16  # DI_MAX_DRAFT
MAX_LOGPROBS = 20

FINISH_NONE, FINISH_STOP, FINISH_LENGTH, FINISH_ABORT, FINISH_ERROR = 0, 1, 2, 3, 4
FINISH_NAMES = {FINISH_STOP: "stop", FINISH_LENGTH: "length", FINISH_ABORT: "abort", FINISH_ERROR: "error"}


class EngineOptions(Structure):
    _fields_ = [("max_num_seqs", c_int), ("max_batch_tokens", c_int), ("max_prefill_chunk", c_int),
                ("state_memory_bytes", c_size_t), ("async_scheduling", c_int),
                ("batch_invariant", c_int), ("seed", c_uint64),
                ("engram_token_map", POINTER(c_int32)), ("engram_token_map_len", ctypes.c_int64),
                ("enable_prefix_caching", c_int), ("prefix_cache_bytes", c_size_t),
                ("kv_cache_dir", c_char_p), ("kv_cache_ram_bytes", c_size_t),
                ("kv_cache_disk_bytes", c_uint64), ("kv_cache_ttl_s", c_uint64),
                ("kv_block_tokens", c_int), ("kv_cache_replay", c_int),
                ("draft_max", c_int), ("draft_schedule", c_int)]


class LogitBias(Structure):
    _fields_ = [("token", c_int32), ("bias", c_float)]


class CSamplingParams(Structure):
    _fields_ = [("temperature", c_float), ("top_k", c_int), ("top_p", c_float), ("min_p", c_float),
                ("presence_penalty", c_float), ("frequency_penalty", c_float),
                ("repetition_penalty", c_float), ("has_seed", c_int), ("seed", c_uint64),
                ("max_tokens", c_int), ("min_tokens", c_int),
                ("stop_token_ids", POINTER(c_int32)), ("n_stop_token_ids", c_int),
                ("stop", POINTER(c_char_p)), ("n_stop", c_int), ("logprobs", c_int),
                ("ignore_eos", c_int), ("logit_bias", c_void_p), ("n_logit_bias", c_int),
                ("has_thinking_budget", c_int), ("thinking_budget", c_int), ("think_end_id", c_int32),
                ("constraint_type", c_int), ("constraint", c_char_p), ("constraint_after_think", c_int)]


class RequestInput(Structure):
    _fields_ = [("prompt_ids", POINTER(c_int32)), ("n_prompt_ids", c_int),
                ("prompt_text", c_char_p), ("chat_json", c_char_p), ("cache_salt", c_char_p),
                ("exact_state", c_int)]


class TokenLogprobs(Structure):
    _fields_ = [("token", c_int32), ("logprob", c_float), ("n_top", c_int),
                ("top_ids", c_int32 * MAX_LOGPROBS), ("top_logprobs", c_float * MAX_LOGPROBS)]


class StreamDelta(Structure):
    _fields_ = [("request_id", c_uint64), ("new_token_ids", POINTER(c_int32)),
                ("n_new_tokens", c_int), ("new_text", c_void_p), ("new_text_len", c_size_t),
                ("new_logprobs", POINTER(TokenLogprobs)), ("finish_reason", c_int)]


class RequestOutputC(Structure):
    _fields_ = [("request_id", c_uint64), ("prompt_ids", POINTER(c_int32)), ("n_prompt_ids", c_int),
                ("token_ids", POINTER(c_int32)), ("n_tokens", c_int), ("text", c_void_p),
                ("text_len", c_size_t), ("logprobs", POINTER(TokenLogprobs)),
                ("cumulative_logprob", c_double), ("finish_reason", c_int), ("stop_token", c_int32),
                ("stop_string", c_int), ("seed", c_uint64), ("n_preemptions", c_int),
                ("time_to_first_token_s", c_double), ("total_time_s", c_double),
                ("n_cached_tokens", c_int), ("time_in_queue_s", c_double),
                ("spec_num_drafts", c_uint64), ("spec_num_draft_tokens", c_uint64),
                ("spec_num_accepted_tokens", c_uint64)]


class EngineMetrics(Structure):
    _fields_ = [("steps", c_uint64), ("prefill_tokens", c_uint64), ("decode_tokens", c_uint64),
                ("preemptions", c_uint64), ("requests_added", c_uint64),
                ("requests_finished", c_uint64), ("requests_aborted", c_uint64),
                ("requests_waiting", c_int), ("requests_running", c_int),
                ("page_bytes", c_size_t), ("pages_total", c_size_t), ("pages_used", c_size_t),
                ("pages_peak", c_size_t), ("state_bytes_used", c_size_t),
                ("time_forward_s", c_double), ("time_sample_s", c_double),
                ("time_schedule_s", c_double), ("time_output_s", c_double), ("time_wait_s", c_double),
                ("prefix_cache_enabled", c_int), ("prefix_cache_lookups", c_uint64),
                ("prefix_cache_hits", c_uint64), ("prefix_cache_hit_tokens", c_uint64),
                ("prefix_cache_entries", c_size_t), ("pages_cached", c_size_t),
                ("kv_cache_enabled", c_int), ("kv_lookups", c_uint64),
                ("kv_hit_tokens_ram", c_uint64), ("kv_hit_tokens_disk", c_uint64),
                ("kv_blocks_stored", c_uint64), ("kv_evictions", c_uint64),
                ("kv_bytes_read", c_uint64), ("kv_bytes_written", c_uint64),
                ("kv_records_corrupt", c_uint64), ("kv_files_skipped", c_uint64),
                ("kv_writes_dropped", c_uint64), ("kv_write_errors", c_uint64),
                ("spec_draft_max", c_int), ("spec_num_drafts", c_uint64),
                ("spec_num_draft_tokens", c_uint64), ("spec_num_accepted_tokens", c_uint64),
                ("spec_accepted_hist", c_uint64 * (MAX_DRAFT + 1)),
                ("spec_num_grammar_truncated", c_uint64), ("time_draft_s", c_double)]


class TextHooks(Structure):
    """DiTextHooks: C function pointers (as addresses) and their context."""
    _fields_ = [("encode", c_void_p), ("token_bytes", c_void_p), ("is_special", c_void_p),
                ("render_chat", c_void_p), ("ctx", c_void_p), ("bos_id", c_int32)]


StreamCallback = ctypes.CFUNCTYPE(None, c_void_p, POINTER(StreamDelta))


# Every Structure above and the C struct it mirrors (check_abi compares each at import).
MIRRORS = ((EngineOptions, "DiEngineOptions"), (LogitBias, "DiLogitBias"), (CSamplingParams, "DiSamplingParams"),
           (RequestInput, "DiRequestInput"), (TokenLogprobs, "DiTokenLogprobs"),
           (StreamDelta, "DiStreamDelta"), (RequestOutputC, "DiRequestOutput"),
           (EngineMetrics, "DiEngineMetrics"), (TextHooks, "DiTextHooks"))


class AbiMismatch(ImportError):
    """A ctypes mirror that does not match the struct of the loaded library."""


def _field_size(cls, name):
    return ctypes.sizeof(dict(cls._fields_)[name])


def check_abi(lib, mirrors=None):
    """Compare each (Structure, C name) in mirrors (default MIRRORS) with the library's layout;
    AbiMismatch names the first difference (the library and the binding from different trees)."""
    where = getattr(lib, "_name", "the library")
    for cls, cname in MIRRORS if mirrors is None else mirrors:
        size, n_fields = c_size_t(), c_int()
        if lib.di_abi_struct(cname.encode(), ctypes.byref(size), ctypes.byref(n_fields)) != 0:
            raise AbiMismatch(f"deepinfer: {where} does not describe {cname}: "
                              f"{lib.di_last_error().decode('utf-8', 'replace')}")
        names = [f[0] for f in cls._fields_]
        for i in range(max(n_fields.value, len(names))):
            py = names[i] if i < len(names) else None
            c_name, off, fsize = c_char_p(), c_size_t(), c_size_t()
            if i >= n_fields.value:
                raise AbiMismatch(f"deepinfer: {cls.__name__} mirrors {cname} with field '{py}' (#{i}), "
                                  f"which {where}'s {cname} does not have ({n_fields.value} fields)")
            if lib.di_abi_field(cname.encode(), i, ctypes.byref(c_name), ctypes.byref(off), ctypes.byref(fsize)) != 0:
                raise AbiMismatch(f"deepinfer: {cname} field #{i}: {lib.di_last_error().decode('utf-8', 'replace')}")
            c = c_name.value.decode()
            if py is None:
                raise AbiMismatch(f"deepinfer: {cls.__name__} lacks field '{c}' (#{i}) of {cname} in {where}")
            if py != c:
                raise AbiMismatch(f"deepinfer: {cls.__name__} field #{i} is '{py}', {cname}'s is '{c}' in {where}")
            got = (getattr(cls, py).offset, _field_size(cls, py))
            if got != (off.value, fsize.value):
                raise AbiMismatch(f"deepinfer: {cls.__name__}.{py} is at offset {got[0]} with size {got[1]}, "
                                  f"{cname}.{c} at offset {off.value} with size {fsize.value} in {where}")
        if ctypes.sizeof(cls) != size.value:
            raise AbiMismatch(f"deepinfer: {cls.__name__} is {ctypes.sizeof(cls)} bytes, {cname} "
                              f"{size.value} in {where}")


def _library_path():
    env = os.environ.get("DEEPINFER_LIB")
    if env:
        return env
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(root, "build", "libdeepinfer.so")


def _load():
    path = _library_path()
    if not os.path.exists(path):
        raise ImportError(f"deepinfer: shared library {path} not found; run `make` at the repository "
                          "root (or set DEEPINFER_LIB to the library's path)")
    lib = ctypes.CDLL(path)
    sig = {
        "di_last_error": (c_char_p, []),
        "di_version": (c_char_p, []),
        "di_engine_options_init": (None, [POINTER(EngineOptions)]),
        "di_sampling_params_init": (None, [POINTER(CSamplingParams)]),
        "di_engine_create": (c_void_p, [c_char_p, POINTER(EngineOptions)]),
        "di_model_dir_engram_map": (c_int, [c_char_p, POINTER(POINTER(c_int32)), POINTER(ctypes.c_int64)]),
        "di_engine_create_mock": (c_void_p, [c_int32, c_uint64, POINTER(EngineOptions)]),
        "di_engine_create_mock_drafter": (c_void_p, [c_int32, c_uint64, c_int32, ctypes.c_double,
                                                     POINTER(EngineOptions)]),
        "di_engine_destroy": (None, [c_void_p]),
        "di_engine_add_request": (c_int, [c_void_p, POINTER(RequestInput), POINTER(CSamplingParams),
                                          StreamCallback, c_void_p, POINTER(c_uint64)]),
        "di_engine_abort": (c_int, [c_void_p, c_uint64]),
        "di_engine_step": (c_int, [c_void_p, POINTER(c_int)]),
        "di_engine_run": (c_int, [c_void_p]),
        "di_engine_get_output": (c_int, [c_void_p, c_uint64, POINTER(RequestOutputC)]),
        "di_engine_request_error": (c_char_p, [c_void_p, c_uint64]),
        "di_engine_release": (c_int, [c_void_p, c_uint64]),
        "di_engine_get_metrics": (c_int, [c_void_p, POINTER(EngineMetrics)]),
        "di_engine_vocab_size": (c_int32, [c_void_p]),
        "di_engine_model_dir": (c_char_p, [c_void_p]),
        "di_engine_set_text_hooks": (c_int, [c_void_p, POINTER(TextHooks)]),
        "di_tokenizer_load": (c_void_p, [c_char_p]),
        "di_tokenizer_load_table": (c_void_p, [c_char_p, c_int]),
        "di_tokenizer_free": (None, [c_void_p]),
        "di_tokenizer_vocab_size": (c_size_t, [c_void_p]),
        "di_tokenizer_encode": (c_int, [c_void_p, c_char_p, c_size_t, POINTER(POINTER(c_int32)),
                                        POINTER(c_size_t)]),
        "di_tokenizer_token_bytes": (c_void_p, [c_void_p, c_int32, POINTER(c_size_t)]),
        "di_tokenizer_is_added": (c_int, [c_void_p, c_int32]),
        "di_tokenizer_special_id": (c_int32, [c_void_p, c_char_p]),
        "di_render_json": (c_int, [c_char_p, c_size_t, c_int, POINTER(c_void_p)]),
        "di_abi_struct": (c_int, [c_char_p, POINTER(c_size_t), POINTER(c_int)]),
        "di_abi_field": (c_int, [c_char_p, c_int, POINTER(c_char_p), POINTER(c_size_t), POINTER(c_size_t)]),
    }
    for name, (restype, argtypes) in sig.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    check_abi(lib)
    return lib


lib = _load()
libc = ctypes.CDLL(None)
libc.free.argtypes = [c_void_p]
libc.free.restype = None

RENDER_WITH_SEGMENTS = 1
ADDED_TABLE_FILE = 0
ADDED_TABLE_V41 = 2  # DiAddedTable: the file's added tokens plus the V4.1 ones it lacks


def last_error():
    msg = lib.di_last_error()
    return msg.decode("utf-8", "replace") if msg else ""
