"""Hostile input at every domain entry point: stored intact, or refused with nothing changed.

For each entry point (the unit of work, every repository method, the use cases of
``dms.services``, the tenant functions and the users helpers), hypothesis draws values a careless
or hostile caller could pass: any text (NUL characters, lone surrogates, every Unicode category,
LIKE wildcards, lengths around each limit) and values of the wrong type (a ``str`` or an ``int``
where an id is expected, ``bytes``, floats, ``None``, ...). Each call must end in one of two ways:

* it returns, and what it stored reads back equal to what was given (*accepted intact*);
* it raises a :class:`~dms.errors.DmsError` of the kinds the entry point may raise (*refused*);
  a :class:`~dms.errors.ValidationError` before the value reached the driver (no statement
  carried it), and whatever the refusal, every tenant table is unchanged (row counts and a
  checksum of every row) and the unit of work still works.

Each call is made on both sides of the API: the unit of work, and the asyncio one (dms.aio runs
the same calls in SQLAlchemy's greenlet bridge, on psycopg's ``AsyncConnection``: a driver of
its own, whose errors must translate the same way).

Any other exception (a raw psycopg or Python error) fails the test. The examples are
derandomized, so CI runs the same ones every time; nothing is committed, so every example starts
from the same world. ``pytest --hypothesis-show-statistics`` (without ``-n``) prints, per entry
point, how many inputs were accepted intact and how many refused, and how.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import event as sa_event
from sqlalchemy.engine import Connection, Engine

from dms import provisioning, tenancy
from dms.aio import AsyncUnitOfWork
from dms.db import create_async_engine
from dms.domain import (
    Cursor,
    DocumentQuery,
    FieldType,
    MetadataField,
    MetadataFilter,
)
from dms.domain.validation import normalize_mime_type
from dms.errors import (
    AlreadyExists,
    ConcurrentUpdate,
    DmsError,
    InvalidTenantName,
    InvariantViolation,
    NotFound,
    TenantNotFound,
    ValidationError,
)
from dms.schema import tenant as t
from dms.services import (
    add_revision,
    clear_value,
    create_document,
    define_field,
    delete_folder,
    restore_folder,
    search_documents,
    set_value,
    set_values,
    tag_documents,
    untag_documents,
)
from dms.uow import UnitOfWork
from dms.users import create_user, users_stand_in
from tests.conftest import new_slug
from tests.hostile import NOT_TEXT, Tally, checksums, texts

#: Examples per entry point of text and values (about 50 of them; typed ones below): the module
#: takes about 40 s alone on two cores shared with other work, about half that over ``-n 2``.
EXAMPLES = 25

TENANT_TABLES = [table for table in t.metadata.sorted_tables if table.schema is None]

# --- values -----------------------------------------------------------------------------------

TEXT = texts([99, 100, 101, 199, 200, 201, 254, 255, 256, 499, 500, 501, 1000, 1001])
ANYTHING = st.one_of(TEXT, NOT_TEXT)
#: Ids as a caller might get them wrong: the right type, its text, or anything else.
IDS = st.one_of(st.uuids(), st.uuids().map(str), ANYTHING)


def ids_of(*known: uuid.UUID) -> st.SearchStrategy[Any]:
    """Ids that name ``known`` rows as often as they are wrong, as an id or in a list."""
    one = st.one_of(st.sampled_from(known), st.sampled_from(known).map(str), IDS)
    return st.one_of(st.sampled_from(known), one, st.lists(one, max_size=2), st.just([]))


URLS = st.one_of(TEXT.map(lambda tail: "https://example.org/" + tail), TEXT)
MIME_TYPES = st.one_of(TEXT.map(lambda tail: "text/plain" + tail), TEXT)
DIGESTS = st.one_of(
    st.binary(min_size=1, max_size=8).map(lambda data: hashlib.sha256(data).hexdigest()),
    st.binary(min_size=1, max_size=8).map(lambda data: hashlib.sha256(data).hexdigest()),
    st.binary(min_size=1, max_size=8).map(lambda data: hashlib.sha256(data).hexdigest().upper()),
    TEXT,
)


# --- the world every example starts from ------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class World:
    """A committed tenant with one row of everything; examples never commit."""

    tenant: str
    user: uuid.UUID
    folder_id: uuid.UUID
    document_id: uuid.UUID
    document_version: int
    tag_id: uuid.UUID
    revision_id: uuid.UUID
    fields: Mapping[FieldType, MetadataField]
    snapshot: tuple[tuple[Any, ...], ...] = ()

    def field_of(self, kind: FieldType) -> MetadataField:
        return self.fields[kind]


def snapshot(conn: Connection) -> tuple[tuple[Any, ...], ...]:
    """Row count and checksum of every tenant table, in one query on ``conn`` (routed)."""
    return checksums(conn, TENANT_TABLES)


@pytest.fixture(scope="module")
def world(engine: Engine) -> Iterator[World]:
    slug = new_slug()
    provisioning.create_tenant(engine, slug)
    with engine.begin() as conn:
        user = create_user(conn, email=f"{uuid.uuid4().hex}@example.org", display_name="World")
    with UnitOfWork(engine, tenant=slug, user_id=user) as uow:
        folder = uow.folders.add(name="Invoices")
        document = uow.documents.add(title="Doc.pdf", folder_id=folder.id)
        tag = uow.tags.add(name="paid")
        fields = {
            kind: define_field(
                uow,
                name=f"F {kind.value}",
                field_type=kind,
                options=["Red", "Green"] if kind.has_options else [],
            )
            for kind in FieldType
        }
        revision = add_revision(
            uow,
            document.id,
            storage_key="world/1",
            sha256=hashlib.sha256(b"world").hexdigest(),
            size_bytes=5,
            mime_type="text/plain",
        )
        version = uow.documents.get(document.id).version
        uow.commit()
    with UnitOfWork(engine, tenant=slug) as uow:
        state = snapshot(uow.connection)
    yield World(
        tenant=slug,
        user=user,
        folder_id=folder.id,
        document_id=document.id,
        document_version=version,
        tag_id=tag.id,
        revision_id=revision.id,
        fields=fields,
        snapshot=state,
    )
    provisioning.drop_tenant(engine, slug)


# --- what an example checks -------------------------------------------------------------------


def _flattened(parameters: object) -> Iterator[object]:
    if isinstance(parameters, Mapping):
        for value in parameters.values():
            yield from _flattened(value)
    elif isinstance(parameters, (list, tuple)):
        for value in parameters:
            yield from _flattened(value)
    else:
        yield parameters


def carries(parameter: object, value: object) -> bool:
    """Whether a statement parameter is (or, for text, contains) the refused ``value``."""
    if isinstance(value, str) and value:
        return isinstance(parameter, str) and value in parameter
    try:
        return type(parameter) is type(value) and bool(parameter == value)
    except ArithmeticError:  # a signalling NaN refuses to be compared
        return False


@contextmanager
def sent_parameters(engine: Engine) -> Iterator[list[object]]:
    """The parameters of every statement sent through ``engine`` in the block, flattened."""
    sent: list[object] = []

    def record(**arguments: Any) -> None:
        sent.extend(_flattened(arguments["parameters"]))

    sa_event.listen(engine, "before_cursor_execute", record, named=True)
    try:
        yield sent
    finally:
        sa_event.remove(engine, "before_cursor_execute", record)


#: The values to draw: a strategy, or one made from the world (to draw its ids too).
Values = st.SearchStrategy[Any] | Callable[[World], st.SearchStrategy[Any]]
#: A call of an entry point with a drawn value; returns what the round trip compares.
Call = Callable[[UnitOfWork, World, Any], object]
#: Reads back what a call stored: returns (what was stored, what it should equal).
ReadBack = Callable[[UnitOfWork, World, Any, Any], tuple[object, object]]


def returned(uow: UnitOfWork, world: World, value: Any, result: Any) -> tuple[object, object]:
    """For lookups and calls that store nothing: having returned is the whole success."""
    return None, None


@dataclass(frozen=True)
class EntryPoint:
    """An entry point, the values to try on it, and how to read back what it stored."""

    name: str
    values: Values
    call: Call
    read_back: ReadBack = returned
    refusals: tuple[type[DmsError], ...] = (ValidationError,)


#: Outcomes of this run, by entry point: ``pytest`` without ``-n`` prints them at the end.
TALLY = Tally("hostile input")
outcome = TALLY.outcome


@pytest.fixture(scope="module", autouse=True)
def figures(request: pytest.FixtureRequest) -> Iterator[None]:
    """At the end of the module, print what was tried, accepted intact and refused."""
    yield from TALLY.report_after(request)


#: Where an entry point is called: the unit of work, or the asyncio unit of work (dms.aio), where
#: the same calls run in SQLAlchemy's greenlet bridge on psycopg's AsyncConnection.
SIDES = ("sync", "async")


class Sides:
    """Where calls are made: a unit of work on ``engine``, or dms.aio on one event loop.

    The asyncio side keeps one loop and one pool for the module (a pooled asyncio connection
    belongs to the loop that opened it): a loop and a connection per example cost ten times
    the call itself.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._loop = asyncio.new_event_loop()
        self._async_engine = create_async_engine(engine.url)

    def run(
        self, world: World, entry: EntryPoint, value: Any, *, side: str, refused: bool = False
    ) -> None:
        """Call ``entry`` with ``value`` in a never-committed unit of work of ``side``; check it.

        With ``refused``, the value must be refused with a :class:`ValidationError`.
        """
        if side == "sync":
            with UnitOfWork(self.engine, tenant=world.tenant, user_id=world.user) as uow:
                check(uow, self.engine, world, entry, value, refused=refused)
            return
        self._loop.run_until_complete(self._bridged(world, entry, value, refused=refused))

    async def _bridged(self, world: World, entry: EntryPoint, value: Any, *, refused: bool) -> None:
        aengine = self._async_engine
        async with AsyncUnitOfWork(aengine, tenant=world.tenant, user_id=world.user) as uow:
            await uow.run(check, aengine.sync_engine, world, entry, value, refused=refused)

    def close(self) -> None:
        """Close the asyncio side's pool and loop."""
        self._loop.run_until_complete(self._async_engine.dispose())
        self._loop.close()


