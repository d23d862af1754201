"""server.yaml inputs that raised something other than ConfigError (found by
tests/test_fuzz_inputs.py): deep nesting, bytes that are not UTF-8, an endless file."""

from __future__ import annotations

from pathlib import Path

import pytest

from server import ConfigError, load_server_config
from server._config import MAX_CONFIG_BYTES, MAX_YAML_DEPTH


def write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "server.yaml"
    path.write_bytes(data)
    return path


def test_nesting_too_deep_is_a_config_error_with_its_place(tmp_path: Path) -> None:
    path = write(tmp_path, b"grpc: " + b"[" * 5000 + b"]" * 5000)
    with pytest.raises(ConfigError) as caught:
        load_server_config(path)
    assert caught.value.path == f"line 1, column {7 + MAX_YAML_DEPTH - 1}"
    assert caught.value.expected == (
        f"invalid YAML: the document nests deeper than {MAX_YAML_DEPTH} levels"
    )


def test_bytes_that_are_not_utf8_are_a_config_error_naming_the_position(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"(?s)invalid YAML: .*#x00ff.*position 13"):
        load_server_config(write(tmp_path, b"serverId: caf\xff"))


def test_a_secret_file_that_is_not_text_is_a_config_error_naming_the_key(tmp_path: Path) -> None:
    (tmp_path / "secret").write_bytes(b"\x00\xff\xfe")
    path = write(tmp_path, b"grpc: {auth: {jwt: {enabled: true, secretFile: secret}}}")
    with pytest.raises(ConfigError) as caught:
        load_server_config(path)
    assert caught.value.path == "grpc.auth.jwt.secretFile"
    assert "cannot read" in caught.value.expected


def test_an_endless_file_is_read_up_to_the_limit_only() -> None:
    with pytest.raises(ConfigError, match=f"larger than {MAX_CONFIG_BYTES} bytes"):
        load_server_config("/dev/zero")
