"""Fixtures shared by every test that needs PostgreSQL.

The server is the one named by ``DMS_TEST_DATABASE_URL``, or the embedded server otherwise;
a test never skips for lack of one. Each pytest-xdist worker gets its own database, migrated
to head with the users stand-in; each test that commits gets its own tenant, as new (recycled
from the worker's earlier tests: :mod:`tests.recycling`); the others share one
(:func:`rolled_back_tenant`, :func:`tenant_unless_named`). Tests that need an
empty database (migrations) get their own with :func:`empty_database_url`.
"""

from __future__ import annotations

import inspect
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine

from dms import citus, embedded, migrations, provisioning, tenancy
from dms.config import Settings
from dms.db import normalize_url
from dms.schema import tenant as tenant_schema
from dms.storage import S3BlobStore
from dms.testing import temporary_database
from dms.users import create_user, create_users_stand_in
from tests.hostile import checksums
from tests.recycling import Recycler
from tests.s3server import running_s3_server

#: The timeout of the tests whose own bounded waits may add up to more than the suite's default
#: (pyproject.toml): ``@pytest.mark.timeout(LONG_TEST_SECONDS)``.
LONG_TEST_SECONDS = 600

#: Markers of the tests that take tens of seconds each (pyproject.toml says what each means).
LONG_MARKERS = ("slow", "faults", "interruption")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the long tests first, the rest in their order.

    pytest-xdist hands tests out in collection order: a two-minute test that starts last keeps
    one worker busy while the others have nothing left (seen in CI: the README's chained
    sections ran alone at the end). Started first, the short tests fill in around them.
    """
    items.sort(key=lambda item: not any(item.get_closest_marker(m) for m in LONG_MARKERS))


@pytest.fixture(scope="session")
def server_url() -> URL:
    """A database on the server under test (any database: used to create others)."""
    explicit = os.environ.get("DMS_TEST_DATABASE_URL")
    if explicit:
        return normalize_url(explicit)
    data_dir = os.environ.get("DMS_DATA_DIR") or str(Path.home() / ".local/share/dms-test")
    url = embedded.start(Path(data_dir), settings=Settings.from_env())
    if os.environ.get("DMS_TEST_NO_FSYNC") == "1":
        _without_durability(url)
    return url


def _without_durability(url: URL) -> None:
    """Turn off ``fsync`` on a throw-away test server (CI's): every DDL statement stops waiting
    for the disk. Asked for by ``DMS_TEST_NO_FSYNC=1``, never assumed: a developer's
    ``DMS_DATA_DIR`` may hold data worth keeping."""
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    with admin.connect() as conn:
        conn.execute(sa.text("ALTER SYSTEM SET fsync = off"))
        conn.execute(sa.text("ALTER SYSTEM SET synchronous_commit = off"))
        conn.execute(sa.select(sa.func.pg_reload_conf()))
    admin.dispose()


@pytest.fixture(scope="session")
def database_url(server_url: URL, worker_id: str) -> Iterator[URL]:
    """This worker's database: migrated to head, with the users stand-in."""
    with temporary_database(server_url, prefix=f"dms_test_{worker_id}") as url:
        engine = sa.create_engine(url, poolclass=sa.NullPool)
        create_users_stand_in(engine)
        migrations.upgrade(engine)
        engine.dispose()
        yield url


@pytest.fixture(scope="session")
def worker_id(request: pytest.FixtureRequest) -> str:
    """The pytest-xdist worker name, or ``main`` without xdist."""
    return str(getattr(request.config, "workerinput", {}).get("workerid", "main"))


@pytest.fixture(scope="session")
def engine(database_url: URL) -> Iterator[Engine]:
    """An engine on this worker's database."""
    engine = sa.create_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def empty_database_url(server_url: URL) -> Iterator[URL]:
    """A new, empty database for this test alone (no users table, no migrations)."""
    with temporary_database(server_url, prefix="dms_empty") as url:
        yield url


def new_slug() -> str:
    """A tenant key no other test uses."""
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def rolled_back_tenant(engine: Engine) -> Iterator[str]:
    """This worker's tenant for tests that write only through :func:`tenant_conn`."""
    slug = new_slug()
    provisioning.create_tenant(engine, slug)
    yield slug
    provisioning.drop_tenant(engine, slug)


@pytest.fixture(scope="session")
def recycler(engine: Engine) -> Recycler:
    """This worker's tenants, kept between tests and emptied back to new (tests/recycling.py)."""
    return Recycler(engine)


@pytest.fixture
def tenant(request: pytest.FixtureRequest, recycler: Recycler) -> Iterator[str]:
    """A tenant at head, as new: this test's alone (recycled, see :mod:`tests.recycling`).

    A test that uses :func:`tenant_conn` (rolled back after it) and does not name ``tenant``
    itself shares this worker's :func:`rolled_back_tenant` instead: it leaves nothing behind.
    A test that names its tenant (to change its tables' triggers, say) gets its own, which is
    dropped after it, not recycled: on Citus, a trigger switched off and rolled back was seen
    still off by the next test.
    """
    if _writes_only_through_tenant_conn(request):
        yield request.getfixturevalue("rolled_back_tenant")
        return
    with recycler.tenant() as slug:
        yield slug


def _writes_only_through_tenant_conn(request: pytest.FixtureRequest) -> bool:
    named = inspect.signature(request.function).parameters
    return "tenant_conn" in request.fixturenames and "tenant" not in named


@pytest.fixture(scope="module")
def module_tenant(engine: Engine) -> Iterator[str]:
    """One tenant for the tests of a module that need none of their own: each module that takes
    it says why its tests can share it (and :func:`tenant_unless_named` checks it)."""
    slug = new_slug()
    provisioning.create_tenant(engine, slug)
    yield slug
    provisioning.drop_tenant(engine, slug)


def tenant_unless_named(request: pytest.FixtureRequest, engine: Engine) -> Iterator[str]:
    """The ``tenant`` of a module whose tests commit nothing unless they name ``tenant``.

    A module says so by overriding ``tenant`` with this::

        @pytest.fixture
        def tenant(request: pytest.FixtureRequest, engine: Engine) -> Iterator[str]:
            yield from tenant_unless_named(request, engine)

    A test that names ``tenant`` (it commits, or reads the tenant on connections of its own)
    gets a new one, as everywhere. The others (they reach the tenant through a unit of work
    they never commit, which rolls back) share the module's, and must leave every table of it
    as they found it: checked after each by row counts and checksums, so that a test that
    committed fails instead of leaving rows to the next. A tenant costs a fifth of a second to
    create and drop here, seconds on Citus.
    """
    if "tenant" in inspect.signature(request.function).parameters:
        with request.getfixturevalue("recycler").tenant() as slug:
            yield slug
        return
    slug = request.getfixturevalue("module_tenant")
    before = _tenant_snapshot(engine, slug)
    yield slug
    assert _tenant_snapshot(engine, slug) == before, (
        f"{request.node.nodeid} committed in its module's shared tenant: it must name `tenant` "
        "to get one of its own"
    )


def _tenant_snapshot(engine: Engine, slug: str) -> tuple[tuple[object, ...], ...]:
    tables = [table for table in tenant_schema.metadata.sorted_tables if table.schema is None]
    with engine.connect() as conn:
        return checksums(tenancy.route(conn, slug), tables)


@pytest.fixture
def other_tenant(recycler: Recycler) -> Iterator[str]:
    """A second tenant, as new as ``tenant`` (no events yet)."""
    with recycler.tenant() as slug:
        yield slug


def new_user(engine: Engine, name: str = "Tester") -> uuid.UUID:
    """A new user named ``name`` in the stand-in users table (a unique email each time)."""
    with engine.begin() as conn:
        return create_user(conn, email=f"{name}-{uuid.uuid4().hex}@example.org", display_name=name)


def without_role_warning(stderr: str) -> str:
    """``stderr`` without the warning of a unit of work that acts as a user on a connection the
    policies do not hold (:func:`dms.roles.acting_role_warning`): a command run as the suite's
    superuser says it once; tests that read a command's exact stderr leave it out."""
    return "".join(
        line for line in stderr.splitlines(keepends=True) if "dms connects as role " not in line
    )


def plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A JSON plan's node (``EXPLAIN (FORMAT JSON)``'s ``Plan``) and every node below it."""
    yield node
    for child in node.get("Plans", ()):
        yield from plan_nodes(child)


@pytest.fixture
def user_id(engine: Engine) -> uuid.UUID:
    """A user in the stand-in users table."""
    return new_user(engine)


@pytest.fixture
def tenant_conn(engine: Engine, tenant: str) -> Iterator[Connection]:
    """A connection in a transaction routed to ``tenant``; rolled back after the test.

    Its tenant is shared by this worker's tests that use this fixture: write to it only here.
    """
    with engine.connect() as conn:
        transaction = conn.begin()
        try:
            yield tenancy.route(conn, tenant)
        finally:
            # Rolled back, not committed: the next test of the worker may share the tenant.
            if transaction.is_active:
                transaction.rollback()


@pytest.fixture
def ctrl_c_as_in_a_terminal() -> Iterator[None]:
    """Let the commands a test starts take Ctrl-C, whatever this test process inherited.

    A job that a shell starts in the background (``.ci/run &``, nohup) ignores SIGINT, and
    the children it starts inherit that: Python then never raises KeyboardInterrupt, and a
    command a test interrupts with SIGINT would run on to its end instead. A handler (not
    "ignore") here becomes the default action in every child at its exec.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The endpoint URL of this test process's S3-compatible server (SeaweedFS)."""
    with running_s3_server(tmp_path_factory.mktemp("seaweedfs")) as endpoint:
        yield endpoint


