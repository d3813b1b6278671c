"""Preflight on real model directories: what can run passes, what cannot is one PreflightError."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import micro_run_config
from workbench.config import RunConfig
from workbench.execution.run import PreflightError, preflight
from workbench.models import inspect_model_dir, model_dir, token_count_over
from workbench.models.tiny_context import TINY_MAX_POSITIONS
from workbench.models.tokenizer import build_char_tokenizer


def test_token_count_over_by_hand():
    tok = build_char_tokenizer()  # one token per character
    assert token_count_over(tok, "abc", 3) is None
    assert token_count_over(tok, "abcd", 3) == 4
    # 100,000 characters against a budget of 10: only a prefix of (10 + 1) * 64 = 704 is tokenized
    assert token_count_over(tok, "7" * 100_000, 10) == 704


@pytest.fixture(scope="module")
def micro_dir(tmp_path_factory):
    built = RunConfig.model_validate(micro_run_config())
    target = tmp_path_factory.mktemp("models") / "micro"
    shutil.copytree(model_dir(built.model, built.task, progress=False), target)
    return target


def path_config(model_path, **overrides) -> RunConfig:
    model = {"path": str(model_path), **overrides.pop("model", {})}
    cfg = micro_run_config(**overrides)
    cfg["model"] = model
    return RunConfig.model_validate(cfg)


def test_a_saved_model_directory_passes_and_reports_its_positions(micro_dir):
    tokenizer, positions = inspect_model_dir(micro_dir)
    assert positions == TINY_MAX_POSITIONS and tokenizer("12")["input_ids"]
    preflight(path_config(micro_dir))


def test_a_generation_budget_beyond_the_positions_is_refused(micro_dir):
    with pytest.raises(PreflightError, match=f"leaves no room for a prompt: the model has {TINY_MAX_POSITIONS}"):
        preflight(path_config(micro_dir, sampler={"max_new_tokens": TINY_MAX_POSITIONS}))


def test_a_prompt_template_that_overflows_the_positions_is_refused(micro_dir):
    template = "x" * 500 + "{prompt}"  # 500 + a few prompt characters + 8 new tokens > 512 positions
    with pytest.raises(PreflightError, match="the prompt has .* tokens; with sampler.max_new_tokens=8"):
        preflight(path_config(micro_dir, model={"prompt_template": template}))


def test_a_non_causal_architecture_is_refused(micro_dir, tmp_path):
    other = tmp_path / "t5"
    shutil.copytree(micro_dir, other)
    (other / "config.json").write_text(json.dumps({"model_type": "t5"}))
    with pytest.raises(PreflightError, match="model_type 't5' is not a causal language model"):
        preflight(path_config(other))


def test_sampler_compile_without_a_cpp_compiler_is_refused_before_anything_runs(micro_dir, monkeypatch, tmp_path):
    """torch.compile builds C++ on a CPU: with no compiler on PATH the run is refused in one line."""
    cfg = path_config(micro_dir, sampler={"compile": True})
    preflight(cfg)  # this machine has g++ (.ci/run makes sure)
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no g++, clang++ or $CXX
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(PreflightError, match="sampler.compile needs a C\\+\\+ compiler"):
        preflight(cfg)
    preflight(path_config(micro_dir))  # without compile nothing is asked of the machine
