"""What the agent's log lines are about: the account (and the agent), in context variables.

Every log line about an account must name it, and there are many lines (the Kubernetes
client's, the reflectors', the operations') written far from where the account is known.
So the account is not passed down to each call: it is set once, in a context variable, where
an account's tasks start (its client, its watches, an operation on it). trio gives every
task a copy of the context of the task that spawned it, so whatever an account's tasks start
inherits the name, and a task of another account never sees it. The composition root's
logging filter reads :func:`log_context` into every record (kubesvc/_logging.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["account_logs", "agent_logs", "log_context"]

_ACCOUNT: ContextVar[str] = ContextVar("kubesvc_agent_account", default="")
_AGENT: ContextVar[str] = ContextVar("kubesvc_agent_id", default="")


@contextmanager
def account_logs(name: str) -> Iterator[None]:
    """Log lines written inside (and by tasks started inside) are about account ``name``."""
    token = _ACCOUNT.set(name)
    try:
        yield
    finally:
        _ACCOUNT.reset(token)


@contextmanager
def agent_logs(agent_id: str) -> Iterator[None]:
    """Log lines written inside (and by tasks started inside) come from agent ``agent_id``."""
    token = _AGENT.set(agent_id)
    try:
        yield
    finally:
        _AGENT.reset(token)


def log_context() -> dict[str, str]:
    """The context of the calling task: ``account`` and ``agent`` where known."""
    context = {}
    if account := _ACCOUNT.get():
        context["account"] = account
    if agent := _AGENT.get():
        context["agent"] = agent
    return context
