"""llm.py — the offline API: LLM.generate() and LLM.chat() over the C engine.

    from deepinfer import LLM, SamplingParams
    llm = LLM(model="/path/to/DeepSeek-V4.1-Flash")   # LLM() = the built-in tiny model
    outs = llm.generate(["Hello"], SamplingParams(temperature=0.6, max_tokens=64, seed=1))

The engine steps from Python, one di_engine_step at a time, so Ctrl-C (KeyboardInterrupt) aborts
the requests of the call and frees their state before the exception propagates.
"""
import ctypes
import json
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

from . import _lib
from ._lib import lib
from .outputs import CompletionOutput, Logprob, RequestOutput
from .sampling_params import SamplingParams
from .text import Tokenizer

PromptType = Union[str, Dict[str, Any]]


class DeepInferError(RuntimeError):
    """An error reported by the C library, with its cause."""


def _check(rc: int, what: str):
    if rc != 0:
        raise DeepInferError(_lib.last_error() or f"{what} failed")


_GB = 1 << 30


def _kv_cache_options(opts, kv_cache_dir=None, kv_cache_ram_gb=None, kv_cache_disk_gb=None,
                      kv_cache_ttl_s=None, kv_block_tokens=None, kv_cache_replay=None):
    """The KV block cache's fields of DiEngineOptions (the engine validates them); returns the
    directory's bytes, which must outlive the engine's creation."""
    for name, v in (("kv_cache_ram_gb", kv_cache_ram_gb), ("kv_cache_disk_gb", kv_cache_disk_gb),
                    ("kv_cache_ttl_s", kv_cache_ttl_s)):
        if v is not None and not v > 0:
            raise ValueError(f"{name} must be > 0, got {v!r}")
    dir_bytes = kv_cache_dir.encode("utf-8") if kv_cache_dir is not None else None
    opts.kv_cache_dir = dir_bytes
    if kv_cache_ram_gb is not None:
        opts.kv_cache_ram_bytes = int(kv_cache_ram_gb * _GB)
    if kv_cache_disk_gb is not None:
        opts.kv_cache_disk_bytes = int(kv_cache_disk_gb * _GB)
    if kv_cache_ttl_s is not None:
        opts.kv_cache_ttl_s = int(kv_cache_ttl_s)
    if kv_block_tokens is not None:
        opts.kv_block_tokens = kv_block_tokens
    if kv_cache_replay is not None:
        modes = {"exact": 0, "approx": 1}  # DI_KV_REPLAY_EXACT, DI_KV_REPLAY_APPROX
        if kv_cache_replay not in modes:
            raise ValueError(f"kv_cache_replay must be 'exact' or 'approx', got {kv_cache_replay!r}")
        opts.kv_cache_replay = modes[kv_cache_replay]
    return dir_bytes


_DRAFT_SCHEDULES = {"fixed": 0, "confidence": 1}


def _engine_options(max_num_seqs, max_batch_tokens, max_prefill_chunk, state_memory_bytes,
                    async_scheduling, batch_invariant, seed, enable_prefix_caching=None,
                    draft_max=None, draft_schedule=None):
    opts = _lib.EngineOptions()
    lib.di_engine_options_init(ctypes.byref(opts))
    if max_num_seqs is not None:
        opts.max_num_seqs = max_num_seqs
    if max_batch_tokens is not None:
        opts.max_batch_tokens = max_batch_tokens
    if max_prefill_chunk is not None:
        opts.max_prefill_chunk = max_prefill_chunk
    if state_memory_bytes is not None:
        opts.state_memory_bytes = state_memory_bytes
    if async_scheduling is not None:
        opts.async_scheduling = 1 if async_scheduling else 0
    if batch_invariant is not None:
        opts.batch_invariant = 1 if batch_invariant else 0
    if enable_prefix_caching is not None:
        opts.enable_prefix_caching = 1 if enable_prefix_caching else 0
    if draft_max is not None:
        opts.draft_max = draft_max
    if draft_schedule is not None:
        if draft_schedule not in _DRAFT_SCHEDULES:
            raise ValueError(f"draft_schedule must be 'fixed' or 'confidence', got {draft_schedule!r}")
        opts.draft_schedule = _DRAFT_SCHEDULES[draft_schedule]
    opts.seed = seed or 0
    return opts


