"""Use cases of tags: tag and untag documents, which changes what their readers saw."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from dms.uow import UnitOfWork


def tag_documents(
    uow: UnitOfWork, document_ids: Iterable[uuid.UUID], tag_ids: Iterable[uuid.UUID]
) -> int:
    """Link every document to every tag; return how many links are new.

    Bumps the version of each document that gained a tag, so that an update based on an
    earlier read raises :class:`~dms.errors.ConcurrentUpdate`; tagging itself takes no
    expected version (see :meth:`.DocumentRepository.record_change`). An unknown document or
    tag raises :class:`~dms.errors.NotFound` and links nothing.
    """
    linked = uow.tags.link(document_ids, tag_ids)
    uow.documents.record_change(linked)
    return len(linked)


def untag_documents(
    uow: UnitOfWork, document_ids: Iterable[uuid.UUID], tag_ids: Iterable[uuid.UUID]
) -> int:
    """Remove the links between the documents and the tags; return how many went.

    Bumps the version of each document that lost a tag (see :func:`tag_documents`).
    """
    unlinked = uow.tags.unlink(document_ids, tag_ids)
    uow.documents.record_change(unlinked)
    return len(unlinked)
