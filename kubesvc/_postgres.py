"""A throwaway PostgreSQL server for the tests, benchmarks and ``kubesvc demo --replicas``,
from binaries found here.

``find_binaries()`` looks in ``$KUBESVC_PG_BIN`` alone when it is set, else for
``initdb``/``pg_ctl``/``postgres`` on PATH, then in /usr/lib/postgresql/<version>/bin
(Debian's ``postgresql`` package), then in the ``pgserver`` wheel (PyPI), and says why when
there are none. ``TempPostgres`` runs ``initdb`` into a
temporary folder, starts the server listening on a unix socket in that folder only (no TCP
port, so nothing else on the machine can reach it or collide with it), and at the end stops
it (``pg_ctl stop -m fast``, waited for) and removes the folder. initdb and postgres refuse
to run as root: as root, they run as the ``postgres`` user (or ``nobody``) through
``setpriv``, and the folder is handed to that user.

``python -m kubesvc._postgres`` prints where the binaries are (exit 0) or why none were
found (exit 1); tests/check.sh uses it to decide whether to install them.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

_TOOLS = ("initdb", "pg_ctl", "postgres")
SUPERUSER = "kubesvc"
# A role that must give a password (scram) on the socket: what passwordFile tests log in as.
PASSWORD_USER, PASSWORD = "kubesvc_pw", "s3cret-pw"
_RUN_TIMEOUT = 120.0  # seconds for initdb or a start/stop on a loaded 2-core machine
# Fast, not durable: a test database never outlives its run. The benchmark passes its own.
TEST_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


class NoPostgres(Exception):
    """No PostgreSQL server binaries here; the message says where we looked."""


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", path.parent.name))


def find_binaries() -> Path:
    """The folder holding initdb, pg_ctl and postgres; raises NoPostgres saying where we
    looked. ``KUBESVC_PG_BIN``, when set, is the only place looked at."""
    chosen = os.environ.get("KUBESVC_PG_BIN")
    if chosen is not None:
        if all((Path(chosen) / t).exists() for t in _TOOLS):
            return Path(chosen)
        raise NoPostgres(f"KUBESVC_PG_BIN={chosen!r} does not hold initdb, pg_ctl and postgres")
    looked = []
    on_path = shutil.which("initdb")
    if on_path:
        folder = Path(on_path).resolve().parent
        if all((folder / t).exists() for t in _TOOLS):
            return folder
        looked.append(f"{folder} (from PATH, incomplete)")
    else:
        looked.append("PATH")
    for folder in sorted(
        (p.parent for p in Path("/usr/lib/postgresql").glob("*/bin/initdb")),
        key=lambda p: _version_key(p / "initdb"),
        reverse=True,
    ):
        if all((folder / t).exists() for t in _TOOLS):
            return folder
    looked.append("/usr/lib/postgresql/*/bin")
    spec = importlib.util.find_spec("pgserver")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            folder = Path(location) / "pginstall" / "bin"
            if all((folder / t).exists() for t in _TOOLS):
                return folder
    looked.append("the pgserver package")
    raise NoPostgres(
        f"no PostgreSQL server binaries (initdb, pg_ctl, postgres) in {', '.join(looked)}; "
        "tests/check.sh installs them (apt-get install postgresql, or pip install pgserver)"
    )


def _unprivileged_user() -> pwd.struct_passwd | None:
    """Whom to run the server as when we are root (None when we are not root)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise NoPostgres("running as root and no 'postgres' or 'nobody' user to run PostgreSQL as")


