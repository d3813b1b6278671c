"""A LoRA run end to end (``learner.lora``) through ``execute_run``: the sampler stays at the float32 floor
every step, the adapters' metrics are logged, the finished run's ``adapter/`` artifact loads onto the base
model, and a run crashed mid-way resumes with its adapters and AdamW state exactly."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from tests.execution_helpers import fast_run_config
from tests.resume_helpers import LENGTH_REWARD, check_resumed, interrupt_and_resume, resume_config
from workbench.config import RunConfig
from workbench.execution.run import execute_run
from workbench.models import model_dir
from workbench.tracking.artifacts import ADAPTER_ARTIFACT
from workbench.tracking.store import resolve_tracking_uri
from workbench.train.lora import update_norm

pytestmark = pytest.mark.slow

LORA = {"rank": 4, "alpha": 8.0}


def test_crashed_lora_run_resumes_with_its_adapters_exactly(workdir):
    """Bitwise, as the full fine-tuning resume test: the checkpoint holds the adapters and their AdamW
    moments (the base is rebuilt from the model cache), so every metric after the resume is the uninterrupted
    run's to the bit (loss, grad norm, entropy: all functions of the adapted policy's logits)."""
    record = interrupt_and_resume(resume_config({"lora": LORA}), crash_after=1)
    check_resumed(record, crash_after=1, tolerance=0.0)


def test_a_lora_run_logs_its_adapters_and_stays_at_the_float_floor(workdir):
    cfg = RunConfig.model_validate(
        fast_run_config(
            steps=3,
            reward=LENGTH_REWARD,
            algorithm={"kl_coef": 0.01},  # the reference: the base, adapters off
            learner={"lr": 1e-2, "lora": LORA},
        )
    )
    outcome = execute_run(cfg, study="lora", variant="v", label="lora")
    assert outcome.status == "FINISHED", outcome.error
    client = MlflowClient(resolve_tracking_uri())
    run = client.get_run(outcome.run_id)
    history = {
        key: {m.step: m.value for m in client.get_metric_history(outcome.run_id, key)}
        for key in ("lora/update_norm", "lora/trainable_frac", "mismatch/log_ratio_abs_max", "kl/ref")
    }
    assert sorted(history["lora/update_norm"]) == [0, 1, 2]
    assert 0 < history["lora/update_norm"][0] < history["lora/update_norm"][2]
    assert 0 < history["lora/trainable_frac"][0] < 0.5
    # fp32 sampler and learner share the adapted module: the learner's logprobs before each update equal the
    # sampler's up to summation order. Bound: the step-0 gate's float32 bound on this micro model, 2·n·u·m
    # with n = depth + positions ≈ 1·(2·32 + 64) + 99 + 30 = 257 summed operands, u = 2^-24 and magnitude
    # m ≤ 1 + max |logp| ≈ 10: 2·257·6e-8·10 ≈ 3e-4. A merge error of one adapter step is ~1e-2 (lr 1e-2).
    assert max(history["mismatch/log_ratio_abs_max"].values()) < 3e-4
    assert history["kl/ref"][0] == 0.0 or abs(history["kl/ref"][0]) < 3e-4  # step 0: adapters at B = 0 = base
    assert history["kl/ref"][2] > 0

    # the adapter artifact: small, and loadable onto the base with peft
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    local = Path(client.download_artifacts(outcome.run_id, ADAPTER_ARTIFACT, str(workdir / "dl")))
    files = {p.name: p.stat().st_size for p in local.iterdir()}
    assert set(files) == {"adapter_config.json", "adapter_model.safetensors"}
    base_dir = model_dir(cfg.model, cfg.task, progress=False)
    base_bytes = (base_dir / "model.safetensors").stat().st_size
    assert files["adapter_model.safetensors"] < base_bytes / 2
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir), local)
    from workbench.rollout.weights import lora_layers

    # the artifact holds the final adapters: the norm of their B A is the last one the run logged (the
    # same float32 tensors through the same float64 computation: equal but for the sum's order, n·eps64)
    loaded = update_norm(lora_layers(model))
    assert loaded == pytest.approx(history["lora/update_norm"][2], rel=100 * 2.0**-52)
    assert run.data.params["learner.lora.rank"] == "4"
    ids = torch.tensor([[3, 4, 5, 6]])
    with torch.no_grad():
        adapted = model(input_ids=ids).logits
        with model.disable_adapter():
            plain = model(input_ids=ids).logits
    assert not math.isclose(float((adapted - plain).abs().max()), 0.0)


def test_sigkill_of_a_lora_run_then_resume_gives_the_uninterrupted_adapters(workdir, monkeypatch):
    """The run's process is SIGKILLed (nothing of it runs after the signal: the OOM killer) once it has
    checkpointed step 2; running the study again resumes from that checkpoint. The finished run's adapters are
    bit-identical to those of the same run uninterrupted (so are its logits, a function of base + adapters),
    and so is every logged metric."""
    from safetensors.torch import load_file

    from tests.resume_helpers import COMPARED, sigkill_after_checkpoint_then_run_again

    steps = 10
    cfg = resume_config({"lora": LORA}, rollout={"steps": steps, "eval_every": 5})
    killed = sigkill_after_checkpoint_then_run_again(workdir, cfg, "lora", steps=steps)
    client, resumed = killed.client, killed.resumed

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{workdir / 'reference.db'}")  # another store: no reuse
    reference = execute_run(cfg, study="uninterrupted", variant="lora", label="ref")
    assert reference.status == "FINISHED"
    ref_client = MlflowClient(resolve_tracking_uri())
    for key in (*COMPARED, "lora/update_norm"):
        mine = {m.step: m.value for m in client.get_metric_history(resumed.info.run_id, key)}
        theirs = {m.step: m.value for m in ref_client.get_metric_history(reference.run_id, key)}
        assert mine == theirs and sorted(mine) == list(range(steps)), key
    adapters = [
        load_file(
            Path(c.download_artifacts(run_id, f"{ADAPTER_ARTIFACT}/adapter_model.safetensors", str(workdir / run_id)))
        )
        for c, run_id in ((client, resumed.info.run_id), (ref_client, reference.run_id))
    ]
    assert adapters[0].keys() == adapters[1].keys()
    assert all(torch.equal(adapters[0][k], adapters[1][k]) for k in adapters[0])
