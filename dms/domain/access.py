"""Access control as the domain sees it: rights, principals, groups and entries (docs/access.md).

A right is a bit of :class:`Rights`: ``VIEW``, ``EDIT`` (content, metadata, tags, title, move),
``DELETE`` (trash, restore, purge) and ``MANAGE`` (grant and revoke, owner, inheritance). Every
right implies ``VIEW`` and ``MANAGE`` implies all: :func:`check_rights` completes a set that
names less, so what is stored always reads the way it is enforced.

An entry grants rights to a principal (a user, a group, or everyone) on an object (a folder, a
document, or the tenant's root). Folders pass their entries on to everything below them unless
a folder stops inheriting. The owner of a folder or document holds every right on it. The
database enforces all of it (dms/schema/sql/access.sql): the domain only names and checks.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from dms.errors import ValidationError

from .validation import shown


class Rights(enum.IntFlag):
    """What an entry grants; combine with ``|``."""

    VIEW = 1
    EDIT = 2
    DELETE = 4
    MANAGE = 8


#: Every right: what everyone holds at the root of a tenant until its entries change.
ALL_RIGHTS = Rights.VIEW | Rights.EDIT | Rights.DELETE | Rights.MANAGE

_BY_NAME = {right.name.lower(): right for right in Rights if right.name is not None}


def check_rights(value: object) -> Rights:
    """Return ``value`` (:class:`Rights`, or names such as ``["view", "edit"]``) completed.

    Every right implies ``VIEW``; ``MANAGE`` implies every right. Raises
    :class:`~dms.errors.ValidationError` for an empty set, an unknown name or another type.
    """
    if isinstance(value, Rights) or (isinstance(value, int) and not isinstance(value, bool)):
        if not 1 <= int(value) <= int(ALL_RIGHTS):
            raise ValidationError(f"rights must be a non-empty set of Rights, got {shown(value)}")
        rights = Rights(int(value))
    elif isinstance(value, str) or not isinstance(value, Iterable):
        raise ValidationError(
            f"rights must be Rights or a list of names ({', '.join(_BY_NAME)}), got {shown(value)}"
        )
    else:
        rights = _from_names(list(value))
    return ALL_RIGHTS if Rights.MANAGE in rights else rights | Rights.VIEW


def _from_names(names: list[object]) -> Rights:
    if not names:
        raise ValidationError("rights must name at least one right")
    rights = Rights(0)
    for name in names:
        if not isinstance(name, str) or name.lower() not in _BY_NAME:
            raise ValidationError(f"unknown right {shown(name)}: one of {', '.join(_BY_NAME)}")
        rights |= _BY_NAME[name.lower()]
    return rights


def rights_names(rights: Rights) -> list[str]:
    """The names of ``rights``, weakest first (``["view", "edit"]``)."""
    return [name for name, right in _BY_NAME.items() if right in rights]


@dataclass(frozen=True)
class Group:
    """A group of users of the tenant."""

    id: uuid.UUID
    name: str
    created_at: datetime


@dataclass(frozen=True)
class AccessEntry:
    """``rights`` granted to a principal on an object.

    The principal is a user, a group or everyone (both ``None``); the object a folder, a
    document or the root (both ``None``).
    """

    id: uuid.UUID
    folder_id: uuid.UUID | None
    document_id: uuid.UUID | None
    user_id: uuid.UUID | None
    group_id: uuid.UUID | None
    rights: Rights
    created_at: datetime

    @property
    def for_everyone(self) -> bool:
        """Whether the entry grants everyone, rather than one user or group."""
        return self.user_id is None and self.group_id is None
