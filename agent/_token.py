"""The bearer token the agent presents to the server (``clouddriver.auth``).

Either a fixed ``token`` or a ``tokenCommand`` whose output is the token (``format: raw``) or a
JSON object ``{"token": ...}`` (``format: json``), re-run every ``refreshIntervalSeconds``
(0: once). The token is never logged.
"""

from __future__ import annotations

import json

import trio

from ._config_schema import AuthConfig
from ._errors import ConfigError

# A token command that prints more than this is broken; do not hold its output.
MAX_TOKEN_OUTPUT = 64 * 1024


class TokenSource:
    """Gives the current bearer token, running ``tokenCommand`` when its result is stale."""

    def __init__(self, auth: AuthConfig) -> None:
        self._auth = auth
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
            done = await trio.run_process(
                [command.command, *command.args], capture_stdout=True, capture_stderr=True,
                check=False,
            )
        except OSError as exc:
            raise ConfigError(f"cannot run {command.command!r}: {exc}", path=where) from exc
        if done.returncode != 0:
            raise ConfigError(
                f"{command.command!r} exited with status {done.returncode}", path=where
            )
        output = done.stdout[:MAX_TOKEN_OUTPUT].decode("utf-8", "replace").strip()
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
