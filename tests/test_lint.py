"""Config lint: each registered rule fires on a config where its knob cannot act and stays quiet on
one where it can; `plan` and `run` print one deduplicated `warning:` line per (knob, reason); every
shipped study plans without a warning."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.execution_helpers import fast_run_config
from workbench.algorithms.presets import PRESET_INFO, PRESET_LIST
from workbench.analysis.lint import LINT_RULES, Finding, lint_config, lint_specs
from workbench.cli.main import app
from workbench.config import RunConfig, deep_merge
from workbench.study import RunSpec, expand, load_study

ROOT = Path(__file__).parents[1]
STUDIES = sorted((ROOT / "studies").glob("*.yaml"))


def config(**sections) -> RunConfig:
    base = {"sampler": {"max_new_tokens": 16}, "rollout": {"group_size": 4}}
    return RunConfig.model_validate(deep_merge(base, sections))


def findings(rule: str, cfg: RunConfig) -> list[tuple[str, str]]:
    return [(f.knob, f.reason) for f in LINT_RULES.get(rule)(cfg)]


# rule -> (a config where a knob cannot act, the knob named, a config where it can)
CASES = {
    "clip_with_one_step": (
        config(algorithm={"preset": "dapo", "minibatches": 1}),
        "algorithm.clip_high=0.28",
        config(algorithm={"preset": "dapo", "minibatches": 2}),
    ),
    "correction_without_mismatch": (
        config(algorithm={"correction": "tis"}),
        "algorithm.correction=tis",
        config(algorithm={"correction": "tis"}, sampler={"dtype": "bfloat16"}),
    ),
    "knob_of_an_unused_unit": (
        config(algorithm={"kl_estimator": "k1"}),
        "algorithm.kl_estimator=k1",
        config(algorithm={"kl_estimator": "k1", "kl_coef": 0.01}),
    ),
    "filter_without_refill": (
        config(algorithm={"preset": "dapo", "max_sampling_rounds": 1, "minibatches": 2}),
        "algorithm.batch_filter=zero_std",
        config(algorithm={"preset": "dapo", "max_sampling_rounds": 2, "minibatches": 2}),
    ),
    "path_of_another_engine": (
        config(sampler={"backend": "vllm", "decode": "generate"}),
        "sampler.decode=generate",
        config(sampler={"backend": "hf", "decode": "generate"}),
    ),
    "overlap_with_a_batch_filter": (
        config(algorithm={"preset": "dapo", "minibatches": 2}, reward={"overlap": True}),
        "reward.overlap=true",
        config(algorithm={"preset": "grpo"}, reward={"overlap": True}),
    ),
    "group_of_one": (
        config(rollout={"group_size": 1}),
        "algorithm.estimator=grpo",
        config(rollout={"group_size": 2}),
    ),
    "lr_below_weight_precision": (
        config(learner={"dtype": "bfloat16", "lr": 1e-6}),
        "learner.lr=1e-06",
        config(learner={"backend": "deepspeed", "dtype": "bfloat16", "lr": 1e-6}),
    ),
    "template_on_the_chat_path": (
        config(
            model={"builtin": None, "path": "/models/qwen", "chat_template": "auto", "prompt_template": "qwen_math"}
        ),
        "model.prompt_template=qwen_math",
        config(
            model={"builtin": None, "path": "/models/qwen", "chat_template": "none", "prompt_template": "qwen_math"}
        ),
    ),
    "shaping_that_cannot_trigger": (
        config(reward={"shaping": [{"name": "overlong_soft", "params": {"max_length": 20, "cache_length": 4}}]}),
        "reward.shaping[0] (overlong_soft) cache_length=4, max_length=20",
        config(reward={"shaping": [{"name": "overlong_soft", "params": {"max_length": 16, "cache_length": 4}}]}),
    ),
}


def test_every_registered_rule_has_a_case():
    assert set(CASES) == set(LINT_RULES)


@pytest.mark.parametrize("rule", sorted(CASES))
def test_rule_fires_where_its_knob_cannot_act(rule):
    inert, knob, _ = CASES[rule]
    assert knob in [k for k, _ in findings(rule, inert)]


@pytest.mark.parametrize("rule", sorted(CASES))
def test_rule_is_quiet_where_its_knob_can_act(rule):
    _, _, active = CASES[rule]
    assert findings(rule, active) == []


def test_bf16_weights_do_not_move_at_the_flagged_lr():
    """The premise of lr_below_weight_precision, on the real optimizer: one AdamW step at lr 1e-6 leaves
    bfloat16 weights of N(0, 0.02) almost all unchanged, and moves every float32 one. A step moves a weight by
    lr * m/(sqrt(v) + eps) = lr * 1 on the first step (m = g(1-b1), v = g^2(1-b2), bias-corrected), so only
    |w| < lr * 2^9 = 5.1e-4 can move in bfloat16: 2% of N(0, 0.02) by its CDF (|w| < 0.0256 sd)."""
    import torch

    def moved(dtype: torch.dtype) -> float:
        weights = torch.nn.Parameter(
            (torch.randn(100_000, generator=torch.Generator().manual_seed(0)) * 0.02).to(dtype)
        )
        before = weights.detach().clone()
        optimizer = torch.optim.AdamW([weights], lr=1e-6, weight_decay=0.0)
        weights.grad = torch.ones_like(weights)
        optimizer.step()
        return float((weights.detach() != before).float().mean())

    bf16, fp32 = moved(torch.bfloat16), moved(torch.float32)
    print(f"share of weights moved by one AdamW step at lr 1e-6: bfloat16 {bf16:.4f}, float32 {fp32:.4f}")
    assert bf16 < 0.05 and fp32 == 1.0
    (finding,) = findings("lr_below_weight_precision", config(learner={"dtype": "bfloat16", "lr": 1e-6}))
    assert "2^9 = 0.00051" in finding[1]
    assert findings("lr_below_weight_precision", config(learner={"dtype": "bfloat16", "lr": 1e-4})) == []


def test_learner_forward_under_deepspeed_is_named():
    cfg = config(learner={"backend": "deepspeed", "forward": "full"})
    assert [k for k, _ in findings("path_of_another_engine", cfg)] == ["learner.forward=full"]
    assert findings("path_of_another_engine", config(learner={"backend": "torch", "forward": "full"})) == []


def test_default_grpo_config_has_no_finding():
    """The grpo preset's clip range is nobody's choice: one-step GRPO is not flagged."""
    assert lint_config(config()) == []


def test_clip_rule_names_dual_clip_and_the_reason():
    (found,) = findings("clip_with_one_step", config(algorithm={"dual_clip": 3.0}))
    assert found[0] == "algorithm.dual_clip=3"
    assert "ratio is exactly 1" in found[1]


def test_clip_range_of_a_loss_without_one():
    cfg = config(algorithm={"loss": "reinforce", "clip_high": 0.28, "minibatches": 4})
    assert findings("clip_with_one_step", cfg) == [
        ("algorithm.clip_high=0.28", "algorithm.loss reinforce has no clip range")
    ]


def test_an_unset_clip_range_is_not_a_knob():
    """A preset whose loss has no clip range (sapo) leaves clip_low/high unset: nothing to warn about."""
    assert findings("clip_with_one_step", config(algorithm={"preset": "sapo", "minibatches": 4})) == []
    cfg = config(algorithm={"preset": "sapo", "clip_high": 0.28})
    assert findings("clip_with_one_step", cfg) == [
        ("algorithm.clip_high=0.28", "algorithm.loss sapo has no clip range")
    ]


def test_rules_are_pure_and_return_findings():
    """Contract over every registered rule: same config, same findings, each naming a knob and a reason."""
    for rule in LINT_RULES:
        for inert, _, active in [CASES[rule]]:
            for cfg in (inert, active):
                first, again = list(LINT_RULES.get(rule)(cfg)), list(LINT_RULES.get(rule)(cfg))
                assert first == again
                assert all(isinstance(f, Finding) and f.knob and f.reason for f in first)


def test_correction_acts_with_top_p_or_another_engine():
    assert (
        findings("correction_without_mismatch", config(algorithm={"correction": "tis"}, sampler={"top_p": 0.9})) == []
    )
    assert (
        findings("correction_without_mismatch", config(algorithm={"correction": "tis"}, sampler={"backend": "vllm"}))
        == []
    )


def test_unused_unit_settings_hand_listed():
    cfg = config(
        algorithm={
            "kl_in": "reward",
            "correction_cap": 5.0,
            "max_sampling_rounds": 4,
            "filter_on": "reward",
            "norm_constant": 8.0,
        }
    )
    knobs = [k for k, _ in findings("knob_of_an_unused_unit", cfg)]
    assert knobs == [
        "algorithm.kl_in=reward",
        "algorithm.correction_cap=5",
        "algorithm.filter_on=reward",
        "algorithm.max_sampling_rounds=4",
        "algorithm.norm_constant=8",
    ]


def test_overlong_window_edge_the_last_budget_token_can_trigger():
    # penalty > 0 needs a length > max_length - cache_length; lengths reach max_new_tokens = 16
    reach = config(reward={"shaping": [{"name": "overlong_soft", "params": {"max_length": 19, "cache_length": 4}}]})
    beyond = config(reward={"shaping": [{"name": "overlong_soft", "params": {"max_length": 20, "cache_length": 4}}]})
    assert findings("shaping_that_cannot_trigger", reach) == []
    assert len(findings("shaping_that_cannot_trigger", beyond)) == 1


def test_zero_weight_and_group_of_one_shaping():
    cfg = config(
        rollout={"group_size": 1}, reward={"shaping": [{"name": "format", "weight": 0.0}, {"name": "kimi_length"}]}
    )
    knobs = [k for k, _ in findings("shaping_that_cannot_trigger", cfg)]
    assert knobs == ["reward.shaping[0] (format) weight=0", "reward.shaping[1] (kimi_length)"]


def test_batch_filter_with_groups_of_one_drops_everything():
    cfg = config(algorithm={"preset": "dapo", "minibatches": 2}, rollout={"group_size": 1})
    ((knob, reason),) = findings("filter_without_refill", cfg)
    assert knob == "algorithm.batch_filter=zero_std" and "every group is dropped" in reason


# --- study level: one line per (knob, reason), naming the arms ----------------------------------


def write_study(path: Path, **study) -> Path:
    data = {"name": "lint", "base": fast_run_config()} | study
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_one_line_per_knob_and_reason_naming_the_arms(tmp_path):
    path = write_study(
        tmp_path / "s.yaml",
        variants={
            "grpo": {},
            "dapo": {"algorithm": {"preset": "dapo", "minibatches": 1}},
            "wide": {"algorithm": {"clip_high": 0.28}},
            "multi": {"algorithm": {"preset": "dapo"}},  # DAPO's 16 updates
        },
        grid={"learner.lr": [1.0e-4, 3.0e-4]},
        seeds=[0, 1, 2],
    )
    lines = lint_specs(expand(load_study(path)))
    # 3 seeds x 2 grid points x 2 variants share one finding: one line, variants named once each
    assert lines == [
        "warning: algorithm.clip_high=0.28 has no effect in dapo, wide: one optimizer step per batch "
        "(algorithm.epochs × minibatches = 1), so the policy ratio is exactly 1 and nothing is ever clipped; "
        "set algorithm.minibatches or epochs > 1",
    ]


def test_arms_are_named_when_only_some_grid_points_are_inert(tmp_path):
    path = write_study(
        tmp_path / "s.yaml",
        variants={"dapo": {"algorithm": {"preset": "dapo"}}},
        grid={"algorithm.minibatches": [1, 2]},
    )
    (line,) = lint_specs(expand(load_study(path)))
    assert line.startswith("warning: algorithm.clip_high=0.28 has no effect in dapo/minibatches=1: ")


def plan(path: Path, workdir: Path):
    """`workbench plan` in-process (click keeps stderr apart), against a store that does not exist yet."""
    return CliRunner().invoke(
        app,
        ["plan", str(path)],
        env={"MLFLOW_TRACKING_URI": f"sqlite:///{workdir / 'mlflow.db'}"},
        catch_exceptions=False,
    )


def test_plan_prints_warnings_on_stderr(tmp_path):
    path = write_study(tmp_path / "s.yaml", variants={"dapo": {"algorithm": {"preset": "dapo", "minibatches": 1}}})
    result = plan(path, tmp_path)
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "algorithm.clip_high=0.28 has no effect in dapo:" in warnings[0]
    assert "warning:" not in result.stdout


@pytest.mark.parametrize("path", STUDIES, ids=[p.stem for p in STUDIES])
def test_shipped_study_plans_without_warnings(path, tmp_path):
    result = plan(path, tmp_path)
    assert result.exit_code == 0, result.output
    assert "warning:" not in result.output  # stdout and stderr together
    assert not (tmp_path / "mlflow.db").exists()  # planning looked, created no store


@pytest.mark.slow
def test_run_warns_before_it_starts(workdir):
    path = write_study(workdir / "s.yaml", base=fast_run_config(steps=1, algorithm={"clip_high": 0.3}))
    result = CliRunner().invoke(app, ["run", str(path), "--quiet"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "warning: algorithm.clip_high=0.3 has no effect in base:" in result.output
    assert result.output.index("warning:") < result.output.index("FINISHED")


# --- property: the warning lines are exactly the distinct findings, each naming its variants ------

RUNS = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]), st.sampled_from([0.2, 0.28, 0.3]), st.sampled_from([1, 2]), st.integers(0, 2)
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(RUNS)
def test_lines_are_the_distinct_findings_naming_every_affected_variant(runs):
    specs = []
    for i, (variant, clip_high, minibatches, seed) in enumerate(runs):
        cfg = config(algorithm={"clip_high": clip_high, "minibatches": minibatches})
        label = f"{variant}/minibatches={minibatches}/seed={seed}/{i}"  # unique labels, arms by minibatches
        specs.append(RunSpec(variant, seed, {"algorithm.minibatches": minibatches}, cfg, f"k{i}", label))
    lines = lint_specs(specs)
    expected = {f for s in specs for f in lint_config(s.config)}
    assert len(lines) == len(set(lines)) == len(expected)
    for finding in expected:
        (line,) = [
            ln
            for ln in lines
            if ln.startswith(f"warning: {finding.knob} has no effect in ") and ln.endswith(f": {finding.reason}")
        ]
        affected = {s.variant for s in specs if finding in lint_config(s.config)}
        named = line.removeprefix(f"warning: {finding.knob} has no effect in ").split(": ")[0].split(", ")
        assert {name.split("/")[0] for name in named} == affected


@pytest.mark.parametrize("preset", [p.name for p in PRESET_LIST])
def test_a_preset_on_the_default_study_shape_warns_only_of_what_its_table_row_declares_inert(preset):
    """#53: a preset named after a paper sets what its mechanisms need (dapo, cispo and olmo3 take DAPO's
    16 updates per batch with its clip-higher, gspo its 4 minibatches, gmpo its released script's 8 updates);
    what an algorithm preset cannot set (olmo3's TIS needs a sampler precision other than the learner's) is
    declared in its row of the preset table, and only that warns."""
    preset_info = PRESET_INFO[preset]
    for finding in lint_config(config(algorithm={"preset": preset})):
        name = finding.knob.split("=")[0].removeprefix("algorithm.")
        assert preset_info.inert_by_default, (preset, finding)
        assert name.split("_")[0] in preset_info.inert_by_default, (preset, finding, preset_info.inert_by_default)
    if preset != "olmo3":  # the one preset whose cited mechanism needs a setting outside `algorithm`
        assert lint_config(config(algorithm={"preset": preset})) == []
