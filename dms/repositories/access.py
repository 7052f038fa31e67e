"""Every SQL expression on the access tables, as ``uow.access`` (docs/access.md).

Groups, members, entries, and the access columns of folders and documents (``owner_id``,
``inherits``).

The database enforces access (dms/schema/sql/access.sql): row-level security hides what the
actor may not view, and triggers refuse a change the actor has no right to (42501, raised here as
:class:`~dms.errors.PermissionDenied` by :meth:`Repository._execute`). This repository asks
before it writes whether the object is visible at all, so that an object the actor may not see
is :class:`~dms.errors.NotFound`, exactly as one that does not exist.
"""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.engine import Row
from sqlalchemy.sql.functions import Function

from dms import tenancy
from dms.domain.access import AccessEntry, Group, Rights, check_rights
from dms.domain.validation import (
    GROUP_NAME_MAX_CHARS,
    check_flag,
    check_id,
    check_name,
    check_optional_id,
)
from dms.errors import NotFound, ValidationError
from dms.schema import tenant as t

from . import _rows
from ._base import Repository
from .errors import translated

_groups = t.access_groups
_members = t.access_group_members
_entries = t.access_entries
#: The root's scope (an object that is neither a folder nor a document).
_ROOT = uuid.UUID(t.NIL_ID)


def _group(row: Row[Any]) -> Group:
    return _rows.build(Group, row)


def _entry(row: Row[Any]) -> AccessEntry:
    mapping = dict(row._mapping)
    mapping["rights"] = Rights(mapping["rights"])
    return AccessEntry(**{key: mapping[key] for key in AccessEntry.__dataclass_fields__})


