"""Regenerate wire/_generated from wire/kubesvc.proto with betterproto's protoc plugin.

Run as ``python -m wire.regenerate [OUTPUT_DIR]`` (default: the package's ``_generated``
folder). protoc comes from grpcio-tools and the plugin (``protoc-gen-python_betterproto``)
from ``betterproto[compiler]``; both live next to the running interpreter. The output is
written as protoc produced it, plus empty ``__init__.py`` files in the intermediate folders so
that it is a regular package. tests/wire/test_generated.py runs this into a temporary folder
and fails on any difference with the committed code.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROTO = Path(__file__).with_name("kubesvc.proto")
DEFAULT_OUTPUT = Path(__file__).with_name("_generated")
GENERATED_MODULE = Path("kubesvc", "v1", "__init__.py")


class RegenerateError(Exception):
    """protoc or the plugin failed; the message holds their output."""


def regenerate(output: Path = DEFAULT_OUTPUT) -> list[Path]:
    """Write the generated package into ``output`` and return the files written.

    Raises RegenerateError if protoc fails.
    """
    output.mkdir(parents=True, exist_ok=True)
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    command = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"--proto_path={PROTO.parent}",
        f"--python_betterproto_out={output}",
        str(PROTO),
    ]
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RegenerateError(
            f"protoc failed with exit status {result.returncode}:\n{result.stdout}{result.stderr}"
        )
    for folder in (output / "kubesvc", output / "kubesvc" / "v1"):
        (folder / "__init__.py").touch(exist_ok=True)
    return sorted(p for p in output.rglob("*.py"))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    output = Path(args[0]) if args else DEFAULT_OUTPUT
    try:
        written = regenerate(output)
    except RegenerateError as exc:
        print(exc, file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
