"""A standalone WorkbenchCallback run's completions (issue #48): TRL's ``log_completions`` files, written here by
TRL's own writing code (tests/importers/dumps.py), into the run's rollout log at workbench steps, each step once.

No TRL needed: the files are TRL 1.16's format and the reading is the TRL importer's; the callback's events are
replayed in the order ``GRPOTrainer.log`` produces them (callbacks' on_log, then the file). The real trainer runs
in tests/trl_engine/test_trl_engine.py::test_workbench_callback_in_a_plain_trl_script.
"""

from __future__ import annotations

import hashlib
import io
import json
import math

import pandas as pd

from tests.importers.dumps import trl_write_completions
from workbench.execution.trl_completions import STEP_RULE, CompletionFiles
from workbench.tracking.rollouts import MANIFEST_ARTIFACT, RolloutRecorder

LOGGED = ["loss", "reward", "rewards/correct/mean", "rewards/correct/std", "rewards/fmt/mean", "rewards/fmt/std"]
CHAT = [{"role": "system", "content": "Add."}, {"role": "user", "content": "3+3="}]


def _batch_a(out, global_step):  # the generation batch of workbench step 0: two prompts, two completions each
    return trl_write_completions(
        out,
        global_step,
        ["1+1=", "1+1=", "2+2=", "2+2="],
        ["2", "3", "4", ""],
        {"correct": [1.0, 0.0, 1.0, 0.0], "fmt": [0.5, 0.5, None, 0.0]},
        [0.5, -0.5, 0.75, -0.75],
        extra={"judge": ["ok", "no", "ok", "no"]},
    )


def _batch_b(out, global_step):  # workbench step 1: a conversation; no function scored the second completion
    return trl_write_completions(
        out,
        global_step,
        [CHAT, CHAT],
        [[{"role": "assistant", "content": "6"}], [{"role": "assistant", "content": "7"}]],
        {"correct": [1.0, None], "fmt": [None, None]},
        [1.0, -1.0],
    )


def _eval_batch(out, global_step):  # what TRL's evaluation leaves in its one buffer of completions
    return trl_write_completions(out, global_step, ["9+9="] * 2, ["EVAL", "EVAL"], {"correct": [0.0, 0.0]}, [0.0, 0.0])


