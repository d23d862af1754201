"""docs/protocol.md §11.4 names every operation type the server sends and the agent runs."""

from __future__ import annotations

import re
from pathlib import Path

from agent.operations import OPERATIONS as AGENT_OPERATIONS
from server.ops import OPERATIONS as SERVER_OPERATIONS

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"


def documented_types() -> set[str]:
    text = DOC.read_text()
    section = text.split("### 11.4 ", 1)[1].split("\n### ", 1)[0]
    types: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            first_cell = line.split("|")[1]
            types.update(re.findall(r"`(\w+)`", first_cell))
    return types


def test_every_operation_type_is_in_the_table() -> None:
    documented = documented_types()
    assert set(SERVER_OPERATIONS) <= documented
    assert set(AGENT_OPERATIONS) <= documented
    assert {"disableManifest", "enableManifest"} <= documented