@pytest.fixture
def s3_bucket(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A new empty bucket; boto3 in this process (and its children) reaches the server."""
    for name, value in {
        "AWS_ENDPOINT_URL_S3": s3_endpoint,
        "AWS_ACCESS_KEY_ID": "dms-tests",
        "AWS_SECRET_ACCESS_KEY": "dms-tests",
        "AWS_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    bucket = f"dms-{uuid.uuid4().hex[:16]}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    return bucket


@pytest.fixture
def s3_store(s3_bucket: str, tmp_path: Path) -> S3BlobStore:
    """A store in a new bucket, under a prefix, staging under this test's folder."""
    return S3BlobStore(s3_bucket, "some/prefix", staging_dir=tmp_path)


@pytest.fixture(scope="session")
def on_citus(engine: Engine) -> bool:
    """Whether the tests run against a Citus cluster."""
    with engine.connect() as conn:
        return citus.is_citus(conn)


@pytest.fixture(autouse=True)
def _engine_markers(request: pytest.FixtureRequest) -> None:
    """Skip a ``citus_only`` test off Citus and a ``plain_only`` one on it, visibly."""
    wants_citus = request.node.get_closest_marker("citus_only") is not None
    wants_plain = request.node.get_closest_marker("plain_only") is not None
    if not (wants_citus or wants_plain):
        return
    on = request.getfixturevalue("on_citus")
    if wants_citus and not on:
        pytest.skip("needs a Citus cluster")
    if wants_plain and on:
        pytest.skip("about plain PostgreSQL; this is a Citus cluster")
