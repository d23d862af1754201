"""The ``kubesvc`` command line.

Each subcommand lives in its own ``_cmd_*.py`` module exposing ``register(subparsers)``,
which adds an argparse parser whose ``func`` default is called with the parsed namespace and
returns an exit code. Failures are collapsed here, in one place: every leaf exception of an
exception group becomes one clear line on stderr and the exit code is non-zero.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from kubesvc import __version__

# The subcommand modules, in the order ``--help`` lists them.
_COMMAND_MODULES: tuple[str, ...] = (
    "_cmd_demo",
    "_cmd_agent",
    "_cmd_server",
    "_cmd_sim",
    "_cmd_certs",
    "_cmd_token",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubesvc",
        description=(
            "kubesvc: a Kubernetes agent that streams every watched object over one outbound "
            "gRPC stream to a Clouddriver-side server, and runs Spinnaker's operations."
        ),
    )
    parser.add_argument("--version", action="version", version=f"kubesvc {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        module = importlib.import_module(f"kubesvc.{name}")
        module.register(subparsers)
    return parser


def _leaf_messages(exc: BaseException) -> list[str]:
    if isinstance(exc, BaseExceptionGroup):
        lines: list[str] = []
        for inner in exc.exceptions:
            lines.extend(_leaf_messages(inner))
        return lines
    text = str(exc) or type(exc).__name__
    return [f"{type(exc).__name__}: {text}"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return func(args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the one place failures are collapsed into lines
        for line in _leaf_messages(exc):
            print(f"kubesvc: error: {line}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
