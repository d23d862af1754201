"""Where the store lives: ``store.url`` in server.yaml (or ``--store``), parsed and checked.

::

    sqlite:///var/lib/kubesvc/kubesvc.db   a SQLite file (absolute path: three slashes)
    sqlite://kubesvc.db                    a SQLite file relative to the config file's folder
    sqlite://:memory:                      SQLite in memory (nothing survives a restart)
    postgresql://kubesvc@db:5432/kubesvc?sslmode=verify-full&passwordFile=/secrets/pg
                                           PostgreSQL, for several server replicas

A PostgreSQL URL is handed to libpq as it is (every libpq option is allowed in the query
string: sslmode, sslrootcert, connect_timeout, options, passfile, ...), except
``passwordFile``: a file holding only the password, read at each connect (so a rotated
Kubernetes Secret is picked up), which libpq does not know. libpq's own ``PGPASSFILE`` and
``passfile`` work too; the config's text never has to hold a password.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict

MEMORY = ":memory:"
# A statement still running after this long (waiting on a lock another replica holds, a
# server that stopped answering in mid-statement) fails, so it cannot hold a worker or a
# shutdown forever. Far above any statement's normal run (a batch's ingest takes milliseconds).
DEFAULT_STATEMENT_TIMEOUT_MS = 60_000
DEFAULT_MAX_CONNECTIONS = 4


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """The ``store`` section of server.yaml.

    ``url`` is one of the forms above (the loader resolves relative paths); ``password_file``
    a file holding the PostgreSQL password (also ``?passwordFile=`` in the URL);
    ``max_connections`` how many PostgreSQL connections (each with its worker thread) the
    store keeps at most; ``statement_timeout_ms`` how long one PostgreSQL statement may run
    (0: no bound) before it fails with a StoreError (see ``_pg_core.connect``).
    """

    url: str = "sqlite://kubesvc.db"
    password_file: str = ""
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    statement_timeout_ms: int = DEFAULT_STATEMENT_TIMEOUT_MS

    @property
    def location(self) -> StoreUrl:
        """The parsed URL (raises ValueError when it is not a store URL)."""
        return parse_store_url(self.url)

    @property
    def path(self) -> str:
        """The SQLite file (or ``:memory:``); "" for PostgreSQL."""
        location = self.location
        return location.path if location.backend == "sqlite" else ""


@dataclass(frozen=True, slots=True)
class StoreUrl:
    """A parsed store URL: ``path`` for SQLite; for PostgreSQL ``conninfo`` (the URL for
    libpq, without ``passwordFile``) and ``password_file``."""

    backend: Literal["sqlite", "postgresql"]
    path: str = ""
    conninfo: str = ""
    password_file: str = ""

    def redacted(self) -> str:
        """The location for logs and errors: never a password."""
        if self.backend == "sqlite":
            return f"sqlite://{self.path}"
        return redact(self.conninfo)


def sqlite_url(path: str) -> str:
    """The store URL of a SQLite file (or ``:memory:``)."""
    return f"sqlite://{path}"


def parse_store_url(url: str) -> StoreUrl:
    """Parse a store URL; raises ValueError saying what is wrong (without echoing a password)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"{redact(url)!r} is not a URL (expected scheme://...)")
    scheme = scheme.lower()
    if scheme == "sqlite":
        if not rest:
            raise ValueError("sqlite:// needs a path (sqlite:///abs/file.db) or :memory:")
        return StoreUrl("sqlite", path=rest)
    if scheme in ("postgresql", "postgres"):
        return _postgresql(url)
    raise ValueError(f"unknown store scheme {scheme!r}: expected sqlite or postgresql")


def _postgresql(url: str) -> StoreUrl:
    parts = urlsplit(url)
    options = parse_qsl(parts.query, keep_blank_values=True)
    password_files = [v for k, v in options if k == "passwordFile"]
    if len(password_files) > 1 or (password_files and not password_files[0]):
        raise ValueError("passwordFile must be given once, with a path")
    conninfo = url
    if password_files:
        # quote, not quote_plus: libpq does not read "+" as a space.
        kept = urlencode([(k, v) for k, v in options if k != "passwordFile"], quote_via=quote)
        conninfo = urlunsplit(parts._replace(query=kept))
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.Error as exc:
        raise ValueError(f"{redact(conninfo)} is not a valid PostgreSQL URL: {exc}") from exc
    if not params.get("dbname"):
        raise ValueError(f"{redact(conninfo)} names no database (postgresql://user@host/db)")
    return StoreUrl(
        "postgresql",
        conninfo=conninfo,
        password_file=password_files[0] if password_files else "",
    )


def redact(url: str) -> str:
    """``url`` with any password (user:password@ or ?password=) replaced by ``***``."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, _, hosts = netloc.rpartition("@")
            if ":" in userinfo:
                userinfo = userinfo.split(":", 1)[0] + ":***"
            netloc = f"{userinfo}@{hosts}"
        query = [
            (k, "***" if k == "password" else v)
            for k, v in parse_qsl(parts.query, keep_blank_values=True)
        ]
        return urlunsplit(
            parts._replace(netloc=netloc, query=urlencode(query, safe="*", quote_via=quote))
        )
    except ValueError:
        return "<an unparsable URL>"
