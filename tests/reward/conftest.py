from __future__ import annotations

import pytest

from workbench.reward import AnswerVerifier


@pytest.fixture(scope="session")
def verifier():
    """One math-verify verifier (1 worker, 1 s per item) shared by the reward tests."""
    with AnswerVerifier(timeout_s=1.0, workers=1) as v:
        v.score(["\\boxed{1}"], ["1"])  # start the worker outside any timed section
        yield v