@pytest.fixture(scope="module")
def sides(engine: Engine) -> Iterator[Sides]:
    """Both sides of the API for this module."""
    made = Sides(engine)
    yield made
    made.close()


def check(
    uow: UnitOfWork, engine: Engine, world: World, entry: EntryPoint, value: Any, *, refused: bool
) -> None:
    """The call of ``entry`` on ``uow`` ends accepted intact, or refused with nothing changed."""
    try:
        with sent_parameters(engine) as sent:
            result = entry.call(uow, world, value)
    except DmsError as refusal:
        allowed = (ValidationError,) if refused else entry.refusals
        if not isinstance(refusal, allowed):
            pytest.fail(f"{entry.name} refused with {refusal!r}")
        if isinstance(refusal, ValidationError):
            assert not [p for p in sent if carries(p, value)], "the value reached SQL"
        assert snapshot(uow.connection) == world.snapshot
        outcome(entry.name, f"refused ({type(refusal).__name__})")
        return
    assert not refused, f"{entry.name} accepted {value!r}"
    stored, expected = entry.read_back(uow, world, value, result)
    assert stored == expected
    outcome(entry.name, "accepted intact")


# --- the entry points -------------------------------------------------------------------------

NAMED = (ValidationError, AlreadyExists)
LOOKED_UP = (ValidationError, NotFound)


def _title(uow: UnitOfWork, world: World, value: Any, result: Any) -> tuple[object, object]:
    return uow.documents.get(result.id).title, value


def _folder_name(uow: UnitOfWork, world: World, value: Any, result: Any) -> tuple[object, object]:
    return uow.folders.get(result.id).name, value


