"""Is this tracking store usable? One check, run by every command before it first touches a store,
so that a user's mistake is one line naming the store (redacted) and the cause, exit 2, instead of
an "internal error" from deep inside MLflow or SQLAlchemy:

* a scheme MLflow cannot track to (``ftp://``, ``s3://``);
* a local SQLite file that is empty (0 bytes) or not SQLite at all, a directory, unreadable, or
  (for a command that creates the store) in a place where no file can be created
  (``sqlite:////proc/x.db``, a read-only directory);
* a database server that refuses the credentials (no retries: a wrong password stays wrong), or
  cannot be reached after a few quick tries (not MLflow's own 10 tries over ~100 s);
* an MLflow server that stays unreachable past ``tracking.outage_deadline_s``, the same deadline
  ``run`` honours (each retry announced on stderr).

:func:`describe_store_failure` is the net under it: an error that escaped from a store call
anyway (``sqlite3``, SQLAlchemy, a driver, an HTTP connection) gets the same one-line treatment.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from pathlib import Path

from workbench.tracking.redact import redact_text, redact_uri, register_uri
from workbench.tracking.store import sqlite_file
from workbench.tracking.writer import (
    DEFAULT_OUTAGE_DEADLINE_S,
    OutagePolicy,
    TrackingOutage,
    bound_mlflow_http_retries,
    call_with_retries,
)

__all__ = ["DATABASE_TRIES", "StoreError", "check_store", "describe_store_failure", "last_store", "store_scheme"]

SQL_SCHEMES = ("postgresql", "mysql", "mssql")
SERVER_SCHEMES = ("http", "https", "databricks")
SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file
DATABASE_TRIES = 3  # quick connection attempts (1 s, then 2 s apart) before a database server counts as down
DATABASE_CONNECT_TIMEOUT_S = 5

_last_store: list[str] = []  # the store most recently checked: named by describe_store_failure


class StoreError(ValueError):
    """A tracking store that cannot be used as given (an input error: exit 2)."""

    def __init__(self, uri: str, cause: str, what: str = "tracking store") -> None:
        self.cause = redact_text(cause)
        super().__init__(f"{what} {redact_uri(uri)}: {self.cause}")


def store_scheme(uri: str) -> str:
    """``postgresql+psycopg://...`` -> ``postgresql``; ``""`` for a plain path."""
    return uri.partition("://")[0].partition("+")[0].lower() if "://" in uri else ""


def last_store() -> str | None:
    return _last_store[-1] if _last_store else None


def check_store(
    uri: str, *, create: bool, deadline_s: float = DEFAULT_OUTAGE_DEADLINE_S, what: str = "tracking store"
) -> None:
    """Raise :class:`StoreError` unless ``uri`` can be used (``create``: this command may create it).
    ``what`` names it in the message (``Optuna storage`` for a worker's shared storage)."""
    register_uri(uri)
    _last_store.append(uri)
    scheme = store_scheme(uri)
    try:
        if scheme == "sqlite":
            _check_sqlite(uri, create=create)
        elif scheme in SQL_SCHEMES:
            _check_database(uri, deadline_s=deadline_s)
        elif scheme in SERVER_SCHEMES and what == "tracking store":
            _check_server(uri, deadline_s=deadline_s)
        else:  # an Optuna storage is a database: no MLflow server scheme
            _unsupported(uri, scheme, servers=what == "tracking store")
    except StoreError as error:
        if what == "tracking store":
            raise
        raise StoreError(uri, error.cause, what) from None


def _unsupported(uri: str, scheme: str, *, servers: bool = True) -> None:
    shown = f"scheme {scheme + '://'!r}" if scheme else "a plain path"
    expected = "sqlite:///PATH, postgresql://..., mysql://..." + (", http(s)://SERVER" if servers else "")
    raise StoreError(uri, f"unsupported: {shown} (expected {expected})")


def _sqlite_path(uri: str) -> Path | None:
    path = sqlite_file(uri)
    return None if str(path) in ("", ".", ":memory:") else path


def _check_sqlite(uri: str, *, create: bool) -> None:
    path = _sqlite_path(uri)
    if path is None:
        return
    if path.exists():
        if not path.is_file():
            raise StoreError(uri, f"{path} is not a regular file")
        try:
            with open(path, "rb") as f:
                header = f.read(len(SQLITE_HEADER))
        except OSError as error:
            raise StoreError(uri, f"cannot read {path}: {error.strerror}") from None
        if not header and not create:
            raise StoreError(uri, f"{path} is empty (0 bytes): not an MLflow store")
        if header and header != SQLITE_HEADER:
            raise StoreError(uri, f"{path} is not an SQLite database (corrupt, or another kind of file)")
        if create and not os.access(path, os.W_OK):
            raise StoreError(uri, f"{path} is not writable")
        return
    if not create:
        return  # a store nobody created yet: each command says what that means for it (no runs, no study)
    ancestor = path.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise StoreError(uri, f"cannot create {path}: {ancestor} is not a directory")
    try:  # the real test (permissions, read-only mounts, /proc): create a file where the store would go
        with tempfile.TemporaryFile(dir=ancestor, prefix=".workbench-write-test-"):
            pass
    except OSError as error:
        raise StoreError(uri, f"cannot create {path}: {error.strerror or error} in {ancestor}") from None


