"""The completions TRL and verl dumped, imported into the rollouts storage that `workbench rollouts` reads (#51).

The dumps are written by the frameworks' own writing code (tests/importers/dumps.py); a real GRPOTrainer run
with log_completions is imported in tests/importers/test_trl_import.py (in .venv-trl).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from workbench.analysis.rollouts import query_rollouts
from workbench.importers import ADAPTERS, ImportSourceError, runs_from_files, write_study

from .dumps import trl_write_completions, verl_write_generations
from .helpers import child_runs, import_args, sqlite_uri, workbench


def _verl_run(root: Path) -> tuple[Path, Path, Path]:
    """A verl run's metric log (steps 1-2), rollout_data_dir (steps 1-2) and validation_data_dir (steps 0, 2)."""
    log = root / "metrics.jsonl"
    log.write_text(
        "".join(
            json.dumps({"step": s, "data": {"critic/score/mean": 0.25 * s, "actor/entropy": 1.0}}) + "\n"
            for s in (1, 2)
        )
    )
    train, val = root / "rollout_data", root / "validation_data"
    # step 1: the batch reordered by length (verl's _balance_batch): Q2's answers first, Q1's interleaved
    verl_write_generations(
        ["Q2", "Q1", "Q2", "Q1"],
        ["x=5", "7", "x=4", "8"],
        ["5", "7", "5", "7"],
        [1.0, 1.0, 0.0, 0.0],
        {"acc": [True, True, False, False], "pred": ["5", "7", "4", "8"], "short": [1]},
        str(train),
        1,
    )
    # step 2: gts that are not text (a list) and a reward function without acc
    verl_write_generations(
        ["Q3", "Q3"], ["ünïcode ✓", "no"], [["1", "one"], ["1", "one"]], [0.5, -0.5], {}, str(train), 2
    )
    for step, outputs, accs in ((0, ["1", "2"], [False, True]), (2, ["2", "2"], [True, True])):
        verl_write_generations(
            ["Qa", "Qb"],
            outputs,
            ["2", "2"],
            [float(a) for a in accs],
            {"acc": accs, "reward": [float(a) for a in accs]},
            str(val),
            step,
        )
    return log, train, val


def _import(adapter: str, files: list[str], uri: str, study: str = "s", **kw):
    runs = runs_from_files(ADAPTERS.get(adapter), files, "base", [0], **kw)
    return write_study(ADAPTERS.get(adapter), runs, uri, study, source_note={})


def test_verl_generations_become_the_runs_rollouts(tmp_path):
    log, train, val = _verl_run(tmp_path)
    uri = sqlite_uri(tmp_path / "mlflow.db")
    outcome = _import("verl", [str(log)], uri, rollouts=[str(train)], eval_rollouts=[str(val)])
    assert outcome.completions == [
        "base/seed=0: kept 6 train and 4 eval completions from 4 file(s) (workbench rollouts)"
    ]
    rows = query_rollouts("s", tracking_uri=uri)
    assert len(rows) == 10  # 4 + 2 train, 2 + 2 eval: every line of every dump
    step1 = rows[(rows.split == "train") & (rows.step == 1)]
    # groups by prompt text in order of first appearance (Q2 then Q1), samples in file order inside a group
    assert list(zip(step1.prompt, step1.group, step1["sample"], step1.text, strict=True)) == [
        ("Q2", 0, 0, "x=5"),
        ("Q2", 0, 1, "x=4"),
        ("Q1", 1, 0, "7"),
        ("Q1", 1, 1, "8"),
    ]
    assert list(step1.reward) == [1.0, 0.0, 1.0, 0.0] and list(step1.correct) == [True, False, True, False]
    assert list(step1.answer) == ["5", "5", "7", "7"]
    step2 = rows[(rows.split == "train") & (rows.step == 2)]
    assert list(step2.text) == ["ünïcode ✓", "no"] and list(step2.reward) == [0.5, -0.5]
    assert list(step2.answer) == ['["1", "one"]'] * 2  # gts that are not text: as JSON
    assert step2.correct.isna().all()  # no acc from that reward function: unknown, not guessed
    assert rows.length.isna().all() and rows.truncated.isna().all() and rows.advantage.isna().all()
    evals = rows[rows.split == "eval"]
    assert list(zip(evals.step, evals.prompt, evals.correct, strict=True)) == [
        (0, "Qa", False),
        (0, "Qb", True),
        (2, "Qa", True),
        (2, "Qb", True),
    ]
    # filters: correctness known only where verl recorded acc; null rows match neither side
    assert len(query_rollouts("s", tracking_uri=uri, outcome="correct")) == 2 + 3
    assert len(query_rollouts("s", tracking_uri=uri, outcome="incorrect")) == 2 + 1
    manifest = rows.attrs["manifests"][outcome.imported[0][1]]
    assert manifest["imported"]["columns_not_imported"] == ["pred", "reward"]  # "short" is not of the batch's length
    assert manifest["dropped"] == {"train": 0, "eval": 0}
    (run,) = child_runs(uri, "s")
    assert run.data.tags["workbench.source_rollouts"] == str(train.resolve())
    assert run.data.tags["workbench.source_eval_rollouts"] == str(val.resolve())


