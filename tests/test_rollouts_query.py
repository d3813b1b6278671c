"""``workbench rollouts STUDY`` and the library query under it (issue 51), on a two-variant micro study
trained once for the module: filters, --worst/--longest, --same-prompts pairs on identical problem ids,
the formats (user text escaped), bad filters as one line and exit 2."""

from __future__ import annotations

import html
import io
import json

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from tests.conftest import micro_run_config
from workbench.analysis.rollouts import query_rollouts, same_prompts
from workbench.cli.main import app
from workbench.errors import QueryError

pytestmark = pytest.mark.slow  # the module's study: two micro runs, ~20 s

NAME = "rollouts-pair"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Two variants (grpo, dr_grpo), seed 0 each: 3 steps of 4 prompts × 4, evals at 0, 2, 3 on 16 problems."""
    root = tmp_path_factory.mktemp("rollouts-query")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    base = micro_run_config(tracking={"uri": uri})
    study = {"name": NAME, "base": base, "variants": {"grpo": {}, "dr_grpo": {"algorithm": {"preset": "dr_grpo"}}}}
    (root / "study.yaml").write_text(yaml.safe_dump(study))
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)  # the env var would win over tracking.uri
        result = CliRunner().invoke(app, ["run", str(root / "study.yaml"), "--quiet"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return uri


def cli(uri, *args):
    return CliRunner().invoke(app, ["rollouts", NAME, "--tracking-uri", uri, *map(str, args)], catch_exceptions=False)


def test_filters_select_what_they_name(store):
    every = query_rollouts(NAME, tracking_uri=store)
    assert len(every) == 2 * (3 * 4 * 4 + 3 * 16)  # per run: steps × prompts × group, + eval steps × problems
    assert sorted(every["variant"].unique()) == ["dr_grpo", "grpo"]

    wrong = query_rollouts(
        NAME, tracking_uri=store, variant="dr_grpo", split="train", steps=(1, 2), outcome="incorrect"
    )
    assert set(wrong["variant"]) <= {"dr_grpo"} and set(wrong["split"]) <= {"train"}
    assert wrong["step"].between(1, 2).all() and not wrong["correct"].any()
    expected = every[
        (every["variant"] == "dr_grpo") & (every["split"] == "train") & every["step"].between(1, 2) & ~every["correct"]
    ]
    assert len(wrong) == len(expected)

    rewarded = query_rollouts(NAME, tracking_uri=store, min_reward=0.5, max_reward=1.0)
    assert rewarded["reward"].between(0.5, 1.0).all()
    assert len(rewarded) == int(every["reward"].between(0.5, 1.0).sum())


def test_worst_and_longest_order_and_cut(store):
    every = query_rollouts(NAME, tracking_uri=store, split="train")
    worst = query_rollouts(NAME, tracking_uri=store, split="train", worst=5)
    assert len(worst) == 5 and worst["reward"].is_monotonic_increasing
    assert worst["reward"].iloc[-1] <= every["reward"].sort_values().iloc[5]
    longest = query_rollouts(NAME, tracking_uri=store, longest=3)
    assert len(longest) == 3 and longest["length"].iloc[0] == query_rollouts(NAME, tracking_uri=store)["length"].max()


def test_same_prompts_pairs_two_variants_on_identical_problem_ids(store):
    pairs = same_prompts(NAME, "grpo", "dr_grpo", tracking_uri=store)
    # eval: both runs (seed 0) are scored on the same 16 problems at steps 0, 2 and 3, one completion each
    assert len(pairs) == 3 * 16
    rows = query_rollouts(NAME, tracking_uri=store, split="eval")
    for variant in ("grpo", "dr_grpo"):
        mine = rows[rows["variant"] == variant].set_index(["step", "prompt_id"])
        for _, pair in pairs.iterrows():
            assert mine.loc[(pair["step"], pair["prompt_id"]), "text"] == pair[f"text.{variant}"]
    # step 0 is before any update: the same initial policy, greedy decoding, so the same answers
    first = pairs[pairs["step"] == 0]
    assert (first["text.grpo"] == first["text.dr_grpo"]).all()
    differing = same_prompts(NAME, "grpo", "dr_grpo", tracking_uri=store, differing=True)
    assert (differing["correct.grpo"] != differing["correct.dr_grpo"]).all()

    result = cli(store, "--same-prompts", "grpo", "dr_grpo", "--format", "json")
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert len(printed) == len(pairs)  # json: every row
    assert all(p["prompt_id"] == q for p, q in zip(printed, pairs["prompt_id"], strict=True))


def test_formats_print_the_same_rows(store):
    csv = cli(store, "--split", "eval", "--steps", "0", "--format", "csv")
    assert csv.exit_code == 0, csv.output
    frame = pd.read_csv(io.StringIO(csv.stdout))
    assert len(frame) == 2 * 16 and set(frame["step"]) == {0}  # two runs × 16 problems
    md = cli(store, "--split", "eval", "--format", "md", "--limit", "3")
    assert md.exit_code == 0
    lines = md.stdout.splitlines()
    assert lines[0].startswith("| variant | seed |") and len(lines) == 2 + 3
    assert "3 of 96 rows shown" in md.stderr
    side = cli(store, "--same-prompts", "grpo", "dr_grpo", "--format", "md", "--limit", "1")
    assert side.stdout.splitlines()[0].startswith(r"| prompt | answer | text\.grpo | correct\.grpo | text\.dr\_grpo |")
    table = cli(store, "--worst", "2")
    assert table.exit_code == 0 and "prompt_id" in table.stdout


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("--variant", "dapo"), "--variant: no variant 'dapo' in study 'rollouts-pair'"),
        (("--seed", "7"), "--seed: no run with seed 7"),
        (("--steps", "50:60"), "--steps: 50:60 holds no stored step: the stored steps are 0..3"),
        (("--steps", "3:1"), "--steps: 3:1 is an empty range"),
        (("--steps", "x"), "--steps: expected FIRST:LAST"),
        (("--split", "test"), "--split: expected one of train, eval, got 'test'"),
        (("--correct", "--incorrect"), "--correct and --incorrect: give one of"),
        (("--min-reward", "1", "--max-reward", "0"), "--min-reward/--max-reward: min 1 is above max 0"),
        (("--same-prompts", "grpo", "grpo"), "--same-prompts: two different variants are needed"),
        (("--format", "html"), "--format: expected one of table, md, csv, json"),
    ],
    ids=[
        "variant",
        "seed",
        "steps-out",
        "steps-empty",
        "steps-syntax",
        "split",
        "outcomes",
        "reward",
        "same",
        "format",
    ],
)
def test_bad_filters_exit_2_with_one_line_naming_the_option(store, args, line):
    result = cli(store, *args)
    assert result.exit_code == 2
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {line}"), err


def test_the_library_raises_query_errors_naming_the_field(store):
    with pytest.raises(QueryError) as caught:
        query_rollouts(NAME, tracking_uri=store, steps=(10, None))
    assert caught.value.field == "steps" and isinstance(caught.value, ValueError)
    with pytest.raises(QueryError) as caught:
        query_rollouts("no-such-study", tracking_uri=store)
    assert caught.value.field == "study"


def test_the_command_reads_without_importing_torch(store, tmp_path):
    """A read-only command (tests/test_cli_startup.py): the query needs pandas and pyarrow, not the trainer."""
    from tests.test_cli_startup import loaded_by

    loaded, out = loaded_by("rollouts", NAME, "--tracking-uri", store, "--worst", "1", "--format", "csv", cwd=tmp_path)
    assert "prompt_id" in out
    assert not loaded & {"torch", "transformers", "ray", "optuna", "plotly", "scipy", "statsmodels"}, sorted(loaded)


def test_the_notebook_gets_the_same_frames(store):
    from workbench import load_study

    study = load_study(NAME, tracking_uri=store)
    pd.testing.assert_frame_equal(
        study.rollouts(variant="grpo", split="eval"),
        query_rollouts(NAME, tracking_uri=store, variant="grpo", split="eval"),
    )
    pd.testing.assert_frame_equal(
        study.same_prompts("grpo", "dr_grpo"), same_prompts(NAME, "grpo", "dr_grpo", tracking_uri=store)
    )
    with pytest.raises(QueryError, match="no variant 'dapo'"):
        study.rollouts(variant="dapo")


def test_the_compare_report_shows_same_problem_pairs_where_the_variants_differ(store, tmp_path):
    """#51: the compare HTML report gains the answers behind a verdict: at the last eval step, the problems
    one variant solved and the baseline did not (or the reverse), both completions side by side."""
    from workbench.analysis.rollouts import differing_answers

    answers = differing_answers(NAME, "grpo", ["grpo", "dr_grpo"], tracking_uri=store)
    expected = same_prompts(NAME, "grpo", "dr_grpo", tracking_uri=store, differing=True)
    if not len(expected):
        assert answers == {}  # the two runs agree on every problem: nothing to show
        return
    pairs = answers["dr_grpo"]
    assert 1 <= len(pairs) <= 3 and (pairs["step"] == expected["step"].max()).all()
    assert (pairs["correct.grpo"] != pairs["correct.dr_grpo"]).all()
    out = tmp_path / "report.html"
    result = CliRunner().invoke(
        app, ["compare", NAME, "--tracking-uri", store, "--no-log", "--out", str(out)], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert "Same problems, different answers" in page and "dr_grpo vs grpo" in page
    assert html.escape(pairs["text.dr_grpo"].iloc[0]) in page
