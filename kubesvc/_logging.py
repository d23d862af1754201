"""Logging for every kubesvc process: text or JSON lines on stderr (or a file).

JSON lines carry ``time``, ``level``, ``logger``, ``message`` and any fixed ``fields`` the
operator configured (``logging.fields``), so log pipelines can index them.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping


class _JsonFormatter(logging.Formatter):
    def __init__(self, fields: Mapping[str, str]) -> None:
        super().__init__()
        self._fields = dict(fields)

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **self._fields,
        }
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line)


def configure_logging(
    *,
    level: str = "INFO",
    format: str = "text",
    file: str | None = None,
    fields: Mapping[str, str] | None = None,
) -> None:
    """Route every logger to one handler with the chosen format; idempotent."""
    handler: logging.Handler = (
        logging.FileHandler(file) if file else logging.StreamHandler(sys.stderr)
    )
    if format == "json":
        handler.setFormatter(_JsonFormatter(fields or {}))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # Libraries below us are chatty at INFO; their warnings still show.
    for name in ("hpack", "h2", "httpx", "httpcore", "hypercorn.access", "grpclib"):
        logging.getLogger(name).setLevel(logging.WARNING)
