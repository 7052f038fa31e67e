"""The asyncio API against the database: atomic, routed to its tenant, the same errors.

Run on plain PostgreSQL and on Citus, through psycopg's AsyncConnection (dms.aio's greenlet
bridge runs the synchronous code; tests/unit/test_async_api.py compares the signatures).
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine
from sqlalchemy.ext.asyncio import AsyncEngine

import dms
from dms import jobs
from dms.aio import AsyncUnitOfWork, services
from dms.aio import jobs as async_jobs
from dms.errors import NotFound, ValidationError
from dms.jobs.tables import processing_jobs
from dms.uow import UnitOfWork
from tests.conftest import new_slug

T = TypeVar("T")


def _run(make: Callable[[AsyncEngine], Awaitable[T]], url: URL) -> T:
    """``make(engine)`` on an event loop, with an async engine of ``url`` disposed after."""

    async def main() -> T:
        engine = dms.create_async_engine(url)
        try:
            return await make(engine)
        finally:
            await engine.dispose()

    return asyncio.run(main())


def _jobs_of(engine: Engine, tenant: str) -> list[str]:
    query = sa.select(processing_jobs.c.kind).where(processing_jobs.c.tenant == tenant)
    with engine.connect() as conn:
        return list(conn.scalars(query))


def _titles(engine: Engine, tenant: str) -> list[str]:
    with UnitOfWork(engine, tenant=tenant) as uow:
        return sorted(d.title for d in uow.documents.search(dms.DocumentQuery()).items)


def test_a_document_its_revision_and_its_job_commit_together(
    engine: Engine, database_url: URL, tenant: str, user_id: uuid.UUID
) -> None:
    data = b"offer"

    async def upload(aengine: AsyncEngine) -> uuid.UUID:
        async with AsyncUnitOfWork(aengine, tenant=tenant, user_id=user_id) as uow:
            document = await services.create_document(uow, title="Offer.pdf")
            await services.add_revision(
                uow,
                document.id,
                storage_key="acme/offer",
                sha256=hashlib.sha256(data).hexdigest(),
                size_bytes=len(data),
                mime_type="application/pdf",
            )
            await async_jobs.enqueue(uow, "test.async", {"d": str(document.id)}, tenant=tenant)
            await uow.commit()
            return document.id

    document_id = _run(upload, database_url)
    with UnitOfWork(engine, tenant=tenant) as uow:
        assert uow.documents.get(document_id).title == "Offer.pdf"
        assert [r.revision_no for r in uow.revisions.history(document_id)] == [1]
    assert "test.async" in _jobs_of(engine, tenant)


def test_a_failing_request_leaves_neither_document_nor_job(
    engine: Engine, database_url: URL, tenant: str, user_id: uuid.UUID
) -> None:
    async def fail(aengine: AsyncEngine) -> None:
        async with AsyncUnitOfWork(aengine, tenant=tenant, user_id=user_id) as uow:
            await uow.documents.add(title="Half.pdf")
            await async_jobs.enqueue(uow, "test.async", {}, tenant=tenant)
            raise RuntimeError("the request failed")

    with pytest.raises(RuntimeError, match="the request failed"):
        _run(fail, database_url)
    assert _titles(engine, tenant) == []
    assert _jobs_of(engine, tenant) == []


def test_enqueue_on_the_applications_own_connection_follows_its_transaction(
    engine: Engine, database_url: URL, tenant: str
) -> None:
    async def enqueue(aengine: AsyncEngine) -> None:
        async with aengine.connect() as conn:
            await async_jobs.enqueue(conn, "test.kept", {}, tenant=tenant)
            await conn.commit()
            await async_jobs.enqueue_many(
                conn, [jobs.NewJob(kind="test.dropped", payload={}, tenant=tenant)]
            )
            await conn.rollback()

    _run(enqueue, database_url)
    assert _jobs_of(engine, tenant) == ["test.kept"]


def test_concurrent_units_of_work_see_only_their_own_tenant(
    engine: Engine, database_url: URL, tenant: str, other_tenant: str, user_id: uuid.UUID
) -> None:
    async def write_and_read(aengine: AsyncEngine, slug: str, n: int) -> list[str]:
        async with AsyncUnitOfWork(aengine, tenant=slug, user_id=user_id) as uow:
            await uow.documents.add(title=f"{slug} {n}")
            await asyncio.sleep(0)  # let the other tasks interleave on the same pool
            await uow.commit()
        async with AsyncUnitOfWork(aengine, tenant=slug, user_id=user_id) as uow:
            page = await uow.documents.search(dms.DocumentQuery())
            return [d.title for d in page.items]

    async def many(aengine: AsyncEngine) -> list[list[str]]:
        tasks = [
            write_and_read(aengine, slug, n) for n in range(10) for slug in (tenant, other_tenant)
        ]
        return list(await asyncio.gather(*tasks))

    seen = _run(many, database_url)
    for titles in seen:
        owners = {title.split()[0] for title in titles}
        assert len(owners) == 1, titles
    assert _titles(engine, tenant) == sorted(f"{tenant} {n}" for n in range(10))
    assert _titles(engine, other_tenant) == sorted(f"{other_tenant} {n}" for n in range(10))


def test_errors_are_the_synchronous_sides_and_change_nothing(
    engine: Engine, database_url: URL, tenant: str, user_id: uuid.UUID
) -> None:
    async def missing(aengine: AsyncEngine) -> None:
        async with AsyncUnitOfWork(aengine, tenant=tenant, user_id=user_id) as uow:
            await uow.documents.get(uuid.uuid4())

    async def hostile(aengine: AsyncEngine) -> None:
        async with AsyncUnitOfWork(aengine, tenant=tenant, user_id=user_id) as uow:
            await services.create_document(uow, title="bad\x00title")
            await uow.commit()

    async def unknown_tenant(aengine: AsyncEngine) -> None:
        async with AsyncUnitOfWork(aengine, tenant=new_slug(), user_id=user_id) as uow:
            await uow.folders.children(None)

    with pytest.raises(NotFound):
        _run(missing, database_url)
    with pytest.raises(ValidationError):
        _run(hostile, database_url)
    with pytest.raises(dms.TenantNotFound):
        _run(unknown_tenant, database_url)
    assert _titles(engine, tenant) == []


def test_a_savepoint_undoes_only_its_block(
    engine: Engine, database_url: URL, tenant: str, user_id: uuid.UUID
) -> None:
    async def twice(uow: AsyncUnitOfWork) -> None:
        async with uow.savepoint():
            await uow.documents.add(title="Twice.pdf")
            await uow.documents.add(title="Twice.pdf")

    async def partly(aengine: AsyncEngine) -> type[BaseException] | None:
        async with AsyncUnitOfWork(aengine, tenant=tenant, user_id=user_id) as uow:
            await uow.documents.add(title="Kept.pdf")
            try:
                await twice(uow)
            except dms.AlreadyExists as exc:
                refused: type[BaseException] | None = type(exc)
            else:
                refused = None
            await uow.documents.add(title="After.pdf")  # the transaction is still usable
            await uow.commit()
            return refused

    assert _run(partly, database_url) is dms.AlreadyExists
    assert _titles(engine, tenant) == ["After.pdf", "Kept.pdf"]


def test_a_method_that_reads_as_it_is_consumed_is_an_async_iterator(
    engine: Engine, database_url: URL, tenant: str, user_id: uuid.UUID
) -> None:
    """The audit export reads in pages while it is iterated: through dms.aio each page is
    read in the bridge (iterating it outside would be I/O outside the greenlet)."""
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        for n in range(3):
            uow.documents.add(title=f"{n}.pdf")
        uow.commit()
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        expected = list(uow.audit.exported(since=None, until=None, batch=2))

    async def export(aengine: AsyncEngine) -> list[dict[str, Any]]:
        async with AsyncUnitOfWork(aengine, tenant=tenant, user_id=user_id) as uow:
            events = await uow.audit.exported(since=None, until=None, batch=2)
            return [event async for event in events]

    assert len(expected) >= 3
    assert _run(export, database_url) == expected