def _permanent(message: str) -> bool:
    """A refusal that retrying cannot change: credentials, a missing database or role."""
    text = message.lower()
    return any(
        word in text
        for word in (
            "authentication",
            "password",
            "access denied",
            "does not exist",
            "no pg_hba.conf",
            "permission denied",
            "unknown database",
        )
    )


def _check_database(uri: str, *, deadline_s: float) -> None:
    try:
        import sqlalchemy
    except ImportError:  # pragma: no cover - MLflow depends on it
        raise StoreError(uri, "SQLAlchemy is not installed") from None
    scheme = store_scheme(uri)
    connect_args = {"connect_timeout": DATABASE_CONNECT_TIMEOUT_S} if scheme in ("postgresql", "mysql") else {}
    try:
        engine = sqlalchemy.create_engine(uri, connect_args=connect_args, poolclass=sqlalchemy.pool.NullPool)
    except ImportError as error:
        raise StoreError(
            uri,
            f"no database driver for {scheme} ({error.name or error}); e.g. pip install "
            "'psycopg[binary]' for PostgreSQL",
        ) from None
    except Exception as error:  # noqa: BLE001 - SQLAlchemy's ArgumentError for a malformed URL
        raise StoreError(uri, _first_line(error)) from None
    started = time.monotonic()
    try:
        for attempt in range(DATABASE_TRIES):
            try:
                with engine.connect():
                    return
            except Exception as error:  # noqa: BLE001 - every failure is reported; only some are retried
                cause = _first_line(getattr(error, "orig", None) or error)
                last = attempt + 1 == DATABASE_TRIES or time.monotonic() - started + 2**attempt > deadline_s
                if _permanent(cause) or last:
                    raise StoreError(uri, f"cannot connect: {cause}") from None
                time.sleep(2**attempt)
    finally:
        engine.dispose()


def _check_server(uri: str, *, deadline_s: float) -> None:
    from mlflow import MlflowClient

    bound_mlflow_http_retries()  # one failed call takes seconds (not MLflow's ~4 min); the loop below waits
    client = MlflowClient(uri)
    failures: list[BaseException] = []

    def probe() -> None:
        try:
            client.search_experiments(max_results=1)
        except Exception as error:
            failures.append(error)
            raise

    try:
        call_with_retries(probe, policy=OutagePolicy(deadline_s=deadline_s), uri=uri, what="checking the store")
    except TrackingOutage:
        raise StoreError(
            uri, f"unreachable for tracking.outage_deadline_s={deadline_s:g} s ({_network_cause(failures[-1])})"
        ) from None
    except Exception as error:  # noqa: BLE001 - a server that answers but refuses (auth, not MLflow)
        raise StoreError(uri, _first_line(error)) from None


def _network_cause(error: BaseException) -> str:
    """``[Errno 111] Connection refused`` out of the nest of urllib3/requests/MLflow messages."""
    text = str(error)
    found = re.search(r"\[Errno -?\d+\] [^'\")\]]*", text)
    if found:
        return found.group(0).strip()
    return "timed out" if "timeout" in text.lower() or "timed out" in text.lower() else _first_line(error)[:120]


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = lines[0] if lines else type(error).__name__
    return redact_text(text)[:300]


_STORE_ERROR_MODULES = ("sqlite3", "sqlalchemy", "psycopg", "psycopg2", "pymysql", "MySQLdb", "requests", "urllib3")


def describe_store_failure(error: BaseException) -> str | None:
    """One line for an error raised by a store (a driver, SQLAlchemy, an HTTP connection, an
    unsupported URI) that escaped the checks above; ``None`` for any other error."""
    chain, seen = [], set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append(current)
        current = current.__cause__ or current.__context__
    for item in chain:
        module = type(item).__module__.partition(".")[0]
        name = type(item).__name__
        from_store = (
            module in _STORE_ERROR_MODULES
            or "Unsupported" in name
            and "URI" in name
            or ("API request to " in str(item) and "failed with" in str(item))
        )
        if from_store:
            where = last_store()
            head = f"tracking store {redact_uri(where)}" if where else "tracking store"
            return f"{head}: {_first_line(item)}"
    return None
