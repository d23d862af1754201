"""Shared pytest configuration. Fixtures that open real servers live beside their tests.

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
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

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
