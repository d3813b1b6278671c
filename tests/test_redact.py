"""URI redaction: hand-written cases, then properties over generated passwords."""

from __future__ import annotations

import io
import json
import logging
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.execution.worker import describe_storage
from workbench.tracking.redact import (
    MASK,
    RedactingFilter,
    RedactingStream,
    is_secret_name,
    redact_config,
    redact_text,
    redact_uri,
    register_uri,
)


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
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
    ],
)
def test_redact_uri(uri, shown):
    assert redact_uri(uri) == shown
    assert describe_storage(uri) == shown  # the Optuna storage messages use the same helper


def test_redact_text_masks_every_uri_in_a_study_file():
    text = (
        "name: s\ntracking: {uri: 'postgresql://wb:hunter2@db/mlflow'}\n"
        "# also http://x/?pwd=hunter3 in a comment\nbase: {learner: {lr: 0.1}}\n"
    )
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
@given(
    password=passwords,
    user=st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True),
    scheme=st.sampled_from(["postgresql", "postgresql+psycopg", "mysql", "https"]),
)
def test_no_password_survives_in_userinfo_or_query(password, user, scheme):
    secret = quote(password, safe="")  # as it appears in a URI
    cases = {
        f"{scheme}://{user}:{secret}@host:5432/db?sslmode=require": f"{scheme}://{user}:***@host:5432/db?sslmode=require",
        f"{scheme}://{user}@host/db?sslmode=require&password={secret}": f"{scheme}://{user}@host/db?sslmode=require&password=***",
    }
    for uri, shown in cases.items():  # exactly the URI with the secret masked: user, host, db kept
        assert redact_uri(uri) == shown
        assert redact_text(f"uri: {uri} and more") == f"uri: {shown} and more"


# ---- issue #31: passwords a pattern cannot delimit, and the registry of known secrets -----------


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        ("http://bob:it's a secret@127.0.0.1:9/", "http://bob:***@127.0.0.1:9/"),  # quote and spaces, raw
        ('postgresql://u:a"b c@h:5432/db', "postgresql://u:***@h:5432/db"),
        ("postgresql://u:p?w#x@h/db?sslmode=require", "postgresql://u:***@h/db?sslmode=require"),  # raw ? and #
        (
            "http://h/x?X-Amz-Signature=abc&client_secret=d&sslkey=/k&page=2",
            "http://h/x?X-Amz-Signature=***&client_secret=***&sslkey=***&page=2",
        ),
        ("sqlite:////tmp/a@b:c.db", "sqlite:////tmp/a@b:c.db"),  # a path, however it looks, has no userinfo
    ],
)
def test_redact_uri_parses_what_a_pattern_cannot_delimit(uri, shown):
    assert redact_uri(uri) == shown


def test_a_registered_secret_is_masked_in_any_spelling_in_free_text():
    password = 'it\'s a "sécret" @:/%'
    register_uri(f"postgresql://bob:{quote(password, safe='')}@db/mlflow")
    texts = [
        f"failed: password {password!r} rejected",
        json.dumps({"uri": f"x {password} y"}),
        f"quoted {quote(password, safe='')} / {quote(password)} / {quote_plus(password)}",
        f"connection to 'postgresql://bob:{password}@db/mlflow' failed",
    ]
    for text in texts:
        out = redact_text(text)
        assert "sécret" not in out and "s%C3%A9cret" not in out and "\\u00e9" not in out, out
        assert MASK in out


def test_a_short_secret_is_masked_inside_uris_only():
    register_uri("postgresql://bob:ab@db/x")
    assert redact_text("tab stab postgresql://bob:ab@db/x") == "tab stab postgresql://bob:***@db/x"


def test_the_output_guard_sees_a_secret_split_over_writes_and_in_log_records(capsys):
    register_uri("http://u:Zq9splitSecret@h/")
    sink = io.StringIO()
    stream = RedactingStream(sink)
    stream.write("before Zq9spl")
    stream.write("itSecret after\n")
    stream.write("tail Zq9splitSecret")
    stream.flush()
    assert sink.getvalue() == "before *** after\ntail ***"
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "cannot reach %s", ("Zq9splitSecret",), None)
    RedactingFilter().filter(record)
    assert record.getMessage() == "cannot reach ***"


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("password", True),
        ("sslpassword", True),
        ("X-Amz-Signature", True),
        ("api-key", True),
        ("pwd", True),
        ("sslmode", False),
        ("passive", False),
        ("page", False),
        ("design", False),
    ],
)
def test_is_secret_name(name, secret):
    assert is_secret_name(name) is secret


def test_links_the_workbench_prints_keep_their_public_parameters():
    # MLflow UI's saved-view id ('viewStateShareKey' holds 'key') is no secret: masking it broke every view
    # link `workbench ui` prints. A token in a fragment route is still masked.
    link = "http://127.0.0.1:5000/#/experiments/1/runs?viewStateShareKey=workbench-health&compareRunsMode=CHART"
    assert redact_uri(link) == link
    assert (
        redact_uri("https://x.org/cb#/route?access_token=abcdef&x=1") == "https://x.org/cb#/route?access_token=***&x=1"
    )


def test_the_ui_relays_its_servers_output_through_the_redaction():
    """`workbench ui` starts `mlflow server` with the store URI in its environment; whatever that process
    prints (an error echoing the URI, a traceback) reaches the terminal or the log file only through
    ``_relay_redacted``. A real child process writes the password to stdout and stderr, whole and split."""
    import subprocess
    import sys

    from workbench.cli.main import _relay_redacted

    password = "ui's pw@:/%"
    uri = f"postgresql://bob:{quote(password, safe='')}@db:5432/mlflow"
    register_uri(uri)
    script = (
        "import sys; print(sys.argv[1], flush=True); print('failed:', sys.argv[2], file=sys.stderr, flush=True);"
        "print('bye', flush=True)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, uri, password],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )
    sink = io.StringIO()
    relay = _relay_redacted(proc.stdout, sink)
    proc.wait(timeout=30)
    relay.join(timeout=10)
    shown = sink.getvalue()
    assert "postgresql://bob:***@db:5432/mlflow" in shown and f"failed: {MASK}" in shown and "bye" in shown
    assert password not in shown and quote(password, safe="") not in shown
