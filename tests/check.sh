#!/usr/bin/env bash
# The one test command (README, .ci/run): make the environment, install, run every gate and test.
# Usage: bash tests/check.sh [extra pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${KUBESVC_VENV:-.venv}"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[test]'
echo "== ruff";          "$venv/bin/ruff" check . && "$venv/bin/ruff" format --check .
echo "== mypy --strict"; "$venv/bin/mypy" agent wire budget server kubesim kubesvc manifests tests
echo "== import-linter"; "$venv/bin/lint-imports"
echo "== PostgreSQL server binaries (the store tests start their own server)"
have_pg() { "$venv/bin/python" -m kubesvc._postgres >/dev/null 2>&1; }
if ! have_pg && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    # Debian's server package: initdb/pg_ctl land in /usr/lib/postgresql/<version>/bin.
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql \
        >/dev/null; } || echo "apt-get could not install postgresql"
fi
if ! have_pg; then
    # Not root, or no apt: a PyPI wheel that ships the server binaries.
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check pgserver \
        || echo "pip could not install pgserver"
fi
"$venv/bin/python" -m kubesvc._postgres \
    || echo "the PostgreSQL store tests will be SKIPPED (the reason is above and in pytest's summary)"
echo "== Chromium (the status page's tests drive a real headless browser)"
# Debian's browser and its WebDriver: no browser download at install time can work here (no
# network but the package registries), so the tests use these, never a bundled build.
have_browser() { [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; }
if ! have_browser && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium \
        chromium-driver >/dev/null; } || echo "apt-get could not install chromium"
fi
have_browser || echo "the browser tests will be SKIPPED (no /usr/bin/chromium and /usr/bin/chromedriver)"
# Two workers (pytest-xdist): the suite waits more than it computes (~500 s of CPU in ~730 s
# on 2 cores, one process), so two test processes fit the machine's two cores.
# KUBESVC_TEST_WORKERS=0 runs it in one process.
workers="${KUBESVC_TEST_WORKERS:-2}"
echo "== pytest";        "$venv/bin/python" -m pytest -n "$workers" --dist worksteal "$@"