class _CParams:
    """A SamplingParams as the C struct, with the arrays it points to kept alive.  think_end:
    the model's </think> id (None: no tokenizer; a thinking budget is then refused); thinking:
    the prompt opens a reasoning block, so a constraint applies after </think>."""

    def __init__(self, p: SamplingParams, index: int, think_end: Optional[int] = None, thinking: bool = False):
        c = _lib.CSamplingParams()
        lib.di_sampling_params_init(ctypes.byref(c))
        c.temperature = p.temperature
        c.top_k = p.top_k if p.top_k > 0 else 0
        c.top_p = p.top_p
        c.min_p = p.min_p
        c.presence_penalty = p.presence_penalty
        c.frequency_penalty = p.frequency_penalty
        c.repetition_penalty = p.repetition_penalty
        seed = p.seed_for(index)
        c.has_seed = 0 if seed is None else 1
        c.seed = 0 if seed is None else seed
        c.max_tokens = p.max_tokens
        c.min_tokens = p.min_tokens
        ids = list(p.stop_token_ids or [])
        self._ids = (ctypes.c_int32 * max(1, len(ids)))(*ids)
        c.stop_token_ids = ctypes.cast(self._ids, ctypes.POINTER(ctypes.c_int32))
        c.n_stop_token_ids = len(ids)
        stops = [s.encode("utf-8") for s in p.stop_list()]
        self._stops = (ctypes.c_char_p * max(1, len(stops)))(*stops)
        c.stop = ctypes.cast(self._stops, ctypes.POINTER(ctypes.c_char_p))
        c.n_stop = len(stops)
        c.logprobs = -1 if p.logprobs is None else p.logprobs
        c.ignore_eos = 1 if p.ignore_eos else 0
        bias = sorted((p.logit_bias or {}).items())
        self._bias = (_lib.LogitBias * max(1, len(bias)))(*[_lib.LogitBias(t, b) for t, b in bias])
        c.logit_bias = ctypes.cast(self._bias, ctypes.c_void_p)
        c.n_logit_bias = len(bias)
        if p.thinking_token_budget is not None:
            if think_end is None:
                raise ValueError("SamplingParams.thinking_token_budget needs the model's tokenizer (its </think> "
                                 "token); this LLM has none")
            c.has_thinking_budget = 1
            c.thinking_budget = min(p.thinking_token_budget, p.max_tokens)
            c.think_end_id = think_end
        self._set_constraint(c, p, think_end, thinking)
        self.struct = c

    def _set_constraint(self, c, p: SamplingParams, think_end: Optional[int], thinking: bool):
        constraint = p.constraint()
        if constraint is None:
            return
        c.constraint_type = constraint[0]
        self._constraint_text = None if constraint[1] is None else constraint[1].encode("utf-8")
        c.constraint = self._constraint_text
        if thinking:
            if think_end is None:
                raise ValueError("a structured output in thinking mode needs the model's </think> token")
            c.constraint_after_think = 1
            c.think_end_id = think_end


