"""Every SQL expression on ``folders``: the tree, its paths and subtrees, the trash.

The database refuses cycles and trees deeper than :data:`~dms.schema.tenant.MAX_FOLDER_DEPTH`
(trigger ``folders_guard``); this module turns its refusals into clear errors. Other modules
that need a condition on folders (a document's live folder, a search below a folder) take it
from :func:`lock_live`, :func:`lock_live_many`, :func:`all_live_locked`, :func:`is_trashed`
and :func:`subtree_ids`.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY, insert
from sqlalchemy.engine import Row

from dms.domain import Folder, NewFolder
from dms.domain.validation import (
    check_flag,
    check_folder_name,
    check_id,
    check_optional_id,
)
from dms.driver_errors import ErrorFactory
from dms.errors import InvariantViolation, NotFound
from dms.schema import tenant as t
from dms.schema.recordsets import recordset

from . import _recordset, _rows
from ._base import Repository
from .errors import translated

_f = t.folders
COLUMNS = tuple(_f.c)
#: A folder by id, built once (as documents' ``_BY_ID``: a select built per call cost more than
#: the server's answer).
_BY_ID = sa.select(*COLUMNS).where(_f.c.id == sa.bindparam("folder_id"))
_LIVE_BY_ID = _BY_ID.where(_f.c.deleted_at.is_(None))


def folder(row: Row[Any]) -> Folder:
    """Return the folder in ``row``."""
    return _rows.build(Folder, row)


def lock_live(folder_id: uuid.UUID) -> sa.Select[tuple[uuid.UUID]]:
    """Return: the id of ``folder_id`` if it is live, locked against its deletion (FOR SHARE).

    A concurrent soft delete of the folder waits for the locking transaction, and it for the
    deletion: whatever is put into the folder never lands in a folder going to the trash.
    """
    return (
        sa.select(_f.c.id)
        .where(_f.c.id == folder_id, _f.c.deleted_at.is_(None))
        .with_for_update(read=True)
    )


def lock_live_many(folder_ids: Sequence[uuid.UUID]) -> sa.Select[tuple[uuid.UUID]]:
    """Return: the ids of the live ones of ``folder_ids``, locked as :func:`lock_live` does.

    In id order: two transactions locking overlapping sets never wait for each other crosswise.
    """
    return (
        sa.select(_f.c.id)
        .where(_recordset.any_of(_f.c.id, folder_ids), _f.c.deleted_at.is_(None))
        .order_by(_f.c.id)
        .with_for_update(read=True)
    )


def all_live_locked() -> sa.ColumnElement[bool]:
    """Return: the folders ``:folder_ids`` (``:folder_count`` distinct ids) are all live.

    For a bulk insert into those folders, in its ``WHERE``: an uncorrelated subquery, evaluated
    once before the first row, that locks the folders as :func:`lock_live_many` does (in id
    order, against their deletion). If one of them is missing or deleted, the statement
    inserts nothing; the caller tells that apart from "every name was taken" with
    :func:`lock_live_many`, which it needs only when nothing came back. No ids: true.
    """
    ids = sa.bindparam("folder_ids", type_=ARRAY(sa.Uuid()))
    locked = (
        sa.select(_f.c.id)
        .where(_f.c.id == sa.any_(ids), _f.c.deleted_at.is_(None))
        .order_by(_f.c.id)
        .with_for_update(read=True)
        .subquery("locked_folders")
    )
    found = sa.select(sa.func.count()).select_from(locked).scalar_subquery()
    return found == sa.bindparam("folder_count", type_=sa.Integer())


def folder_parameters(folder_ids: set[uuid.UUID | None]) -> dict[str, object]:
    """The parameters of :func:`all_live_locked` for ``folder_ids`` (``None``: no folder)."""
    wanted = sorted(i for i in folder_ids if i is not None)
    return {"folder_ids": wanted, "folder_count": len(wanted)}


def is_trashed(folder_id: sa.ColumnElement[uuid.UUID]) -> sa.ColumnElement[bool]:
    """Return: ``folder_id`` is the id of a folder in the trash."""
    return folder_id.in_(sa.select(_f.c.id).where(_f.c.deleted_at.is_not(None)))


def subtree_ids(folder_id: uuid.UUID) -> sa.CTE:
    """Return a recursive CTE of the ids of ``folder_id`` and its live descendants."""
    tree = (
        sa.select(_f.c.id)
        .where(_f.c.id == folder_id, _f.c.deleted_at.is_(None))
        .cte("subtree", recursive=True)
    )
    child = _f.alias("child")
    return tree.union_all(
        sa.select(child.c.id).where(child.c.parent_id == tree.c.id, child.c.deleted_at.is_(None))
    )


class FolderRepository(Repository):
    """Folders of one tenant."""

    def add(self, *, name: str, parent_id: uuid.UUID | None = None) -> Folder:
        """Create a folder under ``parent_id`` (top level if ``None``)."""
        check_folder_name(name)
        check_optional_id("parent folder", parent_id)
        author = self._actor()  # before any SQL, as the checks above
        self._require_live(parent_id)
        with translated(self._conn, f"folder {name!r} under {parent_id}", user=author):
            row = self._execute(
                sa.insert(_f)
                .values(name=name, parent_id=parent_id, created_by=author)
                .returning(*COLUMNS)
            ).one()
        return folder(row)

    def get(self, folder_id: uuid.UUID, *, include_deleted: bool = False) -> Folder:
        """Return the folder, or raise :class:`NotFound` (also for a deleted one by default)."""
        check_id("folder", folder_id)
        check_flag("include_deleted", include_deleted)
        query = _BY_ID if include_deleted else _LIVE_BY_ID
        row = self._execute(query, {"folder_id": folder_id}).one_or_none()
        if row is None:
            raise NotFound(f"folder {folder_id} does not exist")
        return folder(row)

    def rename(self, folder_id: uuid.UUID, *, name: str) -> Folder:
        """Rename a folder; raises :class:`AlreadyExists` if a sibling has the name."""
        check_id("folder", folder_id)
        check_folder_name(name)
        return self._update(folder_id, f"folder {name!r}", name=name)

    def move(self, folder_id: uuid.UUID, *, parent_id: uuid.UUID | None) -> Folder:
        """Move a folder under ``parent_id`` (top level if ``None``).

        Raises :class:`InvariantViolation` if ``parent_id`` is the folder or one of its
        descendants, or if the tree would get too deep.
        """
        check_id("folder", folder_id)
        check_optional_id("parent folder", parent_id)
        self._require_live(parent_id)
        refusals: dict[str, ErrorFactory] = {
            # The guard's rules by SQLSTATE: a Citus coordinator does not pass on their names.
            t.GUARD_SQLSTATES["folders_no_cycle"]: lambda: InvariantViolation(
                f"folder {folder_id} cannot move under itself or its own descendant {parent_id}"
            ),
            "ck_folders_not_own_parent": lambda: InvariantViolation(
                f"folder {folder_id} cannot be its own parent"
            ),
            t.GUARD_SQLSTATES["folders_max_depth"]: lambda: InvariantViolation(
                f"moving folder {folder_id} under {parent_id} would exceed the depth limit "
                f"of {t.MAX_FOLDER_DEPTH}"
            ),
        }
        return self._update(
            folder_id, f"folder {folder_id} under {parent_id}", refusals, parent_id=parent_id
        )

    def children(self, parent_id: uuid.UUID | None) -> list[Folder]:
        """Return the live folders directly under ``parent_id`` (top level if ``None``), by name."""
        check_optional_id("parent folder", parent_id)
        parent = _f.c.parent_id.is_(None) if parent_id is None else _f.c.parent_id == parent_id
        rows = self._execute(
            sa.select(*COLUMNS)
            .where(parent, _f.c.deleted_at.is_(None))
            .order_by(sa.func.lower(_f.c.name), _f.c.id)
        )
        return [folder(row) for row in rows]

    def path(self, folder_id: uuid.UUID) -> list[Folder]:
        """Return the breadcrumbs: the folders from the top level down to ``folder_id``."""
        check_id("folder", folder_id)
        path = (
            sa.select(*COLUMNS, sa.literal(0).label("height"))
            .where(_f.c.id == folder_id)
            .cte("path", recursive=True)
        )
        parent = _f.alias("parent")
        path = path.union_all(
            sa.select(*parent.c, (path.c.height + 1).label("height")).where(
                parent.c.id == path.c.parent_id
            )
        )
        rows = list(self._execute(sa.select(path).order_by(path.c.height.desc())))
        if not rows:
            raise NotFound(f"folder {folder_id} does not exist")
        return [folder(row) for row in rows]

    def subtree(self, folder_id: uuid.UUID) -> list[Folder]:
        """Return the folder and all its live descendants, parents before children."""
        self.get(folder_id)
        tree = subtree_ids(folder_id)
        rows = self._execute(
            sa.select(*COLUMNS)
            .join(tree, tree.c.id == _f.c.id)
            .order_by(sa.func.lower(_f.c.name), _f.c.id)
        )
        return _parents_first([folder(row) for row in rows], folder_id)

    def soft_delete_subtree(self, folder_id: uuid.UUID) -> tuple[list[uuid.UUID], datetime]:
        """Put the folder and its live descendants in the trash, all with one timestamp.

        The wall-clock time of this statement, not of the transaction, tells this deletion apart
        from earlier ones in the same transaction. Returns their ids and the timestamp, which
        :meth:`restore_subtree` uses to restore exactly what this deletion removed.
        """
        self.get(folder_id)
        # clock_timestamp() would differ from row to row: read it once.
        stamp = self._execute(sa.select(sa.func.clock_timestamp())).scalar_one()
        tree = subtree_ids(folder_id)
        ids = self._execute(
            sa.update(_f)
            .where(_f.c.id.in_(sa.select(tree.c.id)))
            .values(deleted_at=stamp, updated_at=sa.func.now())
            .returning(_f.c.id)
        ).scalars()
        return list(ids), stamp

    def restore_subtree(self, folder_id: uuid.UUID) -> tuple[Folder, list[uuid.UUID], datetime]:
        """Restore a deleted folder and the descendants deleted with it.

        Returns the folder, the restored ids and the deletion timestamp. Raises
        :class:`AlreadyExists` if a live sibling took its name meanwhile, and
        :class:`InvariantViolation` if its parent is still deleted.
        """
        deleted = self.get(folder_id, include_deleted=True)
        if deleted.deleted_at is None:
            raise InvariantViolation(f"folder {deleted.name!r} is not deleted")
        self._require_live_parent(deleted)
        ids = self._deleted_with(folder_id, deleted.deleted_at)
        with translated(self._conn, f"folder {deleted.name!r} under {deleted.parent_id}"):
            self._execute(
                sa.update(_f)
                .where(_f.c.id.in_(ids))
                .values(deleted_at=None, updated_at=sa.func.now())
            )
        return self.get(folder_id), ids, deleted.deleted_at

    def _deleted_with(self, folder_id: uuid.UUID, deleted_at: datetime) -> list[uuid.UUID]:
        tree = sa.select(_f.c.id).where(_f.c.id == folder_id).cte("deleted_tree", recursive=True)
        child = _f.alias("child")
        tree = tree.union_all(
            sa.select(child.c.id).where(
                child.c.parent_id == tree.c.id, child.c.deleted_at == deleted_at
            )
        )
        return list(self._execute(sa.select(tree.c.id)).scalars())

    def _require_live_parent(self, child: Folder) -> None:
        try:
            self._require_live(child.parent_id)
        except NotFound:
            raise InvariantViolation(
                f"folder {child.name!r} is in folder {child.parent_id}, which is deleted: "
                "restore that first"
            ) from None

    def add_many(self, folders: Sequence[NewFolder]) -> list[uuid.UUID | None]:
        """Create many folders in one statement; return their ids, one per input, in order.

        Made for imports: only ids come back, no rows to decode. A result is ``None`` where a
        live sibling already has the name (ignoring case), or an earlier folder of the same call
        took it: nothing is created for it and the others go on. Parents must exist before the
        call (create a tree level by level), live, or :class:`NotFound` is raised and nothing is
        created; they are locked against their deletion by the insert itself
        (:func:`all_live_locked`), one round trip in all. No savepoint: if the database refuses
        the statement, roll the unit of work back.
        """
        for folder in folders:
            check_folder_name(folder.name)
        if not folders:
            return []
        parents = {f.parent_id for f in folders}
        rows = [{"name": f.name, "parent_id": f.parent_id} for f in folders]
        author = self._actor()
        with translated(self._conn, f"{len(folders)} folders", savepoint=False, user=author):
            created = self._execute(
                _add_many_statement(),
                {
                    "folders": _recordset.encode(rows),
                    "created_by": author,
                    **folder_parameters(parents),
                },
            )
            by_key = {(row.parent_id, row.name): row.id for row in created}
        if not by_key:
            # Every name was taken, or a parent is missing (then nothing was inserted at all).
            self._require_all_live(parents)
        return [by_key.pop((f.parent_id, f.name), None) for f in folders]

    def _require_all_live(self, folder_ids: set[uuid.UUID | None]) -> None:
        wanted = sorted(i for i in folder_ids if i is not None)
        if not wanted:
            return
        found = self._execute(lock_live_many(wanted)).scalars().all()
        missing = sorted(set(wanted) - set(found))
        if missing:
            raise NotFound(f"folder {missing[0]} does not exist")

    def _require_live(self, folder_id: uuid.UUID | None) -> None:
        if folder_id is None:
            return
        if self._execute(lock_live(folder_id)).one_or_none() is None:
            raise NotFound(f"folder {folder_id} does not exist")

    def _update(
        self,
        folder_id: uuid.UUID,
        what: str,
        refusals: dict[str, ErrorFactory] | None = None,
        **values: Any,
    ) -> Folder:
        with translated(self._conn, what, constraints=refusals):
            row = self._execute(
                sa.update(_f)
                .where(_f.c.id == folder_id, _f.c.deleted_at.is_(None))
                .values(updated_at=sa.func.now(), **values)
                .returning(*COLUMNS)
            ).one_or_none()
        if row is None:
            raise NotFound(f"folder {folder_id} does not exist")
        return folder(row)


def _parents_first(folders: list[Folder], root_id: uuid.UUID) -> list[Folder]:
    # Depth-first from the root, siblings by name (the input order).
    children: dict[uuid.UUID | None, list[Folder]] = {}
    for each in folders:
        children.setdefault(each.parent_id, []).append(each)
    ordered: list[Folder] = []
    stack = [each for each in folders if each.id == root_id]
    while stack:
        current = stack.pop()
        ordered.append(current)
        stack.extend(reversed(children.get(current.id, [])))
    return ordered


@functools.cache
def _add_many_statement() -> sa.Executable:
    batch = recordset("folders", [("name", sa.Text()), ("parent_id", sa.Uuid())])
    rows = sa.select(
        batch.c.name, batch.c.parent_id, sa.bindparam("created_by", type_=sa.Uuid())
    ).where(all_live_locked())
    return (
        insert(_f)
        .from_select(["name", "parent_id", "created_by"], rows)
        .on_conflict_do_nothing(
            index_elements=[_f.c.parent_id, sa.func.lower(_f.c.name)],
            index_where=_f.c.deleted_at.is_(None),
        )
        .returning(_f.c.id, _f.c.parent_id, _f.c.name)
    )
