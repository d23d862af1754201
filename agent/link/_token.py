"""The bearer token the agent presents to the server (``clouddriver.auth``).

Either a fixed ``token`` or a ``tokenCommand`` whose output is the token (``format: raw``) or a
JSON object ``{"token": ...}`` (``format: json``), re-run every ``refreshIntervalSeconds``
(0: once). The token is never logged.
"""

from __future__ import annotations

import functools
import json
import subprocess

import trio

from .._errors import ConfigError
from ..config import AuthConfig

# A token command that prints more than this is broken; do not hold its output.
MAX_TOKEN_OUTPUT = 64 * 1024
# A token command that hangs must not hold the link's reconnect for ever.
TOKEN_COMMAND_SECONDS = 30.0


class TokenSource:
    """Gives the current bearer token, running ``tokenCommand`` when its result is stale."""

    def __init__(self, auth: AuthConfig, *, command_seconds: float = TOKEN_COMMAND_SECONDS) -> None:
        self._auth = auth
        self._command_seconds = command_seconds
        self._cached: str | None = None
        self._fetched_at: float | None = None

    async def token(self) -> str | None:
        """The token to send, or None when no auth is configured.

        Raises ConfigError when the command fails or prints something that is not a token.
        """
        command = self._auth.token_command
        if command is None:
            return self._auth.token
        now = trio.current_time()
        fresh = self._fetched_at is not None and (
            command.refresh_interval_seconds <= 0
            or now - self._fetched_at < command.refresh_interval_seconds
        )
        if fresh and self._cached is not None:
            return self._cached
        self._cached = await self._run_command()
        self._fetched_at = now
        return self._cached

    async def _run_command(self) -> str:
        command = self._auth.token_command
        assert command is not None
        where = "clouddriver.auth.tokenCommand"
        try:
            with trio.fail_after(self._command_seconds):
                returncode, raw = await _run_bounded([command.command, *command.args])
        except OSError as exc:
            raise ConfigError(f"cannot run {command.command!r}: {exc}", path=where) from exc
        except trio.TooSlowError as exc:
            raise ConfigError(
                f"{command.command!r} did not finish within {self._command_seconds:g} s",
                path=where,
            ) from exc
        if returncode != 0:
            raise ConfigError(f"{command.command!r} exited with status {returncode}", path=where)
        output = raw.decode("utf-8", "replace").strip()
        if command.format == "json":
            try:
                token = json.loads(output)["token"]
            except (ValueError, KeyError, TypeError) as exc:
                raise ConfigError(
                    f"{command.command!r} did not print a JSON object with a string 'token'",
                    path=where,
                ) from exc
            if not isinstance(token, str):
                raise ConfigError(f"{command.command!r} printed a non-string 'token'", path=where)
            output = token.strip()
        if not output:
            raise ConfigError(f"{command.command!r} printed no token", path=where)
        return output


async def _run_bounded(argv: list[str]) -> tuple[int, bytes]:
    """Run ``argv``; its exit status and at most MAX_TOKEN_OUTPUT bytes of its stdout.

    Output past the cap is read and discarded so the command is not blocked on a full pipe.
    The process is killed if the caller is cancelled (trio's process semantics).
    """
    kept = bytearray()
    async with trio.open_nursery() as nursery:
        process: trio.Process = await nursery.start(
            functools.partial(
                trio.run_process,
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                check=False,
            )
        )
        assert process.stdout is not None
        while chunk := await process.stdout.receive_some(16 * 1024):
            room = MAX_TOKEN_OUTPUT - len(kept)
            if room > 0:
                kept += chunk[:room]
    return process.returncode or 0, bytes(kept)