def _tag_name(uow: UnitOfWork, world: World, value: Any, result: Any) -> tuple[object, object]:
    return uow.tags.get(result.id).name, value


def _field_name(uow: UnitOfWork, world: World, value: Any, result: Any) -> tuple[object, object]:
    return uow.metadata.get_field(result.id).name, value


def _option(uow: UnitOfWork, world: World, value: Any, result: Any) -> tuple[object, object]:
    options = {o.id: o.value for o in uow.metadata.get_field(result.field_id).options}
    return options[result.id], value


def _only_option(uow: UnitOfWork, world: World, value: Any, result: Any) -> tuple[object, object]:
    return [o.value for o in uow.metadata.get_field(result.id).options], value


def _add_revision(part: str) -> tuple[Call, ReadBack]:
    """``add_revision`` with ``part`` (storage_key, sha256, size_bytes, mime_type) drawn."""

    def call(uow: UnitOfWork, world: World, value: Any) -> object:
        described: dict[str, Any] = {
            "storage_key": f"keys/{uuid.uuid4()}",
            "sha256": hashlib.sha256(b"x").hexdigest(),
            "size_bytes": 1,
            "mime_type": "application/pdf",
        }
        return add_revision(uow, world.document_id, **{**described, part: value})

    def read_back(uow: UnitOfWork, world: World, value: Any, result: Any) -> tuple[object, object]:
        # A MIME type is stored in its one normalised spelling (issue 15): text/SGML is
        # text/sgml, the same type.
        expected = normalize_mime_type(value) if part == "mime_type" else value
        return getattr(uow.revisions.get(result.id), part), expected

    return call, read_back


def _value_read_back(kind: FieldType) -> ReadBack:
    def read_back(uow: UnitOfWork, world: World, value: Any, result: Any) -> tuple[object, object]:
        field_ = world.field_of(kind)
        stored = uow.metadata.values_of(world.document_id)[field_.id]
        return stored, _expected_value(field_, value)

    return read_back


def _expected_value(field_: MetadataField, value: Any) -> object:
    if field_.field_type is FieldType.DECIMAL:
        return Decimal(value)
    if field_.field_type is FieldType.SELECT:
        return _option_id(field_, value)
    if field_.field_type is FieldType.MULTI_SELECT:
        return frozenset(_option_id(field_, item) for item in value)
    return value


def _option_id(field_: MetadataField, value: Any) -> uuid.UUID:
    for option in field_.options:
        named = isinstance(value, str) and option.value.casefold() == value.casefold()
        if option.id == value or named:
            return option.id
    raise AssertionError(f"{value!r} names no option of {field_.name!r}")


def _option_choices(kind: FieldType) -> st.SearchStrategy[Any]:
    names = st.sampled_from(["Red", "green", "GREEN", "red ", "Blue"])
    if kind is FieldType.SELECT:
        return st.one_of(names, names, ANYTHING)
    return st.one_of(st.lists(names, min_size=1, max_size=3), st.lists(ANYTHING, max_size=2))


VALUES: dict[FieldType, st.SearchStrategy[Any]] = {
    FieldType.STRING: st.one_of(TEXT, ANYTHING),
    FieldType.TEXT: st.one_of(TEXT, ANYTHING),
    FieldType.INT: st.one_of(
        st.integers(-(2**63) - 1, 2**63), st.sampled_from([-(2**63), 2**63 - 1]), ANYTHING
    ),
    FieldType.DECIMAL: st.one_of(
        st.decimals(allow_nan=True, allow_infinity=True), st.integers().map(str), ANYTHING
    ),
    FieldType.DATE: st.one_of(st.dates(), st.datetimes(), ANYTHING),
    FieldType.BOOL: st.one_of(st.booleans(), st.booleans(), ANYTHING),
    FieldType.URL: URLS,
    FieldType.SELECT: _option_choices(FieldType.SELECT),
    FieldType.MULTI_SELECT: _option_choices(FieldType.MULTI_SELECT),
}


def _set_value(kind: FieldType) -> Call:
    def call(uow: UnitOfWork, world: World, value: Any) -> object:
        return set_value(uow, world.document_id, world.field_of(kind).id, value)

    return call


def _search(query: Callable[[Any], DocumentQuery]) -> Call:
    return lambda uow, world, value: search_documents(uow, query(value))


