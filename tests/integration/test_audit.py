"""The audit trail: every write leaves its event, in its transaction; the chain shows tampering.

docs/audit.md describes what these tests hold the trail to.
"""

from __future__ import annotations

import hashlib
import io
import json
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError

from dms import citus, provisioning, tenancy
from dms.audit import (
    export_audit_trail,
    prune_audit_trail,
    seal_audit_trail,
    verify_audit_trail,
)
from dms.domain import FieldType
from dms.domain.audit import AuditCursor, AuditEvent
from dms.errors import NotFound, TenantNotFound, ValidationError
from dms.schema import tenant as t
from dms.schema.ddl import execute_ddl
from dms.services import (
    add_revision,
    clear_value,
    create_document,
    define_field,
    delete_folder,
    read_revision_content,
    set_value,
    tag_documents,
    untag_documents,
)
from dms.storage import LocalBlobStore
from dms.uow import UnitOfWork
from tests.conftest import new_slug

_e = t.audit_events


def content_of(data: bytes) -> dict[str, Any]:
    """A revision's content columns for ``data`` (the blob itself is not stored)."""
    digest = hashlib.sha256(data).hexdigest()
    return {
        "storage_key": f"audit/{uuid.uuid4()}",
        "sha256": digest,
        "size_bytes": len(data),
        "mime_type": "application/pdf",
    }


@dataclass
class World:
    """What a case starts from, committed: a folder with a document (a revision, a tag, a
    string value), a second tag, a string field and a multi-select field with options.

    Its names are its own (``tag_name``), so that many worlds fit in one tenant."""

    tenant: str
    tag_name: str
    folder: uuid.UUID
    document: uuid.UUID
    revision: uuid.UUID
    tag: uuid.UUID
    other_tag: uuid.UUID
    text_field: uuid.UUID
    choices_field: uuid.UUID
    options: list[uuid.UUID]


def _world(engine: Engine, tenant: str, user_id: uuid.UUID) -> World:
    own = uuid.uuid4().hex[:8]
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        folder = uow.folders.add(name=f"Invoices {own}")
        tag, other = uow.tags.add(name=f"Urgent {own}"), uow.tags.add(name=f"Paid {own}")
        text = define_field(uow, name=f"Customer {own}", field_type=FieldType.STRING)
        choices = define_field(
            uow, name=f"Topics {own}", field_type=FieldType.MULTI_SELECT, options=["a", "b", "c"]
        )
        doc = create_document(
            uow,
            title="March.pdf",
            folder_id=folder.id,
            tag_ids=[tag.id],
            metadata={text.id: "ACME"},
        )
        revision = add_revision(uow, doc.id, **content_of(b"march"))
        uow.commit()
    return World(
        tenant=tenant,
        tag_name=tag.name,
        folder=folder.id,
        document=doc.id,
        revision=revision.id,
        tag=tag.id,
        other_tag=other.id,
        text_field=text.id,
        choices_field=choices.id,
        options=[option.id for option in choices.options],
    )


def _version(uow: UnitOfWork, world: World) -> int:
    return uow.documents.get(world.document, include_deleted=True).version


Case = Callable[[UnitOfWork, World], object]

