"""Folders: the tree, sibling-name uniqueness, cycles, breadcrumbs, subtree trash and restore."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy.engine import Engine

from dms.domain import NewFolder
from dms.errors import AlreadyExists, InvariantViolation, NotFound, ValidationError
from dms.services import create_document, delete_folder, restore_folder
from dms.uow import UnitOfWork
from tests.conftest import tenant_unless_named


@pytest.fixture
def tenant(request: pytest.FixtureRequest, engine: Engine) -> Iterator[str]:
    """A test that does not name ``tenant`` commits nothing: it shares the module's."""
    yield from tenant_unless_named(request, engine)


@pytest.fixture
def uow(engine: Engine, tenant: str, user_id: uuid.UUID) -> UnitOfWork:
    return UnitOfWork(engine, tenant=tenant, user_id=user_id)


def names(folders: list) -> list[str]:  # type: ignore[type-arg]
    return [folder.name for folder in folders]


def test_create_children_path_subtree(uow: UnitOfWork) -> None:
    with uow:
        root = uow.folders.add(name="Finance")
        years = [uow.folders.add(name=n, parent_id=root.id) for n in ("2025", "2024")]
        march = uow.folders.add(name="March", parent_id=years[0].id)
        assert names(uow.folders.children(None)) == ["Finance"]
        assert names(uow.folders.children(root.id)) == ["2024", "2025"]
        assert names(uow.folders.path(march.id)) == ["Finance", "2025", "March"]
        assert names(uow.folders.subtree(root.id)) == ["Finance", "2024", "2025", "March"]
        assert uow.folders.get(march.id) == march


def test_sibling_names_unique_ignoring_case_top_level_too(uow: UnitOfWork) -> None:
    with uow:
        root = uow.folders.add(name="Legal")
        with pytest.raises(AlreadyExists, match="'LEGAL'"):
            uow.folders.add(name="LEGAL")
        uow.folders.add(name="Legal", parent_id=root.id)
        with pytest.raises(AlreadyExists):
            uow.folders.add(name="legal", parent_id=root.id)
        assert names(uow.folders.children(None)) == ["Legal"]


@pytest.mark.parametrize("name", ["", "  ", "a/b", "x" * 256, 7])
def test_bad_names(uow: UnitOfWork, name: object) -> None:
    with uow:
        with pytest.raises(ValidationError):
            uow.folders.add(name=name)  # type: ignore[arg-type]
        assert uow.folders.children(None) == []


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (".", "must not be '.' or '..'"),
        ("..", "must not be '.' or '..'"),
        ("a\x01b", "control character"),
        ("two\nlines", "control character"),
        ("tab\there", "control character"),
        ("del\x7f", "control character"),
        ("c1\x85", "control character"),
    ],
)
def test_names_a_path_cannot_carry_are_refused(uow: UnitOfWork, name: str, message: str) -> None:
    """A folder name is a segment of a path (``dms folders``, ``dms import --into``): no
    control characters (the importer shows them as Control Pictures), no ``.`` or ``..``."""
    with uow:
        kept = uow.folders.add(name="Kept")
        with pytest.raises(ValidationError, match=f"folder name .*{message}"):
            uow.folders.add(name=name)
        with pytest.raises(ValidationError, match=f"folder name .*{message}"):
            uow.folders.add_many([NewFolder(name=name, parent_id=kept.id)])
        with pytest.raises(ValidationError, match=f"folder name .*{message}"):
            uow.folders.rename(kept.id, name=name)
        assert names(uow.folders.subtree(kept.id)) == ["Kept"]
        assert names(uow.folders.children(None)) == ["Kept"]


@pytest.mark.parametrize("name", ["...", ".hidden", "a..b", "v1.2", "Ünïcödé", "a b"])
def test_names_with_dots_that_are_not_dot_segments_are_kept(uow: UnitOfWork, name: str) -> None:
    with uow:
        assert uow.folders.add(name=name).name == name


def test_unknown_parent(uow: UnitOfWork) -> None:
    with uow:
        with pytest.raises(NotFound):
            uow.folders.add(name="Orphan", parent_id=uuid.uuid4())
        with pytest.raises(NotFound):
            uow.folders.path(uuid.uuid4())
        with pytest.raises(NotFound):
            uow.folders.rename(uuid.uuid4(), name="x")


