from kubesvc import __version__
from kubesvc.cli import main

from ._procs import kubesvc_command, run


def test_version_prints_the_package_version() -> None:
    out = run(kubesvc_command("--version"), timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"kubesvc {__version__}"


def test_no_command_prints_help_and_fails() -> None:
    assert main([]) == 2
