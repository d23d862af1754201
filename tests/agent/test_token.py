"""The bearer token from clouddriver.auth: fixed, or from a command (raw or JSON), bounded."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio

from agent import ConfigError, TokenSource
from agent.config._schema import AuthConfig, TokenCommandConfig
from agent.link._token import MAX_TOKEN_OUTPUT


def _command(tmp_path: Path, body: str, *, fmt: str = "raw", refresh: int = 0) -> AuthConfig:
    script = tmp_path / "token.py"
    script.write_text(body, encoding="utf-8")
    return AuthConfig(
        token_command=TokenCommandConfig(
            command=sys.executable,
            args=(str(script),),
            format=fmt,
            refresh_interval_seconds=refresh,
        )
    )


async def test_a_fixed_token_and_no_auth() -> None:
    assert await TokenSource(AuthConfig(token="abc")).token() == "abc"
    assert await TokenSource(AuthConfig()).token() is None


async def test_raw_and_json_commands(tmp_path: Path) -> None:
    with trio.fail_after(20):
        raw = TokenSource(_command(tmp_path, "print('  tok-raw  ')"))
        assert await raw.token() == "tok-raw"
        as_json = TokenSource(_command(tmp_path, 'print(\'{"token": "tok-json"}\')', fmt="json"))
        assert await as_json.token() == "tok-json"


async def test_failures_say_what_went_wrong(tmp_path: Path) -> None:
    with trio.fail_after(20):
        with pytest.raises(ConfigError, match="exited with status 3"):
            await TokenSource(_command(tmp_path, "import sys; sys.exit(3)")).token()
        with pytest.raises(ConfigError, match="printed no token"):
            await TokenSource(_command(tmp_path, "pass")).token()
        with pytest.raises(ConfigError, match="JSON object with a string 'token'"):
            await TokenSource(_command(tmp_path, "print('nope')", fmt="json")).token()


async def test_a_huge_output_is_capped_and_a_hanging_command_times_out(tmp_path: Path) -> None:
    with trio.fail_after(30):
        big = TokenSource(_command(tmp_path, "import sys; sys.stdout.write('t' * 1_000_000)"))
        assert len(await big.token() or "") == MAX_TOKEN_OUTPUT
        hanging = _command(tmp_path, "import time; time.sleep(30)")
        with pytest.raises(ConfigError, match=r"did not finish within 0\.5 s"):
            await TokenSource(hanging, command_seconds=0.5).token()
