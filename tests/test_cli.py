import sys

import pytest

from kubesvc import __version__
from kubesvc.cli import main

from ._procs import kubesvc_command, run


def test_version_prints_the_package_version() -> None:
    out = run(kubesvc_command("--version"), timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"kubesvc {__version__}"


@pytest.mark.parametrize(
    ("command", "foreign"),
    [
        ("agent", ("server", "kubesim", "kubesvc._demo")),
        ("server", ("agent", "kubesim", "kubesvc._demo")),
        ("sim", ("agent", "server", "wire")),
    ],
)
def test_a_command_imports_only_what_it_runs(command: str, foreign: tuple[str, ...]) -> None:
    # Every agent or server (re)start pays for its imports: the other commands' packages cost
    # about a second more on this machine.
    probe = (
        "import sys\n"
        "from kubesvc.cli import main\n"
        f"try:\n    main([{command!r}, '--help'])\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in {foreign!r} if m in sys.modules))\n"
    )
    out = run([sys.executable, "-c", probe], timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_no_command_prints_help_and_fails() -> None:
    assert main([]) == 2


def test_server_store_url_errors_name_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["server", "--store", "postgresql://kubesvc:hunter2@db/k?bogus=1"]) != 0
    err = capsys.readouterr().err
    assert "--store: expected sqlite:///path" in err
    assert "bogus" in err
    assert "hunter2" not in err
