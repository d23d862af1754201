"""``kubesvc demo``: see kubesvc work in one command, with no cluster and no Docker.

kubesvc demo                      # until Ctrl-C
kubesvc demo --duration 20        # unattended: ends with a summary, exit code 0
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

import trio

from ._demo import DemoOptions, run_demo
from ._demo_view import Display, summary_lines
from ._logging import configure_logging


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run kubesim, the server and an agent (mTLS + JWT) together and show them working",
        description=(
            "Start a simulated cluster with a realistic workload and churn, the server on a "
            "SQLite file and an agent connected over mTLS with a JWT (all generated on the fly), "
            "show the initial sync and a live status line, and run a sample deploy through "
            "POST /kubernetes/ops. Ctrl-C stops it."
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
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    if args.duration is not None and args.duration <= 0:
        raise ValueError(f"--duration must be positive, got {args.duration}")
    if args.pods < 0 or args.churn < 0:
        raise ValueError("--pods and --churn must not be negative")
    level = args.log_level.upper()
    configure_logging(level=level)
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
