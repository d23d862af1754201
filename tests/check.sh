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
echo "== pytest";        "$venv/bin/python" -m pytest "$@"