ENTRY_POINTS: list[EntryPoint] = [
    # documents
    EntryPoint(
        "documents.add(title)",
        TEXT,
        lambda uow, world, value: uow.documents.add(title=value),
        _title,
        NAMED,
    ),
    EntryPoint(
        "documents.rename(title)",
        TEXT,
        lambda uow, world, value: uow.documents.rename(
            world.document_id, title=value, version=world.document_version
        ),
        _title,
        NAMED,
    ),
    EntryPoint(
        "documents.rename(version)",
        lambda world: st.one_of(
            st.just(world.document_version),
            st.integers(-1, 3),
            st.sampled_from([2**31 - 1, 2**31, 2**63]),
            ANYTHING,
        ),
        lambda uow, world, value: uow.documents.rename(
            world.document_id, title="Renamed.pdf", version=value
        ),
        lambda uow, world, value, result: (uow.documents.get(result.id).version, value + 1),
        (ValidationError, ConcurrentUpdate),
    ),
    EntryPoint(
        "create_document(title)",
        TEXT,
        lambda uow, world, value: create_document(uow, title=value),
        _title,
        NAMED,
    ),
    EntryPoint(
        "create_document(tag_ids)",
        lambda world: ids_of(world.tag_id),
        lambda uow, world, value: create_document(uow, title="Tagged.pdf", tag_ids=value),
        lambda uow, world, value, result: (
            {tag.id for tag in uow.tags.tags_of(result.id)},
            {value} if isinstance(value, uuid.UUID) else set(value),
        ),
        LOOKED_UP,
    ),
    EntryPoint(
        "documents.get(document_id)",
        lambda world: ids_of(world.document_id),
        lambda uow, world, value: uow.documents.get(value),
        refusals=LOOKED_UP,
    ),
    EntryPoint(
        "documents.get(include_deleted)",
        st.one_of(st.booleans(), ANYTHING),
        lambda uow, world, value: uow.documents.get(world.document_id, include_deleted=value),
    ),
    EntryPoint(
        "documents.move(folder_id)",
        lambda world: st.one_of(st.none(), ids_of(world.folder_id)),
        lambda uow, world, value: uow.documents.move(
            world.document_id, folder_id=value, version=world.document_version
        ),
        lambda uow, world, value, result: (uow.documents.get(result.id).folder_id, value),
        LOOKED_UP,
    ),
    EntryPoint(
        "documents.trash(limit)",
        st.one_of(st.integers(-1, 1001), ANYTHING),
        lambda uow, world, value: uow.documents.trash(limit=value),
    ),
    EntryPoint(
        "documents.trash(deleted_before)",
        st.one_of(
            st.datetimes(timezones=st.just(timezone.utc)), st.datetimes(), st.dates(), ANYTHING
        ),
        lambda uow, world, value: uow.documents.trash(deleted_before=value),
    ),
    EntryPoint(
        "documents.trash(after)",
        lambda world: st.one_of(st.none(), st.just(world.document_id), ANYTHING),
        lambda uow, world, value: uow.documents.trash(after=value),
    ),
    EntryPoint(
        "documents.with_any_tag(tag_ids)",
        lambda world: ids_of(world.tag_id),
        lambda uow, world, value: uow.documents.with_any_tag(value),
    ),
    # folders
    EntryPoint(
        "folders.add(name)",
        TEXT,
        lambda uow, world, value: uow.folders.add(name=value),
        _folder_name,
        NAMED,
    ),
    EntryPoint(
        "folders.rename(name)",
        TEXT,
        lambda uow, world, value: uow.folders.rename(world.folder_id, name=value),
        _folder_name,
        NAMED,
    ),
    EntryPoint(
        "folders.add(parent_id)",
        lambda world: st.one_of(st.none(), ids_of(world.folder_id)),
        lambda uow, world, value: uow.folders.add(name="Child", parent_id=value),
        lambda uow, world, value, result: (uow.folders.get(result.id).parent_id, value),
        LOOKED_UP,
    ),
    EntryPoint(
        "folders.path(folder_id)",
        lambda world: ids_of(world.folder_id),
        lambda uow, world, value: uow.folders.path(value),
        refusals=LOOKED_UP,
    ),
    # tags
    EntryPoint(
        "tags.add(name)", TEXT, lambda uow, world, value: uow.tags.add(name=value), _tag_name, NAMED
    ),
    EntryPoint(
        "tags.rename(name)",
        TEXT,
        lambda uow, world, value: uow.tags.rename(world.tag_id, name=value),
        _tag_name,
        NAMED,
    ),
    EntryPoint(
        "tags.get_by_name(name)",
        ANYTHING,
        lambda uow, world, value: uow.tags.get_by_name(value),
        refusals=LOOKED_UP,
    ),
    EntryPoint(
        "tag_documents(document_ids)",
        lambda world: ids_of(world.document_id),
        lambda uow, world, value: tag_documents(uow, value, [world.tag_id]),
        lambda uow, world, value, result: (
            {d.id for d in uow.documents.with_any_tag([world.tag_id])},
            {value} if isinstance(value, uuid.UUID) else set(value),
        ),
        LOOKED_UP,
    ),
    # metadata fields and options
    EntryPoint(
        "define_field(name)",
        TEXT,
        lambda uow, world, value: define_field(uow, name=value, field_type="string"),
        _field_name,
        NAMED,
    ),
    EntryPoint(
        "define_field(field_type)",
        st.one_of(
            st.sampled_from(FieldType),
            st.sampled_from([kind.value for kind in FieldType]),
            st.sampled_from([kind.value.upper() + " " for kind in FieldType]),
            ANYTHING,
        ),
        lambda uow, world, value: define_field(uow, name="Typed", field_type=value),
        lambda uow, world, value, result: (
            uow.metadata.get_field(result.id).field_type,
            FieldType(value),
        ),
    ),
    EntryPoint(
        "define_field(required)",
        st.one_of(st.booleans(), ANYTHING),
        lambda uow, world, value: define_field(
            uow, name="Required", field_type="string", required=value, default="x"
        ),
        lambda uow, world, value, result: (uow.metadata.get_field(result.id).required, value),
    ),
    EntryPoint(
        "define_field(options)",
        st.one_of(st.lists(TEXT, max_size=2), ANYTHING),
        lambda uow, world, value: define_field(
            uow, name="Choice", field_type="multi_select", options=value
        ),
        _only_option,
        NAMED,
    ),
    EntryPoint(
        "metadata.rename_field(name)",
        TEXT,
        lambda uow, world, value: uow.metadata.rename_field(
            world.field_of(FieldType.INT).id, name=value
        ),
        _field_name,
        NAMED,
    ),
    EntryPoint(
        "metadata.get_field_by_name(name)",
        ANYTHING,
        lambda uow, world, value: uow.metadata.get_field_by_name(value),
        refusals=LOOKED_UP,
    ),
    EntryPoint(
        "metadata.add_option(value)",
        TEXT,
        lambda uow, world, value: uow.metadata.add_option(
            world.field_of(FieldType.SELECT).id, value
        ),
        _option,
        NAMED,
    ),
    EntryPoint(
        "metadata.rename_option(value)",
        TEXT,
        lambda uow, world, value: uow.metadata.rename_option(
            world.field_of(FieldType.SELECT).options[0].id, value=value
        ),
        _option,
        NAMED,
    ),
    EntryPoint(
        "metadata.get_fields(field_ids)",
        lambda world: ids_of(*(field.id for field in world.fields.values())),
        lambda uow, world, value: uow.metadata.get_fields(value),
        refusals=LOOKED_UP,
    ),
    # metadata values, one entry point per type
    *(
        EntryPoint(
            f"set_value({kind.value})",
            VALUES[kind],
            _set_value(kind),
            _value_read_back(kind),
        )
        for kind in FieldType
    ),
    # revisions
    EntryPoint("add_revision(storage_key)", TEXT, *_add_revision("storage_key"), NAMED),
    EntryPoint("add_revision(sha256)", DIGESTS, *_add_revision("sha256")),
    EntryPoint(
        "add_revision(size_bytes)",
        st.one_of(st.integers(-1, 2**63), st.sampled_from([0, 2**63 - 1]), ANYTHING),
        *_add_revision("size_bytes"),
    ),
    EntryPoint("add_revision(mime_type)", MIME_TYPES, *_add_revision("mime_type")),
    EntryPoint(
        "revisions.find_by_sha256(sha256)",
        st.one_of(DIGESTS, ANYTHING),
        lambda uow, world, value: uow.revisions.find_by_sha256(value),
    ),
    EntryPoint(
        "revisions.current(document_id)",
        lambda world: ids_of(world.document_id),
        lambda uow, world, value: uow.revisions.current(value),
        refusals=LOOKED_UP,  # a document not there is NotFound, as one the user may not view
    ),
    # search
    EntryPoint(
        "search_documents(title_contains)",
        ANYTHING,
        _search(lambda value: DocumentQuery(title_contains=value)),
    ),
    EntryPoint(
        "search_documents(folder_id)",
        lambda world: st.one_of(st.none(), ids_of(world.folder_id)),
        _search(lambda value: DocumentQuery(folder_id=value)),
    ),
    EntryPoint(
        "search_documents(tags_all)",
        lambda world: st.one_of(
            st.frozensets(st.sampled_from([world.tag_id, uuid.uuid4()]), max_size=2),
            ids_of(world.tag_id),
        ),
        _search(lambda value: DocumentQuery(tags_all=value)),
    ),
    EntryPoint(
        "search_documents(metadata equals)",
        st.tuples(st.sampled_from(list(FieldType)), ANYTHING),
        lambda uow, world, value: search_documents(
            uow,
            DocumentQuery(
                metadata=(MetadataFilter(field_id=world.field_of(value[0]).id, equals=value[1]),)
            ),
        ),
        refusals=LOOKED_UP,
    ),
    EntryPoint(
        "search_documents(limit)",
        st.one_of(st.integers(-1, 1001), st.sampled_from([1, 1000]), ANYTHING),
        lambda uow, world, value: search_documents(uow, DocumentQuery(), limit=value),
    ),
    EntryPoint(
        "search_documents(after=Cursor.decode(token))",
        st.one_of(
            st.tuples(TEXT, st.uuids()).map(
                lambda pair: Cursor(title_key=pair[0], id=pair[1]).encode()
            ),
            ANYTHING,
        ),
        lambda uow, world, value: search_documents(
            uow, DocumentQuery(), after=Cursor.decode(value)
        ),
    ),
    # content search
    EntryPoint(
        "search_documents(text)",
        ANYTHING,
        _search(lambda value: DocumentQuery(text=value)),
    ),
    EntryPoint(
        "search_documents(text, after=Cursor.decode(token))",
        st.one_of(
            st.tuples(st.floats(), st.uuids()).map(
                lambda pair: Cursor(title_key="", id=pair[1], rank=pair[0]).encode()
            ),
            ANYTHING,
        ),
        lambda uow, world, value: search_documents(
            uow, DocumentQuery(text="doc"), after=Cursor.decode(value)
        ),
    ),
    EntryPoint(
        "search.store_text(parts)",
        st.one_of(st.lists(TEXT, max_size=3), ANYTHING),
        lambda uow, world, value: uow.search.store_text(
            world.revision_id, extractor="text", parts=value
        ),
        lambda uow, world, value, result: (uow.search.text_of(world.revision_id), list(value)),
    ),
    EntryPoint(
        "search.set_config(name)",
        st.one_of(st.sampled_from(["simple", "english", "german"]), ANYTHING),
        lambda uow, world, value: uow.search.set_config(value),
        lambda uow, world, value, result: (uow.search.config(), value),
    ),
]


