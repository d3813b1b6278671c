"""Every sampled completion is kept (issue 51): a micro run's ``rollouts/`` artifacts hold steps × prompts ×
group completions plus one per eval problem and eval step, and the step metrics recomputed from them are
the logged ones. The budget's sampling rule, on hand-sized chunks."""

from __future__ import annotations

import io
import json
import math

import pandas as pd
import pytest
import torch
import yaml
from mlflow import MlflowClient
from typer.testing import CliRunner

from tests.conftest import micro_run_config
from workbench.batch import Rollouts, ScoredRollouts
from workbench.cli.main import app
from workbench.results.reader import StudyReader
from workbench.results.rollouts import read_rollouts
from workbench.tasks import Problem
from workbench.tracking.rollouts import RolloutRecorder, prompt_digest

STEPS, PROMPTS, GROUP, EVAL_SIZE = 3, 4, 4, 16
EVAL_STEPS = [0, 2, 3]  # eval_every=2, and after the last update


def run_micro_study(workdir, name="rollouts", **overrides):
    cfg = micro_run_config(**overrides)
    cfg["task"]["eval_size"] = EVAL_SIZE
    (workdir / "study.yaml").write_text(yaml.safe_dump({"name": name, "base": cfg}))
    result = CliRunner().invoke(app, ["run", str(workdir / "study.yaml"), "--quiet"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    reader = StudyReader(f"sqlite:///{workdir / 'mlflow.db'}", cache_dir=False)
    _, runs = reader.load_runs(name)
    return reader, runs


@pytest.mark.slow  # a micro run: ~10 s
def test_a_micro_run_keeps_every_completion_and_its_rows_give_the_logged_metrics(workdir):
    reader, runs = run_micro_study(workdir)
    rows = read_rollouts(reader, runs)
    run_id = runs["run_id"].iloc[0]
    assert rows.attrs["unreadable"] == {}

    train, evals = rows[rows["split"] == "train"], rows[rows["split"] == "eval"]
    assert len(train) == STEPS * PROMPTS * GROUP == 48
    assert len(evals) == len(EVAL_STEPS) * EVAL_SIZE == 48
    assert sorted(train["step"].unique()) == [0, 1, 2] and sorted(evals["step"].unique()) == EVAL_STEPS
    assert (train.groupby(["step", "group"]).size() == GROUP).all()  # whole groups, samples 0..G-1
    assert train["kept"].all() and train["advantage"].notna().all()  # no batch filter: every row trained on
    assert evals["advantage"].isna().all() and not evals["kept"].any()
    assert rows["prompt"].notna().all() and rows["answer"].notna().all()  # every prompt id has its prompt
    manifest = rows.attrs["manifests"][run_id]
    assert manifest["rows"] == {"train": 48, "eval": 48} and manifest["dropped"] == {"train": 0, "eval": 0}
    assert runs["run_id"].size == 1

    client = MlflowClient(reader.tracking_uri)
    tags = client.get_run(run_id).data.tags
    assert tags["workbench.rollouts"] == "all"
    # MLflow's run page shows completions.json as a table: the last eval (step 3) and the last train step (2)
    assert {"path": "completions.json", "type": "table"} in json.loads(tags["mlflow.loggedArtifacts"])
    table = json.loads(reader.read_artifact_text(run_id, runs["artifact_uri"].iloc[0], "completions.json"))
    shown = pd.DataFrame(table["data"], columns=table["columns"])
    assert len(shown) == EVAL_SIZE + PROMPTS * GROUP
    assert shown.groupby("split")["step"].unique().map(list).to_dict() == {"eval": [3], "train": [2]}
    last = rows[(rows["split"] == "train") & (rows["step"] == 2)]
    assert shown.loc[shown["split"] == "train", "text"].tolist() == last["text"].tolist()

    def logged(key: str) -> dict[int, float]:
        return {m.step: m.value for m in client.get_metric_history(run_id, key)}

    # Tolerances, from the arithmetic each side does. The run computes reward/mean as a float32 mean of B = 16
    # float32 rewards (rewards are sums of at most a few terms of magnitude <= 1, so |r| <= 2): the sum is off by
    # at most (B - 1) * 2^-24 * sum|r| <= 15 * 6e-8 * 32 ~ 3e-5 before dividing, i.e. <= 2e-6 in the mean; the
    # stored rewards are those float32 values exactly (a float32 column), and the recomputation is float64
    # (error ~1e-16). accuracy/train is k/B in float32: the count k is exact, the division rounds once, so the
    # two agree within 2^-24 relative. MLflow stores the logged float64 without loss.
    reward_tol, accuracy_tol = 2e-6, 2.0**-24
    by_step = train.groupby("step")
    rewards, accuracy = logged("reward/mean"), logged("accuracy/train")
    for step, group in by_step:
        assert len(group) == PROMPTS * GROUP
        assert group["reward"].astype("float64").mean() == pytest.approx(rewards[step], abs=reward_tol)
        assert group["correct"].mean() == pytest.approx(accuracy[step], rel=accuracy_tol, abs=0)
        assert group["length"].mean() == pytest.approx(logged("length/mean")[step], rel=1e-6)
        # the advantages the update used: GRPO's (r - mean) / (std + eps) within each group
        for _, g in group.groupby("group"):
            r = torch.tensor(g["reward"].to_numpy())
            want = (r - r.mean()) / (r.std() + 1e-6)
            assert g["advantage"].to_numpy() == pytest.approx(want.numpy(), abs=1e-5)
    eval_accuracy = logged("eval/accuracy")
    for step, group in evals.groupby("step"):
        assert group["correct"].mean() == pytest.approx(eval_accuracy[step], rel=2.0**-52)  # float64 both sides

    # eval rows use the ids of eval/problems.csv.gz: the per-problem table and the rollouts join
    problems = reader.problem_results(runs)
    joined = evals.merge(
        problems.rename(columns={"problem_id": "prompt_id"}), on=["step", "prompt_id"], suffixes=("", "_csv")
    )
    assert len(joined) == len(evals)
    assert (joined["correct"].astype(int) == joined["correct_csv"]).all()
    assert (joined["length"] == joined["length_csv"]).all()


# ---- the budget's sampling rule, on hand-made rollouts ------------------------------------------------------


def scored(n: int, texts: list[str] | None = None) -> ScoredRollouts:
    problems = [Problem(prompt=f"{i}+1=", answer=str(i + 1)) for i in range(n)]
    mask = torch.ones(n, 3)
    rollouts = Rollouts(
        problems=problems,
        group_ids=torch.arange(n),
        prompt_ids=torch.zeros(n, 2, dtype=torch.long),
        prompt_mask=torch.ones(n, 2, dtype=torch.long),
        completion_ids=torch.zeros(n, 3, dtype=torch.long),
        mask=mask,
        sampler_logp=torch.full((n, 3), -0.5),
        truncated=torch.zeros(n, dtype=torch.bool),
        texts=texts or [f"answer {i}" for i in range(n)],
    )
    return ScoredRollouts(rollouts, torch.ones(n), torch.ones(n, dtype=torch.bool))


class Sink:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}

    def __call__(self, data: bytes, path: str) -> None:
        self.files[path] = data


def test_rows_hold_what_the_step_had_by_hand():
    sink = Sink()
    log = RolloutRecorder(sink, budget_bytes=10**9, steps=1, eval_steps=[], render=lambda p: f"Q: {p}", flush_every=1)
    batch = scored(2)
    log.record_train(0, batch, torch.tensor([0.5]), kept=torch.tensor([1]))  # only row 1 entered the update
    log.end_step(0)
    manifest = log.close()
    assert sorted(sink.files) == [
        "rollouts/completions-00000.parquet",
        "rollouts/manifest.json",
        "rollouts/prompts-00000.parquet",
    ]
    rows = pd.read_parquet(io.BytesIO(sink.files["rollouts/completions-00000.parquet"]))
    assert rows["prompt_id"].tolist() == [prompt_digest("0+1=", "1"), prompt_digest("1+1=", "2")]
    assert math.isnan(rows["advantage"][0]) and rows["advantage"][1] == 0.5
    assert rows["kept"].tolist() == [False, True]
    assert rows["sampler_logp_sum"].tolist() == [-1.5, -1.5]  # 3 tokens × -0.5
    assert rows["length"].tolist() == [3, 3]
    prompts = pd.read_parquet(io.BytesIO(sink.files["rollouts/prompts-00000.parquet"]))
    assert prompts["prompt"].tolist() == ["Q: 0+1=", "Q: 1+1="]  # as rendered for the model
    assert manifest["rows"] == {"train": 2, "eval": 0}


def test_over_budget_the_train_stride_doubles_and_every_dropped_row_is_counted():
    """Chunks of one step each, ~N bytes per step: a budget of ~4 steps' bytes over 16 steps keeps
    steps 0 (stride 1) and then every 2nd/4th/... step as the projection asks, and never exceeds the budget."""
    probe = Sink()
    one = RolloutRecorder(probe, budget_bytes=10**9, steps=1, eval_steps=[], render=str, flush_every=1)
    one.record_train(0, scored(8), torch.zeros(8), None)
    one.end_step(0)
    per_step = one.written  # completions + the 8 prompts, the first time they are seen
    sink = Sink()
    budget = 4 * per_step
    log = RolloutRecorder(sink, budget_bytes=budget, steps=16, eval_steps=[], render=str, flush_every=1)
    for step in range(16):
        log.record_train(step, scored(8), torch.zeros(8), None)
        log.end_step(step)
    manifest = log.close()
    kept_steps = sorted(
        {
            int(s)
            for path, data in sink.files.items()
            if "completions-" in path
            for s in pd.read_parquet(io.BytesIO(data))["step"]
        }
    )
    assert kept_steps[0] == 0 and log.stride > 1
    assert all(s % k == 0 for s in kept_steps for start, k in manifest["strides"] if s >= start)
    assert manifest["bytes"] <= budget
    assert manifest["rows"]["train"] + manifest["dropped"]["train"] == 16 * 8  # nothing lost uncounted
    assert manifest["rows"]["train"] == 8 * len(kept_steps)


def test_the_hard_cap_stops_recording_and_counts_the_rest():
    sink = Sink()
    log = RolloutRecorder(sink, budget_bytes=100, steps=4, eval_steps=[0], render=str, flush_every=1)
    log.record_eval(0, scored(4), ["a", "b", "c", "d"])
    log.record_train(0, scored(4), torch.zeros(4), None)
    log.end_step(0)  # a parquet chunk is > 100 bytes: not written
    log.record_train(1, scored(4), torch.zeros(4), None)
    manifest = log.close()
    assert [p for p in sink.files if p.endswith(".parquet")] == []
    assert manifest["stopped_at_step"] == 0
    assert manifest["dropped"] == {"train": 8, "eval": 4} and manifest["rows"] == {"train": 0, "eval": 0}


def test_several_eval_answers_per_problem_are_stored_under_their_problem():
    """``rollout.eval_samples: 2`` (pass@k, #50): the eval chunk holds 2 answers per problem, grouped by
    problem; each row carries its problem's id, the problem as its group and the answer's index as its sample."""
    sink = Sink()
    log = RolloutRecorder(sink, budget_bytes=1 << 20, steps=1, eval_steps=[0], render=str, flush_every=1)
    log.record_eval(0, scored(4), ["a", "b"], 2)
    log.close()
    (chunk,) = [data for path, data in sink.files.items() if "completions" in path]
    rows = pd.read_parquet(io.BytesIO(chunk))
    assert list(rows["prompt_id"]) == ["a", "a", "b", "b"]
    assert list(rows["group"]) == [0, 0, 1, 1] and list(rows["sample"]) == [0, 1, 0, 1]


@pytest.mark.slow  # a micro run with a batch filter: ~6 s
def test_with_a_batch_filter_every_round_is_kept_and_only_the_trained_groups_carry_advantages():
    """DAPO's dynamic sampling drops groups whose rewards are all equal and samples again: every round is
    stored (rewards and accuracy are logged over everything sampled), ``kept`` marks the groups the update
    trained on, and a shaping term is a column, the reward its sum with correctness."""
    from workbench.config import RunConfig
    from workbench.health import HealthMonitor
    from workbench.train.loop import train

    # filtered on the shaped reward, which the length term spreads, so some groups are kept and some dropped
    cfg = RunConfig.model_validate(
        micro_run_config(
            algorithm={"preset": "dapo", "max_sampling_rounds": 3, "filter_on": "reward"},
            reward={
                "shaping": [{"name": "overlong_soft", "weight": 1.0, "params": {"max_length": 8, "cache_length": 6}}]
            },
            rollout={"steps": 2, "eval_every": 2},
        )
    )
    sink, steps = Sink(), []

    class Metrics:
        def log_metrics(self, metrics, step):
            steps.append((step, metrics))

    def recorder(parts):
        return RolloutRecorder(sink, budget_bytes=10**9, steps=2, eval_steps=[0, 2], render=parts.prompt_format.render)

    train(cfg, Metrics(), HealthMonitor.from_config(cfg.health), rollout_log=recorder)
    rows = pd.concat([pd.read_parquet(io.BytesIO(d)) for p, d in sorted(sink.files.items()) if "completions-" in p])
    train_rows = rows[rows["split"] == "train"]
    terms = [c for c in rows.columns if c.startswith("reward.")]
    assert terms == ["reward.overlong_soft"]  # the shaping term is a column
    total = train_rows["correct"].astype("float32") + train_rows[terms].sum(axis=1)
    assert (train_rows["reward"] - total).abs().max() < 1e-6
    assert any(0 < m.get("batch/filtered_frac", 0) < 1 for _, m in steps[:2])  # groups both kept and dropped
    for step, metrics in steps:
        if step >= 2:
            continue
        here = train_rows[train_rows["step"] == step]
        rounds = metrics["batch/sampling_rounds"]
        assert len(here) == rounds * 4 * 4  # every round: prompts × group
        assert here["reward"].astype("float64").mean() == pytest.approx(metrics["reward/mean"], abs=2e-6)
        assert here["kept"].sum() <= 4 * 4
        assert here.loc[here["kept"], "advantage"].notna().all() and here.loc[~here["kept"], "advantage"].isna().all()
        by_group = here.groupby("group")
        kept_groups = by_group["kept"].all()
        assert (by_group["kept"].any() == kept_groups).all()  # whole groups
        if metrics["batch/filtered_frac"] < 1:  # some group was kept: the kept ones have differing rewards
            spread = by_group["reward"].agg(lambda r: r.max() > r.min())
            assert spread[kept_groups].all()


@pytest.mark.slow  # validates every shipped study (imports torch): ~6 s
def test_the_default_budget_keeps_every_completion_of_every_cpu_study():
    """An upper bound, not an estimate. With the built-in tiny model (a character tokenizer over ASCII, 512
    positions), before compression: a completion row is its text (<= max_new_tokens bytes) plus the fixed
    columns (13 values of <= 8 bytes, a 4-byte length before each of the 3 strings, a reward term or two: < 160);
    a problem's prompt row, written once per problem, is at most 512 bytes of prompt, 512 of answer and 32 of
    id and lengths, and there are at most (train rows / group size) + eval problems of them; each chunk adds its
    parquet footer (< 16 kB). Every run of every shipped study on the built-in model (qwen_gsm8k needs a
    downloaded model: not a CPU default) stays under the default 64 MB at that bound."""
    from pathlib import Path

    from workbench.config import TrackingConfig
    from workbench.models.tiny_context import TINY_MAX_POSITIONS
    from workbench.study import expand, load_study

    budget = TrackingConfig().rollouts_budget_mb * 1e6
    checked = 0
    for path in sorted((Path(__file__).resolve().parents[1] / "studies").glob("*.yaml")):
        for spec in expand(load_study(path)):
            cfg = spec.config
            if cfg.model.builtin is None:
                continue
            roll, algo = cfg.rollout, cfg.algorithm
            rounds = algo.max_sampling_rounds if algo.batch_filter is not None else 1
            evals = len({s for s in range(roll.steps + 1) if s % roll.eval_every == 0 or s == roll.steps})
            eval_size = min(roll.eval_size or cfg.task.eval_size, cfg.task.eval_size)
            train_rows = roll.steps * roll.prompts_per_step * roll.group_size * rounds
            rows = train_rows + evals * eval_size
            problems = train_rows // roll.group_size + eval_size
            chunks = roll.steps // 10 + 2
            bound = (
                rows * (cfg.sampler.max_new_tokens + 160) + problems * (2 * TINY_MAX_POSITIONS + 32) + chunks * 16_000
            )
            assert bound <= budget, f"{path.name} {spec.label}: up to {bound / 1e6:.0f} MB"
            checked += 1
    assert checked >= 20


@pytest.mark.slow  # three micro runs: ~30 s
def test_a_resumed_run_stores_the_same_completions_as_a_run_never_interrupted(workdir):
    """A run that crashes after step 1 (checkpoint every step) and is executed again resumes at step 2: its
    rollout log replays the rows of steps 0-1 the failed attempt stored (the log is flushed at each checkpoint)
    and samples the rest; resume is bitwise (tests/test_resume.py), so every stored row equals the
    uninterrupted run's, the failed attempt keeps what it had sampled, and nothing is stored twice."""
    from tests.resume_helpers import STEPS, interrupt_and_resume, resume_config
    from workbench.tracking.store import resolve_tracking_uri

    record = interrupt_and_resume(resume_config({}), crash_after=1)
    assert record.first.status == "FAILED" and record.second.status == "FINISHED"
    reader = StudyReader(resolve_tracking_uri(), cache_dir=False)

    def rows(study: str, run_id: str) -> pd.DataFrame:
        _, runs = reader.load_runs(study)
        frame = read_rollouts(reader, runs[runs["run_id"] == run_id])
        return frame.drop(columns="run_id").sort_values(["split", "step", "group", "sample"], ignore_index=True)

    _, uninterrupted = reader.load_runs("uninterrupted")
    reference = rows("uninterrupted", uninterrupted["run_id"].iloc[0])
    resumed = rows("resumed", record.second.run_id)
    failed = rows("resumed", record.first.run_id)
    assert len(reference) and not resumed.duplicated(["split", "step", "group", "sample"]).any()
    pd.testing.assert_frame_equal(resumed, reference)
    assert sorted(failed.loc[failed["split"] == "train", "step"].unique()) == [0, 1]  # kept, though it failed
    assert sorted(resumed.loc[resumed["split"] == "train", "step"].unique()) == list(range(STEPS))


def test_a_chunk_a_full_disk_refuses_is_counted_and_the_next_one_tries_again():
    import errno
    import os

    class FullOnce(Sink):
        def __call__(self, data: bytes, path: str) -> None:
            if not self.files.get("refused"):
                self.files["refused"] = b"1"
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            super().__call__(data, path)

    sink = FullOnce()
    log = RolloutRecorder(sink, budget_bytes=10**9, steps=2, eval_steps=[], render=str, flush_every=1)
    for step in range(2):
        log.record_train(step, scored(4), torch.zeros(4), None)
        log.end_step(step)  # step 0's chunk is refused, step 1's written
    manifest = log.close()
    assert manifest["dropped"]["train"] == 4 and manifest["rows"]["train"] == 4
    assert manifest["write_failure"] == os.strerror(errno.ENOSPC)
    assert "rollouts/completions-00001.parquet" in sink.files  # chunk numbers are never reused
    prompts = pd.read_parquet(io.BytesIO(sink.files["rollouts/prompts-00001.parquet"]))
    assert len(prompts) == 4  # the refused chunk's prompts are written with the next one that has them


def test_the_budget_is_a_tracking_setting_so_run_keys_do_not_change():
    from workbench.config import RunConfig

    default = RunConfig.model_validate(micro_run_config())
    smaller = RunConfig.model_validate(micro_run_config(tracking={"rollouts_budget_mb": 1}))
    assert smaller.tracking.rollouts_budget_mb == 1 and default.tracking.rollouts_budget_mb == 64
    assert smaller.run_key() == default.run_key()  # keeping fewer completions changes no result
