"""A system principal creates as a user does (docs/access.md, "Who acts"): a folder, a document,
a revision, a tag, a metadata field. The rows name no user (``created_by`` and ``uploaded_by``
are ``None``; the object has no owner), and the audit trail names the principal. A unit of work
that names nobody still creates nothing. Through the application's role, as deployed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy.engine import Engine

from dms.errors import ValidationError
from dms.services import add_revision, define_field
from dms.testing.roles import application_engine
from dms.uow import UnitOfWork


@pytest.fixture
def app_engine(engine: Engine) -> Iterator[Engine]:
    """The application's role, set up as a deployment does."""
    application = application_engine(engine)
    yield application
    application.dispose()


def test_a_system_principal_creates_every_kind_of_object(app_engine: Engine, tenant: str) -> None:
    with UnitOfWork(app_engine, tenant=tenant, system="classifier") as uow:
        folder = uow.folders.add(name="Incoming")
        document = uow.documents.add(title="scan", folder_id=folder.id)
        revision = add_revision(
            uow,
            document.id,
            storage_key="k/system.txt",
            sha256="cd" * 32,
            size_bytes=3,
            mime_type="text/plain",
        )
        tag = uow.tags.add(name="scanned")
        field = define_field(uow, name="Language", field_type="string")
        uow.commit()

    with UnitOfWork(app_engine, tenant=tenant, system="classifier") as uow:
        assert (folder.created_by, folder.owner_id) == (None, None)
        assert (document.created_by, document.owner_id) == (None, None)
        assert revision.uploaded_by is None
        assert (tag.created_by, field.created_by) == (None, None)
        assert uow.documents.get(document.id).current_revision_id == revision.id
        events = uow.audit.events(system="classifier", limit=100).items
    assert {(e.object_type, e.action) for e in events} >= {
        ("folder", "create"),
        ("document", "create"),
        ("revision", "create"),
        ("tag", "create"),
        ("metadata_field", "create"),
    }
    assert {e.actor_id for e in events} == {None}


@pytest.mark.parametrize(
    "create",
    [
        lambda uow: uow.folders.add(name="Incoming"),
        lambda uow: uow.documents.add(title="scan"),
        lambda uow: uow.tags.add(name="scanned"),
        lambda uow: define_field(uow, name="Language", field_type="string"),
    ],
)
def test_nobody_named_creates_nothing(app_engine: Engine, tenant: str, create: object) -> None:
    with (
        UnitOfWork(app_engine, tenant=tenant) as uow,
        pytest.raises(ValidationError, match="needs someone who acts: a user or a system"),
    ):
        create(uow)  # type: ignore[operator]
