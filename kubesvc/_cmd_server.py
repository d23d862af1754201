"""``kubesvc server -c server.yaml``: run the Clouddriver-side server."""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
from typing import Any

import trio

import server
import server.api

from ._logging import add_log_options, chosen_format, configure_logging
from ._signals import run_role


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "server",
        help="run the server: accept agents, cache their clusters, answer Clouddriver's API",
        description="Run the server (gRPC for agents, REST for Spinnaker and operators).",
    )
    parser.add_argument(
        "-c", "--config", default=None, help="the server's config file (default: built-in defaults)"
    )
    parser.add_argument(
        "--store",
        default=None,
        metavar="URL",
        help="the store, overriding the config's store.url (its passwordFile and "
        "maxConnections still apply): sqlite:///path, sqlite://:memory: "
        "or postgresql://user@host:port/db?sslmode=...&passwordFile=/path",
    )
    add_log_options(parser)
    parser.set_defaults(func=_main)


def with_store_url(config: server.ServerConfig, url: str) -> server.ServerConfig:
    """``config`` with the store at ``url`` (``--store``; a relative SQLite path is relative
    to the current folder). Only the URL is overridden (a Deployment passes it from a
    Secret): the file's passwordFile, maxConnections and the rest still apply. Raises
    ConfigError."""
    given = server.store_config(url, pathlib.Path.cwd(), password_file=config.store.password_file)
    store = dataclasses.replace(config.store, url=given.url, password_file=given.password_file)
    return dataclasses.replace(config, store=store)


def _main(args: argparse.Namespace) -> int:
    config = server.load_server_config(args.config) if args.config else server.ServerConfig()
    if args.store:
        config = with_store_url(config, args.store)
    configure_logging(
        level=args.log_level,
        format=chosen_format(args.log_format),
        context=(server.log_context,),
    )

    async def main() -> int:
        return await run_role(
            "server",
            lambda stop: server.run_server(config, serve_api=server.api.serve_api, stop=stop),
        )

    code: int = trio.run(main)
    return code
