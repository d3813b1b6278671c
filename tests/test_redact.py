"""URI redaction: hand-written cases, then properties over generated passwords."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.execution.worker import describe_storage
from workbench.tracking.redact import redact_config, redact_text, redact_uri


@pytest.mark.parametrize(("uri", "shown"), [
    ("postgresql://workbench:s3cret@db:5432/mlflow", "postgresql://workbench:***@db:5432/mlflow"),
    ("postgresql+psycopg://u:p@h/db?sslmode=require", "postgresql+psycopg://u:***@h/db?sslmode=require"),
    ("postgresql://u@h/db?password=s3cret&sslmode=require", "postgresql://u@h/db?password=***&sslmode=require"),
    ("mysql://u:p%40ss@h/db", "mysql://u:***@h/db"),  # a percent-encoded '@' in the password
    ("postgresql://u:p@ss/w@rd@h/db", "postgresql://u:***@h/db"),  # raw '@' and '/' in the password
    ("https://host/api?token=abc&x=1#access_token=zz", "https://host/api?token=***&x=1#access_token=***"),
    ("http://h:5000?Access-Token=a;API_KEY=b", "http://h:5000?Access-Token=***;API_KEY=***"),
    ("postgresql://u@h/db", "postgresql://u@h/db"),  # no password: unchanged
    ("sqlite:////tmp/mlflow.db", "sqlite:////tmp/mlflow.db"),
    ("/tmp/journal.log", "/tmp/journal.log"),  # a path, not a URI
    ("http://h/?password=", "http://h/?password="),  # nothing to hide
])
def test_redact_uri(uri, shown):
    assert redact_uri(uri) == shown
    assert describe_storage(uri) == shown  # the Optuna storage messages use the same helper


def test_redact_text_masks_every_uri_in_a_study_file():
    text = ("name: s\ntracking: {uri: 'postgresql://wb:hunter2@db/mlflow'}\n"
            "# also http://x/?pwd=hunter3 in a comment\nbase: {learner: {lr: 0.1}}\n")
    out = redact_text(text)
    assert "hunter2" not in out and "hunter3" not in out
    assert "postgresql://wb:***@db/mlflow" in out and "base: {learner: {lr: 0.1}}" in out


def test_redact_config_both_shapes_and_leaves_the_input_alone():
    nested = {"tracking": {"uri": "postgresql://a:b@h/d", "experiment": "e"}, "learner": {"lr": 1}}
    flat = {"tracking.uri": "postgresql://a:b@h/d", "learner.lr": 1}
    assert redact_config(nested)["tracking"] == {"uri": "postgresql://a:***@h/d", "experiment": "e"}
    assert redact_config(flat) == {"tracking.uri": "postgresql://a:***@h/d", "learner.lr": 1}
    assert nested["tracking"]["uri"] == "postgresql://a:b@h/d" and flat["tracking.uri"] == "postgresql://a:b@h/d"


passwords = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=6, max_size=24)


@settings(max_examples=300, deadline=None)
@given(password=passwords, user=st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True),
       scheme=st.sampled_from(["postgresql", "postgresql+psycopg", "mysql", "https"]))
def test_no_password_survives_in_userinfo_or_query(password, user, scheme):
    secret = quote(password, safe="")  # as it appears in a URI
    cases = {f"{scheme}://{user}:{secret}@host:5432/db?sslmode=require":
             f"{scheme}://{user}:***@host:5432/db?sslmode=require",
             f"{scheme}://{user}@host/db?sslmode=require&password={secret}":
             f"{scheme}://{user}@host/db?sslmode=require&password=***"}
    for uri, shown in cases.items():  # exactly the URI with the secret masked: user, host, db kept
        assert redact_uri(uri) == shown
        assert redact_text(f"uri: {uri} and more") == f"uri: {shown} and more"