#: (what, the write, the events it must leave as (object type, action) with their count)
WRITES: list[tuple[str, Case, dict[tuple[str, str], int]]] = [
    ("add folder", lambda u, w: u.folders.add(name="New"), {("folder", "create"): 1}),
    (
        "rename folder",
        lambda u, w: u.folders.rename(w.folder, name="Bills"),
        {("folder", "update"): 1},
    ),
    (
        "move folder",
        lambda u, w: u.folders.move(w.folder, parent_id=u.folders.add(name="Top").id),
        {("folder", "create"): 1, ("folder", "update"): 1},
    ),
    (
        "folder to the trash",
        lambda u, w: delete_folder(u, w.folder),
        {("folder", "trash"): 1, ("document", "trash"): 1},
    ),
    ("add document", lambda u, w: u.documents.add(title="New.pdf"), {("document", "create"): 1}),
    (
        "rename document",
        lambda u, w: u.documents.rename(w.document, title="April.pdf", version=_version(u, w)),
        {("document", "update"): 1},
    ),
    (
        "move document",
        lambda u, w: u.documents.move(w.document, folder_id=None, version=_version(u, w)),
        {("document", "update"): 1},
    ),
    (
        "document to the trash",
        lambda u, w: u.documents.soft_delete(w.document, version=_version(u, w)),
        {("document", "trash"): 1},
    ),
    (
        "purge document",
        lambda u, w: u.documents.purge(w.document),
        {
            ("document", "delete"): 1,
            ("revision", "delete"): 1,
            ("document", "link"): 1,
            ("metadata_value", "delete"): 1,
        },
    ),
    (
        "add revision",
        lambda u, w: add_revision(u, w.document, **content_of(b"april")),
        {("revision", "create"): 1, ("document", "update"): 1},
    ),
    ("add tag", lambda u, w: u.tags.add(name="New"), {("tag", "create"): 1}),
    ("rename tag", lambda u, w: u.tags.rename(w.tag, name="Later"), {("tag", "update"): 1}),
    (
        "delete tag",
        lambda u, w: u.tags.delete(w.tag),
        {("tag", "delete"): 1, ("document", "link"): 1},
    ),
    (
        "tag",
        lambda u, w: tag_documents(u, [w.document], [w.other_tag]),
        {("document", "link"): 1, ("document", "update"): 1},
    ),
    (
        "untag",
        lambda u, w: untag_documents(u, [w.document], [w.tag]),
        {("document", "link"): 1, ("document", "update"): 1},
    ),
    (
        "define field",
        lambda u, w: define_field(u, name="Kind", field_type=FieldType.SELECT, options=["x", "y"]),
        {("metadata_field", "create"): 1, ("metadata_option", "create"): 2},
    ),
    (
        "rename field",
        lambda u, w: u.metadata.rename_field(w.text_field, name="Client"),
        {("metadata_field", "update"): 1},
    ),
    (
        "add option",
        lambda u, w: u.metadata.add_option(w.choices_field, "d"),
        {("metadata_option", "create"): 1},
    ),
    (
        "rename option",
        lambda u, w: u.metadata.rename_option(w.options[0], value="A"),
        {("metadata_option", "update"): 1},
    ),
    (
        "retire option",
        lambda u, w: u.metadata.retire_option(w.options[1]),
        {("metadata_option", "update"): 1},
    ),
    (
        "change value",
        lambda u, w: set_value(u, w.document, w.text_field, "Initech"),
        {("metadata_value", "update"): 1, ("document", "update"): 1},
    ),
    (
        "clear value",
        lambda u, w: clear_value(u, w.document, w.text_field),
        {("metadata_value", "delete"): 1, ("document", "update"): 1},
    ),
    (
        "multi-select value",
        lambda u, w: set_value(u, w.document, w.choices_field, ["a", "c"]),
        {("metadata_value", "create"): 1, ("metadata_value", "link"): 1, ("document", "update"): 1},
    ),
]


@pytest.fixture(scope="module")
def shared_tenant(engine: Engine) -> Iterator[str]:
    """One tenant for the tests of this module that look only at their own events.

    Creating a tenant costs seconds on Citus; these tests each build their own world in it
    (:func:`world`) and find their events by what was there before (:func:`_mark`).
    """
    slug = new_slug()
    provisioning.create_tenant(engine, slug)
    yield slug
    provisioning.drop_tenant(engine, slug)


@pytest.fixture
def world(engine: Engine, shared_tenant: str, user_id: uuid.UUID) -> World:
    """A world of its own in the module's shared tenant."""
    return _world(engine, shared_tenant, user_id)


def _events_after(engine: Engine, tenant: str, mark: frozenset[uuid.UUID]) -> list[AuditEvent]:
    """The events that are not in ``mark``, oldest first."""
    with UnitOfWork(engine, tenant=tenant) as uow:
        events = list(uow.audit.events(limit=1000).items)
    return sorted((e for e in events if e.id not in mark), key=lambda e: (e.occurred_at, e.id))


def _mark(engine: Engine, tenant: str) -> frozenset[uuid.UUID]:
    """The ids of the events so far."""
    with UnitOfWork(engine, tenant=tenant) as uow:
        return frozenset(e.id for e in uow.audit.events(limit=1000).items)