def test_a_grown_dump_replaces_the_run_and_an_unchanged_one_is_skipped(tmp_path):
    log, train, val = _verl_run(tmp_path)
    uri = sqlite_uri(tmp_path / "mlflow.db")
    _import("verl", [str(log)], uri, rollouts=[str(train)])
    assert _import("verl", [str(log)], uri, rollouts=[str(train)]).skipped  # same files: nothing new
    verl_write_generations(["Q4"], ["9"], ["9"], [1.0], {"acc": [True]}, str(train), 3)  # the run went on
    again = _import("verl", [str(log)], uri, rollouts=[str(train)])
    assert len(again.replaced) == 1 and len(child_runs(uri, "s")) == 1
    assert len(query_rollouts("s", tracking_uri=uri)) == 7


def _trl_state(out: Path, steps: list[int], reward_names: list[str]) -> Path:
    """A trainer_state.json as transformers' TrainerState.save_to_json writes it (what TRL logs per step)."""
    history = [
        {
            "step": s,
            "loss": 0.1,
            "reward": 0.5,
            **{f"rewards/{n}/mean": 0.5 for n in reward_names},
            **{f"rewards/{n}/std": 0.1 for n in reward_names},
            "completions/mean_length": 4.0,
        }
        for s in steps
    ]
    out.mkdir(parents=True, exist_ok=True)
    path = out / "trainer_state.json"
    path.write_text(json.dumps({"global_step": steps[-1], "log_history": history}, indent=2, sort_keys=True) + "\n")
    return path


def test_trl_completions_beside_the_trainer_state_are_read(tmp_path):
    out = tmp_path / "grpo-0"
    state = _trl_state(out, [1, 2], ["correct", "fmt"])
    # step 1: text prompts, two reward functions (fmt returned None for one completion), a log_extra column
    trl_write_completions(
        out,
        1,
        ["1+1=", "1+1=", "2+2=", "2+2="],
        ["2", "3", "4", ""],
        {"correct": [1.0, 0.0, 1.0, 0.0], "fmt": [0.5, 0.5, None, 0.0]},
        [0.5, -0.5, 0.75, -0.75],
        extra={"judge": ["ok", "no", "ok", "no"]},
    )
    # step 2: conversational prompts and completions (lists of messages); no function scored the second
    chat = [{"role": "system", "content": "Add."}, {"role": "user", "content": "3+3="}]
    trl_write_completions(
        out,
        2,
        [chat, chat],
        [[{"role": "assistant", "content": "6"}], [{"role": "assistant", "content": "7"}]],
        {"correct": [1.0, None], "fmt": [None, None]},
        [1.0, -1.0],
    )
    uri = sqlite_uri(tmp_path / "mlflow.db")
    outcome = _import("trl", [str(state)], uri)  # no --rollouts: output_dir/completions is found
    assert outcome.completions and "kept 6 train and 0 eval" in outcome.completions[0]
    rows = query_rollouts("s", tracking_uri=uri)
    assert list(rows.step) == [1, 1, 1, 1, 2, 2] and set(rows.split) == {"train"}
    # reward = the sum of the functions' columns, None skipped; NaN where every function returned None
    assert list(rows.reward[:4]) == [1.5, 0.5, 1.0, 0.0]
    assert math.isnan(rows.reward[5]) and rows.reward[4] == 1.0
    assert list(rows["reward.fmt"][:4].fillna(-9)) == [0.5, 0.5, -9, 0.0]
    assert list(rows.advantage) == [0.5, -0.5, 0.75, -0.75, 1.0, -1.0] and rows.kept.all()
    assert list(zip(rows.group, rows["sample"], strict=True)) == [(0, 0), (0, 1), (1, 0), (1, 1), (0, 0), (0, 1)]
    assert rows.prompt[4] == "system: Add.\nuser: 3+3=" and list(rows.text[4:]) == ["6", "7"]
    assert rows.correct.isna().all()  # TRL records no correctness
    manifest = rows.attrs["manifests"][outcome.imported[0][1]]
    assert manifest["imported"]["columns_not_imported"] == ["judge"]


