import subprocess
import sys

from kubesvc import __version__
from kubesvc.cli import main


def test_version_prints_the_package_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "kubesvc", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == f"kubesvc {__version__}"


def test_no_command_prints_help_and_fails() -> None:
    assert main([]) == 2