@pytest.mark.parametrize("case", WRITES, ids=[c[0] for c in WRITES])
def test_every_write_leaves_its_events_by_its_actor(
    engine: Engine,
    user_id: uuid.UUID,
    world: World,
    case: tuple[str, Case, dict[tuple[str, str], int]],
) -> None:
    tenant = world.tenant
    _, write, expected = case
    mark = _mark(engine, tenant)
    context = {"request_id": "r-17", "client": "10.0.0.9"}
    with UnitOfWork(engine, tenant=tenant, user_id=user_id, context=context) as uow:
        write(uow, world)
        uow.commit()

    events = _events_after(engine, tenant, mark)
    assert Counter((e.object_type, e.action) for e in events) == Counter(expected)
    assert {(e.actor_id, e.actor_system) for e in events} == {(user_id, None)}
    assert all(e.context == context for e in events)
    assert len({e.txid for e in events}) == 1


def test_a_change_records_what_it_was_and_what_it_became(
    engine: Engine, user_id: uuid.UUID, world: World
) -> None:
    tenant = world.tenant
    mark = _mark(engine, tenant)
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        version = _version(uow, world)
        uow.documents.rename(world.document, title="April.pdf", version=version)
        tag_documents(uow, [world.document], [world.other_tag])
        untag_documents(uow, [world.document], [world.tag])
        uow.commit()

    rename, *rest = _events_after(engine, tenant, mark)
    assert (rename.before, rename.after) == (
        {"title": "March.pdf", "version": version},
        {"title": "April.pdf", "version": version + 1},
    )
    assert (rename.object_id, rename.document_id) == (world.document, world.document)
    links = [e for e in rest if e.action == "link"]
    both = sorted([str(world.tag), str(world.other_tag)])
    assert [(e.before, e.after) for e in links] == [
        ({"tag_ids": [str(world.tag)]}, {"tag_ids": both}),
        ({"tag_ids": both}, {"tag_ids": [str(world.other_tag)]}),
    ]


def test_a_statement_of_many_links_is_one_event_per_document_with_the_right_before(
    engine: Engine, user_id: uuid.UUID, world: World
) -> None:
    tenant = world.tenant
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        other = uow.documents.add(title="Other.pdf")
        new = [uow.tags.add(name=f"T{i}").id for i in range(3)]
        uow.commit()
    mark = _mark(engine, tenant)
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        tag_documents(uow, [world.document, other.id], new)
        uow.commit()

    links = {e.object_id: e for e in _events_after(engine, tenant, mark) if e.action == "link"}
    added = sorted(str(tag) for tag in new)
    assert links[other.id].before == {"tag_ids": []}
    assert links[other.id].after == {"tag_ids": added}
    assert links[world.document].before == {"tag_ids": [str(world.tag)]}
    assert links[world.document].after == {"tag_ids": sorted([str(world.tag), *added])}


def test_raw_sql_through_the_applications_role_is_recorded_too(
    engine: Engine, world: World
) -> None:
    tenant = world.tenant
    mark = _mark(engine, tenant)
    with engine.begin() as conn:
        routed = tenancy.route(conn, tenant)
        routed.execute(sa.update(t.tags).where(t.tags.c.id == world.tag).values(name="Raw"))
        role = routed.execute(sa.select(sa.func.session_user())).scalar_one()

    (event,) = _events_after(engine, tenant, mark)
    assert (event.object_type, event.action, event.object_id) == ("tag", "update", world.tag)
    assert (event.before, event.after) == ({"name": world.tag_name}, {"name": "Raw"})
    assert (event.actor_id, event.actor_system, event.db_role) == (None, None, role)


def test_a_rolled_back_change_leaves_no_event(
    engine: Engine, user_id: uuid.UUID, world: World
) -> None:
    tenant = world.tenant
    mark = _mark(engine, tenant)
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        uow.folders.add(name="Gone")
        uow.tags.rename(world.tag, name="Gone too")
        uow.rollback()
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        uow.folders.add(name="Also gone")
        with pytest.raises(ValidationError):
            uow.tags.add(name="")

    assert _events_after(engine, tenant, mark) == []


def test_a_system_principal_is_recorded_by_name(engine: Engine, world: World) -> None:
    tenant = world.tenant
    mark = _mark(engine, tenant)
    make = UnitOfWork.factory(engine)
    with make(tenant=tenant) as uow:
        uow.tags.rename(world.tag, name="By the worker")
        uow.commit()
    with UnitOfWork(engine, tenant=tenant, system="nightly-cleanup") as uow:
        uow.tags.rename(world.tag, name="By a job of ours")
        uow.commit()

    events = _events_after(engine, tenant, mark)
    assert [(e.actor_id, e.actor_system) for e in events] == [
        (None, "worker"),
        (None, "nightly-cleanup"),
    ]
    with UnitOfWork(engine, tenant=tenant) as uow:
        by_worker = uow.audit.events(system="worker").items
    assert [e.after for e in by_worker] == [{"name": "By the worker"}]