def test_trl_checkpoint_state_finds_the_output_dirs_completions(tmp_path):
    out = tmp_path / "run"
    state = _trl_state(out / "checkpoint-2", [1, 2], ["r"])
    trl_write_completions(out, 2, ["p", "p"], ["a", "b"], {"r": [1.0, 0.0]}, [0.5, -0.5])
    uri = sqlite_uri(tmp_path / "mlflow.db")
    _import("trl", [str(state)], uri)
    rows = query_rollouts("s", tracking_uri=uri)
    assert list(rows.reward) == [1.0, 0.0] and "reward.r" not in rows  # one function: reward is its column


@pytest.mark.parametrize(
    ("write", "message"),
    [
        (
            lambda d: (d / "1.jsonl").write_text(
                '{"input": "q", "output": "a", "gts": "1", "score": 1, "step": 1}\n{oops\n'
            ),
            "1.jsonl:2: invalid JSON",
        ),
        (
            lambda d: (d / "1.jsonl").write_text('{"input": "q", "output": "a", "gts": "1", "step": 1}\n'),
            "1.jsonl:1: not a verl generation record (needs input, output, gts, score, step)",
        ),
        (
            lambda d: (d / "1.jsonl").write_text(
                '{"input": "q", "output": "a", "gts": "1", "score": "high", "step": 1}\n'
            ),
            "1.jsonl:1: score 'high' is not a number",
        ),
        (
            lambda d: (d / "1.jsonl").write_text(
                '{"input": "q", "output": "a", "gts": "1", "score": 1, "step": 1e99}\n'
            ),
            "1.jsonl:1: step '1e+99' is not a step number",
        ),
        (lambda d: (d / "notes.txt").write_text("hi"), "no verl generation dumps (trainer.rollout_data_dir) in it"),
        (lambda d: os.mkfifo(d / "1.jsonl"), "1.jsonl is a FIFO, not a regular file"),
    ],
)
def test_bad_verl_dumps_are_one_line_errors(tmp_path, write, message):
    log, _, _ = _verl_run(tmp_path)
    bad = tmp_path / "bad"
    bad.mkdir()
    write(bad)
    with pytest.raises(ImportSourceError, match="") as error:
        runs_from_files(ADAPTERS.get("verl"), [str(log)], "base", [0], rollouts=[str(bad)])
    assert message in str(error.value) and "\n" not in str(error.value)


