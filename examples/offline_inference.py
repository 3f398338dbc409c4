"""offline_inference.py — batch generation with the Python API (mirrors vLLM's
examples/offline_inference/basic/basic.py).

    make && PYTHONPATH=python python3 examples/offline_inference.py

The model directory comes from DEEPINFER_HF_MODEL_DIR (unset: the built-in tiny model).
`--mock` runs the engine over its deterministic test mock instead (not a language model: the
text is noise), which works whatever models are available.
"""
import os
import sys

from deepinfer import LLM, SamplingParams

# Sample prompts.
prompts = [
    "Hello, my name is",
    "The president of the United States is",
    "The capital of France is",
    "The future of AI is",
]
# Create a sampling params object.
sampling_params = SamplingParams(temperature=0.8, top_p=0.95)


def main():
    if "--mock" in sys.argv[1:]:
        from deepinfer.testing import mock_llm
        llm = mock_llm()
    else:
        llm = LLM(model=os.environ.get("DEEPINFER_HF_MODEL_DIR"))
    outputs = llm.generate(prompts, sampling_params)
    print("\nGenerated Outputs:\n" + "-" * 60)
    for output in outputs:
        prompt = output.prompt
        generated_text = output.outputs[0].text
        print(f"Prompt:    {prompt!r}")
        print(f"Output:    {generated_text!r}")
        print("-" * 60)


if __name__ == "__main__":
    main()