def test_history_of_a_document_pages_newest_first(
    engine: Engine, user_id: uuid.UUID, world: World
) -> None:
    tenant = world.tenant
    for title in ("B.pdf", "C.pdf", "D.pdf"):
        with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
            uow.documents.rename(world.document, title=title, version=_version(uow, world))
            uow.commit()

    pages: list[list[AuditEvent]] = []
    after: AuditCursor | None = None
    with UnitOfWork(engine, tenant=tenant) as uow:
        while True:
            page = uow.audit.history(world.document, limit=2, after=after)
            pages.append(list(page.items))
            if page.next_cursor is None:
                break
            after = page.next_cursor
        renames = uow.audit.events(action="update", object_type="document", limit=3).items

    events = [e for page in pages for e in page]
    assert all(len(page) <= 2 for page in pages)
    assert len(pages) >= 3
    newest_first = sorted(events, key=lambda e: (e.occurred_at, e.id), reverse=True)
    assert [e.id for e in events] == [e.id for e in newest_first]
    assert {e.document_id for e in events} == {world.document}
    # create, its tag link, its value, the revision and its current-revision update, 3 renames
    assert [e.after["title"] for e in events[:3] if e.after] == ["D.pdf", "C.pdf", "B.pdf"]
    assert {e.object_type for e in events} == {"document", "revision", "metadata_value"}
    assert [e.after["title"] for e in renames if e.after] == ["D.pdf", "C.pdf", "B.pdf"]
    assert [e.id for e in renames] == [e.id for e in events[:3]]


def test_events_filter_by_actor_and_time(engine: Engine, tenant: str, user_id: uuid.UUID) -> None:
    _world(engine, tenant, user_id)  # in a tenant of its own: it reads every event
    with UnitOfWork(engine, tenant=tenant) as uow:
        everything = uow.audit.events(limit=500).items
        by_user = uow.audit.events(actor_id=user_id, limit=500).items
        nobody = uow.audit.events(actor_id=uuid.uuid4()).items
        newest = everything[0].occurred_at
        until_newest = uow.audit.events(until=newest, limit=500).items
        since_newest = uow.audit.events(since=newest, limit=500).items

    assert everything
    assert by_user == everything
    assert nobody == []
    assert {e.id for e in until_newest} | {e.id for e in since_newest} == {e.id for e in everything}
    assert all(e.occurred_at < newest for e in until_newest)


@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        (lambda a: a.history("not an id"), "document"),
        (lambda a: a.history(uuid.uuid4(), limit=0), "page size"),
        (lambda a: a.history(uuid.uuid4(), after=("2026", 1)), "AuditCursor"),
        (
            lambda a: a.history(
                uuid.uuid4(), after=AuditCursor(occurred_at=datetime.now(), id=uuid.uuid4())
            ),
            "AuditCursor",
        ),
        (lambda a: a.events(action="drop"), "action"),
        (lambda a: a.events(object_type="user"), "object type"),
        (lambda a: a.events(system="Not A Name"), "system principal"),
        (lambda a: a.events(actor_id="alice"), "actor"),
        (lambda a: a.events(since=datetime(2026, 1, 1)), "timezone-aware"),
        (lambda a: a.set_record_reads("yes"), "bool"),
    ],
)
def test_bad_arguments_are_refused_before_any_sql(
    engine: Engine, shared_tenant: str, call: Callable[[Any], object], pattern: str
) -> None:
    with UnitOfWork(engine, tenant=shared_tenant) as uow:
        with pytest.raises(ValidationError, match=pattern):
            call(uow.audit)
        assert uow.audit.settings().record_reads is False  # the transaction is still usable


