"""outputs.py — what generate() and chat() return: vLLM's RequestOutput / CompletionOutput shape."""
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Union


@dataclass
class Logprob:
    logprob: float
    rank: Optional[int] = None  # 1-based rank among the best; None when not among them


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: List[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[List[Dict[int, Logprob]]]
    finish_reason: Optional[str]          # "stop", "length", "abort", "error"
    stop_reason: Union[int, str, None] = None  # the stop string or stop token id; None for EOS / length
    seed: Optional[int] = None            # the seed used (drawn when none was given)
    # finish_reason "error": why this output alone failed (e.g. its constraint masked every
    # token); the other outputs of the same generate() call are unaffected.
    error: Optional[str] = None

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    request_id: str
    prompt: Optional[str]
    prompt_token_ids: List[int]
    outputs: List[CompletionOutput]
    finished: bool
    metrics: Dict[str, float] = field(default_factory=dict)
    num_cached_tokens: Optional[int] = None  # prompt tokens whose state came from the prefix cache
