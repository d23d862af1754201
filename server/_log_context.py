"""What the server's log lines are about: the replica, and the account where one is known.

Set once where the work starts (the replica in ``run_server``, the account where an
operation is run for it) rather than passed to every log call; trio gives every task a copy
of the context of the task that spawned it. The composition root's logging filter reads
:func:`log_context` into every record (kubesvc/_logging.py). The agent has its own twin
(agent/_log_context.py): the two packages never import each other.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["account_logs", "log_context", "replica_logs"]

_ACCOUNT: ContextVar[str] = ContextVar("kubesvc_server_account", default="")
_REPLICA: ContextVar[str] = ContextVar("kubesvc_server_replica", default="")


@contextmanager
def account_logs(name: str) -> Iterator[None]:
    """Log lines written inside (and by tasks started inside) are about account ``name``."""
    token = _ACCOUNT.set(name)
    try:
        yield
    finally:
        _ACCOUNT.reset(token)


@contextmanager
def replica_logs(replica_id: str) -> Iterator[None]:
    """Log lines written inside (and by tasks started inside) come from replica ``replica_id``."""
    token = _REPLICA.set(replica_id)
    try:
        yield
    finally:
        _REPLICA.reset(token)


def log_context() -> dict[str, str]:
    """The context of the calling task: ``account`` and ``replica`` where known."""
    context = {}
    if account := _ACCOUNT.get():
        context["account"] = account
    if replica := _REPLICA.get():
        context["replica"] = replica
    return context