def test_rename_and_conflict(uow: UnitOfWork) -> None:
    with uow:
        uow.folders.add(name="Taken")
        folder = uow.folders.add(name="Free")
        assert uow.folders.rename(folder.id, name="Renamed").name == "Renamed"
        with pytest.raises(AlreadyExists):
            uow.folders.rename(folder.id, name="taken")
        assert uow.folders.get(folder.id).name == "Renamed"


def test_move(uow: UnitOfWork) -> None:
    with uow:
        a = uow.folders.add(name="A")
        b = uow.folders.add(name="B")
        moved = uow.folders.move(b.id, parent_id=a.id)
        assert moved.parent_id == a.id
        assert names(uow.folders.path(b.id)) == ["A", "B"]
        assert uow.folders.move(b.id, parent_id=None).parent_id is None


def test_move_under_own_descendant_is_refused(uow: UnitOfWork) -> None:
    with uow:
        a = uow.folders.add(name="A")
        b = uow.folders.add(name="B", parent_id=a.id)
        c = uow.folders.add(name="C", parent_id=b.id)
        with pytest.raises(InvariantViolation, match="own descendant"):
            uow.folders.move(a.id, parent_id=c.id)
        with pytest.raises(InvariantViolation, match="own"):
            uow.folders.move(a.id, parent_id=a.id)
        assert uow.folders.get(a.id).parent_id is None
        assert names(uow.folders.path(c.id)) == ["A", "B", "C"]


def test_depth_limit(uow: UnitOfWork) -> None:
    with uow:
        parent = None
        for level in range(32):
            parent = uow.folders.add(name=f"L{level}", parent_id=parent).id
        with pytest.raises(InvariantViolation):
            uow.folders.add(name="Too deep", parent_id=parent)


def test_soft_delete_subtree_with_documents_and_restore(uow: UnitOfWork) -> None:
    with uow:
        root = uow.folders.add(name="Projects")
        child = uow.folders.add(name="Alpha", parent_id=root.id)
        doc = create_document(uow, title="Plan.pdf", folder_id=child.id)
        earlier = create_document(uow, title="Old.pdf", folder_id=child.id)
        uow.documents.soft_delete(earlier.id, version=earlier.version)
        removal = delete_folder(uow, root.id)
        assert set(removal.folder_ids) == {root.id, child.id}
        assert removal.document_count == 1
        assert uow.folders.children(None) == []
        with pytest.raises(NotFound):
            uow.documents.get(doc.id)
        with pytest.raises(NotFound):
            uow.documents.add(title="Late.pdf", folder_id=child.id)
        restored = restore_folder(uow, root.id)
        assert restored.document_count == 1
        assert names(uow.folders.subtree(root.id)) == ["Projects", "Alpha"]
        assert uow.documents.get(doc.id).folder_id == child.id
        # A document deleted on its own before the folder stays in the trash.
        assert uow.documents.get(earlier.id, include_deleted=True).is_deleted


def test_restore_conflict_restores_nothing(uow: UnitOfWork) -> None:
    with uow:
        root = uow.folders.add(name="Reports")
        child = uow.folders.add(name="Q1", parent_id=root.id)
        delete_folder(uow, root.id)
        uow.folders.add(name="reports")
        with pytest.raises(AlreadyExists):
            restore_folder(uow, root.id)
        assert uow.folders.get(child.id, include_deleted=True).is_deleted


def test_restore_under_deleted_parent(uow: UnitOfWork) -> None:
    with uow:
        root = uow.folders.add(name="Root")
        child = uow.folders.add(name="Child", parent_id=root.id)
        delete_folder(uow, child.id)
        delete_folder(uow, root.id)
        with pytest.raises(InvariantViolation, match="restore that first"):
            restore_folder(uow, child.id)
        restore_folder(uow, root.id)
        assert names(uow.folders.children(root.id)) == []
        restore_folder(uow, child.id)
        assert names(uow.folders.children(root.id)) == ["Child"]
