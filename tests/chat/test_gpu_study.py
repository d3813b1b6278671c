"""studies/qwen_gsm8k.yaml end to end on CPU: the shipped GPU study's shape with a locally built
Qwen2- and Llama-3-architecture chat model and GSM8K's own JSONL format, then `health` and `compare` on the
result (tests/chat/gpu_study.py).

`--set` shrinks sizes (tokens, prompts, group, steps, eval set) and swaps what a CPU lacks: the vLLM
sampler for the HF one and DeepSpeed's bf16 mixed precision for the float32 torch learner (neither engine
is in the main environment; tests/engines/test_gpu_study_engines.py runs the study with both engines as
shipped). Everything else runs as shipped: the chat template, the end-of-turn stop, the gsm8k answer
format, both presets, KL off, the health preset.
"""

from __future__ import annotations

import pytest

from tests.chat.gpu_study import run_gpu_study

pytestmark = pytest.mark.slow

CPU_ENGINES = [
    "sampler.backend=hf",
    "sampler.dtype=float32",
    "learner.backend=torch",
    "learner.zero_stage=0",
    "learner.dtype=float32",
]


@pytest.mark.parametrize("model", ["qwen2_chat_dir", "llama3_chat_dir"])
def test_the_gpu_study_runs_on_cpu_with_a_chat_model(model, request, workdir):
    run_gpu_study(request.getfixturevalue(model), workdir, CPU_ENGINES)
