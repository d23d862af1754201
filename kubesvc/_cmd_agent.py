"""``kubesvc agent -c kubesvc.yaml``: run the agent."""

from __future__ import annotations

import argparse
import logging
from typing import Any

import trio

import agent

from ._logging import add_log_options, chosen_format, configure_logging
from ._signals import run_role


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "agent",
        help="run the agent: watch the configured clusters and stream them to the server",
        description="Run the agent. The config file is reloaded live when it changes.",
    )
    parser.add_argument(
        "-c",
        "--config",
        default=None,
        help="the agent's config file (default: $KUBESVC_CONFIG, else kubesvc.yaml)",
    )
    add_log_options(parser, level=None)
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    path = args.config or agent.default_config_path()
    config = agent.load_config(path)  # fail here, before any task, with the file's own error
    logs = config.logging
    configure_logging(
        level=args.log_level or logs.level,
        format=chosen_format(args.log_format, logs.format),
        file=logs.file,
        fields=dict(logs.fields),
        context=(agent.log_context,),
    )
    logging.getLogger("kubesvc").info("agent starting with %s", path)

    async def main() -> int:
        # The whole process is paced when quiet, the bridge's loop included (agent/_pacing.py).
        with agent.idle_pacing(config.idle.coalesce_ms / 1000):
            return await run_role("agent", lambda stop: agent.run_agent(path, stop=stop))

    code: int = trio.run(main)
    return code
