"""sampling_params.py — SamplingParams, vLLM's names and defaults, checked by the C sampler.

All randomness is keyed by (seed, position): a seeded request gives the same tokens whatever else
runs beside it.  A request without a seed gets one drawn by the engine (reported in the output).
"""
import json
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

# SamplingParams.so_args["schema_type"] -> DiConstraintType (include/deepinfer.h)
CONSTRAINT_TYPES = {"regex": 1, "json_schema": 2, "ebnf": 3, "json_object": 4}


@dataclass
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0                 # <= 0: off (vLLM uses -1; both accepted)
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    seed: Optional[int] = None
    max_tokens: int = 16
    min_tokens: int = 0
    stop: Optional[Union[str, Sequence[str]]] = None
    stop_token_ids: Optional[Sequence[int]] = None
    logprobs: Optional[int] = None  # None: no logprobs; n >= 0: the sampled token's + the n best
    ignore_eos: bool = False
    # token id -> bias in [-100, 100], added to the token's logit before sampling (OpenAI's
    # logit_bias, vLLM's spelling); ids outside the vocabulary are refused by the engine
    logit_bias: Optional[Dict[int, float]] = None
    # vLLM's thinking_token_budget: once this many tokens were generated without the model's
    # </think>, </think> is forced and the answer follows (needs the model's tokenizer)
    thinking_token_budget: Optional[int] = None
    # structured output, DeepSeek's spelling: {"schema_type": "regex" | "json_schema" | "ebnf" |
    # "json_object", "schema": text (a dict for json_schema is serialised; none for json_object)}
    so_args: Optional[dict] = field(default=None, repr=False)
    # the same, vLLM's spelling: a dict (or an object with these attributes) with exactly one of
    # json, regex, grammar, choice, json_object
    structured_outputs: Optional[Any] = field(default=None, repr=False)
    # the DeepSeek release's name of seed: give either, or both equal
    seq_seed: Optional[int] = field(default=None, repr=False)

    def __post_init__(self):
        if not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"SamplingParams.n must be an integer >= 1, got {self.n!r}")
        self._constraint = _constraint_of(self.so_args, self.structured_outputs)
        if self._constraint is not None and self.ignore_eos:
            raise ValueError("SamplingParams: ignore_eos cannot be combined with a structured-output constraint")
        if self.seq_seed is not None:
            if self.seed is not None and self.seed != self.seq_seed:
                raise ValueError(f"SamplingParams: seed ({self.seed!r}) and seq_seed ({self.seq_seed!r}) name the "
                                 "same setting; give one, or both equal")
            self.seed = self.seq_seed
        if self.seed is not None and not (0 <= int(self.seed) < 2**64):
            raise ValueError(f"SamplingParams.seed must be in [0, 2**64), got {self.seed!r}")
        self._check_logit_bias()
        budget = self.thinking_token_budget
        if budget is not None and (not _is_int(budget) or budget < 0):
            raise ValueError(f"SamplingParams.thinking_token_budget must be an integer >= 0, got {budget!r}")

    def _check_logit_bias(self):
        if self.logit_bias is None:
            return
        if not isinstance(self.logit_bias, dict):
            raise ValueError("SamplingParams.logit_bias must be a dict {token id: bias}, got "
                             f"{type(self.logit_bias).__name__}")
        for token, bias in self.logit_bias.items():
            if not _is_int(token) or not 0 <= token < 2**31:
                raise ValueError(f"SamplingParams.logit_bias: key {token!r} is not a token id (an integer >= 0)")
            if isinstance(bias, bool) or not isinstance(bias, (int, float)) or not math.isfinite(bias) \
                    or abs(bias) > 100:
                raise ValueError(f"SamplingParams.logit_bias[{token}] must be a number in [-100, 100], "
                                 f"got {bias!r}")

    def stop_list(self) -> List[str]:
        if self.stop is None:
            return []
        if isinstance(self.stop, str):
            return [self.stop]
        return list(self.stop)

    def seed_for(self, index: int) -> Optional[int]:
        """The seed of the index-th of n samples: seed, seed + 1, ... (None: drawn by the engine)."""
        if self.seed is None:
            return None
        return (int(self.seed) + index) % 2**64


    def constraint(self) -> Optional[Tuple[int, Optional[str]]]:
        """(DiConstraintType, text) of the structured-output constraint, or None."""
        return self._constraint