def test_bad_trl_dumps_are_one_line_errors(tmp_path):
    state = _trl_state(tmp_path, [1], ["r"])
    (tmp_path / "completions").mkdir()
    (tmp_path / "completions" / "completions_00001.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(ImportSourceError, match=r"completions_00001\.parquet: not a parquet file"):
        runs_from_files(ADAPTERS.get("trl"), [str(state)], "base", [0])
    trl_write_completions(tmp_path, 1, ["p"], ["a"], {"other": [1.0]}, [0.0])  # no column the state logs
    with pytest.raises(ImportSourceError, match=r"no reward function column \(the trainer state logs rewards for r\)"):
        runs_from_files(ADAPTERS.get("trl"), [str(state)], "base", [0])
    with pytest.raises(ImportSourceError, match="--eval-rollouts: trl does not dump eval completions"):
        runs_from_files(ADAPTERS.get("trl"), [str(state)], "base", [0], eval_rollouts=[str(tmp_path)])


def test_completions_over_the_limits_are_refused(tmp_path, monkeypatch):
    from workbench.importers import completions

    log, train, _ = _verl_run(tmp_path)
    monkeypatch.setattr(completions, "MAX_IMPORTED_COMPLETIONS", 5)  # the train dump holds 6
    with pytest.raises(ImportSourceError, match=r"2\.jsonl:2: more than 5 completions in one run, over the import"):
        runs_from_files(ADAPTERS.get("verl"), [str(log)], "base", [0], rollouts=[str(train)])
    monkeypatch.setattr(completions, "MAX_IMPORTED_COMPLETIONS", 100)
    # prompt + completion of 1.jsonl's lines: "Q2" "x=5" (5), "Q1" "7" (3), "Q2" "x=4" (5): 13 > 12 at line 3
    monkeypatch.setattr(completions, "MAX_COMPLETION_TEXT_BYTES", 12)
    with pytest.raises(ImportSourceError, match=r"1\.jsonl:3: more than 12 characters of prompt and completion text"):
        runs_from_files(ADAPTERS.get("verl"), [str(log)], "base", [0], rollouts=[str(train)])


@pytest.mark.slow
def test_cli_import_then_rollouts_and_a_bad_dump_writes_nothing(tmp_path):
    log, train, val = _verl_run(tmp_path)
    uri = sqlite_uri(tmp_path / "mlflow.db")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "3.jsonl").write_text("{oops\n")
    refused = workbench(
        *import_args("verl", log, study="v", dst=uri, variant="grpo", seeds=(0,), rollouts=bad), cwd=tmp_path
    )
    assert refused.returncode == 2 and refused.stderr.strip().count("\n") == 0, refused.stderr
    assert "3.jsonl:1: invalid JSON" in refused.stderr and not (tmp_path / "mlflow.db").exists()
    done = workbench(
        *import_args("verl", log, study="v", dst=uri, variant="grpo", seeds=(0,), rollouts=train, eval_rollouts=val),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "grpo/seed=0: kept 6 train and 4 eval completions from 4 file(s)" in done.stdout
    shown = workbench(
        "rollouts", "v", "--split", "train", "--steps", "1", "--format", "json", "--tracking-uri", uri, cwd=tmp_path
    )
    assert shown.returncode == 0, shown.stderr
    assert [(r["text"], r["correct"]) for r in json.loads(shown.stdout)] == [
        ("x=5", True),
        ("x=4", False),
        ("7", True),
        ("8", False),
    ]
    table = workbench("rollouts", "v", "--split", "train", "--steps", "2", "--tracking-uri", uri, cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    # not a terminal: tab-separated; correctness, length, truncation not recorded: shown as -
    assert table.stdout.splitlines()[1].split("\t")[6:] == ["ünïcode ✓", "0.5", "-", "-", "-"]
    store = {"from_": uri, "experiment": "x", "variant_by": "param:a", "seed_by": "param:b"}
    wrong = workbench(*import_args("verl", study="w", dst=uri, rollouts=train, **store), cwd=tmp_path)
    assert wrong.returncode == 2 and "--rollouts and --eval-rollouts go with FILE..." in wrong.stderr


def _verl_root() -> Path | None:
    path = os.environ.get("WORKBENCH_VERL_PATH")
    root = Path(path) / "verl" if path else None
    return root if root is not None and (root / "trainer" / "ppo" / "ray_trainer.py").is_file() else None


@pytest.mark.skipif(_verl_root() is None, reason="verl's source not installed (`make verl`, WORKBENCH_VERL_PATH)")
def test_verl_writer_is_verls_own(tmp_path):
    """verl's RayPPOTrainer._write_generations, compiled from its source alone (the module needs Ray and a GPU
    stack to import), writes the same bytes as the fixture writer."""
    import ast

    source = (_verl_root() / "trainer" / "ppo" / "ray_trainer.py").read_text()
    (fn,) = [
        n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == "_write_generations"
    ]
    fn.decorator_list = []
    namespace: dict = {"os": os, "json": json}
    exec(
        compile(ast.Module([fn], type_ignores=[]), "ray_trainer.py", "exec"), namespace
    )  # verl's own code, from its source
    args = (["Q", "Q"], ["a ✓", "b"], [["1"], None], [1.0, 0.0], {"acc": [True, False], "x": [1]})
    namespace["_write_generations"](*args, str(tmp_path / "verl"), 7)
    verl_write_generations(*args, str(tmp_path / "ours"), 7)
    assert (tmp_path / "verl" / "7.jsonl").read_bytes() == (tmp_path / "ours" / "7.jsonl").read_bytes()