def _gone(exists: Call) -> ReadBack:
    """Read back a deletion: the row is no longer found."""

    def read_back(uow: UnitOfWork, world: World, value: Any, result: Any) -> tuple[object, object]:
        try:
            exists(uow, world, value)
        except NotFound:
            return "gone", "gone"
        return "still there", "gone"

    return read_back


def _values_read_back(
    uow: UnitOfWork, world: World, value: Any, result: Any
) -> tuple[object, object]:
    stored = uow.metadata.values_of(world.document_id)
    by_id = {field_.id: field_ for field_ in world.fields.values()}
    expected = {field_id: _expected_value(by_id[field_id], v) for field_id, v in value.items()}
    return {field_id: stored.get(field_id) for field_id in value}, expected


def _field_ids(world: World) -> st.SearchStrategy[Any]:
    return ids_of(*(field_.id for field_ in world.fields.values()))


def _field_keys(world: World) -> st.SearchStrategy[Any]:
    """Keys of a mapping of field ids: the world's fields, or any other hashable value."""
    known = st.sampled_from([field_.id for field_ in world.fields.values()])
    return st.one_of(known, known, st.uuids(), st.text(max_size=3), st.integers())


def _with_default(world: World) -> MetadataField:
    return replace(world.field_of(FieldType.STRING), default="filled in")


WITH_INVARIANTS = (ValidationError, NotFound, InvariantViolation)