@pytest.mark.parametrize(
    "arguments",
    [
        {"system": "Worker"},
        {"system": ""},
        {"system": "x" * 64},
        {"system": "a\x00b"},
        {"system": 7},
        {"user_id": uuid.uuid4(), "system": "worker"},
        {"context": ["request_id"]},
        {"context": {"request id": "x"}},
        {"context": {"request_id": "a\x00b"}},
        {"context": {"request_id": "\udc80"}},
        {"context": {"request_id": object()}},
        {"context": {"n": 0.5}},
        {"context": {"n": 2**64}},
        {"context": {"v": "x" * 1001}},
        {"context": {f"k{i}": i for i in range(17)}},
    ],
)
def test_a_unit_of_work_refuses_a_bad_actor_or_context(
    engine: Engine, arguments: dict[str, Any]
) -> None:
    with pytest.raises(ValidationError):
        UnitOfWork(engine, tenant="acme", **arguments)


def _tamper(engine: Engine, tenant: str, statement: sa.Executable) -> None:
    """Run ``statement`` as a superuser with every trigger off, as an attacker would."""
    with engine.begin() as conn:
        routed = tenancy.route(conn, tenant)
        _triggers_off(routed)
        routed.execute(statement)


def _triggers_off(conn: Connection) -> None:
    if not citus.set_local_on_every_node(conn, {"session_replication_role": "replica"}):
        conn.execute(sa.select(sa.func.set_config("session_replication_role", "replica", True)))


def _sealed_world(engine: Engine, tenant: str, user_id: uuid.UUID) -> int:
    for name in ("s", "t", "u", "v", "w", "x", "y", "z"):
        with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
            uow.tags.add(name=name)
            uow.commit()
    seal_audit_trail(engine, tenant)
    report = verify_audit_trail(engine, tenant)
    assert (report.intact, report.unsealed, report.checked) == (True, 0, report.head)
    return report.head


def test_the_chain_is_intact_after_sealing(engine: Engine, tenant: str, user_id: uuid.UUID) -> None:
    head = _sealed_world(engine, tenant, user_id)
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        uow.tags.add(name="Later")
        uow.commit()

    unsealed = verify_audit_trail(engine, tenant, seal=False)
    sealed = verify_audit_trail(engine, tenant)
    assert (unsealed.intact, unsealed.checked, unsealed.unsealed) == (True, head, 1)
    assert (sealed.intact, sealed.checked, sealed.head, sealed.unsealed) == (
        True,
        head + 1,
        head + 1,
        0,
    )


def test_a_changed_event_is_found(engine: Engine, tenant: str, user_id: uuid.UUID) -> None:
    head = _sealed_world(engine, tenant, user_id)
    _tamper(engine, tenant, sa.update(_e).where(_e.c.seq == 3).values(after={"name": "forged"}))

    report = verify_audit_trail(engine, tenant)
    assert (report.intact, report.broken_at, report.checked) == (False, 3, 2)
    assert "does not match its hash" in str(report.problem)
    assert report.head == head


def test_a_deleted_event_is_found(engine: Engine, tenant: str, user_id: uuid.UUID) -> None:
    _sealed_world(engine, tenant, user_id)
    _tamper(engine, tenant, sa.delete(_e).where(_e.c.seq == 4))

    report = verify_audit_trail(engine, tenant)
    assert (report.broken_at, report.checked) == (4, 3)
    assert report.problem == "event 4 is missing: the chain goes on at 5 (deleted?)"


def test_the_last_events_deleted_are_found(engine: Engine, tenant: str, user_id: uuid.UUID) -> None:
    head = _sealed_world(engine, tenant, user_id)
    _tamper(engine, tenant, sa.delete(_e).where(_e.c.seq >= head - 1))

    report = verify_audit_trail(engine, tenant)
    assert (report.intact, report.broken_at, report.checked) == (False, head - 1, head - 2)
    assert "events were removed" in str(report.problem)


def test_reordered_events_are_found(engine: Engine, tenant: str, user_id: uuid.UUID) -> None:
    _sealed_world(engine, tenant, user_id)
    swapped = sa.case((_e.c.seq == -5, 6), else_=5)
    _tamper(engine, tenant, sa.update(_e).where(_e.c.seq.in_([5, 6])).values(seq=-_e.c.seq))
    _tamper(engine, tenant, sa.update(_e).where(_e.c.seq.in_([-5, -6])).values(seq=swapped))
    # The hashes travelled with their rows: the chain must break where the order changed.
    report = verify_audit_trail(engine, tenant)
    assert (report.intact, report.broken_at) == (False, 5)


