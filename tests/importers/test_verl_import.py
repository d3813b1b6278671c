"""verl logs (console and JSONL) -> workbench import -> health --recheck; the pg_clipfrac_lower caveat."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from mlflow import MlflowClient

from workbench.importers import ADAPTERS
from workbench.viz.saved_view import decode_envelope

from .helpers import child_runs, import_args, sqlite_uri, workbench

FIXTURES = Path(__file__).with_name("fixtures")
CONSOLE = FIXTURES / "verl_console.log"
JSONL = FIXTURES / "verl_metrics.jsonl"


def test_console_and_jsonl_logs_read_to_the_same_steps():
    read = ADAPTERS.get("verl").read_file
    console, jsonl = read(str(CONSOLE)), read(str(JSONL))
    assert [s for s, _ in console] == list(range(1, 9))  # the header and progress lines are not steps
    assert console == jsonl  # same numbers: repr in the console, JSON in the file
    step3 = dict(console)[3]
    assert step3["actor/pg_clipfrac"] == 0.35  # printed as np.float64(0.35)
    assert step3["critic/score/mean"] == pytest.approx(0.35)  # 0.2 + 0.05 * 3, as written (round to 4 places)
    assert step3["response_length/max"] == 256.0


@pytest.mark.slow
def test_verl_log_import_and_recheck(tmp_path):
    dst = sqlite_uri(tmp_path / "mlflow.db")
    args = import_args("verl", CONSOLE, study="verl-grpo", dst=dst, variant="grpo", seeds=(0,))
    done = workbench(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert workbench(*args, cwd=tmp_path).returncode == 0  # re-import: same file content, same run_key
    (run,) = child_runs(dst, "verl-grpo")
    # the imported study gets the MLflow saved views a workbench study gets (health view grouped by variant)
    experiment_tags = MlflowClient(dst).get_experiment_by_name("verl-grpo").tags
    assert "mlflow.sharedViewState.workbench-health" in experiment_tags
    # the state is deflated once the catalogue's metrics no longer fit one tag in plain JSON
    _, _, state = decode_envelope(experiment_tags["mlflow.sharedViewState.workbench-health"])
    assert "workbench.variant" in json.dumps(state)
    tags = run.data.tags
    assert tags["workbench.source"] == "verl" and tags["workbench.source_file"] == str(CONSOLE.resolve())
    m = run.data.metrics  # latest values (step 8)
    # canonical names, values unchanged (conversion "as is")
    assert m["reward/mean"] == pytest.approx(0.6)  # critic/score/mean = 0.2 + 0.05 * 8
    assert m["entropy/mean"] == pytest.approx(1.04)  # actor/entropy = 1.2 - 0.02 * 8
    assert m["length/truncated_frac"] == 0.0625  # response_length/clip_ratio: the truncated fraction
    assert m["clip/frac"] == 0.35  # actor/pg_clipfrac
    # the caveat: verl's pg_clipfrac_lower is the dual-clip fraction, not the low-side clip fraction
    assert "clip/frac_low" not in m
    assert m["source/actor/pg_clipfrac_lower"] == 0.5
    assert m["source/timing_s/gen"] == 3.25  # no canonical counterpart: kept under source/
    mapping = {row["source"]: row for row in _artifact_json(dst, run.info.run_id, "import.json")["metrics"]}
    assert mapping["actor/pg_clipfrac_lower"]["imported_as"] == "source/actor/pg_clipfrac_lower"
    assert "dual-clip" in mapping["actor/pg_clipfrac_lower"]["caveat"]

    health = workbench("health", "verl-grpo", "--recheck", "--format", "json", "--tracking-uri", dst, cwd=tmp_path)
    assert health.returncode == 0, health.stderr
    (rules,) = [r["rules"] for r in json.loads(health.stdout)["runs"]]
    # clip/frac = 0.35 > 0.3 from step 1; default patience 5 -> fires on the 5th observation, step 5
    assert (rules["clip_fraction_anomaly"]["state"], rules["clip_fraction_anomaly"]["step"]) == ("warn", 5)
    # verl logs no zero-std fraction: the rule says so instead of passing
    assert rules["no_learning_signal"]["state"] == "unknown"
    assert rules["no_learning_signal"]["message"] == "not evaluated: needs batch/zero_std_frac"
    # entropy falls 1.18 -> 1.04: the entropy rule does not fire; 8 steps are too few for
    # reward_collapse, which first evaluates once its running and noise windows are full (80): it says so
    assert rules["entropy_collapse"]["state"] == "ok"
    assert rules["reward_collapse"]["state"] == "unknown"
    # a rule fired, so the run reads "warn" (not "ok (k of n rules evaluated)"), label and status alike
    (run_health,) = json.loads(health.stdout)["runs"]
    assert run_health["health"] == run_health["health_label"] == "warn"
    assert rules["reward_collapse"]["message"].startswith(
        "not evaluated: needs ≥ 80 finite observations of reward/mean"
    )
    table = workbench("health", "verl-grpo", "--recheck", "--tracking-uri", dst, cwd=tmp_path)
    assert "no_learning_signal: not evaluated: needs batch/zero_std_frac (1 of 1 runs)" in table.stderr
    page = tmp_path / "health.html"
    dash = workbench(
        "dashboard",
        "verl-grpo",
        "--spec",
        "health",
        "--no-log",
        "--out",
        str(page),
        "--tracking-uri",
        dst,
        cwd=tmp_path,
    )
    assert dash.returncode == 0, dash.stderr
    assert page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert "no data for entropy/mean" not in dash.stderr  # the imported curves are drawn ...
    assert "no data for batch/zero_std_frac" in dash.stderr  # ... and what verl does not log is said


def _artifact_json(uri: str, run_id: str, path: str) -> dict:
    return json.loads(Path(MlflowClient(uri).download_artifacts(run_id, path)).read_text())


def _verl_root() -> Path | None:
    path = os.environ.get("WORKBENCH_VERL_PATH")
    root = Path(path) / "verl" if path else None
    return root if root is not None and (root / "trainer" / "ppo" / "core_algos.py").is_file() else None


def _in_verl_source(name: str, sources: str) -> bool:
    """The name as a string literal in verl, or an actor worker key that _update_actor prefixes
    with actor/, or a key built by an f-string prefix (timing_s/{name})."""
    if f'"{name}"' in sources:
        return True
    if name.startswith("actor/") and f'"{name.removeprefix("actor/")}"' in sources:
        return True
    prefix = name.rsplit("/", 1)[0] + "/"
    return f'f"{prefix}{{' in sources


@pytest.mark.skipif(_verl_root() is None, reason="verl's source not installed (`make verl`, WORKBENCH_VERL_PATH)")
def test_fixture_and_adapter_names_are_verl_names():
    root = _verl_root()
    sources = "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in root.rglob("*.py"))
    assert (root.parent / "verl-0.9.1.dist-info").is_dir()  # the version the adapter cites
    names = {n for _, metrics in ADAPTERS.get("verl").read_file(str(JSONL)) for n in metrics}
    names |= {m.source for m in ADAPTERS.get("verl").mappings}
    missing = sorted(n for n in names if not _in_verl_source(n, sources))
    assert not missing, f"not verl 0.9.1 metric names: {missing}"


def test_pg_clipfrac_lower_definition_is_the_dual_clip_one():
    """Read from verl's own compute_policy_loss_vanilla: pg_clipfrac_lower compares with the dual-clip
    bound clip_ratio_c, not with 1 - clip_ratio_low, which is why the adapter keeps it apart."""
    root = _verl_root()
    if root is None:
        pytest.skip("verl's source not installed (`make verl`, WORKBENCH_VERL_PATH)")
    text = (root / "trainer" / "ppo" / "core_algos.py").read_text()
    body = text[text.index("def compute_policy_loss_vanilla") :]
    body = body[: body.index("\ndef ", 1)]
    assert re.search(r"pg_clipfrac_lower = verl_F\.masked_mean\(\s*torch\.gt\(clip_pg_losses1, pg_losses3\)", body)
    assert "pg_losses3 = -advantages * clip_ratio_c" in body
    assert ADAPTERS.get("verl").mapping("actor/pg_clipfrac_lower").canonical is None


@pytest.mark.slow
def test_an_imported_verl_runs_mismatch_is_judged_by_the_same_rules(tmp_path):
    """verl's rollout_corr/* land on the flight recorder's names, so `health --recheck` judges an imported
    run's mismatch with mismatch_bands (here verl's own ESS band, 0.3); what verl does not log (the raw
    ratios' tail) leaves mismatch_tail "unknown", saying what it needs, rather than "ok"."""
    log = tmp_path / "verl_mismatch.jsonl"
    with log.open("w") as f:
        for step in range(1, 9):
            ess = 0.95 if step < 5 else 0.2  # the sampler drifts off at step 5: ESS under verl's 0.3 band
            f.write(
                json.dumps(
                    {
                        "step": step,
                        "data": {
                            "critic/score/mean": 0.3,
                            "actor/entropy": 1.0,
                            "response_length/mean": 100.0,
                            "rollout_corr/k3_kl": 1e-3,
                            "rollout_corr/kl": 1e-3,
                            "rollout_corr/chi2_token": 0.01,
                            "rollout_corr/rollout_is_eff_sample_size": ess,
                            "rollout_corr/rollout_is_std": 0.1,
                        },
                    }
                )
                + "\n"
            )
    dst = sqlite_uri(tmp_path / "mlflow.db")
    done = workbench(
        *import_args("verl", log, study="verl-mismatch", dst=dst, variant="grpo", seeds=(0,)), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    (run,) = child_runs(dst, "verl-mismatch")
    assert run.data.metrics["mismatch/ess"] == 0.2 and run.data.metrics["mismatch/kl"] == 1e-3
    health = workbench("health", "verl-mismatch", "--recheck", "--format", "json", "--tracking-uri", dst, cwd=tmp_path)
    assert health.returncode == 0, health.stderr
    (rules,) = [r["rules"] for r in json.loads(health.stdout)["runs"]]
    # ESS 0.2 < 0.3 at steps 5 and 6: patience 2 -> fires at step 6, naming the band
    assert (rules["mismatch_bands"]["state"], rules["mismatch_bands"]["step"]) == ("warn", 6), rules["mismatch_bands"]
    assert "mismatch/ess" in rules["mismatch_bands"]["message"]
    assert rules["mismatch_tail"]["state"] == "unknown"
    assert "mismatch/is_ratio_tail_frac" in rules["mismatch_tail"]["message"]
