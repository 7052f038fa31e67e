"""Documents with extracted text, for tests and benchmarks of content search.

:func:`add_extracted_documents` writes, in one unit of work, a document per text with a first
revision (its content is not stored: no blob, no extraction job) and that revision's extracted
text, as the extraction handler stores it; the database's triggers build the search rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy.engine import Engine

from dms.uow import UnitOfWork


def add_extracted_documents(
    engine: Engine,
    tenant: str,
    user_id: uuid.UUID,
    texts: Sequence[Sequence[str]],
    *,
    first: int = 0,
) -> list[uuid.UUID]:
    """Create a document per entry of ``texts``; return their ids, in order.

    Each entry is a document's parts, each at most 16,000 characters. The documents go to the
    top level, titled ``doc N`` from ``doc {first}`` on (titles are unique per folder: a caller
    adding more later passes the next number).
    """
    created: list[uuid.UUID] = []
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        extracted: dict[uuid.UUID, tuple[str, list[str]]] = {}
        for number, parts in enumerate(texts):
            document = uow.documents.add(title=f"doc {first + number}")
            revision = uow.revisions.add(
                document.id,
                storage_key=f"texts/{document.id}",
                sha256="0" * 64,
                size_bytes=sum(len(part) for part in parts),
                mime_type="text/plain",
            )
            uow.documents.set_current_revision(document.id, revision.id)
            extracted[revision.id] = ("testing", list(parts))
            created.append(document.id)
        uow.search.store_texts(extracted)
        uow.commit()
    return created