def test_a_forged_event_is_found(engine: Engine, tenant: str, user_id: uuid.UUID) -> None:
    head = _sealed_world(engine, tenant, user_id)
    forged = {
        "occurred_at": datetime.now(timezone.utc),
        "txid": 1,
        "db_role": "postgres",
        "action": "delete",
        "object_type": "document",
        "object_id": uuid.uuid4(),
        "seq": head + 1,
        "hash": bytes(32),
    }
    _tamper(engine, tenant, sa.insert(_e).values(forged))

    report = verify_audit_trail(engine, tenant)
    assert (report.intact, report.broken_at, report.checked) == (False, head + 1, head)


TRUNCATE = sa.text("TRUNCATE")


def truncate(schema: str) -> psycopg.sql.Composed:
    return psycopg.sql.SQL("TRUNCATE {}.audit_events").format(psycopg.sql.Identifier(schema))


def _assert_refused(engine: Engine, tenant: str, statement: sa.Executable) -> None:
    with pytest.raises(DBAPIError) as refused:
        _run(engine, tenant, statement)
    assert getattr(refused.value.orig, "sqlstate", None) == "23M05", statement


def _run(engine: Engine, tenant: str, statement: sa.Executable) -> None:
    with engine.begin() as conn:
        routed = tenancy.route(conn, tenant)
        if statement is TRUNCATE:
            execute_ddl(routed, truncate(tenancy.schema_name(tenant)))
        else:
            routed.execute(statement)


def test_the_applications_role_cannot_change_or_delete_events(
    engine: Engine, tenant: str, user_id: uuid.UUID
) -> None:
    head = _sealed_world(engine, tenant, user_id)
    refusals: list[sa.Executable] = [
        sa.update(_e).where(_e.c.seq == 1).values(action="update"),
        sa.update(_e).where(_e.c.seq.is_(None)).values(after=None),
        sa.update(_e).where(_e.c.seq == 1).values(seq=None, hash=None),
        sa.delete(_e).where(_e.c.seq == head),
        TRUNCATE,
    ]
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        uow.tags.add(name="unsealed")
        uow.commit()
    for statement in refusals:
        _assert_refused(engine, tenant, statement)

    assert verify_audit_trail(engine, tenant).intact


def test_an_inserted_event_is_stamped_by_the_database(
    engine: Engine, tenant: str, user_id: uuid.UUID
) -> None:
    mark = _mark(engine, tenant)
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        uow.connection.execute(
            sa.insert(_e).values(
                occurred_at=datetime(2001, 1, 1, tzinfo=timezone.utc),
                txid=1,
                actor_system="someone-else",
                db_role="nobody",
                action="read",
                object_type="revision",
                seq=1,
                hash=bytes(32),
            )
        )
        uow.commit()

    (event,) = _events_after(engine, tenant, mark)
    assert (event.actor_id, event.actor_system, event.seq) == (user_id, None, None)
    assert event.occurred_at.year > 2001
    assert event.db_role != "nobody"
    assert verify_audit_trail(engine, tenant).intact


def test_pruning_keeps_what_remains_verifiable(
    engine: Engine, tenant: str, user_id: uuid.UUID
) -> None:
    head = _sealed_world(engine, tenant, user_id)
    with UnitOfWork(engine, tenant=tenant) as uow:
        cut = uow.audit.events(limit=1).items[0].occurred_at
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        uow.tags.add(name="after the cut")
        uow.commit()

    dry = prune_audit_trail(engine, tenant, before=cut, dry_run=True)
    done = prune_audit_trail(engine, tenant, before=cut)
    again = prune_audit_trail(engine, tenant, before=cut)
    report = verify_audit_trail(engine, tenant)

    assert (dry.pruned, dry.through, dry.dry_run) == (done.pruned, done.through, True)
    assert done.through is not None
    assert 0 < done.through < head
    assert done.pruned == done.through
    assert (again.pruned, again.through) == (0, None)
    assert (report.intact, report.starts_after) == (True, done.through)
    assert report.checked == report.head - done.through
    with UnitOfWork(engine, tenant=tenant) as uow:
        left = uow.audit.events(limit=1000).items
    _assert_refused(engine, tenant, sa.update(t.audit_checkpoints).values(pruned=0))
    _assert_refused(engine, tenant, sa.delete(t.audit_checkpoints))
    assert left
    assert all(e.occurred_at >= cut for e in left)


