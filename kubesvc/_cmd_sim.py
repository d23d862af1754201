"""``kubesvc sim``: run kubesim, the simulated Kubernetes API server, for trying the agent
without a cluster.

    kubesvc sim --port 6443 --tls --kubeconfig sim.kubeconfig --objects 1000 --churn 20
"""

from __future__ import annotations

import argparse
import gc
import math
import sys
import time
from pathlib import Path
from typing import Any

import trio

import kubesim

from ._logging import add_log_options, chosen_format, configure_logging


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "sim",
        help="run a simulated Kubernetes API server (kubesim) on this machine",
        description=(
            "Serve a simulated Kubernetes API server (lists, watches, writes, discovery, "
            "TLS and token auth) and write a kubeconfig for it."
        ),
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=6443, help="port (0 picks a free one)")
    parser.add_argument("--tls", action="store_true", help="serve HTTPS with a generated CA")
    parser.add_argument(
        "--kubeconfig",
        default="kubesim.kubeconfig",
        help="where to write the kubeconfig for the admin user (default: %(default)s)",
    )
    parser.add_argument(
        "--auth",
        choices=("token", "cert"),
        default="token",
        help="how the kubeconfig logs in (cert needs --tls)",
    )
    parser.add_argument(
        "--objects", type=int, default=0, help="load this many realistic pods at start"
    )
    parser.add_argument(
        "--namespaces", type=int, default=4, help="spread the loaded pods over N namespaces"
    )
    parser.add_argument(
        "--churn",
        type=float,
        default=0.0,
        help="create/update/delete objects at this many operations per second",
    )
    parser.add_argument(
        "--churn-kinds",
        default="configmaps,pods,deployments",
        help="comma-separated kinds to churn (configmaps, secrets, services, pods, deployments)",
    )
    parser.add_argument(
        "--watch-history", type=int, default=10_000, help="watch events kept per resource"
    )
    parser.add_argument(
        "--for-seconds", type=float, default=math.inf, help=argparse.SUPPRESS
    )  # bounded runs, for tests
    add_log_options(parser)
    parser.set_defaults(func=_main)


def _check(args: argparse.Namespace) -> None:
    if args.auth == "cert" and not args.tls:
        raise ValueError("--auth cert needs --tls (client certificates are a TLS feature)")
    if args.objects < 0 or args.churn < 0:
        raise ValueError("--objects and --churn must not be negative")
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be 0..65535, got {args.port}")


def _main(args: argparse.Namespace) -> int:
    _check(args)
    configure_logging(level=args.log_level, format=chosen_format(args.log_format))
    # Start the resourceVersions at the time in microseconds, so they keep growing across
    # restarts (agents resuming with a version from an earlier run get events, not 504s).
    config = kubesim.SimConfig(
        watch_history=args.watch_history, first_resource_version=time.time_ns() // 1000
    )
    sim = kubesim.Cluster(config)
    kinds = [k.strip() for k in args.churn_kinds.split(",") if k.strip()]
    churn = kubesim.Churn(sim, rate=args.churn, kinds=kinds) if args.churn > 0 else None

    async def main() -> None:
        if args.objects:
            kubesim.load_pods(sim, args.objects, namespaces=args.namespaces)
            # The loaded objects live as long as the process: keep the cyclic collector
            # from walking them again and again.
            gc.freeze()
        async with kubesim.open_server(sim, host=args.host, port=args.port, tls=args.tls) as server:
            path = server.kubeconfig(Path(args.kubeconfig), auth=args.auth)
            print(f"kubesim serving {server.url} ({sim.count('', 'pods')} pods)", flush=True)
            print(f"kubeconfig written to {path}", flush=True)
            with trio.move_on_after(args.for_seconds):
                async with trio.open_nursery() as nursery:
                    if churn is not None:
                        await nursery.start(churn.run)
                        print(f"churning {kinds} at {args.churn}/s", flush=True)
                    await trio.sleep_forever()
        if churn is not None:
            stats = churn.statistics()
            print(
                f"churn: {stats.created} created, {stats.updated} updated, "
                f"{stats.deleted} deleted, {stats.failed} failed",
                file=sys.stderr,
            )

    trio.run(main)
    return 0