def _so_text(value, what: str) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    if not isinstance(value, str) or not value:
        raise ValueError(f"SamplingParams.{what} must be a non-empty string, got {value!r}")
    return value


def _ebnf_literal(text: str) -> str:
    out = []
    for ch in text:
        if ch in '\\"':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def choice_grammar(choices) -> str:
    """vLLM's `choice`: the output is exactly one of the strings, as an EBNF alternation."""
    if not isinstance(choices, (list, tuple)) or not choices or \
            not all(isinstance(c, str) and c for c in choices):
        raise ValueError(f"structured_outputs.choice must be a non-empty list of non-empty strings, got {choices!r}")
    return "root ::= " + " | ".join(_ebnf_literal(c) for c in choices)


def _from_so_args(so: dict) -> Tuple[int, Optional[str]]:
    if not isinstance(so, dict):
        raise ValueError(f"SamplingParams.so_args must be a dict, got {type(so).__name__}")
    unknown = set(so) - {"schema_type", "schema"}
    if unknown:
        raise ValueError(f"SamplingParams.so_args: unknown key(s) {sorted(unknown)} (known: schema_type, schema)")
    kind = so.get("schema_type")
    if kind not in CONSTRAINT_TYPES:
        raise ValueError(f"SamplingParams.so_args['schema_type'] must be one of {sorted(CONSTRAINT_TYPES)}, "
                         f"got {kind!r}")
    if kind == "json_object":
        if so.get("schema") is not None:
            raise ValueError("SamplingParams.so_args: schema_type 'json_object' takes no schema")
        return CONSTRAINT_TYPES[kind], None
    return CONSTRAINT_TYPES[kind], _so_text(so.get("schema"), "so_args['schema']")


_VLLM_KEYS = ("json", "regex", "grammar", "choice", "json_object")


def _from_structured_outputs(so) -> Tuple[int, Optional[str]]:
    get = so.get if isinstance(so, dict) else (lambda k: getattr(so, k, None))
    if isinstance(so, dict):
        unknown = set(so) - set(_VLLM_KEYS)
        if unknown:
            raise ValueError(f"SamplingParams.structured_outputs: unsupported key(s) {sorted(unknown)} "
                             f"(supported: {', '.join(_VLLM_KEYS)})")
    given = [k for k in _VLLM_KEYS if get(k) not in (None, False)]
    if len(given) != 1:
        raise ValueError("SamplingParams.structured_outputs needs exactly one of "
                         f"{', '.join(_VLLM_KEYS)}; got {given or 'none'}")
    key = given[0]
    if key == "json":
        return CONSTRAINT_TYPES["json_schema"], _so_text(get("json"), "structured_outputs.json")
    if key == "regex":
        return CONSTRAINT_TYPES["regex"], _so_text(get("regex"), "structured_outputs.regex")
    if key == "grammar":
        return CONSTRAINT_TYPES["ebnf"], _so_text(get("grammar"), "structured_outputs.grammar")
    if key == "choice":
        return CONSTRAINT_TYPES["ebnf"], choice_grammar(get("choice"))
    if get("json_object") is not True:
        raise ValueError("SamplingParams.structured_outputs.json_object must be True")
    return CONSTRAINT_TYPES["json_object"], None


def _constraint_of(so_args, structured_outputs) -> Optional[Tuple[int, Optional[str]]]:
    if so_args is not None and structured_outputs is not None:
        raise ValueError("SamplingParams: give so_args or structured_outputs, not both")
    if so_args is not None:
        return _from_so_args(so_args)
    if structured_outputs is not None:
        return _from_structured_outputs(structured_outputs)
    return None


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)