def test_export_writes_every_event_in_range_as_json_lines(
    engine: Engine, tenant: str, user_id: uuid.UUID
) -> None:
    _sealed_world(engine, tenant, user_id)
    out = io.StringIO()
    written = export_audit_trail(engine, tenant, out)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    with UnitOfWork(engine, tenant=tenant) as uow:
        newest = uow.audit.events(limit=1).items[0]
    since = io.StringIO()
    export_audit_trail(engine, tenant, since, since=newest.occurred_at)

    assert written == len(lines) > 0
    assert [line["seq"] for line in lines] == list(range(1, written + 1))
    assert all(len(line["hash"]) == 64 for line in lines)
    assert (lines[0]["object_type"], lines[0]["actor_id"]) == ("tag", str(user_id))
    assert [json.loads(line)["id"] for line in since.getvalue().splitlines()] == [str(newest.id)]


def test_reads_are_recorded_when_the_tenant_asks(
    engine: Engine, tenant: str, user_id: uuid.UUID, tmp_path: Any
) -> None:
    world = _world(engine, tenant, user_id)  # in a tenant of its own: it reads every event
    store = LocalBlobStore(tmp_path)
    with UnitOfWork(engine, tenant=tenant) as uow:
        revision = uow.revisions.get(world.revision)
    store.put(revision.storage_key, b"march")
    mark = _mark(engine, tenant)
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        assert read_revision_content(uow, store, world.revision) == b"march"
        uow.commit()
    unrecorded = _events_after(engine, tenant, mark)
    with UnitOfWork(engine, tenant=tenant, system="operator") as uow:
        uow.audit.set_record_reads(True)
        uow.commit()
    mark = _mark(engine, tenant)  # after the setting's own event
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        read_revision_content(uow, store, world.revision)
        with pytest.raises(NotFound):
            read_revision_content(uow, store, uuid.uuid4())
        uow.commit()

    (read,) = _events_after(engine, tenant, mark)
    assert unrecorded == []
    assert (read.action, read.object_type, read.object_id) == ("read", "revision", world.revision)
    assert (read.document_id, read.actor_id) == (world.document, user_id)
    assert read.after == {"revision_no": 1, "sha256": revision.sha256}


def test_concurrent_writers_of_one_tenant_leave_an_intact_chain(
    engine: Engine, tenant: str, user_id: uuid.UUID
) -> None:
    writers, units = 8, 15
    errors: list[BaseException] = []
    stop = threading.Event()

    def write(n: int) -> None:
        try:
            for i in range(units):
                with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
                    doc = uow.documents.add(title=f"w{n}-{i}.pdf")
                    uow.tags.link([doc.id], [uow.tags.add(name=f"w{n}-{i}").id])
                    uow.commit()
        except BaseException as exc:
            errors.append(exc)

    def seal() -> None:
        try:
            while not stop.is_set():
                seal_audit_trail(engine, tenant)
        except BaseException as exc:
            errors.append(exc)

    sealers = [threading.Thread(target=seal) for _ in range(2)]
    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for thread in (*sealers, *threads):
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    stop.set()
    for thread in sealers:
        thread.join(timeout=60)

    report = verify_audit_trail(engine, tenant)
    assert errors == []
    # Each unit: a document, a tag, a link set.
    assert (report.intact, report.head, report.unsealed) == (True, writers * units * 3, 0)


def test_sealing_an_unknown_tenant_is_refused(engine: Engine) -> None:
    with pytest.raises(TenantNotFound):
        seal_audit_trail(engine, "no_such_tenant")


def test_the_actor_ends_with_its_transaction_on_a_pooled_connection(
    database_url: Any, shared_tenant: str, user_id: uuid.UUID
) -> None:
    one = sa.create_engine(database_url, pool_size=1, max_overflow=0)
    try:
        with UnitOfWork(one, tenant=shared_tenant, user_id=user_id, context={"r": "1"}) as uow:
            during = uow.connection.execute(
                sa.select(sa.func.current_setting("dms.actor", True))
            ).scalar_one()
            uow.commit()
        with one.connect() as conn:  # the same server session, next transaction
            after = conn.execute(
                sa.select(
                    sa.func.current_setting("dms.actor", True),
                    sa.func.current_setting("dms.context", True),
                )
            ).one()
    finally:
        one.dispose()

    assert during == str(user_id)
    assert tuple(after) in {("", ""), (None, None)}
