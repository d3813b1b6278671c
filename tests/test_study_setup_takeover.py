"""Multi-worker setup: the worker that creates an Optuna study writes its setup and marks it READY;
the others wait, and take the setup over if its creator died midway (real in-memory Optuna study)."""

from __future__ import annotations

import optuna

from workbench.execution.worker import READY, wait_for_creator


def fresh_study() -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    return optuna.create_study(storage=optuna.storages.InMemoryStorage(), direction="maximize")


def test_a_ready_study_is_used_at_once_without_taking_over():
    study, took_over = fresh_study(), []
    study.set_user_attr(READY, True)
    wait_for_creator(study, owned=lambda a: True, take_over=lambda: took_over.append(1), log=print, what="s")
    assert took_over == []


def test_a_creator_that_died_midway_is_taken_over_after_the_timeout():
    study, took_over, lines = fresh_study(), [], []
    wait_for_creator(
        study,
        owned=lambda a: True,
        take_over=lambda: took_over.append(1),
        log=lines.append,
        what="study 'x'",
        timeout_s=0.2,
    )
    assert took_over == [1]
    assert "did not finish setting it up" in lines[0] and "study 'x'" in lines[0]


def test_another_tools_study_of_the_same_name_is_never_set_up_over():
    study, took_over = fresh_study(), []
    study.set_user_attr("workbench.kind", "someone-else")
    wait_for_creator(
        study,
        owned=lambda a: a.get("workbench.kind") in (None, "search"),
        take_over=lambda: took_over.append(1),
        log=print,
        what="s",
        timeout_s=0.2,
    )
    assert took_over == []
