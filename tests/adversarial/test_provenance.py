"""Where imported content came from is as private as the content (finding 4 of the review,
docs/security.md): ``import_provenance`` names files, source paths, hashes and the importer, so a
row is visible only with its folder or document, and written only by whoever may edit that
object."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest
from sqlalchemy.engine import Engine

from dms.errors import PermissionDenied
from dms.repositories.imports import NewImportedEntry
from dms.uow import UnitOfWork
from tests.adversarial.conftest import World, raw_as, read_as_system, refused_as


@dataclass(frozen=True)
class Imported:
    """Provenance recorded by ``admin``: of ``doc`` (eve may view it), of the folder ``vault``
    and of ``secret`` in it (eve may view neither), and of eve's own document; none of
    ``agenda`` (in office: eve may view it) nor of ``payroll`` (in the vault)."""

    vault: uuid.UUID
    secret: uuid.UUID
    agenda: uuid.UUID
    payroll: uuid.UUID


@pytest.fixture
def imported(app_engine: Engine, world: World) -> Imported:
    with UnitOfWork(app_engine, tenant=world.tenant, user_id=world.admin) as uow:
        vault = uow.folders.add(name="vault")
        uow.access.set_inherits(vault.id, False)
        secret = uow.documents.add(title="salaries", folder_id=vault.id)
        agenda = uow.documents.add(title="agenda", folder_id=world.office)
        payroll = uow.documents.add(title="payroll", folder_id=vault.id)
        uow.imports.record(
            [
                _entry(world.office, b"minutes.txt", document_id=world.doc),
                _entry(None, b"vault", folder_id=vault.id),
                _entry(vault.id, b"salaries.xlsx", document_id=secret.id),
                _entry(world.eves, b"mine.txt", document_id=world.eve_doc),
            ]
        )
        uow.commit()
    return Imported(vault=vault.id, secret=secret.id, agenda=agenda.id, payroll=payroll.id)


def _entry(
    parent: uuid.UUID | None,
    name: bytes,
    *,
    folder_id: uuid.UUID | None = None,
    document_id: uuid.UUID | None = None,
) -> NewImportedEntry:
    return NewImportedEntry(
        parent_id=parent,
        source_name=name,
        source_path=b"/share/" + name,
        folder_id=folder_id,
        document_id=document_id,
        sha256=None if document_id is None else "ab" * 32,
    )


def test_a_user_lists_the_provenance_of_what_she_may_view_only(
    app_engine: Engine, world: World, imported: Imported
) -> None:
    with UnitOfWork(app_engine, tenant=world.tenant, user_id=world.eve) as uow:
        listed = uow.imports.imported_into([None, world.office, imported.vault, world.eves])

    assert sorted(e.source_name for e in listed) == [b"mine.txt", b"minutes.txt"]


def test_raw_sql_reads_no_provenance_of_hidden_objects(
    app_engine: Engine, world: World, imported: Imported
) -> None:
    seen = raw_as(app_engine, world, world.eve, "SELECT source_path FROM {s}.import_provenance")

    assert seen == 2
    assert len(read_as_system(app_engine, world, "SELECT 1 FROM {s}.import_provenance")) == 4


@pytest.mark.parametrize(
    "statement",
    [
        # Provenance claimed for a document she may only view.
        "DELETE FROM {s}.import_provenance WHERE document_id = '{doc}'",
        "UPDATE {s}.import_provenance SET sha256 = repeat('0', 64) WHERE document_id = '{doc}'",
        # Her own document's provenance moved onto one she may only view.
        "UPDATE {s}.import_provenance SET document_id = '{agenda}' WHERE document_id = '{mine}'",
    ],
)
def test_provenance_is_written_only_with_edit_on_its_object(
    app_engine: Engine, world: World, imported: Imported, statement: str
) -> None:
    before = read_as_system(app_engine, world, "SELECT * FROM {s}.import_provenance ORDER BY 1")
    aimed = (
        statement.replace("{doc}", str(world.doc))
        .replace("{mine}", str(world.eve_doc))
        .replace("{agenda}", str(imported.agenda))
    )

    assert refused_as(app_engine, world, world.eve, aimed) == "42501"
    assert read_as_system(app_engine, world, "SELECT * FROM {s}.import_provenance ORDER BY 1") == (
        before
    )


def test_no_provenance_is_inserted_for_an_object_she_may_not_edit(
    app_engine: Engine, world: World, imported: Imported
) -> None:
    with UnitOfWork(app_engine, tenant=world.tenant, user_id=world.eve) as uow:
        uow.connection.exec_driver_sql("SAVEPOINT probe")
        for parent, target in [(world.office, imported.agenda), (imported.vault, imported.payroll)]:
            with pytest.raises(PermissionDenied):
                uow.imports.record([_entry(parent, b"forged.txt", document_id=target)])
            uow.connection.exec_driver_sql("ROLLBACK TO SAVEPOINT probe")


def test_she_records_provenance_for_her_own_objects(
    app_engine: Engine, world: World, imported: Imported
) -> None:
    with UnitOfWork(app_engine, tenant=world.tenant, user_id=world.eve) as uow:
        made = uow.folders.add(name="from-share", parent_id=world.eves)
        uow.imports.record([_entry(world.eves, b"from-share", folder_id=made.id)])
        uow.commit()

    with UnitOfWork(app_engine, tenant=world.tenant, user_id=world.eve) as uow:
        names = sorted(e.source_name for e in uow.imports.imported_into([world.eves]))
    assert names == [b"from-share", b"mine.txt"]