class LLM:
    """An engine over one model.  model=None: the built-in tiny model ($DEEPINFER_HF_MODEL_DIR
    when set).  Options map to DiEngineOptions; None keeps the C default (prefix caching: off;
    enable_prefix_caching=True lets a request that extends a finished one, e.g. the next turn
    of a chat, start from its cached state: RequestOutput.num_cached_tokens).  kv_cache: the KV
    block cache's options (kv_cache_dir, kv_cache_ram_gb, kv_cache_disk_gb, kv_cache_ttl_s,
    kv_block_tokens, kv_cache_replay "exact" | "approx"; see DiEngineOptions), which shares whole
    blocks of any common prefix.
    draft_max (0..16)
    and draft_schedule ('fixed' | 'confidence'): speculative decoding for a model with a drafter
    (None: $DEEPINFER_USE_NEXTN_DECODE / $DEEPINFER_ENABLE_MTP_VARLEN, else 5 and confidence);
    RequestOutput.metrics counts its drafts."""

    def __init__(self, model: Optional[str] = None, *, max_num_seqs: Optional[int] = None,
                 max_batch_tokens: Optional[int] = None, max_prefill_chunk: Optional[int] = None,
                 state_memory_bytes: Optional[int] = None, async_scheduling: Optional[bool] = None,
                 batch_invariant: Optional[bool] = None, seed: int = 0, tokenizer: Optional[str] = None,
                 enable_prefix_caching: Optional[bool] = None, kv_cache: Optional[dict] = None,
                 draft_max: Optional[int] = None, draft_schedule: Optional[str] = None, _engine_handle=None):
        self._engine = None
        self.tokenizer: Optional[Tokenizer] = None
        if _engine_handle is None:
            opts = _engine_options(max_num_seqs, max_batch_tokens, max_prefill_chunk,
                                   state_memory_bytes, async_scheduling, batch_invariant, seed,
                                   enable_prefix_caching, draft_max, draft_schedule)
            kv_dir = _kv_cache_options(opts, **(kv_cache or {}))  # noqa: F841 (alive until created)
            model_arg = model.encode("utf-8") if model else None
            # a real checkpoint ships no engram_token_map.json: its map comes from its tokenizer
            engram = ctypes.POINTER(ctypes.c_int32)()
            engram_len = ctypes.c_int64(0)
            if lib.di_model_dir_engram_map(model_arg, ctypes.byref(engram), ctypes.byref(engram_len)) != 0:
                raise DeepInferError(_lib.last_error())
            if engram:
                opts.engram_token_map = engram
                opts.engram_token_map_len = engram_len.value
            try:
                handle = lib.di_engine_create(model_arg, ctypes.byref(opts))
            finally:
                if engram:
                    _lib.libc.free(ctypes.cast(engram, ctypes.c_void_p))
            if not handle:
                raise DeepInferError(_lib.last_error())
            _engine_handle = handle
        self._engine = _engine_handle
        self._next_request = 0
        model_dir = lib.di_engine_model_dir(self._engine)
        try:
            if tokenizer:
                self.tokenizer = Tokenizer(tokenizer)
            elif model_dir:
                self.tokenizer = Tokenizer.from_model_dir(model_dir.decode())
            if self.tokenizer:
                hooks = self.tokenizer.hooks()
                _check(lib.di_engine_set_text_hooks(self._engine, ctypes.byref(hooks)), "text hooks")
        except Exception as e:
            self.close()
            raise DeepInferError(f"loading the tokenizer: {e}") from e

    # -- lifetime -------------------------------------------------------------------------------

    def close(self):
        if self._engine:
            lib.di_engine_destroy(self._engine)
            self._engine = None
        if getattr(self, "tokenizer", None):
            self.tokenizer.close()  # after the engine: its hooks point at the tokenizer
            self.tokenizer = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _handle(self):
        if not self._engine:
            raise DeepInferError("this LLM is closed")
        return self._engine

    # -- public API -----------------------------------------------------------------------------

    def generate(self, prompts: Union[PromptType, Sequence[PromptType]],
                 sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
                 use_tqdm: bool = False) -> List[RequestOutput]:
        """Complete each prompt: a string, {"prompt": str} (vLLM's TextPrompt) or
        {"prompt_token_ids": [...]} (vLLM's TokensPrompt); a dict may carry vLLM's "cache_salt"
        (requests share KV cache blocks only under the same salt).  One SamplingParams for all
        prompts or one per prompt.  Outputs in prompt order."""
        if isinstance(prompts, (str, dict)):
            prompts = [prompts]
        prompts = list(prompts)
        inputs = []
        for i, p in enumerate(prompts):
            if isinstance(p, str):
                inputs.append(("text", p, p, None))
            elif isinstance(p, dict) and ("prompt_token_ids" in p or "prompt" in p):
                salt = p.get("cache_salt")
                if salt is not None and (not isinstance(salt, str) or not salt):
                    raise TypeError(f"prompt {i}: cache_salt must be a non-empty string")
                if "prompt_token_ids" in p:
                    inputs.append(("ids", list(p["prompt_token_ids"]), p.get("prompt"), salt))
                else:
                    inputs.append(("text", p["prompt"], p["prompt"], salt))
            else:
                raise TypeError(f"prompt {i}: expected a string, {{'prompt': str}} or "
                                f"{{'prompt_token_ids': [...]}}, got {type(p).__name__}")
        return self._run(inputs, self._params_list(sampling_params, len(inputs)))

    def chat(self, messages: Union[List[Dict[str, Any]], List[List[Dict[str, Any]]]],
             sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
             thinking: bool = False, reasoning_effort: Optional[str] = None,
             tools: Optional[List[Dict[str, Any]]] = None, use_tqdm: bool = False) -> List[RequestOutput]:
        """Answer one conversation (a list of messages) or several (a list of lists), rendered with
        the V4.1 prompt format by the engine (the `render` command's input object)."""
        conversations = [messages] if messages and isinstance(messages[0], dict) else list(messages)
        inputs = []
        for conv in conversations:
            request = {"encoding": "v41", "messages": conv,
                       "thinking_mode": "thinking" if thinking else "chat"}
            if tools:
                request["tools"] = tools
            if reasoning_effort is not None:
                request["reasoning_effort"] = reasoning_effort
            if self.tokenizer:
                prompt, ids = self.tokenizer.render_chat(request)
                inputs.append(("ids", ids, prompt, None))
            else:  # the engine has no renderer: it says so
                inputs.append(("chat", json.dumps(request, ensure_ascii=False), None, None))
        return self._run(inputs, self._params_list(sampling_params, len(inputs)), thinking=thinking)

    def metrics(self) -> Dict[str, float]:
        m = _lib.EngineMetrics()
        _check(lib.di_engine_get_metrics(self._handle(), ctypes.byref(m)), "metrics")
        return {name: getattr(m, name) for name, _ in m._fields_}

    @property
    def vocab_size(self) -> int:
        return lib.di_engine_vocab_size(self._handle())

    # -- internals ------------------------------------------------------------------------------

    @staticmethod
    def _params_list(sp, n) -> List[SamplingParams]:
        if sp is None:
            return [SamplingParams()] * n
        if isinstance(sp, SamplingParams):
            return [sp] * n
        sp = list(sp)
        if len(sp) != n:
            raise ValueError(f"got {len(sp)} SamplingParams for {n} prompts")
        return sp

    def _think_end(self) -> Optional[int]:
        """The model's </think> id, or None without a tokenizer (or without that token)."""
        if not self.tokenizer:
            return None
        try:
            return self.tokenizer.special_id("</think>")
        except RuntimeError:
            return None

    def _step(self) -> int:
        """One engine step; returns the work left (requests not finished, plus in-flight work)."""
        active = ctypes.c_int(0)
        _check(lib.di_engine_step(self._handle(), ctypes.byref(active)), "engine step")
        return active.value

    def _add(self, kind, value, salt, params: _CParams) -> int:
        inp = _lib.RequestInput()
        keep = None
        if salt is not None:
            inp.cache_salt = salt.encode("utf-8")
        if kind == "ids":
            keep = (ctypes.c_int32 * max(1, len(value)))(*value)
            inp.prompt_ids = ctypes.cast(keep, ctypes.POINTER(ctypes.c_int32))
            inp.n_prompt_ids = len(value)
        elif kind == "text":
            inp.prompt_text = value.encode("utf-8")
        else:
            inp.chat_json = value.encode("utf-8")
        rid = ctypes.c_uint64()
        rc = lib.di_engine_add_request(self._handle(), ctypes.byref(inp), ctypes.byref(params.struct),
                                       _lib.StreamCallback(), None, ctypes.byref(rid))
        del keep
        _check(rc, "adding a request")
        return rid.value

    def _run(self, inputs, params_list, thinking: bool = False) -> List[RequestOutput]:
        engine = self._handle()
        groups = []  # per prompt: list of C request ids (n samples)
        try:
            for (kind, value, _, salt), sp in zip(inputs, params_list):
                ids = []
                groups.append(ids)
                for i in range(sp.n):
                    ids.append(self._add(kind, value, salt, _CParams(sp, i, self._think_end(), thinking)))
            active = 1
            while active > 0:
                active = self._step()
            results = []
            for (kind, value, prompt_text, _), sp, ids in zip(inputs, params_list, groups):
                results.append(self._collect(prompt_text, sp, ids))
            return results
        finally:
            # aborts whatever is unfinished (Ctrl-C, errors) and frees every request of this call;
            # then drains a step still in flight (async) so its state pages come back too
            for ids in groups:
                for rid in ids:
                    lib.di_engine_release(engine, rid)
            left = ctypes.c_int(1)
            for _ in range(4):
                if lib.di_engine_step(engine, ctypes.byref(left)) != 0 or left.value == 0:
                    break

    def _collect(self, prompt_text, sp: SamplingParams, ids) -> RequestOutput:
        outs = []
        prompt_ids: List[int] = []
        metrics: Dict[str, float] = {}
        spec = dict.fromkeys(("spec_num_drafts", "spec_num_draft_tokens", "spec_num_accepted_tokens"), 0)
        cached = None
        for index, rid in enumerate(ids):
            o = _lib.RequestOutputC()
            _check(lib.di_engine_get_output(self._handle(), rid, ctypes.byref(o)), "fetching an output")
            prompt_ids = o.prompt_ids[:o.n_prompt_ids]
            tokens = o.token_ids[:o.n_tokens]
            text = ctypes.string_at(o.text, o.text_len).decode("utf-8") if o.text_len else ""
            logprobs = None
            if sp.logprobs is not None and o.logprobs:
                logprobs = []
                for k in range(o.n_tokens):
                    lp = o.logprobs[k]
                    entry = {int(lp.top_ids[r]): Logprob(float(lp.top_logprobs[r]), r + 1)
                             for r in range(lp.n_top)}
                    if lp.token not in entry:
                        entry[int(lp.token)] = Logprob(float(lp.logprob), None)
                    logprobs.append(entry)
            stop_reason = None
            if o.stop_string >= 0:
                stop_reason = sp.stop_list()[o.stop_string]
            elif o.stop_token >= 0 and o.stop_token in (sp.stop_token_ids or []):
                stop_reason = int(o.stop_token)
            error = None
            if o.finish_reason == _lib.FINISH_ERROR:
                why = lib.di_engine_request_error(self._handle(), rid)
                error = why.decode("utf-8", "replace") if why else "request failed"
            outs.append(CompletionOutput(
                index=index, text=text, token_ids=list(tokens),
                cumulative_logprob=o.cumulative_logprob if sp.logprobs is not None else None,
                logprobs=logprobs, finish_reason=_lib.FINISH_NAMES.get(o.finish_reason),
                stop_reason=stop_reason, seed=o.seed, error=error))
            metrics = {"time_to_first_token_s": o.time_to_first_token_s,
                       "total_time_s": o.total_time_s, "preemptions": o.n_preemptions}
            for key in spec:  # summed over the n samples
                spec[key] += getattr(o, key)
            cached = o.n_cached_tokens
        metrics.update(spec)
        self._next_request += 1
        return RequestOutput(request_id=str(ids[0]) if ids else "", prompt=prompt_text,
                             prompt_token_ids=list(prompt_ids), outputs=outs,
                             finished=all(c.finish_reason is not None for c in outs), metrics=metrics,
                             num_cached_tokens=cached)
