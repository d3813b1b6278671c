"""A model directory is data, never code: a directory that asks transformers to run its own Python
(``auto_map``, or a ``model_type`` transformers does not ship) is refused in one line naming the file,
and nothing from it runs, even when stdin answers transformers' ``[y/N]`` with "y"."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.execution_helpers import fast_run_config
from workbench.errors import ModelDirectoryError
from workbench.models import inspect_model_dir

ROOT = Path(__file__).resolve().parents[2]


def with_custom_code(
    source: Path, target: Path, marker: Path, *, file: str = "config.json", model_type: str | None = "evil-lm"
) -> Path:
    """A copy of ``source`` whose ``file`` maps Auto classes to a module in the directory that writes ``marker``."""
    shutil.copytree(source, target)
    (target / "configuration_evil.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('the directory code ran')\n"
        "from transformers import Qwen2Config\n\n\nclass EvilConfig(Qwen2Config):\n    model_type = 'evil-lm'\n"
    )
    data = json.loads((target / file).read_text())
    data["auto_map"] = {
        "AutoConfig": "configuration_evil.EvilConfig",
        "AutoTokenizer": ["configuration_evil.EvilTokenizer", None],
    }
    if file == "config.json" and model_type is not None:
        data["model_type"] = model_type
    (target / file).write_text(json.dumps(data))
    return target


@pytest.mark.slow  # over 5 s in the fast tier (2 cores, -n 3, load 8)
def test_yes_y_piped_into_run_is_refused_and_runs_nothing(qwen2_chat_dir, tmp_path):
    marker = tmp_path / "MARKER"
    model = with_custom_code(qwen2_chat_dir, tmp_path / "evil-model", marker)
    base = fast_run_config() | {"model": {"path": str(model)}}
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({"name": "evil", "base": base, "variants": {"base": {}}, "seeds": [0]}))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HOME": str(tmp_path / "hf"), "WORKBENCH_DEBUG": ""}
    env.pop("MLFLOW_TRACKING_URI", None)
    done = subprocess.run(
        ["bash", "-c", f"yes y | {sys.executable} -m workbench.cli.main run {study} --quiet"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert not marker.exists()  # the directory's code never ran
    assert "[y/N]" not in done.stdout + done.stderr  # and nobody was asked
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"{model / 'config.json'}: auto_map" in lines[0], done.stderr
    assert "never runs a model directory's code" in lines[0]
    assert not (tmp_path / "mlflow.db").exists()  # refused before any run was opened


@pytest.mark.parametrize(
    ("file", "model_type", "says"),
    [
        (
            "tokenizer_config.json",
            None,
            "tokenizer_config.json: auto_map",
        ),  # a known model_type with a custom tokenizer
        ("config.json", None, "config.json: auto_map"),  # a known model_type with custom classes
    ],
)
def test_auto_map_in_either_file_is_refused_naming_it(qwen2_chat_dir, tmp_path, file, model_type, says):
    marker = tmp_path / "MARKER"
    model = with_custom_code(qwen2_chat_dir, tmp_path / "m", marker, file=file, model_type=model_type)
    with pytest.raises(ModelDirectoryError, match=f"{model / says}") as raised:
        inspect_model_dir(model)
    assert "\n" not in str(raised.value) and not marker.exists()


def test_a_model_type_transformers_does_not_ship_is_refused(qwen2_chat_dir, tmp_path):
    model = shutil.copytree(qwen2_chat_dir, tmp_path / "m")
    data = json.loads((model / "config.json").read_text()) | {"model_type": "my-own-lm"}
    (model / "config.json").write_text(json.dumps(data))
    with pytest.raises(ModelDirectoryError, match="model_type 'my-own-lm' is not an architecture transformers ships"):
        inspect_model_dir(model)


def test_every_from_pretrained_in_the_package_refuses_remote_code_explicitly():
    """A new call site cannot forget: transformers asks on stdin when trust_remote_code is left unset."""
    calls = []
    for path in (ROOT / "workbench").rglob("*.py"):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if ".from_pretrained(" in line and not line.lstrip().startswith("#"):
                calls.append(
                    (
                        f"{path.relative_to(ROOT)}:{number}",
                        "NO_REMOTE_CODE" in line or "trust_remote_code=False" in line,
                    )
                )
    assert calls and [where for where, explicit in calls if not explicit] == []


# ---- the directory's own tokenizer, exactly (the sampler's ids against it: tests/chat/test_chat_prompts.py)


def test_a_directory_without_tokenizer_json_is_refused_in_one_line(qwen2_chat_dir, tmp_path):
    model = shutil.copytree(qwen2_chat_dir, tmp_path / "m")
    (model / "tokenizer.json").unlink()
    with pytest.raises(ModelDirectoryError, match=f"{model}: no tokenizer.json") as raised:
        inspect_model_dir(model)
    assert "\n" not in str(raised.value)


def test_a_tokenizer_that_does_not_encode_as_its_file_is_refused(qwen2_chat_dir, tmp_path):
    """tokenizer_config.json naming a special token tokenizer.json does not have ("What") changes how
    transformers' tokenizer splits a text: it no longer encodes as the file does."""
    model = shutil.copytree(qwen2_chat_dir, tmp_path / "m")
    settings = json.loads((model / "tokenizer_config.json").read_text())
    settings["extra_special_tokens"] = [*settings.get("extra_special_tokens", []), "What"]
    (model / "tokenizer_config.json").write_text(json.dumps(settings))
    with pytest.raises(ModelDirectoryError, match="tokenizer.json: transformers' tokenizer encodes 'What is") as raised:
        inspect_model_dir(model)
    assert "\n" not in str(raised.value) and "own tokenizer exactly" in str(raised.value)


def test_the_builtin_model_with_a_qwen2_config_keeps_its_character_tokenizer():
    """The tiny model warms up with its character tokenizer; a run must sample with the same one, not the
    Qwen2Tokenizer transformers picks for a qwen2 config."""
    from workbench.config import RunConfig
    from workbench.models import load_policy
    from workbench.models.tokenizer import build_char_tokenizer

    cfg = RunConfig.model_validate(fast_run_config(model={"tiny": {"arch": "qwen2"}}))
    _, tokenizer = load_policy(cfg.model, cfg.task, progress=False)
    text = "What is 12 + 30? Answer: 42"
    assert tokenizer(text)["input_ids"] == build_char_tokenizer()(text)["input_ids"]
    assert tokenizer.padding_side == "left" and tokenizer.pad_token == build_char_tokenizer().pad_token
