"""Secrets never leave the process: one mechanism, applied wherever text leaves it.

A store URI such as ``postgresql://workbench:PASSWORD@host/db?sslpassword=...`` carries
credentials in two places: the userinfo's password and query parameters whose name looks
secret (``password``, ``token``, ``key``, ``secret``, ...). :func:`parse_secrets` finds them by
parsing the URI (not by a pattern that stops at a quote or a space: a password may hold any
character, raw or percent-encoded), and :func:`redact_uri` masks them, keeping everything a
reader needs to tell stores apart (scheme, user, host, port, database, other parameters)::

    >>> redact_uri("postgresql://workbench:s3cret@db:5432/mlflow?sslmode=require&password=x")
    'postgresql://workbench:***@db:5432/mlflow?sslmode=require&password=***'
    >>> redact_uri("http://bob:it's a secret@h:5000/")
    'http://bob:***@h:5000/'
    >>> redact_uri("sqlite:////tmp/mlflow.db")
    'sqlite:////tmp/mlflow.db'

Free text (an exception message, a log line, a study file) cannot be parsed as one URI: a
password with a space or a quote ends any pattern early. So every URI the workbench is given
is *registered* (:func:`register_uri`: the CLI's arguments, ``$MLFLOW_TRACKING_URI``, each
resolved tracking URI) and :func:`redact_text` masks each registered secret wherever it occurs,
in every spelling a library may print it in (as written, percent-decoded and -encoded, inside a
``repr`` or a JSON string), then masks the URIs it can find that were never registered.
:func:`guard_output` puts that filter on the process's stdout, stderr and logging, so a message
nobody thought to redact (an MLflow warning, a driver's error) is covered too.

Secrets shorter than :data:`MIN_FREE_TEXT_SECRET` characters are masked inside URIs only:
masking every "ab" in every line would garble the output and hide nothing worth hiding.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import sys
import threading
from typing import Any, TextIO
from urllib.parse import quote, quote_plus, unquote

__all__ = [
    "MASK",
    "MIN_FREE_TEXT_SECRET",
    "RedactingFilter",
    "RedactingStream",
    "guard_output",
    "is_secret_name",
    "parse_secrets",
    "redact_config",
    "redact_text",
    "redact_uri",
    "register_uri",
    "register_uris_in",
]

MASK = "***"
MIN_FREE_TEXT_SECRET = 4

# A query parameter is secret when its name (lower-case, '-' read as '_') contains one of these
# words (``sslpassword``, ``X-Amz-Signature``, ``client_secret``, ``api_key``) or is one of the
# short names (a substring match on ``pass`` or ``sig`` would hit ``passive``, ``design``).
_SECRET_WORDS = ("password", "passwd", "token", "secret", "key", "auth", "credential", "signature")
_SECRET_NAMES = frozenset({"pass", "pwd", "pw", "sig", "sas", "code"})
# Names that contain a secret word but name no secret: MLflow UI's saved-view id, which every view
# link the workbench prints carries (masking it broke the links `workbench ui` prints).
_PUBLIC_NAMES = frozenset({"viewstatesharekey", "viewsharekey"})

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
# host[:port] after the userinfo's '@': a name, an IPv4 or a bracketed IPv6, then '/', '?', '#' or the end
_HOST = re.compile(r"(?:\[[0-9A-Za-z:.%]*\]|[A-Za-z0-9._~%\-]*)(?::[0-9]*)?(?=[/?#]|$)")
# where an unregistered URI inside free text ends: whitespace, a quote or a bracket
_URI_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"'<>`]*")


def is_secret_name(name: str) -> bool:
    """Whether a query parameter (or a ``key: value`` field) of this name holds a credential."""
    norm = unquote(name).strip().lower().replace("-", "_")
    if norm.replace("_", "") in _PUBLIC_NAMES:
        return False
    return norm in _SECRET_NAMES or any(word in norm for word in _SECRET_WORDS)


def _split_userinfo(rest: str) -> tuple[str | None, str]:
    """``rest`` (the URI after ``scheme://``) as (userinfo or None, the part from the host on).

    The userinfo ends at the *last* '@' that is followed by a plausible host: a password may hold
    '@', '/', '?' or '#' unencoded. A path-only URI (``sqlite:////tmp/x.db``) has no userinfo."""
    if rest.startswith("/") or "@" not in rest:
        return None, rest
    ats = [i for i, c in enumerate(rest) if c == "@"]
    at = next((i for i in reversed(ats) if _HOST.match(rest, i + 1)), ats[-1])
    return rest[:at], rest[at + 1 :]


def _query_secrets(query: str) -> tuple[str, list[str]]:
    """``query`` with secret-named values masked, and those values."""
    parts, found = [], []
    for part in re.split(r"([&;])", query):
        name, eq, value = part.partition("=")
        # in a fragment the first name follows its route ('/experiments/1?viewShareKey'): judge the name only
        if eq and value and is_secret_name(name.rsplit("?", 1)[-1]):
            parts.append(f"{name}={MASK}")
            found.append(value)
        else:
            parts.append(part)
    return "".join(parts), found


def _redact(uri: str) -> tuple[str, list[str]]:
    """(``uri`` redacted, the secrets it held); ``uri`` must start with a scheme."""
    scheme = _SCHEME.match(uri)
    assert scheme is not None
    userinfo, rest = _split_userinfo(uri[scheme.end() :])
    found: list[str] = []
    head = scheme.group(0)
    if userinfo is not None:
        user, colon, password = userinfo.partition(":")
        if colon and password:
            found.append(password)
            userinfo = f"{user}:{MASK}"
        head += userinfo + "@"
    before_fragment, hash_, fragment = rest.partition("#")
    path, qmark, query = before_fragment.partition("?")
    if qmark:
        query, secrets = _query_secrets(query)
        found += secrets
    if hash_:
        fragment, secrets = _query_secrets(fragment)  # OAuth puts tokens in the fragment
        found += secrets
    return head + path + (qmark + query if qmark else "") + (hash_ + fragment if hash_ else ""), found


def parse_secrets(uri: str | None) -> list[str]:
    """The credentials in ``uri`` as written in it (userinfo password, secret query values)."""
    if not uri or not _SCHEME.match(uri.strip()):
        return []
    return _redact(uri.strip())[1]


def redact_uri(uri: str | None) -> str | None:
    """``uri`` with its userinfo password and secret-named query parameters replaced by ``***``."""
    if not uri:
        return uri
    stripped = uri.strip()
    if not _SCHEME.match(stripped):  # a plain path (journal file, sqlite path without scheme): nothing to hide
        return uri
    register_uri(stripped)  # a URI worth redacting here is worth masking in any message that quotes it
    return _redact(stripped)[0]


# --------------------------------------------------------------------------------------------
# The registry of known secrets, and free text
# --------------------------------------------------------------------------------------------

_lock = threading.Lock()
_known: set[str] = set()  # every spelling of every registered secret
_pattern: re.Pattern[str] | None = None  # the alternation of _known, longest first


def _spellings(secret: str) -> set[str]:
    """The ways a library may print ``secret`` (as it appears in a URI): as written,
    percent-decoded, re-encoded, inside a ``repr`` or a JSON string, with '+' for spaces."""
    plain = unquote(secret)
    forms = {secret, plain, quote(plain, safe=""), quote(plain), quote_plus(plain), quote(plain, safe="@:")}
    for form in list(forms):
        forms.add(repr(form)[1:-1])
        forms.add(json.dumps(form)[1:-1])
        forms.add(json.dumps(form, ensure_ascii=False)[1:-1])
    return {f for f in forms if len(f) >= MIN_FREE_TEXT_SECRET}


def register_uri(uri: str | None) -> None:
    """Remember ``uri``'s secrets: from now on :func:`redact_text` masks them in any text."""
    global _pattern
    new = set()
    for secret in parse_secrets(uri):
        new |= _spellings(secret)
    with _lock:
        if new - _known:
            _known.update(new)
            _pattern = re.compile("|".join(re.escape(s) for s in sorted(_known, key=len, reverse=True)))


def register_uris_in(values: Any) -> None:
    """Register every URI among ``values`` (argv, a config mapping, strings nested in lists/dicts),
    including one given as the value part of ``--opt=URI``."""
    if isinstance(values, str):
        for match in _SCHEME.finditer(values):
            register_uri(values[match.start() :])  # everything after the scheme: a password may hold spaces
    elif isinstance(values, dict):
        for value in values.values():
            register_uris_in(value)
    elif isinstance(values, (list, tuple, set)):
        for value in values:
            register_uris_in(value)


def redact_text(text: str) -> str:
    """``text`` with every registered secret masked, then every URI found in it redacted."""
    pattern = _pattern
    if pattern is not None:
        text = pattern.sub(MASK, text)
    return _URI_IN_TEXT.sub(lambda m: _redact(m.group(0))[0], text)


def redact_config(config: dict[str, Any]) -> dict[str, Any]:
    """A run-config mapping (``model_dump`` or flattened) with ``tracking.uri`` redacted; input untouched."""
    out = dict(config)
    if isinstance(out.get("tracking"), dict) and out["tracking"].get("uri"):
        out["tracking"] = {**out["tracking"], "uri": redact_uri(out["tracking"]["uri"])}
    if isinstance(out.get("tracking.uri"), str):
        out["tracking.uri"] = redact_uri(out["tracking.uri"])
    return out


# --------------------------------------------------------------------------------------------
# The process's output
# --------------------------------------------------------------------------------------------


class RedactingStream(io.TextIOBase):
    """A text stream that passes whole lines through :func:`redact_text` (a secret split over two
    ``write`` calls is still seen whole); the rest on ``flush``."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._pending = ""

    def write(self, text: str) -> int:
        self._pending += text
        cut = max(self._pending.rfind("\n"), self._pending.rfind("\r")) + 1
        if cut:
            self.stream.write(redact_text(self._pending[:cut]))
            self._pending = self._pending[cut:]
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self.stream.write(redact_text(self._pending))
            self._pending = ""
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]  # a property where TextIO declares an attribute
        return self.stream.encoding

    @property
    def errors(self) -> str | None:  # type: ignore[override]  # a property where TextIO declares an attribute
        return self.stream.errors

    def writable(self) -> bool:
        return True


class RedactingFilter(logging.Filter):
    """Log records (to any handler: files included) with their message redacted."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string: logging reports it when the record is emitted
            return True
        redacted = redact_text(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = redact_text(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


_FACTORY_LOCK = threading.Lock()
_guarded = False


def guard_output(argv: list[str] | None = None) -> None:
    """Redact this process's stdout, stderr and log records; register the URIs in ``argv`` and
    ``$MLFLOW_TRACKING_URI``. Idempotent; call it first thing in a process that may print a URI."""
    global _guarded
    register_uris_in(list(sys.argv if argv is None else argv))
    register_uri(os.environ.get("MLFLOW_TRACKING_URI"))
    with _FACTORY_LOCK:
        if _guarded:
            return
        _guarded = True
        sys.stdout = RedactingStream(sys.stdout)  # type: ignore[assignment]  # a TextIO wrapper, not the io.TextIOWrapper typeshed names
        sys.stderr = RedactingStream(sys.stderr)  # type: ignore[assignment]  # a TextIO wrapper, not the io.TextIOWrapper typeshed names
        # every record, whichever logger and handler (a log file too), passes this filter first
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            RedactingFilter().filter(record)
            return record

        logging.setLogRecordFactory(factory)
