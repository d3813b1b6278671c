"""The built-in tiny model: deterministic from its config, cached, a standard HF directory."""

import json
import re

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.conftest import MICRO_MODEL
from workbench.config import ModelConfig, TaskConfig
from workbench.models import load_policy, model_dir
from workbench.models.tiny import build_tiny_model, tiny_cache_key
from workbench.tasks import build_task


def test_cached_model_is_a_standard_hf_directory():
    cfg, task = ModelConfig(**MICRO_MODEL), TaskConfig()
    path = model_dir(cfg, task, progress=False)
    assert (path / "config.json").exists() and (path / "workbench_build.json").exists()
    assert model_dir(cfg, task, progress=False) == path  # second call: cache hit
    build = json.loads((path / "workbench_build.json").read_text())
    assert build["sft"]["steps"] == MICRO_MODEL["tiny"]["sft_max_steps"]

    model = AutoModelForCausalLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    assert tok.padding_side == "left" and tok.decode(tok("12+3=")["input_ids"]) == "12+3="
    ids = torch.tensor([tok("47+38=\\boxed{85}")["input_ids"]])
    policy, _ = load_policy(cfg, task, progress=False)
    assert torch.equal(model(ids).logits, policy(ids).logits)


def test_build_is_deterministic():
    cfg = ModelConfig(**MICRO_MODEL)
    task = build_task(TaskConfig())
    a, _, sft_a = build_tiny_model(cfg, task, progress=False)
    b, _, sft_b = build_tiny_model(cfg, task, progress=False)
    assert sft_a == sft_b
    for (name, pa), (_, pb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(pa, pb), name


@pytest.mark.slow
def test_cold_start_sft_learns_the_format():
    """A short SFT already emits the \\boxed{} answer format the reward expects."""
    from workbench.models.sft import probe_accuracy

    cfg = ModelConfig(
        builtin="tiny",
        tiny={
            "hidden_size": 64,
            "num_layers": 2,
            "num_heads": 4,
            "intermediate_size": 128,
            "sft_max_steps": 150,
            "sft_target_accuracy": 1.0,
            "sft_check_every": 1000,
        },
    )
    task = build_task(TaskConfig(digits=1, ops="+", eval_size=10))
    model, tok, sft = build_tiny_model(cfg, task, progress=False)
    assert sft.final_loss < 1.0
    enc = tok(["3+4="], return_tensors="pt", add_special_tokens=False)
    out = model.generate(
        **enc, do_sample=False, max_new_tokens=12, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id
    )
    text = tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    assert text.startswith("\\boxed{") and text.endswith("}")
    assert 0.0 <= probe_accuracy(model, tok, task.eval_problems(), "{prompt}") <= 1.0


def test_cache_key_tracks_everything_that_changes_the_model():
    base = ModelConfig(**MICRO_MODEL)
    key = tiny_cache_key(base, TaskConfig())
    assert tiny_cache_key(ModelConfig(**MICRO_MODEL), TaskConfig()) == key
    other = base.model_copy(update={"tiny": base.tiny.model_copy(update={"seed": 1})})
    assert tiny_cache_key(other, TaskConfig()) != key
    assert tiny_cache_key(base, TaskConfig(ops="+")) != key


def test_missing_model_path_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="model.path does not exist"):
        model_dir(ModelConfig(path=str(tmp_path / "nope")), TaskConfig())
    with pytest.raises(FileNotFoundError, match="no config.json"):
        model_dir(ModelConfig(path=str(tmp_path)), TaskConfig())


def test_the_cold_start_prints_plain_progress_lines_when_not_on_a_terminal(capfd, monkeypatch):
    """#53: the cold start printed nothing for its whole duration (9.5 min on a loaded machine) when its
    output was a log or a pipe. Off a terminal it now prints a plain line at its first step and then every
    $WORKBENCH_PROGRESS_EVERY seconds (0 here: every step), with the step, loss and probe accuracy."""
    monkeypatch.setenv("WORKBENCH_PROGRESS_EVERY", "0")
    cfg = ModelConfig(
        builtin="tiny",
        tiny={
            "hidden_size": 32,
            "num_layers": 1,
            "num_heads": 2,
            "intermediate_size": 64,
            "sft_max_steps": 4,
            "sft_target_accuracy": 1.0,
            "sft_check_every": 2,
        },
    )
    build_tiny_model(cfg, build_task(TaskConfig(digits=1, ops="+", eval_size=10)), progress=True)
    lines = [line for line in capfd.readouterr().err.splitlines() if "cold-start SFT step" in line]
    assert [line.split("cold-start SFT step ")[1].split(" ")[0] for line in lines] == ["1", "2", "3", "4"]
    assert all(re.search(r"loss \d+\.\d{3}, probe acc \d\.\d\d / target 1\.00", line) for line in lines), lines
