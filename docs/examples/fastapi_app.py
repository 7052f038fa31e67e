"""An asyncio service on dms.aio: an upload is a document, its revision and its job, or nothing.

Run it with ``uvicorn --factory docs.examples.fastapi_app:create_app`` (with ``DMS_DATABASE_URL``
set, or the embedded server); ``tests/integration/test_fastapi_example.py`` drives it through
httpx's ASGI transport. Who the user is comes from the caller's authentication, outside dms:
here a header stands in for it.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Header, Request
from fastapi.responses import JSONResponse
from sqlalchemy.engine import URL

import dms
from dms.aio import AsyncUnitOfWork, jobs, services

#: The job each upload enqueues with its document (a thumbnail, say).
THUMBNAIL = "thumbnail.make"
#: What a refusal of dms is answered with.
STATUS = {dms.NotFound: 404, dms.TenantNotFound: 404, dms.PermissionDenied: 403}


def create_app(database_url: str | URL | None = None) -> FastAPI:
    """The service, on the database of ``database_url`` (or dms's default)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.engine = dms.create_async_engine(database_url)
        yield
        await app.state.engine.dispose()

    app = FastAPI(lifespan=lifespan)

    @app.exception_handler(dms.DmsError)
    async def refused(request: Request, exc: dms.DmsError) -> JSONResponse:
        status = next((code for kind, code in STATUS.items() if isinstance(exc, kind)), 422)
        return JSONResponse({"error": str(exc)}, status_code=status)

    @app.post("/{tenant}/documents", status_code=201)
    async def upload(
        tenant: str,
        title: str,
        request: Request,
        x_user: uuid.UUID = Header(),  # noqa: B008 (FastAPI's way to read a header)
        tag: uuid.UUID | None = None,
    ) -> dict[str, str]:
        """Store the body as a new document's first revision, and enqueue its thumbnail."""
        data = await request.body()
        async with AsyncUnitOfWork(request.app.state.engine, tenant=tenant, user_id=x_user) as uow:
            document = await services.create_document(uow, title=title)
            revision = await services.add_revision(
                uow,
                document.id,
                storage_key=f"{tenant}/{document.id}/1",
                sha256=hashlib.sha256(data).hexdigest(),
                size_bytes=len(data),
                mime_type=request.headers.get("content-type", "application/octet-stream"),
            )
            await jobs.enqueue(uow, THUMBNAIL, {"revision": str(revision.id)}, tenant=tenant)
            if tag is not None:  # an unknown tag fails the request after everything else
                await services.tag_documents(uow, [document.id], [tag])
            await uow.commit()
        return {"document": str(document.id), "revision": str(revision.id)}

    @app.get("/{tenant}/documents/{document_id}")
    async def read(
        tenant: str,
        document_id: uuid.UUID,
        request: Request,
        x_user: uuid.UUID = Header(),  # noqa: B008
    ) -> dict[str, str]:
        """A document's title, as the user may see it."""
        async with AsyncUnitOfWork(request.app.state.engine, tenant=tenant, user_id=x_user) as uow:
            document = await uow.documents.get(document_id)
        return {"document": str(document.id), "title": document.title}

    return app
