"""README.md: its command blocks run, its set-up is the two commands, and its option table is
the schema's (complete, with the loader's own names and defaults).

Blocks are ```sh fences, each preceded by a `<!-- readme-test: run -->` or
`<!-- readme-test: skip: why -->` comment. The "run" blocks run here, in order, in one scratch
folder, with this venv's `kubesvc` first on PATH. The two set-up commands are skipped: they
create a venv and pip-install (minutes, and network), the demo they end with is run by
test_demo.py, and CI runs `bash tests/check.sh` itself.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import agent
from kubesvc._config_doc import markdown_table, option_rows

from .._procs import run

README = Path(__file__).resolve().parents[2] / "README.md"
_FENCE = re.compile(
    r"(?:<!-- readme-test: (?P<tag>run|skip: [^>]+) -->\n)?```(?P<lang>\w*)\n(?P<body>.*?)```",
    re.S,
)
SETUP = [
    "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/kubesvc demo",
    "bash tests/check.sh",
]


def _blocks() -> list[tuple[str | None, str, str]]:
    return [(m["tag"], m["lang"], m["body"]) for m in _FENCE.finditer(README.read_text())]


def test_every_shell_block_says_whether_it_runs_here() -> None:
    shell = [(tag, body) for tag, lang, body in _blocks() if lang in ("sh", "bash", "shell")]
    assert shell
    for tag, body in shell:
        assert tag is not None, f"README block without a readme-test tag:\n{body}"


def test_the_set_up_section_is_the_two_commands() -> None:
    text = README.read_text()
    section = text[text.index("## Set up") : text.index("\n## ", text.index("## Set up") + 1)]
    commands = [
        body.strip()
        for _, lang, body in ((m["tag"], m["lang"], m["body"]) for m in _FENCE.finditer(section))
        if lang == "sh"
    ]
    assert commands == SETUP


@pytest.mark.timeout(300)  # a few blocks, each bounded at 120 s
def test_the_runnable_blocks_run(tmp_path: Path) -> None:
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    runnable = [body for tag, lang, body in _blocks() if tag == "run"]
    assert len(runnable) >= 2
    for body in runnable:
        done = run(["bash", "-euo", "pipefail", "-c", body], cwd=tmp_path, env=env, timeout=120)
        assert done.returncode == 0, f"README block failed:\n{body}\n{done.stdout}{done.stderr}"
    # What the trust-material block promised exists.
    assert (tmp_path / "certs" / "agent-prod-west.key").exists()
    assert (tmp_path / "prod-east.token").read_text().count(".") == 2  # a JWT


def test_the_option_table_is_the_generated_one() -> None:
    text = README.read_text()
    begin, end = "<!-- options:begin -->\n", "<!-- options:end -->"
    table = text[text.index(begin) + len(begin) : text.index(end)]
    assert table == markdown_table(), "regenerate it: python -m kubesvc._config_doc"


# Options that cannot all be given at once (one credential source per account), or whose
# placeholder must be a valid choice.
_LEFT_OUT = {
    "kubernetes.accounts[].kubeconfigContents",
    "kubernetes.accounts[].context",
    "kubernetes.accounts[].kubeConfigFile",
    # A shard says the account's kinds and namespaces itself (tests/agent/test_config_shard.py).
    "kubernetes.accounts[].shard.name",
    "kubernetes.accounts[].shard.kinds",
    "kubernetes.accounts[].shard.omitKinds",
    "kubernetes.accounts[].shard.namespaces",
}
_PLACEHOLDERS = {"(required)": "x", "": "x"}
_CHOICES = {
    "enabled": "allowed",
    "clearManagedFields": "allowed",
    "manifestDefaults": "allowed",
    "kind": "Rollout.argoproj.io",
}


def _set(tree: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    for part in parts[:-1]:
        if part.endswith("[]"):
            items = tree.setdefault(part[:-2], [{}])
            tree = items[0]
        else:
            tree = tree.setdefault(part, {})
    tree[parts[-1]] = value


def test_every_option_in_the_table_is_one_the_loader_reads() -> None:
    config: dict[str, Any] = {}
    for row in option_rows():
        if row.path in _LEFT_OUT:
            continue
        last = row.path.rsplit(".", 1)[-1]
        if row.default in _PLACEHOLDERS:
            value: Any = _CHOICES.get(last, _PLACEHOLDERS[row.default])
            if "[]." in row.path and last in _CHOICES:
                value = _CHOICES[last]
        else:
            value = yaml.safe_load(row.default)
        _set(config, row.path, value)
    config["kubernetes"]["serverSideApply"]["kinds"][0]["kind"] = "Deployment"
    config["clouddriver"]["tls"]["clientKeyFilePassword"] = None
    config["server"]["ssl"]["enabled"] = False
    loaded = agent.parse_config(yaml.safe_dump(config), source="README table")
    assert loaded.ignored_options == ()
    # The table's defaults, read back by the loader, are the schema's defaults (the sections
    # without placeholders compare whole).
    default = agent.Config()
    assert loaded.budget == default.budget
    assert loaded.tasks == default.tasks
    assert loaded.prometheus == default.prometheus
    assert loaded.timeout_seconds == default.timeout_seconds
    assert loaded.kubernetes.retries == default.kubernetes.retries
    assert loaded.clouddriver.backoff == default.clouddriver.backoff
    assert loaded.clouddriver.response_retries == default.clouddriver.response_retries


def test_relative_links_in_the_readme_and_docs_resolve() -> None:
    pages = [README, *sorted((README.parent / "docs").glob("*.md"))]
    assert len(pages) > 1
    for page in pages:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).exists(), (page.name, target)
