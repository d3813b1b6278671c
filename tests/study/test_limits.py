"""A study's size is known before anything is materialised (issue #31, class 2): the run count
(variants x grid x zip x seeds) is arithmetic on the fields' lengths and refused above
``WORKBENCH_MAX_RUNS``; include chains are bounded in depth and bytes; ``tune``'s grid likewise."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import yaml

from tests.search.helpers import search_run_config
from tests.test_bad_inputs import MEASURE
from workbench.search.spec import parse_search
from workbench.study import StudyError, load_study, validate_study
from workbench.study.limits import DEFAULT_MAX_RUNS, MAX_INCLUDE_DEPTH, MAX_RUNS_ENV, run_count_factors

BASE = {"model": {"builtin": "tiny"}}


def study_file(path, **fields) -> str:
    path.write_text(yaml.safe_dump({"name": "big", "base": BASE, **fields}, default_flow_style=True))
    return str(path)


def test_run_count_is_the_product_of_the_field_lengths():
    data = {
        "variants": {"a": {}, "b": {}, "c": {}},
        "grid": {"learner.lr": [1, 2], "learner.weight_decay": [0, 1, 2]},
        "zip": {"sampler.temperature": [0.5, 1.0], "sampler.top_p": [0.9, 1.0]},
        "seeds": [0, 1, 2, 3],
    }
    assert run_count_factors(data) == {"variants": 3, "grid": 6, "zip": 2, "seeds": 4}
    assert run_count_factors({}) == {"variants": 1, "grid": 1, "zip": 1, "seeds": 1}  # defaults: one run


@pytest.mark.slow  # two CLI processes: ~4 CPU s, 15-20 s of wall time under load
def test_plan_of_a_billion_run_study_exits_2_fast_and_small(tmp_path):
    """A 100 x 100 x 100 grid x 1,000 seeds: refused with the count, nothing expanded.

    Timed on CPU seconds (user + system of the CLI process, ``os.wait4``), the best of two runs:
    wall time on this shared 2-core machine is stretched by load (5-9 s at load 7 for 1.6-2.3 CPU
    s), and one run's CPU time by cache contention. About 1.1 CPU s of it is importing the CLI
    (pandas, typer) and 0.7 s the study package (pydantic models): a refused 2-run study costs the
    same, which the test checks too."""
    path = study_file(
        tmp_path / "s.yaml",
        grid={
            "learner.lr": [1e-6 * (i + 1) for i in range(100)],
            "algorithm.clip_high": [0.1 + i * 1e-3 for i in range(100)],
            "algorithm.clip_low": [0.1 + i * 1e-3 for i in range(100)],
        },
        seeds=list(range(1000)),
    )
    out = tmp_path / "out.txt"
    runs = []
    for _ in range(2):
        measured = subprocess.run(
            [sys.executable, "-c", MEASURE, str(out), "plan", path],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
            check=True,
        )
        runs.append(json.loads(measured.stdout))
        output = out.read_text()
        assert runs[-1]["code"] == 2, output
        assert "1,000,000,000 runs (1,000,000 grid x 1,000 seeds)" in output and MAX_RUNS_ENV in output
        assert len(output.strip().splitlines()) == 1, output
    cpu = min(r["cpu_s"] for r in runs)
    rss = max(r["rss_mb"] for r in runs)
    print(
        f"\nplan of 10^9 runs: exit 2, CPU s {[round(r['cpu_s'], 2) for r in runs]}, "
        f"wall s {[round(r['wall_s'], 2) for r in runs]}, peak RSS {rss:.0f} MB"
    )
    assert cpu < 2.0 and rss < 200 and max(r["wall_s"] for r in runs) < 30
    assert not (tmp_path / "mlflow.db").exists()


def test_many_seeds_are_refused_with_the_count_before_any_list_is_walked(tmp_path):
    path = study_file(tmp_path / "s.yaml", variants={"a": {}, "b": {}, "c": {}}, seeds=list(range(400)))
    t0 = time.process_time()
    with pytest.raises(StudyError, match=r"1,200 runs \(3 variants x 400 seeds\), over the limit of 1,000"):
        load_study(path)
    assert time.process_time() - t0 < 1.0  # the 400-seed file parses in ~0.05 s; a pairwise check is the risk


def test_the_limit_is_configurable_and_a_bad_setting_is_named(tmp_path, monkeypatch):
    path = study_file(tmp_path / "s.yaml", grid={"learner.lr": [1e-4, 2e-4, 3e-4]}, seeds=[0, 1])
    monkeypatch.setenv(MAX_RUNS_ENV, "5")
    with pytest.raises(StudyError, match="6 runs .* over the limit of 5"):
        load_study(path)
    monkeypatch.setenv(MAX_RUNS_ENV, "6")
    assert load_study(path).seeds == [0, 1]
    monkeypatch.setenv(MAX_RUNS_ENV, "lots")
    with pytest.raises(ValueError, match=f"{MAX_RUNS_ENV}='lots': expected a positive integer"):
        load_study(path)


def test_overrides_are_counted_too(tmp_path):
    from workbench.study import apply_overrides

    study = load_study(study_file(tmp_path / "s.yaml", seeds=[0]))
    seeds = "[" + ",".join(map(str, range(DEFAULT_MAX_RUNS + 1))) + "]"
    with pytest.raises(StudyError, match=f"{DEFAULT_MAX_RUNS + 1:,} runs"):
        apply_overrides(study, [f"seeds={seeds}"])


def test_duplicate_checks_are_linear_and_still_find_repeats(tmp_path):
    """1,000 seeds and a 1,000-value axis at the limit: duplicates found in one pass each (the old
    pairwise scan was 500 k comparisons per list, 200 M at 20,000 seeds)."""
    seeds = list(range(999)) + [5]
    lrs = [1e-6 * (i + 1) for i in range(999)] + [0.000001]
    t0 = time.process_time()
    with pytest.raises(StudyError) as info:
        validate_study({"name": "d", "base": BASE, "seeds": seeds})
    with pytest.raises(StudyError) as info_grid:
        validate_study({"name": "d", "base": BASE, "grid": {"learner.lr": lrs}})
    cpu = time.process_time() - t0
    print(f"\ntwo 1,000-entry duplicate checks: {cpu:.2f} CPU s")
    assert "seeds[999]: seed 5 appears twice" in str(info.value)
    assert "grid.learner.lr[999]: value 1e-06 repeats grid.learner.lr[0]" in str(info_grid.value)


def test_an_include_chain_is_bounded_in_depth(tmp_path):
    n = MAX_INCLUDE_DEPTH + 4
    for i in range(n):
        text = (f"include: c{i + 1}.yaml\n" if i + 1 < n else f"base: {json.dumps(BASE)}\n") + f"name: c{i}\n"
        (tmp_path / f"c{i}.yaml").write_text(text)
    with pytest.raises(StudyError, match=f"include chain deeper than {MAX_INCLUDE_DEPTH} files"):
        load_study(tmp_path / "c0.yaml")


def test_an_include_chain_is_bounded_in_total_bytes(tmp_path):
    """Three files of 0.75 MiB each (each under the 1 MiB per-file limit): the third is refused
    before it is parsed, with the chain's size in the message."""
    pad = ("#" * 999 + "\n") * 780
    (tmp_path / "a.yaml").write_text(f"include: b.yaml\nname: a\n{pad}")
    (tmp_path / "b.yaml").write_text(f"include: c.yaml\n{pad}")
    (tmp_path / "c.yaml").write_text(f"base: {json.dumps(BASE)}\n{pad}")
    t0 = time.process_time()
    with pytest.raises(StudyError, match=r"the include chain is 2,34\d,\d{3} bytes in 3 files, over 2,097,152"):
        load_study(tmp_path / "a.yaml")
    print(f"\ninclude chain refused after {time.process_time() - t0:.2f} CPU s")


def test_a_tune_grid_of_a_billion_points_is_refused_by_its_cardinality():
    """An int range of 10^9 used to be listed (MemoryError); its size is arithmetic now."""
    search = {
        "params": {"rollout.steps": {"low": 1, "high": 10**9}, "algorithm.preset": ["grpo", "dr_grpo"]},
        "sampler": "grid",
    }
    t0 = time.process_time()
    with pytest.raises(
        StudyError,
        match=r"the grid has 2,000,000,000 points \(1,000,000,000 rollout.steps x "
        r"2 algorithm.preset\), over the limit of 1,000",
    ):
        parse_search(validate_study({"name": "s", "base": search_run_config(), "search": search}))
    assert time.process_time() - t0 < 2.0