#: Entry points whose values are ids, flags, versions, timestamps or domain objects: a small
#: space, which hypothesis exhausts in fewer examples.
TYPED_ENTRY_POINTS: list[EntryPoint] = [
    EntryPoint(
        "folders.move(parent_id)",
        lambda world: st.one_of(st.none(), ids_of(world.folder_id)),
        lambda uow, world, value: uow.folders.move(world.folder_id, parent_id=value),
        lambda uow, world, value, result: (uow.folders.get(result.id).parent_id, value),
        WITH_INVARIANTS,
    ),
    EntryPoint(
        "folders.children(parent_id)",
        lambda world: st.one_of(st.none(), ids_of(world.folder_id)),
        lambda uow, world, value: uow.folders.children(value),
    ),
    EntryPoint(
        "folders.subtree(folder_id)",
        lambda world: ids_of(world.folder_id),
        lambda uow, world, value: uow.folders.subtree(value),
        refusals=LOOKED_UP,
    ),
    EntryPoint(
        "delete_folder(folder_id)",
        lambda world: ids_of(world.folder_id),
        lambda uow, world, value: delete_folder(uow, value),
        _gone(lambda uow, world, value: uow.folders.get(value)),
        LOOKED_UP,
    ),
    EntryPoint(
        "restore_folder(folder_id)",
        lambda world: ids_of(world.folder_id),
        lambda uow, world, value: restore_folder(uow, value),
        refusals=WITH_INVARIANTS,
    ),
    EntryPoint(
        "documents.soft_delete(version)",
        lambda world: st.one_of(st.just(world.document_version), st.integers(-1, 3), ANYTHING),
        lambda uow, world, value: uow.documents.soft_delete(world.document_id, version=value),
        _gone(lambda uow, world, value: uow.documents.get(world.document_id)),
        (ValidationError, ConcurrentUpdate),
    ),
    EntryPoint(
        "documents.restore(document_id)",
        lambda world: ids_of(world.document_id),
        lambda uow, world, value: uow.documents.restore(value, version=world.document_version),
        refusals=WITH_INVARIANTS,
    ),
    EntryPoint(
        "documents.purge(document_id)",
        lambda world: ids_of(world.document_id),
        lambda uow, world, value: uow.documents.purge(value),
        _gone(lambda uow, world, value: uow.documents.get(value, include_deleted=True)),
        LOOKED_UP,
    ),
    EntryPoint(
        "documents.set_current_revision(revision_id)",
        lambda world: ids_of(world.revision_id),
        lambda uow, world, value: uow.documents.set_current_revision(world.document_id, value),
        lambda uow, world, value, result: (result.current_revision_id, value),
        LOOKED_UP,
    ),
    EntryPoint(
        "documents.record_change(document_ids)",
        lambda world: ids_of(world.document_id),
        lambda uow, world, value: uow.documents.record_change(value),
    ),
    EntryPoint(
        "documents.with_all_tags(tag_ids)",
        lambda world: ids_of(world.tag_id),
        lambda uow, world, value: uow.documents.with_all_tags(value),
    ),
    EntryPoint(
        "documents.search(fields)",
        lambda world: st.one_of(
            st.just({world.field_of(FieldType.INT).id: world.field_of(FieldType.INT)}),
            st.just({}),
            st.dictionaries(_field_keys(world), ANYTHING, max_size=1),
            ANYTHING,
        ),
        lambda uow, world, value: uow.documents.search(
            DocumentQuery(
                metadata=(MetadataFilter(field_id=world.field_of(FieldType.INT).id, equals=1),)
            ),
            fields=value,
        ),
    ),
    EntryPoint(
        "documents.soft_delete_in_folders(at)",
        st.one_of(st.datetimes(timezones=st.just(timezone.utc)), ANYTHING),
        lambda uow, world, value: uow.documents.soft_delete_in_folders([world.folder_id], value),
        lambda uow, world, value, result: (
            uow.documents.get(world.document_id, include_deleted=True).deleted_at,
            value,
        ),
    ),
    EntryPoint(
        "add_revision(document_id)",
        lambda world: ids_of(world.document_id),
        lambda uow, world, value: add_revision(
            uow,
            value,
            storage_key=f"keys/{uuid.uuid4()}",
            sha256=hashlib.sha256(b"x").hexdigest(),
            size_bytes=1,
            mime_type="text/plain",
        ),
        lambda uow, world, value, result: (uow.revisions.get(result.id).document_id, value),
        LOOKED_UP,
    ),
    EntryPoint(
        "revisions.get(revision_id)",
        lambda world: ids_of(world.revision_id),
        lambda uow, world, value: uow.revisions.get(value),
        refusals=LOOKED_UP,
    ),
    EntryPoint(
        "revisions.history(document_id)",
        lambda world: ids_of(world.document_id),
        lambda uow, world, value: uow.revisions.history(value),
    ),
    EntryPoint(
        "tags.get(tag_id)",
        lambda world: ids_of(world.tag_id),
        lambda uow, world, value: uow.tags.get(value),
        refusals=LOOKED_UP,
    ),
    EntryPoint(
        "tags.delete(tag_id)",
        lambda world: ids_of(world.tag_id),
        lambda uow, world, value: uow.tags.delete(value),
        _gone(lambda uow, world, value: uow.tags.get(value)),
        LOOKED_UP,
    ),
    EntryPoint(
        "tags.tags_of(document_id)",
        lambda world: ids_of(world.document_id),
        lambda uow, world, value: uow.tags.tags_of(value),
    ),
    EntryPoint(
        "untag_documents(tag_ids)",
        lambda world: ids_of(world.tag_id),
        lambda uow, world, value: untag_documents(uow, [world.document_id], value),
    ),
    EntryPoint(
        "metadata.get_field(field_id)",
        _field_ids,
        lambda uow, world, value: uow.metadata.get_field(value),
        refusals=LOOKED_UP,
    ),
    EntryPoint(
        "metadata.retire_option(option_id)",
        lambda world: ids_of(world.field_of(FieldType.SELECT).options[0].id),
        lambda uow, world, value: uow.metadata.retire_option(value),
        lambda uow, world, value, result: (result.id, value),
        LOOKED_UP,
    ),
    EntryPoint(
        "set_values(values)",
        lambda world: st.one_of(
            st.dictionaries(
                st.sampled_from([world.field_of(FieldType.INT).id]), st.integers(), max_size=1
            ),
            st.dictionaries(_field_keys(world), ANYTHING, max_size=2),
            ANYTHING,
        ),
        lambda uow, world, value: set_values(uow, world.document_id, value),
        _values_read_back,
        LOOKED_UP,
    ),
    EntryPoint(
        "clear_value(field_id)",
        _field_ids,
        lambda uow, world, value: clear_value(uow, world.document_id, value),
        lambda uow, world, value, result: (uow.metadata.values_of(world.document_id), {}),
        LOOKED_UP,
    ),
    EntryPoint(
        "metadata.values_of(document_id)",
        lambda world: ids_of(world.document_id),
        lambda uow, world, value: uow.metadata.values_of(value),
    ),
    EntryPoint(
        "metadata.missing_required(document_id)",
        lambda world: ids_of(world.document_id),
        lambda uow, world, value: uow.metadata.missing_required(value),
    ),
    EntryPoint(
        "metadata.backfill(field)",
        lambda world: st.one_of(
            st.just(_with_default(world)), st.just(world.field_of(FieldType.TEXT)), ANYTHING
        ),
        lambda uow, world, value: uow.metadata.backfill(value),
        lambda uow, world, value, result: (
            uow.metadata.values_of(world.document_id).get(value.id),
            value.default,
        ),
    ),
]

