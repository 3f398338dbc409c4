"""sampling_params.py — SamplingParams, vLLM's names and defaults, checked by the C sampler.

All randomness is keyed by (seed, position): a seeded request gives the same tokens whatever else
runs beside it.  A request without a seed gets one drawn by the engine (reported in the output).
"""
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Union


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
    so_args: Optional[dict] = field(default=None, repr=False)

    def __post_init__(self):
        if not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"SamplingParams.n must be an integer >= 1, got {self.n!r}")
        if self.so_args is not None:
            raise NotImplementedError("SamplingParams.so_args: structured outputs are not implemented in "
                                      "this build yet")
        if self.seed is not None and not (0 <= int(self.seed) < 2**64):
            raise ValueError(f"SamplingParams.seed must be in [0, 2**64), got {self.seed!r}")

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
