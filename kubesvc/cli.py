"""The ``kubesvc`` command line.

Each subcommand lives in its own ``_cmd_*.py`` module exposing ``register(subparsers)``,
which adds an argparse parser whose ``func`` default is called with the parsed namespace and
returns an exit code. Only the module of the command being run is imported (all of them for
``--help``): a command's module imports what it runs, and ``kubesvc agent`` importing the
server, kubesim and the demo as well cost about a second of every agent start (and of every
restart an operator or a test waits for).

Failures are collapsed here, in one place: every leaf exception of an exception group becomes
one clear line on stderr and the exit code is non-zero.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from kubesvc import __version__

from ._logging import failure_line

# The subcommands (each in ``kubesvc/_cmd_<name>.py``), in the order ``--help`` lists them.
COMMANDS: tuple[str, ...] = ("demo", "agent", "server", "sim", "certs", "token", "doctor")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with ``only`` (a command's name), one that knows just that command,
    so only its module is imported."""
    parser = argparse.ArgumentParser(
        prog="kubesvc",
        description=(
            "kubesvc: a Kubernetes agent that streams every watched object over one outbound "
            "gRPC stream to a Clouddriver-side server, and runs Spinnaker's operations."
        ),
    )
    parser.add_argument("--version", action="version", version=f"kubesvc {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for name in COMMANDS if only is None else (only,):
        module = importlib.import_module(f"kubesvc._cmd_{name}")
        module.register(subparsers)
    return parser


def _command_in(argv: Sequence[str]) -> str | None:
    """The command ``argv`` runs when its first word names one (top-level options such as
    ``--version`` come first, and need every command's parser for ``--help``)."""
    first = argv[0] if argv else ""
    return first if first in COMMANDS else None


def _leaf_messages(exc: BaseException) -> list[str]:
    if isinstance(exc, BaseExceptionGroup):
        lines: list[str] = []
        for inner in exc.exceptions:
            lines.extend(_leaf_messages(inner))
        return lines
    text = str(exc) or type(exc).__name__
    return [f"{type(exc).__name__}: {text}"]


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command_in(words))
    args = parser.parse_args(words)
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
            print(failure_line(line, getattr(args, "log_format", None)), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
