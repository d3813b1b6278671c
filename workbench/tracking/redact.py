"""Secrets never leave the process: URIs are redacted before they are printed, logged or stored.

A store URI such as ``postgresql://workbench:PASSWORD@host/db?sslpassword=...`` carries
credentials in two places: the userinfo's password and password-like query parameters. The
one helper here masks both, keeping everything a reader needs to tell stores apart (scheme,
user, host, port, database, other parameters)::
    >>> redact_uri("postgresql://workbench:s3cret@db:5432/mlflow?sslmode=require&password=x")
    'postgresql://workbench:***@db:5432/mlflow?sslmode=require&password=***'
    >>> redact_uri("sqlite:////tmp/mlflow.db")
    'sqlite:////tmp/mlflow.db'

``redact_text`` masks every URI inside a longer text (a study file, an error message), and
``redact_config`` the ``tracking.uri`` of a run-config mapping.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["MASK", "SECRET_PARAMS", "redact_config", "redact_text", "redact_uri"]

MASK = "***"

# Query parameter names whose value is a credential (compared lower-case, '-' read as '_').
SECRET_PARAMS = frozenset({
    "password", "pass", "passwd", "pwd", "sslpassword", "token", "access_token", "refresh_token", "id_token",
    "auth", "auth_token", "authorization", "secret", "client_secret", "key", "api_key", "apikey", "access_key",
    "secret_key", "private_key", "sas", "sig", "signature", "credential", "credentials", "session_token",
})

# scheme://[userinfo@]rest ; the userinfo ends at the last '@' before the path ('@' may occur in passwords)
_URI = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<rest>[^\s\"'<>`]*)")


def _is_secret(name: str) -> bool:
    return name.strip().lower().replace("-", "_") in SECRET_PARAMS


def _redact_query(query: str) -> str:
    parts = []
    for part in re.split(r"([&;])", query):
        name, eq, value = part.partition("=")
        parts.append(f"{name}={MASK}" if eq and value and _is_secret(name) else part)
    return "".join(parts)


def _redact_rest(rest: str) -> str:
    """``user:pw@host/path?query#frag`` (no scheme) with the password and secret params masked."""
    head, hash_, fragment = rest.partition("#")
    head, qmark, query = head.partition("?")
    # the authority ends at the first '/' after the last '@' (a password may hold '/' or '@')
    at = head.rfind("@")
    if at >= 0:
        slash = head.find("/", at)
        authority, path = (head, "") if slash < 0 else (head[:slash], head[slash:])
        at = authority.rfind("@")
        userinfo, host = authority[:at], authority[at + 1:]
        user, colon, password = userinfo.partition(":")
        if colon and password:
            userinfo = f"{user}:{MASK}"
        head = f"{userinfo}@{host}{path}"
    if qmark:
        query = _redact_query(query)
    if hash_:
        fragment = _redact_query(fragment)
    return head + (qmark + query if qmark else "") + (hash_ + fragment if hash_ else "")


def redact_uri(uri: str | None) -> str | None:
    """``uri`` with its userinfo password and password-like query parameters replaced by ``***``."""
    if not uri:
        return uri
    match = _URI.fullmatch(uri.strip())
    if match is None:  # a plain path (journal file, sqlite path without scheme): nothing to hide
        return uri
    return match.group("scheme") + _redact_rest(match.group("rest"))


def redact_text(text: str) -> str:
    """Every ``scheme://...`` URI in ``text`` redacted; the rest unchanged."""
    return _URI.sub(lambda m: m.group("scheme") + _redact_rest(m.group("rest")), text)


def redact_config(config: dict[str, Any]) -> dict[str, Any]:
    """A run-config mapping (``model_dump`` or flattened) with ``tracking.uri`` redacted; input untouched."""
    out = dict(config)
    if isinstance(out.get("tracking"), dict) and out["tracking"].get("uri"):
        out["tracking"] = {**out["tracking"], "uri": redact_uri(out["tracking"]["uri"])}
    if isinstance(out.get("tracking.uri"), str):
        out["tracking.uri"] = redact_uri(out["tracking.uri"])
    return out
