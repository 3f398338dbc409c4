"""sampling_params.py — SamplingParams, vLLM's names and defaults, checked by the C sampler.

All randomness is keyed by (seed, position): a seeded request gives the same tokens whatever else
runs beside it.  A request without a seed gets one drawn by the engine (reported in the output).
"""
import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Union


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
    so_args: Optional[dict] = field(default=None, repr=False)

    def __post_init__(self):
        if not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"SamplingParams.n must be an integer >= 1, got {self.n!r}")
        if self.so_args is not None:
            raise NotImplementedError("SamplingParams.so_args: structured outputs are not implemented in "
                                      "this build yet")
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


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)
