"""Issue #31, classes 4 and 5: a store that cannot be used, and a command line the framework cannot
parse, are the user's mistakes: exit 2 with the framework's usage message, or one line naming the
store (redacted) and the cause; never "internal error" (exit 1). Beyond the issue's examples:
a directory, a text file and a wrong-version header as ``mlflow.db``; ``s3://`` and ``gopher://``;
a store path below a regular file; an unreachable PostgreSQL port; ``tune``/``health``/``algorithms``
usage mistakes."""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml
from typer.testing import CliRunner

from tests.conftest import micro_run_config
from workbench.cli.main import app
from workbench.tracking.check import DATABASE_TRIES, StoreError, check_store

PASSWORD = "Sw0rd fish'\"@:/%"  # the store's password in every URI below: it must never be printed


@pytest.fixture
def study_dir(workdir: Path) -> Path:
    (workdir / "s.yaml").write_text(yaml.safe_dump({"name": "st", "base": micro_run_config()}))
    return workdir


def invoke(args: list[str], uri: str | None = None):
    env = {"MLFLOW_TRACKING_URI": uri} if uri else {}
    t0 = time.monotonic()
    result = CliRunner().invoke(app, args, env=env)
    return result, time.monotonic() - t0


def assert_one_line_exit_2(result, *pieces: str) -> str:
    lines = [line for line in result.output.splitlines() if line.strip() and not line.startswith("warning:")]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1, result.output
    assert "internal error" not in result.output and "Traceback" not in result.output
    for piece in pieces:
        assert piece in lines[0], result.output
    return lines[0]


# ---- class 4: corrupt or empty local stores, read by every reading command ----------------------

BAD_FILES = {
    "empty": (b"", "is empty (0 bytes)"),
    "random-bytes": (bytes(range(256)) * 20, "not an SQLite database"),
    "text-file": (b"hello, I am not a database\n", "not an SQLite database"),
    "sqlite-2-header": (b"** This file contains an SQLite 2.1 database **" + bytes(100), "not an SQLite database"),
}


@pytest.mark.parametrize("command", ["compare", "health", "plan"])
@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_a_corrupt_or_empty_store_file_is_one_line_naming_it(study_dir, command, kind):
    content, cause = BAD_FILES[kind]
    (study_dir / "mlflow.db").write_bytes(content)
    result, _ = invoke([command, "s.yaml"])
    line = assert_one_line_exit_2(result, "mlflow.db", cause)
    assert line.startswith("error: tracking store sqlite:///")
    assert (study_dir / "mlflow.db").read_bytes() == content  # nothing written to it


def test_a_directory_where_the_store_file_should_be(study_dir):
    (study_dir / "mlflow.db").mkdir()
    assert_one_line_exit_2(invoke(["compare", "s.yaml"])[0], "is not a regular file")


# ---- class 4: URIs no store can live at ------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "cause"),
    [
        (f"ftp://bob:{PASSWORD}@files.example/x", "unsupported: scheme 'ftp://'"),
        ("s3://bucket/mlflow", "unsupported: scheme 's3://'"),
        (f"gopher://bob:{PASSWORD}@h/x", "unsupported: scheme 'gopher://'"),
    ],
)
@pytest.mark.parametrize("command", ["plan", "run", "compare"])
def test_an_unsupported_scheme_is_one_line(study_dir, uri, cause, command):
    args = [command, "s.yaml"] + (["--quiet"] if command == "run" else [])
    result, _ = invoke(args, uri)
    line = assert_one_line_exit_2(result, cause)
    assert PASSWORD not in result.output and "Sw0rd" not in result.output
    assert line.startswith("error: tracking store " + uri.partition("://")[0] + "://")
    assert not (study_dir / "mlflow.db").exists()


@pytest.mark.parametrize("where", ["/proc/x.db", "/proc/sub/dir/x.db", "FILE/x.db"])
def test_a_store_path_where_no_file_can_be_created(study_dir, where):
    (study_dir / "FILE").write_text("a regular file, not a directory")
    path = where if where.startswith("/") else str(study_dir / where)
    result, _ = invoke(["run", "s.yaml", "--quiet"], f"sqlite:///{path}")
    assert_one_line_exit_2(result, f"cannot create {path}")
    assert not any(study_dir.glob("**/*.db"))


@pytest.mark.slow
def test_an_unreachable_database_is_a_few_quick_tries_not_a_hundred_seconds(study_dir):
    """Nothing listens on port 1: DATABASE_TRIES connection attempts 1 s and 2 s apart (~3 s), not
    MLflow's 10 tries over ~100 s. The figure is printed."""
    uri = f"postgresql://bob:{quote(PASSWORD, safe='')}@127.0.0.1:1/mlflow"
    t0 = time.monotonic()
    with pytest.raises(StoreError, match="cannot connect") as caught:
        check_store(uri, create=False)
    took = time.monotonic() - t0
    print(f"unreachable PostgreSQL: {DATABASE_TRIES} tries in {took:.1f} s")
    assert took < 30  # 3 s of waits + 3 refused connects; generous for a loaded machine
    assert "Sw0rd" not in str(caught.value) and "127.0.0.1:1" in str(caught.value)
    result, _ = invoke(["compare", "s.yaml", "--tracking-uri", uri])
    assert_one_line_exit_2(result, "tracking store postgresql://bob:***@127.0.0.1:1/mlflow", "cannot connect")
    assert "Sw0rd" not in result.output


