"""deepinfer — Python binding of the deepinfer inference engine (ctypes over build/libdeepinfer.so).

    from deepinfer import LLM, SamplingParams

No compilation at import: the package loads the library `make` built (DEEPINFER_LIB overrides its
path).  The model's tokenizer.json is loaded from the model directory (deepinfer.text); chat
prompts are rendered by the library's V4.1 renderer.  deepinfer.testing.mock_llm() runs the engine
over a deterministic mock model for tests.
"""
from ._lib import lib as _lib_handle
from .llm import LLM, DeepInferError
from .outputs import CompletionOutput, Logprob, RequestOutput
from .sampling_params import SamplingParams

__version__ = _lib_handle.di_version().decode()
__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "Logprob", "DeepInferError"]
