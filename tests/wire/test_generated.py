"""The committed betterproto code matches wire/kubesvc.proto."""

from __future__ import annotations

from pathlib import Path

import wire
from wire import regenerate


def test_generated_code_matches_the_proto(tmp_path: Path) -> None:
    written = regenerate.regenerate(tmp_path)
    assert written, "protoc wrote nothing"
    committed = regenerate.DEFAULT_OUTPUT
    fresh = {p.relative_to(tmp_path): p.read_text() for p in tmp_path.rglob("*.py")}
    current = {
        p.relative_to(committed): p.read_text()
        for p in committed.rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert sorted(fresh) == sorted(current), "generated files differ: run python -m wire.regenerate"
    for name, text in fresh.items():
        assert current[name] == text, (
            f"{name} drifted from kubesvc.proto: run python -m wire.regenerate"
        )


def test_protocol_version_is_explicit() -> None:
    assert wire.PROTOCOL_VERSION == 1
    assert wire.messages.Hello(protocol_version=wire.PROTOCOL_VERSION).protocol_version == 1
