"""Whatever the input, the result is a Study or a StudyError of one-line messages (never a crash)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.study import StudyError, expand, validate_study

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 40),
    st.sampled_from([1e-4, 0.3, -1.0]),
    st.sampled_from(["grpo", "dapo", "tiny", "float16", "x", "", "tis"]),
)
keys = st.sampled_from(
    [
        "model",
        "builtin",
        "learner",
        "lr",
        "algorithm",
        "preset",
        "clip_high",
        "rollout",
        "steps",
        "seed",
        "health",
        "rules",
        "tracking",
        "sampler",
        "dtype",
        "zzz",
    ]
)
trees = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(keys, inner, max_size=3)),
    max_leaves=8,
)
paths = st.sampled_from(["learner.lr", "rollout.steps", "algorithm.preset", "sampler.dtype", "lr", "seed", "model"])
studies = st.fixed_dictionaries(
    {"name": st.sampled_from(["s", "", "a b"]), "base": st.one_of(st.just({"model": {"builtin": "tiny"}}), trees)},
    optional={
        "variants": st.dictionaries(st.sampled_from(["a", "b-c", "d"]), st.one_of(st.none(), trees), max_size=3),
        "grid": st.dictionaries(paths, st.one_of(st.lists(scalars, max_size=3), scalars), max_size=2),
        "zip": st.dictionaries(paths, st.lists(scalars, max_size=3), max_size=2),
        "seeds": st.one_of(st.lists(st.integers(0, 3), max_size=3), scalars),
        "exclude": st.lists(
            st.dictionaries(st.sampled_from(["variant", "seed", "learner.lr", "nope"]), scalars), max_size=2
        ),
        "health": st.one_of(st.none(), trees),
        "zzz": scalars,
    },
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(studies)
def test_study_or_study_error(data):
    try:
        specs = expand(validate_study(data))
    except StudyError as err:
        assert err.issues and all("\n" not in str(i) and str(i).strip() for i in err.issues)
    else:
        assert specs and len({s.run_key for s in specs}) == len(specs)
