"""The study reader's parts, one module each (:mod:`workbench.results.reader` puts them together):
* ``protocol``: :class:`RunReader`, what every backend answers (runs of a study, bulk histories);
* ``sql``: :class:`SqlRunReader`, MLflow's SQL tables read directly;
* ``rest``: :class:`RestRunReader`, a tracking server (``search_runs`` + the bulk history endpoint);
* ``cache``: :class:`HistoryCache`, terminal runs' histories and JSON artifacts on disk;
* ``frames``: the tidy ``history``/``runs`` frames assembled from points and run rows (pandas only).

:func:`reader_for` picks the backend of a tracking URI.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from workbench.tracking.redact import redact_uri

from .cache import HistoryCache, default_cache_dir
from .protocol import ROLE_TAG, TERMINAL_STATUSES, RunReader, StudyNotFound
from .rest import RestRunReader
from .sql import SqlRunReader

__all__ = [
    "ROLE_TAG",
    "TERMINAL_STATUSES",
    "HistoryCache",
    "RestRunReader",
    "RunReader",
    "SqlRunReader",
    "StudyNotFound",
    "default_cache_dir",
    "reader_for",
]

SQL_SCHEMES = ("sqlite", "postgresql", "postgres", "mysql", "mssql")
SERVER_SCHEMES = ("http", "https", "databricks")


def reader_for(uri: str, **kwargs: Any) -> RunReader:
    """The backend that reads ``uri``: a database store directly, a tracking server over REST
    (``kwargs``: :class:`RestRunReader`'s ``client``/``transport``)."""
    scheme = urlparse(uri).scheme.split("+")[0]
    if scheme in SQL_SCHEMES:
        return SqlRunReader(uri)
    if scheme in SERVER_SCHEMES:
        return RestRunReader(uri, **kwargs)

    raise ValueError(
        f"cannot read tracking URI {redact_uri(uri)!r}: expected a database (sqlite:///..., postgresql://...) "
        "or a tracking server (http://...)"
    )