@dataclass
class TempPostgres:
    """A running throwaway server (see the module's docstring). Use as a context manager or
    ``start()``/``stop()``. ``url(db)`` is a URL for the superuser over the unix socket."""

    settings: dict[str, str]
    folder: Path | None = None
    _bin: Path | None = None
    _user: pwd.struct_passwd | None = None
    _names: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _flags: str = ""  # postgres's -c options, for pg_ctl start (again, after pause)

    def __enter__(self) -> TempPostgres:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def socket_dir(self) -> str:
        assert self.folder is not None
        return str(self.folder)

    def url(self, dbname: str = "postgres", user: str = SUPERUSER) -> str:
        return f"postgresql://{user}@/{dbname}?host={self.socket_dir}&port=5432"

    def _run(self, *args: str) -> None:
        """Run a server tool (as the unprivileged user when root); raises RuntimeError with
        its output when it fails. The process is always waited for."""
        assert self._bin is not None
        command = [str(self._bin / args[0]), *args[1:]]
        if self._user is not None:
            command = [
                "setpriv",
                f"--reuid={self._user.pw_uid}",
                f"--regid={self._user.pw_gid}",
                "--clear-groups",
                *command,
            ]
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=_RUN_TIMEOUT,
            check=False,
            env={**os.environ, "LC_ALL": "C"},
            cwd="/",
            # Not in the terminal's process group: a Ctrl-C meant for the demo must not cut
            # an initdb or a pg_ctl stop short (the demo stops the server itself).
            start_new_session=True,
        )
        if done.returncode:
            raise RuntimeError(
                f"{args[0]} failed (exit {done.returncode}): {done.stdout}{done.stderr}"
            )

    def start(self) -> None:
        """initdb + pg_ctl start (waits until it accepts connections); raises NoPostgres
        without binaries, RuntimeError when a tool fails (the folder is removed then)."""
        self._bin = find_binaries()
        self._user = _unprivileged_user()
        # Short: a unix socket path must fit in 107 bytes.
        self.folder = Path(tempfile.mkdtemp(prefix="kubesvc-pg-"))
        try:
            data = self.folder / "data"
            if self._user is not None:
                os.chown(self.folder, self._user.pw_uid, self._user.pw_gid)
            self._run(
                "initdb",
                "-D",
                str(data),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--encoding=UTF8",
                "--no-sync",
            )
            # Local (socket) logins: the password role must give its password, the rest
            # are trusted (only this folder's owner and root can reach the socket).
            (data / "pg_hba.conf").write_text(
                f"local all {PASSWORD_USER} scram-sha-256\nlocal all all trust\n"
            )
            options = {
                "listen_addresses": "''",
                "unix_socket_directories": f"'{self.folder}'",
                "port": "5432",
                "max_connections": "100",
                **self.settings,
            }
            self._flags = " ".join(f"-c {k}={v}" for k, v in options.items())
            self._pg_ctl_start()
        except BaseException:
            self._remove()
            raise
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {PASSWORD_USER} LOGIN SUPERUSER PASSWORD '{PASSWORD}'")

    def _pg_ctl_start(self) -> None:
        assert self.folder is not None
        self._run(
            "pg_ctl",
            "-D",
            str(self.folder / "data"),
            "-l",
            str(self.folder / "log"),
            "-o",
            self._flags,
            "-w",
            "-t",
            str(int(_RUN_TIMEOUT)),
            "start",
        )

    def pause(self) -> None:
        """Stop the server (fast shutdown: every connection is ended), keeping its data; a
        test of what the store's clients do while the database is down. ``resume`` starts it
        again."""
        assert self.folder is not None
        self._run("pg_ctl", "-D", str(self.folder / "data"), "-m", "fast", "-w", "stop")

    def resume(self) -> None:
        """Start the server ``pause`` stopped (waits until it accepts connections)."""
        self._pg_ctl_start()

    def create_database(self, name: str = "") -> str:
        """A new empty database (``name``, else the next free test name); returns its name."""
        name = name or f"t{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE template0")
        return name

    def drop_database(self, name: str) -> None:
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    @property
    def pid(self) -> int | None:
        """The postmaster's process id (its postmaster.pid file), None when not running."""
        if self.folder is None:
            return None
        try:
            first = (self.folder / "data" / "postmaster.pid").read_text().split("\n", 1)[0]
        except OSError:
            return None
        return int(first) if first.strip().isdigit() else None

    def stop(self) -> None:
        """Stop the server (fast shutdown, waited for) and remove its folder."""
        if self.folder is None:
            return
        try:
            self._run("pg_ctl", "-D", str(self.folder / "data"), "-m", "fast", "-w", "stop")
        finally:
            self._remove()

    def _remove(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None


@contextlib.contextmanager
def temp_postgres(settings: dict[str, str] | None = None) -> Iterator[TempPostgres]:
    """A started TempPostgres, stopped and removed on exit."""
    with TempPostgres(dict(TEST_SETTINGS if settings is None else settings)) as server:
        yield server


def main() -> int:
    try:
        print(find_binaries())
    except NoPostgres as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