def test_trl_completion_files_become_the_runs_rollouts_each_step_once(tmp_path):
    written: dict[str, bytes] = {}
    recorder = RolloutRecorder(
        lambda data, name: written.__setitem__(name, data),
        budget_bytes=10**6,
        steps=5,
        eval_steps=(),
        render=str,
    )
    out = tmp_path / "trl-out"
    files = CompletionFiles(recorder, out, per_step=2)  # two TRL optimizer steps per generation batch

    # what GRPOTrainer does, in order: at each logging step the callbacks' on_log (collect, then note the log),
    # then the step's file; an evaluation logs (on_log) and then writes the same file name with its completions
    files.collect(), files.train_logged(1, LOGGED)
    first = _batch_a(out, 1)
    files.collect(), files.train_logged(2, LOGGED)
    _batch_a(out, 2)  # the same batch again: step 0 is stored once, from the first file
    files.collect(), files.train_logged(3, LOGGED)
    third = _batch_b(out, 3)
    files.collect(), files.eval_logged(3)  # the eval's on_log: step 1's file is read before the eval replaces it
    _eval_batch(out, 3)
    files.collect(), files.train_logged(4, LOGGED)
    _eval_batch(out, 4)  # the buffer holds the eval's completions now; step 1 is stored already
    # step 2: an evaluation after global step 5 (not a logging step), then the log at 6: the buffer is the eval's
    files.collect(), files.eval_logged(5)
    _eval_batch(out, 5)
    files.collect(), files.train_logged(6, LOGGED)
    _eval_batch(out, 6)
    for global_step in (7, 8):  # step 3: files that are not TRL's (no advantage column)
        files.collect(), files.train_logged(global_step, LOGGED)
        pd.DataFrame({"step": [global_step], "prompt": ["p"], "completion": ["c"]}).to_parquet(
            out / "completions" / f"completions_{global_step:05d}.parquet"
        )
    # step 4 was never logged (training stopped)
    manifest, tag = files.close(steps=5)

    assert sorted(files.stored) == [0, 1]
    assert tag.startswith("no completions for 3 of 5 steps (2, 3, 4): an evaluation at global step 5 replaced ")
    assert "completions_00008.parquet: not a TRL completions file (no column advantage)" in tag
    assert tag.endswith("; TRL wrote no file for it (it writes one at each logging step)")
    assert manifest["rows"] == {"train": 6, "eval": 0} and manifest["dropped"] == {"train": 0, "eval": 0}
    assert manifest["imported"] == {
        "framework": "trl",
        "files": [str(first), str(third)],
        "rules": [
            "reward = the sum of the reward functions' columns (TRL's default reward_weights = 1; a run with "
            "other weights: read reward.<name>)",
            "every row is split train (TRL names eval completions alike)",
            "correct, length, truncated: not recorded by TRL (null)",
            STEP_RULE,
        ],
        "columns_not_imported": ["judge"],
    }
    assert json.loads(written[MANIFEST_ARTIFACT]) == manifest

    rows = pd.read_parquet(io.BytesIO(written["rollouts/completions-00000.parquet"]))
    prompts = pd.read_parquet(io.BytesIO(written["rollouts/prompts-00000.parquet"]))
    assert list(rows.split) == ["train"] * 6 and list(rows.step) == [0, 0, 0, 0, 1, 1]
    assert list(rows.text) == ["2", "3", "4", "", "6", "7"]  # no "EVAL": the eval's completions are not train rows
    # reward: the sum of the reward functions' columns, a None skipped, NaN where every function returned None
    assert list(rows.reward[:5]) == [1.5, 0.5, 1.0, 0.0, 1.0] and math.isnan(rows.reward[5])
    assert list(rows["reward.correct"][:5]) == [1.0, 0.0, 1.0, 0.0, 1.0]
    assert list(rows["reward.fmt"].fillna(-9)) == [0.5, 0.5, -9, 0.0, -9, -9]
    assert list(rows.advantage) == [0.5, -0.5, 0.75, -0.75, 1.0, -1.0] and rows.kept.all()
    assert list(zip(rows.group, rows["sample"], strict=True)) == [(0, 0), (0, 1), (1, 0), (1, 1), (0, 0), (0, 1)]
    assert rows.correct.isna().all() and rows.length.isna().all() and rows.truncated.isna().all()
    assert rows.sampler_logp_sum.isna().all()
    ids = [hashlib.sha1(f"{p}\0".encode()).hexdigest()[:12] for p in ("1+1=", "2+2=", "system: Add.\nuser: 3+3=")]
    assert list(rows.prompt_id) == [ids[0], ids[0], ids[1], ids[1], ids[2], ids[2]]
    assert list(prompts.prompt_id) == ids and prompts.answer.isna().all()
    assert list(prompts.prompt) == ["1+1=", "2+2=", "system: Add.\nuser: 3+3="]


def test_every_step_with_its_file_gives_the_tag_all(tmp_path):
    recorder = RolloutRecorder(lambda data, name: None, budget_bytes=10**6, steps=2, eval_steps=(), render=str)
    out = tmp_path / "trl-out"
    files = CompletionFiles(recorder, out, per_step=1)
    for global_step, write in ((1, _batch_a), (2, _batch_b)):
        files.collect(), files.train_logged(global_step, LOGGED)
        write(out, global_step)
    manifest, tag = files.close(steps=2)  # the last file is read at the end of training
    assert tag == "all" and manifest["rows"]["train"] == 6 and sorted(files.stored) == [0, 1]