def test_an_unreachable_server_fails_plan_within_the_studys_outage_deadline(study_dir):
    """`plan` honours tracking.outage_deadline_s as `run` does: retries announced, then one line."""
    (study_dir / "s.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "st",
                "base": micro_run_config(
                    tracking={"uri": f"http://bob:{quote(PASSWORD, safe='')}@127.0.0.1:1/", "outage_deadline_s": 2}
                ),
            }
        )
    )
    result, took = invoke(["plan", "s.yaml"])
    print(f"plan against an unreachable server, outage_deadline_s=2: {took:.1f} s")
    assert_one_line_exit_2(
        result,
        "tracking store http://bob:***@127.0.0.1:1/",
        "unreachable for tracking.outage_deadline_s=2 s",
        "Connection refused",
    )
    assert "retrying in" in result.output and "Sw0rd" not in result.output
    assert took < 60  # 2 s deadline + MLflow's one bounded HTTP retry per attempt; loaded machine


def test_run_against_a_server_unreachable_from_the_start_is_exit_2_and_starts_nothing(study_dir):
    """Nothing ran, so it is the same mistake as `plan`'s above (exit 2, one line), not the exit 1 of a
    study that lost MLflow mid-way (tests/test_outage_server.py); no local store appears either."""
    (study_dir / "s.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "st",
                "base": micro_run_config(
                    tracking={"uri": f"http://bob:{quote(PASSWORD, safe='')}@127.0.0.1:1/", "outage_deadline_s": 2}
                ),
            }
        )
    )
    result, took = invoke(["run", "s.yaml", "--quiet"])
    print(f"run against an unreachable server, outage_deadline_s=2: {took:.1f} s")
    line = assert_one_line_exit_2(result, "http://bob:***@127.0.0.1:1/", "no run was started")
    assert "Sw0rd" not in result.output and "MLflow unreachable" in line
    assert not (study_dir / "mlflow.db").exists() and not (study_dir / "mlartifacts").exists()
    assert took < 60


def test_a_refused_role_fails_at_once(postgres_url):
    """A role the server does not know (the throwaway server trusts every password, so a wrong
    password is a wrong role here): refused on the first try, no retries."""
    host = postgres_url.split("@", 1)[1]
    uri = f"postgresql://nobody_{int(time.time())}:{quote(PASSWORD, safe='')}@{host}"
    t0 = time.monotonic()
    with pytest.raises(StoreError, match="does not exist") as caught:
        check_store(uri, create=False)
    print(f"refused role: {time.monotonic() - t0:.2f} s")
    assert time.monotonic() - t0 < 5 and "Sw0rd" not in str(caught.value)


# ---- class 5: usage errors ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["nosuch"],  # unknown command
        ["plan"],  # missing argument
        ["run", "s.yaml", "--parallel", "0"],  # out of range
        ["plan", "s.yaml", "--bogus"],  # unknown option
        ["tune", "s.yaml", "--workers", "0"],
        ["run", "s.yaml", "--only"],  # an option without its value
        ["health", "s.yaml", "--format"],
        ["algorithms", "nosuch"],
        ["compare", "s.yaml", "extra-argument"],
        ["run", "s.yaml", "--parallel", "two"],  # not an integer
    ],
)
def test_a_usage_error_is_the_frameworks_usage_message_and_exit_2(study_dir, args):
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "internal error" not in result.output and "Traceback" not in result.output
    # the framework's message: its usage line, or (an option missing its value, found while parsing
    # the whole line) its error box alone
    assert "Usage:" in result.output or "requires an argument" in result.output, result.output
    assert not (study_dir / "mlflow.db").exists()


def test_the_net_names_the_store_for_a_driver_error_that_escaped_the_checks(tmp_path):
    """An error raised inside a store call after the check (a file corrupted meanwhile, a server
    gone) is still one line naming the last store checked; any other error is not the net's."""
    import sqlite3

    from workbench.tracking.check import describe_store_failure

    uri = f"sqlite:///{tmp_path}/m.db?password={quote(PASSWORD, safe='')}"
    check_store(uri, create=True)
    try:
        try:
            raise sqlite3.DatabaseError("file is not a database")
        except sqlite3.DatabaseError as inner:
            raise RuntimeError("wrapped by a library") from inner
    except RuntimeError as error:
        line = describe_store_failure(error)
    assert line == f"tracking store sqlite:///{tmp_path}/m.db?password=***: file is not a database"
    assert describe_store_failure(RuntimeError("internal invariant broken")) is None
