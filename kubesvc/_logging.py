"""Logging for every kubesvc process: text or JSON lines on stderr (or a file).

Every record passes :class:`ContextFilter`, which adds what the writing task is about
(``account``, ``agent``, ``replica``), read from the packages' context variables
(agent/_log_context.py, server/_log_context.py): the composition root hands their
``log_context`` functions in, so neither package knows of the other or of this module.

- **text** (the default): ``time LEVEL logger [account]: message``; the ``[account]`` is
  left out when the message names the account already ("account prod-1: ...").
- **json**: one object per line with ``time`` (RFC 3339, UTC, milliseconds), ``level``,
  ``logger``, ``message``, the context fields, the operator's fixed ``fields``
  (``logging.fields`` in the agent's config) and, for a record with an exception, the
  traceback as ``exception``; so a log pipeline can index and filter on them.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = [
    "CONTEXT_FIELDS",
    "FORMATS",
    "LOG_FORMAT_ENV",
    "ContextFilter",
    "JsonFormatter",
    "TextFormatter",
    "add_log_options",
    "chosen_format",
    "configure_logging",
    "default_log_format",
    "failure_line",
]

#: The per-task context a record may carry (an attribute of the record each).
CONTEXT_FIELDS = ("account", "agent", "replica")
FORMATS = ("text", "json")
#: The environment variable that picks the format when no ``--log-format`` is given.
LOG_FORMAT_ENV = "KUBESVC_LOG_FORMAT"

ContextProvider = Callable[[], Mapping[str, str]]

_format: str | None = None  # what configure_logging chose last (failure_line follows it)


def default_log_format(environ: Mapping[str, str] = os.environ) -> str | None:
    """``$KUBESVC_LOG_FORMAT`` when it names a format, else None (the next source decides).
    Raises ValueError for another value: a typo must not silently give the other format."""
    value = environ.get(LOG_FORMAT_ENV, "").strip().lower()
    if not value:
        return None
    if value not in FORMATS:
        raise ValueError(f"${LOG_FORMAT_ENV} must be one of {', '.join(FORMATS)}, got {value!r}")
    return value


class ContextFilter(logging.Filter):
    """Adds the writing task's context to every record (never drops one).

    A field given explicitly (``log.info(..., extra={"account": name})``) wins over the
    context's.
    """

    def __init__(self, providers: Iterable[ContextProvider] = ()) -> None:
        super().__init__()
        self._providers = tuple(providers)

    def filter(self, record: logging.LogRecord) -> bool:
        for provider in self._providers:
            for key, value in provider().items():
                if not getattr(record, key, None):
                    setattr(record, key, value)
        return True


def names_account(record: logging.LogRecord, account: str) -> bool:
    """Whether the record's message names ``account`` already: as one of its arguments, or
    as ``account <name>`` in its text."""
    if isinstance(record.args, tuple) and account in record.args:
        return True
    pattern = rf"account {re.escape(account)}(?![\w.-])"
    return re.search(pattern, record.getMessage()) is not None


class TextFormatter(logging.Formatter):
    """``time LEVEL logger [account]: message`` (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s%(kubesvc_about)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        account = getattr(record, "account", "")
        about = f" [{account}]" if account and not names_account(record, account) else ""
        record.kubesvc_about = about
        return super().formatMessage(record)


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring)."""

    def __init__(self, fields: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self._fields = dict(fields or {})

    def format(self, record: logging.LogRecord) -> str:
        # The operator's fixed fields first: they may add, never replace, what we write.
        line: dict[str, str] = dict(self._fields)
        line["time"] = _rfc3339(record.created)
        line["level"] = record.levelname.lower()
        line["logger"] = record.name
        line["message"] = record.getMessage()
        for key in CONTEXT_FIELDS:
            value = getattr(record, key, None)
            if value:
                line[key] = str(value)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False)


def _rfc3339(created: float) -> str:
    moment = datetime.datetime.fromtimestamp(created, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def configure_logging(
    *,
    level: str = "INFO",
    format: str = "text",
    file: str | None = None,
    fields: Mapping[str, str] | None = None,
    context: Iterable[ContextProvider] = (),
) -> None:
    """Route every logger to one handler with the chosen format; idempotent.

    ``context`` are the packages' ``log_context`` functions (what the writing task is about).
    Raises ValueError for an unknown format.
    """
    if format not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {format!r}")
    handler: logging.Handler = (
        logging.FileHandler(file) if file else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(JsonFormatter(fields) if format == "json" else TextFormatter())
    handler.addFilter(ContextFilter(context))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # Python's warnings are lines on stderr too: in the chosen format, with the rest.
    logging.captureWarnings(True)
    global _format
    _format = format
    # Libraries below us are chatty at INFO; their warnings still show.
    for name in ("hpack", "h2", "httpx", "httpcore", "hypercorn.access", "grpclib"):
        logging.getLogger(name).setLevel(logging.WARNING)


def add_log_options(parser: Any, *, level: str | None = "INFO") -> None:
    """``--log-level`` and ``--log-format`` for a command's parser. The format defaults to
    ``$KUBESVC_LOG_FORMAT`` (read when the command runs, see :func:`chosen_format`); a
    ``level`` of None leaves the level to the command's config file."""
    parser.add_argument(
        "--log-level",
        default=level,
        help="DEBUG, INFO, WARNING or ERROR"
        + (f" (default: {level})" if level else " (default: the config file's logging.level)"),
    )
    fallback = "the config file's logging.format" if level is None else "text"
    parser.add_argument(
        "--log-format",
        default=None,
        choices=FORMATS,
        help="text lines, or one JSON object per line for log pipelines (default: "
        f"${LOG_FORMAT_ENV}, else {fallback})",
    )


def chosen_format(given: str | None, configured: str = "text") -> str:
    """The log format: ``--log-format``, else ``$KUBESVC_LOG_FORMAT``, else ``configured``.
    Raises ValueError for a bad environment value."""
    return given or default_log_format() or configured


def failure_line(text: str, given: str | None = None) -> str:
    """The CLI's last word on a failure (``kubesvc: error: ...``), in the configured format
    (or, when it failed before logging was set up, ``given`` (``--log-format``), else the
    environment's): with ``json``, one more JSON line, so a pipeline reading stderr sees why
    it ended."""
    chosen = _format
    if chosen is None:
        try:
            chosen = chosen_format(given)
        except ValueError:
            chosen = "text"
    if chosen != "json":
        return f"kubesvc: error: {text}"
    record = logging.LogRecord("kubesvc", logging.CRITICAL, __file__, 0, text, None, None)
    return JsonFormatter().format(record)
