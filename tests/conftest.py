"""Shared pytest configuration. Fixtures that open real servers live beside their tests, but
for the throwaway PostgreSQL server, which the store suite and the e2e replica tests share.

Hypothesis profiles (chosen by the environment variable ``HYPOTHESIS_PROFILE``):

- ``deterministic`` (the default, what ``bash tests/check.sh`` and CI run): derandomized, so
  every run draws the same examples and a red run is red again on any machine; no deadline
  and no "too slow" health check, because the machine is shared and timings mean nothing
  there; no example database (no ``.hypothesis`` folder in the tree); a failure prints the
  blob that reproduces it (``@reproduce_failure``).
- ``explore``: random seeds and many more examples, to look for new counterexamples by hand:
  ``HYPOTHESIS_PROFILE=explore .venv/bin/python -m pytest tests/budget tests/wire``. A
  counterexample it finds becomes an explicit test (an ``@example`` or a plain test), so the
  default run keeps it.

Tests do not set ``derandomize``, ``deadline`` or ``database`` themselves: the profile owns them.

Deadlines: every test has one, so a hang fails that one test, with its name, and the run goes
on. pytest-timeout (``timeout`` in pyproject.toml, method ``signal``) bounds every test in real
time; a test that needs longer says so with ``@pytest.mark.timeout(seconds)``. Inside that,
every trio test runs under a ``trio.fail_after`` set here, at 80 % of its timeout, so a stuck
await ends as ``trio.TooSlowError`` with the stuck task's traceback and the test's nurseries
and subprocesses are cancelled and cleaned up in order, before the signal would have to cut in.
Under a ``MockClock`` that deadline is virtual time, so ``autojump_clock`` turns a deadlock
into an immediate failure; the virtual bound is a day, for tests that jump long timers. (An
autojump test that waits for a worker thread with no earlier deadline of its own would jump
to that day: such a test sets a small ``autojump_threshold``, as test_registry_service does.)
"""

from __future__ import annotations

import functools
import os
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, settings

from kubesvc._postgres import NoPostgres, TempPostgres, temp_postgres

settings.register_profile(
    "deterministic",
    derandomize=True,
    max_examples=100,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "explore",
    derandomize=False,
    max_examples=2000,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))


VIRTUAL_DEADLINE = 24 * 3600.0
"""The trio deadline of a test on a ``MockClock``, in virtual seconds."""


def _run_within(
    seconds: float,
    afn: Callable[[], Awaitable[Any]],
    *,
    clock: trio.abc.Clock | None = None,
    instruments: Sequence[trio.abc.Instrument] = (),
) -> Any:
    """``trio.run`` with the whole test (its trio fixtures too) inside one ``fail_after``."""

    async def bounded() -> Any:
        virtual = isinstance(clock, trio.testing.MockClock)
        with trio.fail_after(VIRTUAL_DEADLINE if virtual else seconds):
            return await afn()

    return trio.run(bounded, clock=clock, instruments=instruments)


@pytest.hookimpl(trylast=True)  # after pytest-trio has marked the async tests
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    default = float(config.getini("timeout") or 0)
    for item in items:
        if item.get_closest_marker("trio") is None:
            continue
        # pytest-trio's trio_mode marks each async test with run=trio.run; another runner is
        # a test's own choice and stays.
        if any(m.kwargs.get("run", trio.run) is not trio.run for m in item.iter_markers("trio")):
            continue
        marker = item.get_closest_marker("timeout")
        timeout = float(marker.args[0]) if marker and marker.args else default
        run = functools.partial(_run_within, 0.8 * timeout if timeout > 0 else VIRTUAL_DEADLINE)
        item.add_marker(pytest.mark.trio(run=run), append=False)


_postgres_skipped_because: list[str] = []


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[TempPostgres]:
    """The session's throwaway PostgreSQL server (kubesvc/_postgres.py: initdb into a
    temporary folder, a unix socket in it, stopped and removed at the end), for the store
    suite and the replica tests; skips, saying why, where none can be started. The reason
    is repeated in the summary at the end of the run: never a silent skip."""
    try:
        with temp_postgres() as server:
            yield server
    except NoPostgres as exc:
        _postgres_skipped_because.append(str(exc))
        pytest.skip(f"PostgreSQL tests skipped: {exc}")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    # The reasons come from this process's fixture, or, with pytest-xdist, from the workers'
    # skip reports (the fixture ran there).
    reasons = list(_postgres_skipped_because)
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = getattr(report, "longrepr", None)
        if isinstance(longrepr, tuple) and "PostgreSQL tests skipped: " in str(longrepr[2]):
            reasons.append(str(longrepr[2]).split("PostgreSQL tests skipped: ", 1)[1])
    for reason in dict.fromkeys(reasons):
        terminalreporter.write_line(f"PostgreSQL tests SKIPPED: {reason}", yellow=True, bold=True)
    # The status page's browser tests skip where Debian's chromium is missing: said here too.
    from tests.e2e.browser import browser_missing

    skipped = terminalreporter.stats.get("skipped", [])
    if browser_missing() and any("status_page" in r.nodeid for r in skipped):
        terminalreporter.write_line(
            f"Browser tests SKIPPED: {browser_missing()}", yellow=True, bold=True
        )
