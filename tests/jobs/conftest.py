"""Fixtures of the job queue tests: a kind of their own, a table for handlers' effects.

Other tests may share the database: every assertion is filtered by the test's own kind.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from dms import jobs, tenancy
from dms.jobs.tables import processing_jobs

#: What handlers of the tests write, one row per run that committed; in the tenant's schema.
effects_metadata = sa.MetaData()
job_effects = sa.Table(
    "job_effects",
    effects_metadata,
    sa.Column("job_id", sa.Uuid, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("worker", sa.Text, nullable=False),
)


#: How a worker runs handlers: in runner threads (plain functions), or many at once on one
#: event loop (``async def`` functions, in an async unit of work).
HANDLER_STYLES = ("thread", "asyncio")


@pytest.fixture(params=HANDLER_STYLES)
def handler_style(request: pytest.FixtureRequest) -> str:
    """Each handler style in turn: a test of the worker's contract holds for both."""
    return str(request.param)


def styled(style: str, body: Callable[[Any, jobs.Job], None]) -> Any:
    """``body(unit, job)`` as a handler of ``style``.

    ``thread``: ``body`` itself. ``asyncio``: an ``async def`` handler that runs ``body`` on
    the synchronous unit underneath its async unit (``await uow.run(body, job)``, the greenlet
    bridge): the same statements, the worker's asyncio path around them.
    """
    if style == "thread":
        return body

    async def handler(uow: Any, job: jobs.Job) -> None:
        await uow.run(body, job)

    return handler


@pytest.fixture
def kind() -> str:
    """A job kind that no other test uses."""
    return f"test.{uuid.uuid4().hex[:12]}"


@pytest.fixture
def effects(engine: Engine, tenant: str) -> str:
    """Create ``job_effects`` in ``tenant``'s schema (dropped with the tenant); return the slug."""
    with engine.begin() as conn:
        effects_metadata.create_all(tenancy.route(conn, tenant))
    return tenant


def count_effects(engine: Engine, tenant: str, job_id: uuid.UUID | None = None) -> int:
    """How many handler runs of ``job_id`` (or of any job) committed in ``tenant``."""
    query = sa.select(sa.func.count()).select_from(job_effects)
    if job_id is not None:
        query = query.where(job_effects.c.job_id == job_id)
    with engine.connect() as conn:
        return int(tenancy.route(conn, tenant).scalar(query) or 0)


def count_jobs(conn: Connection, kind: str, state: str | None = None) -> int:
    """Jobs of ``kind`` (in ``state``)."""
    query = sa.select(sa.func.count()).where(processing_jobs.c.kind == kind)
    if state is not None:
        query = query.where(processing_jobs.c.state == state)
    return int(conn.scalar(query) or 0)


def wait_for(condition: Callable[[], bool], *, timeout: float = 20.0, every: float = 0.05) -> None:
    """Poll ``condition`` until it holds; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout}s")
        time.sleep(every)


@pytest.fixture
def fresh_engine(engine: Engine) -> Iterator[Callable[..., Engine]]:
    """Build extra engines on the test database (own pools, own application_name); disposed."""
    made: list[Engine] = []

    def make(application_name: str | None = None, **kwargs: object) -> Engine:
        url = engine.url
        if application_name is not None:
            url = url.update_query_dict({"application_name": application_name})
        new = sa.create_engine(url, **kwargs)
        made.append(new)
        return new

    yield make
    for e in made:
        e.dispose()


@pytest.fixture
def tenants(engine: Engine) -> Iterator[Callable[[int], list[str]]]:
    """Register ``n`` tenants, named in order (``t000...``, ``t001...``); unregistered after."""
    made: list[str] = []

    def register(count: int) -> list[str]:
        stem = uuid.uuid4().hex[:8]
        names = [f"t{n:03d}{stem}" for n in range(count)]
        with engine.begin() as conn:
            for name in names:
                tenancy.register(conn, name)
        made.extend(names)
        return names

    yield register
    with engine.begin() as conn:
        for name in made:
            tenancy.unregister(conn, name)  # its jobs go with it (ON DELETE CASCADE)


def frontend_messages(conn: Connection, call: Callable[[], object]) -> list[str]:
    """The protocol messages the client sends during ``call()`` (libpq's trace), by type."""
    driver = conn.connection.driver_connection
    assert isinstance(driver, psycopg.Connection)
    with tempfile.TemporaryFile("w+") as trace:
        driver.pgconn.trace(trace.fileno())
        driver.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            call()
        finally:
            driver.pgconn.untrace()
        trace.seek(0)
        lines = [line.split("\t") for line in trace.read().splitlines()]
    return [
        fields[2] + fields[3] if fields[2] == "Parse" else fields[2]
        for fields in lines
        if fields[0] == "F"
    ]
