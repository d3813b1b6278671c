"""Which runs `workbench compare` compares: one outcome per run, whatever happened to its attempts."""

from __future__ import annotations

import pandas as pd

from workbench.analysis.selection import SUPERSEDED, select_runs


def frame(rows):
    runs = pd.DataFrame(rows, columns=["run_id", "variant", "seed", "status", "run_key", "start_time"])
    return runs.assign(run_name=[f"{v}/seed={s}" for v, s in zip(runs["variant"], runs["seed"], strict=True)])


def test_a_run_stopped_by_hand_and_resumed_counts_once_as_its_finished_attempt():
    runs = frame(
        [
            ("a1", "grpo", 4, "KILLED", "k4", 100),  # Ctrl-C ...
            ("a2", "grpo", 4, "FINISHED", "k4", 200),  # ... then `workbench run` again: resumed
            ("b1", "grpo", 5, "FAILED", "k5", 100),  # failed twice: its latest failure is its outcome
            ("b2", "grpo", 5, "FAILED", "k5", 300),
            ("c1", "grpo", 6, "FINISHED", "k6", 400),  # a later crash of a finished run's re-execution
            ("c2", "grpo", 6, "FAILED", "k6", 500),  # does not undo the finished one
            ("d1", "grpo", 7, "RUNNING", "k7", 600),
            ("e1", "trl", 0, "FINISHED", None, 700),  # imported runs without a run_key are all kept
            ("e2", "trl", 0, "FINISHED", None, 800),
        ]
    )
    kept, excluded = select_runs(runs, include_unfinished=False)
    assert sorted(kept["run_id"]) == ["a2", "b2", "c1", "e1", "e2"]
    assert excluded == {"RUNNING": 1, SUPERSEDED: 3}


def test_with_include_unfinished_a_running_run_is_its_runs_latest_attempt():
    runs = frame(
        [
            ("a1", "grpo", 0, "KILLED", "k0", 100),
            ("a2", "grpo", 0, "RUNNING", "k0", 200),
            ("b1", "grpo", 1, "FINISHED", "k1", 100),
        ]
    )
    kept, excluded = select_runs(runs, include_unfinished=True)
    assert sorted(kept["run_id"]) == ["a2", "b1"] and excluded == {SUPERSEDED: 1}


def test_runs_of_other_variants_with_the_same_config_are_not_attempts_of_one_run():
    """Two arms with one resolved config (an A/A pair written by hand into a store): same key,
    different runs. Only attempts under one run name supersede each other."""
    runs = frame([("a", "control_a", 0, "FINISHED", "k0", 1), ("b", "control_b", 0, "FAILED", "k0", 2)])
    kept, excluded = select_runs(runs, include_unfinished=False)
    assert sorted(kept["run_id"]) == ["a", "b"] and excluded == {}


def test_nothing_superseded_leaves_every_ended_run_and_no_note():
    runs = frame([("a", "grpo", 0, "FINISHED", "k0", 1), ("b", "grpo", 1, "KILLED", "k1", 2)])
    kept, excluded = select_runs(runs, include_unfinished=False)
    assert kept["run_id"].tolist() == ["a", "b"] and excluded == {}