class AccessRepository(Repository):
    """Groups and their members, access entries, owners and inheritance of one tenant."""

    def add_group(self, name: str) -> Group:
        """Create a group; needs ``MANAGE`` at the root. Raises AlreadyExists for a taken name."""
        checked = check_name("group", name, max_chars=GROUP_NAME_MAX_CHARS)
        with translated(self._conn, f"group {checked!r}"):
            row = self._execute(sa.insert(_groups).values(name=checked).returning(*_groups.c))
        return _group(row.one())

    def groups(self) -> list[Group]:
        """Every group of the tenant, by name."""
        query = sa.select(*_groups.c).order_by(sa.func.lower(_groups.c.name), _groups.c.id)
        return [_group(row) for row in self._execute(query)]

    def remove_group(self, group_id: uuid.UUID) -> None:
        """Delete a group with its memberships and entries; needs ``MANAGE`` at the root."""
        wanted = check_id("group", group_id)
        with translated(self._conn, f"group {wanted}"):
            removed = self._execute(sa.delete(_groups).where(_groups.c.id == wanted)).rowcount
        if not removed:
            raise NotFound(f"group {wanted} does not exist")

    def add_member(self, group_id: uuid.UUID, user_id: uuid.UUID) -> None:
        """Make ``user_id`` a member of ``group_id`` (again: no change)."""
        group, user = check_id("group", group_id), check_id("user", user_id)
        statement = insert(_members).values(group_id=group, user_id=user).on_conflict_do_nothing()
        with translated(self._conn, f"member {user} of group {group}", user=user):
            self._execute(statement)

    def remove_member(self, group_id: uuid.UUID, user_id: uuid.UUID) -> bool:
        """End a membership; return whether there was one."""
        group, user = check_id("group", group_id), check_id("user", user_id)
        statement = sa.delete(_members).where(
            _members.c.group_id == group, _members.c.user_id == user
        )
        with translated(self._conn, f"member {user} of group {group}"):
            return bool(self._execute(statement).rowcount)

    def members(self, group_id: uuid.UUID) -> list[uuid.UUID]:
        """The users of a group (none for a group that does not exist)."""
        group = check_id("group", group_id)
        query = (
            sa.select(_members.c.user_id)
            .where(_members.c.group_id == group)
            .order_by(_members.c.user_id)
        )
        return list(self._execute(query).scalars())

    def grant(
        self,
        rights: Rights | list[str],
        *,
        folder_id: uuid.UUID | None = None,
        document_id: uuid.UUID | None = None,
        user_id: uuid.UUID | None = None,
        group_id: uuid.UUID | None = None,
    ) -> AccessEntry:
        """Grant ``rights`` to a principal on an object, replacing what it held there before.

        The object is a folder, a document or the root (neither); the principal a user, a
        group or everyone (neither). Needs ``MANAGE`` on the object. Rights are completed
        (:func:`~dms.domain.access.check_rights`).
        """
        granted = check_rights(rights)
        where = self._visible_object(folder_id, document_id)
        principal = _principal(user_id, group_id)
        values = {**where, **principal, "rights": int(granted)}
        statement = (
            insert(_entries)
            .values(**values)
            .on_conflict_do_update(
                index_elements=[
                    _entries.c.folder_id,
                    _entries.c.document_id,
                    _entries.c.user_id,
                    _entries.c.group_id,
                ],
                set_={"rights": int(granted)},
            )
            .returning(*_entries.c)
        )
        with translated(self._conn, f"access entry {values}", user=user_id):
            return _entry(self._execute(statement).one())

    def revoke(
        self,
        *,
        folder_id: uuid.UUID | None = None,
        document_id: uuid.UUID | None = None,
        user_id: uuid.UUID | None = None,
        group_id: uuid.UUID | None = None,
    ) -> bool:
        """Remove what a principal was granted on an object; return whether it had an entry."""
        where = self._visible_object(folder_id, document_id)
        principal = _principal(user_id, group_id)
        statement = sa.delete(_entries).where(*_matching({**where, **principal}))
        with translated(self._conn, f"access entry {where} {principal}"):
            return bool(self._execute(statement).rowcount)

    def entries(
        self, *, folder_id: uuid.UUID | None = None, document_id: uuid.UUID | None = None
    ) -> list[AccessEntry]:
        """The entries of one object (the root for neither), oldest first."""
        where = self._visible_object(folder_id, document_id)
        query = (
            sa.select(*_entries.c)
            .where(*_matching(where, ("folder_id", "document_id")))
            .order_by(_entries.c.created_at, _entries.c.id)
        )
        return [_entry(row) for row in self._execute(query)]

    def set_inherits(self, folder_id: uuid.UUID, inherits: bool) -> None:
        """Let a folder inherit what is granted above it, or not; needs ``MANAGE`` on it."""
        folder = check_id("folder", folder_id)
        flag = check_flag("inherits", inherits)
        self._visible_object(folder, None)
        statement = sa.update(t.folders).where(t.folders.c.id == folder).values(inherits=flag)
        with translated(self._conn, f"folder {folder}"):
            self._execute(statement)

    def set_owner(
        self,
        owner_id: uuid.UUID | None,
        *,
        folder_id: uuid.UUID | None = None,
        document_id: uuid.UUID | None = None,
    ) -> None:
        """Give a folder or a document to ``owner_id`` (``None``: no owner); needs ``MANAGE``."""
        owner = check_optional_id("owner", owner_id)
        where = self._visible_object(folder_id, document_id)
        if not where:
            raise ValidationError("the root has no owner: name a folder or a document")
        table = t.folders if "folder_id" in where else t.documents
        object_id = next(iter(where.values()))
        statement = sa.update(table).where(table.c.id == object_id).values(owner_id=owner)
        with translated(self._conn, f"owner of {object_id}", user=owner):
            self._execute(statement)

    def owner(
        self, *, folder_id: uuid.UUID | None = None, document_id: uuid.UUID | None = None
    ) -> uuid.UUID | None:
        """The owner of a folder or a document (``None``: none)."""
        where = self._visible_object(folder_id, document_id)
        if not where:
            return None
        table = t.folders if "folder_id" in where else t.documents
        object_id = next(iter(where.values()))
        return self._execute(sa.select(table.c.owner_id).where(table.c.id == object_id)).scalar()

    def rights(
        self, *, folder_id: uuid.UUID | None = None, document_id: uuid.UUID | None = None
    ) -> Rights:
        """What the acting principal may do on a folder, a document or the root (neither)."""
        where = self._visible_object(folder_id, document_id)
        allows = self._function("access_allows")
        if not where:
            scope: Any = sa.literal(_ROOT, sa.Uuid)
            owner: Any = sa.null()
            source = None
        else:
            table = t.folders if "folder_id" in where else t.documents
            scope, owner, source = table.c.access_scope, table.c.owner_id, table
        checks = [allows(scope, owner, int(right)).label(right.name or "") for right in Rights]
        query = sa.select(*checks)
        if source is not None:
            query = query.where(source.c.id == next(iter(where.values())))
        row = self._execute(query).one()
        held = Rights(0)
        for right, allowed in zip(Rights, row, strict=True):
            if allowed:
                held |= right
        return held

    def _function(self, name: str) -> Any:
        schema = tenancy.schema_name(self._tenant)

        def call(*arguments: Any) -> Function[bool]:
            return Function(name, *arguments, packagenames=(schema,), type_=sa.Boolean)

        return call

    def _visible_object(
        self, folder_id: uuid.UUID | None, document_id: uuid.UUID | None
    ) -> dict[str, uuid.UUID]:
        """The object's column and id ({} for the root), or NotFound if the actor cannot see it.

        Row-level security answers: a folder or document the actor may not view is not found.
        """
        folder = check_optional_id("folder", folder_id)
        document = check_optional_id("document", document_id)
        if folder is not None and document is not None:
            raise ValidationError("name a folder or a document, not both")
        if folder is None and document is None:
            return {}
        table, object_id, column = (
            (t.folders, folder, "folder_id")
            if folder is not None
            else (t.documents, document, "document_id")
        )
        found = self._execute(sa.select(table.c.id).where(table.c.id == object_id)).first()
        if found is None:
            raise NotFound(f"{column.removesuffix('_id')} {object_id} does not exist")
        return {column: object_id}  # type: ignore[dict-item]


def _principal(user_id: uuid.UUID | None, group_id: uuid.UUID | None) -> dict[str, uuid.UUID]:
    user = check_optional_id("user", user_id)
    group = check_optional_id("group", group_id)
    if user is not None and group is not None:
        raise ValidationError("name a user or a group, not both (neither: everyone)")
    if user is not None:
        return {"user_id": user}
    return {"group_id": group} if group is not None else {}


def _matching(
    values: dict[str, uuid.UUID],
    columns: tuple[str, ...] = ("folder_id", "document_id", "user_id", "group_id"),
) -> list[sa.ColumnElement[bool]]:
    """Conditions on ``columns`` for exactly ``values`` (a column absent from it: NULL)."""
    return [
        _entries.c[name] == values[name] if name in values else _entries.c[name].is_(None)
        for name in columns
    ]
