"""The example FastAPI service of docs/examples, driven through httpx's ASGI transport.

An upload is atomic across the document, its revision and the job it enqueues; a request that
fails after all three leaves none of them; dms's refusals reach the client as statuses.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

import httpx
import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine

import dms
from dms.jobs.tables import processing_jobs
from dms.uow import UnitOfWork
from docs.examples.fastapi_app import THUMBNAIL, create_app

T = TypeVar("T")


def _serve(database_url: URL, talk: Callable[[httpx.AsyncClient], Awaitable[T]]) -> T:
    """Start the app (its lifespan too, which the ASGI transport does not run) and talk to it."""

    async def main() -> T:
        app = create_app(database_url)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://dms") as client:
                return await talk(client)

    return asyncio.run(main())


def _thumbnails(engine: Engine, tenant: str) -> int:
    query = (
        sa.select(sa.func.count())
        .select_from(processing_jobs)
        .where(processing_jobs.c.tenant == tenant, processing_jobs.c.kind == THUMBNAIL)
    )
    with engine.connect() as conn:
        return int(conn.scalar(query) or 0)


def _titles(engine: Engine, tenant: str) -> list[str]:
    with UnitOfWork(engine, tenant=tenant) as uow:
        return [d.title for d in uow.documents.search(dms.DocumentQuery()).items]


def test_an_upload_creates_the_document_its_revision_and_its_job(
    engine: Engine, database_url: URL, tenant: str, user_id: uuid.UUID
) -> None:
    async def talk(client: httpx.AsyncClient) -> tuple[httpx.Response, httpx.Response]:
        created = await client.post(
            f"/{tenant}/documents",
            params={"title": "Offer.pdf"},
            content=b"%PDF-1.7 offer",
            headers={"x-user": str(user_id), "content-type": "application/pdf"},
        )
        document = created.json()["document"]
        read = await client.get(f"/{tenant}/documents/{document}", headers={"x-user": str(user_id)})
        return created, read

    created, read = _serve(database_url, talk)
    assert created.status_code == 201, created.text
    assert read.json()["title"] == "Offer.pdf"
    with UnitOfWork(engine, tenant=tenant) as uow:
        (revision,) = uow.revisions.history(uuid.UUID(created.json()["document"]))
    assert str(revision.id) == created.json()["revision"]
    assert revision.mime_type == "application/pdf"
    assert _thumbnails(engine, tenant) == 1


def test_a_request_that_fails_after_its_writes_leaves_none_of_them(
    engine: Engine, database_url: URL, tenant: str, user_id: uuid.UUID
) -> None:
    async def talk(client: httpx.AsyncClient) -> httpx.Response:
        return await client.post(
            f"/{tenant}/documents",
            params={"title": "Offer.pdf", "tag": str(uuid.uuid4())},  # no such tag
            content=b"offer",
            headers={"x-user": str(user_id)},
        )

    response = _serve(database_url, talk)
    assert response.status_code == 404, response.text
    assert _titles(engine, tenant) == []
    assert _thumbnails(engine, tenant) == 0


def test_refusals_reach_the_client_as_statuses(
    database_url: URL, tenant: str, user_id: uuid.UUID
) -> None:
    async def talk(client: httpx.AsyncClient) -> list[int]:
        user = {"x-user": str(user_id)}
        missing = await client.get(f"/{tenant}/documents/{uuid.uuid4()}", headers=user)
        unknown = await client.get(f"/tnobody0000/documents/{uuid.uuid4()}", headers=user)
        hostile = await client.post(
            f"/{tenant}/documents", params={"title": "   "}, content=b"x", headers=user
        )
        return [missing.status_code, unknown.status_code, hostile.status_code]

    assert _serve(database_url, talk) == [404, 404, 422]
