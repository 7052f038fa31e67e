"""Who acts stays with its transaction behind PgBouncer in transaction mode.

The actor travels as a transaction-local setting (docs/access.md), never as session state, so
a server connection that PgBouncer hands from one client's transaction to the next carries
nothing over. Proven with a real PgBouncer (Debian's ``pgbouncer``, which .ci/run installs) in
transaction mode with a pool of one server connection: every transaction of every client runs
on the same server session, and each sees exactly what its own actor may see: through the
unit of work, and through the asyncio one.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine

from dms.aio import AsyncUnitOfWork
from dms.db import create_async_engine
from dms.domain import DocumentQuery
from dms.domain.access import Rights
from dms.testing.roles import APPLICATION_ROLE, application_engine
from dms.uow import UnitOfWork
from dms.users import create_user

pytestmark = pytest.mark.plain_only

T = TypeVar("T")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _server_of(url: URL) -> tuple[str, int]:
    host = url.query.get("host") or url.host or "127.0.0.1"
    return str(host if isinstance(host, str) else host[0]), int(url.port or 5432)


def _run_as(folder: Path, host: str) -> list[str]:
    # PgBouncer refuses to run as root: as root, run it as the owner of the server's socket
    # folder (the embedded server's user), or as nobody for a TCP server.
    if os.geteuid() != 0:
        return []
    owner = pwd.getpwuid(Path(host).stat().st_uid).pw_name if host.startswith("/") else "nobody"
    shutil.chown(folder, user=owner)
    for path in folder.iterdir():
        shutil.chown(path, user=owner)
    return ["-u", owner]


@pytest.fixture
def bouncer_url(engine: Engine) -> Iterator[URL]:
    """A PgBouncer in transaction mode, one server connection, in front of the test database."""
    # A folder of its own under /tmp, not pytest's: PgBouncer may run as another user, who
    # cannot reach into root's pytest folders.
    tmp_path = Path(tempfile.mkdtemp(prefix="dms-pgbouncer-"))
    try:
        yield from _bouncer(engine, tmp_path)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _bouncer(engine: Engine, tmp_path: Path) -> Iterator[URL]:
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not Path(binary).exists():
        pytest.fail("pgbouncer is not installed (apt-get install pgbouncer; .ci/run does)")
    host, port = _server_of(engine.url)
    listen = _free_port()
    database = engine.url.database
    (tmp_path / "users.txt").write_text(f'"{APPLICATION_ROLE}" ""\n')
    (tmp_path / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"{database} = host={host} port={port} dbname={database}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {listen}\n"
        f"unix_socket_dir =\nauth_type = trust\nauth_file = {tmp_path / 'users.txt'}\n"
        "pool_mode = transaction\ndefault_pool_size = 1\nmax_client_conn = 20\n"
        f"logfile = {tmp_path / 'pgbouncer.log'}\npidfile = {tmp_path / 'pgbouncer.pid'}\n"
    )
    (tmp_path / "pgbouncer.log").touch()
    command = [binary, *_run_as(tmp_path, host), str(tmp_path / "pgbouncer.ini")]
    with (tmp_path / "stderr.txt").open("wb") as stderr:
        process = subprocess.Popen(command, stdout=stderr, stderr=subprocess.STDOUT)
    try:
        _wait_listening(listen, process, tmp_path)
        yield URL.create(
            "postgresql+psycopg",
            username=APPLICATION_ROLE,
            host="127.0.0.1",
            port=listen,
            database=database,
        )
    finally:
        process.terminate()
        process.wait(timeout=10)


def _wait_listening(port: int, process: subprocess.Popen[bytes], folder: Path) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            said = [(folder / name).read_text() for name in ("stderr.txt", "pgbouncer.log")]
            pytest.fail(f"pgbouncer stopped: {said}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    pytest.fail("pgbouncer did not start listening within 10 s")


def _in_unit_of_work(
    side: str, bounced: Engine, tenant: str, user: uuid.UUID, work: Callable[[UnitOfWork], T]
) -> T:
    """``work(uow)`` in a unit of work of ``side`` through PgBouncer: the unit of work, or the
    asyncio one (dms.aio: the same code in the greenlet bridge, on psycopg's AsyncConnection)."""
    if side == "sync":
        with UnitOfWork(bounced, tenant=tenant, user_id=user) as uow:
            return work(uow)

    async def bridged() -> T:
        aengine = create_async_engine(
            bounced.url, connect_args={"prepare_threshold": None}, poolclass=sa.pool.NullPool
        )
        try:
            async with AsyncUnitOfWork(aengine, tenant=tenant, user_id=user) as uow:
                return await uow.run(work)
        finally:
            await aengine.dispose()

    return asyncio.run(bridged())


@pytest.mark.parametrize("side", ["sync", "async"])
def test_each_transaction_sees_what_its_own_actor_may_see(
    engine: Engine, tenant: str, bouncer_url: URL, side: str
) -> None:
    with engine.begin() as conn:
        admin, alice, bob = (
            create_user(conn, email=f"{uuid.uuid4().hex}@example.org", display_name=name)
            for name in ("admin", "alice", "bob")
        )
    application_engine(engine, [tenant]).dispose()  # the role, granted this tenant
    bounced = sa.create_engine(bouncer_url, connect_args={"prepare_threshold": None})

    def seen(uow: UnitOfWork) -> tuple[list[uuid.UUID], int]:
        page = uow.documents.search(DocumentQuery())
        backend = uow.connection.execute(sa.select(sa.func.pg_backend_pid())).scalar_one()
        return [d.id for d in page.items], backend

    try:
        with UnitOfWork(bounced, tenant=tenant, user_id=admin) as uow:
            mine = {
                user: uow.documents.add(title=name, folder_id=uow.folders.add(name=name).id).id
                for user, name in ((alice, "a"), (bob, "b"))
            }
            for user, document in mine.items():
                uow.access.grant(Rights.VIEW, document_id=document, user_id=user)
            uow.access.revoke()  # everyone's root entry: from now on, only what is granted
            uow.commit()

        backends = set()
        for _round in range(3):
            for user in (alice, bob):
                ids, backend = _in_unit_of_work(side, bounced, tenant, user, seen)
                assert ids == [mine[user]]
                backends.add(backend)
            # A transaction that names nobody after them inherits neither actor.
            with bounced.connect() as conn:
                actor = conn.execute(sa.select(sa.func.current_setting("dms.actor", True))).scalar()
                assert actor in (None, "")
                backends.add(conn.execute(sa.select(sa.func.pg_backend_pid())).scalar_one())
        assert len(backends) == 1, "the pool of one must have served every transaction"
    finally:
        bounced.dispose()