#: Examples per typed entry point.
TYPED_EXAMPLES = 15

_SETTINGS: dict[str, Any] = {
    "derandomize": True,
    "database": None,
    "deadline": None,
    # Each example opens a unit of work on a busy shared server: slow is expected there.
    "suppress_health_check": [HealthCheck.too_slow],
}


def _draw(world: World, entry: EntryPoint, data: st.DataObject) -> Any:
    values = entry.values(world) if callable(entry.values) else entry.values
    return data.draw(values, label="value")


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=[entry.name for entry in ENTRY_POINTS])
@settings(max_examples=EXAMPLES, **_SETTINGS)
@given(data=st.data())
def test_a_value_is_stored_intact_or_refused_with_nothing_changed(
    sides: Sides, world: World, entry: EntryPoint, side: str, data: st.DataObject
) -> None:
    sides.run(world, entry, _draw(world, entry, data), side=side)


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize(
    "entry", TYPED_ENTRY_POINTS, ids=[entry.name for entry in TYPED_ENTRY_POINTS]
)
@settings(max_examples=TYPED_EXAMPLES, **_SETTINGS)
@given(data=st.data())
def test_an_id_flag_or_object_is_used_or_refused_with_nothing_changed(
    sides: Sides, world: World, entry: EntryPoint, side: str, data: st.DataObject
) -> None:
    sides.run(world, entry, _draw(world, entry, data), side=side)


_ONE = uuid.UUID(int=1)
#: Values known to reach the driver (raw psycopg or Python errors) before they were checked.
KNOWN_HOSTILE: list[tuple[str, object]] = [
    *(
        (entry, text)
        for entry in (
            "documents.add(title)",
            "documents.rename(title)",
            "create_document(title)",
            "folders.add(name)",
            "folders.rename(name)",
            "tags.add(name)",
            "tags.rename(name)",
            "define_field(name)",
            "metadata.rename_field(name)",
            "metadata.add_option(value)",
            "metadata.rename_option(value)",
            "set_value(string)",
            "set_value(text)",
            "add_revision(storage_key)",
            "tags.get_by_name(name)",
            "metadata.get_field_by_name(name)",
            "search_documents(title_contains)",
            "search_documents(text)",
            "search.set_config(name)",
        )
        for text in ("a\x00b", "a\ud800b", "\udfff")
    ),
    ("search.store_text(parts)", ["a\x00b"]),
    ("search.store_text(parts)", ["\ud800"]),
    ("search.store_text(parts)", "a string is not a list of parts"),
    ("define_field(options)", ["a\x00"]),
    ("define_field(options)", ["\ud800"]),
    ("set_value(url)", "https://example.org/\x00"),
    ("set_value(url)", "https://example.org/\ud800"),
    ("add_revision(mime_type)", "text/plain\x00"),
    ("add_revision(mime_type)", "text/plain; name=\ud800"),
    ("documents.get(document_id)", str(_ONE)),
    ("documents.get(document_id)", 1),
    ("folders.path(folder_id)", str(_ONE)),
    ("revisions.current(document_id)", str(_ONE)),
    ("create_document(tag_ids)", [str(_ONE)]),
    ("tag_documents(document_ids)", "not a list of ids"),
    ("documents.rename(version)", 2**31),
    ("documents.rename(version)", "1"),
    ("revisions.find_by_sha256(sha256)", None),
    ("search_documents(after=Cursor.decode(token))", 42),
    (
        "search_documents(after=Cursor.decode(token))",
        Cursor(title_key="\x00", id=uuid.UUID(int=1)).encode(),
    ),
]
_BY_NAME = {entry.name: entry for entry in [*ENTRY_POINTS, *TYPED_ENTRY_POINTS]}


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize(("name", "value"), KNOWN_HOSTILE)
def test_known_hostile_values_are_refused_before_they_reach_sql(
    sides: Sides, world: World, name: str, value: object, side: str
) -> None:
    sides.run(world, _BY_NAME[name], value, side=side, refused=True)


# --- outside a unit of work: the unit of work itself, tenants, users --------------------------


@settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None)
@given(data=st.data())
def test_a_unit_of_work_of_any_tenant_name_refuses_or_works(
    engine: Engine, world: World, data: st.DataObject
) -> None:
    slugs = st.from_regex(r"[a-z][a-z0-9_]{0,39}", fullmatch=True)
    tenant = data.draw(st.one_of(st.just(world.tenant), TEXT, NOT_TEXT, slugs), label="tenant")
    with sent_parameters(engine) as sent:
        try:
            uow = UnitOfWork(engine, tenant=tenant)
        except InvalidTenantName:
            assert sent == []
            outcome("UnitOfWork(tenant)", "refused (InvalidTenantName) before any SQL")
            return
        with uow:
            try:
                tags = uow.tags.all()
            except TenantNotFound:
                outcome("UnitOfWork(tenant)", "refused (TenantNotFound) on first use")
                return
    assert tenant == world.tenant or tags == []
    outcome("UnitOfWork(tenant)", "accepted")


@settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None)
@given(data=st.data())
def test_a_unit_of_work_of_any_user_refuses_or_records_that_user(
    engine: Engine, world: World, data: st.DataObject
) -> None:
    user_id = data.draw(st.one_of(st.none(), ids_of(world.user)), label="user_id")
    try:
        uow = UnitOfWork(engine, tenant=world.tenant, user_id=user_id)
    except ValidationError:
        outcome("UnitOfWork(user_id)", "refused (ValidationError) before any SQL")
        return
    with uow:
        try:
            tag = uow.tags.add(name="by whom")
        except (ValidationError, NotFound) as refusal:  # no user, or an unknown one
            assert snapshot(uow.connection) == world.snapshot
            outcome("UnitOfWork(user_id)", f"refused ({type(refusal).__name__}) on first write")
            return
        assert uow.tags.get(tag.id).created_by == user_id
    outcome("UnitOfWork(user_id)", "accepted intact")


CONTEXT_KEYS = st.one_of(st.sampled_from(["request_id", "client.ip"]), TEXT, NOT_TEXT)
CONTEXTS = st.one_of(
    st.none(),
    st.dictionaries(CONTEXT_KEYS, ANYTHING, max_size=3),
    st.dictionaries(st.sampled_from(["request_id", "client"]), TEXT, max_size=2),
    ANYTHING,
)


@settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None)
@given(data=st.data())
def test_a_unit_of_work_of_any_actor_and_context_refuses_or_records_them_intact(
    engine: Engine, world: World, data: st.DataObject
) -> None:
    system = data.draw(st.one_of(st.none(), st.just("worker"), TEXT, NOT_TEXT), label="system")
    context = data.draw(CONTEXTS, label="context")
    with sent_parameters(engine) as sent:
        try:
            uow = UnitOfWork(engine, tenant=world.tenant, system=system, context=context)
        except ValidationError:
            assert sent == []
            outcome("UnitOfWork(system, context)", "refused (ValidationError) before any SQL")
            return
    with uow:  # never committed: the world stays as it is
        uow.tags.rename(world.tag_id, name="renamed by an example")
        (event,) = uow.audit.events(limit=1).items
    assert (event.action, event.object_id) == ("update", world.tag_id)
    assert (event.actor_system, event.context) == (system, None if context is None else context)
    outcome("UnitOfWork(system, context)", "accepted intact")


@settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None)
@given(name=st.one_of(TEXT, NOT_TEXT))
def test_tenant_functions_refuse_a_bad_name_before_any_sql(
    engine: Engine, world: World, name: Any
) -> None:
    """Names off the pattern only: a valid one would really create or drop a tenant."""
    try:
        tenancy.validate_slug(name)
    except InvalidTenantName:
        pass
    else:
        outcome("create/drop/get_tenant", "skipped (a valid name)")
        return
    with sent_parameters(engine) as sent, engine.connect() as conn:
        with pytest.raises(InvalidTenantName):
            provisioning.create_tenant(engine, name)
        with pytest.raises(InvalidTenantName):
            provisioning.drop_tenant(engine, name)
        with pytest.raises(InvalidTenantName):
            tenancy.get_tenant(conn, name)
    assert sent == []
    outcome("create/drop/get_tenant", "refused (InvalidTenantName) before any SQL")


@settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None)
@given(email=ANYTHING, display_name=ANYTHING)
def test_create_user_stores_intact_or_refuses_with_nothing_changed(
    engine: Engine, world: World, email: Any, display_name: Any
) -> None:
    users = users_stand_in("public")
    with engine.connect() as conn, conn.begin():
        before = conn.execute(sa.select(sa.func.count()).select_from(users)).scalar_one()
        try:
            with sent_parameters(engine) as sent:
                user = create_user(conn, email=email, display_name=display_name)
        except ValidationError:
            assert not [p for p in sent if carries(p, email) or carries(p, display_name)]
            after = conn.execute(sa.select(sa.func.count()).select_from(users)).scalar_one()
            assert after == before
            outcome("create_user", "refused (ValidationError) before any SQL")
            return
        stored = conn.execute(
            sa.select(users.c.email, users.c.display_name).where(users.c.id == user)
        ).one()
        # create_user finds an existing user by e-mail: its name is the one stored first.
        assert stored.email == email
        outcome("create_user", "accepted intact")


def test_the_snapshot_sees_a_change(engine: Engine, world: World) -> None:
    """Control: a write that is not rolled back is seen by the snapshot."""
    with UnitOfWork(engine, tenant=world.tenant, user_id=world.user) as uow:
        uow.tags.add(name="seen")
        assert snapshot(uow.connection) != world.snapshot


def test_the_parameter_check_sees_a_value_that_reached_sql(engine: Engine, world: World) -> None:
    """Control: a value sent to the server is found among the parameters."""
    with (
        UnitOfWork(engine, tenant=world.tenant) as uow,
        sent_parameters(engine) as sent,
        pytest.raises(NotFound),
    ):
        uow.tags.get_by_name("a needle in")
    assert [p for p in sent if carries(p, "needle")] != []


def test_timestamps_given_to_repositories_must_be_aware(engine: Engine, world: World) -> None:
    naive = datetime(2026, 1, 1)  # no tzinfo: the point of the test
    with UnitOfWork(engine, tenant=world.tenant) as uow:
        with pytest.raises(ValidationError, match="timezone-aware"):
            uow.documents.soft_delete_in_folders([world.folder_id], naive)
        assert uow.documents.restore_in_folders([], datetime.now(timezone.utc)) == 0
        assert snapshot(uow.connection) == world.snapshot
