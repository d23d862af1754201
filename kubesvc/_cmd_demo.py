"""``kubesvc demo``: see kubesvc work in one command, with no cluster and no Docker.

kubesvc demo                      # until Ctrl-C
kubesvc demo --duration 20        # unattended: ends with a summary, exit code 0
kubesvc demo --replicas 2         # two server processes on a PostgreSQL started for it
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

import trio

import agent
import server
from server.store import parse_store_url

from ._demo import DemoOptions, run_demo
from ._demo_view import Display, summary_lines
from ._logging import FORMATS, LOG_FORMAT_ENV, chosen_format, configure_logging

_MAX_REPLICAS = 9


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run kubesim, the server and an agent (mTLS + JWT) together and show them working",
        description=(
            "Start a simulated cluster with a realistic workload and churn, the server on a "
            "SQLite file and an agent connected over mTLS with a JWT (all generated on the fly), "
            "show the initial sync and a live status line, and run a sample deploy through "
            "POST /kubernetes/ops. With --replicas 2 the server runs as two processes on "
            "PostgreSQL (started for the demo from its binaries, or --store), the agent knows "
            "both, and killing one shows the agent and the PRIMARY moving to the other. "
            "Ctrl-C (or SIGTERM) stops everything it started."
        ),
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop after this many seconds and print a summary",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="keep the certificates, configs and SQLite file here "
        "(default: a temporary folder, removed at the end)",
    )
    parser.add_argument(
        "--api-port",
        type=int,
        default=7002,
        help="REST API port (default: %(default)s; a free one if taken)",
    )
    parser.add_argument(
        "--grpc-port",
        type=int,
        default=9091,
        help="gRPC port (default: %(default)s; a free one if taken)",
    )
    parser.add_argument(
        "--replicas",
        type=int,
        default=1,
        metavar="N",
        help="server replicas (default: %(default)s, in this process on SQLite); 2 or more run "
        "as separate processes on PostgreSQL, REST and gRPC ports counting up from "
        "--api-port and --grpc-port",
    )
    parser.add_argument(
        "--store",
        default=None,
        metavar="URL",
        help="the server's store: with --replicas 2 or more an existing PostgreSQL "
        "(postgresql://user@host:port/db; default: one started for the demo from the "
        "PostgreSQL binaries found here, stopped at the end); with one replica any store URL "
        "(default: SQLite in the data folder)",
    )
    parser.add_argument(
        "--pods", type=int, default=1000, help="bulk pods to load (default: %(default)s)"
    )
    parser.add_argument(
        "--churn",
        type=float,
        default=20.0,
        help="changes per second made in the cluster (default: %(default)s)",
    )
    parser.add_argument(
        "--log-level",
        default="ERROR",
        help="log level of the parts (default: %(default)s, to keep the status line readable)",
    )
    parser.add_argument(
        "--log-format",
        default=None,
        choices=FORMATS,
        help=f"the parts' log lines on stderr: text, or one JSON object per line (default: "
        f"${LOG_FORMAT_ENV}, else text)",
    )
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    if args.duration is not None and args.duration <= 0:
        raise ValueError(f"--duration must be positive, got {args.duration}")
    if args.pods < 0 or args.churn < 0:
        raise ValueError("--pods and --churn must not be negative")
    if not 1 <= args.replicas <= _MAX_REPLICAS:
        raise ValueError(f"--replicas must be 1..{_MAX_REPLICAS}, got {args.replicas}")
    if args.store is not None:
        try:
            backend = parse_store_url(args.store).backend
        except ValueError as exc:
            raise ValueError(f"--store: {exc}") from exc
        if args.replicas > 1 and backend != "postgresql":
            raise ValueError(
                "--replicas 2 or more need a store they share: --store postgresql://... "
                "(or leave --store out to start a PostgreSQL for the demo)"
            )
    level = args.log_level.upper()
    configure_logging(
        level=level,
        format=chosen_format(args.log_format),
        context=(agent.log_context, server.log_context),
    )
    # Hypercorn (kubesim's and the REST API's HTTP server) gives its logger its own handler
    # at INFO when it starts; a filter on the logger itself survives that and keeps
    # "Running on ..." lines out of the demo's screen.
    threshold = logging.getLevelName(level)
    logging.getLogger("hypercorn.error").addFilter(lambda record: record.levelno >= threshold)
    options = DemoOptions(
        duration=args.duration,
        data_dir=args.data_dir,
        api_port=args.api_port,
        grpc_port=args.grpc_port,
        pods=args.pods,
        churn_rate=args.churn,
        replicas=args.replicas,
        store_url=args.store or "",
    )
    display = Display(sys.stdout, tty=sys.stdout.isatty())
    summary = trio.run(run_demo, options, display)
    display.line("")
    display.lines(summary_lines(summary))
    if not summary.synced:
        return 1
    if summary.deploy is not None and summary.deploy.status == "failed":
        return 1
    return 0
